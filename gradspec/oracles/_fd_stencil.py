"""Finite differences' stencil and estimate arithmetic (private to ``gradspec.oracles.fd``).

Where the points go (the 3-point stencil ``x + f h e_j`` for f in FACTORS and the noise line, as leaf
batches) and what is computed from the values there (the Richardson-corrected central difference, its
error estimate, the coarse-step test), on arrays and, for small n, on Python floats giving the same floats.
``fd`` drives them; nothing here evaluates the graph.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .. import tolerances as _tol
from .._private.fdstep import noise_pattern

EPS = np.finfo(np.float64).eps
# Error of one evaluation of s, in units of eps * S. Ops with inner sums (matmul, conv1d, reductions
# over up to ~100 terms) round with up to n * eps * sum|terms|, which can exceed eps * |f| when the
# terms cancel; 256 covers graphs of <= ~10 such ops (64 was seen to be too tight on conv1d).
ROUNDING_DEPTH = 256.0
FACTORS = (1.0, -1.0, 2.0)  # the stencil, in units of h
_FACTORS = np.array(FACTORS)
COARSE = 1e-6  # error estimate above this fraction of the gradient's scale: refine the step


def _repeat(v, nb: int) -> np.ndarray:
    """``v`` seen ``nb`` times along a new leading axis (a read-only stride-0 view, no copy).

    ``np.broadcast_to`` does the same through several Python-level checks; FD makes this view for
    every constant leaf of every case, so the direct constructor is used when ``v`` allows it.
    """
    v = np.asarray(v)
    if not v.flags.c_contiguous:
        return np.broadcast_to(v, (nb,) + v.shape)
    out = np.ndarray((nb,) + v.shape, v.dtype, v, 0, (0,) + v.strides)
    out.flags.writeable = False
    return out


def _points(x64, leaves, idx_chunk, h, factors=_FACTORS):
    """Leaf batches perturbing the elements ``idx_chunk`` (global indices) by ``factors`` * h (default FACTORS:
    the stencil; ``_fd_even`` asks for -2 alone, the mirror point).

    Only the leaves that hold a perturbed element are materialised (nb copies); the others are
    broadcast views, which matters at the chunk sizes of large cases.
    """
    idx = np.asarray(idx_chunk, dtype=np.intp)
    nf = len(factors)
    nb = idx.size * nf
    batches = {name: _repeat(v, nb) for name, v in x64.items()}
    delta = factors[:, None] * h[idx]  # (nf, k)
    off = 0
    for l in leaves:
        size = l.value.size
        mine = (idx >= off) & (idx < off + size)
        if mine.any():
            arr = np.empty((nb, size))
            arr[:] = x64[l.name].ravel()
            rows = np.flatnonzero(np.tile(mine, nf))
            arr[rows, np.tile(idx[mine] - off, nf)] += delta[:, mine].ravel()
            batches[l.name] = arr.reshape((nb,) + l.shape)
        off += size
    return batches, nb


def _range_points(x64, leaves, start: int, stop: int, h):
    """``_points`` for the contiguous elements ``start:stop`` (the chunks of a large case): the
    same batches, with the perturbed positions computed per leaf from the overlap, not by masks."""
    nf, k = len(FACTORS), stop - start
    nb = k * nf
    batches = {name: _repeat(v, nb) for name, v in x64.items()}
    off = 0
    for l in leaves:
        size = l.value.size
        lo, hi = max(start, off), min(stop, off + size)
        if lo < hi:
            arr = np.empty((nb, size))
            arr[:] = x64[l.name].ravel()
            t = np.arange(lo - start, hi - start)
            pos = (np.arange(nf)[:, None] * (k * size) + t * (size + 1) + (start - off)).ravel()
            arr.reshape(-1)[pos] += (_FACTORS[:, None] * h[lo:hi]).ravel()
            batches[l.name] = arr.reshape((nb,) + l.shape)
        off += size
    return batches, nb


def _combine(s, s0, Smax, S0, h, floor=0.0):
    """Corrected derivative, its error estimate and the truncation part, from the (3, k) values s."""
    sp, sm, s2 = s
    d = (sp - sm) / (2 * h)
    correction = (s2 - 3 * sp + 3 * s0 - sm) / (6 * h)
    top = np.maximum(np.abs(s).max(axis=0), abs(s0))
    delta = np.maximum(ROUNDING_DEPTH * EPS * (np.maximum(Smax, S0) + top), floor)
    trunc = np.abs(correction)
    return d - correction, trunc + 2.4 * delta / h, trunc


_TWO_SIX = np.array([2.0, 6.0])
_RD_EPS = float(ROUNDING_DEPTH * EPS)
_MAX = np.maximum.reduce


# The estimate and its error bound come in two parts, each written once and shared by the eager path
# (``_combine_all``, ``_estimate_small``) and the lazy one (``_fd_lazy.settled``/``settled_small``, which
# defer the second part): ``_parts`` / ``_parts_small`` give the estimate r, its truncation term and the
# largest |s| of each element (what needs only the stencil's values s), ``error`` / ``error_small`` the
# error bound from those and the rounding model's S (``t + 2.4 max(RD_EPS (max S + top), floor) / h``).
# Composed, they are ``_combine``'s operations in ``_combine``'s order, so the same floats.

def _parts(s, s0, h):
    """``(r, |[r; trunc]|, top)`` of the (3, n) stencil values ``s``: the estimate, a (2, n) array whose rows are
    |r| and the truncation term (one ``abs`` for both: the settled test reduces both rows at once), and the
    largest |s| per element (``initial`` |s0|).  ``r`` is row 0 of a (2, n) buffer (a view)."""
    num = np.empty((2, h.size))
    np.subtract(s[0], s[1], out=num[0])
    c = num[1]
    np.multiply(3, s[0], out=c)
    np.subtract(s[2], c, out=c)
    c += 3 * s0
    c -= s[1]
    num /= np.multiply.outer(_TWO_SIX, h)  # num[0] = d, num[1] = correction
    num[0] -= c  # (d - correction, in place: the same subtraction)
    return num[0], np.abs(num), _MAX(np.abs(s), axis=0, initial=abs(s0))


def error(kept, S, S0: float, h, floor: float):
    """The error bound of each element from ``kept`` = (trunc, top) of ``_parts`` and the rounding model's
    (3, n) S and S0."""
    trunc, top = kept
    delta = _MAX(S, axis=0, initial=S0)
    delta += top
    delta *= _RD_EPS
    np.maximum(delta, floor, out=delta)
    delta *= 2.4
    delta /= h
    delta += trunc
    return delta


def _combine_all(s, s0, S, S0, h, floor):
    """``_combine(s, s0, S.max(axis=0), S0, h, floor)`` in 16 numpy calls instead of 25 (each
    ~0.6 us on the arrays of a few dozen elements where this runs): the same operations on the
    same values in the same order (stacked, in place, maxima folded into one reduction with an
    initial value), so the same floats."""
    r, a, top = _parts(s, s0, h)
    trunc = a[1]
    return r, error((trunc, top), S, S0, h, floor), trunc


# Up to this many input elements the per-element arithmetic after the batched pass (finiteness,
# combination, the coarse-step test) runs on Python floats: ~0.5 us per element against ~13 us
# for the ~20 numpy calls of the array path, whatever n (measured: equal at n ~ 22).
SMALL_N = 20


def _parts_small(sl, s0: float, hl, vfloor: float):
    """``_parts`` on Python floats (``sl``: the three rows of s as lists, ``hl`` the steps; every value finite):
    ``(r, lower, trunc, top, max trunc)``, with ``lower`` the error bound without S and at the floor ``vfloor``
    (``t + 2.4 max(RD_EPS top, vfloor) / h``: ``_fd_lazy.settled_small``'s lower bound).  The same operations in
    the same order as ``_parts``, so the same floats; max() spelled as comparisons (a builtin call per max was
    most of the loop's time), which on finite values cannot change the result."""
    sp_, sm_, s2_ = sl
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
    return r, lower, trunc, tops, tmax


def error_small(kept, S, S0: float, hl, floor: float):
    """``error`` on Python floats (``kept`` = (trunc, top) of ``_parts_small``, ``S`` three rows as lists): the same
    operations on the same values.  None where S, S0 or the floor is not finite (numpy's max would order a NaN
    differently: the caller takes the numpy path); the steps are finite here."""
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


def _estimate_small(s, S, s0, S0, h, floor):
    """The finiteness test, ``_combine`` and the coarse-step test of ``fd_gradient`` on Python
    floats (lists: ``s`` and ``S`` of 3 rows, ``h``): ``_parts_small`` and ``error_small``, the same operations
    in the same order as ``_combine``, so the same floats.  Returns ``("not finite", j)`` for the first element j
    whose stencil is not finite (row-major, as ``np.argwhere``); None where Python's ``max`` would order a NaN
    differently from ``np.maximum`` (a non-finite S, step or centre: the caller uses the numpy path); else
    ``(r, err, trunc, refine)``.

    Finiteness is tested on sums first (a sum is finite only if every term is; one that is not,
    which may be an overflow, goes through the element-wise tests)."""
    isfinite = math.isfinite
    sp_, sm_, s2_ = s
    if not isfinite(sum(sp_) + sum(sm_) + sum(s2_)):
        for row in s:
            if not all(map(isfinite, row)):
                return "not finite", next(j for j, v in enumerate(row) if not isfinite(v))
    if not isfinite(s0 + sum(h)) and not (isfinite(s0) and all(map(isfinite, h))):
        return None  # (S, S0 and the floor: error_small's test)
    r, _, trunc, tops, _ = _parts_small(s, s0, h, 0.0)
    err = error_small((trunc, tops), S, S0, h, floor)
    if err is None:
        return None
    # numpy's rules: a NaN in |r| or trunc makes scale or trunc.max() NaN, and the test False (a
    # finite sum says there is none; without NaN, max() is numpy's max)
    if not isfinite(sum(r) + sum(trunc)) and (any(v != v for v in r) or any(v != v for v in trunc)):
        return r, err, trunc, False
    tmax = max(trunc) if trunc else 0.0
    rmax = max(map(abs, r)) if r else 0.0
    scale = rmax if rmax > 1e-300 else 1e-300
    refine = tmax > COARSE * scale and any(
        t > COARSE * max(abs(x), scale) and t > 0.5 * e for x, e, t in zip(r, err, trunc))
    return r, err, trunc, refine


def _stencil(flat, h, n, finite=False, noise=True):
    """(3n + 1 + FD_NOISE_POINTS, n) matrix of points: row 0 the centre, then x + f h e_j for f in
    FACTORS, then the noise line ``x + noise_pattern(n) h`` (none for n = 0, or ``noise`` False: the
    graph runs no user code, ``fd._inline_pass``; the first 3n + 1 rows are then the same floats).

    Every element perturbed, all leaves in one matrix sliced per leaf: the small-case twin of
    ``_points``, which stays for chunks and refinement, where only the perturbed leaf may be
    materialised.  One fancy-indexed addition places every offset (stencil and noise line),
    ``x + f h_j`` and ``x + p h_j`` exactly as separate passes would.  ``finite``: every step is
    finite (no input is infinite), which the dense form below needs.
    """
    if 0 < n <= SMALL_N and finite:
        # the offsets as one (rows, n) matrix of multipliers of h, -0.0 where an element stays: x + -0.0
        # is x for every x but inf (-0.0 * inf is NaN), and x + m h is the addition below, so the same
        # matrix in two numpy calls instead of seven
        X = (_stencil_dense(n) if noise else _stencil_dense(n)[: len(FACTORS) * n + 1]) * h
        X += flat
        return X
    X = np.empty((len(FACTORS) * n + 1 + (_tol.FD_NOISE_POINTS if n and noise else 0), n))
    X[:] = flat
    if n:
        idx, mult, col = _stencil_plan(n)
        if not noise:  # (the plan lists the stencil's offsets first, then the noise line's)
            k = len(FACTORS) * n
            idx, mult, col = idx[:k], mult[:k], col[:k]
        X.reshape(-1)[idx] += mult * h[col]
    return X


@functools.lru_cache(maxsize=64)
def _stencil_dense(n: int) -> np.ndarray:
    idx, mult, _ = _stencil_plan(n)
    P = np.full((len(FACTORS) * n + 1 + _tol.FD_NOISE_POINTS, n), -0.0)
    P.reshape(-1)[idx] = mult
    P.flags.writeable = False  # shared by every call with this n
    return P


@functools.lru_cache(maxsize=256)
def _stencil_plan(n: int):
    # Flat positions in the (rows, n) buffer, their multipliers of h and the column (element) of
    # each: O(n) updates for the stencil (row r perturbs element (r - 1) mod n), 16 n for the noise
    # line.  They depend on n alone, and the small n that use the stencil repeat all the time.
    nf, m = len(FACTORS), _tol.FD_NOISE_POINTS
    rows = np.arange(1, nf * n + 1)
    cols = (rows - 1) % n
    noise_rows = np.repeat(np.arange(nf * n + 1, nf * n + 1 + m), n)
    noise_cols = np.tile(np.arange(n), m)
    idx = np.concatenate([rows * n + cols, noise_rows * n + noise_cols])
    mult = np.concatenate([np.repeat(_FACTORS, n), noise_pattern(n).ravel()])
    col = np.concatenate([cols, noise_cols])
    for a in (idx, mult, col):
        a.flags.writeable = False  # shared by every call with this n
    return idx, mult, col


def _leaf_batches(case, x64, leaves, X):
    nb = X.shape[0]
    if len(leaves) == 1 and len(case.leaves) == 1:  # one leaf, perturbed: X itself, reshaped
        return {leaves[0].name: X.reshape((nb,) + leaves[0].value.shape)}
    batches = {}
    off = 0
    grad = {l.name for l in leaves}
    for l in case.leaves:
        if l.name in grad:
            v = l.value
            size = v.size
            batches[l.name] = X[:, off : off + size].reshape((nb,) + v.shape)  # (Leaf.shape without its property call)
            off += size
        else:
            batches[l.name] = _repeat(x64[l.name], nb)
    return batches


def _noise_rows(flat, h) -> np.ndarray:
    return flat + noise_pattern(flat.size) * h
