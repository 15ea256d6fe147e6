"""Correct user code as people write it, for the no-false-alarm tests (tests/test_false_alarms.py).

Every Function here has a correct backward (the same formula torch uses for its built-in twin,
NaN included where torch gives NaN); gradspec must never report a discrepancy on it.  Module level,
so that saved cases replay in another process.
"""

from __future__ import annotations

import torch


class Hypot(torch.autograd.Function):
    """torch.hypot with torch's own backward: a / h, b / h (0 / 0 = NaN at a = b = 0, as torch's)."""

    @staticmethod
    def forward(ctx, a, b):
        h = torch.hypot(a, b)
        ctx.save_for_backward(a, b, h)
        return h

    @staticmethod
    def backward(ctx, g):
        a, b, h = ctx.saved_tensors
        return g * a / h, g * b / h


class Atan2(torch.autograd.Function):
    """torch.atan2 with torch's own backward: x / r, -y / r (NaN at y = x = 0, as torch's)."""

    @staticmethod
    def forward(ctx, y, x):
        ctx.save_for_backward(y, x)
        return torch.atan2(y, x)

    @staticmethod
    def backward(ctx, g):
        y, x = ctx.saved_tensors
        r = x * x + y * y
        return g * x / r, -g * y / r


# ---------------------------------------------------------------------------------------------
# user ops (gs.Op)
# ---------------------------------------------------------------------------------------------

import numpy as np  # noqa: E402

import gradspec as gs  # noqa: E402

# relu with the convention 0 at x = 0 and, as its torch twin, clamp(min=0), whose convention there is 1:
# both correct (no derivative exists at 0), they differ only at the kink.
relu_clamp_twin = gs.Op("cc_relu", forward=lambda x: np.maximum(x, 0.0), vjp=lambda g, x, out: (g * (x > 0),),
                        torch=lambda x: x.clamp(min=0))
