"""Second-order gradients of a torch Function are checked (tryout 2, finding 5: a wrong double backward passed
6 of 6 runs with no note): autograd through fn's backward vs central differences of its first-order backward."""

from __future__ import annotations

import pytest
import torch

import gradspec as gs


class _CubeBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, g, x):
        ctx.save_for_backward(g, x)
        return 3 * x ** 2 * g

    @staticmethod
    def backward(ctx, gg):
        g, x = ctx.saved_tensors
        return 3 * x ** 2 * gg, 6 * x * g * gg


class _CubeBackwardDropsTerm(_CubeBackward):
    @staticmethod
    def backward(ctx, gg):
        g, x = ctx.saved_tensors
        return 3 * x ** 2 * gg, None  # the product-rule term for x forgotten


class _Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _CubeBackward.apply(g, x)


class _CubeBug(_Cube):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _CubeBackwardDropsTerm.apply(g, x)


class _CubeTorchOps(_Cube):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * g  # differentiable by autograd itself: right to second order


class _CubeNumpy(_Cube):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return torch.as_tensor(3 * x.detach().numpy() ** 2 * g.detach().numpy())  # not differentiable


class _SinSavesIntermediate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(torch.cos(x))  # computed inside forward: a constant to autograd in double backward
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        (c,) = ctx.saved_tensors
        return c * g  # right to first order


FUNCTIONS = {
    # id: (fn, second-order finding expected, words a note must hold or None)
    "double-backward-right": (_Cube.apply, False, "second-order gradients (double backward, create_graph=True) are "
                                                  "checked"),
    "double-backward-drops-term": (_CubeBug.apply, True, None),
    "backward-in-torch-ops": (_CubeTorchOps.apply, False, "are checked"),
    "saves-an-intermediate": (_SinSavesIntermediate.apply, False, "it saves 1 tensor(s) computed inside forward"),
    "backward-through-numpy": (_CubeNumpy.apply, False, "second-order gradients (double backward) not checked: "
                                                        "fn's backward is not differentiable"),
}


@pytest.mark.parametrize("fn, wrong, note", FUNCTIONS.values(), ids=list(FUNCTIONS))
def test_second_order_gradients_of_a_torch_function(fn, wrong, note):
    r = gs.verify_torch_function(fn, max_examples=10, seed=2)
    found = [d for d in r.discrepancies if d.cause is not None and d.cause.id == "wrong-double-backward"]
    if not wrong:
        assert r.ok, str(r)
        assert any(note in n for n in r.notes), r.notes
        return
    assert found and not r.ok, str(r)
    assert "double backward of CubeBug" in found[0].cause.summary, found[0].cause.summary


class _ExpTwice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.exp(x)
        ctx.save_for_backward(y)  # its output: autograd differentiates it through this very (wrong) backward
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return 2 * y * g  # wrong to first order (a factor 2)


def test_a_wrong_first_order_backward_is_not_also_called_a_wrong_double_backward():
    # A new user's LSEBug / CubicBug got a second finding 'the double backward ... is wrong' beside the real one.
    r = gs.verify_torch_function(_ExpTwice.apply, max_examples=30, seed=0)
    ids = [d.cause.id for d in r.discrepancies if d.cause is not None]
    assert "wrong-vjp" in ids and "wrong-double-backward" not in ids, ids
