"""Planted torch Functions written the way users write them (test helper; never used by shipped code).

Each family has a correct Function and a buggy one that subclasses it and overrides ``backward``
only (so the two provably share their forward).  ``USER_BUGS`` maps a readable id to
``(buggy, correct, verify_torch_function kwargs, kinds the finding may have)``:

* tied input shapes: ``(A @ x + b) * c`` with A (m, n), x (n,), b and c (m,) - four inputs whose
  shapes tie m and n across them (by ``example_inputs`` and by a ``shape_fn``);
* tuple outputs: ``(sin x, cos x)`` and ``(a * b, a + b)``: each output its own seed;
* a positional non-tensor argument: ``Fn.apply(x, k, "mean")`` (``Function.apply`` takes no keywords);
* a backward that computes gradients only when the first input needs one (``ctx.needs_input_grad[0]``);
* modern torch: a ``torch.library.custom_op`` with ``register_autograd`` (a forgotten scale), and an
  ``nn.Module`` whose custom linear layer loses its weights' gradients on data inputs.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

# ---------------------------------------------------------------------------------------------
# tied input shapes
# ---------------------------------------------------------------------------------------------


class AffineGate(torch.autograd.Function):
    """(A @ x + b) * c: A (m, n), x (n,), b (m,), c (m,)."""

    @staticmethod
    def forward(ctx, A, x, b, c):
        z = A @ x + b
        ctx.save_for_backward(A, x, z, c)
        return z * c

    @staticmethod
    def backward(ctx, g):
        A, x, z, c = ctx.saved_tensors
        gz = g * c
        return torch.outer(gz, x), A.T @ gz, gz, g * z


class AffineGateBGrad(AffineGate):
    """b's gradient forgets the gate c (right only where c == 1)."""

    @staticmethod
    def backward(ctx, g):
        A, x, z, c = ctx.saved_tensors
        gz = g * c
        return torch.outer(gz, x), A.T @ gz, g, g * z


def affine_shape(a, x, b, c):
    if len(a) == 2 and tuple(x) == (a[1],) and tuple(b) == (a[0],) and tuple(c) == (a[0],):
        return (a[0],)
    return None


AFFINE_EXAMPLE = (torch.randn(3, 4, dtype=torch.float64), torch.randn(4, dtype=torch.float64),
                  torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64))

# ---------------------------------------------------------------------------------------------
# tuple outputs
# ---------------------------------------------------------------------------------------------


class SinCos(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x), torch.cos(x)

    @staticmethod
    def backward(ctx, gs_, gc):
        (x,) = ctx.saved_tensors
        return gs_ * torch.cos(x) - gc * torch.sin(x)


class SinCosFirstSeed(SinCos):
    """Uses the first output's gradient for both outputs (right only when both seeds are equal)."""

    @staticmethod
    def backward(ctx, gs_, gc):
        (x,) = ctx.saved_tensors
        return gs_ * torch.cos(x) - gs_ * torch.sin(x)


class ProdSum(torch.autograd.Function):
    """(a * b, a + b) of two same-shape tensors."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b, a + b

    @staticmethod
    def backward(ctx, gp, gs_):
        a, b = ctx.saved_tensors
        return gp * b + gs_, gp * a + gs_


class ProdSumSwapped(ProdSum):
    """The two outputs' gradients swapped in b's formula."""

    @staticmethod
    def backward(ctx, gp, gs_):
        a, b = ctx.saved_tensors
        return gp * b + gs_, gs_ * a + gp


# ---------------------------------------------------------------------------------------------
# a positional non-tensor argument
# ---------------------------------------------------------------------------------------------


class PowReduce(torch.autograd.Function):
    """(x ** k) reduced over the last axis by ``how`` ("mean" or "sum"): PowReduce.apply(x, 3, "mean")."""

    @staticmethod
    def forward(ctx, x, k, how):
        ctx.save_for_backward(x)
        ctx.k, ctx.how = k, how
        y = x ** k
        return y.mean(-1) if how == "mean" else y.sum(-1)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        d = ctx.k * x ** (ctx.k - 1) * g.unsqueeze(-1)
        if ctx.how == "mean":
            d = d / x.shape[-1]
        return d, None, None


class PowReduceIgnoresHow(PowReduce):
    """Always the sum's gradient: wrong for how="mean"."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return ctx.k * x ** (ctx.k - 1) * g.unsqueeze(-1), None, None


POW_EXAMPLE = (torch.randn(2, 5, dtype=torch.float64), 3, "mean")

# ---------------------------------------------------------------------------------------------
# gradients only when the first input needs one
# ---------------------------------------------------------------------------------------------


class MulAdd(torch.autograd.Function):
    """a * b + a (same shapes), with the per-input needs_input_grad checks done right."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b + a

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = g * (b + 1) if ctx.needs_input_grad[0] else None
        gb = g * a if ctx.needs_input_grad[1] else None
        return ga, gb


class MulAddFirstOnly(MulAdd):
    """Computes both gradients only when the FIRST input needs one: b's gradient is lost whenever a
    does not require grad (a frozen weight, a constant)."""

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None
        return g * (b + 1), g * a


MULADD_EXAMPLE = (torch.randn(3, 2, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64))

# ---------------------------------------------------------------------------------------------
# modern torch: a torch.library.custom_op with register_autograd, and an nn.Module
# ---------------------------------------------------------------------------------------------


def _cube_setup(ctx, inputs, output):
    x, k = inputs
    ctx.save_for_backward(x)
    ctx.k = k


@torch.library.custom_op("gradspec_planted::scaled_cube", mutates_args=())
def scaled_cube(x: torch.Tensor, k: float) -> torch.Tensor:
    return k * x ** 3


@torch.library.custom_op("gradspec_planted::scaled_cube_noscale", mutates_args=())
def scaled_cube_noscale(x: torch.Tensor, k: float) -> torch.Tensor:
    return k * x ** 3


def _cube_bwd(ctx, g):
    (x,) = ctx.saved_tensors
    return 3 * ctx.k * x ** 2 * g, None


def _cube_bwd_noscale(ctx, g):
    (x,) = ctx.saved_tensors
    return 3 * x ** 2 * g, None  # BUG: k forgotten (right only for k == 1)


scaled_cube.register_autograd(_cube_bwd, setup_context=_cube_setup)
scaled_cube_noscale.register_autograd(_cube_bwd_noscale, setup_context=_cube_setup)
CUBE_EXAMPLE = (torch.randn(2, 3, dtype=torch.float64), 1.5)


class LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, W, b):
        ctx.save_for_backward(x, W)
        return x @ W.T + b

    @staticmethod
    def backward(ctx, g):
        x, W = ctx.saved_tensors
        return g @ W, g.T @ x, g.sum(0)


class LinearFnFirstOnly(LinearFn):
    """The weights' gradients only when the layer's INPUT needs one: lost on data inputs."""

    @staticmethod
    def backward(ctx, g):
        x, W = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None
        return g @ W, g.T @ x, g.sum(0)


class TinyNet(torch.nn.Module):
    """tanh(custom linear(x)) * scale: parameters W (2, 3), b (2,), scale (2,) and the input x (4, 3)."""

    def __init__(self, fn):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.W = torch.nn.Parameter(torch.randn(2, 3, generator=g))
        self.b = torch.nn.Parameter(torch.randn(2, generator=g))
        self.scale = torch.nn.Parameter(torch.randn(2, generator=g))
        self.fn = fn

    def forward(self, x):
        return torch.tanh(self.fn.apply(x, self.W, self.b)) * self.scale


NET_EXAMPLE = (torch.randn(4, 3, dtype=torch.float64),)

# ---------------------------------------------------------------------------------------------
# the table: id -> (buggy, correct, kwargs, kinds)
# ---------------------------------------------------------------------------------------------

_VAL = ("value",)
USER_BUGS = {
    "tied-shapes-example": (AffineGateBGrad.apply, AffineGate.apply, {"example_inputs": AFFINE_EXAMPLE}, _VAL),
    "tied-shapes-shape-fn": (AffineGateBGrad.apply, AffineGate.apply, {"shape_fn": affine_shape}, _VAL),
    "tuple-outputs-one-input": (SinCosFirstSeed.apply, SinCos.apply, {"arity": 1}, _VAL),
    "tuple-outputs-two-inputs": (ProdSumSwapped.apply, ProdSum.apply,
                                 {"example_inputs": MULADD_EXAMPLE}, _VAL),
    "positional-arg-example": (PowReduceIgnoresHow.apply, PowReduce.apply, {"example_inputs": POW_EXAMPLE}, _VAL),
    "positional-arg-args": (PowReduceIgnoresHow.apply, PowReduce.apply,
                            {"arity": 1, "signature": "(n)->()",
                             "args": {1: st.integers(1, 3), 2: st.sampled_from(["mean", "sum"])}}, _VAL),
    "needs-input-grad-first-only": (MulAddFirstOnly.apply, MulAdd.apply, {"example_inputs": MULADD_EXAMPLE},
                                    ("value", "none-vs-zeros")),
    "custom-op-register-autograd": (scaled_cube_noscale, scaled_cube, {"example_inputs": CUBE_EXAMPLE}, _VAL),
    "nn-module-weights-lost": (TinyNet(LinearFnFirstOnly), TinyNet(LinearFn), {"example_inputs": NET_EXAMPLE},
                               ("value", "none-vs-zeros")),
}
