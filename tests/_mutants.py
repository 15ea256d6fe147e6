"""Planting bugs in a copy of the op table (test helper; never used by shipped code).

``planted(op, vjp)`` swaps one op's VJP rule for a corrupted one for the duration of a
``with`` block and restores the original afterwards, so the reference oracle computes wrong
gradients while every other oracle (which never calls VJP rules) stays correct.
"""

from __future__ import annotations

import contextlib

import numpy as np

import gradspec as gs
from gradspec import engine as E


@contextlib.contextmanager
def planted(op: str, vjp):
    spec = gs.ops.get(op)
    original = spec.vjp
    spec.vjp = vjp
    try:
        yield spec
    finally:
        spec.vjp = original


def _const(a, like):
    return E.Tensor(np.asarray(a, dtype=like.dtype))


# Corrupted VJP rules, each a classic bug family.
MUTANT_VJPS = {
    # wrong sign of one operand's gradient
    "mul-wrong-sign": ("mul", lambda g, a, b, *, out: (g * b, -(g * a))),
    # ignores the seed: as if it were all ones (right only for implicit seeds)
    "mul-ignores-seed": ("mul", lambda g, a, b, *, out: (_const(np.ones(g.shape), g) * b, _const(np.ones(g.shape), g) * a)),
    # "forgot to reduce over the broadcast dims": keeps only the first slice instead of the sum
    "mul-first-slice-not-sum": ("mul", lambda g, a, b, *, out: (_first_slice(g * b, a.shape), _first_slice(g * a, b.shape))),
    # reduces over the wrong axis: the other operand's gradient summed over the last axis
    "add-wrong-axis": ("add", lambda g, a, b, *, out: (g, E.call("expand", g.sum(dim=-1, keepdim=True), size=g.shape) if g.ndim else g)),
    # a small relative error (1e-6), the kind a loose tolerance hides
    "exp-relative-1e-6": ("exp", lambda g, x, *, out: (g * out * (1 + 1e-6),)),
    # a wrong normalisation in a reduction's VJP (sum's gradient scaled as if it were a mean)
    "sum-as-mean": (
        "sum",
        lambda g, x, *, out, dim, keepdim: (
            E.call("expand", E.call("reshape", g, shape=tuple(1 if (i - x.ndim) in dim else s for i, s in enumerate(x.shape))), size=x.shape)
            * (1.0 / max(1, int(np.prod([x.shape[d] for d in dim])))),
        ),
    ),
    # sign error on part of the domain only (x < 0)
    "tanh-sign-negative-x": ("tanh", lambda g, x, *, out: (g * (1 - out * out) * _const(np.where(x.data < 0, -1.0, 1.0), g),)),
}


def _first_slice(grad, shape):
    """Zero everything but index 0 along the dims where ``shape`` was broadcast."""
    gshape = grad.shape
    lead = len(gshape) - len(shape)
    m = np.zeros(gshape)
    idx = tuple(0 if (i < lead or shape[i - lead] == 1) else slice(None) for i in range(len(gshape)))
    m[idx] = 1.0
    return grad * _const(m, grad)
