"""Code a fourth new user wrote (tryout4), kept as fixtures for tests/test_causes_tryout4.py: each piece is
wrong in one known way, said in its docstring; the tests expect the words that way implies."""

from __future__ import annotations

import torch


class ExpMutatesSaved(torch.autograd.Function):
    """BUG: backward multiplies the saved output in place (and returns it)."""

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y.mul_(g)
