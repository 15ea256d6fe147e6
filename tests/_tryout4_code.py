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


class CubicRoot(torch.autograd.Function):
    """x solving x^3 + a x = b (a > 0: one real root) by Newton; implicit gradient, right to first order.
    It saves ``torch.broadcast_tensors(a, b)[0]``, a view of a made inside forward: autograd saves that as a leaf
    of its own, so where a is broadcast its double backward misses the term through a (wrong by construction)."""

    @staticmethod
    def forward(ctx, a, b):
        a_, b_ = torch.broadcast_tensors(a, b)
        x = torch.zeros_like(b_)
        for _ in range(200):
            x = x - (x ** 3 + a_ * x - b_) / (3 * x ** 2 + a_)
        ctx.save_for_backward(a_, x)
        ctx.shapes = (a.shape, b.shape)
        return x

    @staticmethod
    def backward(ctx, g):
        a, x = ctx.saved_tensors
        d = 3 * x ** 2 + a
        sa, sb = ctx.shapes
        return (-g * x / d).sum_to_size(sa), (g / d).sum_to_size(sb)


class CubicRootSavesInput(CubicRoot):
    """The same, saving the input a itself (broadcast in backward): right to second order too."""

    @staticmethod
    def forward(ctx, a, b):
        a_, b_ = torch.broadcast_tensors(a, b)
        x = torch.zeros_like(b_)
        for _ in range(200):
            x = x - (x ** 3 + a_ * x - b_) / (3 * x ** 2 + a_)
        ctx.save_for_backward(a, x)
        ctx.shapes = (a.shape, b.shape)
        return x


class ExpTwice(torch.autograd.Function):
    """BUG: backward is twice exp's derivative."""

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return 2 * y * g


def wrapped_exp_twice(x):
    """A plain function around the buggy Function (as tryout4's solve_fn wraps SolveTransposedAdjoint)."""
    return ExpTwice.apply(torch.tanh(x)) + x
