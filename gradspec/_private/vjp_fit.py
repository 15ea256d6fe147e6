"""The arithmetic every wrong-gradient hypothesis shares: fit a factor, test whether a hypothesis explains the
code's answer, and read a Jacobian's columns and per-leaf gradients as flat vectors.

Private to the pattern modules (:mod:`gradspec._private.vjp_patterns`, :mod:`gradspec._private.vjp_broadcast`),
which re-export it; split out so both can use it without importing each other.

Example::

    >>> import numpy as np
    >>> from gradspec._private.vjp_fit import explains, fit
    >>> t = np.array([1.0, -2.0, 3.0])
    >>> fit(0.5 * t, t), explains(0.5 * t, 0.5 * t, t), explains(0.5 * t, -t, t)
    (0.5, True, False)
"""

from __future__ import annotations

import numpy as np

__all__ = ["EXPLAINED", "HYP_RTOL", "columns", "flat", "fit", "explains"]

# A hypothesis "explains" a wrong gradient when what is left of the error under it is at most this
# fraction of the error itself: the hypotheses are exact transformations of J^T g (a sign, a factor,
# a slice, a permutation), so a true one leaves rounding (1e-16 relative) or, with a finite-difference
# JVP as the twin, that estimate's error (about 1e-9 relative) -- far below 1 % of any error that
# failed the comparison (>= its tolerance, itself >= 1e-12 relative).
EXPLAINED = 1e-2
# What a true hypothesis may leave, relative to the largest gradient: the twin's own error (1e-16 for an exact
# JVP rule, ~1e-9 for a finite-difference JVP, more for finite differences of a stiff function), far below it.
HYP_RTOL = 1e-5


def columns(J, leaves) -> np.ndarray:
    idx, off = [], 0
    names = {l.name for l in leaves}
    for name, shape in J.col_blocks:
        size = int(np.prod(shape))
        if name in names:
            idx.extend(range(off, off + size))
        off += size
    return np.array(idx, dtype=int)


def flat(per_leaf: dict, leaves) -> np.ndarray:
    parts = [np.asarray(per_leaf[l.name], dtype=np.float64).reshape(-1) for l in leaves]
    return np.concatenate(parts) if parts else np.zeros(0)


def fit(u: np.ndarray, t: np.ndarray) -> float | None:
    den = float(t @ t)
    return float(u @ t) / den if den > 0 and np.isfinite(den) else None


def explains(u: np.ndarray, h: np.ndarray, t: np.ndarray) -> bool:
    """Hypothesis ``h`` explains ``u`` (which should be ``t``): element by element, it leaves at most 1 % of
    that element's error, plus a floor for the twin's own error (rounding, a finite-difference JVP's): 1e-8
    of the largest value, or twice the largest error among the elements that agree, if more."""
    if u.shape != h.shape or u.shape != t.shape:
        return False
    with np.errstate(all="ignore"):
        err = np.abs(u - t)
        scale = max(float(np.max(np.abs(u), initial=0.0)), float(np.max(np.abs(t), initial=0.0)))
        top = float(np.max(err, initial=0.0))
        # The twin's own noise, as seen on the elements that agree (errors below 1e-3 of the largest):
        # finite differences next to a kink are off by far more than 1e-8 relative there.
        noise = float(np.max(err[err <= 1e-3 * top], initial=0.0))
        floor = max(1e-8 * scale, 2 * noise)
        if not top > floor:
            return False
        left = np.abs(u - h)
        # ... and what it leaves is small against the gradients themselves, not only against a huge error
        # (u = 1 is not "J^T·1 = 2" because J^T·g is -744): a true hypothesis is exact up to the twin's error.
        return bool(np.all(left <= EXPLAINED * err + floor) and np.all(left <= HYP_RTOL * scale + floor))
