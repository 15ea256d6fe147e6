"""Code whose float32 part is hidden behind float64 arithmetic in the same output (``x + f(x.float()).double()``):
no value it returns is a float32 number, yet its float32 part is a staircase at finite differences' float64 step.
Each correct Function / op has wrong twins that override backward (or vjp) only: wrong by 1% everywhere, and wrong
by 1% in float32 only.  Module level, so saved cases replay in another process (``--allow-import
tests._float32_hidden``).  tests/test_float32_hidden.py and benchmarks/float32_inside_soak.py use them.
"""

from __future__ import annotations

import numpy as np
import torch

import gradspec as gs
from tests._float32_inside import _sum_to  # (broadcast reduction of a gradient, shared with the float32-inside fixtures)

__all__ = ["HiddenTanh", "HiddenTanhScaled", "HiddenTanh32Only", "HiddenExp", "HiddenExpScaled", "HiddenExp32Only",
           "HiddenSigmoidMul", "HiddenSigmoidMulWrongSign", "HiddenLogSumExp", "HiddenLogSumExpScaled", "np_hidden_tanh",
           "np_hidden_tanh_off", "CORRECT", "WRONG"]


def _f32(t) -> bool:
    return t.dtype == torch.float32


class HiddenTanh(torch.autograd.Function):
    """Correct: x + tanh(x in float32), its rule 1 + (1 - t^2) with t in float32."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x + torch.tanh(x.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(x.float())
        return g * (1 + (1 - t * t).to(g.dtype))


class HiddenTanhScaled(HiddenTanh):
    """Wrong by 1%."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(x.float())
        return g * (1 + (1 - t * t).to(g.dtype)) * 1.01


class HiddenTanh32Only(HiddenTanh):
    """Wrong by 1% for float32 inputs only."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(x.float())
        return g * (1 + (1 - t * t).to(g.dtype)) * (1.01 if _f32(x) else 1.0)


class HiddenExp(torch.autograd.Function):
    """Correct: 2 exp(x in float32) + x^2."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.exp(x.float()).to(x.dtype) * 2 + x**2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (torch.exp(x.float()).to(x.dtype) * 2 + 2 * x)


class HiddenExpScaled(HiddenExp):
    """Wrong by 1%."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (torch.exp(x.float()).to(x.dtype) * 2 + 2 * x) * 1.01


class HiddenExp32Only(HiddenExp):
    """Wrong by 1% for float32 inputs only."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (torch.exp(x.float()).to(x.dtype) * 2 + 2 * x) * (1.01 if _f32(x) else 1.0)


class HiddenSigmoidMul(torch.autograd.Function):
    """Correct, two inputs broadcasting like torch.mul: x y + sigmoid((x - y) in float32)."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y + torch.sigmoid((x - y).float()).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        s = torch.sigmoid((x - y).float()).to(g.dtype)
        d = s * (1 - s)
        return _sum_to(g * (y + d), x.shape), _sum_to(g * (x - d), y.shape)


class HiddenSigmoidMulWrongSign(HiddenSigmoidMul):
    """Wrong sign of the sigmoid term in y's gradient."""

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        s = torch.sigmoid((x - y).float()).to(g.dtype)
        d = s * (1 - s)
        return _sum_to(g * (y + d), x.shape), _sum_to(g * (x + d), y.shape)


class HiddenLogSumExp(torch.autograd.Function):
    """Correct, a reduction over the last axis ("(n)->()"): sum x^2 / 2 + logsumexp(x in float32)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x * x).sum(-1) / 2 + torch.logsumexp(x.float(), -1).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g.unsqueeze(-1) * (x + torch.softmax(x.float(), -1).to(g.dtype))


class HiddenLogSumExpScaled(HiddenLogSumExp):
    """Wrong by 1%."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g.unsqueeze(-1) * (x + torch.softmax(x.float(), -1).to(g.dtype)) * 1.01


def _hidden_tanh(x):
    x = np.asarray(x)
    return x + np.tanh(x.astype(np.float32)).astype(x.dtype)


def _hidden_tanh_vjp(g, x, out):
    t = np.tanh(np.asarray(x).astype(np.float32)).astype(np.asarray(g).dtype)
    return (g * (1 + (1 - t * t)),)


# A numpy user op (verify_op; no torch twin, no jvp: finite differences and the FD-JVP are the witnesses)
np_hidden_tanh = gs.Op("f32h_np_hidden_tanh", forward=_hidden_tanh, vjp=_hidden_tanh_vjp)
np_hidden_tanh_off = gs.Op("f32h_np_hidden_tanh_off", forward=_hidden_tanh,
                           vjp=lambda g, x, out: (_hidden_tanh_vjp(g, x, out)[0] * 1.01,))

# (label, Function or op, verify_torch_function keywords; None: a numpy op for verify_op)
CORRECT = [("x+tanh32", HiddenTanh, {"arity": 1}), ("2exp32+x^2", HiddenExp, {"arity": 1}),
           ("xy+sigmoid32", HiddenSigmoidMul, {"arity": 2}),
           ("x^2/2+logsumexp32", HiddenLogSumExp, {"arity": 1, "signature": "(n)->()"}),
           ("numpy x+tanh32", np_hidden_tanh, None)]
WRONG = [("x+tanh32 x1.01", HiddenTanhScaled, {"arity": 1}), ("x+tanh32 x1.01 in float32", HiddenTanh32Only, {"arity": 1}),
         ("2exp32+x^2 x1.01", HiddenExpScaled, {"arity": 1}),
         ("2exp32+x^2 x1.01 in float32", HiddenExp32Only, {"arity": 1}),
         ("xy+sigmoid32 sign", HiddenSigmoidMulWrongSign, {"arity": 2}),
         ("x^2/2+logsumexp32 x1.01", HiddenLogSumExpScaled, {"arity": 1, "signature": "(n)->()"}),
         ("numpy x+tanh32 x1.01", np_hidden_tanh_off, None)]
