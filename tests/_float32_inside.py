"""Torch Functions and a numpy user op that compute in float32 inside (``x.float()`` ... cast back), each
correct, with wrong twins that override backward only (+1e-3, x 1.01, a wrong sign on one input).

tests/test_float32_inside.py checks that finite differences estimate them as float32 computations: the
correct ones never disagree, the twins are found.  TanhThroughFloat32 and its +1e-3 twin live in
tests/_correct_code.py (a new user's report) and are re-exported here.
"""

from __future__ import annotations

import numpy as np
import torch

import gradspec as gs
from tests._correct_code import TanhThroughFloat32, TanhThroughFloat32Off

__all__ = ["TanhThroughFloat32", "TanhThroughFloat32Off", "TanhThroughFloat32Scaled", "ExpSinThroughFloat32",
           "ExpSinThroughFloat32Scaled", "MulThroughFloat32", "MulThroughFloat32WrongSign", "SumSquaresThroughFloat32",
           "SumSquaresThroughFloat32Off", "np_tanh32", "np_tanh32_off"]


class TanhThroughFloat32Scaled(TanhThroughFloat32):
    """Wrong by 1%: the float32 rule times 1.01."""

    @staticmethod
    def backward(ctx, g):
        (xf,) = ctx.saved_tensors
        t = torch.tanh(xf)
        return (g.float() * (1 - t * t) * 1.01).to(g.dtype)


class ExpSinThroughFloat32(torch.autograd.Function):
    """Correct: exp(sin(x)) in float32, its rule cos(x) exp(sin(x)) in float32."""

    @staticmethod
    def forward(ctx, x):
        xf = x.float()
        y = torch.exp(torch.sin(xf))
        ctx.save_for_backward(xf, y)
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        xf, y = ctx.saved_tensors
        return (g.float() * torch.cos(xf) * y).to(g.dtype)


class ExpSinThroughFloat32Scaled(ExpSinThroughFloat32):
    """Wrong by 1%."""

    @staticmethod
    def backward(ctx, g):
        xf, y = ctx.saved_tensors
        return (g.float() * torch.cos(xf) * y * 1.01).to(g.dtype)


class MulThroughFloat32(torch.autograd.Function):
    """Correct: x * y in float32 (two inputs, broadcasting like torch.mul)."""

    @staticmethod
    def forward(ctx, x, y):
        xf, yf = x.float(), y.float()
        ctx.save_for_backward(xf, yf)
        return (xf * yf).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        xf, yf = ctx.saved_tensors
        gf = g.float()
        return _sum_to(gf * yf, xf.shape).to(g.dtype), _sum_to(gf * xf, yf.shape).to(g.dtype)


class MulThroughFloat32WrongSign(MulThroughFloat32):
    """Wrong sign on the second input's gradient."""

    @staticmethod
    def backward(ctx, g):
        xf, yf = ctx.saved_tensors
        gf = g.float()
        return _sum_to(gf * yf, xf.shape).to(g.dtype), _sum_to(-gf * xf, yf.shape).to(g.dtype)


def _sum_to(t, shape):
    while t.dim() > len(shape):
        t = t.sum(0)
    for i, n in enumerate(shape):
        if n == 1 and t.shape[i] != 1:
            t = t.sum(i, keepdim=True)
    return t


class SumSquaresThroughFloat32(torch.autograd.Function):
    """Correct: sum of squares in float32 (a reduction: float32 rounding of many terms)."""

    @staticmethod
    def forward(ctx, x):
        xf = x.float()
        ctx.save_for_backward(xf)
        return (xf * xf).sum().to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (xf,) = ctx.saved_tensors
        return (g.float() * 2 * xf).to(g.dtype)


class SumSquaresThroughFloat32Off(SumSquaresThroughFloat32):
    """Wrong by +1e-3 on every element."""

    @staticmethod
    def backward(ctx, g):
        (xf,) = ctx.saved_tensors
        return (g.float() * 2 * xf + 1e-3).to(g.dtype)


def _tanh32(x):
    return np.tanh(np.asarray(x, dtype=np.float32)).astype(np.float64)


def _tanh32_vjp(g, x, out):
    t = np.tanh(np.asarray(x, dtype=np.float32))
    return ((np.asarray(g, dtype=np.float32) * (1 - t * t)).astype(np.float64),)


# A numpy user op (verify_op) through float32, and its 1%-wrong twin (no torch twin, no jvp: finite
# differences and the jacobian's FD-JVP are the witnesses)
np_tanh32 = gs.Op("f32_np_tanh32", forward=_tanh32, vjp=_tanh32_vjp)
np_tanh32_off = gs.Op("f32_np_tanh32_off", forward=_tanh32,
                      vjp=lambda g, x, out: (_tanh32_vjp(g, x, out)[0] * 1.01,))
