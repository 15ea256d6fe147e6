"""tryout11 #2: the user's least-squares Function (QR forward, the textbook normal-equation backward
w = (A^T A)^-1 g by two triangular solves with R), correct in float32 and float64, and the square 7x7 A of
condition 884 (a float32 case of seed 0, shrunk) where its float32 gradient is off the float64 one by ~1500
float32 ulps: rounding amplified by cond^2, not a wrong formula.  Lstsq32Scaled: wrong by 1% in float32 only."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["Lstsq", "Lstsq32Scaled", "A884"]

# (every entry a float32 number: the case's float32 leaf)
A884 = np.array([
    [8.385330200195312, 1.0, 7.5727410316467285, -756.1974487304688, 0.29330533742904663, -1.0, 3.274888038635254],
     [3.274888038635254, -10.0, 1000.0, 3.890653371810913, 4.998547554016113, -623.2464599609375, 2.266566514968872],
     [6.865540504455566, -2.830930233001709, -756.1974487304688, 0.25, 10.0, 0.8772280216217041, -0.13353316485881805],
     [10.0, -877.8768920898438, 9.277812957763672, -1.0, -844.457763671875, 1.0, 9.828165054321289],
     [-0.07890599220991135, 2.0, 2.5507402420043945, -951.5491943359375, 0.10029273480176926, 3.639416217803955, 0.0010000000474974513],
     [7.254992961883545, 1.9989278316497803, 5.76930046081543, 0.07254233211278915, -1.907671570777893, 3.0, 9.492849349975586],
     [-504.5640563964844, 1.2861216068267822, 0.01411108672618866, -0.5, -539.8589477539062, -4.755598068237305, -3.0]])


class Lstsq(torch.autograd.Function):
    """x = argmin |A x - b| (m >= n) by QR."""

    @staticmethod
    def forward(ctx, A, b):
        Q, R = torch.linalg.qr(A)
        x = torch.linalg.solve_triangular(R, (Q.transpose(-1, -2) @ b.unsqueeze(-1)), upper=True).squeeze(-1)
        ctx.save_for_backward(A, b, R, x)
        return x

    @staticmethod
    def backward(ctx, g):
        A, b, R, x = ctx.saved_tensors
        y = torch.linalg.solve_triangular(R.transpose(-1, -2), g.unsqueeze(-1), upper=False)
        w = torch.linalg.solve_triangular(R, y, upper=True).squeeze(-1)  # (A^T A)^{-1} g
        r = b - (A @ x.unsqueeze(-1)).squeeze(-1)
        Aw = (A @ w.unsqueeze(-1)).squeeze(-1)
        return r.unsqueeze(-1) * w.unsqueeze(-2) - Aw.unsqueeze(-1) * x.unsqueeze(-2), Aw


class Lstsq32Scaled(Lstsq):
    """Wrong by 1% for float32 inputs only (a float32 fast path with a typo)."""

    @staticmethod
    def backward(ctx, g):
        gA, gb = Lstsq.backward(ctx, g)
        k = 1.01 if g.dtype == torch.float32 else 1.0
        return gA * k, gb * k
