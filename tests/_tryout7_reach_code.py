"""tryout7's softplus with the usual large-argument branch (x > 4: x + log1p(exp(-x))), correct and with a bug
only on that branch (the backward there returns 1 + sigmoid(-x) instead of 1 - sigmoid(-x): 2% wrong at x = 4,
up to 2x for large x).  Used by tests/test_tryout7_reach.py."""

from __future__ import annotations

import torch


class SoftplusBranch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.where(x > 4, x + torch.log1p(torch.exp(-x)), torch.log1p(torch.exp(torch.clamp(x, max=4))))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.where(x > 4, 1 - torch.sigmoid(-x), torch.sigmoid(x))


class SoftplusBranchBug(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.where(x > 4, x + torch.log1p(torch.exp(-x)), torch.log1p(torch.exp(torch.clamp(x, max=4))))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.where(x > 4, 1 + torch.sigmoid(-x), torch.sigmoid(x))  # BUG on the x > 4 branch


# ---- finding 3: a correct numpy op that computes in float32 inside, 3 tanh(float32(x)), exact float64 vjp ----------

import numpy as np  # noqa: E402

import gradspec as gs  # noqa: E402


def _tanh32_times3(x):
    return np.tanh(x.astype(np.float32)).astype(x.dtype) * 3.0


tanh32_times3 = gs.Op("t7r_tanh32_times3", forward=_tanh32_times3,
                      vjp=lambda g, x, out: (g * 3.0 * (1 - np.tanh(x) ** 2),))
tanh32_times3_off = gs.Op("t7r_tanh32_times3_off", forward=_tanh32_times3,  # 2% off: what must still be found
                          vjp=lambda g, x, out: (g * 3.0 * (1 - np.tanh(x) ** 2) * 1.02,))

# The shrunk case of tryout7's `gradspec fuzz --seed 77` finding (x and seed as saved, bit for bit): elements at
# 1e-3 cross many float32 cells on FD's noise line (noise), the one at -0.99 crosses few: FD took the noise for
# float64 noise, skipped the float32 probe, and its estimate there was 0.7% off with a bound of 0.04%.
TANH32_X = [float.fromhex(h) for h in ("-0x1.0624dd2f1a9fcp-10", "-0x1.0000000000000p-1", "0x1.0624dd2f1a9fcp-10",
                                       "-0x1.faf25d73f30dep-1")]
TANH32_SEED = [float.fromhex(h) for h in ("0x1.8dfd538c1ca2fp-1", "-0x1.13bdc6e2fb431p-1", "-0x1.2603a9fd972a6p+0",
                                          "-0x1.b7008d7104747p-1")]


# ---- findings 9 and 10: a correct fixed-point layer, z = tanh(0.5 z + x) iterated until |dz| < 1e-6 ------------------
# Its vjp is the implicit derivative of the exact fixed point, g s / (1 - 0.5 s), s = 1 - z^2; the forward stops at an
# absolute tolerance, so its own slope is that of a truncated iteration: off by ~1e-6 relative where z is O(1), and
# by much more near x = 0 (at x = 1e-3: 1.99901 against 1.99998, tryout7's shrunk case).

_DEQ_W = 0.5


def _deq_fwd(x):
    z = np.zeros_like(x)
    for _ in range(1000):
        zn = np.tanh(_DEQ_W * z + x)
        if np.max(np.abs(zn - z), initial=0.0) < 1e-6:
            return zn
        z = zn
    return z


def _deq_vjp(g, x, out):
    s = 1 - out * out
    return (g * s / (1 - _DEQ_W * s),)


deq = gs.Op("t7r_np_deq", forward=_deq_fwd, vjp=_deq_vjp)


# ---- findings 12 and 13g: soft-thresholding (kinks at |x| = 0.5), checked at chosen points -------------------------


class SoftThreshold(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sign(x) * torch.clamp(x.abs() - 0.5, min=0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x.abs() > 0.5).to(g.dtype)


class SoftThresholdBug(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sign(x) * torch.clamp(x.abs() - 0.5, min=0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x > 0.5).to(g.dtype)  # BUG: the x < -0.5 side gets no gradient


# ---- finding 13d: an op without a jvp, whose J gs.explain estimates by finite-difference JVPs ------------------------

smooth_nojvp = gs.Op("t7r_smooth_nojvp", forward=lambda x: np.sin(x) * x,
                     vjp=lambda g, x, out: (g * (np.cos(x) * x + np.sin(x)),))


# ---- finding 13c: a solve whose backward solves with A where A^T belongs, b broadcast against a batch of A ----------


class SolveBugA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, b):
        x = torch.linalg.solve(A, b.unsqueeze(-1)).squeeze(-1)
        ctx.save_for_backward(A, x)
        return x

    @staticmethod
    def backward(ctx, g):
        A, x = ctx.saved_tensors
        lam = torch.linalg.solve(A, g.unsqueeze(-1)).squeeze(-1)  # BUG: A, not A.mT
        return -lam.unsqueeze(-1) * x.unsqueeze(-2), lam
