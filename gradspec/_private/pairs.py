"""Comparing every pair of oracles' gradients at once (``gradspec.check``'s common path): the tolerance
model of ``gradspec.tolerances`` element-wise, over a (k oracles x N elements) matrix, or in Python
floats for tiny cases.  ``check._compare`` (leaf by leaf, explaining what differs) decides every pair
these do not settle.

Example::

    >>> from gradspec._private.pairs import _pair_list
    >>> _pair_list(("reference", "jacobian", "torch-cpu"))
    [('reference', 'jacobian'), ('reference', 'torch-cpu'), ('jacobian', 'torch-cpu')]
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from .. import tolerances as _tol

__all__ = ["SMALL_PAIRS"]


def _pair_claim(claim, kinds, a, b):
    """The claimed accuracy applies to pairs in which a side runs the code under test (an exact oracle:
    its derivative formulas); two estimates of the same forward are held to their own error bounds."""
    if claim is None or (kinds[a].kind == "fd" and kinds[b].kind == "fd"):
        return None
    return claim


@functools.lru_cache(maxsize=None)
def _pair_index(k: int) -> tuple[np.ndarray, np.ndarray]:
    I, J = zip(*itertools.combinations(range(k), 2))
    return np.array(I), np.array(J)


@functools.lru_cache(maxsize=None)
def _pair_tolerances(dtype: str, kinds: tuple, estimates: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Per pair (rows, in ``itertools.combinations`` order): rtol, and per oracle that is an
    estimate (index in ``estimates``) its fd_factor in the pairs it takes part in, 0 elsewhere."""
    I, J = _pair_index(len(kinds))
    tols = [_tol.lookup(dtype, kinds[i], kinds[j]) for i, j in zip(I, J)]
    rtol = np.array([[t.rtol] for t in tols])
    fdf = np.array([[t.fd_factor * ((I[p] == e) or (J[p] == e)) for p, t in enumerate(tols)] for e in estimates])
    return rtol, fdf[..., None]


def _allowed(rtol, scale_a, scale_b, m, noise, fd, claim=None, floor=_tol.SUBNORMAL_FLOOR, through=None):
    """The tolerance model of ``gradspec.tolerances``, element-wise (shared by both comparison paths):
    ``rtol * max(scale_a, scale_b, m) + floor + NOISE_FACTOR * noise + fd``, or where the code under
    test claims an accuracy (``claim`` = (rtol, atol), arrays per pair or floats) the larger of that
    and the claim's allowance (:func:`_claim_allowance`: ``atol + rtol * through``, ``through`` the sum of
    |path terms| through the code under test, ``gradspec._check_claim``; None: not computed, the same scale).

    ``scale_*`` are each side's max(|g_j|, its leaf's max), ``m`` is ``|J|^T |seed|`` (or None), ``fd``
    the finite-difference allowance.  The absolute floor sits far below any meaningful gradient:
    subnormal results (< 2.2e-308) have no relative precision and some libraries flush them to zero.
    """
    scale = np.maximum(scale_a, scale_b)
    if m is not None:
        scale = np.maximum(scale, m)
    allowed = rtol * scale + floor
    if noise is not None:
        allowed = allowed + _tol.NOISE_FACTOR * noise
    allowed = allowed + fd
    if claim is not None:
        allowed = np.maximum(allowed, _claim_allowance(claim, scale, through))
    return allowed


def _claim_allowance(claim, scale, through, on=1.0):
    """What a claim allows (``on``: 1, or per pair 1 / 0 where it does not apply): the accuracy the code under test
    claims, ``atol + rtol x through`` -- the sum of |path terms| through that code (``gradspec._check_claim``), never
    the comparison's own scale, whose leaf maximum and |J|^T |seed| count paths that never run through it (x[1]'s
    gradient 1.6e6 beside x[0]'s 1.3 through a user op let it be 0.1 off at a claim of 1e-4); ``scale`` only where
    ``through`` is None (not sized: gs.check applies it then only to tell "inconclusive" from "disagree").  For
    code gradspec cannot see inside (``tolerances.opaque_claim``) also ``OPAQUE_RTOL x scale``: gradspec's own
    allowance for opaque code, on its own scale."""
    user = claim.user if isinstance(claim, _tol._OpaqueClaim) else claim
    out = 0.0
    if isinstance(claim, _tol._OpaqueClaim):
        out = _tol.claimed_allowance(_tol.OPAQUE_RTOL * on, 0.0, scale)
    if user:
        out = np.maximum(out, _tol.claimed_allowance(user[0] * on, user[1] * on, scale if through is None else through))
    return out


def _path_scale(jac, quiet: bool = False) -> np.ndarray:
    """``|J|^T |seed|`` (flat, in leaf order): per input element, the sum of the absolute values of
    every path's contribution -- the scale that bounds the rounding error of any evaluation order.
    ``quiet``: the caller already ignores numpy's floating-point errors (no errstate of its own)."""
    if not jac.matrix.size:
        return np.zeros(jac.matrix.shape[1])
    if quiet:
        return np.abs(jac.matrix).T @ np.abs(jac.seed_vector)
    with np.errstate(all="ignore"):
        return np.abs(jac.matrix).T @ np.abs(jac.seed_vector)


def _per_leaf(flat: np.ndarray, leaves) -> dict:
    """A flat vector in leaf order as {leaf name: array of the leaf's shape} (views)."""
    out, off = {}, 0
    for l in leaves:
        out[l.name] = flat[off : off + l.value.size].reshape(l.shape)
        off += l.value.size
    return out


def _flat(per_leaf: dict, leaves) -> np.ndarray:
    """Per-leaf arrays (missing leaves: zeros) as one float64 vector in leaf order."""
    parts = []
    for l in leaves:
        a = per_leaf.get(l.name)
        if a is None:
            parts.append(np.zeros(l.value.size))
        else:
            parts.append(a.ravel() if getattr(a, "shape", None) == l.shape else np.broadcast_to(a, l.shape).ravel())
    return parts[0].astype(np.float64, copy=False) if len(parts) == 1 else np.concatenate(parts).astype(np.float64, copy=False)


def _flat_list(per_leaf: dict, layout) -> list:
    """``_flat(per_leaf, leaves).tolist()`` for ``layout`` = [(leaf name, shape, size)], without the concatenation."""
    out: list = []
    for leaf, shape, size in layout:
        a = per_leaf.get(leaf)
        if a is None:
            out += [0.0] * size
        else:
            # (tolist gives Python floats: a float32 array's values as astype(float64) would, exactly)
            out += (a if getattr(a, "shape", None) == shape else np.broadcast_to(a, shape)).ravel().tolist()
    return out


def _fast_pairs(case, leaves, names, results, kinds, dtype, M, fd_errs, noise, gated=frozenset(), claim=None,
                through=None) -> dict:
    """The common case for every pair at once: same None-ness, right shapes, all finite, agreeing.

    Each oracle's gradients are flattened once into one row of a (k, N) matrix, and all pairs
    (``itertools.combinations(names, 2)``) are compared in a handful of vectorised operations:
    the per-pair, per-leaf loop of ``_compare`` cost more than the oracles themselves on small
    graphs.  Returns ``{pair: worst ratio}`` for the pairs that agree; every other pair goes
    through ``_compare``, which works leaf by leaf and explains what differs.  (On a small graph
    each numpy call costs about a microsecond, as much as the arithmetic: the steps below are
    arranged to make few of them, with the same floating-point operations as ``_allowed``.)
    ``through``: per leaf, the sum of |path terms| through the code under test (the claim's own scale), or None.
    """
    k = len(names)
    if k < 2:
        return {}
    small = _small_pairs(leaves, names, results, kinds, dtype, M, fd_errs, noise, claim, gated)
    if small is not None:
        return small
    layout = [(l.name, l.value.shape, l.value.size) for l in leaves]
    sizes = [size for _, _, size in layout]
    N = sum(sizes)
    parts = []
    bad = None  # oracles whose gradient has a wrong shape
    none = None
    for i, name in enumerate(names):
        res = results[name]
        for j, (leaf, shape, size) in enumerate(layout):
            g = res.get(leaf)
            if g is None:
                none = none if none is not None else np.zeros((k, len(leaves)), dtype=bool)
                none[i, j] = True
                parts.append(np.zeros(size))
            elif getattr(g, "shape", None) != shape:  # (results are arrays: no np.shape/np.ravel call overhead)
                bad = bad or set()
                bad.add(i)
                parts.append(np.zeros(size))
            else:
                parts.append(g.ravel())
    pairs, (I, J) = _pair_list(tuple(names)), _pair_index(k)
    est = [(i, n) for i, n in enumerate(names) if fd_errs and n in fd_errs]
    rtol, fdf = _pair_tolerances(dtype, tuple(kinds[n].kind for n in names), tuple(i for i, _ in est))
    with np.errstate(all="ignore"):
        R = np.concatenate(parts).astype(np.float64, copy=False).reshape(k, N) if N else np.zeros((k, 0))
        ok = np.isfinite(R).all(axis=1)
        if bad:
            ok[list(bad)] = False
        eligible = ok[I] & ok[J]
        if none is not None:
            # None vs a gradient is a discrepancy for oracles that report None, zeros otherwise.
            # (a leaf gated by user ops: None and zeros are one answer, see gradspec.outcome)
            aware = np.array([kinds[a].reports_none and kinds[b].reports_none for a, b in pairs])
            strict = np.array([l.name not in gated for l in leaves])
            eligible &= ~(aware & ((none[I] != none[J]) & strict).any(axis=1))
        if N == 0 or not eligible.any():
            return {p: 0.0 for p, e in zip(pairs, eligible) if e} if N == 0 else {}
        A = np.abs(R)
        if len(layout) == 1:
            B = np.maximum(A, A.max(axis=1, keepdims=True))  # max(|g_j|, max over g's leaf): each side's scale
        else:
            starts, lengths = _leaf_runs(tuple(sizes))
            B = np.maximum(A, np.repeat(np.maximum.reduceat(A, starts, axis=1), lengths, axis=1))
        # _allowed, step by step: rtol * max(scale_a, scale_b, m) + floor [+ noise] + fd [max claim]
        scale = np.maximum(B[I], B[J])
        if M is not None:
            np.maximum(scale, M if isinstance(M, np.ndarray) else _flat(M, leaves), out=scale)
        allowed = rtol * scale
        allowed += _tol.underflow_floor(dtype)
        if noise is not None:
            allowed += _tol.NOISE_FACTOR * _flat(noise, leaves)
        # an estimate's own error bound is part of each of its pairs' allowance
        fd = None
        for (_, name), f in zip(est, fdf):
            term = f * _flat(fd_errs[name], leaves)
            fd = term if fd is None else fd + term
        if fd is not None:
            allowed += fd
        if claim is not None:  # per pair: the claim, or 0 for pairs of two estimates
            on = np.array([[_pair_claim(claim, kinds, a, b) is not None] for a, b in pairs], dtype=np.float64)
            np.maximum(allowed, _claim_allowance(claim, scale, None if through is None else _flat(through, leaves), on),
                       out=allowed)
        if not np.isfinite(allowed).all():  # an infinite scale or error bound: let _compare sort it out
            return {}
        d = R[I]
        d -= R[J]
        np.abs(d, out=d)
        d /= allowed  # allowed >= SUBNORMAL_FLOOR > 0
        worst = d.max(axis=1)
        good = eligible & (worst <= 1.0)
    return {p: float(w) for p, g, w in zip(pairs, good.tolist(), worst.tolist()) if g}


# Up to this many gradient elements per oracle, _fast_pairs compares in Python floats: on the few-element
# graphs that dominate a fuzz run, two dozen numpy calls on 4 x 3 arrays cost more than the arithmetic.
SMALL_PAIRS = 16


def _small_pairs(leaves, names, results, kinds, dtype, M, fd_errs, noise, claim, gated=frozenset()) -> dict | None:
    """``_fast_pairs`` for tiny cases whose every gradient is present, of its leaf's shape, a real float
    and finite (so are the error estimates and ``|J|^T |seed|``): the same IEEE double operations in
    the same order, element by element (there every side's scale max(|g_j|, leaf max) is the leaf
    max).  None where that does not hold (the numpy path then decides, and explains)."""
    if noise is not None or claim is not None:
        return None
    layout = [(l.name, l.value.shape, l.value.size) for l in leaves]  # (ndarray.shape builds a tuple per access)
    N = 0
    for _, _, size in layout:
        N += size
    if not 0 < N <= SMALL_PAIRS:
        return None
    isfinite = math.isfinite
    rows, tops, nones = [], [], []  # per oracle: its flat gradient, per element its leaf's max |g|, its None leaves
    for name in names:
        res = results[name]
        row, top, none = [], [], None
        for leaf, shape, size in layout:
            g = res.get(leaf)
            if g is None:  # compared as zeros (below: unless None itself is the disagreement)
                none = {leaf} if none is None else none | {leaf}
                row += [0.0] * size
                top += [0.0] * size
                continue
            if getattr(g, "shape", None) != shape or g.dtype.kind != "f" or g.dtype.itemsize > 8:
                return None
            vals = g.ravel().tolist()
            if size == 1:  # (a finite value's |v|: the leaf max below, up to the sign of a zero, which no
                v = vals[0]  # use of the scale sees: it is compared and enters r * s + floor, floor > 0)
                if not isfinite(v):
                    return None
                row.append(v)
                top.append(abs(v))
            elif vals:
                if not isfinite(sum(vals)):  # (a finite sum has no inf or NaN term)
                    return None
                row += vals
                top += [max(max(vals), -min(vals))] * size
        rows.append(row)
        tops.append(top)
        nones.append(none)
    if M is not None:
        m = (M if isinstance(M, np.ndarray) else _flat(M, leaves)).tolist()
        if not isfinite(sum(m)):
            return None
    else:
        m = [0.0] * N  # (no path scale: a scale term of 0 never wins over the leaf maxima, which are >= 0)
    est, errs = [], []
    if fd_errs:
        for i, n in enumerate(names):
            if n in fd_errs:
                e = _flat_list(fd_errs[n], layout)
                if not isfinite(sum(e)):
                    return None
                est.append(i)
                errs.append(e)
    floor = _tol.underflow_floor(dtype)
    out, terms = {}, {}
    for a, b, r, fds in _small_plan(dtype, tuple([kinds[n].kind for n in names]), tuple(est)):
        if nones[a] != nones[b] and kinds[names[a]].reports_none and kinds[names[b]].reports_none and \
                ((nones[a] or set()) ^ (nones[b] or set())) - gated:
            continue  # None vs a gradient, for oracles that report None: _compare says so
        worst = 0.0
        if not fds:
            if rows[a] == rows[b]:  # equal gradients (most pairs of exact oracles): every |x - y| / (r s + floor) is
                out[(names[a], names[b])] = worst  # 0.0 (rows are finite: == holds value by value, -0.0 == 0.0)
                continue
            for x, y, s, t, u in zip(rows[a], rows[b], tops[a], tops[b], m):
                if t > s:  # scale = max(a's leaf max, b's leaf max, m)
                    s = t
                if u > s:
                    s = u
                d = abs(x - y) / (r * s + floor)
                if d > worst:
                    worst = d
        else:
            fd = terms.get(fds)  # the estimates' terms, summed in order, shared by pairs with the same factors
            if fd is None:
                (f0, i0), more = fds[0], fds[1:]
                fd = [f0 * e for e in errs[i0]]
                for f, i in more:
                    fd = [x + f * e for x, e in zip(fd, errs[i])]
                terms[fds] = fd
            for x, y, s, t, u, v in zip(rows[a], rows[b], tops[a], tops[b], m, fd):
                if t > s:
                    s = t
                if u > s:
                    s = u
                allowed = r * s + floor + v
                if not isfinite(allowed):
                    return None
                d = abs(x - y) / allowed
                if d > worst:
                    worst = d
        if worst <= 1.0:
            out[(names[a], names[b])] = worst
    return out


@functools.lru_cache(maxsize=None)
def _small_plan(dtype: str, kinds: tuple, estimates: tuple) -> list:
    """Per pair, in ``itertools.combinations`` order: ``(a, b, rtol, terms)`` with ``terms`` the
    ``(fd_factor, estimate index)`` of the pair's estimates.  An estimate outside the pair has factor 0
    there, and adding 0 x a finite error adds +0.0, which leaves every allowance (>= floor > 0) as it
    is: those terms are left out."""
    rtol, fdf = _pair_tolerance_lists(dtype, kinds, estimates)
    return [(a, b, rtol[p], tuple([(f[p], i) for i, f in enumerate(fdf) if f[p]]))
            for p, (a, b) in enumerate(itertools.combinations(range(len(kinds)), 2))]


@functools.lru_cache(maxsize=None)
def _pair_tolerance_lists(dtype: str, kinds: tuple, estimates: tuple) -> tuple[list, list]:
    """``_pair_tolerances`` as Python floats: rtol per pair, and per estimate its fd_factor per pair."""
    rtol, fdf = _pair_tolerances(dtype, kinds, estimates)
    return [r[0] for r in rtol.tolist()], [[f[0] for f in fe] for fe in fdf.tolist()]


@functools.lru_cache(maxsize=256)
def _pair_list(names: tuple) -> list:
    return list(itertools.combinations(names, 2))


@functools.lru_cache(maxsize=256)
def _leaf_runs(sizes: tuple) -> tuple[list, list]:
    """Start and length of each non-empty leaf's run in a flat vector (for ``np.maximum.reduceat``)."""
    starts, lengths, at = [], [], 0
    for size in sizes:
        if size:
            starts.append(at)
            lengths.append(size)
        at += size
    return starts, lengths
