"""Linear algebra ops: einsum, matmul, mm, linear (the neural-network ops are in :mod:`gradspec.ops.nn`).

Every contraction here is an einsum in disguise, so the VJP rules are built from one
internal differentiable op, ``_linalg_einsum``: the gradient of an einsum with respect to
one operand is another einsum (the seed contracted with the other operands), which is again
differentiable, so ``create_graph=True`` double backward needs nothing else (``conv1d``, in
:mod:`gradspec.ops.nn`, is one too, over the sliding windows of its input).

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
    >>> gs.ops.get("mm").family
    'linalg'
"""

from __future__ import annotations

import functools

import numpy as np

from .. import engine as E
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
        same_dtype=True,
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
        same_dtype=True,
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
        same_dtype=True,
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
        same_dtype=True,
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
        same_dtype=True,
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
