"""Code under test that hangs (tryout3 finding 1; the user's myops.hang_op and fns.HangsInBackward).

``hang_op``'s vjp never returns on more than 3 elements (a fixed-point iteration that never converges);
``wrong_then_hang``'s vjp is wrong by a factor 2 for a seed of ones (within rounding) and never returns for
any other upstream gradient, as the diagnosis tries (fresh upstream gradients at the same inputs): the search finds a value
finding quickly and only its diagnosis hangs.  ``HangsInBackward`` is the torch Function form of hang_op.
"""

import numpy as np

import gradspec as gs


def _hang_vjp(g, x, out):
    if x.size > 3:
        while True:  # a fixed-point iteration that never converges
            pass
    return (g * np.cos(x),)


def _wrong_then_hang_vjp(g, x, out):
    if np.any(np.abs(g - 1.0) > 1e-3):  # (the check's rounding-noise re-runs jitter g by a few ulps only)
        while True:
            pass
    return (2.0 * g * np.cos(x),)


hang_op = gs.Op("my_hang", forward=np.sin, vjp=_hang_vjp)
wrong_then_hang = gs.Op("my_wrong_then_hang", forward=np.sin, vjp=_wrong_then_hang_vjp)

try:
    import torch
except ImportError:  # the torch tests skip
    torch = None

if torch is not None:
    class HangsInBackward(torch.autograd.Function):
        """backward loops forever on inputs with more than 3 elements."""

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            r = g * x.cos()
            if x.numel() > 3:
                while True:
                    r = r * 1.0
            return r
