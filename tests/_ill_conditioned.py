"""Correct torch code at ill-conditioned points (session 12, tryout7 #1, #2, #7), and one layout bug among it.

Module level, so that their findings replay.  ``gram``: X X^T + 1e-6 I for a 4 x 3 X has rank-3 X X^T, so its
smallest eigenvalue is the 1e-6 jitter and its condition |X|^2 / 1e-6 ~ 1e6..1e7 at every draw (Gaussian-process
code); ``spd``: A0 + eps sym(X), A0 SPD of a chosen condition, eps a tenth of its smallest eigenvalue."""

from __future__ import annotations

import torch


def gram(X):
    return X @ X.transpose(-1, -2) + 1e-6 * torch.eye(X.shape[-2], dtype=X.dtype)


def gp_logdet(X):
    return torch.logdet(gram(X))


def gp_cholsolve(X):
    L = torch.linalg.cholesky(gram(X))
    return torch.cholesky_solve(torch.ones(L.shape[-1], 1, dtype=X.dtype), L).squeeze(-1)


def gram_chol(X):
    return torch.linalg.cholesky(gram(X))


def _contiguous_strides(shape):
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


class _GramStorage(torch.autograd.Function):
    """BUG: reads X's memory as if contiguous (the wrong elements for a transposed X), then the same ill-conditioned
    log-det: a layout bug must still be found where the computation is ill-conditioned."""

    @staticmethod
    def forward(ctx, X):
        X = X.as_strided(X.shape, _contiguous_strides(X.shape))
        ctx.save_for_backward(X)
        return torch.logdet(gram(X))

    @staticmethod
    def backward(ctx, g):
        (X,) = ctx.saved_tensors
        return 2 * g * torch.linalg.solve(gram(X), X)


gram_logdet_storage = _GramStorage.apply


def plain_storage(X):
    """BUG, in a plain function (no Function of its own): reads X's memory as if contiguous."""
    return 2 * X.as_strided(X.shape, _contiguous_strides(X.shape))


def _sym(A):
    return 0.5 * (A + A.transpose(-1, -2))


class Chol(torch.autograd.Function):
    """A correct Cholesky backward (gA = L^-T Phi(L^T gL) L^-1, symmetrised)."""

    @staticmethod
    def forward(ctx, A):
        L = torch.linalg.cholesky(_sym(A))
        ctx.save_for_backward(L)
        return L

    @staticmethod
    def backward(ctx, gL):
        (L,) = ctx.saved_tensors
        P = torch.tril(L.transpose(-1, -2) @ gL)
        P = P - 0.5 * torch.diag_embed(torch.diagonal(P, dim1=-2, dim2=-1))
        S = torch.linalg.solve_triangular(L.transpose(-1, -2), P, upper=True)
        S = torch.linalg.solve_triangular(L.transpose(-1, -2), S.transpose(-1, -2), upper=True).transpose(-1, -2)
        return _sym(S)


def _spd(cond: float, n: int, dtype):
    g = torch.Generator().manual_seed(5)
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    lam = torch.logspace(0, -torch.log10(torch.tensor(float(cond))).item(), n, dtype=torch.float64)
    return ((Q * lam) @ Q.T).to(dtype), float(0.1 * lam[-1])


def chol_cond1e8(X):  # torch's own Cholesky backward
    A0, eps = _spd(1e8, X.shape[-1], X.dtype)
    return torch.linalg.cholesky(_sym(A0 + eps * _sym(X)))


def mychol_cond1e8(X):
    A0, eps = _spd(1e8, X.shape[-1], X.dtype)
    return Chol.apply(A0 + eps * _sym(X))


def chol_cond1e12(X):
    A0, eps = _spd(1e12, X.shape[-1], X.dtype)
    return torch.linalg.cholesky(_sym(A0 + eps * _sym(X)))


def mychol_cond1e12(X):
    A0, eps = _spd(1e12, X.shape[-1], X.dtype)
    return Chol.apply(A0 + eps * _sym(X))
