"""User code for tests/test_verdicts.py: the situations of issue 11 where a verdict used to be wrong.

Module-level objects, so saved cases replay (``tests._verdict_ops:raising_vjp``) in a subprocess
whose PYTHONPATH holds the repository root.  Never used by shipped code.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import gradspec as gs
from gradspec.engines import ReferenceEngine
from gradspec.ops.user import sum_to


def _sin_jvp(t, x, out):
    return np.cos(x) * t[0]


def _raise(g, x, out):
    raise ValueError("planted failure inside the vjp")


# A vjp that raises / returns two gradients for one input; the jvp is right and there is no torch twin:
# only finite differences and the jacobian are left to compare, and they agree with each other.
raising_vjp = gs.Op("vd_raising_vjp", forward=np.sin, vjp=_raise, jvp=_sin_jvp)
two_grads = gs.Op("vd_two_grads", forward=np.sin, vjp=lambda g, x, out: (g * np.cos(x), g), jvp=_sin_jvp)


def _where_vjp(g, c, a, b, out):
    m = c > 0
    return np.zeros_like(c), sum_to(np.where(m, g, 0.0), np.shape(a)), sum_to(np.where(m, 0.0, g), np.shape(b))


# Correct user code: c is not differentiable; the vjp says so with zeros, torch's twin leaves c.grad None.
where = gs.Op("vd_where", forward=lambda c, a, b: np.where(c > 0, a, b), vjp=_where_vjp,
              torch=lambda c, a, b: torch.where(c > 0, a, b))

# Correct user code whose twin is another function above 10: F.softplus returns x there (its threshold).
softplus = gs.Op("vd_softplus", forward=lambda x: np.logaddexp(0.0, x),
                 vjp=lambda g, x, out: (g / (1.0 + np.exp(-x)),), torch=lambda x: F.softplus(x, threshold=10))


class BackwardRaises(ReferenceEngine):
    """An engine whose backward() always raises."""

    name = "backward-raises"

    def backward(self, tensor, gradient=None, retain_graph=False):
        raise RuntimeError("planted: backward is not implemented")


backward_raises = BackwardRaises()


class ForwardRaises(torch.autograd.Function):
    """A torch Function whose forward always raises (the code under test never runs)."""

    @staticmethod
    def forward(ctx, x):
        raise ValueError("planted: this forward always raises")

    @staticmethod
    def backward(ctx, g):
        return g


def _refuse(x):
    raise ValueError("planted: forward refuses every input")


# A forward that raises on every input: the vjp (the code under test) never runs.
raising_fwd = gs.Op("vd_raising_fwd", forward=_refuse, arity=1, vjp=lambda g, x, out: (g,),
                    jvp=lambda t, x, out: t[0])

# The same twin as `softplus`, with a vjp that is really wrong (the sigmoid of 2x, not of x).
softplus_wrong = gs.Op("vd_softplus_wrong", forward=lambda x: np.logaddexp(0.0, x),
                       vjp=lambda g, x, out: (g / (1.0 + np.exp(-2 * x)),), torch=lambda x: F.softplus(x, threshold=10))


class Float32Grads(ReferenceEngine):
    """An engine whose gradients come back in float32 whatever the leaf's dtype."""

    name = "float32-grads"

    def grad(self, leaf):
        g = super().grad(leaf)
        return None if g is None else g.astype(np.float32)


float32_grads = Float32Grads()
