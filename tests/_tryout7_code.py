"""Code a new user (tryout7, scientific computing) checked, as test fixtures (silent-OK findings 5, 6, 8, 11, 13a).

Every function here is correct unless its comment says otherwise; the tests expect what the comments say, never
what running gradspec printed.
"""

from __future__ import annotations

import numpy as np
import torch


class F64OnlyForward(torch.autograd.Function):
    """A float64-only solver: its forward refuses float32 (TypeError); sin with a right backward."""

    @staticmethod
    def forward(ctx, x):
        if x.dtype != torch.float64:
            raise TypeError("float64 only")
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)


class SolveOk(torch.autograd.Function):
    """x = solve(A, b), right backward; but for a batched A with an unbatched b torch.linalg.solve reads
    b.unsqueeze(-1) (n, 1) as a batch of vectors, so the output is not the (..., n) of the gufunc signature
    "(n,n),(n)->(n)" (A (1,1,1), b (1,) gives (1,), the signature says (1, 1))."""

    @staticmethod
    def forward(ctx, A, b):
        x = torch.linalg.solve(A, b.unsqueeze(-1)).squeeze(-1)
        ctx.save_for_backward(A, x)
        return x

    @staticmethod
    def backward(ctx, g):
        A, x = ctx.saved_tensors
        lam = torch.linalg.solve(A.transpose(-1, -2), g.unsqueeze(-1)).squeeze(-1)
        return -lam.unsqueeze(-1) * x.unsqueeze(-2), lam


def soft(x):
    """Soft-thresholding at 0.5 (plain torch: autograd's gradient), kinks at +-0.5."""
    return torch.sign(x) * torch.clamp(x.abs() - 0.5, min=0)


def soft_np(x):
    return np.sign(x) * np.maximum(np.abs(x) - 0.5, 0)


def soft_np_vjp(g, x, out):
    return (g * (np.abs(x) > 0.5),)


def _shapey_forward(x):
    return np.sin(x).reshape(-1) if x.ndim >= 3 else np.sin(x)  # wrong: not elementwise for rank >= 3 (flattens)


def _make_shapey():
    import gradspec as gs

    return gs.Op("t7_shapey", forward=_shapey_forward, vjp=lambda g, x, out: (g * np.cos(x),))


shapey = _make_shapey()  # declared elementwise ("()->()"), which its forward is not for rank >= 3


def lse_naive(x):
    """log-sum-exp over the last axis without subtracting the max: right in float64 on [80, 100], but exp overflows
    to inf in float32 there (float32's largest value is 3.4e38 ~ exp(88.7))."""
    return torch.log(torch.exp(x).sum(-1))


def f64_only_np(x):
    """A numpy op's forward that refuses float32 (a float64-only library call); sin otherwise."""
    if x.dtype != np.float64:
        raise TypeError("float64 only")
    return np.sin(x)
