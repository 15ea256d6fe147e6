"""Code that is not a function of its inputs, or is one only under a fixed torch seed (tryout6 #1, #4, #8), as test
fixtures (from the user's repro files).  Each says in a comment what it is and, where wrong, how: the tests expect
words from that, never from running gradspec."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import gradspec as gs

_RNG = np.random.default_rng()  # the user's own numpy generator: nothing gradspec can seed

# noise injection (10 %): a different function at every call; its vjp is wrong by 1.3 on top
noisy_bad = gs.Op("noisy_bad_t6", forward=lambda x: x * (1 + 0.1 * _RNG.standard_normal(np.shape(x))),
                  vjp=lambda g, x, out: (1.3 * g,))
# the same noise, the right vjp for its mean: still not a function of its inputs
noisy_ok = gs.Op("noisy_ok_t6", forward=lambda x: x * (1 + 0.1 * _RNG.standard_normal(np.shape(x))),
                 vjp=lambda g, x, out: (g,))
# run-to-run noise of 1e-14 (a reduction in another order): a function of its inputs up to rounding; right vjp
rounding_ok = gs.Op("rounding_ok_t6", forward=lambda x: x * (1 + 1e-14 * _RNG.standard_normal(np.shape(x))),
                    vjp=lambda g, x, out: (g,))
# the same rounding noise, a vjp wrong by 1.001: still found
rounding_bad = gs.Op("rounding_bad_t6", forward=lambda x: x * (1 + 1e-14 * _RNG.standard_normal(np.shape(x))),
                     vjp=lambda g, x, out: (1.001 * g,))

P = 0.5


class DropOK(torch.autograd.Function):
    """Dropout written by hand, right: the mask and its 1 / (1 - p) in forward and backward."""

    @staticmethod
    def forward(ctx, x):
        m = (torch.rand_like(x) > P).to(x.dtype) / (1 - P)
        ctx.save_for_backward(m)
        return x * m

    @staticmethod
    def backward(ctx, g):
        (m,) = ctx.saved_tensors
        return g * m


class DropNoScale(torch.autograd.Function):
    """Wrong: the backward forgets the 1 / (1 - p) factor (half the gradient where the mask keeps x)."""

    @staticmethod
    def forward(ctx, x):
        m = (torch.rand_like(x) > P).to(x.dtype)
        ctx.save_for_backward(m)
        return x * m / (1 - P)

    @staticmethod
    def backward(ctx, g):
        (m,) = ctx.saved_tensors
        return g * m


class DropFreshMask(torch.autograd.Function):
    """Wrong: the backward draws a new mask instead of the forward's."""

    @staticmethod
    def forward(ctx, x):
        m = (torch.rand_like(x) > P).to(x.dtype) / (1 - P)
        ctx.shape = x.shape
        return x * m

    @staticmethod
    def backward(ctx, g):
        return g * (torch.rand(ctx.shape, dtype=g.dtype) > P).to(g.dtype) / (1 - P)


def dropout(x):
    """torch's dropout in training mode: right."""
    return F.dropout(x, p=0.5, training=True)


CALLS = [0]


def counter_layer(x):
    """A global call counter scales the output: a different function at every call."""
    CALLS[0] += 1
    return x * (1.0 + 0.001 * CALLS[0])


class EMA(torch.nn.Module):
    """A buffer ('running') updated at every forward and read by the output: state that changes between calls."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(5, 3)
        self.register_buffer("running", torch.zeros(3))

    def forward(self, x):
        y = self.lin(x)
        with torch.no_grad():
            self.running.mul_(0.9).add_(0.1 * y.mean(0))
        return y - self.running
