"""A user op's forward, called while a case is drawn, bounded by the per-case timeout (reliability review H5a).

The graph builder runs each planned node's forward once on its shapes (``_graph``: the shape probe) and the
value repair runs every node at the drawn values (``_cases``), both before any case exists and outside
every timed check: a user forward that never returns hung ``gradspec fuzz --case-timeout S`` and ``verify_op``
there for good.  Here such a call is cut after the per-case timeout in effect (``gradspec.guard.bounded``;
none set: no bound, as for a case).  A cut op is marked: its node is taken as it is planned (a float output
of its declared shape, placeholder values downstream) and not run again while cases are drawn, so the
case is built and its own timed check meets the hang -- a ``timeout`` finding on the op, the way a hang in
a case is reported -- and drawing costs one timeout per op, not one per probe.  gradspec's own ops are
called as they are (their forward is numpy code that returns; a timer per call would cost every case).
"""

from __future__ import annotations

import numpy as np

from ..guard import Hung, bounded
from ..spec.opspec import OpSpec

__all__ = ["forward", "hung", "placeholder"]

_MARK = "_gs_forward_hung"  # on a user OpSpec: why its forward is no longer called while cases are drawn


def hung(spec: OpSpec) -> str:
    """Why ``spec``'s forward is not called while cases are drawn ("" when it is)."""
    return getattr(spec, _MARK, "") or ""


def forward(spec: OpSpec, args, params: dict, where: str):
    """``spec.forward(*args, **params)``; for a user op cut after the per-case timeout: None when it hung
    (now, or at an earlier call: then it is not called).  An exception of the forward propagates."""
    if not spec.user:
        return spec.forward(*args, **params)
    if hung(spec):
        return None
    shapes = [tuple(np.shape(a)) for a in args]
    try:
        return bounded(lambda: spec.forward(*args, **params),
                       f"the forward of op {spec.name!r} ({where}, inputs of shapes {shapes})")
    except Hung as e:
        try:
            setattr(spec, _MARK, str(e))
        except (AttributeError, TypeError):  # (a frozen spec: it is cut again at its next call)
            pass
        return None


def placeholder(spec: OpSpec, args, params: dict) -> np.ndarray:
    """Zeros in place of the output of a node whose forward hung: its declared shape, its inputs' float dtype."""
    shape = spec.out_shape([tuple(np.shape(a)) for a in args], params)
    floats = [np.asarray(a).dtype for a in args if np.asarray(a).dtype.kind == "f"]
    return np.zeros(tuple(shape or ()), dtype=np.result_type(*floats) if floats else np.float64)
