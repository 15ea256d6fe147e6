"""Code from a new user's tryout (tryout3, findings #10-#12) whose findings got a wrong or vague cause:
user ops (gs.Op) and torch Functions, each wrong (or right) in the way the user wrote it."""

from __future__ import annotations

import numpy as np
import torch

import gradspec as gs

# a straight-through estimator as a user op: forward floors, vjp passes g through (true gradient 0)
floor_ste = gs.Op("t3_floor_ste", forward=lambda x: np.floor(4 * x) / 4, vjp=lambda g, x, out: (g,))


def _lse_fwd(x):
    m = x.max(-1, keepdims=True)
    return (np.log(np.exp(x - m).sum(-1, keepdims=True)) + m)[..., 0]


# rowwise logsumexp whose vjp multiplies by g twice
lse_bad = gs.Op("t3_lse_bad", forward=_lse_fwd, signature="(n)->()",
                vjp=lambda g, x, out: (g[..., None] * np.exp(x - out[..., None]) * g[..., None],))


class SoftplusNaive(torch.autograd.Function):
    """right math, naive backward exp(x) / (1 + exp(x)): inf / inf = NaN for x > 709."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        e = torch.exp(x)
        return g * e / (1 + e)


class ForwardMutatesInput(torch.autograd.Function):
    """forward scales its input in place (x.mul_) and returns it: mark_dirty forgotten."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.clone())
        return x.mul_(2)

    @staticmethod
    def backward(ctx, g):
        return 2 * g


class HuberBuggy(torch.autograd.Function):
    """Huber loss whose backward forgot delta on the linear part (sign(x) for delta * sign(x)): right at delta = 1."""

    @staticmethod
    def forward(ctx, x, delta):
        ctx.save_for_backward(x)
        ctx.delta = delta
        a = x.abs()
        return torch.where(a <= delta, 0.5 * x * x, delta * (a - 0.5 * delta))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.where(x.abs() <= ctx.delta, x, x.sign()), None


class BiasAddNoReduce(torch.autograd.Function):
    """y = x + b, b (n,) broadcast over x (.., n); backward returns g for b unreduced: torch sums it down."""

    @staticmethod
    def forward(ctx, x, b):
        return x + b

    @staticmethod
    def backward(ctx, g):
        return g, g


class ConstOut(torch.autograd.Function):
    """output does not depend on x; backward (wrongly) returns g."""

    @staticmethod
    def forward(ctx, x):
        return torch.ones_like(x)

    @staticmethod
    def backward(ctx, g):
        return g
