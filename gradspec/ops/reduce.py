"""Reductions over ``dim`` (one dim, a tuple of dims, or all) with ``keepdim``.

Canonical params: ``dim`` is a sorted tuple of *negative* dims (all dims for a full
reduction, ``()`` for a 0-d input), so the same params work on arrays with extra leading
batch axes.  Where torch's backward formula depends on *how* the reduction was asked for
(``max(x)`` splits ties evenly but ``max(x, dim)`` sends everything to the returned index;
``var(x)`` and ``var(x, dim)`` treat zero degrees of freedom differently), a ``full`` flag
records whether ``dim`` was omitted.

Every VJP follows the structure of torch's own backward formula (``FunctionsManual.cpp``):
masks and tie counts are constants computed from the data (torch does the same), the rest
is engine ops, so double backward reproduces torch's values *and* its NaN patterns at
singular points (a zero norm, a zero standard deviation, zero degrees of freedom).
"""

from __future__ import annotations

import collections
import inspect
import math
import numbers

import numpy as np

from .. import engine as E
from .._private.dims import norm_dims
from ..spec.opspec import OpSpec
from ..spec.registry import register
from ._common import const, quiet, torch, where

__all__: list[str] = []

call = E.call
INF = math.inf


def _st():
    from hypothesis import strategies as st

    return st


# ---------------------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------------------


def partial_axes(shape):
    """Strategy for a tuple of axes that reduces some axes of size > 1 and keeps another (None where the
    shape has fewer than two): the reductions whose VJP bugs (a wrong count, a wrong axis) show, drawn
    beside the other choices rather than left to chance (tryout8 F4: 1 mean in 8 was one)."""
    big = [i for i, s in enumerate(shape) if s > 1]
    if len(big) < 2:
        return None
    return _st().lists(_st().sampled_from(big), min_size=1, max_size=len(big) - 1, unique=True).map(tuple)


def dim_params(shapes, *, extra=None):
    """Strategy for {dim, keepdim}: None (all), one dim, or a tuple of dims, positive or negative; on a
    shape with two axes > 1, in half the draws a partial reduction over them (``partial_axes``)."""
    st = _st()
    nd = len(shapes[0])
    choices = [st.none()]
    if nd:
        choices.append(st.integers(-nd, nd - 1))
        choices.append(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True).map(tuple))
    partial = partial_axes(shapes[0])
    if partial is not None:
        choices += [partial] * len(choices)
    base = {"dim": st.one_of(*choices), "keepdim": st.booleans()}
    base.update(extra or {})
    return st.fixed_dictionaries(base)


def one_dim_params(shapes, *, extra=None):
    """Strategy for ops whose torch signature takes one int dim or none (prod, max, min).

    torch rejects ``keepdim`` without ``dim`` for these, so keepdim is only drawn with a dim.
    """
    st = _st()
    nd = max(len(shapes[0]), 1)  # a 0-d tensor accepts dim 0 / -1
    with_dim = st.fixed_dictionaries({"dim": st.integers(-nd, nd - 1), "keepdim": st.booleans(), **(extra or {})})
    without = st.fixed_dictionaries({"dim": st.none(), "keepdim": st.just(False), **(extra or {})})
    return st.one_of(without, with_dim)


def _norm_reduce(shapes, dim=None, keepdim=False, **rest):
    return {"dim": norm_dims(dim, len(shapes[0])), "keepdim": bool(keepdim), **rest}


def reduced_shape(shape, dim, keepdim):
    nd = len(shape)
    pos = {d + nd for d in dim}
    if keepdim:
        return tuple(1 if i in pos else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in pos)


def _keep(g, x, dim, keepdim):
    """``g`` (the output's shape) with the reduced dims re-inserted as size 1 (torch's unsqueeze)."""
    if not keepdim and dim:
        return call("reshape", g, shape=reduced_shape(x.shape, dim, True))
    return g


def expand_back(g, x, dim, keepdim):
    """Undo a reduction's shape: re-insert reduced dims (size 1) and expand to x's shape."""
    return call("expand", _keep(g, x, dim, keepdim), size=x.shape)


def torch_reduce(fn):
    def run(x, dim, keepdim, **kw):
        if x.ndim == 0 or len(dim) == 0:
            return fn(x, **kw) if x.ndim == 0 else fn(x, dim=tuple(range(x.ndim)), keepdim=keepdim, **kw)
        return fn(x, dim=dim, keepdim=keepdim, **kw)

    return run


def _count(shape, dim) -> int:
    """Number of elements each output element reduces over."""
    return math.prod([shape[d] for d in dim]) if dim else 1  # (np.prod: ~6 us per call, and this runs in FD's kink checks)


def _keep_np(out, x, dim, keepdim):
    """``out`` reshaped so it broadcasts against ``x`` (works with extra leading axes on x)."""
    if keepdim or not dim:
        return out
    nd = x.ndim
    lead = np.ndim(out) - (nd - len(dim))
    shape = list(np.shape(out)[:lead])
    rest = iter(np.shape(out)[lead:])
    pos = {d + nd for d in dim}
    for i in range(lead, nd):
        shape.append(1 if i in pos else next(rest))
    return np.reshape(out, tuple(shape))


def _reduced_last(x, dim):
    """x with the reduced dims moved to the end and flattened into one axis (..., m)."""
    x = np.asarray(x)
    nd = x.ndim
    red = [d % nd for d in dim]
    # transpose, not np.moveaxis: this runs in every finite-difference reach check (hot path)
    moved = x.transpose([d for d in range(nd) if d not in red] + red)
    keep = moved.shape[: nd - len(red)]
    return moved.reshape(keep + (_count(x.shape, dim),))  # explicit size: -1 is ambiguous when empty


def _gap(x, dim, *, largest=True):
    """Smallest gap, over the output elements, between the top two (or bottom two) candidates."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0 or not dim:
        return INF
    flat = _reduced_last(x, dim)
    if flat.shape[-1] < 2:
        return INF
    if flat.ndim == 1 and flat.size <= 16:  # one slice of a few values (FD's reach check runs this per case)
        v = flat.tolist()
        # Python's sort where it orders as np.sort does: all values finite (no NaN) and none zero (-0.0 and
        # 0.0 compare equal, and which comes first would show in the sign of a zero gap)
        if math.isfinite(sum(v)) and 0.0 not in v:
            v.sort()
            return v[-1] - v[-2] if largest else v[1] - v[0]
    s = np.sort(flat, axis=-1)
    gap = s[..., -1] - s[..., -2] if largest else s[..., 1] - s[..., 0]
    return float(np.fmin.reduce(gap, axis=None, initial=INF))  # nanmin without its ~7 us of Python


def _require_identity(fname, x, dim):
    """max/min/amax/amin have no identity: torch refuses to reduce over a size-0 dim."""
    if x.size and all(x.shape[d] for d in dim):
        return
    if len(dim) == x.ndim and x.size == 0:
        raise RuntimeError(
            f"{fname}(): Expected reduction dim to be specified for input.numel() == 0. "
            "Specify the reduction dim with the 'dim' argument."
        )
    for d in dim:
        if x.shape[d] == 0:
            raise IndexError(f"{fname}(): Expected reduction dim {d + x.ndim} to have non-zero size.")


def _reduce_shape_fn(*, need_nonempty=False):
    def shape_fn(s, dim, keepdim, **_):
        if need_nonempty and not all(s[d] > 0 for d in dim):
            return None
        return reduced_shape(s, dim, keepdim)

    return shape_fn


def _filter_nonempty(strategy, shapes, norm):
    """Drop drawn dims that reduce over a size-0 dim (no identity: max/amax/inf-norm raise)."""
    s = tuple(shapes[0])
    if all(v > 0 for v in s):
        return strategy
    return strategy.filter(lambda p: all(s[d] > 0 for d in norm((s,), **p)["dim"]))


_REQUIRED = object()


def _dims_call(fname, default):
    """Public signature ``fname(input, dim=default, keepdim=False)``; ``dim`` is required if
    ``default`` is ``_REQUIRED`` (torch.logsumexp)."""

    def call_(input, dim=default, keepdim=False):
        if dim is _REQUIRED:
            raise TypeError(f'{fname}() missing 1 required positional arguments: "dim"')
        _check_dim_type(fname, dim, allow_tuple=True)
        return (input,), {"dim": dim, "keepdim": keepdim}

    P = inspect.Parameter
    call_.__signature__ = inspect.Signature(
        [
            P("input", P.POSITIONAL_OR_KEYWORD),
            P("dim", P.POSITIONAL_OR_KEYWORD, **({} if default is _REQUIRED else {"default": default})),
            P("keepdim", P.POSITIONAL_OR_KEYWORD, default=False),
        ]
    )
    return call_


def _check_keepdim_needs_dim(fname, dim, keepdim):
    # torch.prod/max/min have no (input, keepdim) overload
    if dim is None and keepdim:
        raise TypeError(f"{fname}(): argument 'dim' must be int, not NoneType")


def _check_dim_type(fname, dim, *, allow_tuple):
    if dim is None or isinstance(dim, (numbers.Integral,)) and not isinstance(dim, bool):
        return
    if (
        allow_tuple
        and isinstance(dim, (tuple, list))
        and all(isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in dim)
    ):
        return
    raise TypeError(f"{fname}(): argument 'dim' must be int, not {type(dim).__name__}")


# ---------------------------------------------------------------------------------------
# sum, mean
# ---------------------------------------------------------------------------------------


def _sum_call(input, dim=None, keepdim=False):
    return (input,), {"dim": dim, "keepdim": keepdim}


register(
    OpSpec(
        name="sum",
        family="reduce",
        arity=1,
        forward=lambda x, dim, keepdim: np.sum(x, axis=dim, keepdims=keepdim),
        vjp=lambda g, x, *, out, dim, keepdim: (expand_back(g, x, dim, keepdim),),
        linear=True,
        torch=torch_reduce(lambda x, **kw: torch().sum(x, **kw)),
        torch_name="torch.sum",
        shape_fn=lambda s, dim, keepdim: reduced_shape(s, dim, keepdim),
        param_strategy=dim_params,
        normalize=_norm_reduce,
        saves=False,
        call=_sum_call,
        method=True,
        notes="saves nothing: repeated backward works without retain_graph (reference 5.2)",
    )
)


def _mean_fwd(x, dim, keepdim):
    if not np.issubdtype(x.dtype, np.inexact):
        raise RuntimeError(
            "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. "
            f"Got: {x.dtype}"
        )
    n = _count(x.shape, dim)
    # sum / n rather than np.mean: an empty reduction gives 0/0 = nan like torch, without numpy's warning.
    with quiet(invalid="ignore", divide="ignore"):
        return np.asarray(np.sum(x, axis=dim, keepdims=keepdim) / n, dtype=x.dtype)


def _mean_vjp(g, x, *, out, dim, keepdim):
    # torch's mean_backward: sum_backward(grad) / n (n = 0 only for an empty input, whose gradient is empty)
    n = _count(x.shape, dim)
    return (expand_back(g, x, dim, keepdim) / max(n, 1),)


register(
    OpSpec(
        name="mean",
        family="reduce",
        arity=1,
        forward=_mean_fwd,
        vjp=_mean_vjp,
        linear=True,
        torch=torch_reduce(lambda x, **kw: torch().mean(x, **kw)),
        torch_name="torch.mean",
        shape_fn=lambda s, dim, keepdim: reduced_shape(s, dim, keepdim),
        param_strategy=dim_params,
        normalize=_norm_reduce,
        saves=False,
        call=_sum_call,
        method=True,
        notes="gradient g/N to every element (reference 9.17); an empty reduction gives nan; saves nothing "
        "(reference 5.2)",
    )
)


# ---------------------------------------------------------------------------------------
# prod (+ the internal op _prod_others it differentiates through)
# ---------------------------------------------------------------------------------------


def _prod_others_fwd(x, dim):
    """Along ``dim``: each element replaced by the product of the *other* elements (no division).

    Exclusive prefix products times exclusive suffix products, as in torch's
    prod_safe_zeros_backward: exact with zeros.
    """
    n = x.shape[dim]
    if n == 0:
        return np.array(x, copy=True)
    ones = np.ones_like(np.take(x, [0], axis=dim))
    left = np.cumprod(np.concatenate([ones, np.take(x, np.arange(n - 1), axis=dim)], axis=dim), axis=dim)
    rev = np.flip(np.take(x, np.arange(1, n), axis=dim), axis=dim)
    right = np.flip(np.cumprod(np.concatenate([ones, rev], axis=dim), axis=dim), axis=dim)
    return left * right


def _prod_others_vjp(g, x, *, out, dim):
    # d others_i / d x_j = prod_{k != i, j} x_k (j != i), 0 (j == i).  Row j of A is x with x_j
    # replaced by 1, so _prod_others(A)[j, i] is that product: the rule is the same op one
    # dimension up (O(n^2) memory, like torch's own double backward of cumprod) and stays exact
    # with zeros at every order.
    n = x.shape[dim]
    if x.data.size == 0:
        return (g,)
    p = x.ndim + dim
    ins = x.shape[:p] + (1,) + x.shape[p:]
    big = x.shape[:p] + (n,) + x.shape[p:]
    eye = np.eye(n, dtype=bool).reshape((n, n) + (1,) * (-dim - 1))
    a = where(eye, 1.0, call("expand", call("reshape", x, shape=ins), size=big))
    others = call("_prod_others", a, dim=dim)
    gi = call("reshape", g, shape=ins)
    return (call("sum", where(eye, 0.0, gi * others), dim=dim),)


def _prod_others_torch(x, dim):
    t = torch()
    n = x.shape[dim]
    if n == 0:
        return x.clone()
    ones = t.ones_like(x.narrow(dim, 0, 1))
    left = t.cat([ones, x.narrow(dim, 0, n - 1)], dim).cumprod(dim)
    right = t.cat([ones, x.narrow(dim, 1, n - 1).flip(dim)], dim).cumprod(dim).flip(dim)
    return left * right


register(
    OpSpec(
        name="_prod_others",
        family="internal",
        arity=1,
        forward=_prod_others_fwd,
        vjp=_prod_others_vjp,
        torch=_prod_others_torch,
        shape_fn=lambda s, dim: tuple(s),
        saves=True,
        notes="product of the other elements along dim, without dividing (exact with zeros)",
    )
)


def _prod_norm(shapes, dim=None, keepdim=False):
    nd = len(shapes[0])
    dims = norm_dims(dim, nd)
    if len(dims) > 1 and len(dims) != nd:
        raise TypeError("prod(): argument 'dim' must be int, not tuple")
    return {"dim": dims, "keepdim": bool(keepdim)}


def _prod_call(input, dim=None, keepdim=False):
    _check_dim_type("prod", dim, allow_tuple=False)
    _check_keepdim_needs_dim("prod", dim, keepdim)
    return (input,), {"dim": dim, "keepdim": keepdim}


def _prod_vjp(g, x, *, out, dim, keepdim):
    if x.ndim == 0:
        return (g,)  # torch's prod_backward: a 0-d input passes the gradient through
    if len(dim) == 1:
        others = call("_prod_others", x, dim=dim[0])
    else:  # all dims: torch flattens (prod_backward's view(-1))
        flat = call("reshape", x, shape=(int(x.data.size),))
        others = call("reshape", call("_prod_others", flat, dim=-1), shape=x.shape)
    return (_keep(g, x, dim, keepdim) * others,)


def _others_np(x, dim):
    """Products of the others over the reduced dims, by brute force (independent of the VJP)."""
    flat = _reduced_last(x, dim)
    m = flat.shape[-1]
    rep = np.array(np.broadcast_to(flat[..., None, :], flat.shape + (m,)))
    idx = np.arange(m)
    rep[..., idx, idx] = 1
    others = rep.prod(axis=-1)
    nd = x.ndim
    axes = [d + nd for d in dim]
    moved_shape = tuple(s for i, s in enumerate(x.shape) if i not in axes) + tuple(x.shape[a] for a in axes)
    return np.moveaxis(others.reshape(moved_shape), list(range(nd - len(axes), nd)), axes)


def _prod_jvp(tangents, x, *, out, dim, keepdim):
    (t,) = tangents
    if x.ndim == 0:
        return t * np.ones_like(x)
    return np.sum(t * _others_np(x, dim), axis=dim, keepdims=keepdim)


def _prod_torch(x, dim, keepdim):
    t = torch()
    if x.ndim == 0:
        return t.prod(x)
    if len(dim) == 1:
        return t.prod(x, dim[0], keepdim=keepdim)
    r = t.prod(x)
    return r.reshape((1,) * x.ndim) if keepdim else r


register(
    OpSpec(
        name="prod",
        family="reduce",
        arity=1,
        forward=lambda x, dim, keepdim: np.prod(x, axis=dim, keepdims=keepdim),
        vjp=_prod_vjp,
        jvp=_prod_jvp,
        torch=_prod_torch,
        torch_name="torch.prod",
        shape_fn=lambda s, dim, keepdim: reduced_shape(s, dim, keepdim),
        param_strategy=one_dim_params,
        normalize=_prod_norm,
        saves=True,
        call=_prod_call,
        method=True,
        notes="exact with zeros, no 0/0: one zero -> only that position gets the product of the others, two "
        "or more zeros -> all 0 (reference 9.9, 9.9b); dim is one int or None (all) as in torch; the VJP "
        "multiplies by products of the others (prefix/suffix products, torch's prod_safe_zeros_backward), "
        "never divides by x",
    )
)


# ---------------------------------------------------------------------------------------
# amax, amin (ties split evenly, with or without dim)
# ---------------------------------------------------------------------------------------


def _aminmax_vjp(g, x, *, out, dim, keepdim):
    # torch's scale_grad_by_count: (grad / mask.sum(dim, keepdim=True)) * mask, mask = (x == result).
    mask = x.data == _keep_np(out.data, x.data, dim, keepdim)
    count = np.sum(mask, axis=dim, keepdims=True)
    return ((_keep(g, x, dim, keepdim) / const(count, g)) * const(mask, g),)


def _aminmax_jvp(tangents, x, *, out, dim, keepdim):
    (t,) = tangents
    mask = x == _keep_np(out, x, dim, keepdim)
    with quiet(all="ignore"):
        return np.sum(np.where(mask, t, 0.0), axis=dim, keepdims=keepdim) / np.sum(mask, axis=dim, keepdims=keepdim)


def _amax_torch(fn):
    def run(x, dim, keepdim):
        return fn(x, dim=dim if x.ndim else (), keepdim=keepdim)

    return run


def _aminmax_params(shapes):
    return _filter_nonempty(dim_params(shapes), shapes, _norm_reduce)


for _name, _fn, _largest in (("amax", np.max, True), ("amin", np.min, False)):
    register(
        OpSpec(
            name=_name,
            family="reduce",
            arity=1,
            forward=lambda x, dim, keepdim, _fn=_fn, _n=_name: (
                _require_identity(_n, x, dim) or _fn(x, axis=dim, keepdims=keepdim)
            ),
            vjp=_aminmax_vjp,
            jvp=_aminmax_jvp,
            torch=_amax_torch(lambda x, _n=_name, **kw: getattr(torch(), _n)(x, **kw)),
            torch_name=f"torch.{_name}",
            shape_fn=_reduce_shape_fn(need_nonempty=True),
            param_strategy=_aminmax_params,
            normalize=_norm_reduce,
            saves=True,
            call=_dims_call(_name, ()),
            method=True,
            kink_distance=lambda x, dim, keepdim, _l=_largest: _gap(x, dim, largest=_l),
            vjp_compares=True,  # mask x == out
            notes="ties split evenly among the tied elements, for the full reduction and with dim "
            "(reference 9.1, 9.2b, 9.4c); a reduction over a size-0 dim raises",
        )
    )


# ---------------------------------------------------------------------------------------
# max, min: full reduction (ties split evenly) or along one dim (all to the returned index)
# ---------------------------------------------------------------------------------------

_MaxResult = collections.namedtuple("max", ["values", "indices"])
_MinResult = collections.namedtuple("min", ["values", "indices"])


def _maxmin_norm(shapes, dim=None, keepdim=False, full=None):
    nd = len(shapes[0])
    if full is None:
        full = dim is None
    if full:
        dims = tuple(range(-nd, 0))
    else:
        dims = norm_dims(dim, nd)
        if len(dims) > 1:
            raise TypeError("max()/min(): argument 'dim' must be int, not tuple")
    return {"dim": dims, "keepdim": bool(keepdim), "full": bool(full)}


def _arg(x, dim, largest):
    """torch's returned index along dim[0]: the first occurrence (the first NaN if any)."""
    return (np.argmax if largest else np.argmin)(x, axis=dim[0], keepdims=True)


def _maxmin_vjp(largest):
    def vjp(g, x, *, out, dim, keepdim, full):
        if full:
            # torch's evenly_distribute_backward: zeros with grad / count put at the maxima (the
            # NaNs if the result is NaN); elsewhere exactly 0, whatever the seed.
            value = out.data.reshape(())
            mask = np.isnan(x.data) if np.isnan(value) else x.data == value
            return (where(mask, g / int(mask.sum()), 0.0),)
        if not dim:  # 0-d input: the gradient passes through (value_selecting_reduction_backward)
            return (g,)
        d = dim[0]
        n = x.shape[d]
        onehot = np.arange(n).reshape((n,) + (1,) * (-d - 1)) == _arg(x.data, dim, largest)
        return (where(onehot, _keep(g, x, dim, keepdim), 0.0),)

    return vjp


def _maxmin_jvp(largest):
    def jvp(tangents, x, *, out, dim, keepdim, full):
        (t,) = tangents
        if full:
            # torch's evenly_read_jvp: sum(mask * (t / count)) with mask = (x == value), no NaN
            # special case (unlike the backward), so a NaN maximum gives t / 0 * 0 = nan.
            mask = x == np.reshape(out, ())
            with quiet(all="ignore"):
                r = np.sum(mask * (t / mask.sum()), axis=dim)
            return np.reshape(r, (t.shape[0],) + np.shape(out))
        if not dim:
            return t * np.ones_like(x)
        idx = _arg(x, dim, largest)
        picked = np.take_along_axis(t, idx[None], axis=dim[0])
        return picked if keepdim else np.squeeze(picked, axis=dim[0])

    return jvp


def _maxmin_torch(name):
    def run(x, dim, keepdim, full):
        fn = getattr(torch(), name)
        if full:
            r = fn(x)
            return r.reshape((1,) * x.ndim) if keepdim else r
        return fn(x, dim[0] if dim else 0, keepdim=keepdim).values

    return run


def _maxmin_call(name):
    def call_(input, dim=None, keepdim=False):
        _check_dim_type(name, dim, allow_tuple=False)
        _check_keepdim_needs_dim(name, dim, keepdim)
        return (input,), {"dim": dim, "keepdim": keepdim}

    return call_


def _maxmin_dispatch(name, elementwise):
    # torch.max(input) / torch.max(input, dim, keepdim=False) / torch.max(input, other)
    def dispatch(input, dim=None, keepdim=False, *, other=None):
        if other is not None or isinstance(dim, (E.Tensor, np.ndarray)):
            return elementwise, (input, other if other is not None else dim), {}
        _check_dim_type(name, dim, allow_tuple=False)
        _check_keepdim_needs_dim(name, dim, keepdim)
        return name, (input,), {"dim": dim, "keepdim": keepdim}

    return dispatch


def _maxmin_post(name, largest, result_type):
    def post(out, inputs, params):
        if params.get("dim") is None or params.get("full"):
            return out
        x = inputs[0]
        data = x.data if isinstance(x, E.Tensor) else np.asarray(x)
        dims = norm_dims(params["dim"], data.ndim)
        if not dims:
            idx = np.zeros((), dtype=np.int64)
        else:
            idx = _arg(data, dims, largest).astype(np.int64)
            if not params.get("keepdim", False):
                idx = np.squeeze(idx, axis=dims[0])
        return result_type(out, E.Tensor(np.asarray(idx)))

    return post


def _maxmin_params(shapes):
    return _filter_nonempty(one_dim_params(shapes), shapes, _maxmin_norm)


def _maxmin_shape(s, dim, keepdim, full):
    if not all(s[d] > 0 for d in dim):
        return None  # torch raises: no identity for max/min (a full reduction of an empty tensor too)
    return reduced_shape(s, dim, keepdim)


for _name, _fn, _largest, _elem, _rt in (
    ("max", np.max, True, "maximum", _MaxResult),
    ("min", np.min, False, "minimum", _MinResult),
):
    register(
        OpSpec(
            name=_name,
            family="reduce",
            arity=1,
            forward=lambda x, dim, keepdim, full, _fn=_fn, _n=_name: (
                _require_identity(_n, x, dim) or _fn(x, axis=dim, keepdims=keepdim)
            ),
            vjp=_maxmin_vjp(_largest),
            jvp=_maxmin_jvp(_largest),
            torch=_maxmin_torch(_name),
            torch_name=f"torch.{_name}",
            shape_fn=_maxmin_shape,
            param_strategy=_maxmin_params,
            normalize=_maxmin_norm,
            saves=True,
            call=_maxmin_call(_name),
            dispatch=_maxmin_dispatch(_name, _elem),
            post=_maxmin_post(_name, _largest, _rt),
            method=True,
            kink_distance=lambda x, dim, keepdim, full, _l=_largest: _gap(x, dim, largest=_l),
            vjp_compares=True,  # mask x == out (full), argmax / argmin of x (with dim)
            notes=f"{_name}(x): ties split evenly (reference 9.1, 9.4); {_name}(x, dim) returns (values, "
            "indices) and ALL the gradient goes to the returned index, the first occurrence (reference 9.2, "
            f"9.4); in graphs the op is the values only; {_name}(x, other) is {_elem}",
        )
    )
