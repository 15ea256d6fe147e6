"""torch_returns (what a backward returns that torch drops or casts without a word) read for a Function with two
outputs and for a ``torch.library.custom_op``'s ``register_autograd`` backward, which it skipped before (session 15).
Each planted bug is named in its comment; the right twins give no note."""

from __future__ import annotations

import torch

import gradspec as gs
from gradspec.verify.torch_returns import returns_notes

X = torch.linspace(-1.0, 1.0, 6, dtype=torch.float64).reshape(2, 3)
Y = torch.linspace(0.5, 1.5, 6, dtype=torch.float64).reshape(2, 3)


class TwoOut(torch.autograd.Function):
    """(2x, x*y): correct."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * 2, x * y

    @staticmethod
    def backward(ctx, g1, g2):
        x, y = ctx.saved_tensors
        return 2 * g1 + g2 * y, g2 * x


class TwoOutFloat32(TwoOut):
    @staticmethod
    def backward(ctx, g1, g2):
        x, y = ctx.saved_tensors
        return (2 * g1 + g2 * y).float(), g2 * x  # the bug: float32 for float64 x (torch casts it back)


class TwoOutIndexGrad(torch.autograd.Function):
    """(x * k, x + k) with k an int tensor; BUG: a gradient returned for k (torch drops it)."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(k)
        return x * k, x + k

    @staticmethod
    def backward(ctx, g1, g2):
        (k,) = ctx.saved_tensors
        return g1 * k + g2, (g1 + g2).sum(-1)  # the bug: a float gradient for the int argument


@torch.library.custom_op("gradspec_openfix::scale2", mutates_args=())
def scale2(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@torch.library.custom_op("gradspec_openfix::scale2_f32", mutates_args=())
def scale2_f32(x: torch.Tensor) -> torch.Tensor:
    return x * 2


scale2.register_autograd(lambda ctx, g: 2 * g)
scale2_f32.register_autograd(lambda ctx, g: (2 * g).float())  # the bug: float32 for a float64 input


def test_a_two_output_function_returning_float32_is_noted():
    (note,) = returns_notes(TwoOutFloat32.apply, (X, Y), "TwoOutFloat32")
    assert "returns float32 for input 0" in note and "float64" in note, note


def test_a_two_output_function_returning_a_gradient_for_an_int_argument_is_noted():
    (note,) = returns_notes(TwoOutIndexGrad.apply, (X, torch.tensor([1, 2, 3])), "TwoOutIndexGrad")
    assert "for position 1" in note and "int64" in note, note


def test_a_custom_ops_backward_returning_float32_is_noted():
    (note,) = returns_notes(scale2_f32, (X,), "scale2_f32")
    assert "returns float32 for input 0" in note, note


def test_the_right_twins_have_no_note():
    assert returns_notes(TwoOut.apply, (X, Y), "TwoOut") == []
    assert returns_notes(scale2, (X,), "scale2") == []


def test_a_multi_output_function_used_through_one_output_is_not_read():
    # fn returns one of two outputs: which gradients backward expects cannot be told from fn's result (no note,
    # never a wrong one)
    assert returns_notes(lambda x, y: TwoOutFloat32.apply(x, y)[1], (X, Y), "first") == []


def test_verify_torch_function_says_it_for_a_custom_op():
    r = gs.verify_torch_function(scale2_f32, example_inputs=(X,), max_examples=5, seed=0, dtypes=("float64",))
    assert any("returns float32 for input 0" in str(n) for n in r.notes), r.notes
