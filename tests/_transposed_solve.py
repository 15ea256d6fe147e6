"""Backwards of x = solve(A, b) and Y = inv(A), right and with A where A^T is needed (tests/test_diagnose_transposed.py).

Module level, so that their findings replay (``--allow-import tests._transposed_solve``)."""

from __future__ import annotations

import torch


class Solve(torch.autograd.Function):
    """x = A^-1 b; lam = A^-T g, gA = -lam x^T, gb = lam."""

    @staticmethod
    def forward(ctx, A, b):
        x = torch.linalg.solve(A, b)
        ctx.save_for_backward(A, x)
        return x

    @staticmethod
    def backward(ctx, g):
        A, x = ctx.saved_tensors
        lam = torch.linalg.solve(A.mT, g)
        return -lam.unsqueeze(-1) * x.unsqueeze(-2), lam


class SolveNoTranspose(Solve):
    """BUG: the adjoint solve uses A: lam = solve(A, g)."""

    @staticmethod
    def backward(ctx, g):
        A, x = ctx.saved_tensors
        lam = torch.linalg.solve(A, g)
        return -lam.unsqueeze(-1) * x.unsqueeze(-2), lam


class Inv(torch.autograd.Function):
    """Y = A^-1; gA = -Y^T G Y^T."""

    @staticmethod
    def forward(ctx, A):
        Y = torch.linalg.inv(A)
        ctx.save_for_backward(Y)
        return Y

    @staticmethod
    def backward(ctx, G):
        (Y,) = ctx.saved_tensors
        return -Y.mT @ G @ Y.mT


class InvNoTranspose(Inv):
    """BUG: gA = -Y G Y (inv(A) where inv(A)^T belongs)."""

    @staticmethod
    def backward(ctx, G):
        (Y,) = ctx.saved_tensors
        return -Y @ G @ Y


def well_conditioned(n: int = 3, seed: int = 0):
    """A non-symmetric n x n matrix with condition ~10 and a vector b (float64)."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, n, generator=g, dtype=torch.float64) + 3 * torch.eye(n, dtype=torch.float64)
    return A, torch.randn(n, generator=g, dtype=torch.float64)
