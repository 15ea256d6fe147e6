"""Finite differences take the noise line and the staircase probes only where a node runs code whose rounding
no model bounds (a user op, the engine's ``_cast``): session 15, issue 15; ``gradspec.oracles.fd``'s docstring,
"Graphs of gradspec's own ops", has the numerical argument.  These tests pin the scope (which graphs pay for
the line and the far probe, and that user code still does), the premise (gradspec's own ops compute in float64
on FD's float64 inputs), and what the change gives back: a flat region's edge, refused before, is judged.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradspec as gs
from gradspec import tolerances as _tol
from gradspec._private.fdstep import float32_valued
from gradspec._private.sampling import sample
from gradspec.oracles import _fd_probes, fd
from gradspec.oracles._fd_stencil import _leaf_batches, _stencil
from gradspec.oracles._fd_values import _inputs

# float32 quanta behind a float64 constant (tests/test_numerics.py's twin): no value is a float32 number, and at
# x = 5 every point of the stencil and of the noise line gives one value while the slope is 1.8e-4
_quantized = gs.Op("t_scope_quantized_tanh", forward=lambda x: np.round(np.tanh(x) * 2.0**24) / 2.0**24 + 0.1,
                   vjp=lambda g, x, out: (g * (1 - np.tanh(x) ** 2),))
_exp = gs.Op("t_scope_exp", forward=np.exp, vjp=lambda g, x, out: (g * out,))


def _count_far_probes(monkeypatch) -> list:
    calls: list = []
    real = _fd_probes.flat_or_stairs
    monkeypatch.setattr(_fd_probes, "flat_or_stairs", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_gradspec_ops_take_no_noise_line_and_user_code_still_does():
    x = np.array([0.5, 1.5, -2.0])
    own = gs.Case.build({"x": x}, [("y", "exp", ["x"], {})], ["y"], [np.ones(3)])
    user = gs.Case.build({"x": x}, [("y", _exp.name, ["x"], {})], ["y"], [np.ones(3)])
    a, b = fd.fd_gradient(own), fd.fd_gradient(user)
    assert a.evaluations == 3 * 3 + 1
    assert b.evaluations == 3 * 3 + 1 + _tol.FD_NOISE_POINTS
    np.testing.assert_array_equal(a.grads["x"], b.grads["x"])  # the same stencil rows: the same estimate


@pytest.mark.parametrize("x", [-1e-3, -0.02])
def test_a_flat_regions_edge_is_judged_without_the_far_probe(x, monkeypatch):
    # relu below 0, flat over the whole stencil (2 h ~ 1.2e-5) but not over the far probe's 2.5e-2 |x|: relu is
    # constant on a neighbourhood of x, so the estimate 0 is exact, and without the probe (which could only
    # refuse it) it is a witness: a backward that passes g through below 0 is found by it too.
    calls = _count_far_probes(monkeypatch)
    case = gs.Case.build({"x": np.array([x])}, [("y", "relu", ["x"], {})], ["y"], [np.ones(1)])
    res = fd.fd_gradient(case)
    assert res.grads["x"].tolist() == [0.0] and not calls
    v = gs.check(case)
    assert v.status == "agree" and "finite-differences" in v.results, str(v)
    from tests._mutants import planted

    with planted("relu", lambda g, x, *, out: (g,)):
        bad = gs.check(case)
    assert bad.status == "disagree" and any("finite-differences" in d.oracles for d in bad.discrepancies), str(bad)


def test_user_code_with_a_constant_stencil_still_runs_the_far_probe(monkeypatch):
    # The case where the scope must keep the probe: the stencil and the line are flat (one float everywhere) and
    # the true slope is 1.8e-4; the far probe runs and FD steps aside (its 0 would be a false alarm).
    calls = _count_far_probes(monkeypatch)
    case = gs.Case.build({"x": np.array(5.0)}, [("y", _quantized.name, ["x"], {})], ["y"], None)
    with pytest.raises(gs.oracles.OracleError, match="very same value"):
        fd.fd_gradient(case)
    assert calls


def test_the_engines_cast_counts_as_code_the_model_does_not_bound():
    specs = [gs.spec.registry.all_specs()[name] for name in ("exp", "_cast")]
    assert fd._user_code(specs) and not fd._user_code(specs[:1])


@pytest.fixture(scope="module")
def drawn():
    cases = sample(gs.strategies.cases(), 150, 15)
    cases += sample(gs.strategies.cases(dtype="float32"), 50, 15)
    return cases + sample(gs.strategies.cases(max_nodes=3, max_leaves=2), 100, 15)


def test_gradspec_ops_compute_in_float64_over_the_stencil(drawn):
    """The premise: over FD's float64 stencil no node of gradspec's own ops (other than ``_cast``) gives float32
    numbers only (``float32_valued``: at least one value with a 17th significant bit), so none rounds at a lower
    precision than the model's float64.  Every op the strategies draw is seen at least once."""
    seen, table = set(), gs.spec.registry.all_specs()
    for case in drawn:
        leaves, x64, flat = _inputs(case)
        n = flat.size
        if not n:
            continue
        h = fd.STEP * np.maximum(1.0, np.abs(flat))
        with np.errstate(all="ignore"):
            env = case._evaluate(_leaf_batches(case, x64, leaves, _stencil(flat, h, n)), 1)
        moved = _fd_probes.perturbed(case)
        for node in case.nodes:
            spec = table.get(node.op)
            if spec is None or spec.user or node.op == "_cast" or node.name not in moved:
                continue
            v = np.asarray(env[node.name])
            if v.dtype.kind != "f" or not v.size:
                continue
            v = v.reshape(v.shape[0], -1)
            with np.errstate(all="ignore"):  # (the elements the stencil moves: a float32 leaf's value passed
                moves = np.isfinite(v).all(axis=0) & (v.max(axis=0) > v.min(axis=0))  # through unmoved is one)
            if moves.any():
                seen.add(node.op)
                assert not float32_valued(v[:, moves].ravel()), (node.op, case.to_text())
    assert len(seen) >= 40, sorted(seen)
