"""Code of the sixth new user's report (tryout6, training infra; findings 5 and 7), kept as fixtures for
tests/test_surrogate.py: training tricks whose gradient is a surrogate on purpose, their buggy twins (each
wrong in the way its docstring says), plain functions that leave torch's autograd (detach, a hook, no_grad)
and embeddings with a padding row.  Module level, so that their cases replay."""

from __future__ import annotations

import torch

LAMBDA = 0.5


class STE(torch.autograd.Function):
    """Rounding to 1/7 steps inside [-1, 1]; backward: straight-through (identity) inside the clip range, 0 out."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.round(x.clamp(-1, 1) * 7) / 7

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x.abs() <= 1).to(g.dtype)


class STENoClip(torch.autograd.Function):
    """BUG: the straight-through backward forgets the clip range (passes g where |x| > 1 too)."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x.clamp(-1, 1) * 7) / 7

    @staticmethod
    def backward(ctx, g):
        return g


class GradReverse(torch.autograd.Function):
    """Identity forward, -LAMBDA g backward (gradient reversal, on purpose)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -LAMBDA * g


class GradReverseWrongSign(torch.autograd.Function):
    """BUG: gradient reversal with the wrong sign (+LAMBDA g)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return LAMBDA * g


def stop_grad_mix(x):
    """Value sin(x), gradient identity (x + (f(x) - x).detach()), on purpose."""
    return x + (torch.sin(x) - x).detach()


def hook_scaled(x):
    """A hook halves the gradient of an intermediate (the forward is 2 sin(x))."""
    h = torch.sin(x)
    if h.requires_grad:
        h.register_hook(lambda g: 0.5 * g)
    return h * 2


def no_grad_inside(x):
    """x * sin(x) with sin(x) computed under no_grad: the gradient misses x cos(x)."""
    with torch.no_grad():
        s = torch.sin(x)
    return x * s


class Emb(torch.nn.Module):
    """An embedding with an optional padding row (torch gives that row no gradient, by design)."""

    def __init__(self, pad=None):
        super().__init__()
        self.e = torch.nn.Embedding(10, 4, padding_idx=pad)

    def forward(self, idx):
        return self.e(idx)


class Half(torch.autograd.Function):
    """BUG: x -> 2x whose backward returns g (half the gradient)."""

    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return g


class EmbHalf(torch.nn.Module):
    """An embedding with a padding row followed by a buggy Function: the bug must still be found."""

    def __init__(self):
        super().__init__()
        self.e = torch.nn.Embedding(10, 4, padding_idx=0)

    def forward(self, idx):
        return Half.apply(self.e(idx))


def embedding_pad0(w, idx):
    """F.embedding with padding_idx=0 called in a plain function (nothing for gradspec to recognise)."""
    return torch.nn.functional.embedding(idx, w, padding_idx=0)


class EmbedDropRow0(torch.autograd.Function):
    """BUG: an embedding lookup whose backward drops row 0's gradient (no padding row declared anywhere)."""

    @staticmethod
    def forward(ctx, w, idx):
        ctx.save_for_backward(idx)
        ctx.rows = w.shape[0]
        return w[idx]

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        gw = torch.zeros(ctx.rows, g.shape[-1], dtype=g.dtype).index_add_(0, idx.reshape(-1), g.reshape(-1, g.shape[-1]))
        gw[0] = 0
        return gw, None


IDX = torch.tensor([[0, 3, 5, 7]])  # index 0 = the padding row, no repeated index
IDX_REPEATED = torch.tensor([[0, 3, 3, 0]])  # the padding row twice, and row 3 twice


class QuantNet(torch.nn.Module):
    """A linear layer whose output is quantised by ``ste`` (STE.apply, or the buggy STENoClip.apply)."""

    def __init__(self, ste=STE.apply):
        super().__init__()
        self.fc = torch.nn.Linear(3, 4)
        self.ste = ste

    def forward(self, x):
        return self.ste(self.fc(x))


class QuantNetSurrogate(torch.nn.Module):
    """QuantNet with the straight-through estimator swapped for its surrogate (the same parameters)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 4)

    def forward(self, x):
        return self.fc(x).clamp(-1, 1)


class TiedEmb(torch.nn.Module):
    """An embedding with a padding row whose weight is tied to the output projection (BART / T5 style): torch
    gives the padding row the projection's gradient, and only the lookup's is left out."""

    def __init__(self):
        super().__init__()
        self.e = torch.nn.Embedding(10, 4, padding_idx=0)

    def forward(self, idx):
        return self.e(idx) @ self.e.weight.T


class ClipGrad(torch.autograd.Function):
    """tanh whose backward clips the gradient to norm 0.1: not linear in g, so no surrogate (a function whose
    derivative it is) exists."""

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        gi = g * (1 - y * y)
        return gi * torch.clamp(0.1 / (gi.norm() + 1e-12), max=1.0)
