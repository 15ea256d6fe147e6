"""Per-element judging beside a kink of gradspec's own elementwise kinked ops (relu, leaky_relu, elu, abs, clamp,
maximum, minimum).

Where a watched input of one of these ops is within 4x the perturbation reach of its kink, ``check_reach`` refuses
the whole case.  For these ops the kink is a property of each position of the op's output (``x`` at 0 for relu and
abs, at a bound for clamp, ``a - b`` at 0 for maximum and minimum), so the leaf elements whose stencil rows move a
near-kink position by at least a quarter of its distance to the kink (the reach check's 4x, per position) can be
named: ``flagged``.  The others' stencil lines keep every such position on its side of the kink (a move below a
quarter of the distance, or none at a position on the kink), so their estimates are those of one smooth piece,
as the reach check asks of a whole case.  ``fd`` gives the flagged elements an infinite error bound (``FDResult.kinks``)
and compares the others where ``_fd_refine._not_comparable`` allows (they reach the code under test; their partials
agree on both sides of each flagged element's kink, probed at the finest step FD uses: ``leave_out``).

Sound where numeric detection alone is not: a kink at h/2 from x along a line makes FD's error delta/4 with an error
estimate of ~0; here the op's own declaration says where the kink is.
"""

from __future__ import annotations

import numpy as np

from .. import tolerances as _tol
from .._private.kinks import center_kink_distances, exact_kinks
from . import _fd_probes as _probes
from ._base import OracleError
from ._fd_reach import check_reach
from ._fd_refine import _not_comparable, element_name
from ._fd_stencil import FACTORS, _points

__all__ = ["OPS", "NONE", "DECLARED", "near_kinks", "leave_out", "declared_only", "flagged", "eligible",
           "exact_only_at_own"]

_PROBE_BATCH = 2**17  # leaf elements per batched evaluation (fd.MAX_BATCH_ELEMENTS)


def _unary_x(x, **_):
    return np.asarray(x, dtype=np.float64)


def _tie(a, b):
    return np.subtract(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))


# op -> (q(*inputs, **params): the quantity whose value decides the piece, per output position; its kinks(params))
OPS = {
    "relu": (_unary_x, lambda params: (0.0,)),
    "abs": (_unary_x, lambda params: (0.0,)),
    "leaky_relu": (_unary_x, lambda params: (0.0,)),
    "elu": (_unary_x, lambda params: (0.0,)),
    "clamp": (_unary_x, lambda params: tuple(float(b) for b in (params.get("min"), params.get("max")) if b is not None)),
    "maximum": (_tie, lambda params: (0.0,)),
    "minimum": (_tie, lambda params: (0.0,)),
}


def eligible(node, spec) -> bool:
    """Whether ``node`` is one of gradspec's own ops whose kinks are per position (a user op of the same name is not).
    clamp only with scalar bounds: its kinks are then the same numbers at every position (array bounds, which a
    hand-built or loaded case may give, keep the whole-case refusal: review15b #3)."""
    if node.op == "clamp" and any(np.ndim(node.params.get(b)) for b in ("min", "max")):
        return False
    return node.op in OPS and not getattr(spec, "user", True) and len(node.inputs) == (
        2 if node.op in ("maximum", "minimum") else 1)


def exact_only_at_own(case) -> bool:
    """Whether every node at an exact kink (``_private.kinks.exact_kinks``: "name = op(inputs)") is ``eligible``: then
    finite differences need not step aside for the whole case (their full gradient's reach check names the elements
    that move those positions; the directional mode has no such check, and ``FiniteDifferences.applies`` asks this
    only below its ``full_limit``)."""
    at = exact_kinks(case)
    if not at:
        return False
    nodes = {n.name: n for n in case.nodes}
    for entry in at:
        node = nodes.get(entry.split(" = ", 1)[0])
        if node is None or not eligible(node, case.spec(node.op)):
            return False
    return True


def _rows(v, shape, nb, k):
    """A batched pass's value of a tensor of ``shape`` (kept unbatched where nothing moves it) as (nb, 1..., *shape)
    with ``k`` dimensions after the batch's, the op's output's: numpy broadcasts the rows as the op broadcasts one."""
    v = np.asarray(v)
    shape = tuple(shape)
    if v.shape != (nb,) + shape:
        v = np.broadcast_to(v, (nb,) + shape)
    return v.reshape((nb,) + (1,) * (k - len(shape)) + shape)


def _distance(q, kinks):
    d = np.full(q.shape, np.inf)
    for k in kinks:
        d = np.minimum(d, np.abs(q - k))
    return d


def flagged(case, x64, leaves, h, plan, p, known) -> np.ndarray:
    """The global indices of the leaf elements whose stencil rows (steps ``h``) move a near-kink position of an
    ``eligible`` node by at least a quarter of its distance to the kink (a position on the kink: by anything).
    Raises as ``check_reach`` does where a node of ``plan`` that is not eligible is within reach of its kink (those
    still refuse the whole case).  ``p``: the first pass (its centre and reach; the stencil's values where it holds
    them, ``_first_pass``)."""
    rest = [w for w in plan if not eligible(w[0], w[1])]
    check_reach(rest, p.center, p.reach, p.tops, known)
    mine = [w[0] for w in plan if eligible(w[0], w[1])]
    n = int(sum(l.value.size for l in leaves))
    out = np.zeros(n, dtype=bool)
    if not mine or not n:
        return np.flatnonzero(out)
    center, passes = _first_pass(case, x64, leaves, h, p, {i for node in mine for i in node.inputs}, n)
    q0, d0 = {}, {}
    with np.errstate(all="ignore"):
        for node in mine:
            fq, kinks = OPS[node.op]
            q = np.asarray(fq(*[center[i] for i in node.inputs]))
            q0[node.name], d0[node.name] = q, _distance(q, kinks(node.params))
    cols = {node.name: _candidates(node, p.reach, q0[node.name], d0[node.name]) for node in mine}
    mine = [node for node in mine if cols[node.name] is None or cols[node.name].size]
    if not mine:
        return np.flatnonzero(out)
    nf = len(FACTORS)
    for chunk, env in passes:
        with np.errstate(all="ignore"):
            for node in mine:
                fq, _k = OPS[node.op]
                nb = nf * chunk.size
                k = q0[node.name].ndim
                q = fq(*[_rows(env[i], np.shape(center[i]), nb, k) for i in node.inputs])
                q = np.broadcast_to(q, (nb,) + q0[node.name].shape).reshape(nf, chunk.size, -1)
                c, d = cols[node.name], d0[node.name].reshape(-1)
                q0c = q0[node.name].reshape(-1)
                if c is not None:  # (the positions a move can reach: _candidates)
                    q, q0c, d = q[:, :, c], q0c[c], d[c]
                moved = np.abs(q - q0c.reshape(1, 1, -1))
                d = d.reshape(1, 1, -1)
                # (NaN moves or distances: flagged, the conservative side)
                hit = ~(moved <= 0) & ~(4 * moved < d)
                out[chunk] |= hit.any(axis=(0, 2))
    return np.flatnonzero(out)


def _candidates(node, reach, q0, d0):
    """The flat positions of a unary node (q = its input) that some stencil row may move to within 4x of the kink,
    from the first pass's reach (the largest move of each position over the stencil rows, bit for bit
    max |row - centre|: ``fd._reach``): a row's move is at most that, so a position whose reach is 0 or below a
    quarter of its distance is hit by no row (a NaN reach stays a candidate).  None (every position) for a binary
    node (q = a - b rounds: its move is not bounded by the inputs' reaches exactly) or where no reach is known.
    On fuzz's cases at a kink one position or two of tens: the row-by-position test below runs on those only."""
    r = reach.get(node.inputs[0]) if len(node.inputs) == 1 else None
    if r is None or np.shape(r) != q0.shape:
        return None
    with np.errstate(all="ignore"):
        return np.flatnonzero((~(r <= 0) & ~(4 * r < d0)).reshape(-1))


def _first_pass(case, x64, leaves, h, p, names, n):
    """The values of the tensors ``names`` at the centre (name -> array) and over the stencil (an iterable of
    (global element indices, name -> their stencil rows, factor-major as ``_points`` lays them out)).

    The first pass's own values where it holds them: a small case's one batched pass (``fd._inline_pass``, its
    centre ``p.center.env``) has the centre in row 0 and x + f h e_j in rows 1 + f n + j, the same floats as
    ``_points`` makes (``_fd_stencil._stencil``), so the positions FD's estimates were computed from are the ones
    judged here; no second evaluation of the stencil (two forwards, ~40% of this module's cost on fuzz's cases at a
    kink).  A large case's pass keeps its unbatched centre (``p.center``) and evaluates the stencil in chunks here."""
    env = getattr(p.center, "env", None)
    rows = len(FACTORS) * n + 1
    if env is not None and all(np.ndim(env[i]) >= 1 and np.shape(env[i])[0] == p.evaluations for i in names):
        return {i: env[i][0] for i in names}, [(np.arange(n), {i: env[i][1:rows] for i in names})]
    center = case._evaluate(x64, 0) if env is not None else p.center  # (unbatched either way)
    return center, _chunks(case, x64, leaves, h, n)


def _chunks(case, x64, leaves, h, n):
    per = max(1, _PROBE_BATCH // (len(FACTORS) * max([v.size for v in x64.values()] + [1])))
    for a in range(0, n, per):
        chunk = np.arange(a, min(n, a + per))
        yield chunk, case._evaluate(_points(x64, leaves, list(chunk), h)[0], 1)


NONE = np.zeros(0, dtype=np.intp)


def near_kinks(case, x64, leaves, h, plan, p) -> np.ndarray:
    """The reach check (refuses as before where it passes or where an op other than ``_fd_kinkpos.OPS`` is within
    reach of its kink), else the elements ``_fd_kinkpos.flagged`` names (empty: nothing near after all)."""
    known = center_kink_distances(case)
    try:
        check_reach(plan, p.center, p.reach, p.tops, known)
        return NONE
    except OracleError as e:
        if not any(eligible(w[0], w[1]) for w in plan):
            raise
        first = e
    near = flagged(case, x64, leaves, h, plan, p, known)
    if near.size == sum(l.value.size for l in leaves):
        raise first  # (every element near a kink: nothing to compare)
    return near


def leave_out(case, x64, leaves, p, near, h, err, floor, kinks) -> int:
    """Name the ``near`` elements in ``kinks`` (their error bound is inf already) where the others can be compared
    (``_fd_refine._not_comparable``: they reach the code under test, and their partials agree on both sides of each
    near element's kink), else refuse.  Returns the evaluations spent.

    The both-sides probe runs at hf_k = h_k FD_FINER_STEPS[-1], the step ``_not_comparable``'s argument needs (its
    smooth part 2 hf_k |d2f/dx_k dx_j| within the estimates' bounds), then at hf_k / PROBE_FINER where that one
    changes: at 2h (the stencil's farthest point, session 15) any coupling after the kink -- a sum, a matmul --
    changed every compared partial by ~1e4x more and the case was refused as "a jump surface" (review15b #1).  Sound
    at these steps: where a near position is at its kink (an exact tie, d = 0) the kink lies at x and the probes
    are on its two sides; where it is not (d > 0), x lies inside one piece, the exact oracles evaluate that piece
    (no convention at x), and a compared element's stencil stays in it (it moves q by less than d / 4:
    ``flagged``), so what the probe cannot straddle needs no probe.

    Where no node runs unmodelled code (``_fd_probes.runs_unmodelled_code``: no user op, no ``_cast``: the graphs of
    table ops fuzz draws), no probe runs: a jump surface needs discontinuous code.  Every table op is continuous, and smooth
    away from its watched points (within reach of one the case was refused: ``flagged``'s reach check) and the
    eligible ops' kinks.  A compared element moves a position at its kink by exactly nothing, so its partial there,
    a sum over paths of smooth factors and phi'(q) dq/dx_j, has dq/dx_j = 0 up to a rounding its own stencil cannot
    resolve (nor the probe's, which estimates with the same steps) and is continuous across the kink: the probe
    could see only the smooth part (a judgement lost where that exceeds the bounds), never a convention.  (It was
    0.5-0.8 ms of each fuzz case at a kink, 2-3% of a 400-case campaign's CPU; none refused.)"""
    compared = np.isfinite(err)
    probed = near if _probes.runs_unmodelled_code(case) else NONE
    why, spent = _not_comparable(case, x64, leaves, p.seeds64, probed, h[probed] * _tol.FD_FINER_STEPS[-1], compared,
                                 h, floor, finer=True)
    if why:
        raise OracleError(f"finite differences: {near.size} element(s) move an input of relu/leaky_relu/elu/abs/"
                          f"clamp/maximum/minimum within 4x of its kink; {why}")
    for j in near.tolist():
        kinks[element_name(leaves, j)] = DECLARED
    return spent


DECLARED = ("finite differences: its stencil moves an input of a built-in kinked op (relu, leaky_relu, elu, abs, "
            "clamp, maximum, minimum) to within 4x of its kink")


def declared_only(kinks: dict) -> bool:
    """Whether every element of ``FDResult.kinks`` was left out here (beside a declared kink, not one found)."""
    return all(why is DECLARED for why in kinks.values())
