"""tryout11's scientific-ML Functions (a differentiable-simulation researcher's code), trimmed to what the tests of
tests/test_causes_tryout11.py need: each correct one and its planted bug (named in its comment)."""

from __future__ import annotations

import torch

# (the eigh Function and its unsymmetrised bug live once, in tests/_tryout11_eigh.py)
from ._tryout11_eigh import Eigh, EighNoSym

__all__ = ["Eigh", "EighNoSym", "SolveAdjA", "FixedPointLoose"]


class SolveAdjA(torch.autograd.Function):
    """x = solve(A, b) (tryout11's CG solve, with a direct solve: the backward is what is tested). BUG: the adjoint
    solve uses A where A^T belongs."""

    @staticmethod
    def forward(ctx, A, b):
        # (A + 3n I: well-conditioned for the drawn values, so the case is never near a singular matrix)
        M = A + 3 * A.shape[-1] * torch.eye(A.shape[-1], dtype=A.dtype)
        x = torch.linalg.solve(M, b.unsqueeze(-1)).squeeze(-1)
        ctx.save_for_backward(M, x)
        return x

    @staticmethod
    def backward(ctx, g):
        M, x = ctx.saved_tensors
        lam = torch.linalg.solve(M, g.unsqueeze(-1)).squeeze(-1)  # the bug: M where M^T belongs
        return -lam.unsqueeze(-1) * x.unsqueeze(-2), lam


def _newton_fp(A, x, tol, maxiter=50):
    z = torch.zeros_like(x)
    eye = torch.eye(x.shape[-1], dtype=x.dtype)
    for _ in range(maxiter):
        u = (A @ z.unsqueeze(-1)).squeeze(-1) + x
        F = z - 0.5 * torch.tanh(u)
        if float(F.abs().max()) <= tol:
            break
        D = 0.5 * (1 - torch.tanh(u) ** 2)
        z = z - torch.linalg.solve(eye - D.unsqueeze(-1) * A, F.unsqueeze(-1)).squeeze(-1)
    return z


class FixedPointLoose(torch.autograd.Function):
    """z = 0.5 tanh(A z + x) by Newton, implicit-function-theorem backward (correct); the forward stops at an
    absolute residual of 1e-4 (the 'bug': its slope is the truncated iteration's, off by ~1e-5..1e-3 relative)."""

    @staticmethod
    def forward(ctx, A, x):
        z = _newton_fp(A, x, 1e-4)
        ctx.save_for_backward(A, x, z)
        return z

    @staticmethod
    def backward(ctx, g):
        A, x, z = ctx.saved_tensors
        D = 0.5 * (1 - torch.tanh((A @ z.unsqueeze(-1)).squeeze(-1) + x) ** 2)
        M = torch.eye(z.shape[-1], dtype=z.dtype) - D.unsqueeze(-1) * A  # I - J_f
        gu = D * torch.linalg.solve(M.transpose(-1, -2), g.unsqueeze(-1)).squeeze(-1)
        return gu.unsqueeze(-1) * z.unsqueeze(-2), gu
