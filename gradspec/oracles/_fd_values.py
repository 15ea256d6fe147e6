"""The values finite differences read off a batched evaluation (private to ``gradspec.oracles.fd``):
the leaves in float64 and the flat vector of perturbed inputs, the centre's scale (max |value| in the
graph, which the VALUE_DEPTH rounding floor is made of), the seeds in float64, and the contractions
``s = sum_r <seed_r, f_r>`` and ``S = sum_r <|seed_r|, |f_r|>`` at every batched point.  ``fd`` drives them;
each fast form here gives the very floats of the straightforward one (``tests/test_fd_fast.py``).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ._base import OracleError
from ._fd_stencil import EPS, _repeat

_MAX, _SUM = np.maximum.reduce, np.add.reduce
_F64 = np.dtype(np.float64)  # (a dtype compares with a dtype faster than with the scalar type, which it converts first)


def _as64(case):
    # read-only use: asarray does not copy float64 leaves
    return {l.name: (np.asarray(l.value, dtype=np.float64) if l.value.dtype.kind == "f" else l.value) for l in case.leaves}


def _inputs(case):
    """``case.grad_leaves()``, ``_as64(case)`` and the differentiable leaves' values raveled into one
    vector, in one pass over the leaves (three passes and a call each were ~4% of a small case's FD)."""
    leaves, x64, parts = [], {}, []
    for l in case.leaves:
        v = l.value
        if v.dtype.kind == "f":
            if v.dtype != _F64 or type(v) is not np.ndarray:
                v = np.asarray(v, dtype=np.float64)
            if l.requires_grad:  # (Leaf.differentiable: requires_grad and a float dtype)
                leaves.append(l)
                parts.append(v.ravel())
        x64[l.name] = v
    if len(parts) == 1:
        return leaves, x64, parts[0]
    return leaves, x64, (np.concatenate(parts) if parts else np.zeros(0))


def _root_rows(v, seed, nb: int):
    """A root's batched values as (nb, -1) float64 rows (a root that is an unperturbed leaf, without the batch
    axis, seen nb times: a stride-0 view)."""
    if v.dtype != _F64:
        v = v.astype(np.float64)
    if v.shape != (nb,) + seed.shape:  # a root that is an unperturbed leaf
        v = _repeat(v, nb)
    return v.reshape(nb, -1)


def _s_values(env, roots, seeds64, nb: int, abs_seeds=None):
    """s = sum_r <seed_r, f_r> and S = sum_r <|seed_r|, |f_r|> at each of the nb batched points
    (``abs_seeds``: the raveled |seed_r|, when the caller has them already)."""
    s, rows = _s_only(env, roots, seeds64, nb)
    return s, _S_only(rows, seeds64, abs_seeds)


def _s_only(env, roots, seeds64, nb: int):
    """``_s_values``' s alone, and the root rows it contracted (for ``_S_only``): S is then computed only where
    the error bound is asked for."""
    s, rows = None, []
    for r, seed in zip(roots, seeds64):
        v = _root_rows(env[r], seed, nb)
        sv = seed.ravel()
        # ndarray.dot: the same BLAS gemv as ``@`` on C-contiguous float64 operands (numpy hands both to
        # cblas_dgemv as one row-major product: 0 of 27,000 random products up to 300 x 500 differed, sign
        # bits included; tests/test_fd_fast.py keeps a table), without matmul's gufunc machinery: ~2 us less
        # per root.  A strided v (a repeated leaf) keeps ``@``, whose loop there is numpy's own and sums in
        # another order.
        sr = v.dot(sv) if v.flags.c_contiguous else v @ sv
        rows.append(v)
        s = sr if s is None else s + sr
    return s, rows


def _S_only(rows, seeds64, abs_seeds=None):
    """``_s_values``' S from ``_s_only``'s root rows (the same products in the same order)."""
    S = None
    for i, (v, seed) in enumerate(zip(rows, seeds64)):
        asv = np.abs(seed.ravel()) if abs_seeds is None else abs_seeds[i]
        Sr = np.abs(v).dot(asv) if v.flags.c_contiguous else np.abs(v) @ asv
        S = Sr if S is None else S + Sr
    return S


# Absolute rounding floor: an op can lose eps * (the magnitude of its intermediates) even when
# its output is tiny (log_softmax([1, 17])[1] = -log(1 + 1.1e-7) carries the 1.1e-16 rounding
# error of 1 + 1.1e-7, a 1e-9 relative error).  So every s carries at least
# VALUE_DEPTH * eps * max|value in the graph| * sum|seed| of absolute error.
VALUE_DEPTH = 16.0


def _center_scale(center) -> tuple[float, str | None]:
    """max |value| over the finite float values at the centre, and the name of a non-finite one (or None)."""
    return _scale([(name, c) for name, c in center.items() if c.dtype.kind == "f" and c.size])  # (values are arrays)


def _scale(floats) -> tuple[float, str | None]:
    """``_center_scale`` of the (name, non-empty float array) pairs ``floats``."""
    if not floats:
        return 0.0, None
    a = np.concatenate([c for _, c in floats], axis=None) if len(floats) > 1 else floats[0][1]
    if a.size <= _SCALE_SMALL:
        # Python's max of the |values|, exact like numpy's, taken only where nothing is NaN (a NaN sum
        # says so; a NaN from inf - inf only sends a finite centre to the numpy path below)
        vals = a.tolist() if a.ndim else [a.item()]
        vmax = max(map(abs, vals))
        total = sum(vals)
        if vmax < math.inf and total == total:
            return vmax, None
    a = np.abs(a)
    vmax = float(_MAX(a, axis=None))
    if vmax < np.inf:  # NaN fails this too
        return vmax, None
    a = a.ravel()
    bad = next(name for name, c in floats if not np.isfinite(c).all())
    return float(a[np.isfinite(a)].max(initial=0.0)), bad


_SCALE_SMALL = 8  # elements: the centre's scale on Python floats up to here (callgrind: fewer instructions than numpy below ~12)


def _row0_scale(env) -> float | None:
    """``_center_scale`` of row 0 (the centre) of a batched environment when every value there is
    finite, else None.  Most tensors of FD's small graphs are scalars, whose row 0 is a numpy scalar:
    concatenating a dozen of them took ~6 us, so scalars and small tensors are read as Python floats
    (``item``, ``tolist``: exact, float32 values included), larger ones reduced as arrays (on run.py's
    graphs: 3.5 us a case, against 4.5 concatenating every tensor but the scalars).  The max of the
    |values| is exact whatever the grouping, so the float is ``_center_scale``'s."""
    vals, big = [], []
    for v in env.values():
        if v.dtype.kind != "f":
            continue
        if v.ndim == 1:
            vals.append(v.item(0))
        elif v.size <= _ROW0_SMALL * v.shape[0]:
            if v.size:
                vals += v[0].ravel().tolist()
        else:
            big.append(v[0])
    top = 0.0
    if vals:  # max |v| as max(max v, -min v): two C-level passes instead of abs() per value
        hi, lo = max(vals), min(vals)
        top = hi if hi > -lo else abs(lo)  # (hi > -lo only where hi > 0; abs: 0.0, not -0.0, where all are zeros)
    total = sum(vals)  # (a NaN makes it NaN, whatever order max met the NaN in; an inf makes top inf)
    if not top < math.inf or total != total:
        return None
    if big:
        a = np.concatenate(big, axis=None) if len(big) > 1 else big[0]
        m = float(_MAX(np.abs(a), axis=None))
        if not m < math.inf:  # NaN fails this too
            return None
        if m > top:
            top = m
    return top




_ROW0_SMALL = 16  # elements per row: read as Python floats up to here


def _finite_center_scale(center) -> float:
    """``_center_scale`` for the full gradient, which refuses a centre that is not finite."""
    vmax, bad = _center_scale(center)
    if bad is not None:
        raise OracleError(f"finite differences: {bad} is not finite at the case's inputs")
    return vmax


_VD_EPS = float(VALUE_DEPTH * EPS)


def _floor(vmax: float, seeds64, abs_seeds=None, l1=None) -> float:
    """The VALUE_DEPTH rounding floor (``l1``: sum |seed| over the roots, where the caller has it)."""
    if l1 is not None:
        return _VD_EPS * vmax * l1
    if abs_seeds is not None:  # |seed| raveled: the same sums (a contiguous array reduces as one run)
        if len(abs_seeds) == 1:  # (sum() of one term: 0 + t, which is t)
            return _VD_EPS * vmax * float(_SUM(abs_seeds[0]))
        return _VD_EPS * vmax * float(sum(_SUM(a) for a in abs_seeds))
    return VALUE_DEPTH * EPS * vmax * float(sum(np.abs(seed).sum() for seed in seeds64))


def _seeds64(case, center):
    """The case's seeds (implicit ones made explicit, rounded to each root's dtype) in float64."""
    return [np.asarray(seed, dtype=np.float64) for seed in case.seed_arrays(center)]


def _batch_seeds64(case, env, center):
    """``_seeds64`` and the raveled ``|seed|`` from a batched environment, with one conversion at
    most where the root is float64 (FD evaluates float32 graphs in float64 too): an implicit seed is
    then ones (one shared read-only array per shape), an explicit one the seed in float64 (itself,
    read only, if it is float64 already), as ``seed_arrays``' cast to the root's dtype gives it.
    Roots of other dtypes go through ``case.seed_arrays`` as before.  Also returns ``_floor``'s sum of
    the |seed| sums (None on that other path): the sum of ones is their count, exactly (below 2^53)."""
    seeds, absolute, l1 = [], [], 0
    for r, sd in zip(case.roots, case.seeds):
        if env[r].dtype != _F64 or not (sd is None or isinstance(sd, np.ndarray)):
            seeds = _seeds64(case, center)
            return seeds, [np.abs(seed.ravel()) for seed in seeds], None
        if sd is None:
            seeds.append(_ones(env[r].shape[1:]))
            absolute.append(seeds[-1].reshape(-1))
            l1 = l1 + float(absolute[-1].size)
        else:
            sd = sd if sd.dtype == _F64 else sd.astype(np.float64)
            seeds.append(sd)
            absolute.append(np.abs(sd.reshape(-1)))
            l1 = l1 + float(_SUM(absolute[-1]))  # (as _floor's sum: 0 + t, then in root order)
    return seeds, absolute, float(l1)


@functools.lru_cache(maxsize=256)
def _ones(shape) -> np.ndarray:
    out = np.ones(shape)
    out.flags.writeable = False  # shared by every case with a root of this shape
    return out


def _at_center(case, center, seeds64):
    """s and S at the centre alone (a batch of one)."""
    s, S = _s_values({r: np.asarray(center[r])[None] for r in case.roots}, case.roots, seeds64, 1)
    return float(s[0]), float(S[0])
