"""Code a fourth new user wrote (tryout4), kept as fixtures for tests/test_causes_tryout4.py: each piece is
wrong in one known way, said in its docstring; the tests expect the words that way implies."""

from __future__ import annotations

import torch

from tests._planted import ExpOk  # (exp's forward, saving its output: the buggy twins below differ in backward only)


class ExpMutatesSaved(ExpOk):
    """BUG: backward multiplies the saved output in place (and returns it)."""

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


class ExpTwice(ExpOk):
    """BUG: backward is twice exp's derivative."""

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return 2 * y * g


def wrapped_exp_twice(x):
    """A plain function around the buggy Function (as tryout4's solve_fn wraps SolveTransposedAdjoint)."""
    return ExpTwice.apply(torch.tanh(x)) + x


class SoftThresholdInvertedMask(torch.autograd.Function):
    """Soft-thresholding (the prox of lam |.|_1). BUG: the mask is inverted: the gradient passes in the dead zone
    |x| <= lam, where the output is 0, and not outside it."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sign(x) * torch.clamp(x.abs() - 0.5, min=0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x.abs() <= 0.5).to(g.dtype)


class SymPartNoSym(torch.autograd.Function):
    """The symmetric part of a square matrix, (M + M^T)/2. BUG: backward returns g where sym(g) belongs (a
    symmetric-matrix backward, as eigh's, that forgets to symmetrise)."""

    @staticmethod
    def forward(ctx, M):
        return (M + M.transpose(-1, -2)) / 2

    @staticmethod
    def backward(ctx, g):
        return g


class SimplexProjectionOneNoCentering(torch.autograd.Function):
    """Projection of a 1-element vector onto the simplex (always [1]). BUG: backward forgets the centering
    (g - mean of g over the support) and returns the support mask times g: g itself here."""

    @staticmethod
    def forward(ctx, x):
        p = torch.ones_like(x)
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, g):
        (p,) = ctx.saved_tensors
        return (p > 0).to(g.dtype) * g
