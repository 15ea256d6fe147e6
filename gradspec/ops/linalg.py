"""Linear algebra and neural-network ops: matmul, mm, linear, softmax, losses, conv1d.

Every contraction here is an einsum in disguise, so the VJP rules are built from one
internal differentiable op, ``_linalg_einsum``: the gradient of an einsum with respect to
one operand is another einsum (the seed contracted with the other operands), which is again
differentiable, so ``create_graph=True`` double backward needs nothing else.  ``conv1d`` is
an einsum over the sliding windows of its input: ``_linalg_unfold`` (im2col) and its adjoint
``_linalg_fold`` (scatter-add) are linear internal ops, each the other's VJP.

Batching: these ops are not elementwise, so "extra leading batch axes" cannot simply be
aligned by rank (a 1-D matmul operand would turn into a matrix).  Their forwards take a
private ``_lead`` (number of leading batch axes, set by ``batch_params``) and align the
operands *after* those axes themselves.  The JVP rules use the same mechanism with the
direction axis as the one leading axis: a multilinear op's JVP is the sum, over inputs, of
the forward with that input replaced by its tangent.

Example::

    >>> import numpy as np, gradspec as gs
    >>> a = gs.tensor(np.ones((2, 3)), requires_grad=True)
    >>> (a @ gs.tensor(np.ones(3))).shape
    (2,)
    >>> gs.softmax(gs.tensor([0.0, 0.0]), dim=0).numpy()
    array([0.5, 0.5])
"""

from __future__ import annotations

import functools
import warnings

import numpy as np

from .. import engine as E
from .._private.dims import norm_dim
from ..spec.opspec import OpSpec
from ..spec.registry import register
from ._common import F, torch, with_lead

__all__: list[str] = []

call = E.call
REDUCTIONS = ("none", "mean", "sum")


def _st():
    from hypothesis import strategies as st

    return st


def _no_params(shapes):
    return _st().just({})


def _insert_ones(a, lead, k):
    """Insert ``k`` size-1 axes right after the ``lead`` batch axes of ``a``."""
    if k <= 0:
        return a
    return a.reshape(a.shape[:lead] + (1,) * k + a.shape[lead:])


def _align_to(a, lead, ndim):
    """Give ``a`` (with ``lead`` batch axes) rank ``ndim`` by inserting size-1 axes after the batch axes."""
    return _insert_ones(a, lead, ndim - a.ndim)


def _multilinear_jvp(forward, tangents, inputs, out, **params):
    """JVP of an op that is linear in each input separately: sum over inputs of the forward
    with that input replaced by its tangent (direction axis = the one leading batch axis)."""
    n = max(t.shape[0] for t in tangents if t is not None)
    acc = np.zeros((n,) + np.shape(out), dtype=_float_dtype(out))
    for k, t in enumerate(tangents):
        if t is None:
            continue
        args = [np.asarray(x)[None] for x in inputs]
        args[k] = t
        acc = acc + forward(*args, _lead=1, **params)
    return acc


def _float_dtype(a):
    dt = np.result_type(a)
    return dt if np.issubdtype(dt, np.floating) else np.dtype(np.float64)


# ---------------------------------------------------------------------------------------
# _linalg_einsum: the differentiable contraction every VJP rule below is written with
# ---------------------------------------------------------------------------------------


def _letters(term: str) -> str:
    return term.replace("...", "")


def _parse(subscripts: str, nops: int | None = None) -> tuple[tuple[str, ...], str]:
    """Split and validate einsum subscripts; implicit output as numpy/torch define it."""
    return _parse_str(str(subscripts), nops)


# Cached: every matmul, conv and contraction (and each of their VJP terms) parses its subscripts
# on every call, from a small set of strings.
@functools.lru_cache(maxsize=4096)
def _parse_str(subscripts: str, nops: int | None) -> tuple[tuple[str, ...], str]:
    s = subscripts.replace(" ", "")
    lhs, arrow, rhs = s.partition("->")
    ins = lhs.split(",")
    for term in ins + ([rhs] if arrow else []):
        body = _letters(term)
        if "..." in term and (not term.startswith("...") or term.count("...") > 1):
            raise ValueError(f"einsum(): '...' is supported only at the start of a term, got {term!r}")
        if not (body.isalpha() or body == "") or not body.isascii():
            raise ValueError(f"einsum(): invalid subscript term {term!r}")
        if len(set(body)) != len(body):
            # A repeated letter is a diagonal/trace; its adjoint writes into a diagonal,
            # which the einsum-only VJP rules here do not express.
            raise ValueError(f"einsum(): repeated subscript in one term ({term!r}) is not supported")
    if not arrow:
        counts = {}
        for term in ins:
            for c in _letters(term):
                counts[c] = counts.get(c, 0) + 1
        ell = "..." if any(t.startswith("...") for t in ins) else ""
        rhs = ell + "".join(sorted(c for c, k in counts.items() if k == 1))
    known = set("".join(_letters(t) for t in ins))
    if not set(_letters(rhs)) <= known:
        raise ValueError(f"einsum(): output subscript {rhs!r} has letters that appear in no input")
    if rhs.startswith("...") and not any(t.startswith("...") for t in ins):
        rhs = _letters(rhs)  # an ellipsis that no operand supplies is empty
    if nops is not None and nops != len(ins):
        raise ValueError(f"einsum(): the subscripts name {len(ins)} operand(s) but {nops} were given")
    return tuple(ins), rhs


def _einsum_fwd(*arrays, subscripts, _lead=0):
    ins, out = _parse(subscripts)
    has_ell = any(t.startswith("...") for t in ins)
    if not has_ell and not _lead:
        return np.asarray(np.einsum(subscripts, *arrays))
    # Every operand's own ellipsis is right-aligned after the batch axes (numpy would align
    # it with the batch axes otherwise); an operand without '...' gets an empty one.
    own = [a.ndim - _lead - len(_letters(t)) for a, t in zip(arrays, ins)]
    if any(k < 0 or (k > 0 and not t.startswith("...")) for k, t in zip(own, ins)):
        raise ValueError(f"einsum(): operand ranks {[a.ndim - _lead for a in arrays]} do not match {subscripts!r}")
    e = max(own, default=0)
    ops = [_insert_ones(a, _lead, e - k) for a, k in zip(arrays, own)]
    subs = ",".join("..." + _letters(t) for t in ins) + "->..." + _letters(out)
    r = np.asarray(np.einsum(subs, *ops))
    if e and not out.startswith("..."):
        r = r.sum(axis=tuple(range(_lead, _lead + e)))  # torch sums the broadcast ellipsis
    return r


def _einsum_shape(*shapes, subscripts):
    ins, out = _parse(subscripts, len(shapes))
    sizes: dict[str, int] = {}
    ells = []
    for s, t in zip(shapes, ins):
        body = _letters(t)
        k = len(s) - len(body)
        if k < 0 or (k and not t.startswith("...")):
            return None
        ells.append(tuple(s[:k]))
        for c, n in zip(body, s[k:]):
            if sizes.setdefault(c, n) != n:
                return None
    ell = np.broadcast_shapes(*ells) if ells else ()
    return (tuple(ell) if out.startswith("...") else ()) + tuple(sizes[c] for c in _letters(out))


def _einsum_vjp_terms(g, inputs, ins, out):
    """Gradient of ``einsum(ins -> out)`` with respect to each input, as einsums again.

    d/d(operand k) = einsum(seed, other operands -> operand k's subscripts).  Letters only
    operand k has (summed away in the forward) come back as broadcast axes; ellipsis axes
    the other operands lack are expanded; ellipsis axes the operand broadcast over are left
    for the engine to sum down.
    """
    grads = []
    for k, x in enumerate(inputs):
        if not x.requires_grad:
            grads.append(None)
            continue
        others = [(t, v) for j, (t, v) in enumerate(zip(ins, inputs)) if j != k]
        srcs = [out] + [t for t, _ in others]
        avail = set("".join(_letters(t) for t in srcs))
        own = _letters(ins[k])
        keep = [c for c in own if c in avail]
        ell = "..." if ins[k].startswith("...") and any(t.startswith("...") for t in srcs) else ""
        r = call("_linalg_einsum", g, *[v for _, v in others], subscripts=",".join(srcs) + "->" + ell + "".join(keep))
        if len(keep) != len(own):
            nell = r.ndim - len(keep)
            shape = tuple(r.shape[:nell]) + tuple(r.shape[nell + keep.index(c)] if c in keep else 1 for c in own)
            r = call("reshape", r, shape=shape)
        target = tuple(np.broadcast_shapes(r.shape, x.shape))
        if target != tuple(r.shape):
            r = call("expand", r, size=target)
        grads.append(r)
    return grads


def _einsum_norm(shapes, subscripts):
    ins, out = _parse(subscripts, len(shapes))
    canon = ",".join(ins) + "->" + out
    try:
        shape = _einsum_shape(*shapes, subscripts=canon)
    except ValueError:
        shape = None
    if shape is None:
        raise RuntimeError(f"einsum(): operands of shapes {[list(s) for s in shapes]} do not match {canon!r}")
    return {"subscripts": canon}


register(
    OpSpec(
        name="_linalg_einsum",
        family="internal",
        arity=None,
        forward=_einsum_fwd,
        vjp=lambda g, *xs, out, subscripts: _einsum_vjp_terms(g, xs, *_parse(subscripts)),
        jvp=lambda tangents, *xs, out, subscripts: _multilinear_jvp(
            _einsum_fwd, tangents, xs, out, subscripts=subscripts
        ),
        torch=lambda *xs, subscripts: torch().einsum(subscripts, *xs),
        torch_name="torch.einsum",
        shape_fn=_einsum_shape,
        normalize=_einsum_norm,
        batch_params=with_lead,
        param_strategy=None,
        saves=True,
        notes="einsum without repeated letters in a term; '...' only at the start of a term; an output "
        "without '...' sums the broadcast ellipsis axes (as torch.einsum does)",
    )
)


# ---------------------------------------------------------------------------------------
# matmul / mm
# ---------------------------------------------------------------------------------------


def _matmul_fwd(a, b, _lead=0):
    na, nb = a.ndim - _lead, b.ndim - _lead
    # 1-D operands become a row / a column and the size-1 axis is dropped again afterwards.
    if na == 1:
        a = a[..., None, :]
    if nb == 1:
        b = b[..., None]
    ra, rb = max(na, 2), max(nb, 2)
    r = max(ra, rb)
    out = np.matmul(_insert_ones(a, _lead, r - ra), _insert_ones(b, _lead, r - rb))
    if na == 1 and nb == 1:
        return out[..., 0, 0]
    if na == 1:
        return out[..., 0, :]
    if nb == 1:
        return out[..., 0]
    return out


def _matmul_subscripts(na: int, nb: int) -> tuple[list[str], str]:
    a = "...mn" if na >= 2 else "...n"
    b = "...np" if nb >= 2 else "...n"
    out = "..." + ("m" if na >= 2 else "") + ("p" if nb >= 2 else "")
    return [a, b], out


def _matmul_vjp(g, a, b, *, out, **_):
    ins, o = _matmul_subscripts(a.ndim, b.ndim)
    return tuple(_einsum_vjp_terms(g, (a, b), ins, o))


def _mat_str(s):
    return "x".join(str(v) for v in s)


def _matmul_shape(sa, sb):
    if len(sa) == 0 or len(sb) == 0:
        return None
    n_a = sa[-1]
    n_b = sb[-2] if len(sb) >= 2 else sb[0]
    if n_a != n_b:
        return None
    try:
        batch = tuple(np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2])))
    except ValueError:
        return None
    return batch + tuple(sa[-2:-1] if len(sa) >= 2 else ()) + tuple(sb[-1:] if len(sb) >= 2 else ())


def _matmul_norm(shapes):
    sa, sb = (tuple(s) for s in shapes)
    if len(sa) == 0 or len(sb) == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {len(sa)}D and {len(sb)}D")
    if _matmul_shape(sa, sb) is None:
        if len(sa) == 1 and len(sb) == 1:
            raise RuntimeError(
                f"inconsistent tensor size, expected tensor [{sa[0]}] and src [{sb[0]}] to have the same number of "
                f"elements, but got {sa[0]} and {sb[0]} elements respectively"
            )
        n_b = sb[-2] if len(sb) >= 2 else sb[0]
        if sa[-1] != n_b:
            # torch folds the batch dims into mm / mv / bmm; its message names the folded shapes.
            rows = int(np.prod(sa[:-1]))
            if len(sb) == 1:
                raise RuntimeError(f"size mismatch, got input ({rows}), mat ({rows}x{sa[-1]}), vec ({sb[0]})")
            if len(sb) == 2:
                raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{sa[-1]} and {_mat_str(sb)})")
            try:
                nb = int(np.prod(np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))))
            except ValueError:
                nb = int(np.prod(sb[:-2]))
            raise RuntimeError(
                f"Expected size for first two dimensions of batch2 tensor to be: [{nb}, {sa[-1]}] but got: "
                f"[{nb}, {sb[-2]}]."
            )
        raise RuntimeError(
            f"The size of tensor a must match the size of tensor b: batch dimensions {list(sa[:-2])} and "
            f"{list(sb[:-2])} do not broadcast"
        )
    return {}


def _matmul_params(shapes):
    return _st().just({})


register(
    OpSpec(
        name="matmul",
        family="linalg",
        arity=2,
        forward=_matmul_fwd,
        vjp=_matmul_vjp,
        jvp=lambda tangents, a, b, *, out: _multilinear_jvp(_matmul_fwd, tangents, (a, b), out),
        torch=lambda a, b: torch().matmul(a, b),
        torch_name="torch.matmul",
        shape_fn=_matmul_shape,
        normalize=_matmul_norm,
        batch_params=with_lead,
        param_strategy=_matmul_params,
        saves=True,
        call=lambda input, other: ((input, other), {}),
        method=True,
        notes="numpy/torch semantics: 1-D operands are a row/column whose axis is dropped, batch dims "
        "broadcast (operand gradients are summed back over broadcast batch dims); inner dim 0 gives "
        "zeros and zero-size gradients (reference 8.7c); saves both operands",
    )
)


def _mm_norm(shapes):
    sa, sb = (tuple(s) for s in shapes)
    if len(sa) != 2:
        raise RuntimeError("self must be a matrix")
    if len(sb) != 2:
        raise RuntimeError("mat2 must be a matrix")
    if sa[1] != sb[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({_mat_str(sa)} and {_mat_str(sb)})")
    return {}


register(
    OpSpec(
        name="mm",
        family="linalg",
        arity=2,
        forward=_matmul_fwd,
        vjp=_matmul_vjp,
        jvp=lambda tangents, a, b, *, out: _multilinear_jvp(_matmul_fwd, tangents, (a, b), out),
        torch=lambda a, b: torch().mm(a, b),
        torch_name="torch.mm",
        # no gufunc signature: that would promise broadcast loop dims, which torch.mm rejects
        shape_fn=lambda sa, sb: (sa[0], sb[1]) if len(sa) == 2 and len(sb) == 2 and sa[1] == sb[0] else None,
        normalize=_mm_norm,
        batch_params=with_lead,
        param_strategy=_matmul_params,
        saves=True,
        call=lambda input, mat2: ((input, mat2), {}),
        method=True,
        notes="2-D only ('self must be a matrix' otherwise, as torch); saves both operands",
    )
)


# ---------------------------------------------------------------------------------------
# linear (with and without bias)
# ---------------------------------------------------------------------------------------


def _linear_subscripts(nw: int) -> tuple[list[str], str]:
    # weight (out, in) or, as torch allows, a 1-D weight (in): then the out axis is absent.
    return (["...i", "oi"], "...o") if nw == 2 else (["...i", "i"], "...")


def _linear_nobias_fwd(x, w, _lead=0):
    ins, out = _linear_subscripts(w.ndim - _lead)
    return _einsum_fwd(x, w, subscripts=",".join(ins) + "->" + out, _lead=_lead)


def _linear_fwd(x, w, b, _lead=0):
    y = _linear_nobias_fwd(x, w, _lead=_lead)
    return y + _align_to(b, _lead, y.ndim)


def _linear_out_shape(sx, sw):
    if len(sx) == 0 or len(sw) not in (1, 2) or sx[-1] != sw[-1]:
        return None
    return tuple(sx[:-1]) + tuple(sw[:-1])


def _bias_fits(sb, out):
    try:
        return tuple(np.broadcast_shapes(tuple(sb), tuple(out))) == tuple(out)
    except ValueError:
        return False


def _linear_norm(shapes):
    sx, sw = tuple(shapes[0]), tuple(shapes[1])
    if len(sx) == 0 or len(sw) == 0:
        raise RuntimeError(f"both arguments to linear need to be at least 1D, but they are {len(sx)}D and {len(sw)}D")
    if len(sw) > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {len(sw)}D")
    if sx[-1] != sw[-1]:
        rows = int(np.prod(sx[:-1]))
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({rows}x{sx[-1]} and {_mat_str(sw[::-1])})"
            if len(sw) == 2
            else f"size mismatch, got input ({rows}), mat ({rows}x{sx[-1]}), vec ({sw[0]})"
        )
    if len(shapes) == 3:
        if len(sw) == 1 and (len(sx) != 1 or len(shapes[2]) != 0):
            # torch routes a biased 1-D weight through addmm unless everything is a vector.
            raise RuntimeError("mat2 must be a matrix, got 1-D tensor")
        out = _linear_out_shape(sx, sw)
        sb = tuple(shapes[2])
        # torch's F.linear picks addmm, a fused folded addmm or matmul + add_ depending on the
        # ranks and the bias size, and each path accepts different bias shapes; gradspec accepts
        # the shapes every path agrees on: () and (out,), (1, out) for a batched input, and any
        # shape of rank <= 2 that broadcasts to the output of a 2-D input (addmm's rule).
        ok = _bias_fits(sb, out) and (
            sb in ((), (1,), tuple(sw[:1]))
            or (len(sx) >= 2 and len(sw) == 2 and sb == (1, sw[0]))
            or (len(sx) == 2 and len(sb) <= 2)
        )
        if not ok:
            raise RuntimeError(
                f"linear: gradspec supports a bias of shape [], [out_features] or one that broadcasts to the "
                f"output of a 2-D input; got bias {list(sb)} for input {list(sx)} and weight {list(sw)}"
            )
    return {}


def _linear_shape(sx, sw, sb):
    try:
        _linear_norm((sx, sw, sb))
    except RuntimeError:
        return None
    return _linear_out_shape(sx, sw)


def _linear_vjp(g, x, w, b=None, *, out):
    ins, o = _linear_subscripts(w.ndim)
    gx, gw = _einsum_vjp_terms(g, (x, w), ins, o)
    if b is None:
        return gx, gw
    return gx, gw, g if b.requires_grad else None  # the engine sums g down to the bias shape


def _linear_jvp(tangents, x, w, b=None, *, out):
    n = max(t.shape[0] for t in tangents if t is not None)
    acc = np.zeros((n,) + np.shape(out), dtype=_float_dtype(out))
    if any(t is not None for t in tangents[:2]):
        acc = acc + _multilinear_jvp(_linear_nobias_fwd, tangents[:2], (x, w), out)
    if b is not None and tangents[2] is not None:
        acc = acc + _align_to(tangents[2], 1, acc.ndim)
    return acc


def _linear_dispatch(input, weight, bias=None):
    if bias is None:
        return "linear_nobias", (input, weight), {}
    return "linear", (input, weight, bias), {}


_LINEAR_NOTES = (
    "input (..., in) @ weight.T (weight (out, in), or 1-D (in)) [+ bias broadcast to the output]; "
    "the bias gradient is the seed summed over the batch dims; saves input and weight"
)

register(
    OpSpec(
        name="linear",
        family="linalg",
        arity=3,
        forward=_linear_fwd,
        vjp=_linear_vjp,
        jvp=_linear_jvp,
        torch=lambda x, w, b: F().linear(x, w, b),
        torch_name="torch.nn.functional.linear",
        shape_fn=_linear_shape,
        normalize=_linear_norm,
        batch_params=with_lead,
        param_strategy=_no_params,
        saves=True,
        call=lambda input, weight, bias: ((input, weight, bias), {}),
        dispatch=_linear_dispatch,
        notes=_LINEAR_NOTES + "; gs.linear(x, w) without a bias runs op 'linear_nobias'",
    )
)
register(
    OpSpec(
        name="linear_nobias",
        family="linalg",
        arity=2,
        forward=_linear_nobias_fwd,
        vjp=_linear_vjp,
        jvp=_linear_jvp,
        torch=lambda x, w: F().linear(x, w),
        torch_name="torch.nn.functional.linear (bias=None)",
        shape_fn=_linear_out_shape,
        normalize=_linear_norm,
        batch_params=with_lead,
        param_strategy=_no_params,
        saves=True,
        call=lambda input, weight: ((input, weight), {}),
        notes=_LINEAR_NOTES,
    )
)


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
    nd = max(len(shapes[0]), 1)
    return _st().fixed_dictionaries({"dim": _st().integers(-nd, nd - 1)})


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
    with np.errstate(invalid="ignore", divide="ignore"):  # mean of an empty tensor is nan, as in torch
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
    with np.errstate(invalid="ignore", divide="ignore"):
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
    with np.errstate(invalid="ignore", divide="ignore"):
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
