"""How much a case's gradient moves when every value its backward pass touches is off by a few ulps
(``rounding_noise``): the noise floor below which two exact oracles cannot be told apart, measured on
the case itself by re-running the reference backward with jittered values.  ``gs.check`` measures it
only when a comparison fails without it.

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec._check_noise import rounding_noise
    >>> case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", "tanh", ["x"], {})], ["y"], [np.ones(2)])
    >>> bool((rounding_noise(case)["x"] < 1e-14).all())
    True
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np

from . import tolerances as _tol
from ._private import numpy_jitter as _nj
from ._private import opaque_noise as _opaque_noise

__all__ = ["rounding_noise", "Unmeasured"]

_NOTHING = contextlib.nullcontext()




def _apply_inside_jittered(apply, spec, inputs, params):
    """``apply`` with each float input's array seen by the op's own numpy code as a ``numpy_jitter.Jittered``
    view (the same memory): inside ``numpy_jitter.jittered``, every ufunc result in the op's forward is off by
    a few ulps.  The tensors get their arrays back before the call returns (a node keeps the tensors, not
    their arrays; nothing else reads them meanwhile)."""
    swapped = []
    for t in inputs:
        d = getattr(t, "data", None)
        if type(d) is np.ndarray and d.dtype.kind == "f":
            swapped.append((t, d))
            t.data = d.view(_nj.Jittered)
    try:
        return apply(spec, inputs, params)
    finally:
        for t, d in swapped:
            t.data = d


_SIGNS = np.array([-1.0, 1.0])


def _signs(rng, shape) -> np.ndarray:
    """``rng.choice((-1.0, 1.0), shape)``, the same draws from the same generator state (choice draws
    ``rng.integers(0, 2, shape)`` and indexes), without choice's checks of its arguments: ~7 us a call,
    paid for every value a noise run touches (~200 of them a run)."""
    return _SIGNS[rng.integers(0, 2, shape)]


@functools.lru_cache(maxsize=None)
def _eps(dtype) -> float:
    return np.finfo(dtype).eps


def _saturated(grads, leaves) -> bool:
    """Some gradient element moved by NOISE_SATURATED of its own size in the jittered runs (see there)."""
    for l in leaves:
        base = grads[0][l.name]
        if base is None:
            continue
        b = np.abs(np.asarray(base.numpy(), dtype=np.float64))
        for g in grads[1:]:
            if g[l.name] is not None:
                with np.errstate(all="ignore"):
                    d = np.abs(np.asarray(g[l.name].numpy(), dtype=np.float64) - np.asarray(base.numpy(), np.float64))
                if np.any(d > _tol.NOISE_SATURATED * b):
                    return True
    return False


def _unmoved_zeros(grads, leaves) -> dict:
    """Leaf name -> where its gradient is exactly 0 in the unjittered run and in every jittered one (only leaves
    with some).  A formula that cancels to an exact 0 (elu's ``out + alpha`` at x = -64, where expm1 is -1)
    moves off it by an ulp when ``out`` does, unless the jitters of the ops between cancel too: the ``where``
    in elu's rule re-jitters ``out`` and lands it back on -1 about one run in nine, and both runs did on a
    20,000-case soak's graph (the generator is seeded: a graph draws the same jitters for each of its value
    sets).  More runs make that unlikely; a 0 a mask makes stays 0 in every run, and costs only the runs."""
    out = {}
    for l in leaves:
        base = grads[0][l.name]
        if base is None:
            continue
        zero = np.asarray(base.numpy()) == 0
        for g in grads[1:]:
            if not zero.any():
                break
            if g[l.name] is not None:
                zero = zero & (np.asarray(g[l.name].numpy()) == 0)
        if zero.any():
            out[l.name] = zero
    return out


class Unmeasured(dict):
    """``rounding_noise``'s answer where the case's plain backward runs but a re-run with its values off by a few
    ulps raises (a Cholesky of X X^T + 1e-6 I in float32: 4 ulps of X X^T move its smallest eigenvalue past 0): no
    noise was measured (no leaf has any), and ``why`` says what raised.  Such a case sits at the edge of its
    dtype's precision -- whether it computes at all is decided by rounding -- so its gradient cannot be held to
    that precision (``gs.check``: the value findings of those comparisons leave the case unjudged, with this)."""

    def __init__(self, why: str) -> None:
        super().__init__()
        self.why = why


def rounding_noise(case, runs: int = 2, ulps: float = _tol.NOISE_ULPS, base: dict | None = None) -> dict | None:
    """How much the gradient moves when every value the backward pass touches is off by a few ulps.

    Two correct libraries compute exp, tanh, sums... to within an ulp or two of each other, and
    derivative formulas can amplify that enormously: ``1 - tanh(x)**2`` near saturation, or
    log_softmax's ``g - p * sum(g)`` when p is almost one-hot (the result is 1e-13 while its
    terms are 2).  Re-running the reference backward with each node's saved output, each
    incoming gradient and each VJP result perturbed by up to ``ulps`` ulps measures that
    amplification for this very case: the spread is the noise floor below which exact oracles
    cannot be told apart.  ``base``: the unjittered run's gradients (leaf name -> array or None), where the
    caller has them already (``gs.check``: the reference oracle's answer on this very case).
    """
    from . import engine as E
    from .oracles.reference import build_engine_graph

    leaves = case.grad_leaves()
    rng = np.random.default_rng(0)

    def jitter(t):
        if not isinstance(t, E.Tensor) or t.data.dtype.kind != "f" or not t.data.size:
            return t
        eps = _eps(t.data.dtype)
        # At least one eps relative (|u| >= 1 / ulps): a value's spacing is at most eps x |value|, so the
        # perturbation always survives rounding back to the dtype.  With |u| drawn from [0, 1], about one
        # element in ten rounded back to itself; when that element was erf(x) = -1 of float32 gelu at
        # x = -8 (whose derivative then cancels 1 + erf to 0), both runs missed the noise there.
        u = rng.uniform(min(1.0, 1 / ulps), 1, t.data.shape) * _signs(rng, t.data.shape)
        return E.Tensor((t.data * (1 + ulps * eps * u)).astype(t.data.dtype))

    original = E._call_vjp
    original_apply = E.apply

    def noisy_vjp(node, g, create_graph):
        return [jitter(x) for x in original(node, jitter(g), create_graph)]

    def noisy_apply(spec, inputs, params):
        # Every op of the forward, and every op evaluated inside a VJP rule too (gelu's inner tanh, softmax's
        # sum...).  A table op's own numpy code runs jittered as well (``inside_jittered``): its output moved by a
        # few ulps of itself misses what cancels inside it (gelu's 1 + erf(x / sqrt 2) at x = -4.5 rounds at
        # 1e-11 of the result, and a torch twin's erf differs by that much).  Ops whose VJP compares values
        # (``OpSpec.compares_values``: amax's x == out mask, maximum's ties) are left exact where they are
        # differentiated: an ulp on amax's output empties its mask, and no library rounds a selection anyway.
        # Every other op rounds, kink or not: float32 sin(norm(x)) at |x| = 568 moves by norm's ulp (6.1e-5), a
        # spread two exact oracles show (tests/known_false_alarms).  One that no gradient flows through is a
        # constant of the case, and jittered like any other: a float32 norm of a constant,
        # a factor of a float64 leaf's gradient (div(norm(x0), x1)), rounds at float32's eps, and FD's batched
        # float32 sum gave it one ulp away from the reference's (2.2e-7 of x1's gradient, drawrate's soak).
        if spec.compares_values(params) and any(getattr(t, "_requires_grad", False) for t in inputs):
            return original_apply(spec, inputs, params)
        if spec.user:  # (a user op's numpy code is jittered by opaque_noise, below)
            out = original_apply(spec, inputs, params)
        else:
            out = _apply_inside_jittered(original_apply, spec, inputs, params)
        out.data = jitter(out).data
        return out

    def run(jittered):
        if jittered:  # (the forward's ops too; Jittered views exist only inside a table op's forward)
            E.apply = noisy_apply
            try:
                with _nj.jittered(rng, ulps):
                    env, roots = build_engine_graph(case)
            finally:
                E.apply = original_apply
        else:
            env, roots = build_engine_graph(case)
        seeds = [None if s is None else E.Tensor(np.array(s, copy=True)) for s in case.seeds]
        E._call_vjp = noisy_vjp if jittered else original
        E.apply = noisy_apply if jittered else original_apply
        try:
            # code gradspec cannot see inside (a torch Function's float32 backward) jitters its own ops too
            with np.errstate(all="ignore"), _opaque_noise.jittering(rng, ulps) if jittered else _NOTHING, \
                    _nj.jittered(rng, ulps) if jittered else _NOTHING:
                E.backward(roots, seeds)
        finally:
            E._call_vjp = original
            E.apply = original_apply
        return {l.name: env[l.name]._grad for l in leaves}

    try:
        if base is not None and all(l.name in base for l in leaves):  # (the unjittered run draws nothing from rng)
            grads = [{l.name: None if base[l.name] is None else E.Tensor(base[l.name]) for l in leaves}]
        else:
            grads = [run(False)]
    except Exception:
        return None  # the reference engine fails on this case; that is reported elsewhere
    try:
        grads += [run(True) for _ in range(runs)]
        first = len(grads)
        saturated = _saturated(grads, leaves)
        zeros = {} if saturated else _unmoved_zeros(grads, leaves)
        if saturated or zeros:
            grads += [run(True) for _ in range(_tol.NOISE_MORE_RUNS)]
    except Exception as e:  # noqa: BLE001 - the plain run ran: the jitter itself broke it
        return Unmeasured(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])
    out = {}
    for l in leaves:
        base = grads[0][l.name]
        if base is None:
            continue
        b = np.asarray(base.numpy(), dtype=np.float64)
        spread = np.zeros(l.shape)
        for k, g in enumerate(grads[1:], 1):
            if g[l.name] is not None:
                with np.errstate(all="ignore"):
                    d = np.abs(np.asarray(g[l.name].numpy(), dtype=np.float64) - b)
                ok = np.isfinite(d)
                if k >= first and not saturated:  # runs made for unmoved zeros measure those elements only
                    ok = ok & zeros.get(l.name, False)
                spread = np.maximum(spread, np.where(ok, d, 0.0))
        out[l.name] = spread
    return out
