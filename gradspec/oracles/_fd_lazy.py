"""Finite differences' error bound, computed when first asked for (private to ``gradspec.oracles.fd``).

Most checks agree: there the estimate's error bound decides nothing.  ``gs.check`` compares first
without it (``gradspec._check_lazy``); the allowance it adds to each pair is >= 0, so an estimate that
agrees without it agrees with it.  What only that bound needs is therefore computed on first use and
memoised: ``S = sum_r <|seed_r|, |f_r|>`` at every point of the batched pass (the rounding model), the
noise line's sigma, and the per-element error (``LazyErrors``).  Everything that can refuse a case or
changes the estimate itself (the kink and reach tests, the staircase and noise probes, refinement of a
step too coarse, float32 code) still runs at once: the lazy path is taken only where no element is too
coarse (``settled``), where refinement and the noise test provably do nothing.

Each deferred value is the very float the eager code computes (the same functions on the same inputs):
``tests/test_fd_lazy.py`` compares both on a few hundred cases.

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec.oracles.fd import fd_gradient
    >>> case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    >>> res = fd_gradient(case)
    >>> res.error.pending, np.allclose(res.grads["x"], np.exp([0.5, 2.0]))
    (True, True)
    >>> bool(res.error["x"][0] < 1e-6), res.error.pending
    (True, False)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .. import engine as _engine
from .._private.fdstep import line_sigma
from ._fd_stencil import COARSE, EPS, ROUNDING_DEPTH

__all__ = ["LazyErrors", "Pass", "Rounding", "settled", "settled_small", "error", "error_small"]


class LazyErrors(Mapping):
    """leaf name -> per-element error estimate, computed on first access by ``fn()`` (then kept).

    ``pending`` says whether it is still to be computed (``gs.check`` compares without it while it is).
    Pickled and copied as the plain dict it stands for."""

    __slots__ = ("_fn", "_d", "lower")

    def __init__(self, fn, lower: dict):
        self._fn, self._d = fn, None
        # leaf -> a lower bound of each element's error estimate, known without computing it (``settled``)
        self.lower = lower

    @property
    def pending(self) -> bool:
        return self._d is None

    def _get(self) -> dict:
        d = self._d
        if d is None:
            with _engine._quiet_fp():  # (as fd's oracle_call: nothing to enter inside gs.check, which ignores them)
                d = self._d = self._fn()
            self._fn = None
        return d

    def __getitem__(self, key):
        return self._get()[key]

    def __iter__(self):
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __repr__(self) -> str:
        return repr(self._get())

    def __reduce__(self):
        return (dict, (self._get(),))


class Rounding:
    """The inputs of the rounding part of the error bound: S at every point of the pass (``S_of()`` gives
    ``(S rows, S0, S as lists or None)``, the eager code's values) and the noise line's sigma, each
    computed on first use."""

    __slots__ = ("_S_of", "_line", "_S", "_sigma")

    def __init__(self, S_of=None, line=(), S=None, sigma=None):
        self._S_of, self._line, self._S, self._sigma = S_of, line, S, sigma

    def S(self) -> tuple:
        got = self._S
        if got is None:
            got = self._S = self._S_of()
            self._S_of = None
        return got

    def sigma(self) -> float:
        got = self._sigma
        if got is None:
            got = self._sigma = line_sigma(self._line) if len(self._line) else 0.0
        return got


class Pass:
    """What the batched evaluation of the stencil leaves for the estimate.  ``S``, ``S0`` and ``sigma`` (the
    rounding model's inputs) are computed when first asked for (``Rounding``): on most cases only
    the error bound needs them, and it is itself computed when first asked for."""

    __slots__ = ("center", "vfloor", "seeds64", "s0", "s", "reach", "evaluations", "line", "sl", "tops", "f32",
                 "rounding")

    def __init__(self, center, vfloor, seeds64, s0, s, reach, evaluations, rounding, line=(), sl=None, tops=None,
                 f32=""):
        self.center = center  # name -> value at the case's inputs
        self.vfloor = vfloor  # the rounding floor of the values (VALUE_DEPTH)
        self.seeds64 = seeds64
        self.s0 = s0
        self.s = s  # (3, n): s at x + f h e_j
        self.reach = reach  # watched name -> how far each element moves over the stencil
        self.evaluations = evaluations
        self.rounding = rounding  # S and the noise line's sigma, when asked for (``Rounding``)
        self.line = line  # s along the noise line (_staircase)
        self.sl = sl  # the stencil rows of s as lists of Python floats (n <= SMALL_N, inline)
        self.tops = tops  # watched leaf -> its largest reach, where already known (_leaf_reach_small)
        self.f32 = f32  # a user op whose values over the pass were all float32 numbers (_fd_probes.float32_node)

    @property
    def S(self):  # (3, n): S at x + f h e_j
        return self.rounding.S()[0]

    @property
    def S0(self) -> float:
        return self.rounding.S()[1]

    @property
    def sigma(self) -> float:  # the forward's measured noise (FD_NOISE_POINTS)
        return self.rounding.sigma()

    @property
    def lists(self):  # (s, S) stencil rows as lists of Python floats (n <= SMALL_N, inline), else None
        Sl = self.rounding.S()[2] if self.sl is not None else None
        return None if Sl is None else (self.sl, Sl)

    def with_f32(self, f32: str) -> Pass:
        return Pass(self.center, self.vfloor, self.seeds64, self.s0, self.s, self.reach, self.evaluations,
                     self.rounding, self.line, self.sl, self.tops, f32)


def settled_small(sl, s0: float, hl, vfloor: float):
    """``(r, lower, (trunc, top))`` on Python floats where nothing but the error bound is left to decide, else None: ``r`` the
    estimate (every stencil value, s0 and step finite, every ``r_j`` and truncation term finite, no element too
    coarse: max trunc <= COARSE * max(max |r|, 1e-300)), ``lower`` a lower bound of each element's error
    estimate, and per element the truncation term and the largest |s| (``error_small`` makes the error bound of
    them).  Then ``_estimate_small``'s refine flag is False whatever the error is, and ``_noise_blocked``
    finds nothing (it needs trunc_j > COARSE * max(|r_j|, scale) >= max trunc).  ``r``: the same operations
    in the same order as ``_estimate_small``, so the same floats.

    ``lower``: the error estimate is ``t + 2.4 max(RD_EPS (max S + top), floor) / h`` with S >= 0 (sums of
    products of absolute values) and floor >= ``vfloor`` (the noise line can only raise it); leaving S out
    and taking ``vfloor`` gives ``t + 2.4 max(RD_EPS top, vfloor) / h``, no larger in floating point either
    (each operation is monotone and rounds monotonically), and needs neither S nor the noise line."""
    sp_, sm_, s2_ = sl
    isfinite = math.isfinite
    if not isfinite(s0 + sum(hl) + sum(sp_) + sum(sm_) + sum(s2_)):
        return None
    s03, a0 = 3 * s0, abs(s0)
    r, lower, trunc, tops, tmax = [], [], [], [], 0.0
    for sp, sm, s2, hj in zip(sp_, sm_, s2_, hl):
        correction = (s2 - 3 * sp + s03 - sm) / (6 * hj)
        r.append((sp - sm) / (2 * hj) - correction)
        t = abs(correction)
        if t > tmax:
            tmax = t
        top = abs(sp)
        x = abs(sm)
        if x > top:
            top = x
        x = abs(s2)
        if x > top:
            top = x
        if a0 > top:
            top = a0
        delta = _RD_EPS * top
        if vfloor > delta:
            delta = vfloor
        lower.append(t + 2.4 * delta / hj)
        trunc.append(t)
        tops.append(top)
    if not r:
        return None
    rmax = max(map(abs, r))
    if not isfinite(rmax + tmax) or tmax > COARSE * (rmax if rmax > 1e-300 else 1e-300):
        return None
    return r, lower, (trunc, tops)


def error_small(kept, S, S0: float, hl, floor: float):
    """The error bound ``_estimate_small`` gives a settled estimate (``kept`` = (trunc, top) of ``settled_small``,
    ``S`` its three rows as lists), without computing the estimate again: the same operations on the same
    values.  None where ``_estimate_small`` would be None (S, S0 or the floor not finite: the caller takes
    ``_combine_all``, as the eager path does); s0 and the steps are finite here (``settled_small``)."""
    Sp_, Sm_, S2_ = S
    isfinite = math.isfinite
    if not isfinite(S0 + floor + sum(Sp_) + sum(Sm_) + sum(S2_)):
        if not (isfinite(S0) and isfinite(floor)):
            return None
        for row in S:
            if not all(map(isfinite, row)):
                return None
    err = []
    for t, top, Sp, Sm, S2, hj in zip(*kept, Sp_, Sm_, S2_, hl):
        x = Sp if Sp > Sm else Sm
        if S2 > x:
            x = S2
        if S0 > x:
            x = S0
        delta = _RD_EPS * (x + top)
        if floor > delta:
            delta = floor
        err.append(t + 2.4 * delta / hj)
    return err


def settled(s, s0: float, h, vfloor: float):
    """``settled_small`` on arrays (``s``: the (3, n) stencil values): the estimate as ``_combine_all``
    computes it, the same lower bound of its error and (trunc, top), where every value is finite and no element
    is too coarse, else None."""
    if not h.size or not math.isfinite(s0):
        return None
    sp, sm, s2 = s
    num = np.empty((2, h.size))
    np.subtract(sp, sm, out=num[0])
    c = num[1]
    np.multiply(3, sp, out=c)
    np.subtract(s2, c, out=c)
    c += 3 * s0
    c -= sm
    num /= np.multiply.outer(_TWO_SIX, h)
    r = num[0] - c
    trunc = np.abs(c)
    tmax = float(np.maximum.reduce(trunc, axis=None))
    rmax = float(np.maximum.reduce(np.abs(r), axis=None))
    if not (math.isfinite(tmax + rmax) and np.isfinite(s).all() and np.isfinite(h).all()):
        return None
    if tmax > COARSE * max(rmax, 1e-300):
        return None
    top = np.maximum.reduce(np.abs(s), axis=0, initial=abs(s0))
    delta = top * _RD_EPS
    np.maximum(delta, vfloor, out=delta)
    delta *= 2.4
    delta /= h
    delta += trunc
    return r, delta, (trunc, top)


def error(kept, S, S0: float, h, floor: float):
    """``_combine_all``'s error bound of a settled estimate (``kept`` = (trunc, top) of ``settled``) without the
    estimate: the same numpy operations on the same values in the same order."""
    trunc, top = kept
    delta = np.maximum.reduce(S, axis=0, initial=S0)
    delta += top
    delta *= _RD_EPS
    np.maximum(delta, floor, out=delta)
    delta *= 2.4
    delta /= h
    delta += trunc
    return delta


_TWO_SIX = np.array([2.0, 6.0])  # (as _fd_stencil._combine_all's)
_RD_EPS = float(ROUNDING_DEPTH * EPS)
