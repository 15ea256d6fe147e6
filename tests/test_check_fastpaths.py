"""gs.check's shortcuts answer exactly as the general code they stand in for (issue 15: check's own cost).

The Python-float comparison of tiny cases (``pairs._small_pairs``) against the vectorised one, bit for bit;
``outcome.nothing_finite``'s Python-sum test against its numpy test; the kink test's cached domain points.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import gradspec as gs
from gradspec import outcome
from gradspec._private import kinks, pairs
from gradspec._private.sampling import sample

CPU_ORACLES = ["reference", "finite-differences", "jacobian", "torch-cpu"]


def _inputs(case, v):
    """_fast_pairs' arguments as check computes them, the FD error bound read in full."""
    C = importlib.import_module("gradspec.check")  # the module: gs.check is the function
    kinds = {n: gs.oracles.get(n) for n in v.results}
    M = None if v.jacobian is None else C._path_scale(v.jacobian)
    fd = {"finite-differences": dict(v.fd_error)} if v.fd_error is not None else {}
    return case.grad_leaves(), list(v.results), kinds, C._case_dtype(case), M, fd


@pytest.mark.parametrize("scale", [0.0, 1e-13, 1e-9], ids=["as-computed", "1e-13", "1e-9"])
def test_small_pairs_are_the_vectorised_comparison_bit_for_bit(scale, monkeypatch):
    """On tiny cases (a one-element leaf among them) every pair's ratio from the Python-float path equals the
    numpy path's to the last bit, with torch's gradient moved by ``scale`` of its size (ratios that are not 0)."""
    rng = np.random.default_rng(7)
    compared = 0
    for case in sample(gs.strategies.cases(max_nodes=3, max_leaves=2), 40, seed=11):
        v = gs.check(case, oracles=CPU_ORACLES)
        leaves, names, kinds, dtype, M, fd = _inputs(case, v)
        if len(names) < 2 or not 0 < case.n_inputs <= pairs.SMALL_PAIRS:
            continue
        results = {k: dict(r) for k, r in v.results.items()}
        for leaf, g in list(results.get("torch-cpu", {}).items()):
            if g is not None and g.size:
                results["torch-cpu"][leaf] = g + scale * np.abs(g).max() * rng.standard_normal(g.shape)
        small = pairs._fast_pairs(case, leaves, names, results, kinds, dtype, M, fd, None)
        monkeypatch.setattr(pairs, "SMALL_PAIRS", 0)  # the numpy path
        wide = pairs._fast_pairs(case, leaves, names, results, kinds, dtype, M, fd, None)
        monkeypatch.undo()
        assert {p: repr(r) for p, r in small.items()} == {p: repr(r) for p, r in wide.items()}, case.to_text()
        compared += len(small)
    assert compared > 50


def test_small_pairs_take_a_negative_zero_gradient_as_zero():
    """A one-element leaf's scale is |g| (-0.0 there is 0.0: the scale enters r * s + floor only)."""
    case = gs.Case.build({"x": np.array([0.5])}, [("y", "mul", ["x", "x"], {})], ["y"], [np.array([1.0])])
    leaves = case.grad_leaves()
    kinds = {n: gs.oracles.get(n) for n in ("reference", "torch-cpu")}
    for g in (-0.0, 0.0, -1e-300):
        results = {"reference": {"x": np.array([g])}, "torch-cpu": {"x": np.array([0.0])}}
        small = pairs._fast_pairs(case, leaves, list(results), results, kinds, "float64", None, {}, None)
        assert small == {("reference", "torch-cpu"): pytest.approx(abs(g) / gs.tolerances.SUBNORMAL_FLOOR)
                         if g else 0.0}


@pytest.mark.parametrize("grads, judged", [
    ([[1.0, 2.0]], True),
    ([[np.nan, 2.0]], True),  # (the sum is NaN: numpy's test finds 2.0)
    ([[1e308, 1e308]], True),  # (the sum overflows: numpy's test finds them finite)
    ([[np.nan, np.inf], [np.nan]], False),
    ([[np.nan], [3.0]], True),
    ([np.zeros(40) + np.nan, [1.0]], True),  # (a large gradient first: numpy's test)
])
def test_nothing_finite_fast_test_answers_as_numpy_does(grads, judged):
    case = gs.Case.build({"x": np.array([np.nan, 1.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    results = {f"o{i}": {"x": np.asarray(g, dtype=np.float64)} for i, g in enumerate(grads)}
    assert (outcome.nothing_finite(case, results) == "") is judged


def test_kink_points_cached_per_dtype_and_points():
    """The same domain points cast for float32 and float64 are kept apart; points not in a tuple still work."""
    f32 = kinks._cast_points(np.dtype(np.float32), (0.1,))
    f64 = kinks._cast_points(np.dtype(np.float64), (0.1,))
    assert f32 == [float(np.float32(0.1))] and f64 == [0.1] and f32 != f64
    assert kinks._cast_points(np.dtype(np.float64), [0.5, 1.0]) == [0.5, 1.0]
    assert kinks._cast_points(np.dtype(np.float64), (np.inf,)) is None


def test_leaf_precisions_skip_the_flow_only_where_it_cannot_add_float32(monkeypatch):
    """Every differentiated leaf float32 already: the answer without following the graph (the flow only marks
    leaves float32).  A float64 differentiated leaf beside float32 data: the flow runs and marks it."""
    C = importlib.import_module("gradspec.check")
    x32, c64 = np.float32([0.5, 1.5]), np.array([2.0, 3.0])
    all32 = gs.Case.build({"x": x32, "c": c64}, [("y", "mul", ["x", "c"], {})], ["y"], [np.ones(2)],
                          requires_grad={"c": False})
    # (a 0-dim float64 beside a dimensioned float32 is computed in float32, as torch promotes: w's gradient too)
    mixed = gs.Case.build({"x": x32, "w": np.array(2.0)}, [("y", "mul", ["x", "w"], {})], ["y"], [np.ones(2)])
    assert C._leaf_precisions(mixed) == {"x": "float32", "w": "float32"}

    def boom(*a):
        raise AssertionError("the flow ran")

    monkeypatch.setattr(importlib.import_module("gradspec._check_precision"), "_precision_flow", boom)
    assert C._leaf_precisions(all32) == {"x": "float32"}
    with pytest.raises(AssertionError, match="the flow ran"):
        C._leaf_precisions(mixed)


def test_unpromoted_runs_the_forward_up_to_the_last_op_that_refuses(monkeypatch):
    """Only ops without type promotion refuse mixed dtypes: the engine forward stops after the last of them
    (the answer is the same: a later node could only end the run with None, which is also the answer when
    nothing refused), and a refusal before it is still found."""
    C = importlib.import_module("gradspec.check")
    from gradspec import engine

    x, w, k = np.ones((2, 3)), np.ones((3, 2)), np.ones((3, 2), dtype=np.float32)
    ran = []
    apply = engine.apply
    monkeypatch.setattr(engine, "apply", lambda spec, *a: ran.append(spec.name) or apply(spec, *a))
    ok = gs.Case.build({"x": x, "w": w, "k": k}, [("a", "exp", ["x"], {}), ("b", "mm", ["a", "w"], {}),
                                                 ("c", "tanh", ["b"], {}), ("d", "mul", ["c", "c"], {})],
                       ["d"], [np.ones((2, 2))])
    assert C.unpromoted(ok) is None and ran == ["exp", "mm"]
    ran.clear()
    bad = gs.Case.build({"x": x, "w": w, "k": k}, [("a", "mm", ["x", "w"], {}), ("b", "mm", ["x", "k"], {}),
                                                  ("c", "tanh", ["b"], {})], ["c"], [np.ones((2, 2))])
    assert "node 'b' = mm(x, k): torch refuses" in C.unpromoted(bad) and ran == ["mm", "mm"]


def test_n_inputs_is_kept_for_one_check_of_the_case_only():
    """``Case.n_inputs`` is asked by check and two oracles' applies(): kept in the check's per-case memo, never
    across checks (a leaf given another size between two checks of the same case object is counted afresh)."""
    from gradspec._private import percase

    case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    with percase.scope(case):
        assert case.n_inputs == 2 and percase.active(case)["n_inputs"] == 2
    case.leaves[0].value = np.array([0.5, 2.0, 3.0])
    case.seeds[0] = np.ones(3)
    assert case.n_inputs == 3
    v = gs.check(case, oracles=CPU_ORACLES)
    assert v.ok and v.results["reference"]["x"].shape == (3,)
    with percase.scope(case):
        assert case.n_inputs == 3
