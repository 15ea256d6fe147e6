"""When a finite-difference step can be trusted: the second-difference scaling test.

For a smooth function, ``K(h) = f(x + h t) - 2 f(x) + f(x - h t) = h^2 f'' + h^4 f''''/12 + ...``,
so ``K(h) / K(h/2)`` lies between 4 (the h^2 term dominates) and 16 (f'' = 0 along t, the h^4
term dominates).  A kink at x gives 2 (K = h |jump in slope|), a jump or a pole that the stencil
crosses gives ~1 or anything at all, and so does noise far above the rounding model.  So a step
whose ratio leaves [RATIO_LO, RATIO_HI] (3 and 20: a margin of 25% around 4 and 16) is too large
for the local scale of the function -- whatever |x| is -- and is shrunk (by SHRINK, up to
SHRINKS times: 8^4 = 4096, from eps^(1/5) |x| ~ 7e-4 |x| down to ~2e-7 |x|, where the 4-point
rule's rounding error is still ~eps / h ~ 1e-9 relative).  Where no step passes, the caller
refuses (with the reason) instead of returning an estimate it cannot vouch for.

Where both K values are within NOISE_K times the rounding model of a second difference
(4 values x ``noise_ulps`` ulps of the largest value) the ratio says nothing and the step passes:
the function is locally linear to rounding accuracy (piecewise-linear code between its kinks).
Where the step fails that test, the forward's noise is measured (``noise_sigma``) and the test is
repeated with 4 x FD_NOISE_SIGMAS sigma as the floor (a second difference carries ~2.4 sigma of
noise, gradspec.tolerances): a linear but ill-conditioned solve is noisy, not kinked.
"""

from __future__ import annotations

import functools
import math
import operator

import numpy as np

from .. import tolerances as _tol

__all__ = ["bad_directions", "RATIO_LO", "RATIO_HI", "SHRINK", "SHRINKS", "noise_pattern", "noise_sigma",
           "line_sigma", "float32_valued", "EPS32"]

RATIO_LO, RATIO_HI = 3.0, 20.0
SHRINK, SHRINKS = 8.0, 4
NOISE_K = 8.0
EPS = float(np.finfo(np.float64).eps)
EPS32 = float(np.finfo(np.float32).eps)


def _ratios(f1, f2, out, noise_ulps, sigma=None):
    k = f1.shape[1]
    with np.errstate(all="ignore"):
        k1 = (f1[0] - 2 * out + f1[1]).reshape(k, -1)
        k2 = (f2[0] - 2 * out + f2[1]).reshape(k, -1)
        top = np.maximum(np.abs(f1).max(axis=0), np.abs(f2).max(axis=0)).reshape(k, -1)
        floor = NOISE_K * 4 * noise_ulps * EPS * np.maximum(top, np.abs(np.asarray(out)).reshape(1, -1))
        if sigma is not None:  # the forward's measured noise: a second difference carries ~2.4 sigma of it
            floor = np.maximum(floor, 4 * _tol.FD_NOISE_SIGMAS * np.asarray(sigma).reshape(1, -1))
        ratio = k1 / np.where(k2 != 0, k2, np.nan)
        signal = (np.abs(k1) > floor) | (np.abs(k2) > floor)
    return ratio, signal


def bad_directions(f1, f2, out, noise_ulps: float, sigma=None) -> np.ndarray:
    """Per direction (axis 1 of the raw stencils ``f1`` at h and ``f2`` at h/2, whose first two
    rows are ``f(x + h t)`` and ``f(x - h t)``): True where some output element's second
    differences do not scale like a smooth function's.  ``sigma``: the forward's measured noise
    per output element (``noise_sigma``), when the rounding model alone is not enough."""
    ratio, signal = _ratios(f1, f2, out, noise_ulps, sigma)
    ok = ~signal | ((ratio >= RATIO_LO) & (ratio <= RATIO_HI))
    return ~ok.all(axis=1)


# ---------------------------------------------------------------------------------------------
# measured forward noise (gradspec.tolerances: FD_NOISE_POINTS): one mechanism for the FD oracle
# and the finite-difference JVPs
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def noise_pattern(n: int) -> np.ndarray:
    """(FD_NOISE_POINTS, n) offsets in units of the step: t * u / FD_NOISE_SPACING on one line
    (t = -7.5 .. 7.5, u random signs, fixed per n so that a case always gets the same line)."""
    m = _tol.FD_NOISE_POINTS
    u = np.random.default_rng(n).choice([-1.0, 1.0], n)
    out = np.outer(np.arange(m) - (m - 1) / 2, u) / _tol.FD_NOISE_SPACING
    out.flags.writeable = False
    return out


# median |4th difference| of Gaussian noise sigma: 0.6745 (the median of |N(0, 1)|) x sqrt(70)
# (a 4th difference weighs 5 values by 1, -4, 6, -4, 1: variance 70 sigma^2)
_MEDIAN_D4 = 0.6745 * 70**0.5


def noise_sigma(line, axis: int = 0):
    """Rounding noise of values measured on the noise line (along ``axis``): the median absolute
    4th difference, scaled to sigma (gradspec.tolerances: FD_NOISE_POINTS).  4th differences
    cancel the smooth part (a cubic exactly); the median ignores the <= 4 of the 12 windows that
    a kink or a jump inside the line spoils, so a kink at x is not mistaken for noise (a
    least-squares fit's residual would be: a kink leaves one of the size of the kink).  A scalar
    for a 1-D line, else one value per remaining element; non-finite lines measure nothing (0):
    the stencils' own non-finite checks speak for such points."""
    line = np.moveaxis(np.asarray(line, dtype=np.float64), axis, 0)
    m = line.shape[0]
    if m < _tol.FD_NOISE_POINTS:
        return 0.0 if line.ndim == 1 else np.zeros(line.shape[1:])
    flat = line.reshape(m, -1)
    with np.errstate(all="ignore"):
        sig = np.median(np.abs(np.diff(flat, 4, axis=0)), axis=0) / _MEDIAN_D4
    sig = np.where(np.isfinite(flat).all(axis=0), sig, 0.0)
    return float(sig[0]) if line.ndim == 1 else sig.reshape(line.shape[1:])


def line_sigma(values) -> float:
    """``noise_sigma`` of one line given as a list of Python floats, without numpy: the same 4th
    differences (subtracted in ``np.diff``'s order), the same median (the mean of the two middle
    values of the sorted 12), the same division, so the same float.  The FD oracle measures one
    such line per case, where ``np.median``'s ~30 us were a quarter of a small case's whole cost.

    The differences of the 16 points are written out (54 subtractions on local names: a third of
    the instructions of four list passes, ~15% of a small case's FD).  Where their sum is not
    finite (a point not finite, a NaN from inf - inf, an overflow) ``_line_sigma_checked`` decides:
    no operation here turns a non-finite value into a finite one, so a finite sum means every
    point and every difference was finite, where both give the same float."""
    if len(values) != 16:  # == _tol.FD_NOISE_POINTS (asserted below)
        return _line_sigma_checked(values)
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = values
    b0, b1, b2, b3, b4, b5, b6 = a1 - a0, a2 - a1, a3 - a2, a4 - a3, a5 - a4, a6 - a5, a7 - a6
    b7, b8, b9, b10, b11 = a8 - a7, a9 - a8, a10 - a9, a11 - a10, a12 - a11
    b12, b13, b14 = a13 - a12, a14 - a13, a15 - a14
    c0, c1, c2, c3, c4, c5, c6 = b1 - b0, b2 - b1, b3 - b2, b4 - b3, b5 - b4, b6 - b5, b7 - b6
    c7, c8, c9, c10, c11, c12, c13 = b8 - b7, b9 - b8, b10 - b9, b11 - b10, b12 - b11, b13 - b12, b14 - b13
    d0, d1, d2, d3, d4, d5, d6 = c1 - c0, c2 - c1, c3 - c2, c4 - c3, c5 - c4, c6 - c5, c7 - c6
    d7, d8, d9, d10, d11, d12 = c8 - c7, c9 - c8, c10 - c9, c11 - c10, c12 - c11, c13 - c12
    e = [abs(d1 - d0), abs(d2 - d1), abs(d3 - d2), abs(d4 - d3), abs(d5 - d4), abs(d6 - d5),
         abs(d7 - d6), abs(d8 - d7), abs(d9 - d8), abs(d10 - d9), abs(d11 - d10), abs(d12 - d11)]
    if not math.isfinite(sum(e)):
        return _line_sigma_checked(values)
    e.sort()
    return (e[5] + e[6]) / 2 / _MEDIAN_D4


assert _tol.FD_NOISE_POINTS == 16, "line_sigma writes out the differences of 16 points"


def _line_sigma_checked(values) -> float:
    """``line_sigma`` for any line: lists, non-finite points and differences included."""
    v = values
    if len(v) != _tol.FD_NOISE_POINTS:
        return noise_sigma(np.asarray(v, dtype=np.float64))
    if not all(map(math.isfinite, v)):
        return 0.0
    for _ in range(4):
        v = list(map(operator.sub, v[1:], v))
    d = sorted(map(abs, v))
    if d[0] != d[0] or d[-1] != d[-1] or not all(map(operator.eq, d, d)):  # NaN sorts anywhere
        return noise_sigma(np.asarray(values, dtype=np.float64))
    mid = len(d) // 2
    return (d[mid - 1] + d[mid]) / 2 / _MEDIAN_D4


# ---------------------------------------------------------------------------------------------
# float32 computation inside a float64 forward: one test for the FD oracle and the FD-JVPs
# ---------------------------------------------------------------------------------------------


def float32_valued(values) -> bool:
    """True where ``values`` -- an opaque forward's outputs over a finite-difference stencil of float64
    inputs -- say the forward computes in float32 inside (``x.float()`` ... cast back): every value is a
    float32 number (or the dtype is float32), and at least one needs more than 16 significant bits.

    Why that decides: float64 code evaluated at ``x + h`` (h a float64 step, with bits far below float32's
    24) lands on a float32 number with probability ~2^-29 per value, so all of a stencil's dozens of values
    being float32 numbers never happens by chance; a float32 result cast back always is one.  Few-bit
    values (0, +-1, 0.5, an integer, a clamp bound, a quantizer's floor(4 x) / 4 = 296.75: 11 bits) are
    float32 numbers for float64 code too (a constant, a staircase), so they prove nothing: at least one value
    with a 17th significant bit is required.  A float32 tanh, exp, product of perturbed inputs has ~24: each
    has 16 or fewer with probability 2^-8, so a stencil's dozens of values all do essentially never.  (At 8
    bits a correct floor(4 x) / 4 near x = 300 was taken for float32, stepped at the float32 step 1.5 over
    its 0.25-wide stairs, and called wrong.)

    The common case (float64 code) is settled by the last value alone: one conversion, no array pass.
    """
    v = np.asarray(values)
    if v.dtype == np.float32:
        return v.size > 0
    if v.dtype != np.float64 or not v.size:
        return False
    last = float(v.flat[-1])
    if float(np.float32(last)) != last and last == last:  # (NaN: decided below, as not float32)
        return False
    with np.errstate(all="ignore"):
        if not np.array_equal(v, v.astype(np.float32)):
            return False
        m = np.frexp(v[np.isfinite(v)])[0] * 65536.0
    return bool((m != np.floor(m)).any())
