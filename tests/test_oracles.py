"""Oracles and the comparison: exact JSON round trip, each oracle against known gradients,
refusal near kinks, planted bugs caught by every independent oracle, CUDA availability."""

from __future__ import annotations

import importlib
import itertools
import json

import numpy as np
import pytest

import gradspec as gs
from tests._mutants import MUTANT_VJPS, planted

RNG = np.random.default_rng(1234)


def _case(leaves, nodes, roots, seeds=None, **kw):
    return gs.Case.build(leaves, nodes, roots, seeds, **kw)


# --- cases -----------------------------------------------------------------------------------


def test_case_json_round_trip_is_bit_exact():
    x = np.array([0.1, -0.0, 1e-300, np.nextafter(1.0, 2.0), 3.0])
    case = _case(
        {"x": x, "c": np.array([True, False, True, True, False]), "w": np.float32([1.5, 2.5, 3.5, 4.5, 5.5])},
        [("h", "where", ["c", "x", "w"], {}), ("y", "sum", ["h"], {"dim": [0], "keepdim": True})],
        ["y", "h"],
        [None, RNG.standard_normal(5)],
    )
    back = gs.Case.from_json(case.to_json())
    assert back == case
    for a, b in zip(case.leaves, back.leaves):
        assert a.value.dtype == b.value.dtype and a.value.tobytes() == b.value.tobytes()
        assert a.requires_grad == b.requires_grad
    assert back.seeds[0] is None and back.seeds[1].tobytes() == case.seeds[1].tobytes()
    assert back.nodes[1].params == {"dim": (-1,), "keepdim": True}


def test_case_json_keeps_nan_and_inf():
    case = _case({"x": np.array([np.nan, np.inf, -np.inf])}, [("y", "neg", ["x"], {})], ["y"], [np.ones(3)])
    back = gs.Case.from_json(case.to_json())
    assert np.array_equal(np.isnan(back.leaves[0].value), [True, False, False])
    assert back.leaves[0].value[1] == np.inf and back.leaves[0].value[2] == -np.inf


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("{not json", "invalid JSON"),
        ('{"format": "something-else/1"}', "not a gradspec case file"),
        ('[1, 2]', "not a gradspec case file"),
        ('{"format": "gradspec-case/1", "leaves": []}', "corrupt gradspec case file"),
    ],
    ids=["invalid-json", "foreign-format", "not-an-object", "missing-fields"],
)
def test_corrupt_case_files_get_a_clear_error(text, fragment):
    with pytest.raises(gs.CaseError, match=fragment):
        gs.Case.from_json(text)


def test_case_validation_names_the_problem():
    with pytest.raises(gs.CaseError, match="implicit seed needs numel == 1"):
        _case({"x": np.ones(3)}, [("y", "exp", ["x"], {})], ["y"])
    with pytest.raises(gs.CaseError, match=r"seed for root 'y' has shape \(2,\)"):
        _case({"x": np.ones(3)}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    with pytest.raises(gs.CaseError, match="does not accept input shapes"):
        _case({"x": np.ones(3), "w": np.ones(4)}, [("y", "mul", ["x", "w"], {})], ["y"], [np.ones(3)])
    with pytest.raises(gs.CaseError, match="no op named 'mull'"):
        _case({"x": np.ones(3)}, [("y", "mull", ["x", "x"], {})], ["y"], [np.ones(3)])


# --- each oracle against a gradient known in closed form --------------------------------------

ORACLES = ["reference", "finite-differences", "jacobian", "torch-cpu"]


@pytest.mark.parametrize("oracle", ORACLES)
def test_each_oracle_gives_the_closed_form_vjp(oracle):
    # y = sum_j x_j * w_j per row, with w broadcast: dy/dx = seed[:, None] * w, dy/dw = sum_i seed_i x_i
    x = RNG.standard_normal((3, 4))
    w = RNG.standard_normal(4)
    seed = RNG.standard_normal(3)
    case = _case({"x": x, "w": w}, [("h", "mul", ["x", "w"], {}), ("y", "sum", ["h"], {"dim": 1})], ["y"], [seed])
    got = gs.oracles.get(oracle).vjp(case)
    tol = 1e-8 if oracle == "finite-differences" else 1e-12
    np.testing.assert_allclose(got["x"], seed[:, None] * w, rtol=tol, atol=tol)
    np.testing.assert_allclose(got["w"], seed @ x, rtol=tol, atol=tol)


def test_multi_root_and_implicit_seed_are_summed_by_every_oracle():
    x = RNG.uniform(0.5, 2.0, 5)
    seed = RNG.standard_normal(5)
    case = _case({"x": x}, [("e", "exp", ["x"], {}), ("s", "sum", ["e"], {})], ["e", "s"], [seed, None])
    want = np.exp(x) * seed + np.exp(x)  # both roots' VJPs add up
    for name in ORACLES:
        np.testing.assert_allclose(gs.oracles.get(name).vjp(case)["x"], want, rtol=1e-8, err_msg=name)


def test_jacobian_oracle_keeps_J_and_it_is_the_dot_product_with_the_seed():
    x = np.array([1.0, 2.0, 3.0])
    a = RNG.standard_normal(3)
    seed = np.array([1.0, -2.0, 0.5])
    case = _case({"x": x, "a": a}, [("y", "mul", ["x", "a"], {})], ["y"], [seed], requires_grad={"a": False})
    J = gs.oracles.get("jacobian").jacobian(case)
    np.testing.assert_allclose(J.matrix, np.diag(a))
    np.testing.assert_allclose(J.vjp["x"], J.matrix.T @ seed)


def test_finite_differences_refuses_near_a_kink_and_says_why():
    # (amax: a kink of the whole reduction; gradspec's own elementwise kinked ops leave out the elements near theirs
    # and compare the others: tests/test_kink_builtin.py)
    case = _case({"x": np.array([1.0, 1.0 + 3e-9])}, [("y", "amax", ["x"], {"dim": (-1,), "keepdim": False})], ["y"],
                 [np.ones(())])
    v = gs.check(case, oracles=["reference", "finite-differences"])
    assert "finite-differences" in v.skipped
    assert "not differentiable" in v.skipped["finite-differences"] and "'y' (amax)" in v.skipped["finite-differences"]
    near = _case({"x": np.array([3e-9, 1.0])}, [("y", "abs", ["x"], {})], ["y"], [np.ones(2)])
    assert set(gs.check(near, oracles=["reference", "finite-differences"]).unjudged_elements["finite-differences"]) == {
        "x[0]"}
    # ...but not far from it
    far = _case({"x": np.array([0.5, 1.0])}, [("y", "abs", ["x"], {})], ["y"], [np.ones(2)])
    assert "finite-differences" not in gs.check(far, oracles=["reference", "finite-differences"]).skipped


def test_finite_differences_reach_accounts_for_amplification():
    # x = 1e-8 is 2e3 steps away from relu's kink in its own units, but x * 1e3 moves the
    # kink within reach of the perturbation (h * 1e3): the refusal must see the amplified reach.
    x = np.array([1e-8])
    case = _case({"x": x, "k": np.array([1e3])}, [("s", "mul", ["x", "k"], {}), ("y", "relu", ["s"], {})], ["y"],
                 [np.ones(1)], requires_grad={"k": False})
    v = gs.check(case, oracles=["reference", "finite-differences"])
    assert "finite-differences" in v.skipped, v.summary()


def test_torch_cuda_reports_unavailability_with_a_reason():
    import torch

    ok, why = gs.oracles.get("torch-cuda").available()
    assert ok == torch.cuda.is_available()
    if not ok:
        assert "cuda" in why.lower()
        v = gs.check(_case({"x": np.ones(2)}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)]))
        assert v.skipped["torch-cuda"] == why


@pytest.mark.cuda
def test_torch_cuda_oracle_agrees_with_cpu():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: torch.cuda.is_available() is False")
    x = RNG.standard_normal((3, 4))
    case = _case({"x": x}, [("y", "tanh", ["x"], {})], ["y"], [RNG.standard_normal((3, 4))])
    v = gs.check(case, oracles=["torch-cpu", "torch-cuda", "reference"])
    assert v.ok, v.summary()


def test_oracles_names_contract():
    assert {"reference", "finite-differences", "jacobian", "torch-cpu", "torch-cuda"} <= set(gs.oracles.names())
    with pytest.raises(KeyError, match="known oracles"):
        gs.oracles.get("nope")


# --- the comparison -----------------------------------------------------------------------------


def test_correct_case_agrees_and_every_pair_is_compared():
    x = RNG.uniform(0.5, 2.0, (2, 3))
    case = _case({"x": x, "w": RNG.standard_normal(3)}, [("a", "log", ["x"], {}), ("b", "mul", ["a", "w"], {}),
                                                        ("y", "sum", ["b"], {})], ["y"])
    v = gs.check(case)
    assert v.ok, v.summary()
    assert len(v.comparisons) == 6  # 4 CPU oracles -> 6 pairs
    assert all(c.max_ratio <= 1.0 for c in v.comparisons)


def _mutant_case(name):
    op = MUTANT_VJPS[name][0]
    x = RNG.uniform(0.5, 1.5, (3, 4))
    w = RNG.uniform(0.5, 1.5, (1, 4))
    seed = RNG.standard_normal((3, 4))
    if op in ("mul", "add"):
        return _case({"x": x, "w": w}, [("y", op, ["x", "w"], {})], ["y"], [seed])
    if op == "sum":
        return _case({"x": x}, [("y", "sum", ["x"], {"dim": 1})], ["y"], [seed[:, 0]])
    if op == "tanh":
        return _case({"x": x - 1.0}, [("y", "tanh", ["x"], {})], ["y"], [seed])
    return _case({"x": x}, [("y", op, ["x"], {})], ["y"], [seed])


@pytest.mark.parametrize("mutant", sorted(MUTANT_VJPS))
def test_planted_vjp_bug_is_reported_by_every_independent_oracle(mutant):
    op, bad = MUTANT_VJPS[mutant]
    case = _mutant_case(mutant)
    assert gs.check(case).ok  # the correct rule passes on this very case
    with planted(op, bad):
        v = gs.check(case)
    pairs = {tuple(sorted(d.oracles)) for d in v.discrepancies if d.kind == "value"}
    for other in ("finite-differences", "jacobian", "torch-cpu"):
        assert tuple(sorted(("reference", other))) in pairs, f"{other} missed {mutant}:\n{v.summary()}"
    # ...and the independent oracles still agree with each other
    assert not any("reference" not in d.oracles for d in v.discrepancies), v.summary()
    d = next(d for d in v.discrepancies if "reference" in d.oracles)
    assert d.leaf in ("x", "w") and d.index is not None and d.tolerance is not None and d.tolerance_why


def test_a_discrepancy_message_names_oracles_leaf_element_and_tolerance():
    case = _mutant_case("exp-relative-1e-6")
    with planted(*MUTANT_VJPS["exp-relative-1e-6"]):
        v = gs.check(case, oracles=["reference", "torch-cpu"])
    (d,) = v.discrepancies
    assert d.message.startswith("reference vs torch-cpu: leaf 'x'[")
    assert "rel err 1e-06" in d.message and "tolerance" in d.message
    assert json.loads(json.dumps(d.to_json()))["kind"] == "value"


def test_an_oracle_that_raises_is_a_discrepancy_not_a_crash():
    def broken(g, x, *, out):
        raise ZeroDivisionError("boom")

    case = _mutant_case("exp-relative-1e-6")
    with planted("exp", broken):
        v = gs.check(case, oracles=["reference", "torch-cpu", "jacobian"])
    (d,) = v.discrepancies
    assert d.kind == "raised" and "reference raised ZeroDivisionError: boom" in d.message and "Traceback" in d.traceback
    assert "torch-cpu" in v.results and "jacobian" in v.results  # nothing already computed is lost
    # the reference oracle ran its ops under one errstate (engine._quiet_fp); the raise must end that
    # too, or every later engine op would skip its own errstate
    assert importlib.import_module("gradspec.engine")._FP_QUIET is False


def test_large_cases_use_directional_finite_differences_and_still_catch_bugs(monkeypatch):
    fd = gs.oracles.get("finite-differences")
    monkeypatch.setattr(fd, "full_limit", 10)  # force directional mode on a 12-element case
    case = _mutant_case("mul-wrong-sign")
    v = gs.check(case, oracles=["reference", "finite-differences", "torch-cpu"])
    assert v.ok and ("finite-differences", "reference") in [c.oracles for c in v.comparisons], v.summary()
    with planted(*MUTANT_VJPS["mul-wrong-sign"]):
        bad = gs.check(case, oracles=["reference", "finite-differences", "torch-cpu"])
    assert ("finite-differences", "reference") in [d.oracles for d in bad.discrepancies], bad.summary()
    assert "(directional)" in bad.discrepancies[0].message or any("(directional)" in d.message for d in bad.discrepancies)


# --- the vectorised comparison is the leaf-by-leaf comparison, faster ----------------------------

CPU_ORACLES = ["reference", "finite-differences", "jacobian", "torch-cpu"]


def _tampered(results, how, rng):
    """A copy of ``results`` with torch-cpu's gradients changed as ``how`` says."""
    out = {k: dict(v) for k, v in results.items()}
    t = out["torch-cpu"]
    name = next((n for n, g in t.items() if g is not None and np.size(g)), None)
    if name is None:
        return out
    g = np.array(t[name], dtype=np.float64)
    flat = g.reshape(-1)
    j = int(rng.integers(flat.size))
    if how.startswith("relative"):  # relative to the leaf's scale, the unit of the tolerance
        flat[j] += float(how.split()[1]) * np.abs(flat).max()
    elif how == "nan":
        flat[j] = np.nan
    elif how == "none":
        g = None
    elif how == "shape":
        g = g.reshape(-1)[None]
    t[name] = g
    return out


@pytest.mark.parametrize("how", ["untouched", "relative 1e-14", "relative 1e-9", "relative 1e-6", "nan", "none", "shape"])
def test_vectorised_pair_comparison_agrees_with_the_leaf_by_leaf_one(how):
    from gradspec import tolerances as tol
    from gradspec._private.sampling import sample

    C = importlib.import_module("gradspec.check")  # the module: gs.check is the function
    rng = np.random.default_rng(5)
    outcomes = set()
    for case in sample(gs.strategies.cases(), 40, seed=3):
        v = gs.check(case, oracles=CPU_ORACLES)
        if set(v.results) != set(CPU_ORACLES):
            continue
        results = _tampered(v.results, how, rng)
        kinds = {n: gs.oracles.get(n) for n in results}
        M = None if v.jacobian is None else C._per_leaf(C._path_scale(v.jacobian), case.grad_leaves())
        fd_errs = {"finite-differences": v.fd_error}
        names = list(results)
        dtype = C._case_dtype(case)
        fast = C._fast_pairs(case, case.grad_leaves(), names, results, kinds, dtype, M, fd_errs, None)
        for a, b in itertools.combinations(names, 2):
            t = tol.lookup(dtype, kinds[a].kind, kinds[b].kind)
            comp, _found = C._compare(case, a, b, results[a], results[b], kinds, t, M, fd_errs)
            outcomes.add(comp.agreed)
            if (a, b) in fast:
                assert comp.agreed, (how, a, b, case.to_text())
                # same formula, different order of float operations: a few ulps apart, far inside 1e-9
                assert fast[(a, b)] == pytest.approx(comp.max_ratio, rel=1e-9, abs=1e-300)
            else:
                assert not comp.agreed or how in ("nan", "none"), (how, a, b, case.to_text())
    # the table of tamperings must exercise both outcomes where they are possible
    if how in ("untouched", "relative 1e-14"):
        assert outcomes == {True}
    elif how in ("relative 1e-6", "shape"):
        assert False in outcomes


# --- finite differences: the three evaluation layouts give the same estimate -------------------


@pytest.mark.parametrize("n", [3, 40, 400], ids=["inline", "inline-shape-checked", "chunked"])
def test_fd_layouts_agree_with_the_closed_form_and_each_other(n, monkeypatch):
    """Centre inside the batch (small n), inside after a shape check (mid n), separate with
    chunks (large n, or forced by a tiny batch cap): one estimate, within its own error bound."""
    from gradspec.oracles import fd

    rng = np.random.default_rng(n)
    x, w = rng.uniform(0.5, 1.5, n), rng.standard_normal(n)
    seed = rng.standard_normal(n)
    case = _case({"x": x, "w": w}, [("a", "mul", ["x", "w"], {}), ("y", "tanh", ["a"], {})], ["y"], [seed])
    exact = {"x": seed * w / np.cosh(x * w) ** 2, "w": seed * x / np.cosh(x * w) ** 2}
    results = [fd.fd_gradient(case)]
    monkeypatch.setattr(fd, "MAX_BATCH_ELEMENTS", 7 * n)  # forces the separate centre and several chunks
    results.append(fd.fd_gradient(case))
    # the stencil (3 points per element) and the centre; no noise line: gradspec's own ops only (fd's docstring)
    assert results[1].evaluations == results[0].evaluations == 3 * 2 * n + 1
    for res in results:
        for k in exact:
            # FD's own error bound, plus the closed form's rounding (O(1) values, a few ops: ~1e-16 each)
            assert np.all(np.abs(res.grads[k] - exact[k]) <= res.error[k] + 1e-15), k
    for k in exact:
        assert np.all(np.abs(results[0].grads[k] - results[1].grads[k]) <= results[0].error[k] + results[1].error[k])


def test_fd_directional_in_chunks_gives_the_same_estimates(monkeypatch):
    """Directions evaluated a few per pass (large tensors) give the one-pass numbers.  Not bit for bit: BLAS
    sums the seed contraction of a differently shaped batch in another order, a rounding-level change of s
    that FD's own error estimate (its rounding term) covers."""
    from gradspec.oracles import fd

    rng = np.random.default_rng(11)
    x, w = rng.uniform(0.5, 1.5, 40), rng.standard_normal(40)
    case = _case({"x": x, "w": w}, [("a", "mul", ["x", "w"], {}), ("y", "tanh", ["a"], {})], ["y"], [rng.standard_normal(40)])
    dirs = {k: rng.standard_normal((16, 40)) / np.sqrt(80) for k in ("x", "w")}
    one = fd.fd_directional(case, dirs)
    monkeypatch.setattr(fd, "MAX_BATCH_ELEMENTS", 3 * 40 * 5)  # 5 directions per pass: 4 passes, the last short
    chunked = fd.fd_directional(case, dirs)
    assert np.all(np.abs(one[0] - chunked[0]) <= one[1])
    # the error estimate is |third difference| / 6h + 2.4 delta / h (delta: the rounding bound of s); a
    # rounding-level change of s moves the first term by at most (8/6) delta / h, i.e. < 0.56 of the estimate
    assert np.all(np.abs(chunked[1] - one[1]) <= 0.56 * one[1])
    exact = sum(dirs[k] @ g for k, g in (("x", case.seeds[0] * w / np.cosh(x * w) ** 2),
                                         ("w", case.seeds[0] * x / np.cosh(x * w) ** 2)))
    assert np.all(np.abs(one[0] - exact) <= one[1] + 1e-15)  # within FD's own error bound


@pytest.mark.parametrize("cap", [None, 1, 7], ids=["one-pass", "one-direction-per-pass", "uneven-blocks"])
def test_jacobian_in_direction_blocks_is_the_same_matrix(cap, monkeypatch):
    """Blocks of directions (large n) fill the same J, column for column, as one pass: blocks that
    straddle two leaves, a constant leaf, a root that is a leaf, two roots."""
    from gradspec.oracles import jacobian as jac_mod

    rng = np.random.default_rng(7)
    x, w, c = rng.uniform(0.5, 1.5, (2, 3)), rng.standard_normal(3), rng.standard_normal(3)
    case = _case({"x": x, "w": w, "c": c},
                 [("a", "mul", ["x", "w"], {}), ("b", "add", ["a", "c"], {}), ("y", "tanh", ["b"], {})],
                 ["y", "w"], [rng.standard_normal((2, 3)), rng.standard_normal(3)], requires_grad={"c": False})
    if cap is not None:
        # 6-element tensors: cap // 6 directions per pass, at least one
        monkeypatch.setattr(jac_mod, "MAX_TANGENT_ELEMENTS", cap * 6)
    J = jac_mod.jacobian(case).matrix
    # closed form: dy/dx = sech^2(b) * w (elementwise, x's 6 columns first), dy/dw = sech^2(b) * x summed
    # over broadcast (w's 3 columns); dw/dw = identity, dw/dx = 0
    sech2 = 1 / np.cosh(x * w + c) ** 2
    expect = np.zeros((9, 9))
    expect[:6, :6] = np.diag((sech2 * w).ravel())
    for i in range(2):
        for j in range(3):
            expect[i * 3 + j, 6 + j] = sech2[i, j] * x[i, j]
    expect[6:, 6:] = np.eye(3)
    # each entry is one product with tanh's derivative, 1 - tanh(b)^2 in the JVP vs 1/cosh(b)^2 here: both
    # within a few eps *absolute* of sech^2 (tanh^2 <= 1), times |w| or |x| = O(1): 1e-15 abs + 1e-15 rel
    np.testing.assert_allclose(J, expect, rtol=1e-15, atol=1e-15)


def test_jacobian_refuses_a_dense_matrix_over_its_limit_and_says_how_big(monkeypatch):
    """An outer-product root of a few thousand inputs would need a J of tens of GB: the oracle refuses
    with the sizes (check() lists it as skipped) and the other oracles still compare."""
    from gradspec.oracles import jacobian as jac_mod

    rng = np.random.default_rng(5)
    case = _case({"x": rng.standard_normal((6, 1)), "y": rng.standard_normal((1, 5))}, [("o", "mul", ["x", "y"], {})],
                 ["o"], [rng.standard_normal((6, 5))])
    monkeypatch.setattr(jac_mod, "MAX_DENSE_ELEMENTS", 30 * 11 - 1)  # J is 30 x 11
    v = gs.check(case, oracles=CPU_ORACLES)
    assert "jacobian" not in v.results
    assert "J would be 30 x 11 = 330 elements" in v.skipped["jacobian"] and "dense limit of 329" in v.skipped["jacobian"]
    assert v.ok and {c.oracles for c in v.comparisons} == {("reference", "finite-differences"), ("reference", "torch-cpu"),
                                                          ("finite-differences", "torch-cpu")}


def test_directional_fd_seeds_its_directions_from_the_case_content():
    """Same case (also after a JSON round trip): same directions; any value or seed changed: others."""
    check_mod = importlib.import_module("gradspec.check")
    rng = np.random.default_rng(3)
    case = _case({"x": rng.standard_normal(4)}, [("y", "tanh", ["x"], {})], ["y"], [rng.standard_normal(4)])
    other_value = _case({"x": case.leaves[0].value + 1e-12}, [("y", "tanh", ["x"], {})], ["y"], [case.seeds[0]])
    other_seed = _case({"x": case.leaves[0].value}, [("y", "tanh", ["x"], {})], ["y"], [case.seeds[0] * 2])
    digest = check_mod._digest(case)
    assert check_mod._digest(gs.Case.from_json(case.to_json())) == digest
    assert check_mod._digest(other_value) != digest and check_mod._digest(other_seed) != digest


def test_fd_with_only_empty_leaves_to_differentiate():
    """Found by a soak: an empty leaf next to an op with a domain edge (n = 0, only the centre)."""
    case = _case({"x0": np.array([[-0.19], [-0.99]]), "x1": np.zeros((0, 1))},
                 [("v0", "log1p", ["x0"], {}), ("v1", "gelu", ["x1"], {"approximate": "none"})], ["v1"], [np.zeros((0, 1))],
                 requires_grad={"x0": False, "x1": True})
    v = gs.check(case, oracles=CPU_ORACLES)
    assert v.ok, v.summary()
    assert v.results["finite-differences"]["x1"].shape == (0, 1)


# --- the allocator settings the array-heavy oracles apply (gradspec._private.memory) -------------


MMAP, TRIM = "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"


@pytest.mark.parametrize(
    "environ, libc, ok, asked, applied",
    [
        ({}, "glibc", 1, {MMAP, TRIM}, {MMAP, TRIM}),
        ({TRIM: "0"}, "glibc", 1, {MMAP}, {MMAP}),
        ({MMAP: "1", TRIM: "1"}, "glibc", 1, set(), set()),
        ({"GRADSPEC_MALLOC": "default"}, "glibc", 1, set(), set()),
        ({}, "", 1, set(), set()),
        ({}, "glibc", 0, {MMAP, TRIM}, set()),
    ],
    ids=["defaults", "user-trim-kept", "user-both-kept", "opted-out", "not-glibc", "mallopt-refuses"],
)
def test_malloc_tuning_respects_the_user_and_the_platform(environ, libc, ok, asked, applied):
    from gradspec._private import memory

    calls = []
    done = memory.tune_malloc(environ, lambda param, value: calls.append((param, value)) or ok, libc)
    assert set(done) == applied
    params = {MMAP: (memory.M_MMAP_THRESHOLD, memory.MMAP), TRIM: (memory.M_TRIM_THRESHOLD, memory.TRIM)}
    assert sorted(calls) == sorted(params[k] for k in asked)  # glibc's parameter numbers, our values


def test_malloc_tuning_is_applied_by_the_first_oracle_call_and_can_be_opted_out():
    import platform
    import subprocess
    import sys

    script = ("import numpy as np, gradspec as gs\nfrom gradspec._private import memory\nassert memory._applied is None\n"
              "gs.check(gs.Case.build({'x': np.ones(3)}, [('y', 'sum', ['x'], {})], ['y']))\nprint(sorted(memory._applied))")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MALLOC_") and k != "GRADSPEC_MALLOC"}
    got = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout.strip()
    opted = subprocess.run([sys.executable, "-c", script], env={**env, "GRADSPEC_MALLOC": "default"},
                           capture_output=True, text=True, check=True).stdout.strip()
    assert opted == "[]"
    if platform.libc_ver()[0] == "glibc":
        assert got == "['MALLOC_MMAP_THRESHOLD_', 'MALLOC_TRIM_THRESHOLD_']"
    else:
        assert got == "[]"


# -- exact ties and kinks: only the exact oracles compare, on torch's convention ------------------

_TIES = [
    # id, leaves, node (name, op, inputs, params), expected exact-kink list
    ("relu-at-0", {"x": [0.0, 2.0]}, ("y", "relu", ["x"], {}), ["y = relu(x)"]),
    ("abs-at-0", {"x": [-1.5, 0.0]}, ("y", "abs", ["x"], {}), ["y = abs(x)"]),
    ("maximum-tie", {"a": [1.0, 2.0], "b": [1.0, -3.0]}, ("y", "maximum", ["a", "b"], {}), ["y = maximum(a, b)"]),
    ("amax-tie", {"x": [[2.0, 2.0, 1.0]]}, ("y", "amax", ["x"], {"dim": (-1,), "keepdim": False}), ["y = amax(x)"]),
    ("clamp-at-bound", {"x": [0.5, 3.0]}, ("y", "clamp", ["x"], {"min": 0.5, "max": None}), ["y = clamp(x)"]),
    ("float32-relu-at-0", {"x": np.array([0.0, -2.0], dtype=np.float32)}, ("y", "relu", ["x"], {}), ["y = relu(x)"]),
    ("clear-of-kinks", {"a": [1.0, 2.0], "b": [1.5, -3.0]}, ("y", "maximum", ["a", "b"], {}), []),
]


@pytest.mark.parametrize("leaves, node, expected", [t[1:] for t in _TIES], ids=[t[0] for t in _TIES])
def test_exact_ties_and_kinks_compare_reference_and_torch_only(leaves, node, expected):
    from gradspec._private.kinks import EXCLUDED, exact_kinks
    from gradspec.oracles import _fd_kinkpos as _kinkpos

    vals = {k: np.asarray(v, dtype=getattr(v, "dtype", np.float64)) for k, v in leaves.items()}
    out = gs.ops.get(node[1]).forward(*(vals[i] for i in node[2]), **node[3])
    seed = np.arange(1.0, 1.0 + np.size(out)).reshape(np.shape(out))  # not ones: splits show in the values
    case = gs.Case.build(vals, [node], ["y"], [seed])
    assert exact_kinks(case) == expected
    v = gs.check(case, oracles=["reference", "finite-differences", "jacobian", "torch-cpu"])
    excluded = {k for k, why in v.skipped.items() if EXCLUDED in why}
    # (finite differences step aside for the whole case only at kinks of ops other than gradspec's own elementwise
    # kinked ops: at those they leave out the elements that move the kinked position, oracles/_fd_kinkpos.py)
    own = node[1] in _kinkpos.OPS
    assert excluded == (({"jacobian"} if own else {"finite-differences", "jacobian"}) if expected else set()), v.skipped
    assert v.ok and any(set(c.oracles) == {"reference", "torch-cpu"} for c in v.comparisons), v.summary()
