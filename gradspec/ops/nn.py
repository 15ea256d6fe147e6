"""Neural-network ops: softmax / log_softmax, mse_loss, cross_entropy, conv1d.

Split from :mod:`gradspec.ops.linalg` (same conventions: forwards take a private ``_lead`` for
leading batch axes; conv1d is an einsum over sliding windows, through linalg's internal
``_linalg_einsum`` and its own ``_linalg_unfold`` / ``_linalg_fold``).

Example::

    >>> import numpy as np, gradspec as gs
    >>> gs.softmax(gs.tensor([0.0, 0.0]), dim=0).numpy()
    array([0.5, 0.5])
"""

from __future__ import annotations

import warnings

import numpy as np

from .. import engine as E
from .._private.dims import norm_dim
from ..spec.opspec import OpSpec
from ..spec.registry import register
from ._common import F, quiet, torch, with_lead
from .linalg import REDUCTIONS, _align_to, _einsum_fwd, _float_dtype, _insert_ones, _multilinear_jvp, _st

__all__: list[str] = []

call = E.call


# ---------------------------------------------------------------------------------------
# softmax / log_softmax
# ---------------------------------------------------------------------------------------
# Canonical ``dim`` is a negative int; for a 0-d input it is None (the softmax of a single
# element), because -1 would point at a batch axis once batch axes are added.


def _softmax_norm(shapes, dim):
    (s,) = shapes
    if dim is None and len(s) == 0:
        return {"dim": None}  # the canonical form itself
    d = norm_dim(dim, len(s))
    return {"dim": None if len(s) == 0 else d}


def _shifted(x, dim):
    if dim is None:
        return x - x
    if x.shape[dim] == 0:
        return x
    return x - np.max(x, axis=dim, keepdims=True)


def _softmax_fwd(x, dim):
    e = np.exp(_shifted(x, dim))
    return e if dim is None else e / np.sum(e, axis=dim, keepdims=True)


def _log_softmax_fwd(x, dim):
    z = _shifted(x, dim)
    if dim is None:
        return z
    return z - np.log(np.sum(np.exp(z), axis=dim, keepdims=True))


def _dim_sum(t, dim):
    # sum over the softmax dim, kept; a 0-d softmax sums over its single element.
    return t if dim is None else call("sum", t, dim=(dim,), keepdim=True)


def _softmax_vjp(g, x, *, out, dim):
    # torch's _softmax_backward_data: y * (g - sum(g * y)); saves the output.
    return (out * (g - _dim_sum(g * out, dim)),)


def _log_softmax_vjp(g, x, *, out, dim):
    # torch's _log_softmax_backward_data: g - exp(y) * sum(g); at a -inf input exp(y) = 0,
    # so the gradient there is g_i (reference 9.11b).
    return (g - call("exp", out) * _dim_sum(g, dim),)


def _np_dim_sum(a, dim):
    return a if dim is None else np.sum(a, axis=dim, keepdims=True)


def _softmax_jvp(tangents, x, *, out, dim):
    (t,) = tangents
    return out * (t - _np_dim_sum(out * t, dim))


def _log_softmax_jvp(tangents, x, *, out, dim):
    (t,) = tangents
    return t - _np_dim_sum(np.exp(out) * t, dim)


def _softmax_params(shapes):
    # Half the draws on a shape with two axes > 1 normalise over one of them but the last (the last is
    # drawn often already, as -1): where a VJP's sum(g*s) over the wrong axis, often the last, shows
    # (tryout8 F4); any dim otherwise.
    nd = max(len(shapes[0]), 1)
    big = [i for i, s in enumerate(shapes[0]) if s > 1]
    dims = _st().integers(-nd, nd - 1)
    if len(big) >= 2:
        dims = _st().one_of(dims, _st().sampled_from(big[:-1]))
    return _st().fixed_dictionaries({"dim": dims})


def _softmax_torch(fn):
    return lambda x, dim: fn(x, 0 if dim is None else dim)


for _name, _fwd, _vjp, _jvp, _tfn in (
    ("softmax", _softmax_fwd, _softmax_vjp, _softmax_jvp, lambda x, d: torch().softmax(x, d)),
    ("log_softmax", _log_softmax_fwd, _log_softmax_vjp, _log_softmax_jvp, lambda x, d: torch().log_softmax(x, d)),
):
    register(
        OpSpec(
            name=_name,
            family="linalg",
            arity=1,
            forward=_fwd,
            vjp=_vjp,
            jvp=_jvp,
            torch=_softmax_torch(_tfn),
            torch_name=f"torch.{_name}",
            shape_fn=lambda s, dim: tuple(s),
            normalize=_softmax_norm,
            param_strategy=_softmax_params,
            saves=True,
            call=lambda input, dim: ((input,), {"dim": dim}),
            method=True,
            notes="stable (max subtracted); saves its output; a -inf entry gives no nan: softmax's gradient "
            "is -0/0 there, log_softmax's is g_i - p_i*sum(g) = g_i (reference 9.11b); an all -inf slice is nan",
        )
    )


# ---------------------------------------------------------------------------------------
# mse_loss
# ---------------------------------------------------------------------------------------


def _check_reduction(reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _reduce_data(a, reduction, lead):
    axes = tuple(range(lead, a.ndim))
    if reduction == "sum":
        return np.sum(a, axis=axes)
    if reduction == "mean":
        return np.mean(a, axis=axes)
    return a


def _mse_fwd(x, t, reduction, _lead=0):
    d = x - t
    with quiet(invalid="ignore", divide="ignore"):  # mean of an empty tensor is nan, as in torch
        return _reduce_data(d * d, reduction, _lead)


def _mse_vjp(g, x, t, *, out, reduction):
    d = x - t
    n = int(np.prod(np.broadcast_shapes(x.shape, t.shape)))
    # torch's mse_loss_backward: norm * (input - target) * grad, norm = 2/numel for 'mean'.
    norm = (2.0 / n if n else float("nan")) if reduction == "mean" else 2.0
    gx = d * norm * g
    return gx if x.requires_grad else None, -gx if t.requires_grad else None


def _mse_jvp(tangents, x, t, *, out, reduction):
    tx, tt = tangents
    r = len(np.broadcast_shapes(np.shape(x), np.shape(t)))
    dt = 0
    if tx is not None:
        dt = dt + _pad_tangent(tx, r)
    if tt is not None:
        dt = dt - _pad_tangent(tt, r)
    full = 2 * (x - t) * dt
    n = max(v.shape[0] for v in tangents if v is not None)
    full = np.broadcast_to(full, (n,) + np.broadcast_shapes(np.shape(x), np.shape(t)))
    with quiet(invalid="ignore", divide="ignore"):
        return _reduce_data(full, reduction, 1)


def _pad_tangent(t, r):
    return _insert_ones(t, 1, r - (t.ndim - 1))


def _mse_norm(shapes, reduction="mean"):
    return {"reduction": _check_reduction(reduction)}


def _mse_torch(x, t, reduction):
    with warnings.catch_warnings():  # torch warns when shapes differ (broadcasting)
        warnings.simplefilter("ignore", UserWarning)
        return F().mse_loss(x, t, reduction=reduction)


def _mse_call(input, target, *, reduction="mean"):
    return (input, target), {"reduction": reduction}


register(
    OpSpec(
        name="mse_loss",
        family="linalg",
        arity=2,
        forward=_mse_fwd,
        vjp=_mse_vjp,
        jvp=_mse_jvp,
        torch=_mse_torch,
        torch_name="torch.nn.functional.mse_loss",
        # The table draws equal shapes only: torch broadcasts unequal ones but warns that it is
        # likely a bug.  The forward and VJP do handle broadcasting (tested by hand).
        shape_fn=lambda sx, st_, reduction: (
            (tuple(sx) if reduction == "none" else ()) if tuple(sx) == tuple(st_) else None
        ),
        normalize=_mse_norm,
        batch_params=with_lead,
        broadcasting=True,
        param_strategy=lambda shapes: _st().fixed_dictionaries({"reduction": _st().sampled_from(REDUCTIONS)}),
        saves=True,
        call=_mse_call,
        notes="(input - target)**2 reduced by 'mean' (nan for an empty input), 'sum' or 'none'; "
        "both inputs differentiable; saves input and target",
    )
)


# ---------------------------------------------------------------------------------------
# cross_entropy with class-index targets
# ---------------------------------------------------------------------------------------
# The integer target is a PARAM (a tuple of ints, or an int for a (C,) input), not a tensor
# input: it is never differentiated, and params are what the batched oracles hold fixed.


def _ce_norm(shapes, target, reduction="mean", label_smoothing=0.0, ignore_index=-100):
    (s,) = shapes
    if isinstance(target, E.Tensor):
        target = target.data
    elif hasattr(target, "detach") and hasattr(target, "numpy"):  # a torch tensor
        target = target.detach().cpu().numpy()
    tgt = np.asarray(target)
    if tgt.dtype.kind not in "iu" and not (tgt.size == 0 and tgt.dtype.kind == "f"):
        raise TypeError(
            "gradspec's cross_entropy takes class-index targets (integers); class-probability targets are not "
            f"supported (got dtype {tgt.dtype})"
        )
    tgt = tgt.astype(np.int64)
    _check_reduction(reduction)
    label_smoothing = float(label_smoothing)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing:g}")
    if len(s) not in (1, 2):
        raise RuntimeError(f"cross_entropy: expected input of shape (C,) or (N, C), got {list(s)}")
    if tgt.shape != tuple(s[:-1]):
        if len(s) == 2 and tgt.ndim == 1:
            raise ValueError(f"Expected input batch_size ({s[0]}) to match target batch_size ({tgt.shape[0]}).")
        raise RuntimeError(f"cross_entropy: target of shape {list(tgt.shape)} does not match input {list(s)}")
    ignore_index = int(ignore_index)
    bad = (tgt != ignore_index) & ((tgt < 0) | (tgt >= s[-1]))
    if bad.any():
        raise IndexError(f"Target {int(tgt[bad].flat[0])} is out of bounds.")
    return {
        "target": tgt.tolist() if tgt.ndim == 0 else tuple(int(v) for v in tgt),
        "reduction": reduction,
        "label_smoothing": label_smoothing,
        "ignore_index": ignore_index,
    }


def _ce_parts(target, ignore_index, c):
    tgt = np.asarray(target, dtype=np.int64)
    valid = tgt != ignore_index
    return tgt, valid, np.where(valid, tgt, 0)


def _ce_reduce(per, valid, reduction):
    # per: per-sample values (..., N) or (...) for a (C,) input; mean divides by the number of
    # non-ignored targets (0/0 = nan when all are ignored, as torch).
    if reduction == "none":
        return per
    axes = (-1,) if valid.ndim == 1 else ()
    s = np.sum(per, axis=axes) if axes else per
    if reduction == "sum":
        return s
    with quiet(invalid="ignore", divide="ignore"):
        return s / np.asarray(np.sum(valid), dtype=per.dtype)


def _ce_fwd(x, target, reduction, label_smoothing, ignore_index):
    c = x.shape[-1]
    _, valid, safe = _ce_parts(target, ignore_index, c)
    ls = _log_softmax_fwd(x, -1)
    idx = np.broadcast_to(safe, x.shape[:-1])[..., None]
    picked = np.take_along_axis(ls, idx, axis=-1)[..., 0]
    nll = np.where(valid, -picked, 0.0).astype(x.dtype, copy=False)
    loss = _ce_reduce(nll, valid, reduction)
    if label_smoothing > 0.0:
        # torch: (1 - eps) * nll_loss + reduce(-sum_c log_softmax) * (eps / C), in that order,
        # so an infinite smoothing term with eps = 1 gives 0 * inf = nan, as in torch.
        smooth = np.where(valid, -np.sum(ls, axis=-1), 0.0).astype(x.dtype, copy=False)
        loss = (1 - label_smoothing) * loss + _ce_reduce(smooth, valid, reduction) * (label_smoothing / c)
    return np.asarray(loss, dtype=x.dtype)


def _ce_coef(shape, dtype, target, reduction, label_smoothing, ignore_index):
    """d loss / d log_softmax(x) = -coef (a constant: it depends only on the target)."""
    c = shape[-1]
    tgt, valid, safe = _ce_parts(target, ignore_index, c)
    onehot = (np.arange(c) == safe[..., None]).astype(dtype)
    scale = valid.astype(dtype)
    if reduction == "mean":
        count = int(np.sum(valid))
        scale = scale / count if count else scale  # all ignored: scale is all zeros anyway
    coef = (1 - label_smoothing) * onehot + (label_smoothing / c if label_smoothing > 0 else 0.0)
    return coef * scale[..., None], scale


def _ce_vjp(g, x, *, out, target, reduction, label_smoothing, ignore_index):
    coef, scale = _ce_coef(x.shape, x.dtype, target, reduction, label_smoothing, ignore_index)
    if reduction == "none" and g.ndim:
        g = call("reshape", g, shape=g.shape + (1,))
    p = call("softmax", x, dim=-1)
    # d/dx of -sum_c coef_c * log_softmax(x)_c = softmax(x) * sum_c coef_c - coef
    w = p * E.Tensor(np.asarray(scale[..., None], dtype=x.dtype)) - E.Tensor(np.asarray(coef, dtype=x.dtype))
    return (g * w,)


def _ce_jvp(tangents, x, *, out, target, reduction, label_smoothing, ignore_index):
    (t,) = tangents
    coef, scale = _ce_coef(x.shape, x.dtype, target, reduction, label_smoothing, ignore_index)
    p = _softmax_fwd(x, -1)
    w = p * scale[..., None] - coef
    per = np.sum(w * t, axis=-1)  # (n, ...) per sample, already scaled for 'mean'
    if reduction == "mean" and not np.any(np.asarray(target) != ignore_index):
        # torch's forward mode divides by the zero total weight (torch.func.jvp gives nan),
        # although its reverse mode gives 0 here.
        return np.full(per.shape[:1], np.nan, dtype=per.dtype)
    if reduction == "none" or np.ndim(target) == 0:
        return per
    return np.sum(per, axis=-1)


def _ce_shape(s, target, reduction, label_smoothing, ignore_index):
    if len(s) not in (1, 2) or s[-1] == 0 or np.shape(target) != tuple(s[:-1]):
        return None
    return tuple(s[:-1]) if reduction == "none" else ()


def _ce_params(shapes):
    st = _st()
    (s,) = shapes
    if len(s) not in (1, 2) or s[-1] == 0:
        # Params that normalize rejects, so the case builder simply tries other shapes
        # (st.nothing() would count as a filtered example in Hypothesis' health checks).
        return st.just({"target": ()})
    c = s[-1]
    tgt = st.integers(0, c - 1) if len(s) == 1 else st.lists(st.integers(0, c - 1), min_size=s[0], max_size=s[0])
    return st.fixed_dictionaries(
        {
            "target": tgt,
            "reduction": st.sampled_from(REDUCTIONS),
            "label_smoothing": st.sampled_from([0.0, 0.0, 0.1, 0.5]),
        }
    )


def _ce_torch(x, target, reduction, label_smoothing, ignore_index):
    tgt = torch().tensor(np.asarray(target, dtype=np.int64))
    return F().cross_entropy(
        x, tgt, reduction=reduction, label_smoothing=label_smoothing, ignore_index=ignore_index
    )


def _ce_call(input, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    return (input,), {
        "target": target,
        "reduction": reduction,
        "label_smoothing": label_smoothing,
        "ignore_index": ignore_index,
    }


register(
    OpSpec(
        name="cross_entropy",
        family="linalg",
        arity=1,
        forward=_ce_fwd,
        vjp=_ce_vjp,
        jvp=_ce_jvp,
        torch=_ce_torch,
        torch_name="torch.nn.functional.cross_entropy",
        shape_fn=_ce_shape,
        normalize=_ce_norm,
        param_strategy=_ce_params,
        saves=True,
        call=_ce_call,
        notes="input (N, C) or (C,), integer class targets (a param); log_softmax + nll, with label_smoothing "
        "as torch composes it; ignore_index targets contribute 0 and 'mean' divides by the non-ignored "
        "count (all ignored or empty: forward nan, gradient 0, but forward-mode tangent nan, as "
        "torch.func.jvp); a -inf logit is fine unless it is the target (loss inf)",
    )
)


# ---------------------------------------------------------------------------------------
# conv1d, via _linalg_unfold (im2col) and its adjoint _linalg_fold
# ---------------------------------------------------------------------------------------


def _out_len(length, size, stride, dilation, padding):
    return (length + padding[0] + padding[1] - dilation * (size - 1) - 1) // stride + 1


def _window_index(lout, size, stride, dilation):
    return np.arange(lout)[:, None] * stride + np.arange(size)[None, :] * dilation


def _unfold_fwd(x, size, stride, dilation, padding):
    l, r = padding
    xp = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(l, r)]) if (l or r) else x
    lout = max(_out_len(x.shape[-1], size, stride, dilation, padding), 0)
    return xp[..., _window_index(lout, size, stride, dilation)]


def _fold_fwd(cols, length, stride, dilation, padding):
    l, r = padding
    lout, size = cols.shape[-2], cols.shape[-1]
    out = np.zeros(cols.shape[:-2] + (length + l + r,), dtype=cols.dtype)
    if lout:
        # For one kernel tap k the window positions o*stride + k*dilation are distinct, so a
        # strided slice add (no ufunc.at) is an exact scatter-add.
        for k in range(size):
            start = k * dilation
            out[..., start : start + stride * (lout - 1) + 1 : stride] += cols[..., :, k]
    return out[..., l : l + length]


def _unfold_torch(x, size, stride, dilation, padding):
    xp = F().pad(x, tuple(padding)) if any(padding) else x
    return xp.unfold(-1, dilation * (size - 1) + 1, stride)[..., ::dilation]


def _fold_torch(cols, length, stride, dilation, padding):
    t = torch()
    l, r = padding
    lout, size = cols.shape[-2], cols.shape[-1]
    idx = t.tensor(_window_index(lout, size, stride, dilation).reshape(-1), dtype=t.int64)
    base = cols.new_zeros(tuple(cols.shape[:-2]) + (length + l + r,))
    out = base.index_add(-1, idx, cols.reshape(tuple(cols.shape[:-2]) + (lout * size,)))
    return out[..., l : l + length]


def _window_params(shapes):
    st = _st()
    return st.fixed_dictionaries(
        {
            "size": st.integers(1, 3),
            "stride": st.integers(1, 2),
            "dilation": st.integers(1, 2),
            "padding": st.tuples(st.integers(0, 1), st.integers(0, 1)),
        }
    ).filter(lambda p: len(shapes[0]) >= 1 and _out_len(shapes[0][-1], **p) >= 1)


register(
    OpSpec(
        name="_linalg_unfold",
        family="internal",
        arity=1,
        forward=_unfold_fwd,
        vjp=lambda g, x, *, out, size, stride, dilation, padding: (
            call("_linalg_fold", g, length=x.shape[-1], stride=stride, dilation=dilation, padding=padding),
        ),
        linear=True,
        torch=_unfold_torch,
        torch_name="F.pad + Tensor.unfold",
        shape_fn=lambda s, size, stride, dilation, padding: (
            tuple(s[:-1]) + (_out_len(s[-1], size, stride, dilation, padding), size)
            if len(s) >= 1 and _out_len(s[-1], size, stride, dilation, padding) >= 0
            else None
        ),
        normalize=lambda shapes, size, stride=1, dilation=1, padding=(0, 0): {
            "size": int(size), "stride": int(stride), "dilation": int(dilation),
            "padding": tuple(int(v) for v in padding),
        },
        param_strategy=_window_params,
        saves=False,
        notes="sliding windows (..., L) -> (..., L_out, size) over the zero-padded last axis (im2col)",
    )
)
register(
    OpSpec(
        name="_linalg_fold",
        family="internal",
        arity=1,
        forward=_fold_fwd,
        vjp=lambda g, cols, *, out, length, stride, dilation, padding: (
            call("_linalg_unfold", g, size=cols.shape[-1], stride=stride, dilation=dilation, padding=padding),
        ),
        linear=True,
        torch=_fold_torch,
        torch_name="Tensor.index_add (adjoint of unfold)",
        shape_fn=lambda s, length, stride, dilation, padding: (
            tuple(s[:-2]) + (length,)
            if len(s) >= 2 and s[-2] == max(_out_len(length, s[-1], stride, dilation, padding), 0)
            else None
        ),
        normalize=lambda shapes, length, stride=1, dilation=1, padding=(0, 0): {
            "length": int(length), "stride": int(stride), "dilation": int(dilation),
            "padding": tuple(int(v) for v in padding),
        },
        param_strategy=None,
        saves=False,
        notes="adjoint of _linalg_unfold: scatter-adds windows (..., L_out, size) back to (..., length)",
    )
)


def _conv_pads(padding, size, dilation):
    if padding == "same":
        total = dilation * (size - 1)
        return (total // 2, total - total // 2)  # torch puts the odd extra element on the right
    return (int(padding), int(padding))


def _single(v, name):
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise RuntimeError(f"expected {name} to be a single integer value or a list of 1 values to match the "
                               f"convolution dimensions, but got {name}={list(v)}")
        v = v[0]
    return v


def _conv_norm(shapes, stride=1, padding=0, dilation=1, groups=1):
    sx, sw = tuple(shapes[0]), tuple(shapes[1])
    if int(groups) != 1:
        raise NotImplementedError("gradspec's conv1d supports groups=1 only")
    stride, dilation = int(_single(stride, "stride")), int(_single(dilation, "dilation"))
    padding = _single(padding, "padding")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise RuntimeError(f"Invalid padding string: '{padding}'")
        if padding == "same" and stride != 1:
            raise RuntimeError("padding='same' is not supported for strided convolutions")
        padding = 0 if padding == "valid" else "same"
    else:
        padding = int(padding)
        if padding < 0:
            raise RuntimeError("negative padding is not supported")
    if stride <= 0:
        raise RuntimeError("non-positive stride is not supported")
    if dilation <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got [1, {dilation}]")
    if len(sw) < 3:
        raise RuntimeError("weight should have at least three dimensions")
    if len(sw) > 3:
        raise RuntimeError(
            f"Expected {len(sw)}-dimensional input for {len(sw)}-dimensional weight {list(sw)}, but got "
            f"{len(sx)}-dimensional input of size {list(sx)} instead"
        )
    if len(sx) not in (2, 3):
        raise RuntimeError(
            f"Expected 2D (unbatched) or 3D (batched) input to conv1d, but got input of size: {list(sx)}"
        )
    if sw[0] == 0:
        raise RuntimeError(
            "Given groups=1, expected weight to be at least 1 at dimension 0, but got weight of size "
            f"{list(sw)} instead"
        )
    if sw[2] == 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kernel_height: 1 kernel_width: {sw[2]}")
    if sx[-2] != sw[1]:
        xs = list(sx) if len(sx) == 3 else [1] + list(sx)
        raise RuntimeError(
            f"Given groups=1, weight of size {list(sw)}, expected input{xs} to have {sw[1]} channels, "
            f"but got {sx[-2]} channels instead"
        )
    pads = _conv_pads(padding, sw[2], dilation)
    if sx[-1] + sum(pads) < dilation * (sw[2] - 1) + 1:
        raise RuntimeError(
            f"Calculated padded input size per channel: ({sx[-1] + sum(pads)}). Kernel size: "
            f"({dilation * (sw[2] - 1) + 1}). Kernel size can't be greater than actual input size"
        )
    batch = sx[0] if len(sx) == 3 else 1
    if sx[-1] == 0 and batch and sx[-2]:
        # torch: padding can make an empty signal long enough for the kernel, but it still
        # refuses to convolve it (found by a 20k-case soak where torch raised and gradspec did not).
        raise RuntimeError(
            f"Only zero batch or zero channel inputs are supported, but got input shape: [{batch}, {sx[-2]}, 1, 0]"
        )
    if len(shapes) == 3 and tuple(shapes[2]) != (sw[0],):
        raise RuntimeError(
            f"Given weight of size {list(sw)}, expected bias to be 1-dimensional with {sw[0]} elements, but got bias "
            f"of size {list(shapes[2])} instead"
        )
    return {"stride": stride, "padding": padding, "dilation": dilation}


def _conv_shape(sx, sw, *rest, stride, padding, dilation):
    try:
        _conv_norm((sx, sw) + tuple(rest), stride=stride, padding=padding, dilation=dilation)
    except (RuntimeError, NotImplementedError):
        return None
    if sx[-2] == 0:
        return None  # torch returns an oddly shaped empty output for 0 input channels
    pads = _conv_pads(padding, sw[2], dilation)
    return tuple(sx[:-2]) + (sw[0], _out_len(sx[-1], sw[2], stride, dilation, pads))


def _conv_nobias_fwd(x, w, stride, padding, dilation, _lead=0):
    size = w.shape[-1]
    cols = _unfold_fwd(x, size, stride, dilation, _conv_pads(padding, size, dilation))
    return _einsum_fwd(cols, w, subscripts="...clk,dck->...dl", _lead=_lead)


def _conv_fwd(x, w, b, stride, padding, dilation, _lead=0):
    y = _conv_nobias_fwd(x, w, stride, padding, dilation, _lead=_lead)
    return y + _align_to(b, _lead, y.ndim - 1)[..., None]


def _conv_vjp(g, x, w, b=None, *, out, stride, padding, dilation):
    size = w.shape[-1]
    window = {"stride": stride, "dilation": dilation, "padding": _conv_pads(padding, size, dilation)}
    gx = gw = gb = None
    if x.requires_grad:
        gcols = call("_linalg_einsum", g, w, subscripts="...dl,dck->...clk")
        gx = call("_linalg_fold", gcols, length=x.shape[-1], **window)
    if w.requires_grad:
        cols = call("_linalg_unfold", x, size=size, **window)
        gw = call("_linalg_einsum", g, cols, subscripts="...dl,...clk->dck")
    if b is None:
        return gx, gw
    if b.requires_grad:
        gb = call("sum", g, dim=(-1,), keepdim=False)  # the engine sums the batch dim down
    return gx, gw, gb


def _conv_jvp(tangents, x, w, b=None, *, out, stride, padding, dilation):
    p = {"stride": stride, "padding": padding, "dilation": dilation}
    n = max(t.shape[0] for t in tangents if t is not None)
    acc = np.zeros((n,) + np.shape(out), dtype=_float_dtype(out))
    if any(t is not None for t in tangents[:2]):
        acc = acc + _multilinear_jvp(_conv_nobias_fwd, tangents[:2], (x, w), out, **p)
    if b is not None and tangents[2] is not None:
        acc = acc + _align_to(tangents[2], 1, acc.ndim - 1)[..., None]
    return acc


def _conv_params(shapes):
    st = _st()
    choices = st.fixed_dictionaries(
        {
            "stride": st.integers(1, 2),
            "padding": st.sampled_from([0, 1, 2, "same", "valid"]),
            "dilation": st.integers(1, 2),
        }
    )

    def ok(p):
        if p["padding"] == "same" and p["stride"] != 1:
            return False
        try:
            _conv_norm(shapes, **p)
        except (RuntimeError, NotImplementedError):
            return False
        return True

    # Fall back to the defaults (valid for any shape the shape rule accepts) rather than
    # filtering, which Hypothesis counts against its health checks.
    return choices.map(lambda p: p if ok(p) else {})


def _conv_torch(x, w, b=None, *, stride, padding, dilation):
    return F().conv1d(x, w, b, stride=stride, padding=padding, dilation=dilation)


def _conv_dispatch(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    p = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    if bias is None:
        return "conv1d_nobias", (input, weight), p
    return "conv1d", (input, weight, bias), p


_CONV_NOTES = (
    "input (N, C_in, L) or (C_in, L), weight (C_out, C_in, K), groups=1; padding an int, 'valid' or 'same' "
    "(odd extra padding on the right, as torch); cross-correlation as an einsum over sliding windows; "
    "saves input and weight"
)

register(
    OpSpec(
        name="conv1d",
        same_dtype=True,
        family="linalg",
        arity=3,
        forward=_conv_fwd,
        vjp=_conv_vjp,
        jvp=_conv_jvp,
        torch=lambda x, w, b, **p: _conv_torch(x, w, b, **p),
        torch_name="torch.nn.functional.conv1d",
        shape_fn=_conv_shape,
        normalize=_conv_norm,
        batch_params=with_lead,
        param_strategy=_conv_params,
        saves=True,
        call=lambda input, weight, bias, stride=1, padding=0, dilation=1, groups=1: (
            (input, weight, bias), {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
        ),
        dispatch=_conv_dispatch,
        notes=_CONV_NOTES + "; gs.conv1d without a bias runs op 'conv1d_nobias'",
    )
)
register(
    OpSpec(
        name="conv1d_nobias",
        same_dtype=True,
        family="linalg",
        arity=2,
        forward=_conv_nobias_fwd,
        vjp=_conv_vjp,
        jvp=_conv_jvp,
        torch=lambda x, w, **p: _conv_torch(x, w, None, **p),
        torch_name="torch.nn.functional.conv1d (bias=None)",
        shape_fn=_conv_shape,
        normalize=_conv_norm,
        batch_params=with_lead,
        param_strategy=_conv_params,
        saves=True,
        call=lambda input, weight, stride=1, padding=0, dilation=1, groups=1: (
            (input, weight), {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
        ),
        notes=_CONV_NOTES,
    )
)
