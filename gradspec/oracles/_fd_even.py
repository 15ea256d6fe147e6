"""Finite differences where the even part of s leaks into the corrected estimate (private to ``gradspec.oracles.fd``).

Along element j, write ``s(x + t e_j) - s(x) = O(t) + E(t)`` (odd and even parts).  The central difference
``D = (O(h) - O(-h)) / 2h`` sees the odd part only.  Its correction comes from the third difference, which takes
``s(x + 2h)`` and no ``s(x - 2h)``, so it sees both: ``h^3 T = [O(2h) - 2 O(h)] + [E(2h) - 4 E(h)]``.  The odd bracket
is ``h^3 f''' + ...`` (the truncation of D that the correction removes and whose size is the error estimate); the
even bracket is ``h^4 f''''/2 + ...``, zero for a quadratic even part, and lands in the corrected estimate as an error
``-h^3 f''''/12`` that the estimate ``|h^2 T / 6|`` does not bound: it is sound only while ``h |f''''| << |f'''|``.

That fails where f''' is small for the function's scale while f'''' is not (tryout10 F1): a LayerNorm row of equal
values followed by GELU.  With rstd = 1/sqrt(1e-5) = 316 and w = 10, z = w xhat moves ~2600 t; GELU has a z^2 term
and no z^3 term at 0, so the even part has the scale rho ~ 4e-4 and f'''' ~ f' 24 / rho^3 ~ 8e13, while f''' comes
from rstd's own curvature (scale ~1e-2): the estimate said 2e-3, the error was 1.4e-3 at [3, 0] and up to 6.5x the
estimate at [2, 5], and gs.check called a correct op wrong.

The 4 values of the stencil cannot tell f''' from h f''''.  ``suspects`` therefore asks a model of the function's
scale: Cauchy's estimate |f^(k)| / k! <~ M / rho^k, rho read off the stencil's own coefficients (f' / f'' and
f' / f'''; the smaller: a larger leak), predicts the leak ``|f''| h^3 / rho^2`` (the leading term of
``(E(2h) - 4 E(h)) / 6h`` with the even coefficients e_k ~ e_1 / rho^(2k-2)).  Where that can exceed
FD_EVEN_SHARE of the element's error estimate, ``mirror`` evaluates ``s(x - 2h e_j)`` (one point per such element)
and replaces the estimate by the symmetric 5-point one, ``R5 = (4 D(h) - D(2h)) / 3``: the even part cancels
exactly, its error is ``-h^4 f^(5) / 30`` and its estimate ``|D(h) - R5| = h^2 f'''/6 + h^4 f^(5)/24`` (the classic
Richardson pair on the odd part alone, sound under the assumption the design already makes, one order higher).
The rounding share stays ``2.4 delta / h`` (R5 and its correction sum to 2 / h in |coefficients|).  Where
``s(x - 2h)`` is not finite (a domain edge there), the 3-point estimate stays and the predicted leak is added to its
error bound.

On the examples at hand (rho from f' / f'' = 3.9e-4 against the series' 9.4e-4) the prediction is 6x the actual
leak.  The model can under-predict where f'' is accidentally small as well as f''' (an even part that starts at
t^4): then the estimate is as unsound as before, no worse.  Elements the model clears cost nothing more; a
flagged one costs one evaluation.  The float32 estimate (``fd._float32_gradient``) and the refinement at h / 16
(``_fd_refine``, where the leak shrinks 16x faster than the estimate) keep the 3-point stencil.
"""

from __future__ import annotations

import numpy as np

from .. import tolerances as _tol
from ._fd_stencil import _RD_EPS, COARSE, _points
from ._fd_values import _s_values

__all__ = ["suspects", "mirror", "correct"]

_NONE = np.empty(0, dtype=np.intp)
_PER_PASS = 2**17  # leaf elements per batched evaluation (fd.MAX_BATCH_ELEMENTS)


def _predicted_leak(s, s0, h, top=None):
    """The model's leak ``|f''| h^3 / rho^2`` per element, from the (3, n) stencil values (NaN where s is flat).
    ``top`` (the largest |s| per element): |f''| is taken less the second difference's rounding 4 RD_EPS top / h^2,
    so that rounding alone (a gradient element that is 0 up to noise: f' ~ f'' ~ noise, rho ~ h) flags nothing.
    A true |f''| under that level leaks at most 4 RD_EPS top h / rho^2, below 1.7 (h / rho)^2 of the estimate's
    rounding share 2.4 RD_EPS top / h: material only for rho ~ h, where the truncation term already calls the
    step too coarse (``_fd_refine``)."""
    sp, sm, s2 = s
    with np.errstate(all="ignore"):
        d = np.abs(sp - sm) / (2 * h)
        a = np.abs(sp - 2 * s0 + sm) / (h * h)
        if top is not None:
            a = np.maximum(a - 4 * _RD_EPS * top / (h * h), 0.0)
        t = np.abs(s2 - 3 * sp + 3 * s0 - sm) / (h * h * h)
        rho = np.minimum(2 * d / a, np.sqrt(6 * d / t))
        return a * h**3 / (rho * rho)


def suspects(s, s0: float, h, scale=None, rows=None) -> np.ndarray:
    """Elements whose predicted leak exceeds FD_EVEN_SHARE of a lower bound of their error estimate
    (``_fd_lazy.settled``'s: the truncation term plus the rounding share without S and the floor), among those
    the 3-point estimate does not call too coarse.  A too coarse one goes to refinement as before: there a kink
    at x shows (|x| at 0: the 3-point correction is a third of the jump in slope, and ``_fd_refine`` names the
    kink), which the symmetric stencil would hide (its estimate there is the average of the two slopes).
    ``scale``: the gradient's scale in that test (the largest |estimate| of all elements; default: of these).

    ``_predicted_leak``'s test with h multiplied out (it runs on every case, so in fewer numpy calls): with
    O = |s+ - s-| (2h |f1|), E = |s+ + s- - 2 s0| less its rounding (h^2 |f2|), T = |s2 - 3 s+ + 3 s0 - s-|
    (h^3 |f3|), h times the leak is E max(E^2 / O^2, T / 3O), h times the lower bound T / 6 + 2.4 RD_EPS top.
    Up to CLEAR_N elements ``_cleared`` first rules every element out in Python floats where it can (``rows``: s as
    lists, ``fd``'s ``small_s`` up to SMALL_N; above, ``s.tolist()``): it runs on every FD estimate, and costs ~0.5 us
    at n = 10, ~6.5 us with the conversion at n = 100, against ~13.5 us for the numpy test at any n up to a few
    hundred (CPU time, session 16).  Its answer is a necessary condition for a flag element by element, whatever n."""
    n = s.shape[1]
    if not n:
        return _NONE
    if n <= CLEAR_N and _cleared(s.tolist() if rows is None else rows, s0):
        return _NONE
    return _flag(s, s0, h, scale)


def _flag(s, s0: float, h, scale) -> np.ndarray:
    """``suspects``' numpy test."""
    sp, sm, s2 = s
    with np.errstate(all="ignore"):
        top = np.abs(sp)
        np.maximum(top, np.abs(sm), out=top)
        np.maximum(top, np.abs(s2), out=top)
        np.maximum(top, abs(s0), out=top)
        o = np.abs(sp - sm)
        e = sp + sm
        e -= 2 * s0
        np.abs(e, out=e)
        e -= 4 * _RD_EPS * top
        np.maximum(e, 0.0, out=e)
        t = s2 - 3 * sp
        t += 3 * s0
        t -= sm
        np.abs(t, out=t)
        leak = np.maximum(e * e / (o * o), t / (3 * o))
        leak *= e
        flagged = leak > _tol.FD_EVEN_SHARE * (t / 6 + 2.4 * _RD_EPS * top)
        if not _ANY(flagged):
            return _NONE
        r = np.abs((sp - sm) / (2 * h) - (s2 - 3 * sp + 3 * s0 - sm) / (6 * h))
        if scale is None:
            scale = max(float(np.nanmax(r, initial=0.0)), 1e-300)
        coarse = ~(t / (6 * h) <= COARSE * np.maximum(r, scale))  # (_fd_refine's test, without its err half)
        return np.flatnonzero(flagged & ~coarse)


_ANY = np.logical_or.reduce
# Elements up to which ``suspects`` tries ``_cleared`` first (session 16, helper fdplain): it took SMALL_N (20), the
# size up to which ``fd`` has s as lists already; the conversion and the Python loop stay under the numpy test's
# ~13.5 us up to ~220 elements (~0.06 us an element against the test's fixed cost), so a margin below that.
CLEAR_N = 160
_K = _tol.FD_EVEN_SHARE * 2.4 * _RD_EPS / 2  # (half the rounding share of the lower bound, per unit of top)
_Q = _tol.FD_EVEN_SHARE / 4  # (half the largest E / O the T / 3O branch can flag at)
_TINY = 2.0**-300


def _cleared(rows, s0: float) -> bool:
    """Whether ``suspects``' test provably flags no element of the stencil ``rows`` (lists sp, sm, s2): a
    necessary condition for a flag, in Python floats, so that the numpy test runs only where it can fire.

    Why it cannot miss a flagged element: ``E`` and ``O`` below are the very floats the test starts from
    (the same operations in the same order: IEEE sums and differences round alike in Python and numpy), and its
    e = max(E - 4 RD_EPS top, 0) <= E.  E == 0: e = 0, so leak = max(..) * 0 is 0 or NaN and never exceeds the
    bound (>= 0).  Otherwise, with q = E / O and m = max(|s0|, |sp|, |sm|) <= top, the bound B = share (T / 6 +
    2.4 RD_EPS top) is >= share T / 6 and >= 2 _K m; the cleared element has q <= share / 4 and q^2 E < _K m:
    the E^2 / O^2 branch gives e^3 / O^2 <= q^2 E < _K m <= B / 2, the T / 3O branch e T / 3O <= q T / 3 <=
    share T / 12 <= B / 2 (T = 0 leaves the first branch; T infinite or NaN makes the test's comparison false).
    The factor 2 on each side covers the ~10 roundings between these reals and the floats either test computes
    (each within (1 +- 2^-53) where normal); E >= 2^-300 keeps E, O >= 16 E and their squares normal, and a
    result below that range is off by <= 2^-1075 (times E at most, for the products that follow), ~2^-1020 of
    the margin _K m >= 8 _K E.  NaN or infinite E, O or s0 fail a comparison below, leaving the element to the
    full test; so do O = 0 < E and E < 2^-300.  (An overflowing O = s+ - s- clears, as the test: T / 3O is 0.)"""
    sp, sm = rows[0], rows[1]
    s0 = float(s0)
    t0 = 2 * s0
    a0 = abs(s0)
    for a, b in zip(sp, sm):
        e = abs(a + b - t0)
        if e == 0.0:
            continue
        o = abs(a - b)
        if not o > 0.0:
            return False
        q = e / o
        k = _K * max(a0, abs(a), abs(b))
        if not (q <= _Q and q * q * e < k and e >= _TINY):
            return False
    return True


_MINUS2 = np.array([-2.0])  # (the mirror point's factor: x - 2 h e_j)


def _mirror_values(case, x64, leaves, seeds64, idx, h):
    """s and S at x - 2 h_j e_j for each element j of ``idx`` (``h``: steps indexed by global element; chunks of
    at most _PER_PASS leaf elements), the stencil's own batches (``_fd_stencil._points``)."""
    per = max(1, _PER_PASS // max([v.size for v in x64.values()] + [1]))
    s_out, S_out = np.empty(idx.size), np.empty(idx.size)
    for a in range(0, idx.size, per):
        batches, k = _points(x64, leaves, idx[a:a + per], h, _MINUS2)
        s, S = _s_values(case._evaluate(batches, 1), case.roots, seeds64, k)
        s_out[a:a + k], S_out[a:a + k] = s, S
    return s_out, S_out


def mirror(case, x64, leaves, p, h, floor: float, idx, out) -> int:
    """The 5-point estimate at the ``suspects`` ``idx`` of the first pass ``p``: ``out`` = (r, err, trunc), updated
    in place; returns the evaluations spent."""
    r, err, trunc = out
    sub = (r[idx], err[idx], trunc[idx])
    spent = correct(case, x64, leaves, p.seeds64, (p.s[:, idx], p.S[:, idx], p.s0, p.S0), h[idx], idx, floor, sub,
                    np.arange(idx.size))
    r[idx], err[idx], trunc[idx] = sub
    return spent


def correct(case, x64, leaves, seeds64, values, hk, elems, floor: float, out, local=None, scale=None) -> int:
    """The 5-point estimate for elements ``elems`` (global indices) measured at steps ``hk``: ``values`` = (s, S,
    s0, S0), s and S (3, k) at x + f hk e_j; ``out`` = (r, err, trunc) of those k elements, updated in place at
    ``local`` (default: ``suspects(s, s0, hk, scale)``); returns the evaluations spent."""
    s, S, s0, S0 = values
    if local is None:
        local = suspects(s, s0, hk, scale)
    if not local.size:
        return 0
    r, err, trunc = out
    at = np.asarray(elems)[local]
    steps = np.zeros(int(at.max()) + 1)
    steps[at] = hk[local]  # (indexed by global element, as _points reads h)
    sm2, Sm2 = _mirror_values(case, x64, leaves, seeds64, at, steps)
    sp, sm, s2 = s[:, local]
    hj = hk[local]
    with np.errstate(all="ignore"):
        d1 = (sp - sm) / (2 * hj)
        corr = ((s2 - sm2) / (4 * hj) - d1) / 3
        top = np.maximum(np.maximum(np.abs(s[:, local]).max(axis=0), np.abs(sm2)), abs(s0))
        Sx = np.maximum(np.maximum(S[:, local].max(axis=0), Sm2), S0)
        e5 = np.abs(corr) + 2.4 * np.maximum(_RD_EPS * (Sx + top), floor) / hj
    ok = np.isfinite(sm2) & np.isfinite(Sm2) & np.isfinite(e5)
    j = local[ok]
    r[j], err[j], trunc[j] = (d1 - corr)[ok], e5[ok], np.abs(corr)[ok]
    if not ok.all():  # (no usable x - 2h: the 3-point estimate, its bound raised by the predicted leak)
        j = local[~ok]
        err[j] += _predicted_leak(s[:, j], s0, hk[j])
    return int(local.size)
