"""One finding per bug: the finding's signature, and the case reduction that localises it.

After Hypothesis has shrunk a failing case (within a bounded number of calls), :func:`localise`
finishes the job deterministically and in a handful of checks:

1. nodes that feed no root are dropped (they cannot change any gradient);
2. the case is cut at each node in turn, in graph order (the node's ancestors only, the node as
   the only root, with a fixed random seed): the first cut that still shows the failure gives
   the *culprit*, the smallest failing node;
3. the culprit alone, its inputs made leaves with the values they had, is the reported case if
   it still fails (else the cut); if the culprit takes one tensor twice and is right on two
   distinct copies, the culprit is the repeated input, not the op.

The signature that deduplicates findings (``Discrepancy.signature``) is then the cause's
``(id, pattern, op)`` when the diagnosis named one, else ``(kind, oracle pair, culprit op)``: one
bug is one report however many graphs show it, and a second bug of the same run, in another op,
gets its own.  A discrepancy met later in a bigger case is *covered* by a known finding of the
same kind and pair when the case contains the culprit op (:func:`covered`).

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec.findings import prune_dead
    >>> case = gs.Case.build({"x": np.ones(2)}, [("a", "exp", ["x"], {}), ("b", "sin", ["x"], {})], ["a"],
    ...                      [np.ones(2)])
    >>> [n.op for n in prune_dead(case).nodes]
    ['exp']
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import Callable

import numpy as np

from .case import Case, Leaf, NodeDef

__all__ = ["covered", "covers", "named_culprit", "features", "search_signature", "prune_dead", "cut_at", "isolate", "localise",
           "Localised",
           "SEVERAL_ROOTS", "REPEATED_INPUT"]


SEVERAL_ROOTS = "<several roots>"  # the failure needs two roots (accumulation across backward calls)
REPEATED_INPUT = "<repeated input>"  # the failure needs one tensor passed twice to the culprit op
_ONE_SIDED = ("raised", "timeout", "crash", "check-error")  # the first oracle of the pair is the one that failed


def features(case: Case) -> tuple:
    """What a known finding can be matched against in a case: its ops, plus the structural culprits."""
    out = {n.op for n in case.nodes}
    if len(case.roots) > 1:
        out.add(SEVERAL_ROOTS)
    if any(len(set(n.inputs)) < len(n.inputs) for n in case.nodes):
        out.add(REPEATED_INPUT)
    return tuple(sorted(out))


def search_signature(d) -> tuple:
    """The signature a discrepancy is matched with during the search (before localisation)."""
    if d.cause is not None and d.cause.id != "twin-mismatch" or d.case is None:
        return d.signature
    return (d.kind, tuple(sorted(d.oracles)), features(d.case))


def covered(sig, known) -> bool:
    """Is ``sig`` covered by a known signature: same kind and oracle pair, its ops among ``sig``'s?"""
    kind, pair, ops = sig
    ops = set(ops)
    return any(k == kind and tuple(p) == tuple(pair) and set(o) <= ops for k, p, o in known)


def culprit_oracle(d, found: list) -> str:
    """The side of ``d``'s pair to blame: the oracle that failed (raised, timed out), or the one
    involved in most of the case's disagreements (a wrong engine disagrees with every oracle)."""
    if d.kind in _ONE_SIDED:
        return d.oracles[0]
    count: dict = {}
    for x in found:
        if x.kind not in _ONE_SIDED:
            for o in x.oracles:
                count[o] = count.get(o, 0) + 1
    return max(d.oracles, key=lambda o: count.get(o, 0))


def named_culprit(d) -> str | None:
    """``d``'s culprit once diagnosed: the op of the node its cause blames where localisation found no single-root
    cut that fails (:data:`SEVERAL_ROOTS`) -- the diagnosis checked that node's rule alone at its real inputs and
    upstream gradient, a finer localisation than the cuts (tryout9 #2: the summary said "culprit <several roots>"
    while the cause blamed node v4 = ndtri_loose).  Otherwise ``d.culprit`` as it is."""
    c = d.cause
    if d.culprit == SEVERAL_ROOTS and c is not None and c.op and not c.is_engine_level:
        return c.op
    return d.culprit


def covers(d, found: list) -> list[tuple]:
    """Signatures one finding stands for: its own, and each discrepancy of its case that shares its
    culprit oracle, matched by the culprit op once localised (else by the case's features)."""
    who = culprit_oracle(d, found)
    out = {tuple(d.signature)}
    for x in found:
        involved = x.oracles[:1] if x.kind in _ONE_SIDED else x.oracles
        if who in involved:
            ops = (d.culprit,) if d.culprit else (features(x.case) if x.case is not None else ())
            out.add((x.kind, tuple(sorted(x.oracles)), tuple(ops)))
    return sorted(out, key=repr)


def _rebuilt(case: Case, leaves: list, nodes: list, roots=None, seeds=None) -> Case:
    """A new case of ``leaves`` and ``nodes`` that keeps ``case``'s engine, user ops and meta (and its
    roots and seeds unless given); ValueError if it does not validate."""
    out = Case(leaves, nodes, list(case.roots if roots is None else roots), list(case.seeds if seeds is None else seeds),
               engine=case.engine, user_ops=dict(case.user_ops), meta=dict(case.meta))
    out.validate()
    return out


def _rebuilt_or_none(case: Case, leaves: list, nodes: list) -> Case | None:
    try:
        return _rebuilt(case, leaves, nodes)
    except Exception:  # noqa: BLE001 - a rebuilt case that does not validate is not a candidate
        return None


def _sub(case: Case, keep: set, roots: list, seeds: list) -> Case:
    leaves = [Leaf(l.name, l.value, l.requires_grad) for l in case.leaves if l.name in keep]
    nodes = [NodeDef(n.name, n.op, list(n.inputs), dict(n.params)) for n in case.nodes if n.name in keep]
    return _rebuilt(case, leaves, nodes, roots, seeds)


def prune_dead(case: Case) -> Case:
    """``case`` without the nodes and leaves that feed no root (the same case if there are none)."""
    keep = case.ancestors(case.roots)
    if len(keep) == len(case.leaves) + len(case.nodes):
        return case
    return _sub(case, keep, case.roots, case.seeds)


def _seed_for(case: Case, node: str, shape: tuple, dtype) -> np.ndarray | None:
    if node in case.roots:
        return case.seeds[case.roots.index(node)]
    # A fixed seed that is not all ones (a VJP that ignores its upstream gradient must show).
    h = int.from_bytes(hashlib.sha256(f"{node}|{shape}".encode()).digest()[:4], "little")
    rng = np.random.default_rng(h)
    return (rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)).astype(dtype)


def cut_at(case: Case, node: str) -> Case | None:
    """The sub-graph up to ``node`` (its ancestors), with ``node`` as the only root; None if its
    output is not a float tensor (nothing to back-propagate)."""
    try:
        env = case.evaluate()
    except Exception:  # noqa: BLE001 - a case whose forward fails cannot be cut
        return None
    out = np.asarray(env[node])
    if out.dtype.kind != "f":
        return None
    try:
        return _sub(case, case.ancestors([node]), [node], [_seed_for(case, node, out.shape, out.dtype)])
    except Exception:  # noqa: BLE001 - e.g. a node whose cut does not validate: not a candidate
        return None


@dataclasses.dataclass
class Localised:
    """What :func:`localise` ends with: the smallest case that still fails, the discrepancies it
    shows, the culprit (the op of the smallest failing node; :data:`REPEATED_INPUT` when that op is
    right on distinct tensors; :data:`SEVERAL_ROOTS` when no single-root cut fails; None when the
    failure needs the whole graph), the calls made, and whether the budget ran out first."""

    case: Case
    found: list
    culprit: str | None
    calls: int
    exhausted: bool


def localise(case: Case, found: list, reproduces: Callable[[Case], list], *, max_calls: int = 40,
             seconds: float = 5.0) -> Localised:
    """Reduce a failing ``case`` (whose discrepancies are ``found``) with ``reproduces(case)`` ->
    the discrepancies of the same failure it shows (empty: it does not fail that way)."""
    t0, calls = time.perf_counter(), 0

    def out_of_budget() -> bool:
        return calls >= max_calls or time.perf_counter() - t0 > seconds

    pruned = prune_dead(case)
    if pruned is not case:
        calls += 1
        again = reproduces(pruned)
        if again:
            case, found = pruned, again
    for node in [n.name for n in case.nodes]:
        if out_of_budget():
            return Localised(case, found, None, calls, True)
        sub = cut_at(case, node)
        if sub is None:
            continue
        calls += 1
        again = reproduces(sub)
        if again:
            label = sub.nodes[-1].op
            alone = isolate(sub)
            if alone is not None and not out_of_budget():
                calls += 1
                more = reproduces(alone)
                if more:
                    sub, again = alone, more
            distinct = _distinct_inputs(sub)
            if distinct is not None and not out_of_budget():
                calls += 1
                if not reproduces(distinct):
                    label = REPEATED_INPUT  # the same op on two distinct tensors is right
            return Localised(sub, again, label, calls, False)
    if len(case.roots) > 1:
        return Localised(case, found, SEVERAL_ROOTS, calls, False)
    return Localised(case, found, None, calls, False)


def isolate(case: Case) -> Case | None:
    """The last node of ``case`` alone, its inputs made leaves holding the values they had (None
    when it is alone already).  A leaf input keeps its ``requires_grad``; an intermediate one
    requires grad if it is a float tensor."""
    last = case.nodes[-1]
    if len(case.nodes) == 1:
        return None
    try:
        env = case.evaluate()
    except Exception:  # noqa: BLE001
        return None
    leaves = {l.name: l for l in case.leaves}
    new_leaves = []
    for i in dict.fromkeys(last.inputs):
        v = np.array(env[i], copy=True)
        rg = leaves[i].requires_grad if i in leaves else v.dtype.kind == "f"
        new_leaves.append(Leaf(i, v, rg))
    return _rebuilt_or_none(case, new_leaves, [NodeDef(last.name, last.op, list(last.inputs), dict(last.params))])


def _distinct_inputs(case: Case) -> Case | None:
    """``case`` (cut at its last node) with a repeated input of the last node replaced by a copy of
    the same values: None when no input repeats.  Only leaves are copied (a repeated intermediate
    would need its sub-graph duplicated)."""
    last = case.nodes[-1]
    if len(set(last.inputs)) == len(last.inputs):
        return None
    leaves = {l.name: l for l in case.leaves}
    seen, inputs, extra = set(), [], []
    for i in last.inputs:
        if i in seen and i in leaves:
            name = f"{i}_copy{len(extra)}"
            extra.append(Leaf(name, np.array(leaves[i].value, copy=True), leaves[i].requires_grad))
            inputs.append(name)
        else:
            inputs.append(i)
        seen.add(i)
    if not extra:
        return None
    nodes = [NodeDef(n.name, n.op, list(n.inputs), dict(n.params)) for n in case.nodes]
    nodes[-1].inputs = inputs
    return _rebuilt_or_none(case, [Leaf(l.name, l.value, l.requires_grad) for l in case.leaves] + extra, nodes)
