"""torch.autograd.Functions a new user (tryout5, a custom-ops library) wrote, right and wrong, as test fixtures.

Each wrong one says in a comment how it is wrong: the tests expect words from that, never from running gradspec.
"""

from __future__ import annotations

import torch

from tests._planted import ExpOk, MulOk


class MulInplace(torch.autograd.Function):
    """y = 2x, computed in place (ctx.mark_dirty): torch refuses it on a leaf that requires grad, so callers
    pass a non-leaf (an activation), as for any in-place op."""

    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        x.mul_(2.0)
        return x

    @staticmethod
    def backward(ctx, g):
        return 2.0 * g


class MulInplaceBuggy(MulInplace):
    @staticmethod
    def backward(ctx, g):
        return g  # the bug: the factor 2 forgotten


class Cube(torch.autograd.Function):
    """y = x**3 with a backward written in torch ops: differentiable twice."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * g * x * x


class CubeBadDouble(Cube):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * g * (x * x).detach()  # the bug: x*x detached, so the double backward loses 6 g x


class Bilinear(MulOk):
    """a * b (MulOk's forward), skipping the gradient of an input that does not need one (ctx.needs_input_grad)."""

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = g * b if ctx.needs_input_grad[0] else None
        gb = g * a if ctx.needs_input_grad[1] else None
        return ga, gb


class BilinearBuggy(Bilinear):
    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = g * b if ctx.needs_input_grad[0] else None
        gb = g * a if ctx.needs_input_grad[0] else None  # the bug: input 0's flag read for input 1
        return ga, gb


class SinCos(torch.autograd.Function):
    """(sin x, cos x) with set_materialize_grads(False): an unused output's gradient arrives as None."""

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x)
        return x.sin(), x.cos()

    @staticmethod
    def backward(ctx, gs, gc):
        (x,) = ctx.saved_tensors
        out = None
        if gs is not None:
            out = gs * x.cos()
        if gc is not None:
            t = -gc * x.sin()
            out = t if out is None else out + t
        return out


class SinCosBuggy(SinCos):
    @staticmethod
    def backward(ctx, gs, gc):
        (x,) = ctx.saved_tensors
        if gs is None:
            return None  # the bug: cos's gradient dropped when only the second output is used
        out = gs * x.cos()
        if gc is not None:
            out = out - gc * x.sin()
        return out


class ExpFloat32Grad(ExpOk):
    """exp (ExpOk's forward) whose backward returns float32 for a float64 input."""

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return (g * y).float()  # the bug: float32 (torch casts it back to float64 silently)


class DoubleHalfGrad(torch.autograd.Function):
    """2x whose backward returns float16."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return (2 * g).half()  # the bug: float16 (torch casts it back silently)


def cube_of_sin(x):
    """A plain function whose graph runs a custom Function (Cube): right to second order."""
    return Cube.apply(torch.sin(x))


def cube_of_sin_bad_double(x):
    return CubeBadDouble.apply(torch.sin(x))  # the bug: inside, CubeBadDouble's double backward (x*x detached)
