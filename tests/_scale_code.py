"""tryout6 #6's layer (scale_report.py): a matmul Function whose backward halves the weight's gradient, for
tests/test_scale_cause.py.  Module level, so cases naming it load and replay."""

from __future__ import annotations

import torch


class HalfWeightMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w.T, 0.5 * x.T @ g  # BUG: half the weight's gradient
