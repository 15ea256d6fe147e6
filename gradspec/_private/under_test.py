"""Which leaves reach the code under test, from the graph's structure alone (review14 #2).

A gradient value compared at a leaf element judges the code under test only if some path from that leaf runs
through it to a root: the user ops of a case (``spec.user``), or -- a case of engine ops only, where the engine is
under test -- any node, so any path to a root.  Finite differences' per-element judging at kinks
(``gradspec.oracles._fd_refine``) and a run's count of judged cases (``gradspec.outcome.counts_for_run``) ask this.
Structure, not values: a path counts whatever the values along it (a relu that is 0 here still lies on it), so a
leaf that reaches no such node is never counted, and one that does is counted at the leaf's granularity -- except
where an estimate left some elements out at kinks: both callers then ask, per compared element, whether moving it by
finite differences' step moves an input of the op (``_fd_refine.moves_op_inputs``: a leaf split by indexing between
two user ops reaches each with some of its elements only).
"""

from __future__ import annotations

__all__ = ["reaching_leaves", "user_ops"]


def _is_user(case, op: str) -> bool:
    try:
        return bool(getattr(case.spec(op), "user", False))
    except Exception:  # noqa: BLE001 - an op that cannot be resolved is no user op gradspec could run
        return False


def user_ops(case) -> list[str]:
    """The user ops of the case's nodes that have a path to a root, in node order, each once."""
    live = _live(case)
    out: list[str] = []
    for n in case.nodes:
        if n.name in live and n.op not in out and _is_user(case, n.op):
            out.append(n.op)
    return out


def _live(case) -> set:
    """Names (nodes and leaves) with a path to a root."""
    live = set(case.roots)
    for n in reversed(case.nodes):
        if n.name in live:
            live.update(n.inputs)
    return live


def reaching_leaves(case, op: str | None = None) -> set:
    """Names of the leaves with a path through the code under test to a root: through a node of ``op`` when
    given; else through a user op, or (a case without user ops: the engine is under test) to any root."""
    live = _live(case)
    if op is None:
        targets = set(user_ops(case))
        if not targets and not any(_is_user(case, n.op) for n in case.nodes):
            return {l.name for l in case.leaves if l.name in live}
    else:
        targets = {op}
    through: set = set()
    for n in reversed(case.nodes):
        if n.name in live and (n.op in targets or n.name in through):
            through.update(n.inputs)
    return {l.name for l in case.leaves if l.name in through}
