"""tryout11's float64 scientific code (trimmed from the user's sciml.py): no float32 cast or float32 arithmetic
anywhere, so gradspec must never say it "computes in float32 inside" (tests/test_tryout11_float32_label.py).
``LogDetGramSmall`` is the planted bug of the same user (the correct gradient scaled by 1 + 1e-5), ``LogDetGram1e6``
the same at 1e-6."""

from __future__ import annotations

import torch

__all__ = ["LogDetGram", "LogDetGramSmall", "LogDetGram1e6", "SimplexProj"]


def _gram(M):
    return M @ M.transpose(-1, -2) + torch.eye(M.shape[-2], dtype=M.dtype)


class LogDetGram(torch.autograd.Function):
    """log det(M M^T + I) by Cholesky; its gradient 2 (M M^T + I)^-1 M."""

    @staticmethod
    def forward(ctx, M):
        L = torch.linalg.cholesky(_gram(M))
        ctx.save_for_backward(M, L)
        return 2 * torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)

    @staticmethod
    def backward(ctx, g):
        M, L = ctx.saved_tensors
        return 2 * g[..., None, None] * torch.cholesky_solve(M, L)


class LogDetGramSmall(LogDetGram):
    """Wrong by 1e-5 relative (a typo'd constant)."""

    @staticmethod
    def backward(ctx, g):
        return LogDetGram.backward(ctx, g) * (1 + 1e-5)


class LogDetGram1e6(LogDetGram):
    """Wrong by 1e-6 relative: the smallest error gradspec must find in float64."""

    @staticmethod
    def backward(ctx, g):
        return LogDetGram.backward(ctx, g) * (1 + 1e-6)


class SimplexProj(torch.autograd.Function):
    """Euclidean projection of each row onto the probability simplex (sort based)."""

    @staticmethod
    def forward(ctx, x):
        n = x.shape[-1]
        u, _ = torch.sort(x, dim=-1, descending=True)
        css = u.cumsum(-1) - 1
        k = torch.arange(1, n + 1, dtype=x.dtype)
        rho = (((u - css / k) > 0) * k).amax(-1, keepdim=True)
        theta = css.gather(-1, rho.long() - 1) / rho
        y = torch.clamp(x - theta, min=0)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        s = (y > 0).to(g.dtype)
        return s * (g - (g * s).sum(-1, keepdim=True) / s.sum(-1, keepdim=True))
