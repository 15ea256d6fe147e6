"""Planted-bug code from tryout10 (a custom-op author's ops), written wrong on purpose: each docstring says how.

The expected causes in tests/test_causes_tryout10.py come from how the code was written wrong, never from
running gradspec."""

from __future__ import annotations

import numpy as np

import gradspec as gs

__all__ = ["cumprod_div0"]


def _cumprod_vjp_div(g, x, out):
    """cumprod's backward as reverse_cumsum(g * out) / x: right where no x is 0, 0/0 = NaN at a zero x.
    No exp anywhere, so no overflow can be the cause."""
    return (np.flip(np.cumsum(np.flip(g * out, -1), -1), -1) / x,)


cumprod_div0 = gs.Op("t10_cumprod_div0", forward=lambda x: np.cumprod(x, -1), vjp=_cumprod_vjp_div,
                     signature="(n)->(n)")

