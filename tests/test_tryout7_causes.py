"""tryout7 findings 9 and 10: a correct iterative forward (a fixed point stopped at |dz| < 1e-6) whose vjp is the
exact implicit derivative differs from the forward's own slope by the solver's tolerance.  The cause used to point
at the formula only ("find the small relative error in the formula"); it must also name the iteration and say how
to declare its accuracy (rtol=).  The op is in tests/_tryout7_reach_code.py; the x values come from tryout7's runs
(x = 1e-3: `gradspec fuzz --ops np_deq:deq --rtol 1e-5 --seed 5`'s shrunk case), never from gradspec's output."""

from __future__ import annotations

import numpy as np
import pytest

import gradspec as gs
from gradspec.report_cause import fix_direction
from tests import _tryout7_reach_code as T

CASES = {
    # id: (x, seed, declared rtol or None)
    "one-element-default-tolerance": (0.3, None, None),
    "one-element-near-0-rtol-declared": (1e-3, None, 1e-5),
}


@pytest.mark.parametrize("x, seed, rtol", CASES.values(), ids=list(CASES))
def test_a_solver_tolerance_mismatch_names_the_iteration_and_rtol(x, seed, rtol):
    case = gs.Case.build({"x0": np.array(x)}, [("v0", T.deq.name, ["x0"], {})], ["v0"], [seed])
    if rtol is not None:
        case.meta["accuracy"] = {"rtol": rtol, "atol": 0.0}
    v = gs.check(case)
    assert v.status == "disagree", str(v)  # a true mismatch between the vjp and the forward's own slope
    causes = [d.cause for d in v.discrepancies if d.cause is not None]
    assert causes, [d.message for d in v.discrepancies]
    for c in causes:
        text = c.summary + " " + fix_direction(c)
        assert "rtol=" in text and "iterat" in text, text
        assert "forward" in text, text  # the forward's convergence is named, not the formula alone


def test_explain_prints_a_small_error_estimate_as_the_number_it_is():
    # tryout7 #13d: the FD-JVP error estimate (~1e-11 here: an estimate's error, never exactly 0 for sin(x) x) was
    # printed "[0., 0., 0.]" by numpy's suppress=True, and a later line of the same text gave 3.97e-12
    import re

    e = gs.explain(gs.Case.build({"x": np.array([0.3, -1.2, 2.0])}, [("y", T.smooth_nojvp.name, ["x"], {})], ["y"],
                                 [np.array([1.0, -0.5, 0.7])]))
    line = next(s for s in str(e).splitlines() if "error estimate =" in s)
    numbers = [float(v) for v in re.findall(r"[-+]?\d[\d.]*(?:e[-+]?\d+)?", line.split("=", 1)[1])]
    assert len(numbers) == 3 and all(v > 0 for v in numbers), line


def test_explain_of_an_expression_imports_the_allowed_module(tmp_path, monkeypatch, capsys):
    # tryout7 #13e: `gradspec explain "t7_lse(x)" --allow-import np_ops` said "unknown op": the module was
    # imported only for case files.  A fresh module (never imported in this process) defines the op.
    from gradspec import cli

    (tmp_path / "t7r_fresh_ops.py").write_text(
        "import numpy as np, gradspec as gs\n"
        "cube = gs.Op('t7r_fresh_cube', forward=lambda x: x ** 3, vjp=lambda g, x, out: (3 * x * x * g,))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code = cli.main(["explain", "t7r_fresh_cube(x)", "--allow-import", "t7r_fresh_ops", "--x", "[2.0]"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "x.grad = [12.]" in out.out, out.out  # 3 x^2 at x = 2
