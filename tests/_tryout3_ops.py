"""numpy user ops from a new user's tryout (tryout3's myops.py), for tests/test_tryout3_verdicts.py.  Module
level, so cases naming them (``user_ops={"name": "tests._tryout3_ops:attr"}``) load and replay."""

from __future__ import annotations

import numpy as np

import gradspec as gs


def _lse_fwd(x):
    m = x.max(-1, keepdims=True)
    return (np.log(np.exp(x - m).sum(-1, keepdims=True)) + m)[..., 0]


# rowwise logsumexp (n)->(): correct; with n = 1 it returns its input exactly
lse_ok = gs.Op("t3_lse", forward=_lse_fwd, signature="(n)->()",
               vjp=lambda g, x, out: (g[..., None] * np.exp(x - out[..., None]),))
# BUG: a 1e-5-relative error (a wrong constant): float64 comparisons must find it
lse_tiny = gs.Op("t3_lse_tiny", forward=_lse_fwd, signature="(n)->()",
                 vjp=lambda g, x, out: (g[..., None] * np.exp(x - out[..., None]) * (1 + 1e-5),))


def _sp_fwd(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _sig(x):
    return 0.5 * (1 + np.tanh(0.5 * x))  # correct, but 1 + tanh cancels for x << 0


# correct softplus whose torch twin is F.softplus
softplus_ok = gs.Op("t3_softplus", forward=_sp_fwd, vjp=lambda g, x, out: (g * _sig(x),),
                    torch=lambda x: __import__("torch").nn.functional.softplus(x))


# piecewise constant (a quantizer): derivative 0 almost everywhere, so the vjp's zeros are right
floor_op = gs.Op("t3_floor", forward=lambda x: np.floor(4 * x) / 4, vjp=lambda g, x, out: (np.zeros_like(g),))
# BUG: the same formula off by a relative 1e-5 (a wrong constant): must still be found where 1 + tanh cancels
softplus_tiny = gs.Op("t3_softplus_tiny", forward=_sp_fwd, vjp=lambda g, x, out: (g * _sig(x) * (1 + 1e-5),),
                      torch=lambda x: __import__("torch").nn.functional.softplus(x))
