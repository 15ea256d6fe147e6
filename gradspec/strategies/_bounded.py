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
(:meth:`Marks.cuts`): ``gradspec fuzz`` lists them in its summary.  gradspec's own ops are called as they are
(their forward is numpy code that returns; a timer per call would cost every case).

The marks belong to a run (:func:`marking`: a fuzz campaign, or a chunk of one in a worker; a ``verify_*`` search)
and end with it (review14 #6: a cut under one run's timeout skipped the op in later runs, and in calls with no
timeout at all).  With no timeout in force no mark applies; outside a run nothing is marked (each call is bounded
on its own).  A run keeps at most :data:`MAX_MARKS` input shapes; a cut past that is counted, not listed by shapes.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading

import numpy as np

from .._private import case_budget as _case_budget
from ..guard import Hung, bounded
from ..spec.opspec import OpSpec

__all__ = ["forward", "placeholder", "marking", "Marks", "MAX_MARKS"]


class _Cut:
    """The drawing calls of one user op at one list of input shapes that were cut or skipped (in one run)."""

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

    __slots__ = ("spec", "hung", "skip", "backoff", "seconds", "why", "unlisted")

    def __init__(self, spec: OpSpec) -> None:
        self.spec, self.hung, self.skip, self.backoff, self.seconds, self.why = spec, False, 0, 0, 0.0, ""
        self.unlisted = 0  # draws cut at input shapes past the run's MAX_MARKS (counted, not listed by shapes)


MAX_MARKS = 1024  # input shapes one run keeps marks for (each cut or skipped ones: a few hundred bytes)
_MAX_SKIP = 1 << 20


class Marks:
    """The drawing cuts of one run (:func:`marking`), read and written under its lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._cuts: dict = {}  # (id(spec), input shapes) -> _Cut (the spec is held: its id stays its own)
        self._ops: dict = {}  # id(spec) -> _Op (only ops that were cut)

    def marked(self) -> list:
        """``(op name, input shapes)`` of the calls skipped for now."""
        with self.lock:
            return [(c.spec.name, c.shapes) for c in self._cuts.values() if c.skip]

    def cuts(self) -> list[dict]:
        """The run's drawing cuts, one dict per user op and input shapes: ``op``, ``shapes`` (the inputs' shapes;
        [] for the cuts past :data:`MAX_MARKS` shapes), ``seconds`` (the timeout that cut), ``where`` (the probe or
        the repair), ``draws_cut`` (calls that gave no output), ``cleared`` (a later call there returned in time)."""
        with self.lock:
            out = [{"op": c.spec.name, "shapes": c.shapes, "seconds": c.seconds, "where": c.where,
                    "draws_cut": c.cut, "cleared": c.cleared > 0} for c in self._cuts.values() if c.cut]
            out += [{"op": o.spec.name, "shapes": [], "seconds": o.seconds,
                     "where": f"at input shapes past the first {MAX_MARKS} (not listed)", "draws_cut": o.unlisted,
                     "cleared": False} for o in self._ops.values() if o.unlisted]
        return sorted(out, key=lambda d: (d["op"], d["shapes"]))

    def before(self, spec: OpSpec, shapes: tuple, where: str) -> tuple:
        """``(skip, cut entry or None, op entry or None)`` for a call of ``spec`` at ``shapes``: skip it when
        marked (counted as a cut)."""
        key = (id(spec), shapes)
        with self.lock:
            c, op = self._cuts.get(key), self._ops.get(id(spec))
            if not ((c is not None and c.skip) or (op is not None and op.skip)):
                return False, c, op
            if c is None:
                c = self._entry(key, spec, shapes)
                if c is not None:
                    c.seconds, c.where, c.why = op.seconds, where, op.why
            if c is not None and c.skip:
                c.skip -= 1
            else:
                op.skip -= 1
            self._count(c, op)
            return True, c, op

    def hung(self, spec: OpSpec, shapes: tuple, where: str, e: Hung) -> None:
        """A call of ``spec`` at ``shapes`` was cut: mark the shapes (and, cut twice in a row, the op)."""
        key = (id(spec), shapes)
        with self.lock:
            op = self._ops.get(id(spec))
            if op is None:
                op = self._ops[id(spec)] = _Op(spec)
            c = self._cuts.get(key) or self._entry(key, spec, shapes)
            if c is not None:
                c.backoff = min(2 * c.backoff or 1, _MAX_SKIP)
                c.skip, c.seconds, c.where, c.why = c.backoff, e.seconds, where, str(e)
            self._count(c, op)
            if op.hung:  # cut before too, nothing returned in time since: every shapes wait
                op.backoff = min(2 * op.backoff or 1, _MAX_SKIP)
                op.skip = op.backoff
            op.hung, op.seconds, op.why = True, e.seconds, str(e)

    def returned(self, c, op) -> None:
        """A call returned in time: a stall, not a hang (its marks cleared)."""
        with self.lock:
            if op is not None:
                op.hung, op.backoff = False, 0
            if c is not None and c.backoff:
                c.backoff, c.cleared = 0, c.cleared + 1

    def _entry(self, key, spec, shapes):
        if len(self._cuts) >= MAX_MARKS:
            return None
        c = self._cuts[key] = _Cut(spec, [list(s) for s in shapes])
        return c

    @staticmethod
    def _count(c, op) -> None:
        if c is not None:
            c.cut += 1
        else:
            op.unlisted += 1


_RUN: contextvars.ContextVar = contextvars.ContextVar("gradspec_drawing_marks", default=None)


@contextlib.contextmanager
def marking(marks: Marks | None = None):
    """A run's drawing-cut marks (:class:`Marks`, new unless given): in force while the block runs only."""
    marks = Marks() if marks is None else marks
    token = _RUN.set(marks)
    try:
        yield marks
    finally:
        _RUN.reset(token)


def forward(spec: OpSpec, args, params: dict, where: str):
    """``spec.forward(*args, **params)``; for a user op cut after the per-case timeout: None when it hung now,
    or when the run marked it at these input shapes (then it is not called).  An exception of the forward
    propagates."""
    if not spec.user or not _case_budget.current():  # (no timeout in force: nothing cuts, no mark applies)
        return spec.forward(*args, **params)
    shapes = tuple(tuple(np.shape(a)) for a in args)
    marks = _RUN.get()
    c = op = None
    if marks is not None:
        skip, c, op = marks.before(spec, shapes, where)
        if skip:
            return None
    try:
        out = bounded(lambda: spec.forward(*args, **params),
                      f"the forward of op {spec.name!r} ({where}, inputs of shapes {[list(s) for s in shapes]})")
    except Hung as e:
        if marks is not None:
            marks.hung(spec, shapes, where, e)
        return None
    if marks is not None and (c is not None or op is not None):
        marks.returned(c, op)
    return out


def placeholder(spec: OpSpec, args, params: dict) -> np.ndarray:
    """Zeros in place of the output of a node whose forward hung: its declared shape, its inputs' float dtype."""
    shape = spec.out_shape([tuple(np.shape(a)) for a in args], params)
    floats = [np.asarray(a).dtype for a in args if np.asarray(a).dtype.kind == "f"]
    return np.zeros(tuple(shape or ()), dtype=np.result_type(*floats) if floats else np.float64)
