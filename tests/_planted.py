"""Planted bugs for ``gs.verify_*`` (test and benchmark helper; never used by shipped code).

Each entry is a classic gradient bug family, written three ways where it makes sense: as a
user op (``gs.Op``), as a ``torch.autograd.Function`` and as an engine adapter that breaks one
backward() rule.  Every bug has a correct twin, so a test can assert both "found" and "silent
on correct code".  ``BUGS`` maps a readable id to ``Planted(target, twin, kinds, verify, ...)``.

The ops are module-level objects (``tests._planted:pl_...``) so saved cases can be replayed.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import torch
from hypothesis import strategies as st

import gradspec as gs
from gradspec.engines import ReferenceEngine
from gradspec.ops.user import sum_to

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def _first_slice_to(grad, shape):
    """The buggy "reduction": index 0 along the broadcast axes instead of summing over them."""
    grad = np.asarray(grad)
    lead = grad.ndim - len(shape)
    g = grad[(0,) * lead] if lead > 0 else grad
    idx = tuple(slice(0, 1) if (s == 1 and gs_ != 1) else slice(None) for s, gs_ in zip(shape, g.shape, strict=True))
    return np.ascontiguousarray(g[idx]).reshape(shape)


def _soft_kink(x, lam):
    return float(np.min(np.abs(np.abs(x) - lam), initial=np.inf))


# ---------------------------------------------------------------------------------------------
# user ops: (buggy, correct)
# ---------------------------------------------------------------------------------------------

# 1. broadcasting: gradient of the broadcast operand not summed (first slice kept instead)
pl_mul_slice = gs.Op("pl_mul_slice", forward=lambda a, b: a * b,
                     vjp=lambda g, a, b, out: (_first_slice_to(g * b, a.shape), _first_slice_to(g * a, b.shape)))
pl_mul_ok = gs.Op("pl_mul_ok", forward=lambda a, b: a * b,
                  vjp=lambda g, a, b, out: (sum_to(g * b, a.shape), sum_to(g * a, b.shape)))

# 2. broadcasting: gradient returned in the broadcast shape (not reduced at all)
pl_add_unreduced = gs.Op("pl_add_unreduced", forward=lambda a, b: a + b,
                         vjp=lambda g, a, b, out: (g * np.ones_like(out), g * np.ones_like(out)))
pl_add_ok = gs.Op("pl_add_ok", forward=lambda a, b: a + b,
                  vjp=lambda g, a, b, out: (sum_to(g, a.shape), sum_to(g, b.shape)))

# 3. batched matmul: b's gradient taken from the first batch only (batch dims not reduced)
pl_bmm_batch0 = gs.Op(
    "pl_bmm_batch0", forward=np.matmul, arity=2, signature="(m,n),(n,p)->(m,p)",
    vjp=lambda g, a, b, out: (sum_to(g @ np.swapaxes(b, -1, -2), a.shape),
                              _first_slice_to(np.swapaxes(a, -1, -2) @ g, b.shape)))
pl_bmm_ok = gs.Op(
    "pl_bmm_ok", forward=np.matmul, arity=2, signature="(m,n),(n,p)->(m,p)",
    vjp=lambda g, a, b, out: (sum_to(g @ np.swapaxes(b, -1, -2), a.shape),
                              sum_to(np.swapaxes(a, -1, -2) @ g, b.shape)))

# 4. the seed is ignored (as if it were all ones)
pl_sq_noseed = gs.Op("pl_sq_noseed", forward=lambda x: x * x, vjp=lambda g, x, out: (2.0 * x,))
pl_sq_ok = gs.Op("pl_sq_ok", forward=lambda x: x * x, vjp=lambda g, x, out: (2.0 * x * g,))

# 5. only right when the seed is constant (uses its mean)
pl_sq_seedmean = gs.Op("pl_sq_seedmean", forward=lambda x: x * x,
                       vjp=lambda g, x, out: (2.0 * x * (np.mean(g) if g.size else 0.0),))

# 6. reduction over the last axis: the upstream gradient broadcast without the unsqueeze
pl_lse_nounsq = gs.Op(
    "pl_lse_nounsq", signature="(n)->()",
    forward=lambda x: np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1),
    vjp=lambda g, x, out: (np.broadcast_to(g, x.shape) * np.exp(x - out[..., None]),))
pl_lse_ok = gs.Op(
    "pl_lse_ok", signature="(n)->()",
    forward=lambda x: np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1),
    vjp=lambda g, x, out: (g[..., None] * np.exp(x - out[..., None]),))

# 7. wrong normalisation: mean's gradient divided by n - 1
pl_mean_norm = gs.Op("pl_mean_norm", signature="(n)->()", forward=lambda x: x.mean(-1),
                     vjp=lambda g, x, out: (np.broadcast_to(g[..., None] / max(x.shape[-1] - 1, 1), x.shape).copy(),))
pl_mean_ok = gs.Op("pl_mean_ok", signature="(n)->()", forward=lambda x: x.mean(-1),
                   vjp=lambda g, x, out: (np.broadcast_to(g[..., None] / x.shape[-1], x.shape).copy(),))

# 8. permutation: the gradient permuted by p instead of its inverse
_perm_shape = lambda s, p: tuple(s[i] for i in p) if len(s) == 3 else None  # noqa: E731
_perms = st.permutations([0, 1, 2]).map(tuple)
pl_perm_inv = gs.Op("pl_perm_inv", forward=lambda x, p: np.transpose(x, p), shape_fn=_perm_shape,
                    params={"p": _perms}, vjp=lambda g, x, out, p: (np.transpose(g, p),))
pl_perm_ok = gs.Op("pl_perm_ok", forward=lambda x, p: np.transpose(x, p), shape_fn=_perm_shape,
                   params={"p": _perms}, vjp=lambda g, x, out, p: (np.transpose(g, np.argsort(p)),))


# 9. indexing: the adjoint scatter assigns instead of accumulating (duplicate indices)
def _take(x, idx):
    return x[..., np.asarray(idx, dtype=int) % x.shape[-1]]


def _take_vjp_assign(g, x, out, idx):
    gx = np.zeros(x.shape)
    gx[..., np.asarray(idx, dtype=int) % x.shape[-1]] = g
    return (gx,)


def _take_vjp_add(g, x, out, idx):
    gx = np.zeros(x.shape)
    np.add.at(gx, (Ellipsis, np.asarray(idx, dtype=int) % x.shape[-1]), g)
    return (gx,)


_take_shape = lambda s, idx: (s[:-1] + (len(idx),)) if len(s) >= 1 and s[-1] > 0 else None  # noqa: E731
_idx = st.lists(st.integers(0, 5), min_size=1, max_size=5).map(tuple)
pl_take_assign = gs.Op("pl_take_assign", forward=_take, vjp=_take_vjp_assign, shape_fn=_take_shape,
                       params={"idx": _idx})
pl_take_ok = gs.Op("pl_take_ok", forward=_take, vjp=_take_vjp_add, shape_fn=_take_shape, params={"idx": _idx})


# 10. concatenation: the gradient split at the wrong point (b's size instead of a's)
def _cat_shape(a, b):
    if len(a) == 0 or len(a) != len(b) or a[:-1] != b[:-1]:
        return None
    return a[:-1] + (a[-1] + b[-1],)


pl_cat_split = gs.Op("pl_cat_split", forward=lambda a, b: np.concatenate([a, b], -1), shape_fn=_cat_shape,
                     vjp=lambda g, a, b, out: (g[..., : b.shape[-1]], g[..., b.shape[-1]:]))
pl_cat_ok = gs.Op("pl_cat_ok", forward=lambda a, b: np.concatenate([a, b], -1), shape_fn=_cat_shape,
                  vjp=lambda g, a, b, out: (g[..., : a.shape[-1]], g[..., a.shape[-1]:]))


# 11. singular points: product's gradient as out / x (0/0 at zeros)
def _prod_vjp_exact(g, x, out):
    res = np.empty(x.shape)
    for i in range(x.shape[-1]):
        res[..., i] = np.prod(np.delete(x, i, axis=-1), axis=-1)
    return (g[..., None] * res,)


pl_prod_div = gs.Op("pl_prod_div", signature="(n)->()", forward=lambda x: x.prod(-1),
                    vjp=lambda g, x, out: (g[..., None] * out[..., None] / x,))
pl_prod_ok = gs.Op("pl_prod_ok", signature="(n)->()", forward=lambda x: x.prod(-1), vjp=_prod_vjp_exact)

# 12. sign error on part of the domain: d(x|x|)/dx written as 2x (wrong for x < 0)
pl_xabsx_sign = gs.Op("pl_xabsx_sign", forward=lambda x: x * np.abs(x), vjp=lambda g, x, out: (2.0 * x * g,))
pl_xabsx_ok = gs.Op("pl_xabsx_ok", forward=lambda x: x * np.abs(x), vjp=lambda g, x, out: (2.0 * np.abs(x) * g,))


# 13. only above a size: cumsum's gradient summed over a window of 4 (right while n <= 4)
def _cumsum_vjp_window(g, x, out):
    n = x.shape[-1]
    res = np.zeros(x.shape)
    for i in range(n):
        res[..., i] = g[..., i: i + 4].sum(-1)
    return (res,)


pl_cumsum_win = gs.Op("pl_cumsum_win", signature="(n)->(n)", forward=lambda x: np.cumsum(x, -1), vjp=_cumsum_vjp_window)
pl_cumsum_ok = gs.Op("pl_cumsum_ok", signature="(n)->(n)", forward=lambda x: np.cumsum(x, -1),
                     vjp=lambda g, x, out: (np.flip(np.cumsum(np.flip(g, -1), -1), -1),))


# 14. only above a rank: matmul's gradient with .T (numpy reverses ALL axes: right for matrices only)
pl_mm_T = gs.Op("pl_mm_T", forward=np.matmul, arity=2, signature="(m,n),(n,p)->(m,p)",
                vjp=lambda g, a, b, out: (sum_to(g @ b.T, a.shape), sum_to(a.T @ g, b.shape)))

# 15. a small relative error (1e-6)
pl_exp_1e6 = gs.Op("pl_exp_1e6", forward=np.exp, arity=1, vjp=lambda g, x, out: (g * out * (1 + 1e-6),))
pl_exp_ok = gs.Op("pl_exp_ok", forward=np.exp, arity=1, vjp=lambda g, x, out: (g * out,))


# 16. writes into its upstream gradient
def _vjp_inplace(g, x, out):
    g *= 2.0
    return (g * x,)


pl_sq_inplace = gs.Op("pl_sq_inplace", forward=lambda x: x * x, vjp=_vjp_inplace)

# 17. wrong number of gradients
pl_mul_count = gs.Op("pl_mul_count", forward=lambda a, b: a * b, vjp=lambda g, a, b, out: (sum_to(g * b, a.shape),))

# 18. integer dtype gradient
pl_step_int = gs.Op("pl_step_int", forward=lambda x: 3.0 * x,
                    vjp=lambda g, x, out: (3 * np.ones(x.shape, dtype=np.int64),))
pl_step_ok = gs.Op("pl_step_ok", forward=lambda x: 3.0 * x, vjp=lambda g, x, out: (3.0 * g,))

# 19. a declared jvp that is wrong while the vjp is right
pl_sq_badjvp = gs.Op("pl_sq_badjvp", forward=lambda x: x * x, vjp=lambda g, x, out: (2.0 * x * g,),
                     jvp=lambda t, x, out: x * t[0])
pl_sq_goodjvp = gs.Op("pl_sq_goodjvp", forward=lambda x: x * x, vjp=lambda g, x, out: (2.0 * x * g,),
                      jvp=lambda t, x, out: 2.0 * x * t[0])

# 20. a torch twin that differs from the op: not a bug of the op (CONTRACT §8: a twin-mismatch note,
# never a failure; tests/test_verdicts.py checks the note), so it is not in BUGS
pl_sin_badtorch = gs.Op("pl_sin_badtorch", forward=np.sin, arity=1, vjp=lambda g, x, out: (g * np.cos(x),),
                        torch=lambda x: torch.cos(x))
pl_sin_ok = gs.Op("pl_sin_ok", forward=np.sin, arity=1, vjp=lambda g, x, out: (g * np.cos(x),),
                  torch=lambda x: torch.sin(x))

# 21. a parametrised soft-threshold whose gradient ignores the threshold (right only for lam -> 0)
_lam = st.floats(0.1, 2.0)
pl_soft_nolam = gs.Op("pl_soft_nolam", forward=lambda x, lam: np.sign(x) * np.maximum(np.abs(x) - lam, 0.0),
                      vjp=lambda g, x, out, lam: (g * (x != 0),), params={"lam": _lam}, kink_distance=_soft_kink,
                      domain=gs.domains.away_from([0.0], 1e-3))
pl_soft_ok = gs.Op("pl_soft_ok", forward=lambda x, lam: np.sign(x) * np.maximum(np.abs(x) - lam, 0.0),
                   vjp=lambda g, x, out, lam: (g * (np.abs(x) > lam),), params={"lam": _lam}, kink_distance=_soft_kink,
                   domain=gs.domains.away_from([0.0], 1e-3))


# 22. a vjp that raises on some shapes (0-d inputs)
def _vjp_rows(g, x, out):
    return (2.0 * (x * g).reshape(x.shape[0], -1).reshape(x.shape),)


pl_sq_raises = gs.Op("pl_sq_raises", forward=lambda x: x * x, vjp=_vjp_rows)

# ---------------------------------------------------------------------------------------------
# torch.autograd.Function: each correct one, then its buggy twin(s) (a subclass: same forward, own backward)
# ---------------------------------------------------------------------------------------------


class MulOk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g * b, g * a  # torch sums a broadcast gradient down to the input's shape


class MulSlice(MulOk):
    """a * b with b's gradient taken from the first row when b was broadcast over a leading dim."""

    # forward inherited from MulOk: the twins differ in backward only
    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga, gb = g * b, g * a
        while gb.dim() > b.dim():
            gb = gb[0]
        return ga, gb


class SquareOk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class SquareInplaceGrad(SquareOk):
    # forward inherited from SquareOk: the twins differ in backward only
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        g.mul_(2)
        return g * x


class SquareSeedMean(SquareOk):
    # forward inherited from SquareOk: the twins differ in backward only
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * (g.mean() if g.numel() else 0.0)


class SquareNoSeed(SquareOk):
    # forward inherited from SquareOk: the twins differ in backward only
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x


class SumLastOk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.sum(-1)

    @staticmethod
    def backward(ctx, g):
        return g.unsqueeze(-1).expand(ctx.shape)


class SumLastExpand(SumLastOk):
    """sum over the last axis; backward expands g without unsqueeze (wrong axis when square)."""

    # forward inherited from SumLastOk: the twins differ in backward only
    @staticmethod
    def backward(ctx, g):
        return g.expand(ctx.shape)


class MeanOk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.mean(-1)

    @staticmethod
    def backward(ctx, g):
        return g.unsqueeze(-1).expand(ctx.shape) / ctx.shape[-1]


class MeanNorm(MeanOk):
    # forward inherited from MeanOk: the twins differ in backward only
    @staticmethod
    def backward(ctx, g):
        return g.unsqueeze(-1).expand(ctx.shape) / max(ctx.shape[-1] - 1, 1)


class PermuteOk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p):
        ctx.p = p
        return x.permute(*p)

    @staticmethod
    def backward(ctx, g):
        inv = [0] * len(ctx.p)
        for i, j in enumerate(ctx.p):
            inv[j] = i
        return g.permute(*inv), None


class PermuteInv(PermuteOk):
    # forward inherited from PermuteOk: the twins differ in backward only
    @staticmethod
    def backward(ctx, g):
        return g.permute(*ctx.p), None


class TakeOk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, idx):
        i = torch.tensor(idx, dtype=torch.long) % x.shape[-1]
        ctx.save_for_backward(i)
        ctx.shape = x.shape
        return x[..., i]

    @staticmethod
    def backward(ctx, g):
        (i,) = ctx.saved_tensors
        return g.new_zeros(ctx.shape).index_add(-1, i, g), None


class TakeAssign(TakeOk):
    # forward inherited from TakeOk: the twins differ in backward only
    @staticmethod
    def backward(ctx, g):
        (i,) = ctx.saved_tensors
        gx = g.new_zeros(ctx.shape)
        gx[..., i] = g
        return gx, None


class CatOk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.na, ctx.nb = a.shape[-1], b.shape[-1]
        return torch.cat([a, b], -1)

    @staticmethod
    def backward(ctx, g):
        return g[..., : ctx.na], g[..., ctx.na:]


class CatSplit(CatOk):
    # forward inherited from CatOk: the twins differ in backward only
    @staticmethod
    def backward(ctx, g):
        return g[..., : ctx.nb], g[..., ctx.nb:]


class ProdDiv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x.prod(-1)
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        return (g * out).unsqueeze(-1) / x


class ProdOk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.prod(-1)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        n = x.shape[-1]
        cols = [torch.cat([x[..., :i], x[..., i + 1:]], -1).prod(-1) for i in range(n)]
        others = torch.stack(cols, -1) if cols else torch.zeros_like(x)
        return g.unsqueeze(-1) * others


class XAbsXOk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x.abs()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x.abs() * g


class XAbsXSign(XAbsXOk):
    # forward inherited from XAbsXOk: the twins differ in backward only
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class CumsumOk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.cumsum(-1)

    @staticmethod
    def backward(ctx, g):
        return g.flip(-1).cumsum(-1).flip(-1)


class CumsumWindow(CumsumOk):
    # forward inherited from CumsumOk: the twins differ in backward only
    @staticmethod
    def backward(ctx, g):
        n = g.shape[-1]
        return torch.stack([g[..., i: i + 4].sum(-1) for i in range(n)], -1) if n else g


class MatmulOk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g @ b.mT, a.mT @ g


class MatmulT(MatmulOk):
    """matmul whose backward transposes with .transpose(0, 1): right for matrices only."""

    # forward inherited from MatmulOk: the twins differ in backward only
    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g @ b.transpose(0, 1), a.transpose(0, 1) @ g


class ExpOk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


class Exp1e6(ExpOk):
    # forward inherited from ExpOk: the twins differ in backward only
    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y * (1 + 1e-6)


class ScaleStateful(torch.autograd.Function):
    """Keeps the last input in a class attribute: wrong as soon as it is called twice in a graph."""

    last = None

    @staticmethod
    def forward(ctx, x):
        ScaleStateful.last = x.detach().clone()
        return x * x

    @staticmethod
    def backward(ctx, g):
        return 2 * ScaleStateful.last * g


class SquareMutatesCtx(torch.autograd.Function):
    """Changes what it saved during backward: a second backward (retain_graph) gives another answer."""

    @staticmethod
    def forward(ctx, x):
        ctx.k = 2.0
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        k = ctx.k
        ctx.k = k * 1.5
        return k * x * g


# ---------------------------------------------------------------------------------------------
# engine adapters: one broken backward() rule each
# ---------------------------------------------------------------------------------------------


class Small(ReferenceEngine):
    """The reference engine restricted to a few ops (like a small third-party engine): the
    correct twin of every planted engine below."""

    name = "small"
    OPS = ("add", "mul", "sub", "neg", "exp", "tanh", "relu", "sum", "mean", "matmul")

    def supports(self, op):
        return op in self.OPS


class ImplicitAnyShape(Small):
    name = "implicit-any-shape"

    def backward(self, tensor, gradient=None, retain_graph=False):
        if gradient is None:
            gradient = np.ones(tensor.shape)
        super().backward(tensor, gradient, retain_graph)


class SeedBroadcast(Small):
    name = "seed-broadcast"

    def backward(self, tensor, gradient=None, retain_graph=False):
        if gradient is not None and np.shape(gradient) != tuple(tensor.shape):
            gradient = np.broadcast_to(gradient, tensor.shape).copy()
        super().backward(tensor, gradient, retain_graph)


class SeedIgnored(Small):
    name = "seed-ignored"

    def backward(self, tensor, gradient=None, retain_graph=False):
        if gradient is not None:
            if np.shape(gradient) != tuple(tensor.shape):
                raise RuntimeError("Mismatch in shape")
            gradient = np.ones(tensor.shape)
        super().backward(tensor, gradient, retain_graph)


class NoAccumulation(Small):
    name = "no-accumulation"

    def __init__(self):
        self.leaves = []

    def leaf(self, value, requires_grad=True):
        t = super().leaf(value, requires_grad)
        self.leaves.append(t)
        return t

    def backward(self, tensor, gradient=None, retain_graph=False):
        for t in self.leaves:
            t.grad = None  # forgets what earlier calls accumulated
        super().backward(tensor, gradient, retain_graph)


class NoReset(Small):
    name = "no-reset"

    def zero_grad(self, leaf):
        pass


class NoFreeing(Small):
    name = "no-freeing"

    def backward(self, tensor, gradient=None, retain_graph=False):
        super().backward(tensor, gradient, True)


class RepeatedArgs(Small):
    """op(x, x) treated as op(x, detached copy of x): one use's gradient is lost."""

    name = "repeated-args"

    def apply(self, op, *args, **params):
        seen, out = set(), []
        for a in args:
            out.append(a.detach() if id(a) in seen else a)
            seen.add(id(a))
        return super().apply(op, *out, **params)


class ZerosBeforeBackward(Small):
    name = "zeros-not-none"

    def grad(self, leaf):
        g = super().grad(leaf)
        return np.zeros(leaf.shape) if g is None else g


class ValueErrors(Small):
    name = "value-errors"

    def backward(self, tensor, gradient=None, retain_graph=False):
        try:
            super().backward(tensor, gradient, retain_graph)
        except RuntimeError as e:
            raise ValueError(str(e)) from None


class SumScaled(Small):
    """An op-level value bug inside an engine: sum's gradient scaled by 1 + 1e-6."""

    name = "sum-scaled"

    def apply(self, op, *args, **params):
        out = super().apply(op, *args, **params)
        if op == "sum":
            from gradspec import engine as E

            out = E.call("add", out, E.call("mul", E.call("sub", out, out.detach()), E.tensor(1e-6)))
        return out


class Wider(Small):
    """The small engine with the ops of a typical first engine (tryout8's minigrad): the correct twin of
    the two reduction bugs below."""

    name = "wider"
    OPS = Small.OPS + ("div", "log", "mm", "softmax")


def _regrad(out, surrogate):
    """``out``'s value with ``surrogate``'s gradient: out.detach() + (q - q.detach())."""
    from gradspec import engine as E

    return E.call("add", out.detach(), E.call("sub", surrogate, surrogate.detach()))


class MeanAllN(Wider):
    """mean's VJP divides by every element of the input, not the reduced ones (tryout8 F4): right
    whenever the dims kept have one element in all, so only a partial mean over a tensor with
    other dims > 1 shows it."""

    name = "mean-all-n"

    def apply(self, op, *args, **params):
        out = super().apply(op, *args, **params)
        n_all = int(np.prod(args[0].shape)) if op == "mean" else 0
        dim = params.get("dim")  # canonical from cases; the rules' scenarios call mean(x) as a user would
        if n_all and dim is not None:
            from gradspec import engine as E

            dim = (dim,) if isinstance(dim, int) else dim
            n_red = int(np.prod([args[0].shape[d] for d in dim]))
            out = _regrad(out, E.call("mul", out, E.tensor(n_red / n_all)))
        return out


class SoftmaxLastAxis(Wider):
    """softmax's VJP sums g*s over the last axis instead of ``dim`` (tryout8 F4): right for a softmax
    over the last axis, or where the last axis has one element."""

    name = "softmax-last-axis"

    def apply(self, op, *args, **params):
        out = super().apply(op, *args, **params)
        if op == "softmax" and params.get("dim") is not None and args[0].ndim:
            from gradspec import engine as E

            s, x = out.detach(), args[0]
            sx = E.call("mul", s, x)  # J^T g of s*x - s*sum_last(s*x) is s*(g - sum_last(g*s))
            q = E.call("sub", sx, E.call("mul", s, E.call("sum", sx, dim=(-1,), keepdim=True)))
            out = _regrad(out, q)
        return out


# ---------------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Planted:
    family: str
    how: str  # "op" | "torch" | "engine"
    target: Any
    twin: Any
    kinds: tuple
    kwargs: dict = dataclasses.field(default_factory=dict)
    strict_only: bool = False  # engine bugs that only strict=True reports


def _t(family, fn, twin, kinds, **kw):
    return Planted(family, "torch", fn, twin, kinds, kw)


def _o(family, op, twin, kinds):
    return Planted(family, "op", op, twin, kinds)


def _e(family, eng, kinds, strict_only=False):
    return Planted(family, "engine", eng, Small, kinds, {}, strict_only)


_VAL = ("value",)
BUGS: dict[str, Planted] = {
    # user ops
    "op-broadcast-first-slice": _o("broadcast not reduced", pl_mul_slice, pl_mul_ok, _VAL),
    "op-broadcast-unreduced": _o("broadcast not reduced", pl_add_unreduced, pl_add_ok, ("vjp-shape",)),
    "op-matmul-batch-dims": _o("batch dims of matmul", pl_bmm_batch0, pl_bmm_ok, _VAL),
    "op-seed-ignored": _o("seed ignored", pl_sq_noseed, pl_sq_ok, _VAL),
    "op-seed-mean": _o("seed right only when constant", pl_sq_seedmean, pl_sq_ok, _VAL),
    "op-missing-unsqueeze": _o("wrong axis / missing unsqueeze", pl_lse_nounsq, pl_lse_ok, ("value", "vjp-raised")),
    "op-normalisation": _o("wrong normalisation", pl_mean_norm, pl_mean_ok, _VAL),
    "op-inverse-permutation": _o("inverse permutation", pl_perm_inv, pl_perm_ok, ("value", "vjp-shape")),
    "op-scatter-duplicates": _o("indexing scatter (duplicates)", pl_take_assign, pl_take_ok, _VAL),
    "op-concat-split": _o("concatenation split point", pl_cat_split, pl_cat_ok, ("vjp-shape", "value")),
    "op-prod-zeros": _o("singular point (zeros in a product)", pl_prod_div, pl_prod_ok, ("nan-inf-pattern",)),
    "op-sign-negative": _o("sign error on part of the domain", pl_xabsx_sign, pl_xabsx_ok, _VAL),
    "op-above-size-4": _o("only above a size", pl_cumsum_win, pl_cumsum_ok, _VAL),
    "op-above-rank-2": _o("only above a rank", pl_mm_T, pl_bmm_ok, ("value", "vjp-raised", "vjp-shape")),
    "op-relative-1e-6": _o("small relative error", pl_exp_1e6, pl_exp_ok, _VAL),
    "op-writes-upstream": _o("writes into its upstream gradient", pl_sq_inplace, pl_sq_ok, ("vjp-writes-input",)),
    "op-gradient-count": _o("wrong number of gradients", pl_mul_count, pl_mul_ok, ("vjp-count",)),
    "op-int-dtype": _o("wrong dtype", pl_step_int, pl_step_ok, ("vjp-dtype",)),
    "op-wrong-jvp": _o("declared jvp wrong", pl_sq_badjvp, pl_sq_goodjvp, _VAL),
    "op-soft-threshold-param": _o("param ignored", pl_soft_nolam, pl_soft_ok, _VAL),
    "op-vjp-raises": _o("vjp raises on some shapes", pl_sq_raises, pl_sq_ok, ("vjp-raised",)),
    # torch Functions
    "fn-broadcast-first-slice": _t("broadcast not reduced", MulSlice.apply, MulOk.apply, _VAL),
    "fn-seed-ignored": _t("seed ignored", SquareNoSeed.apply, SquareOk.apply, _VAL),
    "fn-seed-mean": _t("seed right only when constant", SquareSeedMean.apply, SquareOk.apply, _VAL),
    "fn-missing-unsqueeze": _t("wrong axis / missing unsqueeze", SumLastExpand.apply, SumLastOk.apply,
                               ("value", "vjp-raised"), signature="(n)->()"),
    "fn-normalisation": _t("wrong normalisation", MeanNorm.apply, MeanOk.apply, _VAL, signature="(n)->()"),
    "fn-inverse-permutation": _t("inverse permutation", PermuteInv.apply, PermuteOk.apply, ("value", "vjp-raised"),
                                 arity=1, shape_fn=_perm_shape, params={"p": _perms}),
    "fn-scatter-duplicates": _t("indexing scatter (duplicates)", TakeAssign.apply, TakeOk.apply, _VAL, arity=1,
                                shape_fn=_take_shape, params={"idx": _idx}),
    "fn-concat-split": _t("concatenation split point", CatSplit.apply, CatOk.apply, ("vjp-raised", "value"),
                          shape_fn=_cat_shape),
    "fn-prod-zeros": _t("singular point (zeros in a product)", ProdDiv.apply, ProdOk.apply, ("nan-inf-pattern",),
                        signature="(n)->()"),
    "fn-sign-negative": _t("sign error on part of the domain", XAbsXSign.apply, XAbsXOk.apply, _VAL),
    "fn-above-size-4": _t("only above a size", CumsumWindow.apply, CumsumOk.apply, _VAL, signature="(n)->(n)"),
    "fn-above-rank-2": _t("only above a rank", MatmulT.apply, MatmulOk.apply, ("vjp-raised", "value"),
                          signature="(m,n),(n,p)->(m,p)"),
    "fn-relative-1e-6": _t("small relative error", Exp1e6.apply, ExpOk.apply, _VAL),
    "fn-stateful": _t("state shared between calls", ScaleStateful.apply, SquareOk.apply, _VAL),
    "fn-mutates-ctx": _t("backward twice differs", SquareMutatesCtx.apply, SquareOk.apply, ("accumulation",)),
    "fn-inplace-grad-output": _t("writes into its upstream gradient", SquareInplaceGrad.apply, SquareOk.apply,
                                 ("vjp-writes-input",)),
    # engines
    "engine-implicit-any-shape": _e("implicit seed for any shape", ImplicitAnyShape, ("implicit-seed",)),
    "engine-seed-broadcast": _e("seed broadcast accepted", SeedBroadcast, ("seed-shape",)),
    "engine-seed-ignored": _e("seed ignored", SeedIgnored, ("value",)),
    "engine-no-accumulation": _e("no accumulation", NoAccumulation, ("accumulation",)),
    "engine-no-reset": _e("no reset", NoReset, ("reset",)),
    "engine-no-freeing": _e("no freeing", NoFreeing, ("freeing",), strict_only=True),
    "engine-repeated-arguments": _e("repeated arguments", RepeatedArgs, ("repeated-argument",)),
    "engine-zeros-not-none": _e("zeros instead of None", ZerosBeforeBackward, ("none-before-backward", "none-vs-zeros"),
                                strict_only=True),
    "engine-error-types": _e("error types", ValueErrors, ("error-type",), strict_only=True),
    "engine-sum-relative-1e-6": _e("small relative error in an op", SumScaled, ("value",)),
}


def run(p: Planted, which: str = "target", **kw):
    """Run the right verify_* on the buggy target (or its twin)."""
    obj = p.target if which == "target" else p.twin
    if p.how == "op":
        return gs.verify_op(obj, **kw)
    if p.how == "torch":
        return gs.verify_torch_function(obj, **p.kwargs, **kw)
    return gs.verify_engine(obj(), **kw)


VERIFY: dict[str, Callable] = {"op": gs.verify_op, "torch": gs.verify_torch_function, "engine": gs.verify_engine}
