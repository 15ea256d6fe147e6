"""Code from a user's tryout (tryout4): ill-conditioned solves built from a free input, and a straight-through floor.

``gen_from(M, k)``: a general 4 x 4 matrix of condition ~10**k, U diag(logspace(0, -k)) V^T plus a smooth
perturbation 0.3 s_min tanh(M) / n, so that the gradient flows to M through plain torch ops and the Function.
"""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=None)
def _orth(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * seed + n)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    return q


def gen_from(M: torch.Tensor, logcond: float) -> torch.Tensor:
    n = M.shape[-1]
    s = torch.logspace(0, -logcond, n, dtype=torch.float64).to(M.dtype)
    return (_orth(n, 2).to(M.dtype) * s) @ _orth(n, 3).to(M.dtype).T + 0.3 * s[-1] * torch.tanh(M) / n


class Solve(torch.autograd.Function):
    """x = A^-1 b with the adjoint backward: lam = A^-T g, gA = -lam x^T, gb = lam."""

    @staticmethod
    def forward(ctx, A, b):
        x = torch.linalg.solve(A, b)
        ctx.save_for_backward(A, x)
        return x

    @staticmethod
    def backward(ctx, g):
        A, x = ctx.saved_tensors
        lam = torch.linalg.solve(A.transpose(-1, -2), g)
        return -lam.unsqueeze(-1) * x.unsqueeze(-2), lam


class SolveOuterTransposed(Solve):
    """BUG: gA = -x lam^T (the outer product transposed); b's gradient is right."""

    @staticmethod
    def backward(ctx, g):
        A, x = ctx.saved_tensors
        lam = torch.linalg.solve(A.transpose(-1, -2), g)
        return -x.unsqueeze(-1) * lam.unsqueeze(-2), lam


def solve_fn(cls, logcond):
    def f(M, b):
        return cls.apply(gen_from(M, logcond), b)

    f.__name__ = f"{cls.__name__}_k{logcond}"
    return f


def example(seed: int):
    """The (M, b) example inputs the tryout drew with torch.manual_seed(seed)."""
    torch.manual_seed(seed)
    return torch.randn(4, 4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)


class StraightThroughFloor(torch.autograd.Function):
    """floor with the straight-through estimator's backward (g): not floor's derivative (0 between integers)."""

    @staticmethod
    def forward(ctx, x):
        return torch.floor(x)

    @staticmethod
    def backward(ctx, g):
        return g
