"""Code a fifth new user wrote (tryout5, a custom-ops library), kept as fixtures for
tests/test_replay_tryout5.py: each piece is wrong in one known way, said in its docstring."""

from __future__ import annotations

import torch


class RareBug(torch.autograd.Function):
    """sin; BUG: its backward is 1 % off, but only on inputs of 6+ elements holding a value beyond 1.9
    (found by some seeds of a short search, not by others: tryout5's ci_proj/test_rare.py)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        d = torch.cos(x)
        if x.numel() >= 6 and bool((x.abs() > 1.9).any()):
            d = d * 1.01
        return g * d


RARE_EXAMPLE = (torch.linspace(-1, 1, 4, dtype=torch.float64).reshape(2, 2),)
