"""Finite differences' applicability test and its reach check share the kink distances at the case's
values (issue 15): ``exact_kinks`` (``FiniteDifferences.applies``, inside ``gs.check``) keeps each
gradspec op's ``kink_distance`` with a snapshot of the inputs it was computed on, and the reach check
takes that float where its centre (row 0 of FD's batched pass) holds the very same bytes, else computes
it as before.  So FD inside ``gs.check`` gives the estimates and refusals it gives alone, bit for bit,
and ``exact_kinks`` names the nodes the old code named (kept below verbatim), NaN and float32 included.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import gradspec as gs
from gradspec._private import kinks, percase
from gradspec._private.sampling import sample
from gradspec.oracles import fd
from gradspec.spec import registry
from tests.test_fd_fast import _differences, _outcome


def _old_distance(spec, args, params) -> float:  # kinks._distance before this change, verbatim
    d = np.inf
    for dom, a in zip(spec.domains_for(len(args)), args):
        a = np.asarray(a)
        if a.size and a.dtype.kind == "f" and dom.points:
            d = min(d, min(float(np.min(np.abs(a - p))) for p in dom.points))
    if spec.kink_distance is not None:
        d = min(d, float(spec.kink_distance(*args, **params)))
    return d


def _old_exact_kinks(case) -> list[str]:  # kinks._exact_kinks before this change, verbatim
    specs = [case.spec(n.op) for n in case.nodes]
    watched = [(n, spec) for n, spec in zip(case.nodes, specs) if kinks._has_kinks(spec)]
    if not watched:
        return []
    out = []
    with np.errstate(all="ignore"):
        try:
            env = case._evaluate(None, 0)
        except Exception:  # noqa: BLE001
            return []
        for n, spec in watched:
            args = [env[i] for i in n.inputs]
            try:
                d = _old_distance(spec, args, n.params)
            except Exception:  # noqa: BLE001
                continue
            if d == 0:
                out.append(f"{n.name} = {n.op}({', '.join(n.inputs)})")
    return out


def _case(leaves, nodes, root, seed=None):
    return gs.Case.build(leaves, nodes, [root], None if seed is None else [np.asarray(seed)])


def _near_kinks() -> dict:
    """Cases at, near and far from the kinks of every op with a kink distance or singular points."""
    rng = np.random.default_rng(11)
    v = rng.standard_normal(5)
    out = {
        "max-near-tie": _case({"x": np.array([1.0, 1.0 + 1e-9, -2.0])}, [("y", "max", ["x"], {})], "y"),
        "max-far": _case({"x": v}, [("y", "max", ["x"], {})], "y"),
        "max-exact-tie": _case({"x": np.array([3.0, 3.0])}, [("y", "max", ["x"], {})], "y"),
        "amax-rows": _case({"x": rng.standard_normal((3, 4))}, [("y", "amax", ["x"], {"dim": 1})], "y",
                           rng.standard_normal(3)),
        "max-of-permuted": _case({"x": rng.standard_normal((2, 3))},
                                 [("p", "permute", ["x"], {"dims": (1, 0)}), ("y", "amax", ["p"], {"dim": 0})], "y",
                                 rng.standard_normal(2)),
        "maximum-near": _case({"a": v, "b": v + 1e-8}, [("y", "maximum", ["a", "b"], {})], "y", np.ones(5)),
        "maximum-far": _case({"a": v, "b": v + 1.0}, [("y", "maximum", ["a", "b"], {})], "y", np.ones(5)),
        "minimum-same-leaf": _case({"a": v}, [("y", "minimum", ["a", "a"], {})], "y", np.ones(5)),
        "norm-tiny": _case({"x": np.array([1e-9, -2e-9])}, [("y", "norm", ["x"], {})], "y"),
        "norm-far": _case({"x": v}, [("y", "norm", ["x"], {})], "y"),
        "std-near-constant": _case({"x": np.array([2.0, 2.0 + 1e-10, 2.0])}, [("y", "std", ["x"], {})], "y"),
        "std-far": _case({"x": v}, [("y", "std", ["x"], {})], "y"),
        "clamp-near-bound": _case({"x": np.array([0.5 + 1e-9, -3.0])}, [("y", "clamp", ["x"], {"min": -1.0, "max": 0.5})],
                                  "y", np.ones(2)),
        "softplus-at-threshold": _case({"x": np.array([20.0, 1.0])}, [("y", "softplus", ["x"], {"beta": 1.0, "threshold": 20.0})],
                                       "y", np.ones(2)),
        "relu-at-zero": _case({"x": np.array([0.0, 1.0])}, [("y", "relu", ["x"], {})], "y", np.ones(2)),
        "relu-near-zero": _case({"x": np.array([1e-9, 1.0])}, [("y", "relu", ["x"], {})], "y", np.ones(2)),
        "abs-after-nan": _case({"x": np.array([-1.0, 4.0])}, [("l", "log", ["x"], {}), ("y", "abs", ["l"], {})], "y",
                               np.ones(2)),
        "max-float32": _case({"x": np.array([1.0, 1.0 + 2**-20, 0.0], dtype=np.float32)}, [("y", "max", ["x"], {})], "y"),
        "maximum-mixed": _case({"a": v.astype(np.float32), "b": v + 1e-3}, [("y", "maximum", ["a", "b"], {})], "y",
                               np.ones(5)),
        "two-kinks-chain": _case({"x": v}, [("m", "maximum", ["x", "x"], {}), ("y", "norm", ["m"], {})], "y"),
    }
    return out


NEAR = _near_kinks()


@pytest.fixture(scope="module")
def corpus():
    cases = sample(gs.strategies.cases(), 200, 7)
    cases += sample(gs.strategies.cases(dtype="float32"), 40, 7)
    return cases + list(NEAR.values())


def test_exact_kinks_names_the_nodes_it_named_before(corpus):
    diffs = [(i, _old_exact_kinks(c), kinks.exact_kinks(c)) for i, c in enumerate(corpus)
             if _old_exact_kinks(c) != kinks.exact_kinks(c)]
    assert not diffs
    assert sum(1 for c in corpus if kinks.exact_kinks(c)) >= 3  # the table holds exact ties and kinks


def _inside_check(case):
    """FD as ``gs.check`` runs it: in the case's scope, after ``applies`` (which computes the kinks)."""
    with percase.scope(case):
        ok, why = fd.FiniteDifferences().applies(case)
        return _outcome(fd, case) if ok else ("not applied", why)


def test_fd_inside_check_is_fd_alone(corpus):
    diffs, reused = [], 0
    for i, case in enumerate(corpus):
        inside = _inside_check(case)
        if isinstance(inside, tuple) and inside[0] == "not applied":
            continue
        alone = _outcome(fd, case)
        for d in _differences(inside, alone):
            diffs.append(f"case {i}: {d}")
        with percase.scope(case):
            kinks.exact_kinks(case)
            reused += bool(kinks.center_kink_distances(case))
    assert not diffs
    assert reused >= 10  # the shared distances were there to take


# (not maximum: a kept distance of 0 for an elementwise op of gradspec's own sends FD to the per-position check,
# oracles/_fd_kinkpos.py, which finds every tie far and estimates as alone: tests/test_kink_builtin.py)
@pytest.mark.parametrize("name", ["norm-far", "max-far", "std-far"])
def test_reach_check_takes_the_kept_distance_only_on_the_same_bytes(name):
    case = NEAR[name]
    alone = _outcome(fd, case)
    assert not isinstance(alone, tuple)  # far from its kink: FD estimates
    node = case.nodes[-1].name
    with percase.scope(case):
        assert kinks.exclusion(case, "finite differences") is None
        known = kinks.center_kink_distances(case)
        snaps, kd = known[node]
        assert kd > 0
        # a kept distance of 0 on the same bytes is taken: the kink is "within reach", FD refuses
        known[node] = (snaps, 0.0)
        refused = _outcome(fd, case)
        assert isinstance(refused, tuple) and "not differentiable" in refused[1], refused
        # on other bytes it is not: the distance is computed again, FD estimates as alone
        other = [(dt, shape, bytes(len(b))) for dt, shape, b in snaps]
        known[node] = (other, 0.0)
        assert not _differences(_outcome(fd, case), alone)


def test_float32_inputs_are_not_taken_from_float64_snapshots():
    # FD evaluates in float64; exact_kinks sees the float32 values: other bytes, so nothing is shared
    case = NEAR["max-float32"]
    with percase.scope(case):
        kinks.exact_kinks(case)
        snaps = kinks.center_kink_distances(case)["y"][0]
        assert snaps[0][0] == np.float32
        inside = _outcome(fd, case)
    assert not _differences(inside, _outcome(fd, case))


def _arrays(rng, dtype):
    """Small and larger arrays at, near and away from the domain points 0 and -1, with NaN, inf and -0.0."""
    specials = [0.0, -0.0, -1.0, np.nan, np.inf, -np.inf, 1e-300, -1e-45, 1.0000001, -0.99999994]
    for size in (1, 2, 5, 16, 17, 40):
        for _ in range(12):
            a = rng.standard_normal(size)
            k = rng.integers(0, 3)
            a[rng.integers(0, size, k)] = rng.choice(specials, k)
            yield a.astype(dtype) if size % 2 else a.astype(dtype).reshape(-1, 1) if size > 1 else np.asarray(a[0], dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_kink_distance_is_zero_exactly_where_the_old_one_was(dtype):
    # every op with singular points (relu, abs, log, sqrt, elu ...), each input at the arrays above
    specs = [s for s in registry.all_specs().values() if any(d.points for d in s.domains_for(s.arity or 1))
             and s.kink_distance is None and (s.arity or 1) == 1]
    assert len(specs) >= 4
    rng = np.random.default_rng(3)
    hits = 0
    with np.errstate(all="ignore"):
        for spec in specs:
            for a in _arrays(rng, dtype):
                old = _old_distance(spec, [a], {}) == 0
                assert (kinks._distance(spec, [a], {})[0] == 0) == old, (spec.name, a)
                hits += old
    assert hits >= 20  # exact hits were among them


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_point_is_compared_in_the_arrays_dtype(dtype):
    # 0.1 is no float32 number: numpy's a - 0.1 on float32 casts 0.1 to float32 first
    spec = SimpleNamespace(domains_for=lambda n: [gs.domains.away_from(0.1, 2.5)] * n, kink_distance=None)
    with np.errstate(all="ignore"):
        for a in (np.array([0.1, 3.0]), np.array([np.float32(0.1), 3.0]), np.array(0.1), np.array([0.1, np.nan]),
                  np.array([np.inf, 0.1]), np.full(20, 0.1)):
            a = a.astype(dtype)
            assert (kinks._distance(spec, [a], {})[0] == 0) == (_old_distance(spec, [a], {}) == 0), a
