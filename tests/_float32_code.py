"""torch Functions whose backward is wrong only in float32, and correct ones whose float32 code differs
from their float64 code, for tests/test_fn_float32.py.  Module level, so saved cases replay in another
process (``gradspec replay --allow-import tests._float32_code``)."""

from __future__ import annotations

import torch


def _f32(t) -> bool:
    return t.dtype == torch.float32


class ExpF64Only(torch.autograd.Function):
    """BUG (a new user's report): the float32 path of the backward is 1% too large."""

    @staticmethod
    def forward(ctx, x):
        y = torch.exp(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y * (1.01 if _f32(y) else 1.0)


class SinSign32(torch.autograd.Function):
    """BUG: the float32 gradient has the wrong sign."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (-torch.cos(x) if _f32(x) else torch.cos(x))


class SquareThroughHalf(torch.autograd.Function):
    """BUG: the float32 gradient goes through float16 (a lossy cast: ~5e-4 relative, 8x float32's tolerance)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        r = 2 * g * x
        return r.half().to(r.dtype) if _f32(x) else r


class MulInFloat64(torch.autograd.Function):
    """Correct: the gradients are computed and returned in float64 for float32 inputs; torch casts each
    gradient to its input's dtype (autograd's validate_outputs), so the user's .grad is float32 and right."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return (g * b).double(), (g * a).double()


class ExpForward32(torch.autograd.Function):
    """No backward bug: the float32 *forward* is 1% off, and the backward is the derivative of whichever
    forward ran.  Finite differences (float64) witness the float64 forward, another function: never an
    accusation of the backward."""

    @staticmethod
    def forward(ctx, x):
        y = torch.exp(x) * (1.01 if _f32(x) else 1.0)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


class Recorder(torch.autograd.Function):
    """Correct x * 3 that records the dtypes its forward and backward ran in."""

    seen: set = set()

    @staticmethod
    def forward(ctx, x):
        Recorder.seen.add(("forward", str(x.dtype)))
        return x * 3

    @staticmethod
    def backward(ctx, g):
        Recorder.seen.add(("backward", str(g.dtype)))
        return g * 3


class Tanh(torch.autograd.Function):
    """Correct, as people write it: the saved output, 1 - y^2 (ill-conditioned near saturation in float32)."""

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * (1 - y * y)


class Sigmoid(torch.autograd.Function):
    """Correct: s (1 - s) from the saved output."""

    @staticmethod
    def forward(ctx, x):
        s = torch.sigmoid(x)
        ctx.save_for_backward(s)
        return s

    @staticmethod
    def backward(ctx, g):
        (s,) = ctx.saved_tensors
        return g * s * (1 - s)


class LogSumExp(torch.autograd.Function):
    """Correct: softmax weights from the saved input and output."""

    @staticmethod
    def forward(ctx, x):
        m = x.max(-1, keepdim=True).values
        y = (x - m).exp().sum(-1, keepdim=True).log() + m
        ctx.save_for_backward(x, y)
        return y.squeeze(-1)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g.unsqueeze(-1) * (x - y).exp()


class Norm(torch.autograd.Function):
    """Correct: x / |x| (NaN at 0, as torch's)."""

    @staticmethod
    def forward(ctx, x):
        n = x.norm(dim=-1)
        ctx.save_for_backward(x, n)
        return n

    @staticmethod
    def backward(ctx, g):
        x, n = ctx.saved_tensors
        return g.unsqueeze(-1) * x / n.unsqueeze(-1)
