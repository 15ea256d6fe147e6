"""The finite-difference oracle made faster (issue 15) gives the very estimates and refusals it gave
before: ``tests/_fd_reference.py`` keeps the old code verbatim, and every case below goes through
both.  Equality is exact (the same floats, the same exception and message): the fast paths do the
same float operations in the same order (Python floats where numpy's per-call cost dominated,
``max(b) - c`` for ``max |b - c|``, one fancy-indexed stencil), so any difference is a bug, not
rounding.

The cases: random graphs of ``gs.strategies.cases()`` (float64, float32, larger leaves for the
chunked layout), and the numerical families of ``tests/_planted_real.py`` where FD refines its
step, refuses, or finds a kink or a jump; the chunked layout is also forced on small cases.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import gradspec as gs
from gradspec._private import fdstep
from gradspec._private.sampling import sample
from gradspec.oracles import fd
from tests import _fd_reference as old
from tests import _planted_real as R

_step = gs.Op("t_fd_fast_step", forward=lambda x: x + (x > 0), vjp=lambda g, x, out: (g,))


def _one(op, leaves, seed):
    return gs.Case.build(leaves, [("y", op.name, list(leaves), {})], ["y"], [np.asarray(seed, dtype=float)])


def _numerical(rng, k):
    """Points where FD must refine, refuse, or classify a kink or a jump."""
    out = []
    for _ in range(k):
        n = int(rng.integers(2, 7))
        out.append(_one(R.np_illsolve_op, {"b": rng.standard_normal(n) * 10 ** rng.uniform(-2, 2)}, rng.standard_normal(n)))
        a = rng.uniform(-1000, 1000) * rng.choice([1.0, 1e-3])
        d = 10 ** rng.uniform(-9, 0) * rng.choice([-1.0, 1.0]) * max(1.0, abs(a)) ** 0.5
        out.append(_one(R.np_pole_op, {"x": np.array([a + d]), "a": np.array([a])}, [rng.standard_normal()]))
        n = int(rng.integers(2, 6))
        z = rng.integers(-3, 3, n).astype(float) if rng.uniform() < 0.5 else rng.standard_normal(n)
        out.append(_one(R.np_sparsemax_op, {"z": z}, rng.standard_normal(n)))
        x = rng.standard_normal(int(rng.integers(1, 5))) * rng.choice([1.0, 1e-7, 1e3])
        out.append(_one(_step, {"x": x}, rng.standard_normal(x.size)))
        w = rng.standard_normal(3) * 10 ** rng.uniform(0, 6)  # cos of a large intermediate: the step is refined
        out.append(gs.Case.build({"x": rng.standard_normal(3), "w": w},
                                 [("a", "mul", ["x", "w"], {}), ("y", "cos", ["a"], {})], ["y"], [rng.standard_normal(3)]))
    return out


@pytest.fixture(scope="module")
def corpus():
    cases = sample(gs.strategies.cases(), 160, 5)
    cases += sample(gs.strategies.cases(dtype="float32"), 40, 5)
    cases += sample(gs.strategies.cases(min_dims=2, min_side=4, max_side=12, max_elements=1000), 16, 5)
    return cases + _numerical(np.random.default_rng(5), 12)


def _outcome(module, case, **kw):
    try:
        got = module.fd_gradient(case, **kw)
    except Exception as e:  # noqa: BLE001 - the refusal itself is what is compared
        return (type(e).__name__, str(e))
    if getattr(got, "kinks", None):  # the old code refused the whole case at the first kinked element, with the same
        return ("NonDifferentiable", next(iter(got.kinks.values())))  # words (tests/test_kink_elements.py: the rest)
    return got


def _differences(a, b) -> list[str]:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return [] if a == b else [f"{a} vs {b}"]
    out = [f"evaluations {a.evaluations} vs {b.evaluations}"] if a.evaluations != b.evaluations else []
    for field in ("grads", "error", "steps"):
        x, y = getattr(a, field), getattr(b, field)
        if x.keys() != y.keys():
            out.append(f"{field}: leaves {sorted(x)} vs {sorted(y)}")
            continue
        for k in x:  # the same floats (equal_nan: a NaN estimate stays NaN)
            if x[k].shape != y[k].shape or x[k].dtype != y[k].dtype or not np.array_equal(x[k], y[k], equal_nan=True):
                out.append(f"{field}[{k}]: {x[k]} vs {y[k]}")
    return out


def _left_out_near_builtin_kink(a, b) -> bool:
    """The old code refused the whole case where an input of relu/leaky_relu/elu/abs/clamp/maximum/minimum was within reach of its
    kink; now the elements whose stencil moves such a position are left out (``oracles/_fd_kinkpos.py``)."""
    return (isinstance(a, tuple) and a[0] == "OracleError" and re.search(
        r"\((relu|leaky_relu|elu|abs|clamp|maximum|minimum)\) is .* not differentiable", a[1]) is not None
            and isinstance(b, tuple) and ("built-in kinked op" in b[1] or "maximum/minimum within 4x of its kink" in b[1]))


@pytest.fixture
def three_point(monkeypatch):
    """The 3-point stencil everywhere, as the old code: the 5-point estimate where the even part of s would leak into
    it (``_fd_even``, tryout10 F1) is a change of the estimate, not of its speed (tests/test_fd_even.py)."""
    monkeypatch.setattr(fd._even, "suspects", lambda *a, **k: np.empty(0, dtype=np.intp))


def test_fd_gives_the_same_estimates_and_refusals_as_before(corpus, three_point):
    kinds, mismatches = set(), []
    for i, case in enumerate(corpus):
        for kw in ({}, {"check_reach": False}):
            a, b = _outcome(old, case, **kw), _outcome(fd, case, **kw)
            if _left_out_near_builtin_kink(a, b):
                continue  # (a change of the outcome, not of speed: tests/test_kink_builtin.py)
            kinds.add(a[0] if isinstance(a, tuple) else "refined" if a.evaluations > 3 * case.n_inputs + 17 else "estimate")
            mismatches += [f"case {i} {kw} {case.ops}: {d}" for d in _differences(a, b)]
    assert not mismatches, "\n".join(mismatches[:5])
    # the corpus reaches every outcome, so the comparison covers each path
    assert {"estimate", "refined", "OracleError", "NonDifferentiable"} <= kinds, kinds


def test_fd_chunked_layout_gives_the_same_estimates_as_before(corpus, monkeypatch, three_point):
    monkeypatch.setattr(fd, "MAX_BATCH_ELEMENTS", 60)  # the separate centre and chunks of a few elements
    monkeypatch.setattr(old, "MAX_BATCH_ELEMENTS", 60)
    mismatches = []
    for i, case in enumerate(corpus[:80] + corpus[-30:]):
        a, b = _outcome(old, case), _outcome(fd, case)
        if not _left_out_near_builtin_kink(a, b):  # (a change of the outcome: tests/test_kink_builtin.py)
            mismatches += [f"case {i} {case.ops}: {d}" for d in _differences(a, b)]
    assert not mismatches, "\n".join(mismatches[:5])


LINES = {
    "gaussian": np.random.default_rng(0).standard_normal(16),
    "rounded": np.round(np.random.default_rng(1).standard_normal(16), 2),
    "constant": np.full(16, 0.3),
    "kink": np.abs(np.linspace(-1, 1, 16)),
    "inf": np.r_[np.ones(15), np.inf],
    "nan": np.r_[np.nan, np.ones(15)],
    "overflowing differences": np.r_[1.7e308, -1.7e308] .repeat(8),
    "huge": np.random.default_rng(2).standard_normal(16) * 1e300,
}


@pytest.mark.parametrize("name", list(LINES), ids=list(LINES))
def test_line_sigma_is_noise_sigma_of_one_line(name):
    a, b = fdstep.noise_sigma(LINES[name]), fdstep.line_sigma(LINES[name].tolist())
    assert a == b or (np.isnan(a) and np.isnan(b)), (a, b)


def _numpy_estimate(s, S, s0, S0, h, floor):
    """What the old oracle computed from the same stencil values (its finiteness test, _combine and
    coarse-step test, on arrays)."""
    s, S, h = np.array(s), np.array(S), np.array(h)
    if not np.isfinite(s).all():
        return "not finite", int(np.argwhere(~np.isfinite(s))[0][1])
    with np.errstate(all="ignore"):
        r, err, trunc = old._combine(s, s0, S.max(axis=0), S0, h, floor)
        scale = max(float(np.abs(r).max(initial=0.0)), 1e-300)
        refine = bool(trunc.max(initial=0.0) > old.COARSE * scale
                      and ((trunc > old.COARSE * np.maximum(np.abs(r), scale)) & (trunc > 0.5 * err)).any())
    return r.tolist(), err.tolist(), trunc.tolist(), refine


_H = [6e-6, 6e-6, 1.2e-5]
_S3 = [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]
BIG, INF, NAN = 1.5e308, float("inf"), float("nan")
# (s rows, S rows, s0, S0, h, floor): values whose sums overflow although each is finite, non-finite
# values in each place, a correction that overflows to inf and then to NaN
ESTIMATES = {
    "smooth": ([[1.1, 2.1, 3.1], [0.9, 1.9, 2.9], [1.2, 2.2, 3.2]], _S3, 1.0, 1.0, _H, 1e-15),
    "coarse step": ([[1.1, 2.0, 3.0], [0.9, 2.0, 3.0], [1.5, 2.0, 3.0]], _S3, 1.0, 1.0, _H, 1e-15),
    "s sums overflow": ([[BIG, BIG, 1.0], [BIG, 1.0, BIG], [BIG, BIG, BIG]], _S3, 1.0, 1.0, _H, 0.0),
    "S sums overflow": ([[1.1, 2.1, 3.1], [0.9, 1.9, 2.9], [1.2, 2.2, 3.2]], [[BIG] * 3] * 3, BIG, BIG, _H, 0.0),
    "correction overflows": ([[-BIG, 1.0, 2.0], [BIG, 1.0, 2.0], [BIG, 1.0, 2.0]], _S3, 0.0, 1.0, _H, 0.0),
    "inf in s": ([[1.0, 2.0, 3.0], [1.0, INF, 3.0], [1.0, 2.0, 3.0]], _S3, 1.0, 1.0, _H, 0.0),
    "nan in s": ([[1.0, 2.0, NAN], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]], _S3, 1.0, 1.0, _H, 0.0),
    "inf in S": ([[1.1, 2.1, 3.1], [0.9, 1.9, 2.9], [1.2, 2.2, 3.2]], [[1.0, INF, 1.0]] * 3, 1.0, 1.0, _H, 0.0),
    "nan centre": ([[1.1, 2.1, 3.1], [0.9, 1.9, 2.9], [1.2, 2.2, 3.2]], _S3, NAN, 1.0, _H, 0.0),
    "inf step": ([[1.1, 2.1, 3.1], [0.9, 1.9, 2.9], [1.2, 2.2, 3.2]], _S3, 1.0, 1.0, [6e-6, INF, 6e-6], 0.0),
}


@pytest.mark.parametrize("name", list(ESTIMATES), ids=list(ESTIMATES))
def test_small_estimate_is_the_numpy_estimate(name):
    args = ESTIMATES[name]
    got = fd._estimate_small(*args)
    if got is None:  # the caller takes the numpy path: allowed only for a non-finite S, centre, step or floor
        s, S, s0, S0, h, floor = args
        assert not np.isfinite(np.array([*np.ravel(S), s0, S0, *h, floor])).all()
        return
    want = _numpy_estimate(*args)
    if got[0] == "not finite" or want[0] == "not finite":
        assert got == want
        return
    for a, b in zip(got[:3], want[:3]):
        np.testing.assert_array_equal(a, b)  # the same floats (NaN where numpy's are NaN)
    assert got[3] == want[3]


def test_small_estimate_sees_a_nan_that_max_would_skip():
    # element 1's step is so small that both the central difference and the correction overflow to
    # inf, and r = inf - inf = NaN: numpy's max is NaN there and the coarse-step test False; Python's
    # max of |r|, having seen element 0 first, skips the NaN
    s = [[1.0, 2.0], [0.9, 1.0], [1.1, 10.0]]
    args = (s, [[1.0, 1.0]] * 3, 1.0, 1.0, [6e-6, 1e-310], 1e-15)
    got, want = fd._estimate_small(*args), _numpy_estimate(*args)
    assert np.isnan(want[0][1]) and want[3] is False
    assert got[3] is False
    for a, b in zip(got[:3], want[:3]):
        np.testing.assert_array_equal(a, b)


STENCIL_INPUTS = {
    "one": [0.3],
    "signed zeros": [0.0, -0.0, 1e-300, -5e-324],
    "large and tiny": [1e300, -3.5, 7e-8, 2.0**60, -1.0],
    "nan": [np.nan, 1.0],
    "twenty": list(np.random.default_rng(3).standard_normal(20) * 10.0 ** np.arange(-10, 10)),
}


@pytest.mark.parametrize("name", list(STENCIL_INPUTS), ids=list(STENCIL_INPUTS))
def test_dense_stencil_is_the_indexed_one_bit_for_bit(name):
    flat = np.array(STENCIL_INPUTS[name])
    h = fd.STEP * np.maximum(1.0, np.abs(flat))
    a, b = fd._stencil(flat, h, flat.size), fd._stencil(flat, h, flat.size, finite=True)
    assert a.shape == b.shape
    assert np.array_equal(a.view(np.int64), b.view(np.int64)) or name == "nan" and np.array_equal(a, b, equal_nan=True)


# (rows, root shape, seed kind): scalar and tensor roots, one row, an empty root, explicit and implicit seeds
S_VALUES = {
    "scalar root": (23, (), "ones"), "vector root": (71, (12,), "random"), "one row": (1, (3, 4), "random"),
    "empty root": (20, (0,), "ones"), "wide": (300, (500,), "random"), "signed zeros": (8, (2,), "zeros"),
}


@pytest.mark.parametrize("name", list(S_VALUES), ids=list(S_VALUES))
def test_s_values_dot_is_matmul_bit_for_bit(name):
    rows, shape, kind = S_VALUES[name]
    rng = np.random.default_rng(len(name))
    v = rng.standard_normal((rows,) + shape) * 10.0 ** rng.uniform(-8, 8, (rows,) + shape)
    if kind == "zeros":
        v = np.where(rng.uniform(size=v.shape) < 0.5, -0.0, 0.0)
    seed = np.ones(shape) if kind != "random" else rng.standard_normal(shape)
    s, S = fd._s_values({"y": v}, ["y"], [seed], rows)
    flat = v.reshape(rows, -1)
    want_s, want_S = flat @ seed.ravel(), np.abs(flat) @ np.abs(seed.ravel())  # (what the old oracle computed)
    for got, want in ((s, want_s), (S, want_S)):
        assert np.array_equal(got.view(np.int64), want.view(np.int64))  # the same bits, signed zeros too


def test_leaf_reach_small_is_the_max_of_the_three_points():
    # the Python form takes |(x + 2h) - x| alone below REACH_2H_BELOW: the same floats as numpy's max of the
    # three (|x + f h - x| for f = 1, -1, 2), on the edges of that argument (tiny, zero, exact powers of two,
    # just below 1 where h = STEP, the largest |x| the shortcut takes) and past it, where x - h or x + 2h overflow
    rng = np.random.default_rng(11)
    edges = [0.0, -0.0, 5e-324, -1e-300, 1.0, -1.0, 1.0 - 2**-53, 1.0 + 2**-52, 2.0**52, -(2.0**1000), 9.99e299,
             -9.99e299, 1.7e308, -1.7e308, np.finfo(float).max, -np.finfo(float).max]
    wide = list(rng.standard_normal(200) * 10.0 ** rng.uniform(-300, 300, 200))
    flat = np.array(edges + wide)
    h = fd.STEP * np.maximum(1.0, np.abs(flat))
    leaf = gs.Case.build({"x": flat}, [("y", "exp", ["x"], {})], ["y"], [np.ones(flat.size)]).leaves
    want = fd._leaf_reach(leaf, flat, h, {"x"})["x"]
    tops: dict = {}
    got = fd._leaf_reach_small(leaf, flat, h.tolist(), {"x"}, tops)["x"]
    assert np.array_equal(got.view(np.int64), want.view(np.int64))
    assert tops["x"] == float(want.max())
