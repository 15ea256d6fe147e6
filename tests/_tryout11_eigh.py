"""tryout11 #13: the user's eigh Function (values and vectors) and its planted bug, the backward without the final
symmetrisation (trimmed from sciml.py / bugs.py)."""

from __future__ import annotations

import torch

__all__ = ["Eigh", "EighNoSym"]


def _sbar(w, V, gw, gV):
    Vt = V.transpose(-1, -2)
    n = w.shape[-1]
    inner = torch.diag_embed(gw)
    if gV is not None:
        diff = w.unsqueeze(-2) - w.unsqueeze(-1)  # [i, j] = w_j - w_i
        F = (1.0 / (diff + torch.eye(n, dtype=w.dtype))) * (1 - torch.eye(n, dtype=w.dtype))
        inner = inner + F * (Vt @ gV)
    return V @ inner @ Vt


class Eigh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A):
        w, V = torch.linalg.eigh(0.5 * (A + A.transpose(-1, -2)))
        ctx.save_for_backward(w, V)
        return w, V

    @staticmethod
    def backward(ctx, gw, gV):
        S = _sbar(*ctx.saved_tensors, gw, gV)
        return 0.5 * (S + S.transpose(-1, -2))


class EighNoSym(Eigh):
    @staticmethod
    def backward(ctx, gw, gV):
        return _sbar(*ctx.saved_tensors, gw, gV)
