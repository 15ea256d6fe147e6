"""The finite-difference JVP of a user op without a ``jvp`` (``gs.Op(..., jvp=None)``): ``fd_jvp``.

Its steps, its adaptive refusals (kinks, staircases, float32 inside) and its rounding-noise model live
here, apart from the user-op declaration (``gradspec.ops.user``), which re-exports the public names.

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec.ops._user_fd import fd_jvp
    >>> sq = gs.Op("sq_fd_doc", forward=lambda x: x * x, vjp=lambda g, x, out: (2 * g * x,))
    >>> t = fd_jvp(sq)((np.ones((1, 2)),), np.array([1.0, 3.0]), out=np.array([1.0, 9.0]))
    >>> np.allclose(t, [[2.0, 6.0]])
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import math

import numpy as np

from .. import tolerances as _tol
from .._private import float32_line as _f32line

__all__ = ["fd_jvp", "fd_step_scale", "fd_rounding_noise", "fd_memo", "FDStepError", "NOISE_ULPS", "FD_STEP", "FD_STEP32"]


_STEP_SCALE = [1.0]
_NOISE: list = [None]  # a numpy Generator while fd_rounding_noise() is active
NOISE_ULPS = 16.0  # rounding of the user's forward assumed by the noise model, in ulps of |f|
FD_STEP = np.finfo(np.float64).eps ** 0.2  # ~7.4e-4: balances O(h^4) truncation and O(eps/h) rounding
# The same balance for a forward that computes in float32 inside (its outputs over the stencil are all
# float32 numbers: gradspec._private.fdstep.float32_valued): eps32^(1/5) ~ 0.041, where the rounding
# 3.3 x NOISE_ULPS eps32 |f| / h ~ 1.5e-4 |f| and the Richardson-extrapolated truncation O(h^6) ~ 5e-9 f^(7)
# are the best float32 allows; at FD_STEP float32's quanta (6e-8 |f|) / 7.4e-4 swamped the JVP.
FD_STEP32 = np.finfo(np.float32).eps ** 0.2
_FLOAT32_SEEN: list = []  # names of the ops whose FD-JVP ran as a float32 computation (FDJacobianOracle reads it)
_FLOAT32_WHY: dict = {}  # op name -> how a float32 part hidden behind float64 arithmetic showed (float32_line)


@contextlib.contextmanager
def fd_step_scale(scale: float):
    """Multiply the finite-difference JVP's steps by ``scale`` inside the block (error estimates:
    the same Jacobian at two step sizes differs by about its error)."""
    old = _STEP_SCALE[0]
    _STEP_SCALE[0] = float(scale)
    try:
        yield
    finally:
        _STEP_SCALE[0] = old


@contextlib.contextmanager
def fd_rounding_noise(seed: int = 0):
    """Inside the block, the finite-difference JVP adds random noise of the size of its rounding
    error (``NOISE_ULPS`` ulps of each forward value, amplified by the stencil: ~3.3 eps |f| / h)
    to its result; the spread this causes in a composed ``J^T seed`` measures how far rounding
    alone can move it, wherever the op sits in the graph."""
    old = _NOISE[0]
    _NOISE[0] = np.random.default_rng(seed)
    try:
        yield
    finally:
        _NOISE[0] = old


_MEMO: list = [None]  # a _Memo while fd_memo() is active


class _Memo(dict):
    """What one oracle answer's passes computed, by what it was computed from (``_digest``): the JVPs of the
    first pass, the centre's recomputation, the float32 line's evidence and the noise line's sigma.  A pass
    repeating a computation with the same op, inputs, tangents and step takes its answer (the forward is a
    function of its inputs: every oracle assumes it, and ``determinism.probe`` checks it before any compares).
    JVPs are kept up to ``MEMO_ELEMENTS`` elements in all, then computed again (the answer is the same)."""

    size = 0

    def keep(self, size: int) -> bool:
        if self.size + size > MEMO_ELEMENTS:
            return False
        self.size += size
        return True


# 2**22 float64 elements (32 MiB) of first-pass JVPs kept for the noise pass: a few thousand inputs beside
# outputs of a thousand elements; beyond it the noise pass evaluates its points again, as before.
MEMO_ELEMENTS = 2**22


@contextlib.contextmanager
def fd_memo():
    """Inside the block (one answer of the jacobian oracle over FD-JVPs: ``fd_jacobian_error``'s passes), a
    computation that a previous pass made from the very same op, inputs, tangents and step is not made again:
    the rounding-noise pass (the first pass's JVPs plus noise) evaluates only its noise line, and the float32
    and noise lines, which depend on the inputs alone, are laid once for all four passes.  Re-entrant."""
    if _MEMO[0] is not None:
        yield
        return
    _MEMO[0] = _Memo()
    try:
        yield
    finally:
        _MEMO[0] = None


def _digest(spec, arrays, params) -> tuple:
    """What a computation depends on: the op (the spec object itself), each array's dtype, shape and bytes (a
    128-bit BLAKE2 digest of them: tangents reach a MiB) and the params (the objects themselves, by identity:
    the node's, held by the case for the whole answer)."""
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        if a is None:
            h.update(b"-")
            continue
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.view(np.uint8).reshape(-1) if a.size else b"")
    return (id(spec), h.digest(), tuple(sorted((k, id(v)) for k, v in params.items())))


def _memoized(what: str, spec, xs, params, compute):
    memo = _MEMO[0]
    if memo is None:
        return compute()
    key = (what, _digest(spec, xs, params))
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def _active_directions(tangents, n) -> np.ndarray:
    active = np.zeros(n, dtype=bool)
    for t in tangents:
        if t is not None:
            t = np.asarray(t)
            active |= np.any(t.reshape(n, int(np.prod(t.shape[1:], dtype=np.int64))) != 0, axis=1)
    return active


def _distance_to_singular(spec, inputs, params) -> list:
    """Per input, per element: distance to the nearest domain edge or singular point."""
    out = []
    for dom, x in zip(spec.domains_for(len(inputs)), inputs, strict=True):
        x = np.asarray(x, dtype=np.float64)
        d = np.full(x.shape, np.inf)
        for p in dom.points:
            d = np.minimum(d, np.abs(x - p))
        if math.isfinite(dom.lo):
            d = np.minimum(d, x - dom.lo)
        if math.isfinite(dom.hi):
            d = np.minimum(d, dom.hi - x)
        out.append(d)
    if spec.kink_distance is not None:
        with np.errstate(all="ignore"):
            k = float(spec.kink_distance(*inputs, **params))
        out = [np.minimum(d, k) for d in out]
    return out


def fd_jvp(spec):
    """A JVP rule for ``spec`` from finite differences of its forward (all directions batched).

    Per direction ``t`` (one tangent per input, jointly): the 4-point central difference
    ``D(h) = [8 (f(x+ht) - f(x-ht)) - (f(x+2ht) - f(x-2ht))] / 12h`` (error O(h^4)) at ``h`` and
    ``h/2``, Richardson-extrapolated to ``(16 D(h/2) - D(h)) / 15`` (error O(h^6)), along the
    direction scaled to ``max |t| = 1`` (then scaled back: the JVP is linear in ``t``).  ``h`` is
    ``eps**(1/5) * max(1, |x|)`` over the elements the direction moves, and at most 1/32 of their
    distance to a domain edge, singular point or declared kink, so that no stencil point leaves
    the op's domain.
    """
    coeffs = ((1.0, 8.0), (-1.0, -8.0), (2.0, -1.0), (-2.0, 1.0))  # (offset in h, weight) / 12h

    def jvp(tangents, *inputs, out, **params):
        n = next(t.shape[0] for t in tangents if t is not None)
        if n == 0 or int(np.size(out)) == 0:
            return np.zeros((n,) + np.shape(out), dtype=np.float64)
        xs = [np.asarray(x, dtype=np.float64) if np.issubdtype(np.asarray(x).dtype, np.floating) else np.asarray(x)
              for x in inputs]
        rng = _NOISE[0]
        memo, key = _MEMO[0], None
        if memo is not None and _STEP_SCALE[0] == 1.0:
            key = ("jvp", _digest(spec, xs, params), _digest(None, list(tangents) + [np.asarray(out)], {}))
        est = memo.get(key) if key is not None and rng is not None else None
        if est is None:
            est = _estimate(spec, tangents, xs, out, params, n, coeffs)
            if key is not None and rng is None and memo.keep(est.size):
                memo[key] = est
        else:  # the noise pass at the first pass's inputs, tangents and step: its points' values are known
            est.replay(spec)
        res = np.zeros((n,) + np.shape(out), dtype=np.float64)
        for idx, r, fmax, hs, eps in est.parts:
            if rng is not None:
                # the larger of the rounding model and the noise measured on this forward (an
                # ill-conditioned solve inside the op rounds at kappa eps, not a few ulps)
                level = np.maximum(NOISE_ULPS * eps * fmax, _tol.FD_NOISE_SIGMAS * _measured_noise(spec, xs, params))
                amp = 3.3 * level / hs
                r = r + amp * rng.uniform(-1.0, 1.0, r.shape)
            res[idx] = r * est.tmax[idx].reshape((idx.size,) + (1,) * (r.ndim - 1))
        return res

    return jvp


def _estimate(spec, tangents, xs, out, params, n, coeffs):
    """``fd_jvp``'s JVPs before any rounding noise is added: per chunk of active directions (idx), the
    Richardson estimate along the unit directions, the largest |f| over its stencils, its steps and the
    precision it was estimated at (``_Est``)."""
    est = _Est()
    out = np.asarray(out, dtype=np.float64)
    with np.errstate(all="ignore"):
        low = out.size and np.array_equal(out.astype(np.float32), out)
    if low:
        # the stencil evaluates the forward in float64: so must its centre.  A float32 case's output
        # (rounded to float32, then cast) would pass for curvature in every second difference and refuse
        # each step; an output that float32 holds exactly is recomputed (the same value in a float64 case)
        out = _memoized("centre", spec, xs, params, lambda: _centre(spec, xs, params))
    active = np.nonzero(_active_directions(tangents, n))[0]
    if active.size == 0:
        return est
    dist = _distance_to_singular(spec, xs, params)
    # Work along unit directions (max |t| = 1) and scale back: the chain rule can hand over
    # tangents of any size (1e-300 after a saturated softmax), the step must not follow them.
    tmax = np.zeros(n)
    for t, x in zip(tangents, xs, strict=True):
        if t is not None:
            tt = np.abs(np.asarray(t, dtype=np.float64)).reshape(n, int(np.size(x)))
            tmax = np.maximum(tmax, tt.max(axis=1, initial=0.0))
    est.tmax = tmax
    safe = np.where(tmax > 0, tmax, 1.0)
    units = [None if t is None else np.asarray(t, dtype=np.float64) / safe.reshape((n,) + (1,) * (np.ndim(t) - 1))
             for t in tangents]
    scale = np.ones(n)
    reach = np.full(n, np.inf)
    for u, x, d in zip(units, xs, dist, strict=True):
        if u is None:
            continue
        tt = np.abs(u).reshape(n, int(np.size(x)))
        moved = tt > 0
        xa = np.broadcast_to(np.maximum(1.0, np.abs(x)).reshape(1, -1), tt.shape)
        scale = np.maximum(scale, np.where(moved, xa, 0.0).max(axis=1, initial=1.0))
        db = np.broadcast_to(np.asarray(d).reshape(1, -1), tt.shape)
        with np.errstate(all="ignore"):
            per = np.where(moved, db / np.where(moved, tt, 1.0), np.inf)
            reach = np.minimum(reach, per.min(axis=1, initial=np.inf))
    h = np.minimum(FD_STEP * scale, reach / 32.0) * _STEP_SCALE[0]
    biggest = max([int(np.size(out))] + [int(np.size(x)) for x in xs] + [1])
    chunk = max(1, 2_000_000 // (8 * biggest))
    eps = np.finfo(np.float64).eps  # the forward's precision: float32's once it shows (float32_valued)
    why = getattr(spec, "float32_seen", "") or _memoized("steps", spec, xs, params, lambda: _f32line.forward_steps(
        spec.name, lambda b: spec.forward_batched(b, params, 1), xs, NOISE_ULPS))
    if why:  # float32 hidden behind float64 arithmetic (no value is a float32 number): as below, from the start
        eps, h = np.finfo(np.float32).eps, np.minimum(FD_STEP32 * scale, reach / 32.0) * _STEP_SCALE[0]
        est.seen.append(why)
        _FLOAT32_SEEN.append(spec.name)
        _FLOAT32_WHY[spec.name] = why
        _f32line.learnt(spec, why)
    for start in range(0, active.size, chunk):
        idx = active[start : start + chunk]
        k = idx.size
        d1, f1, d2, f2 = _two_steps(spec, units, xs, params, idx, h, coeffs, out, eps)
        if d1 is None:  # float32 inside: the float32 step and rounding from here on
            eps = np.finfo(np.float32).eps
            h = np.minimum(FD_STEP32 * scale, reach / 32.0) * _STEP_SCALE[0]
            _FLOAT32_SEEN.append(spec.name)
            est.seen.append("")
            d1, f1, d2, f2 = _two_steps(spec, units, xs, params, idx, h, coeffs, out, eps)
        r = (16.0 * d2 - d1) / 15.0
        if why and not _visible32(out):  # hidden float32: the float32 step (0.04 max(1, |x|)) can exceed its scale
            _quarter_step(spec, (units, xs, params, idx, h, coeffs, out), r, np.maximum(f1, f2), why)
        est.parts.append((idx, r, np.maximum(f1, f2), h[idx].reshape((k,) + (1,) * (r.ndim - 1)), eps))
        est.size += r.size
    return est


class _Est:
    """``_estimate``'s answer: ``parts`` (idx, r, max |f|, step, eps) per chunk, ``tmax`` (the directions' scales),
    ``seen`` the float32 evidence it recorded as it went (``replay`` records it again for a pass that reuses it)."""

    __slots__ = ("parts", "tmax", "seen", "size")

    def __init__(self) -> None:
        self.parts, self.tmax, self.seen, self.size = [], None, [], 0

    def replay(self, spec) -> None:
        for why in self.seen:
            if why:
                _FLOAT32_WHY[spec.name] = why
                _f32line.learnt(spec, why)
            _FLOAT32_SEEN.append(spec.name)


def _centre(spec, xs, params):
    with np.errstate(all="ignore"):
        return np.asarray(spec.forward_batched([x[None] for x in xs], params, 1), dtype=np.float64)[0]


def _visible32(out) -> bool:
    """The op's float64 outputs are float32 numbers (the float32 result is the output: its rounding model,
    eps32 |f|, is the right one there, and a measured one from a probe line near x would be too small)."""
    with np.errstate(all="ignore"):
        return bool(np.size(out)) and np.array_equal(np.asarray(out).astype(np.float32), out)


def _quarter_step(spec, args, r, fmax, why: str = "") -> None:
    """The float32 JVPs ``r`` at steps h against the same at h / 4: a function that varies on a scale finer than
    the float32 step (sigmoid(x - y) at x = y = 1000: h = 41) gives two different wrong answers whose error
    estimates (the same composition at 1.7 h and 0.55 h) are as wrong; a smooth one gives the same answer to
    rounding.  Each JVP's rounding is at most 3.3 delta / h (delta: one value's rounding; the 4-point rule's
    (16 + 2) delta / 12 h, Richardson's (16 x that at h/2 + that at h) / 15), so 2 x (3.3 delta / h + 3.3 delta
    / (h / 4)) allows both with a factor 2 to spare; beyond it: FDStepError (the jacobian steps aside).  delta is
    measured, not eps32 |f|: 8 x the outputs' residual on ``float32_line``'s probe line (its max over 16 points
    is >= half the rounding bound), at least NOISE_ULPS eps64 |f| -- a float32 part hidden behind a float64
    one of 1e6 (x y + sigmoid(x - y) in float32) rounds at 1e-7, not eps32 x 1e6 = 0.1."""
    units, xs, params, idx, h, coeffs, out = args
    eps32 = float(np.finfo(np.float32).eps)
    hq = h / 4
    e1, g1, e2, g2 = _two_steps(spec, units, xs, params, idx, hq, coeffs, out, eps32)
    rq = (16.0 * e2 - e1) / 15.0
    hs = h[idx].reshape((idx.size,) + (1,) * (np.ndim(r) - 1))
    with np.errstate(all="ignore"):
        line = np.asarray(spec.forward_batched(_f32line.along(xs, _f32line.line_offsets), params, 1), dtype=np.float64)
        res = np.asarray(_f32line.residual(line.reshape(_f32line.LINE_POINTS, -1))).reshape(np.shape(out))
        delta = np.maximum(NOISE_ULPS * _EPS64 * np.maximum(fmax, np.maximum(g1, g2)), 8 * np.where(np.isfinite(res), res, np.inf))
        off = ~(np.abs(r - rq) <= 2 * (3.3 * delta / hs + 3.3 * delta / (hs / 4)))
    if np.any(off):
        j = np.unravel_index(int(np.argmax(off)), off.shape)
        raise FDStepError(
            f"finite-difference JVP of {spec.name!r}: it "
            f"{'computes in float32 inside' if _f32line.claims_float32(why) else 'resolves its inputs more coarsely than float64'}"
            ", and its JVPs at the float32 step "
            f"{float(hs.flat[0]):.3g} and at a quarter of it differ by {float(abs(r[j] - rq[j])):.3g}, more than float32 "
            "rounding allows: the function varies too fast for a float32-sized step there")


def _measured_noise(spec, xs, params) -> np.ndarray:
    """``_noise_line``'s sigma, laid once per inputs inside ``fd_memo``."""
    return _memoized("noise", spec, xs, params, lambda: _noise_line(spec, xs, params))


def _noise_line(spec, xs, params) -> np.ndarray:
    """Per output element, the forward's rounding noise measured on a line of FD_NOISE_POINTS
    points around the inputs (``gradspec._private.fdstep.noise_sigma``).  The line is spaced like the
    FD oracle's step (eps^(1/3) |x| / 64: a span of ~1e-7 |x|), not like this JVP's (eps^(1/5)): a
    kink inside a wider line would read as noise and hide itself; one inside this narrow line is
    within the FD oracle's own reach, which then finds it."""
    from .._private import fdstep

    batch = []
    for x in xs:
        if not np.issubdtype(np.asarray(x).dtype, np.floating) or not np.size(x):
            batch.append(np.broadcast_to(x, (_tol.FD_NOISE_POINTS,) + np.shape(x)))
            continue
        step = np.finfo(np.float64).eps ** (1 / 3) * np.maximum(1.0, np.abs(x))
        pat = fdstep.noise_pattern(int(np.size(x))).reshape((-1,) + np.shape(x))
        batch.append(x[None] + pat * step)
    with np.errstate(all="ignore"):
        f = np.asarray(spec.forward_batched(batch, params, 1), dtype=np.float64)
    return fdstep.noise_sigma(f)


class FDStepError(RuntimeError):
    """No finite-difference step works for a JVP direction (a kink, jump or pole within every step
    tried, or noise far above its measured level): the jacobian oracle refuses the case.  Whether
    the case is at a non-differentiable point is the finite-difference oracle's call (it probes
    the whole function, with one-sided slopes), not this one's."""


_EPS64 = float(np.finfo(np.float64).eps)


def _two_steps(spec, units, xs, params, idx, h, coeffs, out, eps=_EPS64):
    """The 4-point estimates at h and h/2, with a step that adapts to the local scale of the
    function (``gradspec._private.fdstep``): directions whose second differences do not scale like
    a smooth function's are retried with smaller steps; ``h`` is updated in place.  At float64
    precision (``eps``), a forward whose outputs are all float32 numbers returns (None,) * 4: the
    caller estimates again with the float32 step and rounding (``FD_STEP32``)."""
    from .._private import fdstep

    d1, f1, r1 = _stencil(spec, units, xs, params, idx, h[idx], coeffs, raw=True)
    d2, f2, r2 = _stencil(spec, units, xs, params, idx, h[idx] / 2, coeffs, raw=True, outer=(h[idx], r1))
    f64 = eps < fdstep.EPS32
    if f64 and fdstep.float32_valued(r1) and fdstep.float32_valued(r2):
        return None, None, None, None
    ulps = NOISE_ULPS * eps / fdstep.EPS  # (bad_directions counts in float64 ulps)
    bad = fdstep.bad_directions(r1, r2, out, ulps)
    if f64:  # (at the float32 step a flat stencil is a slope below float32's quantum / h: within the error)
        _flat_or_stairs(spec, units, xs, params, idx, h, coeffs, (r1, r2))
    sigma = None
    if bad.any():  # noisy rather than kinked? measure the forward's noise (16 evaluations) and look again
        sigma = _measured_noise(spec, xs, params)
        bad = fdstep.bad_directions(r1, r2, out, ulps, sigma)
    for _ in range(fdstep.SHRINKS):
        if not bad.any():
            return d1, f1, d2, f2
        sub = idx[bad]
        h[sub] /= fdstep.SHRINK
        e1, g1, q1 = _stencil(spec, units, xs, params, sub, h[sub], coeffs, raw=True)
        e2, g2, q2 = _stencil(spec, units, xs, params, sub, h[sub] / 2, coeffs, raw=True, outer=(h[sub], q1))
        d1[bad], f1[bad], d2[bad], f2[bad] = e1, g1, e2, g2
        _unresolved(spec, (r1, r2), (q1, q2), bad, h[sub])
        still = fdstep.bad_directions(q1, q2, out, ulps, sigma)
        pos = np.flatnonzero(bad)
        bad = np.zeros_like(bad)
        bad[pos[still]] = True
    if bad.any():
        raise FDStepError(
            f"finite-difference JVP of {spec.name!r}: no usable step along a direction down to h = "
            f"{float(h[idx[bad][0]]):.3g}: its second differences do not scale like a smooth function's (a kink, "
            "jump or pole within every step tried, or noise far above its measured level)")
    return d1, f1, d2, f2


def _unresolved(spec, first, refined, bad, h) -> None:
    """Directions refined (``bad``: their second differences at the first step did not scale like a smooth
    function's) whose stencils at the smaller step give the very same outputs everywhere, where the first step's
    did not: the forward changes in jumps wider than the refined step -- it cannot resolve it (an input added to a
    value of much larger size rounds away: A0 + 1e-13 X with A0 ~ 1 changes only when X moves by ~2e-3; tryout7 #7,
    a Cholesky of condition 1e12) -- and the JVP 0 such a stencil gives is no estimate (it was trusted against a
    correct 3.3e-8: "J^T·g is 0 here").  A forward constant along the direction is flat at the first step too."""
    r1, r2 = first
    q1, q2 = refined
    m, k = q1.shape[0], q1.shape[1]
    with np.errstate(invalid="ignore"):
        now = np.all((q1 == q1[:1]).reshape(m, k, -1), axis=(0, 2)) & np.all((q2 == q1[:1]).reshape(m, k, -1), axis=(0, 2))
        was = np.all((r1[:, bad] == r1[:1, bad]).reshape(m, k, -1), axis=(0, 2))
    if np.any(now & ~was):
        j = int(np.flatnonzero(now & ~was)[0])
        raise FDStepError(
            f"finite-difference JVP of {spec.name!r}: along a direction its outputs change in jumps at one step and "
            f"are the very same at every stencil point of the refined step h = {float(h[j]):.3g}: the forward does not "
            "resolve steps that small (an input added to a much larger value, an ill-conditioned computation), so no "
            "step gives an estimate to vouch for")


def _flat_or_stairs(spec, units, xs, params, idx, h, coeffs, raws) -> None:
    """Directions along which all 8 points gave the very same outputs: the op is constant there (the
    JVP 0 is right), or a staircase wider than the stencil (tanh through float32 at x = 8 gave 0 for a
    slope of 4.8e-7, the reference's: a false alarm).  The stencil at FLAT_PROBE x the step tells them
    apart; a staircase (or the edge of a flat region) leaves no estimate to vouch for."""
    r1, r2 = raws
    m, k = r1.shape[0], r1.shape[1]
    first = r1[:1]
    flat = np.all((r1 == first).reshape(m, k, -1), axis=(0, 2)) & np.all((r2 == first).reshape(m, k, -1), axis=(0, 2))
    if not flat.any():
        return
    sub = idx[flat]
    far = _stencil(spec, units, xs, params, sub, h[sub] * FLAT_PROBE, coeffs, raw=True)[2]
    with np.errstate(all="ignore"):  # the odd part (the slope's), not the even one (a stationary point's curvature)
        odd = np.abs(far[0] - far[1]) / 2
        change = np.where(odd > np.abs((far[0] + far[1]) / 2 - first[0, flat]), odd, 0.0).reshape(sub.size, -1).max(axis=1)
        floor = 100 * NOISE_ULPS * np.finfo(np.float64).eps * np.abs(first[0, flat]).reshape(sub.size, -1).max(axis=1)
    if (change > floor).any():
        j = int(np.flatnonzero(change > floor)[0])
        raise FDStepError(
            f"finite-difference JVP of {spec.name!r}: the forward gave the very same outputs at every stencil point "
            f"within {2 * float(h[sub[j]]):.3g} but its odd part changes by {float(change[j]):.3g} at {FLAT_PROBE:g} x that step: "
            "a staircase (a computation at lower precision inside, e.g. through float32) or the edge of a flat "
            "region, so its JVP 0 cannot be vouched for")


# _flat_or_stairs: how much farther than the step the flat stencil is probed (a float32 staircase's
# steps are ~6e-8 |f| wide: 64 x eps^(1/5) ~ 0.05 |x| crosses one wherever the slope is above ~1e-6 |f|).
FLAT_PROBE = 64.0


def _stencil(spec, tangents, xs, params, idx, h, coeffs, raw=False, outer=None):
    """The 4-point estimates at steps ``h`` along ``tangents[idx]`` (with the largest |f| and, ``raw``, the values).
    ``outer``: (steps, raw values) of the stencil at twice these steps, whose +-h points are this one's +-2h
    points (the same floats: off * h is computed first and 2 (h / 2) == h is checked).  A forward evaluated one
    point per call (``forward_batched`` learnt it takes no batch axis) gives the same values there, so they are
    taken, not evaluated again: 2 of the pair's 8 points.  A batched forward computes again (its result for a
    point may depend on the batch: a BLAS kernel picks its blocking by the batch's size)."""
    k = idx.size
    m = len(coeffs)
    known = {}
    if outer is not None and getattr(spec, "_batch_ok", None) is False:
        for j, (off, _) in enumerate(coeffs):
            i = next((i for i, (o, _) in enumerate(coeffs) if o * 2 == off), None)
            if i is not None and np.array_equal(off * h, coeffs[i][0] * outer[0]):
                known[j] = i
    rows = [j for j in range(m) if j not in known]
    batch = []
    for t, x in zip(tangents, xs, strict=True):
        if t is None:
            batch.append(np.broadcast_to(x, (len(rows) * k,) + np.shape(x)))
            continue
        tk = np.asarray(t, dtype=np.float64)[idx]
        hs = h.reshape((k,) + (1,) * np.ndim(x))
        batch.append(np.concatenate([x[None] + coeffs[j][0] * hs * tk for j in rows], axis=0))
    with np.errstate(all="ignore"):
        new = np.asarray(spec.forward_batched(batch, params, 1), dtype=np.float64)
    new = new.reshape((len(rows), k) + new.shape[1:])
    if known:
        f = np.empty((m,) + new.shape[1:])
        f[rows] = new
        for j, i in known.items():
            f[j] = outer[1][i]
    else:
        f = new
    acc = sum(w * f[j] for j, (_, w) in enumerate(coeffs))
    with np.errstate(all="ignore"):
        fmax = np.max(np.abs(f), axis=0)
    d = acc / (12.0 * h.reshape((k,) + (1,) * (acc.ndim - 1)))
    return (d, fmax, f) if raw else (d, fmax)
