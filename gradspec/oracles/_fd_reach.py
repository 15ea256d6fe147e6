"""Where finite differences must step aside: the ops to watch and the reach check.

The FD oracle (``gradspec.oracles.fd``) refuses a case when an input of some op is within (4x)
its perturbation reach of a point where the op is not differentiable (a kink, a tie, a domain
edge); the reach is measured on the actual perturbed intermediate values, so it accounts for
amplification through the graph.  This module says which inputs to watch (``watch_plan``) and
checks them against the reach the oracle measured (``check_reach``).

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec.oracles._fd_reach import watch_plan
    >>> case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", "relu", ["x"], {}), ("z", "sum", ["y"], {})], ["z"])
    >>> [(node.name, [name for name, _ in inputs], kink) for node, _, inputs, kink in watch_plan(case)]
    [('y', ['x'], False)]
"""

from __future__ import annotations

import math

import numpy as np

from .._private.kinks import snapshot
from ._base import OracleError

__all__ = ["watch_plan", "watched", "check_reach"]

_MAX, _ANY = np.maximum.reduce, np.logical_or.reduce
_F64 = np.dtype(np.float64)

_WATCH: dict = {}  # id(spec) -> (spec, its domain, inputs, watched (input position, domain) pairs)


def _spec_watch(spec, nin: int):
    """Which inputs of an op to watch (a domain with singular points or edges): a property of the
    op's declaration, computed once per op, not per case."""
    hit = _WATCH.get(id(spec))
    if hit is not None and hit[0] is spec and hit[1] is spec.domain and hit[2] == nin:
        return hit[3]
    doms = tuple((i, d) for i, d in enumerate(spec.domains_for(nin)) if d.points or d.lo > -np.inf or d.hi < np.inf)
    if len(_WATCH) > 4096:  # user ops made afresh in a loop: keep the cache bounded
        _WATCH.clear()
    _WATCH[id(spec)] = (spec, spec.domain, nin, doms)
    return doms


def watch_plan(case, specs=None) -> list:
    """The ops with kinks, ties or domain edges, and which of their inputs to watch.

    Returns ``[(node, spec, [(input name, domain with singular points or edges)], has kink_distance)]``.
    ``specs``: the nodes' op specs, where the caller has looked them up already.
    """
    plan = []
    if specs is None:
        specs = case._node_specs() or [case.spec(node.op) for node in case.nodes]  # (looked up once per gs.check)
    get = _WATCH.get
    for node, spec in zip(case.nodes, specs):
        ins = node.inputs
        hit = get(id(spec))  # _spec_watch's cache hit, inline (a call per node was a third of this loop)
        if hit is not None and hit[0] is spec and hit[1] is spec.domain and hit[2] == len(ins):
            doms = hit[3]
        else:
            doms = _spec_watch(spec, len(ins))
        kink = spec.kink_distance is not None
        if doms or kink:
            plan.append((node, spec, [(ins[i], d) for i, d in doms if i < len(ins)], kink))
    return plan


def watched(plan) -> set:
    names = set()
    for node, _, doms, kink in plan:
        if kink:
            names.update(node.inputs)
        else:
            for name, _ in doms:  # (a loop, not a generator: ~0.3 us less per watched node)
                names.add(name)
    return names


def check_reach(plan, center, reach, top=None, known=None) -> None:
    """Refuse if any op input is within (4x) its perturbation reach of a non-differentiable point.

    Domain points and edges are checked element by element (each element's distance against its
    own reach); relations between elements (ties of a max, clamp bounds...) through the op's
    ``kink_distance``, a scalar, against the largest reach among its inputs (``top``: input name ->
    that largest reach where the caller knows it already; filled in here).  ``known``: node name ->
    (its inputs' snapshots, their kink distance) computed at the case's values already
    (``gradspec._private.kinks.center_kink_distances``): taken where ``center`` holds the same bytes.
    """
    top = {} if top is None else top
    for node, spec, doms, kink in plan:
        for name, dom in doms:
            if name not in reach:
                continue
            a = center[name]
            if type(a) is np.float64:  # a scalar's centre (row 0 of a batched scalar): its one float, as is
                hit = _close_list([float(a)], dom, [float(reach[name])])
            else:
                a = np.asarray(a)
                if a.dtype == _F64 and a.size <= _CLOSE_SMALL:
                    hit = _close_small(a, dom, reach[name])
                else:
                    hit = _close(a, dom, reach[name])
            if hit is not None:
                _refuse(node, *hit)
        if kink:
            args = [np.asarray(center[i]) for i in node.inputs]
            hit = known.get(node.name) if known else None
            if hit is not None and [snapshot(a) for a in args] == hit[0]:
                d = hit[1]  # (the same op on the same bytes: the float exact_kinks computed)
            else:
                d = float(spec.kink_distance(*args, **node.params))
            r = None  # max(top of each input in reach, default=0.0), written out (a generator cost ~1 us)
            for i in node.inputs:
                if i in reach:
                    t = top.get(i)
                    if t is None:
                        t = top[i] = float(_MAX(reach[i], axis=None, initial=0.0))
                    if r is None or t > r:  # (max()'s own test: the first item, then any greater one)
                        r = t
            if r is None:
                r = 0.0
            if math.isfinite(d) and d <= 4 * r:
                _refuse(node, d, r)


def _close(a, dom, reach):
    """(distance, reach) of the first element of ``a`` within 4x its reach of a point or edge of
    ``dom`` (in ``a``'s dtype, as the domain is declared), or None."""
    dist = None
    for p in dom.points:
        t = np.abs(a - p)
        dist = t if dist is None else np.minimum(dist, t)
    if dom.lo > -np.inf:
        t = a - dom.lo
        dist = t if dist is None else np.minimum(dist, t)
    if dom.hi < np.inf:
        t = dom.hi - a
        dist = t if dist is None else np.minimum(dist, t)
    if dist is None:
        return None
    close = dist <= 4 * reach
    if not _ANY(close, axis=None):
        return None
    j = tuple(int(i) for i in np.argwhere(close)[0])
    return float(dist[j]), float(reach[j])


_CLOSE_SMALL = 16  # elements: the domain test on Python floats up to here (at 16, as fast as numpy on a one-point domain)


def _close_small(a, dom, reach):
    """``_close`` on Python floats for a few float64 elements (the same differences and minima, the
    minima as comparisons: the centre is finite here, so no NaN reaches them, and a difference that is
    zero is +0.0, so the order of equal candidates cannot show)."""
    return _close_list(a.ravel().tolist(), dom, reach.ravel().tolist())


def _close_list(xs, dom, rs):
    """``_close_small`` of the centre values ``xs`` and reaches ``rs`` as lists of Python floats."""
    pts, lo, hi = dom.points, dom.lo, dom.hi
    has_lo, has_hi = lo > -math.inf, hi < math.inf
    for x, r in zip(xs, rs):
        d = math.inf
        for p in pts:
            t = abs(x - p)
            if t < d:
                d = t
        if has_lo:
            t = x - lo
            if t < d:
                d = t
        if has_hi:
            t = hi - x
            if t < d:
                d = t
        if d <= 4 * r:
            return d, r
    return None


def _refuse(node, d, r):
    # A declared kink within reach: FD steps aside (the exact oracles still compare, on their
    # conventions); only a kink or jump found numerically (_classify) makes the case unjudged.
    raise OracleError(
        f"finite differences: an input of node {node.name!r} ({node.op}) is {d:.3g} from a point where "
        f"{node.op} is not differentiable (kink, tie or domain edge), within 4x the perturbation reach {r:.3g}"
    )
