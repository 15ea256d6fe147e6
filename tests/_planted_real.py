"""Planted torch Functions as real users write them: kinked projections, approximate (iterative)
solvers, ill-conditioned solves, poles.  Test and benchmark helper, never used by shipped code.

Each family has a correct Function and a buggy twin (a subclass overriding ``backward`` only, so
both provably share their forward).  ``FAMILIES`` maps a readable id to ``Real(ok, bug, kwargs)``:
the ``verify_torch_function`` keywords a user would pass (signature, declared accuracy...).

Why each family is hard for a gradient checker:

* ``sparsemax`` (Martins & Astudillo 2016; the projection onto the probability simplex) is
  piecewise linear: at points where an element sits exactly on the support boundary
  (``z_i == tau``) the Jacobian jumps.  Integer-valued inputs, which Hypothesis draws often,
  land there all the time (``[-10, -1000, 0, -1]``: ``tau = -1 = z_3``).
* ``kepler`` solves Kepler's equation ``E - e sin E = M`` (e = 0.5) by 30 fixed-point
  iterations (error ~ e^30 ~ 1e-9) and differentiates implicitly, ``dE/dM = 1 / (1 - e cos E)``:
  the backward is the derivative of the exact solution, the forward an approximation, so the two
  differ by ~2e-9 relative by design (within the allowance for opaque code; 20 steps would need ``rtol``).
* ``illsolve`` solves ``(K_n + 1e-6 diag(tanh a)) x = b`` with ``K_n`` a fixed non-symmetric
  matrix of condition number 1e5 (a stiff operator with a small learnable diagonal): the forward's
  rounding error is ~cond * eps, far above the few-eps model of an ordinary op.
* ``pole`` is ``1 / (x - a)``: near ``x == a`` the function changes on the scale ``|x - a|``,
  however large ``|x|`` is.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
import torch

# ---------------------------------------------------------------------------------------------
# sparsemax (projection onto the simplex), over the last axis
# ---------------------------------------------------------------------------------------------


def _sparsemax(z: torch.Tensor) -> torch.Tensor:
    zs, _ = torch.sort(z, dim=-1, descending=True)
    k = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    cs = zs.cumsum(-1)
    support = (1 + k * zs) > cs
    kz = support.sum(-1, keepdim=True)
    tau = (cs.gather(-1, kz - 1) - 1) / kz.to(z.dtype)
    return torch.clamp(z - tau, min=0)


class Sparsemax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        p = _sparsemax(z)
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, g):
        (p,) = ctx.saved_tensors
        s = (p > 0).to(g.dtype)
        mean = (g * s).sum(-1, keepdim=True) / s.sum(-1, keepdim=True)
        return s * (g - mean)


class SparsemaxAllMean(Sparsemax):
    """BUG: the mean over every element instead of over the support."""

    @staticmethod
    def backward(ctx, g):
        (p,) = ctx.saved_tensors
        s = (p > 0).to(g.dtype)
        return s * (g - g.mean(-1, keepdim=True))


# ---------------------------------------------------------------------------------------------
# Kepler's equation by fixed-point iteration, implicit backward
# ---------------------------------------------------------------------------------------------

ECC = 0.5
KEPLER_ITERS = 30  # contraction factor ECC: error ~ 0.5^30 ~ 1e-9, derivative error ~ 30 x that
# (measured on m in [-10, 10]: 2.4e-9 relative at most, within tolerances.OPAQUE_RTOL: no claim needed;
# 20 steps: 4.8e-7, beyond it: that solver declares its accuracy, rtol=1e-6)
KEPLER_ROUGH_ITERS = 20


class Kepler(torch.autograd.Function):
    @staticmethod
    def forward(ctx, m):
        e = m.clone()
        for _ in range(KEPLER_ITERS):
            e = m + ECC * torch.sin(e)
        ctx.save_for_backward(e)
        return e

    @staticmethod
    def backward(ctx, g):
        (e,) = ctx.saved_tensors
        return g / (1 - ECC * torch.cos(e))


class KeplerWrongPoint(Kepler):
    """BUG: the derivative of the iteration's first step, cos(M), where cos(E) belongs."""

    @staticmethod
    def forward(ctx, m):
        out = Kepler.forward(ctx, m)
        ctx.m = m.detach().clone()
        return out

    @staticmethod
    def backward(ctx, g):
        (e,) = ctx.saved_tensors
        return g / (1 - ECC * torch.cos(e)) * (1 + 1e-4 * torch.cos(ctx.m))


# ---------------------------------------------------------------------------------------------
# an ill-conditioned solve
# ---------------------------------------------------------------------------------------------

COND = 1e5
DIAG_SCALE = 1e-6  # below the smallest singular value (1e-5): the condition number stays ~1e5


@functools.lru_cache(maxsize=16)
def stiff_matrix(n: int) -> np.ndarray:
    """``Q diag(logspace(0, -5, n)) P^T``: orthogonal Q, P from a fixed seed; cond 1e5 (n >= 2)."""
    rng = np.random.default_rng(1000 + n)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    p, _ = np.linalg.qr(rng.standard_normal((n, n)))
    k = q @ np.diag(np.logspace(0, -np.log10(COND), n)) @ p.T
    k.flags.writeable = False
    return k


class IllSolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        k = torch.from_numpy(stiff_matrix(b.shape[-1]).copy())
        A = k + DIAG_SCALE * torch.diag_embed(torch.tanh(a))
        x = torch.linalg.solve(A, b.unsqueeze(-1)).squeeze(-1)
        ctx.save_for_backward(A, a, x)
        return x

    @staticmethod
    def backward(ctx, g):
        A, a, x = ctx.saved_tensors
        y = torch.linalg.solve(A.mT, g.unsqueeze(-1)).squeeze(-1)  # A^-T g
        ga = -DIAG_SCALE * (1 - torch.tanh(a) ** 2) * y * x
        return ga, y


class IllSolveNoTranspose(IllSolve):
    """BUG: A^-1 g where A^-T g belongs (invisible for symmetric matrices; K_n is not symmetric)."""

    @staticmethod
    def backward(ctx, g):
        A, a, x = ctx.saved_tensors
        y = torch.linalg.solve(A, g.unsqueeze(-1)).squeeze(-1)
        ga = -DIAG_SCALE * (1 - torch.tanh(a) ** 2) * y * x
        return ga, y


# ---------------------------------------------------------------------------------------------
# a pole
# ---------------------------------------------------------------------------------------------


class Pole(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, a):
        ctx.save_for_backward(x, a)
        return 1 / (x - a)

    @staticmethod
    def backward(ctx, g):
        x, a = ctx.saved_tensors
        d = -g / (x - a) ** 2
        return d, -d


class PoleSignA(Pole):
    """BUG: a's gradient with the sign of x's."""

    @staticmethod
    def backward(ctx, g):
        x, a = ctx.saved_tensors
        d = -g / (x - a) ** 2
        return d, d


# ---------------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Real:
    ok: Any
    bug: Any
    kwargs: dict = dataclasses.field(default_factory=dict)
    why: str = ""


FAMILIES: dict[str, Real] = {
    "sparsemax": Real(Sparsemax.apply, SparsemaxAllMean.apply, {"signature": "(n)->(n)"},
                      "kinked projection onto the simplex"),
    "kepler": Real(Kepler.apply, KeplerWrongPoint.apply, {"rtol": 1e-6},
                   "iterative solver accurate to ~1e-8, implicit backward"),
    # (float64 only: its stiff matrix is float64, so a float32 case raises in forward and judges nothing --
    # 5 of 8 cases did, which leaves a run too thin to vouch for anything: Result.thinly_judged)
    "illsolve": Real(IllSolve.apply, IllSolveNoTranspose.apply, {"signature": "(n),(n)->(n)", "dtypes": ("float64",)},
                     "solve with condition number 1e5"),
    "pole": Real(Pole.apply, PoleSignA.apply, {}, "1 / (x - a)"),
}


# ---------------------------------------------------------------------------------------------
# the same families as numpy user ops (gs.Op), for gs.check at chosen points and gs.verify_op
# ---------------------------------------------------------------------------------------------

import gradspec as gs  # noqa: E402


def np_sparsemax(z):
    z = np.asarray(z, dtype=np.float64)
    zs = -np.sort(-z, axis=-1)
    k = np.arange(1, z.shape[-1] + 1)
    cs = np.cumsum(zs, axis=-1)
    kz = ((1 + k * zs) > cs).sum(-1, keepdims=True)
    tau = (np.take_along_axis(cs, kz - 1, -1) - 1) / kz
    return np.maximum(z - tau, 0.0)


def _sparsemax_vjp(g, z, out):
    s = (out > 0).astype(np.float64)
    return (s * (g - (g * s).sum(-1, keepdims=True) / s.sum(-1, keepdims=True)),)


np_sparsemax_op = gs.Op("np_sparsemax", forward=np_sparsemax, vjp=_sparsemax_vjp, signature="(n)->(n)")


def np_kepler(m):
    e = np.array(m, dtype=np.float64, copy=True)
    for _ in range(KEPLER_ITERS):
        e = m + ECC * np.sin(e)
    return e


def np_kepler_rough(m):
    e = np.array(m, dtype=np.float64, copy=True)
    for _ in range(KEPLER_ROUGH_ITERS):
        e = m + ECC * np.sin(e)
    return e


np_kepler_rough_op = gs.Op("np_kepler_rough", forward=np_kepler_rough,
                           vjp=lambda g, m, out: (g / (1 - ECC * np.cos(out)),))
np_kepler_op = gs.Op("np_kepler", forward=np_kepler, vjp=lambda g, m, out: (g / (1 - ECC * np.cos(out)),))
np_kepler_bug = gs.Op("np_kepler_bug", forward=np_kepler,
                      vjp=lambda g, m, out: (g / (1 - ECC * np.cos(out)) * (1 + 1e-4 * np.cos(m)),))


def np_illsolve(b):
    k = stiff_matrix(b.shape[-1])
    return np.linalg.solve(k, b[..., None])[..., 0]


np_illsolve_op = gs.Op("np_illsolve", forward=np_illsolve, signature="(n)->(n)",
                       vjp=lambda g, b, out: (np.linalg.solve(np.swapaxes(stiff_matrix(b.shape[-1]), -1, -2),
                                                              g[..., None])[..., 0],))
np_illsolve_bug = gs.Op("np_illsolve_bug", forward=np_illsolve, signature="(n)->(n)",
                        vjp=lambda g, b, out: (np.linalg.solve(stiff_matrix(b.shape[-1]), g[..., None])[..., 0],))

np_pole_op = gs.Op("np_pole", forward=lambda x, a: 1 / (x - a),
                   vjp=lambda g, x, a, out: (-g * out ** 2, g * out ** 2))
np_pole_bug = gs.Op("np_pole_bug", forward=lambda x, a: 1 / (x - a),
                    vjp=lambda g, x, a, out: (-g * out ** 2, -g * out ** 2))
