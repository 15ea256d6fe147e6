"""Causes for findings that are not value discrepancies of ``check()``: a user op's contract (a vjp of
the wrong shape, count or dtype), a Function backpropagated twice, a raise no node explains, an engine
rule; the engine-level diagnosis of each rule may replace these with sharper causes.

Private to :mod:`gradspec.diagnose`, which re-exports :func:`explain_finding`.

Example::

    >>> from types import SimpleNamespace
    >>> from gradspec._diagnose_findings import explain_finding
    >>> d = SimpleNamespace(kind="forward-raised", message="ValueError: boom", case=None)
    >>> explain_finding(d).id
    'forward-raised'
"""

from __future__ import annotations

import numpy as np

from ._diagnose_raw import _mutation_cause
from ._diagnose_text import _clip, _where, _whose
from ._private import determinism as _determinism
from ._private.skips import word_cut
from .case import Case, NodeDef
from .causes import ENGINE_IDS, Cause

__all__ = ["explain_finding", "in_place_read_again"]

_ENGINE_KIND_IDS = {
    "seed-shape": "seed-shape-accepted",
    "accumulation": "accumulation-overwrite",
    "reset": "reset-ignored",
    "freeing": "no-freeing",
    "retain-graph": "no-freeing",
    "repeated-argument": "repeated-input-dropped",
    "none-before-backward": "none-vs-zeros",
    "none-vs-zeros": "none-vs-zeros",
    "error-type": "error-type",
    "requires-grad": "error-type",
}


def explain_finding(d) -> Cause | None:
    """A cause for a finding made outside ``check()``'s value comparison (None only for ``timeout``)."""
    if d.kind == "timeout":
        return None
    msg = d.message or ""
    case = d.case
    node = _node_named_in(case, msg) if case is not None else None
    spec = case.spec(node.op) if node is not None else None
    if d.kind.startswith("vjp-") or d.kind == "jvp-raised":
        pattern = "other"
        if d.kind == "vjp-shape":
            pattern = _shape_pattern(case, node, msg)
        what = {"vjp-raised": "raised", "vjp-count": "returned the wrong number of gradients",
                "vjp-shape": "returned a gradient of the wrong shape", "vjp-dtype": "returned a gradient of the wrong "
                "dtype", "vjp-writes-input": "wrote into an array it was given (its upstream gradient or an input)",
                "jvp-raised": "(the declared jvp) raised"}.get(d.kind, d.kind)
        where = _where(node, spec) if node is not None else "the op under test"
        code = _whose(spec, "reference") if spec is not None else "your vjp"
        cid = "wrong-jvp" if d.kind == "jvp-raised" else "wrong-vjp"
        return Cause(cid, f"{where}: {code} {what} — {_clip(msg.split(': ', 2)[-1], 300)}", node=None if node is None else
                     node.name, op=None if node is None else node.op, evidence=word_cut(msg, 600), pattern=pattern)
    if d.kind == "forward-raised":
        return Cause("forward-raised", f"the forward of the code under test raised: {_clip(msg, 300)}", evidence=word_cut(msg, 600))
    if d.kind == "accumulation" and d.check_name == "backward twice" and case is not None:
        return _twice_cause(case, d)
    if d.kind == "raised" and case is not None and d.check_name == "backward twice":
        return _mutation_cause(case) or _raised_cause(case, d)  # torch refuses what a backward modified
    if d.kind == "raised":
        return _raised_cause(case, d) if case is not None else Cause("not-localised", _clip(msg, 300), evidence=word_cut(msg, 600))
    if d.kind == "implicit-seed":
        cid = "implicit-seed-refused" if "refus" in msg or "numel() == 1" in msg and "raised" in msg else \
            "implicit-seed-non-scalar"
        return Cause(cid, f"{ENGINE_IDS[cid]} — {_clip(msg, 300)}", evidence=word_cut(msg, 600))
    cid = _ENGINE_KIND_IDS.get(d.kind)
    if cid is not None:
        return Cause(cid, f"{ENGINE_IDS[cid]} — {_clip(msg, 300)}", evidence=word_cut(msg, 600))
    return Cause("not-localised", f"{d.kind}: {_clip(msg, 300)}", evidence=word_cut(msg, 600))


def _node_named_in(case: Case, msg: str) -> NodeDef | None:
    for n in case.nodes:
        if f"{n.op!r}" in msg:
            return n
    user = [n for n in case.nodes if case.spec(n.op).user]
    return user[0] if user else None


def _shape_pattern(case, node, msg) -> str:
    import re

    m = re.search(r"shape (\([^)]*\)) for input (\d+), whose shape is (\([^)]*\))", msg)
    if not m:
        return "broadcast-reduction" if "broadcast axes" in msg else "other"
    got, want = (tuple(int(x) for x in s.strip("()").split(",") if x.strip()) for s in (m.group(1), m.group(3)))
    if sorted(got) == sorted(want):
        return "permuted"
    if "broadcast axes" in msg and int(np.prod(got)) > int(np.prod(want)):
        return "broadcast-reduction"
    return "other"


def drawing_backward_cause(case: Case, d) -> Cause | None:
    """A finding on a case whose torch code's backward was seen drawing random numbers of its own (a fresh dropout
    mask, tryout6 #1): that is the cause, or None.  Its gradient differs at every call, so no node looks wrong
    twice alike (before: 'one of them carries its own error', or only 'state between calls')."""
    drew = _determinism.drawing_backward(case)
    if drew is None:
        return None
    spec = case.spec(drew.op)
    return Cause("wrong-vjp", f"{_where(drew, spec)}: {_whose(spec, 'torch-cpu')} {_determinism.DRAWING_BACKWARD}",
                 node=drew.name, op=drew.op, evidence=d.message, pattern="other",
                 fix="use the forward's draws in backward: save the mask (or the noise) on ctx in forward")


def _twice_cause(case: Case, d) -> Cause:
    node = next((n for n in case.nodes if case.spec(n.op).user), None)
    factor = None
    if d.values is not None:
        twice, got = (float(v) for v in d.values)
        once = twice / 2
        if once:
            factor = (got - once) / once
    spec = case.spec(node.op) if node is not None else None
    mutated = _mutation_cause(case)
    if mutated is not None:  # what it modifies, found by calling it: the sharper sentence, the same pattern
        return Cause("wrong-vjp", mutated.summary, node=mutated.node, op=mutated.op,
                     evidence=f"{d.message}; {mutated.evidence}", pattern="scale" if factor is not None else "other",
                     factor=factor, fix=mutated.fix)
    where = _where(node, spec) if node is not None else "the Function"
    drew = drawing_backward_cause(case, d)  # a backward drawing its own mask: another answer each time
    if drew is not None:
        return drew
    detail = f" (the second call gave {factor:.6g} times the first)" if factor is not None else ""
    return Cause("wrong-vjp", f"{where}: {_whose(spec, 'torch-cpu') if spec else 'its backward'} gives another answer "
                 f"when the same graph is backpropagated a second time (retain_graph=True){detail}: it modifies what "
                 "it saved on ctx or keeps state between calls; leave ctx unchanged in backward",
                 node=None if node is None else node.name, op=None if node is None else node.op, evidence=d.message,
                 pattern="scale" if factor is not None else "other", factor=factor)


def _raised_cause(case: Case, d) -> Cause:
    who = d.oracles[0]
    text = d.message
    node = next((n for n in case.nodes if f"{n.op!r}" in text or f" {n.op}" in text), None)
    if node is not None:
        spec = case.spec(node.op)
        return Cause("wrong-vjp", f"{_where(node, spec)}: {_whose(spec, who)} raised ({_clip(text.split(': ', 1)[-1], 160)})",
                     node=node.name, op=node.op, evidence=word_cut(text, 400), pattern="other")
    return Cause("not-localised", f"{who} raised on this case; no single node could be named ({_clip(text, 160)})",
                 evidence=word_cut(text, 400))


def in_place_read_again(case: Case, d) -> Cause | None:
    """A node whose Function writes into its input in place (``ctx.mark_dirty``) while another node reads that
    input too: a witness that ran the call on the tensor itself read the written values there (program order), the
    reference engine the values the tensor had (a program of values).  Two programs, so their difference says
    nothing of the backward - never "state between calls" (tryout10 F4).  gradspec gives each in-place call its
    own copy; this names the case should a witness still share one."""
    for node in case.nodes:
        inplace = getattr(case.spec(node.op), "inplace", None)
        if inplace is None or not inplace.seen:
            continue
        for name in dict.fromkeys(node.inputs):
            other = next((n for n in case.nodes if n is not node and name in n.inputs), None)
            if other is not None:
                return Cause("not-localised", f"{_where(node, case.spec(node.op))} writes into its input {name} in "
                             f"place (ctx.mark_dirty), and {_where(other, case.spec(other.op))} reads {name} too: a "
                             "witness that ran the call on that tensor itself (program order) and one that reads "
                             f"{name} as it was (a program of values) computed different programs; {d.oracles[0]} vs "
                             f"{d.oracles[1]} says nothing of the backward. gradspec gives each in-place call its "
                             "own copy: please report this case", node=node.name, op=node.op, evidence=d.message)
    return None
