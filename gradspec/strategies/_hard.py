"""Hard regions on purpose: float32 and mixed-precision graphs, and exact ties and kinks.

A case's precision is one choice: float64 (the shrink target), float32, or mixed -- some float
leaves float32, the others float64, meeting only in ops that promote (elementwise ops with
broadcasting, as in torch, where ``float32 + float64`` is float64; matmul, conv1d, cat... want
one dtype and get one).

An exact tie or kink is planted at ONE node, chosen among those whose relevant inputs are leaves
(their values are ours to set exactly, in both engines): ``relu``/``abs``/``leaky_relu``/``elu``
at 0, ``maximum``/``minimum`` with equal elements, ``clamp`` at a bound, ``max``/``min``/``amax``/
``amin`` with the extreme element repeated in every reduced slice.  There the derivative does not
exist; torch has a convention (the reference engine reproduces it), finite differences and the
jacobian have none, and step aside with the reason (``gradspec._private.kinks``).  A plant that
would put any other node on a kink or out of its domain is dropped, never repaired.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .._private import values as _values

# op -> (kind, input slots that must be leaves)
POINT_KINKS = {"relu": 0.0, "abs": 0.0, "leaky_relu": 0.0, "elu": 0.0}  # kink at 0 of input 0
PAIR_TIES = ("maximum", "minimum")
BOUND_KINKS = ("clamp",)
SLICE_TIES = {"amax": np.max, "max": np.max, "amin": np.min, "min": np.min}

# One choice per case decides precision: 0-5 float64 (60%), 6-7 float32, 8-9 mixed.
_DTYPE_CHOICE = st.integers(0, 9)
# One choice per case with a candidate node decides whether a tie/kink is planted there (1 in 2).
_HARD_CHOICE = st.integers(0, 1)
_WHERE = st.integers(0, 255)


def draw_dtype_mode(draw, mode: str) -> str:
    if mode != "any":
        return mode
    k = draw(_DTYPE_CHOICE)
    return "float64" if k < 6 else "float32" if k < 8 else "mixed"


def promotes(spec) -> bool:
    """Inputs of different float dtypes are promoted (torch and numpy agree) rather than refused."""
    return spec.family == "elementwise" and bool(spec.broadcasting)


def mixed_dtypes(g, pick: int) -> list[str] | None:
    """Leaf dtypes for a mixed graph: the float leaves from ``pick`` on (cyclically, at least one and
    not all) float32, grown until every non-promoting op sees one dtype; None if no split exists."""
    floats = [l for l in g.leaves if l.is_float]
    if len(floats) < 2:
        return None
    start = pick % len(floats)
    want32 = {floats[start].name}
    groups = _same_dtype_groups(g)
    changed = True
    while changed:  # close the float32 set under "must share a dtype"
        changed = False
        for grp in groups:
            if grp & want32 and not grp <= want32:
                want32 |= grp
                changed = True
    if len(want32) == len(floats):
        return None
    return ["float32" if l.name in want32 else l.dtype for l in g.leaves]


def _same_dtype_groups(g) -> list[set]:
    """Sets of leaves whose dtypes must agree: those feeding a non-promoting op together (through any
    chain of ops: a node's dtype is its float inputs' promotion)."""
    leaves = {l.name for l in g.leaves if l.is_float}
    feeds: dict[str, set] = {n: {n} for n in leaves}
    groups = []
    for n in g.nodes:
        spec = g.spec(n.op)
        srcs = [feeds.get(i, set()) for j, i in enumerate(n.inputs)]
        union = set().union(*srcs) if srcs else set()
        if not promotes(spec) and len([s for s in srcs if s]) > 1:
            groups.append(union)
        feeds[n.name] = union
    return groups


# ---------------------------------------------------------------------------------------------
# ties and kinks
# ---------------------------------------------------------------------------------------------


def candidates(g) -> list[int]:
    """Indices of nodes where a tie/kink can be planted: their relevant inputs are float leaves."""
    leaves = {l.name: l for l in g.leaves}
    out = []
    for idx, n in enumerate(g.nodes):
        ins = [leaves.get(i) for i in n.inputs]
        if n.op in POINT_KINKS or n.op in BOUND_KINKS or n.op in SLICE_TIES:
            ok = ins and ins[0] is not None and ins[0].is_float and 0 not in ins[0].shape
        elif n.op in PAIR_TIES:
            ok = (len(ins) == 2 and all(l is not None and l.is_float for l in ins) and ins[0] is not ins[1]
                  and 0 not in ins[0].shape and 0 not in ins[1].shape)
        else:
            ok = False
        if ok:
            out.append(idx)
    return out


def _candidates_of(g) -> list[int]:
    """``candidates(g)``, kept on the graph for all its value sets.  After the build a graph changes
    only by a repair's detach, which appends a leaf: the leaf count is the key."""
    hit = getattr(g, "_plant_candidates", None)
    if hit is not None and hit[0] == len(g.leaves):
        return hit[1]
    cands = candidates(g)
    g._plant_candidates = (len(g.leaves), cands)
    return cands


def _allows(leaf, v: float) -> bool:
    """``v`` lies in every domain the leaf feeds, ignoring the kink points of the planted op itself."""
    doms = [d for d in leaf.domains if d is not None and not (d.name == "away_from" and 0.0 in d.points)]
    return _values.Allowed.of(doms, 1e-3, 1e3).contains(v) or v == 0.0 and all(
        d.lo < 0.0 < d.hi and 0.0 not in d.points for d in doms)


def plant(g, vals: dict, idx: int, where: int) -> dict | None:
    """New leaf values with an exact tie/kink at node ``idx`` (``where`` picks the element), or None."""
    n = g.nodes[idx]
    leaves = {l.name: l for l in g.leaves}
    x = leaves[n.inputs[0]]
    a = np.array(vals[x.name], copy=True)
    out = dict(vals)
    if n.op in POINT_KINKS:
        if not _allows(x, 0.0):
            return None
        a.flat[where % a.size] = 0.0
        out[x.name] = a
    elif n.op in BOUND_KINKS:
        bounds = [b for b in (n.params.get("min"), n.params.get("max")) if b is not None]
        b = bounds[where % len(bounds)]
        if not _allows(x, float(b)):
            return None
        a.flat[where % a.size] = b
        out[x.name] = a
    elif n.op in SLICE_TIES:
        dim = n.params.get("dim")
        axes = tuple(range(a.ndim)) if dim is None or dim == () else tuple(np.atleast_1d(dim).tolist())
        if a.ndim == 0 or int(np.prod([a.shape[k] for k in axes])) < 2:
            return None
        m = SLICE_TIES[n.op](a, axis=axes, keepdims=True)
        for end in (0, -1):  # the extreme value at both ends of every reduced slice
            sl = tuple(end if k in axes or k - a.ndim in axes else slice(None) for k in range(a.ndim))
            a[sl] = np.squeeze(m, axis=axes)
        out[x.name] = a
    else:  # maximum / minimum: a == b at one element (a nice value both domains allow)
        y = leaves[n.inputs[1]]
        b = np.array(vals[y.name], copy=True)
        v = next((v for v in _values.NICE if _allows(x, v) and _allows(y, v)), None)
        if v is None or not (a.shape == b.shape or a.size == 1 or b.size == 1):
            return None
        j = where % max(a.size, b.size)
        a.flat[j % a.size] = v
        b.flat[j % b.size] = v
        out[x.name], out[y.name] = a, b
    return out


def maybe_plant(draw, g, vals: dict, bad_node) -> tuple[dict, list]:
    """Draw whether to plant (1 case in 8) and where; returns (values, hard) with ``hard`` the planted
    ``[{"node", "op", "kind"}]`` (empty when nothing was planted or the plant had to be dropped)."""
    cands = _candidates_of(g)
    if not cands or draw(_HARD_CHOICE) != 1:
        return vals, []
    where = draw(_WHERE)
    idx = cands[where % len(cands)]
    new = plant(g, vals, idx, where // len(cands))
    if new is None:
        return vals, []
    bad, _, _ = bad_node(g, new, allow={idx})
    if bad is not None:
        return vals, []
    n = g.nodes[idx]
    kind = "kink" if n.op in POINT_KINKS or n.op in BOUND_KINKS else "tie"
    return new, [{"node": n.name, "op": n.op, "kind": kind}]
