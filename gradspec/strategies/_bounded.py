"""A user op's forward, called while a case is drawn, bounded by the per-case timeout (reliability review H5a).

The graph builder runs each planned node's forward once on its shapes (``_graph``: the shape probe) and the
value repair runs every node at the drawn values (``_cases``), both before any case exists and outside
every timed check: a user forward that never returns hung ``gradspec fuzz --case-timeout S`` and ``verify_op``
there for good.  Here such a call is cut after the per-case timeout in effect (``gradspec.guard.bounded``;
none set: no bound, as for a case).  The node of a cut call is taken as it is planned (a float output of its
declared shape, placeholder values downstream), so the case is built and its own timed check meets the hang
-- a ``timeout`` finding on the op, the way a hang in a case is reported.

A cut marks the op *at those input shapes* (review F6: one slow call used to mark the whole op for the rest of
the process, silently): the next calls there are skipped, 1 after the first cut, then 2, 4, ... (a forward that
hangs for good costs a timeout per doubling, not one per draw), and the first call there that returns in time
clears the mark (a one-off stall -- a JIT compile, a loaded machine -- costs one skipped draw).  An op cut at
two shapes in a row, with no call returning in time in between, waits the same way at every shapes until a
call of it returns in time (a forward that never returns cost one timeout per shape drawn: tests/test_hangs.py's
fuzz run at 1 s took 46 s, 27 s with one mark per op, 32 s with this wait).  Every cut is counted
(:func:`cuts_since`): ``gradspec fuzz`` lists them in its summary.  gradspec's own ops are called as they are
(their forward is numpy code that returns; a timer per call would cost every case).
"""

from __future__ import annotations

import numpy as np

from ..guard import Hung, bounded
from ..spec.opspec import OpSpec

__all__ = ["forward", "hung", "placeholder", "snapshot", "cuts_since"]


class _Cut:
    """The drawing calls of one user op at one list of input shapes that were cut or skipped."""

    __slots__ = ("spec", "shapes", "seconds", "where", "cut", "skip", "backoff", "cleared", "why")

    def __init__(self, spec: OpSpec, shapes: list) -> None:
        self.spec, self.shapes = spec, shapes
        self.seconds, self.where, self.why = 0.0, "", ""
        self.cut = 0  # drawing calls that returned no output (cut by the alarm, or skipped while marked)
        self.skip = 0  # calls still to skip (0: not marked)
        self.backoff = 0  # the skips after the last cut
        self.cleared = 0  # times a call returned in time after a cut


class _Op:
    """A user op cut at two shapes in a row: every shapes wait (skip), doubling, until a call returns in time."""

    __slots__ = ("hung", "skip", "backoff", "seconds", "why")

    def __init__(self) -> None:
        self.hung, self.skip, self.backoff, self.seconds, self.why = False, 0, 0, 0.0, ""


_CUTS: dict = {}  # (id(spec), input shapes) -> _Cut, for this process (the spec is held: its id stays its own)
_OPS: dict = {}  # id(spec) -> _Op (only ops that were cut; their specs are held by _CUTS)


_MAX_SKIP = 1 << 20


def hung(spec: OpSpec, shapes=None) -> str:
    """Why ``spec``'s forward is not called while cases are drawn (at ``shapes``: any of them when None); ""
    when it is."""
    op = _OPS.get(id(spec))
    if op is not None and op.skip:
        return op.why
    return next((c.why for (i, s), c in _CUTS.items() if i == id(spec) and c.skip and shapes in (None, s)), "")


def forward(spec: OpSpec, args, params: dict, where: str):
    """``spec.forward(*args, **params)``; for a user op cut after the per-case timeout: None when it hung now,
    or when it is marked at these input shapes (then it is not called).  An exception of the forward
    propagates."""
    if not spec.user:
        return spec.forward(*args, **params)
    shapes = tuple(tuple(np.shape(a)) for a in args)
    key = (id(spec), shapes)
    c, op = _CUTS.get(key), _OPS.get(id(spec))
    if (c is not None and c.skip) or (op is not None and op.skip):
        if c is None:
            c = _CUTS[key] = _Cut(spec, [list(s) for s in shapes])
            c.seconds, c.where, c.why = op.seconds, where, op.why
        if c.skip:
            c.skip -= 1
        else:
            op.skip -= 1
        c.cut += 1
        return None
    try:
        out = bounded(lambda: spec.forward(*args, **params),
                      f"the forward of op {spec.name!r} ({where}, inputs of shapes {[list(s) for s in shapes]})")
    except Hung as e:
        if c is None:
            c = _CUTS[key] = _Cut(spec, [list(s) for s in shapes])
        c.backoff = min(2 * c.backoff or 1, _MAX_SKIP)
        c.skip, c.cut, c.seconds, c.where, c.why = c.backoff, c.cut + 1, e.seconds, where, str(e)
        op = _OPS.setdefault(id(spec), _Op())
        if op.hung:  # cut before too, nothing returned in time since: every shapes wait
            op.backoff = min(2 * op.backoff or 1, _MAX_SKIP)
            op.skip = op.backoff
        op.hung, op.seconds, op.why = True, e.seconds, str(e)
        return None
    if op is not None:
        op.hung, op.backoff = False, 0
    if c is not None and c.backoff:  # in time after a cut: a stall, not a hang
        c.backoff, c.cleared = 0, c.cleared + 1
    return out


def snapshot() -> dict:
    """What has been cut so far in this process (for :func:`cuts_since`)."""
    return {k: (c.cut, c.cleared) for k, c in _CUTS.items()}


def cuts_since(before: dict) -> list[dict]:
    """The drawing cuts since ``before`` (:func:`snapshot`), one dict per user op and input shapes: ``op``,
    ``shapes`` (the inputs' shapes), ``seconds`` (the timeout that cut), ``where`` (the probe or the repair),
    ``draws_cut`` (calls that gave no output), ``cleared`` (a later call there returned in time)."""
    out = []
    for k, c in _CUTS.items():
        cut, cleared = before.get(k, (0, 0))
        if c.cut > cut:
            out.append({"op": c.spec.name, "shapes": c.shapes, "seconds": c.seconds, "where": c.where,
                        "draws_cut": c.cut - cut, "cleared": c.cleared > cleared})
    return sorted(out, key=lambda d: (d["op"], d["shapes"]))


def placeholder(spec: OpSpec, args, params: dict) -> np.ndarray:
    """Zeros in place of the output of a node whose forward hung: its declared shape, its inputs' float dtype."""
    shape = spec.out_shape([tuple(np.shape(a)) for a in args], params)
    floats = [np.asarray(a).dtype for a in args if np.asarray(a).dtype.kind == "f"]
    return np.zeros(tuple(shape or ()), dtype=np.result_type(*floats) if floats else np.float64)
