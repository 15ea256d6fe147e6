"""tryout11 #3: pure float64 code is not said to compute in float32 inside (a label a verify_* run keeps for every
later case, comparing them at float32 precision: 4000x looser).

The user's LogDetGram (Cholesky of M M^T + I, then log) at M = 6.5e-7 (a draw of seed 0): 1 + M^2 rounds at ulps of
1, so log det = M^2 = 4.2e-13 moves in steps of 2.2e-16 (5e-4 of itself) -- a float64 staircase, truly coarse.
Its steps are ~1e4 x wider than float32 rounding of an input of 6.5e-7 could make (that rounding moves M by
half a float32 ulp of M, 2.8e-14, so the output by 2 M x 2.8e-14 = 4e-20; float32 rounding of the output itself:
eps32 x 4.2e-13 = 5e-20), and inside float32 cells they did not show only because each step is 3000 float32
cells of M wide.  Before, the probe named it "computes in float32 inside" and the run remembered it.  Now such a
case is said to resolve its inputs more coarsely (true, and not remembered); real float32 inside code at small
inputs keeps its label."""

from __future__ import annotations

import numpy as np
import pytest

import gradspec as gs
from gradspec._private.float32_line import describe
from gradspec.oracles import fd
from tests import _float32_hidden as H
from tests import _tryout11_float64code as T

F32 = "computes in float32 inside"
_APPLY: dict = {}


def _fn_case(fn, x):
    import torch

    from gradspec.verify.torch_function import _torch_fn_name

    apply = _APPLY.setdefault(fn, fn.apply)  # (one bound method: the op is registered under it)
    gs.verify_torch_function(apply, arity=1, max_examples=1, seed=0, dtypes=("float64",), example_inputs=(torch.tensor(x, dtype=torch.float64),))
    return gs.Case.build({"x0": np.asarray(x, dtype=np.float64)}, [("v0", _torch_fn_name(apply), ["x0"], {})], ["v0"], None)


def _fd_reason(case) -> str:
    try:
        res = fd.fd_gradient(case)
    except gs.oracles.OracleError as e:
        return str(e)
    return describe(res.float32_inside, res.float32_why) if res.float32_inside else ""


def test_logdet_at_a_tiny_input_is_float64_code_resolving_coarsely():
    reason = _fd_reason(_fn_case(T.LogDetGram, [[6.48035373e-07]]))
    assert F32 not in reason, reason
    assert "more coarsely than float64" in reason, reason  # the staircase is real: said as what it is


@pytest.mark.parametrize("x", [[1e-3], [2e-4, -5e-4, 1e-3]], ids=["x=1e-3", "vector"])
def test_float32_hidden_inside_at_small_inputs_keeps_its_label(x):
    case = gs.Case.build({"x": np.asarray(x)}, [("y", H.np_hidden_tanh.name, ["x"], {}), ("z", "sum", ["y"], {})], ["z"], None)
    assert F32 in _fd_reason(case)


def test_a_1e6_bug_is_still_found_after_the_coarse_case():
    # The label a verify_* run remembered (float32_line.learning) judged every later case at float32 precision: a
    # backward wrong by 1e-6 relative, found at a well-conditioned M, then read "agree".
    from gradspec._private.float32_line import learning

    tiny = _fn_case(T.LogDetGram1e6, [[6.48035373e-07]])
    M = np.array([[0.3, -1.2, 0.5], [0.8, 0.1, -0.4], [1.1, 0.6, 0.9]])
    normal = gs.Case.build({"x0": M}, [("v0", tiny.nodes[0].op, ["x0"], {})], ["v0"], None)
    with learning():
        gs.check(tiny)  # (at 4.2e-13 no oracle can resolve a 1e-6 error: whatever it says)
        v = gs.check(normal)
    assert v.status == "disagree", v.summary()
    assert not [n for n in v.notes if F32 in str(n)], v.notes
