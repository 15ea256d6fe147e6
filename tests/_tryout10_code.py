"""Planted-bug code from tryout10 (a custom-op author's ops), written wrong on purpose: each docstring says how.

The expected causes in tests/test_causes_tryout10.py come from how the code was written wrong, never from
running gradspec."""

from __future__ import annotations

import numpy as np

import gradspec as gs
from tests._tryout10_torchfn import MaskedMeanFullCount  # (one definition, beside the other masked means: D2)

__all__ = ["cumprod_div0", "MaskedMeanFullCount", "centre_scaled", "mul_exp_overflow", "mul_div_b"]


def _cumprod_vjp_div(g, x, out):
    """cumprod's backward as reverse_cumsum(g * out) / x: right where no x is 0, 0/0 = NaN at a zero x.
    No exp anywhere, so no overflow can be the cause."""
    return (np.flip(np.cumsum(np.flip(g * out, -1), -1), -1) / x,)


cumprod_div0 = gs.Op("t10_cumprod_div0", forward=lambda x: np.cumprod(x, -1), vjp=_cumprod_vjp_div,
                     signature="(n)->(n)")


def _mul_vjp_exp_overflow(g, x, b, out):
    """y = x * b; x's gradient as g·b·exp(x)/exp(x): inf/inf = NaN where exp(x) overflows (|x| > 709.8).
    Nothing divides by b (review15 #4: a b that is 0 at that element is no division)."""
    e = np.exp(x)
    return g * b * e / e, g * x


def _mul_vjp_div_b(g, x, b, out):
    """y = x * b; b's gradient as g·x·b/b: 0/0 = NaN where b is 0.  No exp anywhere (a large x is no overflow)."""
    return g * b, g * x * b / b


mul_exp_overflow = gs.Op("t10_mul_exp_overflow", forward=lambda x, b: x * b, vjp=_mul_vjp_exp_overflow)
mul_div_b = gs.Op("t10_mul_div_b", forward=lambda x, b: x * b, vjp=_mul_vjp_div_b)


def _centre_vjp_scaled(g, x, out):
    """x - mean(x) along the last axis, whose backward g - mean(g) is multiplied by 1 + sum(x^2) of the row:
    a different factor per row, but one that moves with the input (no count or length computed over the wrong
    set)."""
    return ((g - g.mean(-1, keepdims=True)) * (1 + (x * x).sum(-1, keepdims=True)),)


centre_scaled = gs.Op("t10_centre_scaled", forward=lambda x: x - x.mean(-1, keepdims=True), vjp=_centre_vjp_scaled,
                      signature="(n)->(n)")
