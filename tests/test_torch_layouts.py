"""verify_torch_function calls fn's backward with a non-contiguous upstream gradient too (tryout 2, finding 6:
a LayerNorm whose backward did ``g.view(-1, n)`` passed silently, yet raised in real use after a downstream
``.transpose``).  Raising there, or returning other numbers, is a finding that names the layout and the fix.

And fn with non-contiguous inputs (transposed and strided, expanded): before, only contiguous inputs were
drawn, so a Function doing ``x.view(...)`` in its forward or on a saved input in its backward, or reading an
input's memory as if contiguous, passed verify_torch_function (all three below were 'agree' on seed 3)."""

from __future__ import annotations

import pytest
import torch

import gradspec as gs


class _Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return (2 * g.reshape(-1)).reshape(g.shape)  # right for any layout


class _DoubleView(_Double):
    @staticmethod
    def backward(ctx, g):
        return (2 * g.view(-1)).view(g.shape)  # raises for a non-contiguous g of rank >= 2


def _contiguous_strides(shape):
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


class _DoubleStorage(_Double):
    @staticmethod
    def backward(ctx, g):
        # reads g's memory as if it were contiguous: the wrong elements for any other layout
        return 2 * g.as_strided(g.shape, _contiguous_strides(g.shape))


class _LayerNormView(torch.autograd.Function):
    """The user's bug, smaller: a normalisation over the last axis plus a bias whose gradient is g.view(-1, n)."""

    @staticmethod
    def forward(ctx, x, b):
        mu = x.mean(-1, keepdim=True)
        ctx.n = x.shape[-1]
        return x - mu + b

    @staticmethod
    def backward(ctx, g):
        gx = g - g.mean(-1, keepdim=True)
        return gx, g.view(-1, ctx.n).sum(0)


FUNCTIONS = {
    # id: (fn, kwargs, expected kind or None for no finding)
    "reshape-correct": (_Double.apply, {}, None),
    "view-raises": (_DoubleView.apply, {}, "raised"),
    "as-strided-wrong-values": (_DoubleStorage.apply, {}, "value"),
    "layernorm-bias-view": (_LayerNormView.apply,
                            dict(example_inputs=(torch.randn(2, 3, 4, dtype=torch.float64),
                                                 torch.randn(4, dtype=torch.float64))), "raised"),
}


@pytest.mark.parametrize("fn, kw, kind", FUNCTIONS.values(), ids=list(FUNCTIONS))
def test_a_backward_that_depends_on_the_layout_of_its_upstream_gradient_is_found(fn, kw, kind):
    r = gs.verify_torch_function(fn, max_examples=12, seed=3, **kw)
    layout = [d for d in r.discrepancies if d.cause is not None and d.cause.id == "layout-dependent"]
    if kind is None:
        assert r.ok, str(r)
        return
    assert layout, str(r)
    d = layout[0]
    assert d.kind == kind, str(d)
    assert "non-contiguous" in d.cause.summary and "grad_output" in d.cause.summary, d.cause.summary
    if kind == "raised":
        assert ".reshape" in d.cause.summary and ".contiguous()" in d.cause.summary, d.cause.summary


class _FlattenView(torch.autograd.Function):
    """Forward views its input: raises for a transposed or sliced x (rank >= 2)."""

    @staticmethod
    def forward(ctx, x):
        return (2 * x.view(-1)).view(x.shape)

    @staticmethod
    def backward(ctx, g):
        return 2 * g


class _SavedView(torch.autograd.Function):
    """x * x whose backward views the saved input: the forward runs, the backward raises."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (2 * x.view(-1) * g.reshape(-1)).reshape(g.shape)


class _InputStorage(torch.autograd.Function):
    """Reads its input's memory as if contiguous: the wrong elements for a transposed or expanded x."""

    @staticmethod
    def forward(ctx, x):
        return 2 * x.as_strided(x.shape, _contiguous_strides(x.shape))

    @staticmethod
    def backward(ctx, g):
        return 2 * g


class _SquareReshape(torch.autograd.Function):
    """Correct for any layout: reshape, not view, on the input and on what it saved."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x.reshape(-1) ** 2).reshape(x.shape)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (2 * x.reshape(-1) * g.reshape(-1)).reshape(g.shape)


INPUTS = {
    # id: (fn, expected kind or None for no finding, the part named)
    "forward-view-raises": (_FlattenView.apply, "raised", "forward"),
    "saved-input-view-raises-in-backward": (_SavedView.apply, "raised", "backward"),
    "forward-reads-input-memory": (_InputStorage.apply, "value", "forward"),
    "reshape-correct": (_SquareReshape.apply, None, None),
}


@pytest.mark.parametrize("fn, kind, part", INPUTS.values(), ids=list(INPUTS))
def test_a_function_that_depends_on_the_layout_of_its_inputs_is_found(fn, kind, part):
    r = gs.verify_torch_function(fn, max_examples=12, seed=3)
    layout = [d for d in r.discrepancies if d.cause is not None and d.cause.id == "layout-dependent"]
    if kind is None:
        assert r.ok, str(r)
        return
    assert layout, str(r)
    d = layout[0]
    assert d.kind == kind, str(d)
    assert "non-contiguous" in d.cause.summary and "input x0" in d.cause.summary, d.cause.summary
    assert f"{part} (" in d.cause.summary, d.cause.summary
