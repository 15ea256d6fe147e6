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
from ._fd_stencil import _RD_EPS, COARSE, _parts, _parts_small, error, error_small

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
    finds nothing (it needs trunc_j > COARSE * max(|r_j|, scale) >= max trunc).  ``r``: ``_parts_small``, the
    loop ``_estimate_small`` runs, so the same floats.

    ``lower``: the error estimate is ``t + 2.4 max(RD_EPS (max S + top), floor) / h`` with S >= 0 (sums of
    products of absolute values) and floor >= ``vfloor`` (the noise line can only raise it); leaving S out
    and taking ``vfloor`` gives ``t + 2.4 max(RD_EPS top, vfloor) / h``, no larger in floating point either
    (each operation is monotone and rounds monotonically), and needs neither S nor the noise line."""
    sp_, sm_, s2_ = sl
    if not (sp_ and math.isfinite(s0 + sum(hl) + sum(sp_) + sum(sm_) + sum(s2_))):
        return None
    r, lower, trunc, tops, tmax = _parts_small(sl, s0, hl, vfloor)
    rmax = max(map(abs, r))
    if not math.isfinite(rmax + tmax) or tmax > COARSE * (rmax if rmax > 1e-300 else 1e-300):
        return None
    return r, lower, (trunc, tops)


def settled(s, s0: float, h, vfloor: float):
    """``settled_small`` on arrays (``s``: the (3, n) stencil values): the estimate as ``_combine_all``
    computes it (``_parts``), the same lower bound of its error and (trunc, top), where every value is finite
    and no element is too coarse, else None.  A value of s that is not finite makes its element's correction,
    so the largest truncation term, inf or NaN (an inf or NaN in a sum or difference with finite steps and s0
    never cancels to a finite value): testing that maximum tests s.  The steps are tested on their sum (each is
    at least STEP > 0, so the sum is finite exactly where every step is, short of an overflow, which only
    sends the case down the eager path)."""
    if not h.size or not math.isfinite(s0) or not math.isfinite(_SUM(h)):
        return None
    r, a, top = _parts(s, s0, h)
    rmax, tmax = _MAX(a, axis=1).tolist()
    if not math.isfinite(tmax + rmax) or tmax > COARSE * max(rmax, 1e-300):
        return None
    trunc = a[1]
    delta = top * _RD_EPS
    np.maximum(delta, vfloor, out=delta)
    delta *= 2.4
    delta /= h
    delta += trunc
    return r, delta, (trunc, top)


_MAX, _SUM = np.maximum.reduce, np.add.reduce
