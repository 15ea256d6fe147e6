"""Gradient tests as a project's own pytest tests: what examples/ci/pytest-gradients.yml runs in CI.

Copy the pattern into your tests/ folder: one ``gs.assert_torch_function`` per Function (or
``gs.assert_op`` per user op), with the example call it takes.  The ``ci`` profile
(``--gradspec-profile ci``) runs 60 derandomized cases per test (the same cases on every run), and a
case calls a torch Function's forward some 50 times per input element (the jacobian oracle's finite
differences, one point at a time) and its backward a few times: cap a slow Function with
``max_examples=`` (fewer cases, the same ones every run) or ``seconds=`` (a time budget).
"""

from __future__ import annotations

import torch

import gradspec as gs


class RowNormalize(torch.autograd.Function):
    """y = x / ||x|| along the last axis; backward (g - y <g, y>) / ||x||."""

    @staticmethod
    def forward(ctx, x):
        n = x.norm(dim=-1, keepdim=True)
        y = x / n
        ctx.save_for_backward(y, n)
        return y

    @staticmethod
    def backward(ctx, g):
        y, n = ctx.saved_tensors
        return (g - y * (g * y).sum(-1, keepdim=True)) / n


def test_row_normalize_gradient():
    x = torch.randn(3, 4, dtype=torch.float64)
    gs.assert_torch_function(RowNormalize.apply, example_inputs=(x,), max_examples=20)
