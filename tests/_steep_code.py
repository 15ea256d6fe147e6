"""A correct numpy rmsnorm (tryout6's myops.rmsnorm), for tests/test_fd_steep.py.  Module level, so cases
naming it (``user_ops={"t6_rmsnorm": "tests._steep_code:rmsnorm"}``) load and replay.

Over a last axis of size 1 it is ``x / sqrt(x^2 + eps)``: a ramp of width ~sqrt(eps) = 1e-3 around 0 with
slope 1 / sqrt(eps) = 1e3 there; three in a row make a ramp of width ~1e-9 with slope 1e9 at 0, far narrower
than finite differences' step (6e-6 at |x| <= 1).
"""

from __future__ import annotations

import numpy as np
import torch

import gradspec as gs

EPS = 1e-6


def _fwd(x):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS)


def _vjp(g, x, out):
    r = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + EPS)
    return (g * r - x * r**3 * (g * x).sum(-1, keepdims=True) / x.shape[-1],)


def _vjp_half(g, x, out):  # BUG: half the gradient (the planted twin the fix must still find)
    return (0.5 * _vjp(g, x, out)[0],)


def _torch(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)


rmsnorm = gs.Op("t6_rmsnorm", forward=_fwd, vjp=_vjp, torch=_torch, signature="(n)->(n)")
rmsnorm_half = gs.Op("t6_rmsnorm_half", forward=_fwd, vjp=_vjp_half, torch=_torch, signature="(n)->(n)")


def stacked(x, op: str = "t6_rmsnorm", times: int = 3) -> gs.Case:
    """``op`` applied ``times`` times in a row to the leaf ``x`` (last axis of size 1), summed with seed ones."""
    x = np.asarray(x, dtype=np.float64)
    nodes, prev = [], "x0"
    for k in range(times):
        nodes.append({"name": f"v{k}", "op": op, "inputs": [prev], "params": {}})
        prev = f"v{k}"
    d = {"format": "gradspec-case/1", "engine": "reference", "user_ops": {op: f"tests._steep_code:{op.removeprefix('t6_')}"},
         "leaves": [{"name": "x0", "requires_grad": True,
                     "value": {"dtype": "float64", "shape": list(x.shape), "data": [float(v).hex() for v in x.ravel()]}}],
         "nodes": nodes, "roots": [prev],
         "seeds": [{"dtype": "float64", "shape": list(x.shape), "data": [(1.0).hex()] * x.size}], "meta": {}}
    return gs.Case.from_json(d)

square = gs.Op("t6_square", forward=lambda x: x * x, vjp=lambda g, x, out: (2 * x * g,), torch=lambda x: x * x)


# a forward rough at every spacing (deterministic pseudo-noise ~1e-9, as an ill-conditioned solve rounds) with
# the smooth part's gradient: noise that finite differences must hold in their error bound, not refuse
noisy_square = gs.Op("t6_noisy_square", forward=lambda x: x * x + 1e-9 * np.sin(1e15 * x),
                     vjp=lambda g, x, out: (2 * x * g,))


def single(x, op: str) -> gs.Case:
    """``op`` on the float64 leaf ``x`` (a vector), seed ones."""
    x = np.asarray(x, dtype=np.float64)
    d = {"format": "gradspec-case/1", "engine": "reference", "user_ops": {op: f"tests._steep_code:{op.removeprefix('t6_')}"},
         "leaves": [{"name": "x0", "requires_grad": True,
                     "value": {"dtype": "float64", "shape": list(x.shape), "data": [float(v).hex() for v in x.ravel()]}}],
         "nodes": [{"name": "y", "op": op, "inputs": ["x0"], "params": {}}], "roots": ["y"],
         "seeds": [{"dtype": "float64", "shape": list(x.shape), "data": [(1.0).hex()] * x.size}], "meta": {}}
    return gs.Case.from_json(d)


# tryout6's straight-through round (myops.ste: a surrogate on purpose, identity backward): its FD-JVP skip reasons
# carry measured numbers ("flat within 0.0148 ... changes by 0.5"), one per case before tryout6 #12
ste = gs.Op("t6_ste", forward=lambda x: np.round(x * 4) / 4, vjp=lambda g, x, out: (g,))
