"""A backward of x = solve(A, b) (or Y = inv(A)) that uses A where A^T is needed is named as such.

Before: the planted wrong backwards below were diagnosed ``wrong-vjp`` "it differs from J^T·g on 3 of 3 elements,
with no simple pattern".  Now ``vjp_patterns.transposed`` tries, for every input whose Jacobian block is square, the
hypothesis "its gradient is J·g, not J^T·g, and the other inputs' follow from that adjoint", exactly (given J).
The right backwards agree: nothing is named.
"""

from __future__ import annotations

import pytest

import gradspec as gs
from tests import _planted_real as P
from tests import _transposed_solve as S

_A, _B = S.well_conditioned()
# (id, fn, verify_torch_function keywords, wrong?)
ROWS = [
    ("solve-A-for-A^T", S.SolveNoTranspose.apply, {"example_inputs": (_A, _B)}, True),
    ("solve-right", S.Solve.apply, {"example_inputs": (_A, _B)}, False),
    ("inv-A-for-A^T", S.InvNoTranspose.apply, {"example_inputs": (_A,)}, True),
    ("inv-right", S.Inv.apply, {"example_inputs": (_A,)}, False),
    ("illsolve-cond1e5-A-for-A^T", P.IllSolveNoTranspose.apply, {"signature": "(n),(n)->(n)"}, True),
    ("illsolve-cond1e5-right", P.IllSolve.apply, {"signature": "(n),(n)->(n)"}, False),
]


@pytest.mark.parametrize("fn, kw, wrong", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_a_solve_with_A_where_A_transposed_is_needed_is_named(fn, kw, wrong):
    r = gs.verify_torch_function(fn, max_examples=12, seed=1, dtypes=("float64",), **kw)
    if not wrong:
        assert r.status == "agree", str(r)
        return
    assert r.status == "disagree", str(r)
    causes = [d.cause for d in r.discrepancies if d.kind != "timeout"]
    assert causes and all(c.id == "wrong-vjp" for c in causes), [(c.id, c.summary) for c in causes]
    assert any("uses A where A^T is needed" in c.summary for c in causes), [c.summary for c in causes]
