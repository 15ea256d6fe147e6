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


SOLVE_SHAPES = {
    # id: (A's shape, b's shape) -- tryout7 #13c: the batched A with a broadcast b was "no simple pattern"
    "unbatched": ((3, 3), (3,)),
    "both-batched": ((2, 3, 3), (2, 3)),
    "A-batched-b-broadcast": ((2, 3, 3), (3,)),
}


@pytest.mark.parametrize("a_shape, b_shape", SOLVE_SHAPES.values(), ids=list(SOLVE_SHAPES))
def test_a_transposed_solve_is_named_batched_or_not(a_shape, b_shape):
    from gradspec.verify.torch_function import _torch_fn_name

    apply = _SOLVE.setdefault("apply", T.SolveBugA.apply)  # (one bound method: the op is registered under it)
    gs.verify_torch_function(apply, signature="(n,n),(n)->(n)", max_examples=1, seed=0, dtypes=("float64",))
    rng = np.random.default_rng(0)
    a = rng.normal(size=a_shape) + 3 * np.eye(3)  # well conditioned: a wrong answer is the code's, not rounding
    b = rng.normal(size=b_shape)
    out = np.broadcast_shapes(a_shape[:-1], b_shape)
    case = gs.Case.build({"x0": a, "x1": b}, [("y", _torch_fn_name(apply), ["x0", "x1"], {})], ["y"],
                         [rng.normal(size=out)])
    v = gs.check(case)
    causes = [d.cause.summary for d in v.discrepancies if d.cause is not None]
    assert causes and all("A where A^T" in c for c in causes), causes


_SOLVE: dict = {}


def test_a_bias_gradient_summed_over_the_wrong_axis_is_named_when_its_shape_is_wrong_too():
    # AddBiasWrongAxis's backward returns g.sum(1) for a bias broadcast over axis 0; with one row (output (1, 4)) that
    # is shape (1,) where (4,) belongs, and the cause said only "comes back in shape (1,)".  (The values: g's own.)
    from gradspec._private.vjp_patterns import shape_pattern

    g = np.array([[1.0, 2.0, 3.0, 4.5]])
    _, text = shape_pattern(["x0", "x1"], [g, g.sum(1)], [g, g.sum(0)], reducible=True, out_shape=(1, 4), g=g)
    assert "axis 1" in text and "g.sum(0)" in text, text
