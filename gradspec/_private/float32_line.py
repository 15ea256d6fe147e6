"""Float32 rounding hidden behind float64 arithmetic: a probe line a few float32 ulps long.

Code such as ``x + tanh(x.float()).double()`` or ``2 * exp(x.float()).double() + x ** 2`` returns values
that are not float32 numbers (the float64 part carries bits far below float32's 24), so
``gradspec._private.fdstep.float32_valued`` cannot see it.  Yet its float32 part is a staircase: it changes
only where the input crosses a float32 cell (~6e-8 |x| wide) or its output crosses a float32 quantum, by
jumps of ~eps32 |f|.  A finite-difference step of ~6e-6 |x| turns those jumps into a slope error of
~eps32 |f| / h, 1e4 x what a float64 error bound allows, and a refined step inside one cell sees the float32
part flat (a slope of 0): either way a correct backward would be accused.

The probe: ``LINE_POINTS`` points ``x + t u eps32 max(1, |x|)`` (u random signs, t random in
``[-LINE_SPAN, LINE_SPAN]``: up to ~16 float32 cells of every input, at random positions, so that each
point rounds on its own -- an evenly spaced line can hit a near-integer number of cells per step, and then
every point rounds alike), and the values' largest residual from the least-squares cubic in t
(``residual``).  Float64 code is a polynomial to float64 rounding over so short a line (its quartic term is
~(1e-6 |x|)^4 |f''''| / 24): the residual stays at a few ulps of the values (measured <= 0.06 x FD's own
rounding bound ``256 eps S`` on tanh, exp * sin at x in [0.01, 100]).  A float32 part leaves its rounding:
~eps32 |f32| (measured 1e5-1e6 x that bound on the two examples above).  The caller compares the residual
with the rounding bound its own estimate assumes; above it, that estimate's error bound does not hold.

Example::

    >>> import numpy as np
    >>> from gradspec._private.float32_line import line_offsets, residual
    >>> x = np.array([1.0, -0.5])
    >>> X = x + line_offsets(x)
    >>> f64 = X[:, 0] + np.tanh(X[:, 1])
    >>> f32 = X[:, 0] + np.tanh(X[:, 1].astype(np.float32)).astype(np.float64)
    >>> bool(residual(f64) < 1e-14), bool(residual(f32) > 1e-9)
    (True, True)
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np

from .. import tolerances as _tol
from .fdstep import float32_valued, noise_sigma

__all__ = ["LINE_POINTS", "LINE_SPAN", "INCELL", "EPS32", "SHRINKS_BY", "STEP_SHARE", "IN_CELL", "ALIGNED_SHARE", "line_t",
           "line_offsets", "incell_offsets", "incell_flipped", "residual", "one_break", "along", "steps", "cell_aligned",
           "forward_steps", "learning", "learnt", "claims_float32", "describe", "HIDDEN_WHY", "COARSE_WHY",
           "float32_sized", "WIDE_WHY", "classify"]

EPS32 = float(np.finfo(np.float32).eps)
LINE_POINTS = 16
# Half the line's length in units of eps32 max(1, |x|): 8 to 16 float32 cells on each side (a cell of x in
# [2^k, 2^(k+1)) is eps32 2^k wide), enough for 16 points to round independently; still 1e-6 |x|, where a
# float64 function's quartic term is invisible (see the module docstring).
LINE_SPAN = 8.0
# The in-cell line's spacing, eps32 |x| / INCELL (incell_offsets): not a power of two, so that the offsets'
# low bits are not x's own (with eps32 / 64 = 2^-29 and half-integer t, x + t 2^-29 x rounds alike for x and
# a nearby a, and 1 / (x - a) looked noiseless on this line while it is noisy at every scale)
INCELL = 84.78


@functools.lru_cache(maxsize=1)
def line_t() -> np.ndarray:
    """The line's positions t (sorted, fixed: a case always gets the same points)."""
    t = np.sort(np.random.default_rng(32).uniform(-LINE_SPAN, LINE_SPAN, LINE_POINTS))
    t.flags.writeable = False
    return t


@functools.lru_cache(maxsize=1)
def _projector() -> np.ndarray:
    # I - V pinv(V) for the cubic in t: the residual of the least-squares fit is one matrix product
    V = np.vander(line_t() / LINE_SPAN, 4)
    R = np.eye(LINE_POINTS) - V @ np.linalg.pinv(V)
    R.flags.writeable = False
    return R


@functools.lru_cache(maxsize=64)
def _signs(n: int) -> np.ndarray:
    u = np.random.default_rng(n + 32).choice([-1.0, 1.0], n)
    u.flags.writeable = False
    return u


def incell_offsets(x) -> np.ndarray:
    """(LINE_POINTS, *x.shape) offsets of an evenly spaced line ``t u eps32 |x| / INCELL`` (t = -7.5 .. 7.5):
    0.18 eps32 |x| long, under half a float32 cell of every input (a cell of x in [2^k, 2^(k+1)) is
    eps32 2^k >= eps32 |x| / 2 wide), so a float32 part of the forward changes at most once along it and
    the line's 4th differences (``fdstep.noise_sigma``, a median that ignores one step) measure only the
    float64 noise -- which an ill-conditioned solve has at every scale, this line's included."""
    x = np.asarray(x, dtype=np.float64)
    step = (EPS32 / INCELL * np.abs(x)).reshape(-1) * _signs(x.size)
    t = np.arange(LINE_POINTS) - (LINE_POINTS - 1) / 2
    return np.multiply.outer(t, step).reshape((LINE_POINTS,) + x.shape)


def incell_flipped(x) -> np.ndarray:
    """``incell_offsets`` with every other element's sign flipped: a second direction.  Along one direction
    float64 code can be constant but for rounding (1 / (x - a) with x and a moved alike: x - a changes only
    by the rounding of x + o and a + o, a staircase of float64 cells amplified by |x| / |x - a|), and a
    constant line shows no noise; the other direction then shows it."""
    off = incell_offsets(x)
    flip = np.where(np.arange(off[0].size) % 2, -1.0, 1.0).reshape(off.shape[1:])
    return off * flip


def line_offsets(x) -> np.ndarray:
    """(LINE_POINTS, *x.shape) offsets ``t u eps32 max(1, |x|)`` for the float64 array ``x``."""
    x = np.asarray(x, dtype=np.float64)
    step = (EPS32 * np.maximum(1.0, np.abs(x))).reshape(-1) * _signs(x.size)
    return np.multiply.outer(line_t(), step).reshape((LINE_POINTS,) + x.shape)


def residual(values) -> np.ndarray | float:
    """The largest |residual| of ``values`` (LINE_POINTS, ...) along the line from the least-squares cubic in
    t: a float for a 1-D line, else one per element of the remaining axes.  Non-finite values give NaN, which
    no bound is exceeded by (the caller's own finiteness tests speak for such points)."""
    v = np.asarray(values, dtype=np.float64)
    flat = v.reshape(LINE_POINTS, -1)
    with np.errstate(all="ignore"):
        r = np.max(np.abs(_projector() @ flat), axis=0)
        r = np.where(np.isfinite(flat).all(axis=0), r, np.nan)
    return float(r[0]) if v.ndim == 1 else r.reshape(v.shape[1:])


_EPS = float(np.finfo(np.float64).eps)
# (one sentence for every case: a run's notes gather the distinct ones)
HIDDEN_WHY = (f"float32 rounding hidden behind float64 arithmetic: its outputs step like float32's on {LINE_POINTS} points "
              f"within {LINE_SPAN:g} float32 ulps of its inputs, far above float64 rounding")
# The same steps where the probes inside one float32 cell of every input (``cell_aligned``) see them too: not
# float32 rounding of the inputs but float64 code that resolves them coarsely here -- exp(x) near x = -735
# underflows to subnormals of ~13 bits, a solve of condition 1e8 fed by 1e-8 tanh(M) moves only when an element
# of its matrix crosses a float64 ulp (once per ~1.2 float32 cells of M) -- or a float32 cast of an intermediate
# value.  The estimate is the same (such a staircase defeats a float64 step as float32's does), but the op is not
# said to compute in float32, and a verify_* run does not remember it for later cases (``learnt``).
COARSE_WHY = (f"its outputs step far above float64 rounding on {LINE_POINTS} points within {LINE_SPAN:g} float32 ulps of its "
              "inputs, but not where its inputs cross float32 cells: float64 code that resolves its inputs coarsely there "
              "(values that underflow to subnormals, an ill-conditioned solve) or a float32 cast of an intermediate value")
_COARSE_MARK = "but not where its inputs cross float32 cells"
# The steps follow the inputs' float32 cells but are far larger than float32 rounding of those inputs could make
# (``float32_sized``): float64 code whose staircase is many float32 cells wide -- 1 + M^2 rounds at ulps of 1, so
# log det(M M^T + I) at M = 6.5e-7 (4.2e-13) steps by 2.2e-16 once every 3000 float32 cells of M (tryout11 #3).
# (No "; " in it: claims_float32 splits joined reasons there.)
WIDE_WHY = (f"its outputs step far above float64 rounding on {LINE_POINTS} points within {LINE_SPAN:g} float32 ulps of its "
            "inputs, and far above what float32 rounding of its inputs and outputs could make: float64 code that "
            "resolves its inputs coarsely there (a small term added to a large one, 1 + x^2 at x = 1e-6, or values that "
            "underflow)")
_WIDE_MARK = "far above what float32 rounding of its inputs"
_F32_LEAST_STEP = 2.0**-149 / 8
_LAST: list = [None, ""]  # (key, answer) of the last forward_steps call: the jacobian's error estimate
# composes the same FD-JVPs four times over (two step scales, injected noise) at the very same inputs
# A smooth function's residual from the cubic shrinks by 2^4 = 16 (its quartic term) when the line is halved;
# float32's steps do not shrink while the half line still crosses several cells (4-8 each side).  SHRINKS_BY:
# the residual on the half line must stay above 1/4 of the full line's to count as steps (a pole at 1e-4 |x|,
# whose quartic term is 1e-8 |f| over the full line, gives 1/16; rounding steps give ~1/2 to 1).
SHRINKS_BY = 4.0
# Float32's steps on the full line: a residual of at most STEP_SHARE of the values' rise plus 4 eps32 of their
# size (measured on float32 code: <= 0.06 of the rise; a pole crossed: 0.5-0.8, a jump 0.4, a kink 0.15).
STEP_SHARE = 1 / 8


@functools.lru_cache(maxsize=1)
def _break_projectors() -> np.ndarray:
    # (candidates, LINE_POINTS, LINE_POINTS): I - V pinv(V) for the cubic plus a hinge max(0, t - c) and a
    # step (t > c) at each candidate c (every point of the line and every midpoint between two)
    t = line_t()
    cs = np.sort(np.concatenate([t, (t[1:] + t[:-1]) / 2]))
    out = []
    for c in cs:
        V = np.column_stack([np.vander(t / LINE_SPAN, 4), np.maximum(0.0, t - c) / LINE_SPAN, (t > c).astype(float)])
        out.append(np.eye(LINE_POINTS) - V @ np.linalg.pinv(V))
    P = np.stack(out)
    P.flags.writeable = False
    return P


def one_break(values, r) -> np.ndarray:
    """Per column of ``values`` (LINE_POINTS, m): True where one kink or jump on the line explains the
    residual ``r`` from the cubic -- the cubic plus a hinge and a step at one point leave under 1/16 of it.
    Float32's rounding is 16-32 steps along the line (each input crosses 8-16 cells on each side): one
    break takes away little of it (measured: tests/test_float32_hidden.py's float32 code keeps its mask)."""
    v = np.asarray(values, dtype=np.float64).reshape(LINE_POINTS, -1)
    with np.errstate(all="ignore"):
        best = np.min(np.max(np.abs(_break_projectors() @ v), axis=1), axis=0)
    return best <= np.asarray(r, dtype=np.float64).reshape(-1) / 16


# cell_aligned: the two probes of a point sit at +-IN_CELL of the smaller neighbour gap of its float32 rounding q
# (q's cell, under round-to-nearest, reaches half a gap either side: both probes round to q); their difference's
# residual from the cubic must stay under ALIGNED_SHARE of the full line's (float64 rounding of the smooth part:
# a few ulps, against the line's >= HIDDEN32_NAME_ULPS / NOISE_ULPS ulps; a step caught between the probes: its size)
IN_CELL = 0.45
ALIGNED_SHARE = 1 / 4


def cell_aligned(run, ins, r) -> np.ndarray:
    """Per output column: True where the steps (residual ``r`` on the probe line) are float32 rounding of the
    inputs.  ``ins``: the inputs at the probe line's points (LINE_POINTS, ...) each; ``run(inputs)`` the forward
    batched along the first axis.  Each point is snapped to float32 (q = fl32(p)) and the forward runs at q + w
    and q - w, w inside q's float32 cell (IN_CELL of the smaller neighbour gap, the same w along the line).
    Code that casts its inputs to float32 computes g(x) + h(fl32(x)): h is the same at both probes and cancels,
    leaving g(q + w) - g(q - w), smooth along the line.  Float64 code whose steps come from elsewhere (values
    that underflow, a matrix entry crossing a float64 ulp) steps between the probes of some points: the
    difference keeps steps of the line's size.  (A float32 cast of an intermediate value, sigmoid((x - y).float()),
    is not aligned with its inputs' cells either: it keeps the float32-sized estimate, without the claim.)"""
    snapped, ws = [], []
    u_all = _signs(sum(int(np.size(x[0])) for x in ins if np.issubdtype(x.dtype, np.floating)) or 1)
    at = 0
    with np.errstate(all="ignore"):
        for x in ins:
            if not np.issubdtype(x.dtype, np.floating) or not x[0].size:
                snapped.append(x)
                ws.append(None)
                continue
            x = np.asarray(x, dtype=np.float64)
            q32 = x.astype(np.float32)
            q = q32.astype(np.float64)
            gap = np.minimum(np.nextafter(q32, np.float32(np.inf)).astype(np.float64) - q,
                             q - np.nextafter(q32, np.float32(-np.inf)).astype(np.float64))
            ok = np.isfinite(q) & np.isfinite(gap)
            gap = np.where(ok, gap, 0.0).min(axis=0)  # (the same w at every point of the line)
            snapped.append(np.where(ok, q, x))
            k = int(x[0].size)
            ws.append(IN_CELL * gap * u_all[at : at + k].reshape(x.shape[1:]))
            at += k
        plus = np.asarray(run([q if w is None else q + w for q, w in zip(snapped, ws)]), dtype=np.float64)
        minus = np.asarray(run([q if w is None else q - w for q, w in zip(snapped, ws)]), dtype=np.float64)
        d = (plus - minus).reshape(LINE_POINTS, -1)
        rd = np.asarray(residual(d), dtype=np.float64).reshape(-1)
    return rd <= np.asarray(r, dtype=np.float64).reshape(-1) * ALIGNED_SHARE


def float32_sized(v, r, ins) -> np.ndarray:
    """Per column of the probe line's values ``v`` (LINE_POINTS, m): True where their residual ``r`` is no larger than
    float32 rounding of the inputs ``ins`` (the line's inputs, each (LINE_POINTS, ...)) and of the outputs could make.

    A float32 part h(fl32(x)) rounds its output to float32 (a few eps32 |v|: 4 eps32 max |v|) and its inputs by half a
    float32 ulp of x, <= eps32 |x| / 2 (the subnormal ulp 2^-149 at the least): that moves the output by its slope
    times eps32 |x| / 2, while the line moves x by up to LINE_SPAN eps32 max(1, |x|) and the output by its rise
    (ptp).  So an input's rounding is at most ptp |x| / (2 LINE_SPAN max(1, |x|)) -- STEP_SHARE (1/8, twice that
    at |x| >= 1) x ptp x min(1, |x|), the largest |x| of any input bounding every input's share.  At |x| >= 1 this
    is the bound ``steps`` applied; below 1 float32's cells shrink with |x| while the line does not, so steps as
    wide as at |x| = 1 are no float32 rounding: float64 code resolving its inputs coarsely."""
    v = np.asarray(v, dtype=np.float64).reshape(LINE_POINTS, -1)
    with np.errstate(all="ignore"):
        sizes = [np.max(np.abs(np.asarray(x, dtype=np.float64)), initial=0.0) for x in ins
                 if np.issubdtype(np.asarray(x).dtype, np.floating) and np.size(x)]
        share = min(1.0, max([_F32_LEAST_STEP * 8 / EPS32] + [float(a) for a in sizes if np.isfinite(a)]))
        bound = 4 * EPS32 * np.max(np.abs(v), axis=0) + STEP_SHARE * np.ptp(v, axis=0) * share
        return ~(np.asarray(r, dtype=np.float64).reshape(-1) > bound)


def classify(mask, aligned, sized) -> str:
    """The evidence sentence for steps (``mask``) that follow the inputs' float32 cells (``aligned``) and are sized
    like float32 rounding (``sized``): HIDDEN_WHY only where some column is all three; else WIDE_WHY (aligned, too
    large) or COARSE_WHY (not aligned)."""
    if (mask & aligned & sized).any():
        return HIDDEN_WHY
    return WIDE_WHY if (mask & aligned).any() else COARSE_WHY


def claims_float32(why: str) -> bool:
    """Whether the evidence ``why`` (one reason, or several joined by "; ") says the code computes in float32:
    some reason is not ``COARSE_WHY`` (its wording for one op or for the values)."""
    return any(part and _COARSE_MARK not in part and _WIDE_MARK not in part for part in why.split("; "))


def describe(op: str, why: str) -> str:
    """``op`` with what the probes said of it, for notes and reasons: it computes in float32 inside, or (COARSE_WHY)
    it resolves its inputs coarsely."""
    verb = "computes in float32 inside" if claims_float32(why) else "resolves its inputs more coarsely than float64"
    return f"{op} {verb} ({why})"


def _half_offsets(x) -> np.ndarray:
    return line_offsets(x) / 2


def steps(evaluate, floor, flipped: bool = True):
    """Per column of the values ``evaluate(offsets)`` returns -- a (LINE_POINTS, m) matrix of values at
    ``x + offsets(x)``, for the offset functions below --: True where they step like float32 rounding.  Three
    tests, each line evaluated only where the one before left a candidate:

    * on ``line_offsets`` the residual from the cubic exceeds ``floor`` (per column: the float64 rounding the
      caller's estimate assumes), and is no larger than float32's steps can be (STEP_SHARE);
    * on the half line it is still above 1/SHRINKS_BY of that (a smooth function's would shrink 16-fold: a
      pole or fast curve near x is not taken for steps);
    * on ``incell_offsets`` and ``incell_flipped`` (inside one float32 cell; ``flipped``: the inputs hold more
      than one element) the noise (``fdstep.noise_sigma``) is below 1 / (4 FD_NOISE_SIGMAS) of it:
      scale-free noise (an ill-conditioned float64 solve) is as large there, float32's steps are not there
      at all (such noise leaves residuals of ~3 sigma).

    Returns (mask, residuals)."""
    with np.errstate(all="ignore"):
        v = np.asarray(evaluate(line_offsets), dtype=np.float64).reshape(LINE_POINTS, -1)
        r = np.asarray(residual(v), dtype=np.float64).reshape(-1)
        # (float32's values are 2^-149 apart at the least: steps below that are float64's own, subnormals'
        # absolute quanta, where the floor, ulps of values that underflowed, is 0)
        mask = r > np.maximum(floor, _F32_LEAST_STEP)
        if not mask.any():
            return mask, r
        # no larger than float32's steps: output quanta of a few eps32 |f|, input cells (16-32 along the line)
        # each 1/16 or less of the rise; a pole or jump crossed by the line leaves 0.4-0.8 of it (measured)
        mask &= r <= np.ptp(v, axis=0) * STEP_SHARE + 4 * EPS32 * np.max(np.abs(v), axis=0)
        if not mask.any():
            return mask, r
        half = np.asarray(residual(np.asarray(evaluate(_half_offsets), dtype=np.float64))).reshape(-1)
        mask &= half > r / SHRINKS_BY
        if not mask.any():
            return mask, r
        # not one kink or jump crossed by the line: a piecewise-linear float64 op (np.interp at a knot) leaves
        # a residual that a hinge and a step at one point of the line take away; float32's 16-32 steps do not
        mask &= ~one_break(v, r)
        if not mask.any():
            return mask, r
        sigma = np.asarray(noise_sigma(np.asarray(evaluate(incell_offsets), dtype=np.float64))).reshape(-1)
        if flipped:
            sigma = np.maximum(sigma, np.asarray(noise_sigma(np.asarray(evaluate(incell_flipped), dtype=np.float64))).reshape(-1))
        mask &= r > 4 * _tol.FD_NOISE_SIGMAS * sigma
    return mask, r


def along(xs, offsets):
    """The inputs ``xs`` moved along a line ``offsets`` draws for all their float elements at once (one sign
    pattern across inputs: 1 / (x - a) with x and a moved alike would be constant but for rounding)."""
    floats = [np.issubdtype(x.dtype, np.floating) and x.size > 0 for x in xs]
    flat = np.concatenate([x.reshape(-1) for x, f in zip(xs, floats) if f] or [np.zeros(0)])
    off = offsets(flat) if flat.size else np.zeros((LINE_POINTS, 0))
    out, at = [], 0
    for x, f in zip(xs, floats):
        if f:
            out.append(x[None] + off[:, at : at + x.size].reshape((LINE_POINTS,) + x.shape))
            at += x.size
        else:
            out.append(np.broadcast_to(x, (LINE_POINTS,) + x.shape))
    return out


def forward_steps(name, run, xs, noise_ulps: float) -> str:
    """For a finite-difference JVP of the opaque forward ``run(batch)`` (inputs ``xs``, each batched along a
    new first axis): the evidence (a sentence) where its outputs step like float32 rounding (``steps``, with
    the JVP's rounding model, ``noise_ulps`` float64 ulps of the largest output, as the floor), else "".
    Outputs that are all float32 numbers are left to ``fdstep.float32_valued`` (the visible kind)."""
    try:
        key = (name, tuple((x.shape, x.dtype.str, x.tobytes()) for x in xs))
    except (AttributeError, TypeError):
        key = None
    if key is not None and _LAST[0] == key:
        return _LAST[1]
    first = []

    def evaluate(offsets):
        f = np.asarray(run(along(xs, offsets)), dtype=np.float64).reshape(LINE_POINTS, -1)
        first.append(f)
        return f

    with np.errstate(all="ignore"):
        f = evaluate(line_offsets)
        # (+ the inputs' own float64 rounding, |x f'| eps: f's rise over the line is |f'| x 16 eps32 max(1, |x|))
        level = noise_ulps * _EPS * (float(np.max(np.abs(f), initial=0.0)) + float(np.max(np.ptp(f, axis=0))) / (2 * LINE_SPAN * EPS32))
    why = ""
    if not float32_valued(f):
        mask, r = steps(lambda o: first[0] if o is line_offsets else evaluate(o), level,
                        sum(int(np.size(x)) for x in xs if np.issubdtype(x.dtype, np.floating)) > 1)
        if mask.any():
            line = along(xs, line_offsets)
            why = classify(mask, cell_aligned(run, line, r), float32_sized(f, r, line))
    if key is not None:
        _LAST[:] = [key, why]
    return why


_LEARN = [False]


@contextlib.contextmanager
def learning():
    """Inside the block (a ``verify_*`` run, which resets what its op learnt when it starts), an op whose
    outputs were seen stepping like float32 rounding is remembered as computing in float32 inside
    (``learnt``): later cases where its float32 part is flat over every probe (tanh saturated at x = 8:
    float32's tanh changes once every 0.3 in x) still get a float32 estimate.  Outside (a bare ``gs.check``)
    nothing is remembered: a case is judged on what its own probes show."""
    old = _LEARN[0]
    _LEARN[0] = True
    try:
        yield
    finally:
        _LEARN[0] = old


def learnt(spec, why: str) -> None:
    """Remember ``why`` on ``spec`` (``float32_seen``) inside ``learning()``: only float32 rounding of its inputs
    (``claims_float32``); steps not aligned with float32 cells (COARSE_WHY) were seen at one point, and
    remembering them would estimate every later case at float32 precision (an underflow near x = -735 did so)."""
    if _LEARN[0] and claims_float32(why) and not getattr(spec, "float32_seen", ""):
        spec.float32_seen = why
