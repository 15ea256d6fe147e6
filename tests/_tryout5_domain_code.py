"""Torch Functions of the tryout5 report (findings 5, 6, 9): a new user's fused kernels, correct and buggy.

Module level, so that their cases replay; used by tests/test_tryout5_domain.py."""

import torch

from tests._planted import MulOk


class LSENaive(torch.autograd.Function):
    """logsumexp over the last axis without the max shift: right formula, but exp overflows for x > ~709.8."""

    @staticmethod
    def forward(ctx, x):
        e = x.exp()
        s = e.sum(-1, keepdim=True)
        ctx.save_for_backward(e, s)
        return s.log().squeeze(-1)

    @staticmethod
    def backward(ctx, g):
        e, s = ctx.saved_tensors
        return g.unsqueeze(-1) * e / s


class SoftmaxXent(torch.autograd.Function):
    """Label-smoothed cross entropy; ``target`` an int64 tensor with one class per row of ``logits``.  Right
    when every row has its target; the forward also accepts more rows than targets (a row without a target
    then has sum(q) = smoothing, and the backward's ``softmax - q`` is wrong there)."""

    @staticmethod
    def forward(ctx, logits, target, smoothing):
        n = logits.shape[-1]
        lsm = torch.log_softmax(logits, -1)
        q = torch.full_like(lsm, smoothing / n)
        q.scatter_add_(-1, target.unsqueeze(-1), torch.full_like(lsm[..., :1], 1 - smoothing))
        ctx.save_for_backward(lsm, q)
        return -(q * lsm).sum(-1)

    @staticmethod
    def backward(ctx, g):
        lsm, q = ctx.saved_tensors
        return g.unsqueeze(-1) * (lsm.exp() - q), None, None


class SoftmaxXentBuggy(SoftmaxXent):
    @staticmethod
    def backward(ctx, g):
        lsm, q = ctx.saved_tensors
        onehot = (q - q.min(-1, keepdim=True).values) > 0  # BUG: ignores the smoothing in the gradient
        return g.unsqueeze(-1) * (lsm.exp() - onehot.to(lsm.dtype)), None, None


class MaskedScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mask):
        ctx.save_for_backward(mask)
        return x * mask.to(x.dtype) * 3.0

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask.to(g.dtype) * 3.0, None


class AddBias(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, b):
        return x + b

    @staticmethod
    def backward(ctx, g):
        return g, g.sum(0)


class AddBiasWrongAxis(AddBias):
    @staticmethod
    def backward(ctx, g):
        return g, g.sum(1)  # BUG: reduces the wrong axis; torch refuses it unless the shapes happen to be square


class MulSwapped(MulOk):
    """a * b (MulOk's forward) whose backward returns the two gradients swapped."""

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g * a, g * b  # BUG: the two gradients swapped


class _RMSFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps):
        r = torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, w, r)
        return x * r * w

    @staticmethod
    def backward(ctx, g):
        x, w, r = ctx.saved_tensors
        n = x.shape[-1]
        gxr = g * w
        gx = r * gxr - x * r ** 3 * (gxr * x).sum(-1, keepdim=True) / n
        gw = (g * x * r)[0] if g.dim() > 1 else g * x * r  # BUG: the batch reduction for w forgotten
        return gx, gw, None


class RMSNormBuggy(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, n))

    def forward(self, x):
        return _RMSFn.apply(x, self.weight, 1e-6)
