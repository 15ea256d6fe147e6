"""A custom-op author's torch Functions (tryout10): in-place, view-returning and index-taking ones, each correct
or with one planted bug named in its comment.  The tests' expectations come from how each was written."""

from __future__ import annotations

import torch


class AddScaledInplace(torch.autograd.Function):
    """buf += alpha * x in place (ctx.mark_dirty), returns buf: correct."""

    @staticmethod
    def forward(ctx, buf, x, alpha):
        buf.add_(x, alpha=alpha)
        ctx.mark_dirty(buf)
        ctx.alpha = alpha
        return buf

    @staticmethod
    def backward(ctx, g):
        return g, g * ctx.alpha, None


class ScaleInplace(torch.autograd.Function):
    """x *= 3 in place (ctx.mark_dirty), one input: correct."""

    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.mul_(3.0)

    @staticmethod
    def backward(ctx, g):
        return 3.0 * g


class FirstHalfView(torch.autograd.Function):
    """A view (first half of the last axis) of 2 * x: correct."""

    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return (2 * x)[..., : (x.shape[-1] + 1) // 2]

    @staticmethod
    def backward(ctx, g):
        gx = g.new_zeros(ctx.shape)
        gx[..., : g.shape[-1]] = 2 * g
        return gx


class SquareSavedMutated(torch.autograd.Function):
    """y = x * x computed into a clone; BUG: the clone is stashed on ctx, then mutated (it holds x^2 at backward)."""

    @staticmethod
    def forward(ctx, x):
        t = x.clone()
        ctx.t = t
        t.mul_(x)
        return t.clone()

    @staticmethod
    def backward(ctx, g):
        return 2 * g * ctx.t


class SquareSavedGood(torch.autograd.Function):
    """y = x * x computed in place into a clone; x saved with save_for_backward: correct."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        t = x.clone()
        t.mul_(x)
        return t

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * g * x


class TopKGate(torch.autograd.Function):
    """x * (mask of the k largest along the last axis); k an int argument: correct."""

    @staticmethod
    def forward(ctx, x, k):
        k = min(k, x.shape[-1])
        _, ind = x.topk(k, -1)
        mask = torch.zeros_like(x).scatter_(-1, ind, 1.0)
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask, None


class SegmentSum(torch.autograd.Function):
    """Rows of x summed into nseg segments by an int64 index (index_add_): correct."""

    @staticmethod
    def forward(ctx, x, idx, nseg):
        ctx.save_for_backward(idx)
        return x.new_zeros((nseg,) + x.shape[1:]).index_add_(0, idx, x)

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        return g.index_select(0, idx), None, None


class GatherRowsDropDups(torch.autograd.Function):
    """x[idx] by rows; BUG: backward assigns (gx[idx] = g): a duplicate index keeps one contribution only."""

    @staticmethod
    def forward(ctx, x, idx):
        ctx.save_for_backward(idx)
        ctx.n = x.shape[0]
        return x.index_select(0, idx)

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        gx = g.new_zeros((ctx.n,) + g.shape[1:])
        gx[idx] = g
        return gx, None


class GatherRowsGradForIndex(GatherRowsDropDups):
    """x[idx] by rows (GatherRowsDropDups' forward), right for x; BUG: returns a float 'gradient' for the int64
    index (needs_input_grad ignored)."""

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        gx = g.new_zeros((ctx.n,) + g.shape[1:]).index_add_(0, idx, g)
        return gx, torch.zeros(idx.shape, dtype=g.dtype)


class Softplus32Dtype(torch.autograd.Function):
    """softplus computed in float32 inside; BUG: the gradient is returned in float32 for a float64 input."""

    @staticmethod
    def forward(ctx, x):
        x32 = x.float()
        ctx.save_for_backward(x32)
        return torch.nn.functional.softplus(x32).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x32,) = ctx.saved_tensors
        return torch.sigmoid(x32) * g.float()


class TopKGateStashFilled(torch.autograd.Function):
    """TopKGate whose mask is stashed on ctx first and filled in place afterwards (on purpose): correct."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.mask = torch.zeros_like(x)
        ctx.mask.scatter_(-1, x.topk(min(k, x.shape[-1]), -1)[1], 1.0)
        return x * ctx.mask

    @staticmethod
    def backward(ctx, g):
        return g * ctx.mask, None


class ExpStashFilledTwice(torch.autograd.Function):
    """exp(x); the stash ctx.e is filled in place on purpose (clone, then exp_); BUG: the backward's factor 2
    (review15 #3: restoring the stash changes this gradient but does not make it right)."""

    @staticmethod
    def forward(ctx, x):
        ctx.e = x.detach().clone()
        ctx.e.exp_()
        return x.exp()

    @staticmethod
    def backward(ctx, g):
        return 2 * g * ctx.e


class SumDim(torch.autograd.Function):
    """x.sum(dim), dim an int argument: correct (review15 #6: a held int dim is no index, mask or target)."""

    @staticmethod
    def forward(ctx, x, dim):
        ctx.dim, ctx.shape = dim, x.shape
        return x.sum(dim)

    @staticmethod
    def backward(ctx, g):
        return g.unsqueeze(ctx.dim).expand(ctx.shape), None


class SegmentSumFirstRowOnly(SegmentSum):
    """SegmentSum (its forward); BUG: backward written for unique segment ids: only the first row of each segment
    gets its gradient (a duplicate segment id's other rows get 0)."""

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        n = idx.numel()
        first = torch.full((int(idx.max()) + 1,), n).scatter_reduce_(0, idx, torch.arange(n), "amin")
        rows = first[first < n]
        gx = g.new_zeros((n,) + g.shape[1:])
        gx[rows] = g[idx[rows]]
        return gx, None, None


class MaskedMean(torch.autograd.Function):
    """Mean of x over the last axis where a bool mask is True; a row with no True element gives 0: correct."""

    @staticmethod
    def forward(ctx, x, mask):
        m = mask.to(x.dtype)
        cnt = m.sum(-1, keepdim=True).clamp(min=1)
        ctx.save_for_backward(m, cnt)
        return (x * m).sum(-1) / cnt[..., 0]

    @staticmethod
    def backward(ctx, g):
        m, cnt = ctx.saved_tensors
        return g[..., None] * m / cnt, None


class MaskedMeanNoClamp(torch.autograd.Function):
    """MaskedMean without the clamp: a row with no True element is 0/0 (NaN) in forward and backward alike; the
    backward is the derivative wherever the forward is finite (a precondition of the op, not a gradient bug)."""

    @staticmethod
    def forward(ctx, x, mask):
        m = mask.to(x.dtype)
        cnt = m.sum(-1, keepdim=True)
        ctx.save_for_backward(m, cnt)
        return (x * m).sum(-1) / cnt[..., 0]

    @staticmethod
    def backward(ctx, g):
        m, cnt = ctx.saved_tensors
        return g[..., None] * m / cnt, None


class MaskedMeanFullCount(torch.autograd.Function):
    """MaskedMean; BUG: backward divides by the full row length D, not the number of True elements: count/D x the
    gradient, row by row (right only for an all-True row).  tests/_tryout10_code.py re-exports it (one definition)."""

    @staticmethod
    def forward(ctx, x, mask):
        m = mask.to(x.dtype)
        cnt = m.sum(-1, keepdim=True).clamp(min=1)
        ctx.save_for_backward(m)
        return (x * m).sum(-1) / cnt[..., 0]

    @staticmethod
    def backward(ctx, g):
        (m,) = ctx.saved_tensors
        return g[..., None] * m / m.shape[-1], None
