"""The one comparison helper the tests use: an op in gradspec's engine vs the same op in torch.

``check_op(name, arrays, params)`` runs forward, backward with a random seed, and double
backward (``create_graph=True``, then a second random seed) in both, in float64, and asserts
they agree.

Tolerance: both sides compute the same formulas in float64 (eps = 2.2e-16) with possibly
different evaluation order.  Each op result carries a few eps of relative rounding error;
double backward chains at most ~10 ops, and the rules with the worst conditioning on the drawn
domains (pow with |exponent * log base| up to ~20, var with correction, atan2) amplify by well
under 1e3.  So agreement within 1e-10 of the array's scale (norm-wise: |a - b| <= 1e-10 *
(|b| + max|b|)) is ~4.5e5 eps of headroom, while any real derivative error (a wrong sign,
a missing term, a wrong reduction) moves results by O(1) relative: 10 orders of magnitude away.
"""

from __future__ import annotations

import numpy as np
import torch

import gradspec as gs
from gradspec.engine import apply

RTOL64 = 1e-10
ATOL64 = 64 * float(np.finfo(np.float64).eps)


def assert_close(actual, expected, *, what: str, rtol: float = RTOL64) -> None:
    a = np.asarray(actual, dtype=np.float64)
    b = np.asarray(expected, dtype=np.float64)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != torch's {b.shape}"
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    assert np.array_equal(nan_a, nan_b), f"{what}: NaN pattern differs\n ours={a}\n torch={b}"
    inf_a, inf_b = np.isinf(a), np.isinf(b)
    assert np.array_equal(inf_a & (a > 0), inf_b & (b > 0)) and np.array_equal(
        inf_a & (a < 0), inf_b & (b < 0)
    ), f"{what}: Inf pattern differs\n ours={a}\n torch={b}"
    fin = ~(nan_a | inf_a)
    if not fin.any():
        return
    scale = np.max(np.abs(b[fin]), initial=0.0)
    err = np.abs(a[fin] - b[fin])
    # Plus an absolute floor of 64 eps: a value that is mathematically 0 comes out as a few ulps
    # of the O(1) terms that cancelled (e.g. std's double backward gives 5.6e-17 where torch gives 0).
    tol = rtol * (np.abs(b[fin]) + scale) + ATOL64
    bad = err > tol
    if bad.any():
        k = int(np.argmax(err - tol))
        raise AssertionError(
            f"{what}: max |ours - torch| = {err.max():.3e} (tolerance {rtol:g} * (|torch| + {scale:.3e}))\n"
            f" worst finite element #{k}: ours={a[fin][k]!r} torch={b[fin][k]!r}\n ours={a}\n torch={b}"
        )


def _to_torch(a, requires_grad):
    t = torch.tensor(np.asarray(a))
    if requires_grad and t.is_floating_point():
        t.requires_grad_(True)
    return t


def check_op(name: str, arrays, params=None, *, seed: int = 0, double: bool = True, grad_inputs=None) -> None:
    """Assert forward, VJP and double-backward of op ``name`` equal torch's (float64)."""
    params = dict(params or {})
    spec = gs.ops.get(name)
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(a) for a in arrays]
    diff = [
        np.issubdtype(a.dtype, np.floating) and spec.input_differentiable(i) and (grad_inputs is None or i in grad_inputs)
        for i, a in enumerate(arrays)
    ]

    xs = [gs.tensor(a, requires_grad=d) for a, d in zip(arrays, diff)]
    out = apply(spec, xs, params)
    canon = spec.canonical([a.shape for a in arrays], params)
    ts = [_to_torch(a, d) for a, d in zip(arrays, diff)]
    tout = spec.torch(*ts, **canon)
    assert_close(out.numpy(), tout.detach().numpy(), what=f"{name} forward")
    if not any(diff):
        return

    seed1 = rng.standard_normal(out.shape)
    tseed = torch.tensor(seed1, dtype=tout.dtype)
    diff_xs = [x for x, d in zip(xs, diff) if d]
    diff_ts = [t for t, d in zip(ts, diff) if d]
    ours = gs.grad(out, diff_xs, gs.tensor(seed1).to(out.dtype), create_graph=double, allow_unused=True)
    theirs = torch.autograd.grad(tout, diff_ts, tseed, create_graph=double, allow_unused=True)
    for i, (g, tg) in enumerate(zip(ours, theirs)):
        if tg is None:
            assert g is None or not np.any(g.numpy()), f"{name} VJP input {i}: torch says unused"
            continue
        assert g is not None, f"{name} VJP input {i}: None but torch has {tg}"
        assert_close(g.numpy(), tg.detach().numpy(), what=f"{name} VJP wrt input {i}")
    if not double:
        return

    # Double backward: d/dx of <w, J^T seed> for a second random w, in both.
    pairs = [(g, tg) for g, tg in zip(ours, theirs) if g is not None and tg is not None]
    if not pairs:
        return
    ws = [rng.standard_normal(g.shape) for g, _ in pairs]
    ours_s = None
    theirs_s = None
    for (g, tg), w in zip(pairs, ws):
        if g.requires_grad:
            term = (g * gs.tensor(w)).sum()
            ours_s = term if ours_s is None else ours_s + term
        if tg.requires_grad:
            tterm = (tg * torch.tensor(w)).sum()
            theirs_s = tterm if theirs_s is None else theirs_s + tterm
    # A gradient that does not depend on the inputs may be a constant on one side and a
    # graph with zero derivative on the other (torch's threshold_backward): compare values,
    # with "no graph" meaning a zero second derivative.
    ours2 = gs.grad(ours_s, diff_xs, allow_unused=True) if ours_s is not None else [None] * len(diff_xs)
    theirs2 = (
        torch.autograd.grad(theirs_s, diff_ts, allow_unused=True) if theirs_s is not None else [None] * len(diff_ts)
    )
    for i, (g2, tg2) in enumerate(zip(ours2, theirs2)):
        if tg2 is None:
            assert g2 is None or not np.any(g2.numpy()), f"{name} double backward input {i}: torch says unused"
            continue
        if g2 is None:
            assert not np.any(tg2.numpy(force=True)), f"{name} double backward input {i}: ours None, torch {tg2}"
            continue
        assert_close(g2.numpy(), tg2.numpy(force=True), what=f"{name} double backward wrt input {i}")


def check_batched_and_jvp(name: str, arrays, params=None, *, seed: int = 0, nbatch: int = 3) -> None:
    """Assert the op's batched forward and its JVP rule, the two things the oracles rely on.

    * ``forward_batched`` on ``nbatch`` stacked copies equals the per-copy forward (the
      finite-difference oracle evaluates all its perturbed points this way);
    * ``jvp`` on ``nbatch`` random tangent directions equals torch's forward-mode JVP
      (``torch.func.jvp``) of the op's torch mapping (the jacobian oracle composes ``jvp``).
    """
    params = dict(params or {})
    spec = gs.ops.get(name)
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(a) for a in arrays]
    canon = spec.canonical([a.shape for a in arrays], params)
    floats = [np.issubdtype(a.dtype, np.floating) and spec.input_differentiable(i) for i, a in enumerate(arrays)]

    # batched forward: perturb float inputs per batch element
    batch = [
        np.stack([a + (0.01 * k * rng.standard_normal(a.shape) if f else 0) for k in range(nbatch)]).astype(a.dtype)
        if f
        else np.broadcast_to(a, (nbatch,) + a.shape)
        for a, f in zip(arrays, floats)
    ]
    got = spec.forward_batched(batch, canon, 1)
    for k in range(nbatch):
        want = spec.forward(*[b[k] for b in batch], **canon)
        assert_close(got[k], want, what=f"{name} batched forward, batch element {k}")

    if spec.jvp is None or not any(floats):
        return
    out = spec.forward(*arrays, **canon)
    tangents = [rng.standard_normal((nbatch,) + a.shape) if f else None for a, f in zip(arrays, floats)]
    mine = spec.jvp(tangents, *arrays, out=out, **canon)
    assert np.shape(mine) == (nbatch,) + np.shape(out), f"{name} jvp shape {np.shape(mine)}"
    for k in range(nbatch):
        primals = [torch.tensor(a) for a in arrays]
        idx = [i for i, f in enumerate(floats) if f]

        def f(*xs, _p=primals):
            full = list(_p)
            for i, x in zip(idx, xs):
                full[i] = x
            return spec.torch(*full, **canon)

        _, tj = torch.func.jvp(f, tuple(primals[i] for i in idx), tuple(torch.tensor(tangents[i][k]) for i in idx))
        assert_close(mine[k], tj.numpy(), what=f"{name} jvp, direction {k}")
