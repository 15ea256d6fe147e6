"""Reductions with a statistics flavour: logsumexp, var / std, norm.

Split from :mod:`gradspec.ops.reduce` (its module docstring describes the canonical ``dim`` /
``keepdim`` / ``full`` params and why every VJP follows torch's own backward formula).

Example::

    >>> import numpy as np, gradspec as gs
    >>> round(float(gs.logsumexp(gs.tensor([0.0, 0.0]), dim=0).numpy()), 6)
    0.693147
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from .. import engine as E
from .._private.dims import norm_dims
from ..spec.opspec import OpSpec
from ..spec.registry import register
from ._common import broadcast, const, quiet, torch, where
from .reduce import (
    _REQUIRED,
    INF,
    _check_dim_type,
    _count,
    _dims_call,
    _gap,
    _keep,
    _keep_np,
    _norm_reduce,
    _reduced_last,
    _st,
    dim_params,
    partial_axes,
    reduced_shape,
)

__all__: list[str] = []

call = E.call


# ---------------------------------------------------------------------------------------
# logsumexp
# ---------------------------------------------------------------------------------------


def _logsumexp_fwd(x, dim, keepdim):
    # torch's max-shift: the shift is 0 where the max is +-inf, so all -inf -> -inf and +inf -> inf.
    m = np.max(x, axis=dim, keepdims=True, initial=-np.inf) if dim else np.asarray(x)
    m = np.where(np.isinf(m), 0.0, m).astype(x.dtype, copy=False)
    with quiet(divide="ignore", invalid="ignore", over="ignore"):
        r = np.log(np.sum(np.exp(x - m), axis=dim, keepdims=True)) + m
    if not keepdim and dim:
        r = np.squeeze(r, axis=dim)
    return r.astype(x.dtype, copy=False)


def _logsumexp_vjp(g, x, *, out, dim, keepdim):
    # torch's logsumexp_backward: grad * exp(self - result); differentiating through `out` again
    # gives torch's double backward.
    return (_keep(g, x, dim, keepdim) * (x - _keep(out, x, dim, keepdim)).exp(),)


def _logsumexp_jvp(tangents, x, *, out, dim, keepdim):
    # torch's logsumexp_jvp: sum(exp(x - amax) * t) / sum(exp(x - amax)); the shift is not masked
    # here, so all -inf / +inf give nan, and an empty reduction 0/0 = nan.
    (t,) = tangents
    with quiet(all="ignore"):
        e = np.exp(x - np.max(x, axis=dim, keepdims=True)) if x.size else np.exp(x)
        return np.sum(e * t, axis=dim, keepdims=keepdim) / np.sum(e, axis=dim, keepdims=keepdim)


def _logsumexp_torch(x, dim, keepdim):
    return torch().logsumexp(x, dim if x.ndim else 0, keepdim=keepdim)


def _logsumexp_params(shapes):
    st = _st()
    nd = len(shapes[0])
    if nd == 0:
        return st.fixed_dictionaries({"dim": st.sampled_from([0, -1]), "keepdim": st.booleans()})
    partial = partial_axes(shapes[0])  # as in dim_params: partial reductions over axes > 1, 2 draws in 4
    return st.fixed_dictionaries(
        {
            "dim": st.one_of(
                st.integers(-nd, nd - 1),
                st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True).map(tuple),
                *([partial, partial] if partial is not None else []),
            ),
            "keepdim": st.booleans(),
        }
    )


register(
    OpSpec(
        name="logsumexp",
        family="reduce",
        arity=1,
        forward=_logsumexp_fwd,
        vjp=_logsumexp_vjp,
        jvp=_logsumexp_jvp,
        torch=_logsumexp_torch,
        torch_name="torch.logsumexp",
        shape_fn=lambda s, dim, keepdim: reduced_shape(s, dim, keepdim),
        param_strategy=_logsumexp_params,
        normalize=_norm_reduce,
        saves=True,
        call=_dims_call("logsumexp", _REQUIRED),
        method=True,
        notes="stable (max-shifted) forward; -inf entries get gradient 0, all -inf -> forward -inf and "
        "gradient nan, a +inf entry -> forward inf, nan at that entry and 0 elsewhere (reference 9.11); "
        "an empty reduction gives -inf",
    )
)


# ---------------------------------------------------------------------------------------
# var, std
# ---------------------------------------------------------------------------------------


def _var_norm(shapes, dim=None, keepdim=False, correction=1, full=None):
    nd = len(shapes[0])
    if dim is not None:
        dims = norm_dims(dim, nd)  # validates even when the full path is taken
    if full is None:
        # torch takes the "no dim" branch of var_backward for dim=None and for 0-d inputs.
        # dim=() also reduces everything; torch's backward then uses n=1 (a torch quirk), gradspec
        # treats it as dim=None.
        full = dim is None or nd == 0 or (isinstance(dim, (tuple, list)) and len(dim) == 0)
    if full:
        dims = tuple(range(-nd, 0))
    if isinstance(correction, bool) or not isinstance(correction, numbers.Real):
        raise TypeError(f"var()/std(): correction must be a number, not {type(correction).__name__}")
    correction = int(correction) if float(correction).is_integer() else float(correction)
    return {"dim": dims, "keepdim": bool(keepdim), "correction": correction, "full": bool(full)}


def _var_call(fname):
    # torch: var(input, dim=None, *, correction=1, keepdim=False), var(input, dim, unbiased, keepdim=False),
    # var(input, unbiased)
    def call_(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
        if isinstance(dim, bool):
            dim, unbiased = None, dim
        _check_dim_type(fname, dim, allow_tuple=True)
        if unbiased is not None and correction is not None:
            raise TypeError(f"{fname}(): cannot specify both 'unbiased' and 'correction'")
        if correction is None:
            correction = 1 if unbiased is None or unbiased else 0
        return (input,), {"dim": dim, "keepdim": keepdim, "correction": correction}

    return call_


def _var_fwd(x, dim, keepdim, correction, full):
    n = _count(x.shape, dim)
    with quiet(invalid="ignore", divide="ignore"):
        mean = np.sum(x, axis=dim, keepdims=True) / n
        dev = x - mean
        # torch divides by max(0, n - correction): zero degrees of freedom give inf (or nan for 0/0).
        r = np.sum(dev * dev, axis=dim, keepdims=keepdim) / max(0, n - correction)
    return np.asarray(r, dtype=x.dtype)


def _two_over(dof):
    # C++ double division: 2/0 is +inf (torch's var_backward does it in SymFloat).
    return INF if dof == 0 else 2.0 / dof


def _var_vjp_core(g, x, dim, keepdim, correction, full):
    # torch's var_backward, branch for branch.
    if full:
        dof = x.data.size - correction
        if dof <= 0:
            # where(self == self.mean(), nan, inf): a constant, so this gradient has no x-dependence
            xm = np.mean(x.data) if x.data.size else np.nan
            return g * const(np.where(x.data == xm, np.nan, np.inf), g)
        return (_two_over(dof) * g) * (x - call("mean", x, dim=None))
    if not keepdim and x.ndim > 1:
        g = _keep(g, x, dim, keepdim)
    dof = _count(x.shape, dim) - correction
    return (_two_over(dof) * g) * (x - call("mean", x, dim=dim, keepdim=True))


def _var_vjp(g, x, *, out, dim, keepdim, correction, full):
    return (_var_vjp_core(g, x, dim, keepdim, correction, full),)


def _std_vjp(g, x, *, out, dim, keepdim, correction, full):
    # torch's std_backward: (grad / (result * 2)).masked_fill_(result == 0, 0), then var_backward.
    gv = where(out.data == 0, 0.0, g / (out * 2))
    return (_var_vjp_core(gv, x, dim, keepdim, correction, full),)


def _var_jvp_np(t, x, dim, keepdim, correction, full):
    n = _count(x.shape, dim)
    with quiet(all="ignore"):
        mean = np.sum(x, axis=dim, keepdims=True) / n if n else np.full(reduced_shape(x.shape, dim, True), np.nan)
        dof = n - correction
        if full and dof <= 0:
            w = np.where(x == mean, np.nan, np.inf)
        else:
            w = _two_over(dof) * (x - mean)
        return np.sum(t * w, axis=dim, keepdims=keepdim)


def _var_jvp(tangents, x, *, out, dim, keepdim, correction, full):
    return _var_jvp_np(tangents[0], x, dim, keepdim, correction, full)


def _std_jvp(tangents, x, *, out, dim, keepdim, correction, full):
    vt = _var_jvp_np(tangents[0], x, dim, keepdim, correction, full)
    with quiet(all="ignore"):
        return np.where(out == 0, 0.0, vt / (2 * out))


# torch's UserWarning at zero degrees of freedom (one element with correction=1): a point gradspec draws on purpose
# (torch's NaN there is the convention compared).  Its own twin's warning is no news to the user, so it is ignored
# around this call only, by its message: any other warning, and the same one from a user's code, stays visible.
_DOF_WARNING = r".*degrees of freedom is <= 0"


def _var_torch(name):
    def run(x, dim, keepdim, correction, full):
        fn = getattr(torch(), name)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_DOF_WARNING, category=UserWarning)
            if full:
                return fn(x, correction=correction, keepdim=keepdim)
            return fn(x, dim=dim, correction=correction, keepdim=keepdim)

    return run


def _var_params(shapes):
    return dim_params(shapes, extra={"correction": _st().sampled_from([0, 1])})


def _std_kink(x, dim, keepdim, correction, full):
    # sqrt at 0: a slice whose values are all equal (std = 0) with at least two of them.
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0 or _count(x.shape, dim) < 2:
        return INF
    flat = _reduced_last(x, dim)
    # (ufunc reductions, not .max/.min: FD's reach check calls this per case)
    return float(np.fmin.reduce((np.maximum.reduce(flat, axis=-1) - np.minimum.reduce(flat, axis=-1)) / 2, axis=None,
                                initial=INF))  # = nanmin


for _name in ("var", "std"):
    register(
        OpSpec(
            name=_name,
            family="reduce",
            arity=1,
            forward=_var_fwd if _name == "var" else (lambda x, **p: np.sqrt(_var_fwd(x, **p))),
            vjp=_var_vjp if _name == "var" else _std_vjp,
            jvp=_var_jvp if _name == "var" else _std_jvp,
            torch=_var_torch(_name),
            torch_name=f"torch.{_name}",
            shape_fn=lambda s, dim, keepdim, correction, full: reduced_shape(s, dim, keepdim),
            param_strategy=_var_params,
            normalize=_var_norm,
            saves=True,
            call=_var_call(_name),
            method=True,
            kink_distance=_std_kink if _name == "std" else None,
            # std_backward masks result == 0, a zero x - mean's exact cancellation makes (one element a slice):
            # rounding inside the forward moves it off zero and the mask with it (var's rule has no such mask)
            vjp_compares=_name == "std",
            notes="divides by max(0, N - correction); zero degrees of freedom (one element with correction=1) "
            "-> nan forward and nan gradient (reference 9.15); torch's var_backward branch for dim=None "
            "(gradient where(x == mean, nan, inf) * g when N <= correction) and for an explicit dim "
            "((2 / (N - correction)) * g * (x - mean)) are reproduced separately"
            + ("; std: gradient masked to 0 where std == 0 (torch's std_backward)" if _name == "std" else ""),
        )
    )


# ---------------------------------------------------------------------------------------
# norm (torch.norm / Tensor.norm with a numeric p, i.e. torch.linalg.vector_norm)
# ---------------------------------------------------------------------------------------


def _p_value(p, dim):
    if isinstance(p, str):
        if p == "fro":
            if isinstance(dim, (tuple, list)) and len(dim) > 2:
                raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, dim))}")
            return 2.0
        raise NotImplementedError(f"norm(p={p!r}): only vector norms (numeric p or 'fro') are supported")
    if p is None:
        return 2.0
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise TypeError(f"norm(): p must be a number or 'fro', not {type(p).__name__}")
    return float(p)


def _norm_norm(shapes, p="fro", dim=None, keepdim=False):
    return {"p": _p_value(p, dim), "dim": norm_dims(dim, len(shapes[0])), "keepdim": bool(keepdim)}


def _norm_fwd(x, p, dim, keepdim):
    a = np.abs(x)
    with quiet(all="ignore"):
        if p == 0:
            r = np.sum(a != 0, axis=dim, keepdims=keepdim)
        elif p == 1:
            r = np.sum(a, axis=dim, keepdims=keepdim)
        elif p == 2:
            r = np.sqrt(np.sum(a * a, axis=dim, keepdims=keepdim))
        elif math.isinf(p):
            if not all(x.shape[d] for d in dim):
                raise RuntimeError(
                    f"linalg.vector_norm cannot compute the {p:g} norm on an empty dimension because the "
                    "operation does not have an identity"
                )
            r = (np.max if p > 0 else np.min)(a, axis=dim, keepdims=keepdim)
        else:
            r = np.sum(a**p, axis=dim, keepdims=keepdim) ** (1.0 / p)
    return np.asarray(r, dtype=x.dtype)


def _norm_vjp(g, x, *, out, p, dim, keepdim):
    # torch's norm_backward, branch for branch (linalg_vector_norm_backward calls it).
    g = _keep(g, x, dim, keepdim)
    norm = _keep(out, x, dim, keepdim)
    if p == 0:
        return (None,)  # torch returns an undefined gradient: x gets no .grad at all
    if p == 2:
        # (self / norm).masked_fill_(norm == 0, 0): the zero vector gets 0, not nan (reference 9.10)
        return (g * where(broadcast(norm.data == 0, x.shape), 0.0, x / norm),)
    sgn = const(np.sign(x.data), x)
    if p == 1:
        return (sgn * g,)
    if math.isinf(p):
        # derivative of amax(|x|): ties split evenly, with sign (reference 9.10c)
        ax = np.abs(x.data)
        mask = (ax == norm.data) | np.isnan(ax)
        count = np.sum(mask, axis=dim, keepdims=True)
        return (sgn * ((g / const(count, g)) * const(mask, g)),)
    ax = call("abs", x)
    zero_norm = norm.data == 0
    if p < 1:
        scaled = sgn * where(x.data == 0, 0.0, call("pow_scalar", ax, exponent=p - 1))
        return (scaled * g * call("pow_scalar", norm, exponent=1 - p),)
    if p < 2:
        scaled = sgn * call("pow_scalar", ax, exponent=p - 1)
    else:
        scaled = x * call("pow_scalar", ax, exponent=p - 2)
    scale_v = where(zero_norm, 0.0, g / call("pow_scalar", norm, exponent=p - 1))
    return (scaled * scale_v,)


def _norm_jvp(tangents, x, *, out, p, dim, keepdim):
    # torch's norm_jvp, branch for branch.
    (t,) = tangents
    n = _keep_np(out, x, dim, keepdim)
    s = np.sign(x)
    with quiet(all="ignore"):
        if p == 0:
            return np.zeros((t.shape[0],) + np.shape(out), dtype=out.dtype)
        if p == 1:
            return np.sum(s * t, axis=dim, keepdims=keepdim)
        if p == 2:
            r = np.sum(x * t, axis=dim, keepdims=keepdim) / out
            return np.where(out == 0, 0.0, r)
        if math.isinf(p):
            mask = (np.abs(x) == n) | (np.isnan(x) & np.isnan(n))
            nb = np.sum(mask, axis=dim, keepdims=True)
            return np.sum(s * t * mask / nb, axis=dim, keepdims=keepdim)
        a = np.abs(x)
        if p < 1:
            sp = np.sum(np.where(x == 0, 0.0, a ** (p - 1)) * s * t, axis=dim, keepdims=keepdim)
            return sp * out ** (1 - p)
        if p < 2:
            sp = np.sum(a ** (p - 1) * s * t, axis=dim, keepdims=keepdim)
        else:
            sp = np.sum(a ** (p - 2) * x * t, axis=dim, keepdims=keepdim)
        return np.where(out == 0, 0.0, sp / out ** (p - 1))


def _norm_torch(x, p, dim, keepdim):
    return torch().linalg.vector_norm(x, ord=p, dim=dim if x.ndim else None, keepdim=keepdim)


def _norm_shape(s, p, dim, keepdim):
    if math.isinf(p) and not all(s[d] > 0 for d in dim):
        return None  # no identity for max/min of |x|: torch raises
    return reduced_shape(s, dim, keepdim)


_NORM_PS = [2.0, 1.0, 3.0, INF, 1.5, 0.5, -INF, 0.0]


def _norm_params(shapes):
    st = _st()
    s = tuple(shapes[0])
    base = dim_params(shapes, extra={"p": st.sampled_from(_NORM_PS)})
    return base.filter(lambda prm: _norm_shape(s, **_norm_norm((s,), **prm)) is not None)


def _norm_kink(x, p, dim, keepdim):
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return INF
    a = np.abs(x)
    flat = _reduced_last(a, dim) if dim else a[..., None]
    # (ufunc reductions, not np.min / .max and their Python wrappers: FD's reach check calls this per case)
    d = float(np.minimum.reduce(np.maximum.reduce(flat, axis=-1), axis=None))  # distance to a zero slice (the norm's singular point)
    if p <= 1 or (p < 2 and not float(p).is_integer()):
        d = min(d, float(np.minimum.reduce(a, axis=None)))  # |x|^p is not smooth at a zero entry
    if math.isinf(p):
        d = min(d, _gap(a, dim, largest=p > 0))  # ties of the max (min) |x|
    return d


def _norm_compares(params):
    """The inf-norms' VJP masks |x| == norm (amax's rule); every other p's is smooth arithmetic on out."""
    p = params.get("p")
    return isinstance(p, numbers.Real) and not isinstance(p, bool) and math.isinf(p)


def _norm_call(input, p="fro", dim=None, keepdim=False):
    _check_dim_type("norm", dim, allow_tuple=True)
    return (input,), {"p": p, "dim": dim, "keepdim": keepdim}


register(
    OpSpec(
        name="norm",
        family="reduce",
        arity=1,
        forward=_norm_fwd,
        vjp=_norm_vjp,
        jvp=_norm_jvp,
        torch=_norm_torch,
        torch_name="torch.norm",
        shape_fn=_norm_shape,
        param_strategy=_norm_params,
        normalize=_norm_norm,
        saves=True,
        call=_norm_call,
        method=True,
        kink_distance=_norm_kink,
        vjp_compares=_norm_compares,
        notes="vector p-norm (torch.linalg.vector_norm); p='fro' is 2.  At the zero vector the gradient is 0 "
        "(masked), not nan, for every p (reference 9.10, 9.10b); inf-norm ties split evenly, with sign "
        "(reference 9.10c); p=0 gives no gradient at all (torch returns an undefined gradient); double "
        "backward at a zero slice is nan for p=2 like torch's (the masked division still runs)",
    )
)
