"""Correct user code as people write it, for the no-false-alarm tests (tests/test_false_alarms.py).

Every Function here has a correct backward (the same formula torch uses for its built-in twin,
NaN included where torch gives NaN); gradspec must never report a discrepancy on it.  Module level,
so that saved cases replay in another process.
"""

from __future__ import annotations

import numpy as np
import torch


class Hypot(torch.autograd.Function):
    """torch.hypot with torch's own backward: a / h, b / h (0 / 0 = NaN at a = b = 0, as torch's)."""

    @staticmethod
    def forward(ctx, a, b):
        h = torch.hypot(a, b)
        ctx.save_for_backward(a, b, h)
        return h

    @staticmethod
    def backward(ctx, g):
        a, b, h = ctx.saved_tensors
        return g * a / h, g * b / h


class Atan2(torch.autograd.Function):
    """torch.atan2 with torch's own backward: x / r, -y / r (NaN at y = x = 0, as torch's)."""

    @staticmethod
    def forward(ctx, y, x):
        ctx.save_for_backward(y, x)
        return torch.atan2(y, x)

    @staticmethod
    def backward(ctx, g):
        y, x = ctx.saved_tensors
        r = x * x + y * y
        return g * x / r, -g * y / r


def cond_matrix(n: int, cond: float = 1e6) -> np.ndarray:
    """``Q diag(logspace(0, -log10 cond, n)) P^T`` with orthogonal Q, P from a fixed seed: non-symmetric."""
    rng = np.random.default_rng(7 + n)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    p, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return q @ np.diag(np.logspace(0, -np.log10(cond), n)) @ p.T


class Solve1e6(torch.autograd.Function):
    """x = K^-1 b with K fixed, non-symmetric, of condition 1e6; backward K^-T g (a second solve).

    Correct, and accurate to ~cond x eps = 2e-10 relative only: the forward factors K, the backward
    K^T, each exact for its own nearby matrix (Higham thm 7.2)."""

    @staticmethod
    def forward(ctx, b):
        k = torch.from_numpy(cond_matrix(b.shape[-1])).to(b.dtype)
        ctx.save_for_backward(k)
        return torch.linalg.solve(k, b.unsqueeze(-1)).squeeze(-1)

    @staticmethod
    def backward(ctx, g):
        (k,) = ctx.saved_tensors
        return torch.linalg.solve(k.mT, g.unsqueeze(-1)).squeeze(-1)


class Solve1e6Scaled(Solve1e6):
    """BUG: the gradient 1e-6 too large (the smallest bug gradspec must find)."""

    @staticmethod
    def backward(ctx, g):
        return Solve1e6.backward(ctx, g) * (1 + 1e-6)


class SinCos(torch.autograd.Function):
    """Two outputs, sin and cos; each its own upstream gradient."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x), torch.cos(x)

    @staticmethod
    def backward(ctx, g_sin, g_cos):
        (x,) = ctx.saved_tensors
        return g_sin * torch.cos(x) - g_cos * torch.sin(x)


class SinCosWrongCos(SinCos):
    """BUG in the second output's part only: cos' taken as +sin."""

    @staticmethod
    def backward(ctx, g_sin, g_cos):
        (x,) = ctx.saved_tensors
        return g_sin * torch.cos(x) + g_cos * torch.sin(x)


# ---------------------------------------------------------------------------------------------
# user ops (gs.Op)
# ---------------------------------------------------------------------------------------------

class TanhThroughFloat32(torch.autograd.Function):
    """Correct, computed in float32 inside (a new user's report): tanh of x.float(), its rule in float32."""

    @staticmethod
    def forward(ctx, x):
        xf = x.float()
        ctx.save_for_backward(xf)
        return torch.tanh(xf).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (xf,) = ctx.saved_tensors
        t = torch.tanh(xf)
        return (g.float() * (1 - t * t)).to(g.dtype)


class TanhThroughFloat32Off(TanhThroughFloat32):
    """The same with a backward wrong by +1e-3: at x = 8 its float32 output is flat over every
    finite-difference stencil, so both independent witnesses step aside."""

    @staticmethod
    def backward(ctx, g):
        (xf,) = ctx.saved_tensors
        t = torch.tanh(xf)
        return (g.float() * (1 - t * t) + 1e-3).to(g.dtype)


import gradspec as gs  # noqa: E402

# relu with the convention 0 at x = 0 and, as its torch twin, clamp(min=0), whose convention there is 1:
# both correct (no derivative exists at 0), they differ only at the kink.
relu_clamp_twin = gs.Op("cc_relu", forward=lambda x: np.maximum(x, 0.0), vjp=lambda g, x, out: (g * (x > 0),),
                        torch=lambda x: x.clamp(min=0))


def _lse(x):
    m = np.max(x, axis=-1, keepdims=True)
    return (m + np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True)))[..., 0]


# log-sum-exp of large inputs (50 x + 1000), no jvp and no twin: the jacobian oracle composes
# finite-difference JVPs of its forward
lse_big = gs.Op("cc_lse_big", forward=lambda x: _lse(50 * x + 1000), signature="(n)->()",
                vjp=lambda g, x, out: (50 * g[..., None] * np.exp(50 * x + 1000 - out[..., None]),))
clamp = gs.Op("cc_clamp", forward=lambda x: np.clip(x, -1, 1), vjp=lambda g, x, out: (g * ((x >= -1) & (x <= 1)),),
              torch=lambda x: x.clamp(-1, 1))
