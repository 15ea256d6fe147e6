"""Shape ops: views, joins and indexing.  All are linear, so their JVP is their forward.

Canonical params keep every op batch-safe (usable on arrays with extra leading batch axes):

* ``dim``-like params are negative ints (relative to the rank they index);
* ops whose output depends on the input's own shape (``reshape``, ``expand``, ``flatten``,
  ``index``, ``gather``, ``index_select``) get a private ``_lead`` (number of batch axes) from
  ``batch_params``;
* index arrays are nested lists of ints (with their shape, so 0-size arrays survive JSON).

Indexing-like ops (``index``, ``gather``, ``index_select``) are all "take these flat
positions of the input": the positions are computed once from the params and the input's
own shape, with torch's semantics, and the forward is a take along the flattened data axes.
Their VJP is the matching scatter-ADD (internal ops ``_<name>_backward``, built on
``np.add.at`` so duplicated indices accumulate), whose own VJP is the take again, so
double backward is a graph like torch's ``IndexBackward0 -> IndexPutBackward0``.
"""

from __future__ import annotations

import functools
import math
import operator

import numpy as np

from .. import engine as E
from .._private.dims import norm_dim
from ..spec.opspec import OpSpec
from ..spec.registry import register
from ._common import torch, with_lead

__all__: list[str] = []

call = E.call


def _st():
    from hypothesis import strategies as st

    return st


def _prod(shape) -> int:
    return int(math.prod(int(v) for v in shape))


def _any_dim(nd):
    """Strategy for one dim of a rank-``nd`` tensor, positive or negative (0-d counts as rank 1)."""
    n = max(nd, 1)
    return _st().integers(-n, n - 1)


# ---------------------------------------------------------------------------------------
# reshape / expand
# ---------------------------------------------------------------------------------------


def _reshape_norm(shapes, shape):
    (s,) = shapes
    shape = tuple(operator.index(v) for v in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    n = _prod(s)
    for i, v in enumerate(shape):
        if v < -1:
            raise RuntimeError(f"invalid shape dimension {v} at index {i} of shape {list(shape)}")
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    if -1 in shape:
        rest = _prod(v for v in shape if v != -1)
        if rest == 0 and n == 0:
            raise RuntimeError(
                f"cannot reshape tensor of 0 elements into shape {list(shape)} because the unspecified "
                "dimension size -1 can be any value and is ambiguous"
            )
        if rest == 0 or n % rest:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {n}")
        shape = tuple(n // rest if v == -1 else v for v in shape)
    if _prod(shape) != n:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {n}")
    return {"shape": shape}


def _sizes_arg(name, args, kw):
    # torch accepts both x.reshape(2, 3) and x.reshape((2, 3)) (and the keyword form).
    if kw is not None:
        if args:
            raise TypeError(f"{name}() got both positional sizes and the keyword argument")
        args = (kw,)
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return tuple(args)


def _reshape_call(input, *sizes, shape=None):
    return (input,), {"shape": _sizes_arg("reshape", sizes, shape)}


def _factor_shapes(shapes):
    """Strategy: a target shape with the same number of elements, sometimes with one -1."""
    n = _prod(shapes[0])
    return _factor_shapes_composite()(n)


@functools.cache
def _factor_shapes_composite():
    # Defined once (Hypothesis parses a composite's source when it is defined: ~1-2 ms, paid per
    # new input shape when the composite was defined inside _factor_shapes)
    st = _st()

    @st.composite
    def draw(draw, n):
        if n == 0:
            k = draw(st.integers(1, 3))
            dims = [draw(st.integers(0, 3)) for _ in range(k)]
            dims[draw(st.integers(0, k - 1))] = 0
            return {"shape": tuple(dims)}
        dims = []
        rest = n
        for _ in range(draw(st.integers(0, 3))):
            divs = [d for d in range(1, rest + 1) if rest % d == 0]
            d = draw(st.sampled_from(divs))
            dims.append(d)
            rest //= d
        dims.append(rest)
        dims = draw(st.permutations(dims))
        ones = draw(st.integers(0, 1))
        dims = list(dims) + [1] * ones
        if draw(st.booleans()):
            dims[draw(st.integers(0, len(dims) - 1))] = -1
        return {"shape": tuple(dims)}

    return draw


register(
    OpSpec(
        name="reshape",
        family="shape",
        arity=1,
        forward=lambda x, shape: np.reshape(x, tuple(shape)),
        batch_params=lambda p, b: {"shape": tuple(b) + tuple(p["shape"])},
        vjp=lambda g, x, *, out, shape: (call("reshape", g, shape=x.shape),),
        linear=True,
        torch=lambda x, shape: torch().reshape(x, tuple(shape)),
        torch_name="torch.reshape",
        shape_fn=lambda s, shape: tuple(shape) if _prod(s) == _prod(shape) else None,
        param_strategy=_factor_shapes,
        normalize=_reshape_norm,
        saves=False,
        call=_reshape_call,
        method=True,
        notes="one -1 is inferred (ambiguous with 0 elements: error); saves nothing (ViewBackward0, reference 5.2)",
    )
)


def _expand_norm(shapes, size):
    (s,) = shapes
    size = tuple(operator.index(v) for v in size)
    lead = len(size) - len(s)
    if lead < 0:
        raise RuntimeError(
            f"expand: the number of sizes provided ({len(size)}) must be greater or equal to the number of "
            f"dimensions in the tensor ({len(s)})"
        )
    out = []
    for i, v in enumerate(size):
        if v == -1:
            if i < lead:
                raise RuntimeError(
                    f"The expanded size of the tensor (-1) isn't allowed in a leading, non-existing dimension {i}"
                )
            v = s[i - lead]
        elif v < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {v}: {list(size)}")
        elif i >= lead and s[i - lead] != 1 and v != s[i - lead]:
            raise RuntimeError(
                f"The expanded size of the tensor ({v}) must match the existing size ({s[i - lead]}) at non-singleton "
                f"dimension {i}.  Target sizes: {list(size)}.  Tensor sizes: {list(s)}"
            )
        out.append(v)
    return {"size": tuple(out)}


def _expand_fwd(x, size, _lead=0):
    # With `_lead` batch axes in front, x's own axes are aligned to the right of `size`.
    missing = len(size) - x.ndim
    if missing > 0:
        x = x.reshape(x.shape[:_lead] + (1,) * missing + x.shape[_lead:])
    return np.broadcast_to(x, tuple(size))


def _expand_call(input, *sizes, size=None):
    return (input,), {"size": _sizes_arg("expand", sizes, size)}


def _expandable(s, size):
    try:
        return np.broadcast_shapes(tuple(s), tuple(size)) == tuple(size)
    except ValueError:
        return False


def _expand_params(shapes):
    (s,) = shapes
    return _expand_params_composite()(s)


@functools.cache
def _expand_params_composite():
    # Defined once (Hypothesis parses a composite's source when it is defined: ~1-2 ms, paid per
    # new input shape when the composite was defined inside _expand_params)
    st = _st()

    @st.composite
    def draw(draw, s):
        lead = [draw(st.integers(0, 3)) for _ in range(draw(st.integers(0, 2)))]
        own = [draw(st.sampled_from([1, 0, 2, 3, -1])) if v == 1 else draw(st.sampled_from([v, -1])) for v in s]
        return {"size": tuple(lead + own)}

    return draw


register(
    OpSpec(
        name="expand",
        family="shape",
        arity=1,
        forward=_expand_fwd,
        vjp=lambda g, x, *, out, size: (g,),  # the engine sums g back to x's shape
        linear=True,
        torch=lambda x, size: x.expand(tuple(size)),
        torch_name="Tensor.expand",
        shape_fn=lambda s, size: tuple(size) if _expandable(s, size) else None,
        param_strategy=_expand_params,
        normalize=_expand_norm,
        batch_params=lambda p, b: {"size": tuple(b) + tuple(p["size"]), "_lead": len(b)},
        saves=False,
        call=_expand_call,
        method=True,
        notes="new leading dims allowed (not -1); -1 keeps a size; a size-1 dim may expand to 0. "
        "The VJP sums over expanded dims (the engine's broadcast reduction); saves nothing",
    )
)


# ---------------------------------------------------------------------------------------
# transpose / permute
# ---------------------------------------------------------------------------------------


def _transpose_fwd(x, dim0, dim1):
    if dim0 == dim1:  # also the only case for a 0-d tensor (dims -1, -1)
        return x
    return np.swapaxes(x, dim0, dim1)


register(
    OpSpec(
        name="transpose",
        family="shape",
        arity=1,
        forward=_transpose_fwd,
        vjp=lambda g, x, *, out, dim0, dim1: (call("transpose", g, dim0=dim0, dim1=dim1),),
        linear=True,
        torch=lambda x, dim0, dim1: torch().transpose(x, dim0, dim1),
        torch_name="torch.transpose",
        shape_fn=lambda s, dim0, dim1: tuple(np.swapaxes(np.empty(s), dim0, dim1).shape) if s else (),
        param_strategy=lambda shapes: _st().fixed_dictionaries(
            {"dim0": _any_dim(len(shapes[0])), "dim1": _any_dim(len(shapes[0]))}
        ),
        normalize=lambda shapes, dim0, dim1: {
            "dim0": norm_dim(dim0, len(shapes[0])),
            "dim1": norm_dim(dim1, len(shapes[0])),
        },
        saves=False,
        call=lambda input, dim0, dim1: ((input,), {"dim0": dim0, "dim1": dim1}),
        method=True,
        notes="0-d tensors accept dims -1 and 0; saves nothing",
    )
)


def _permute_norm(shapes, dims):
    nd = len(shapes[0])
    dims = tuple(dims)
    if len(dims) != nd:
        raise RuntimeError(
            "permute(sparse_coo): number of dimensions in the tensor input does not match the length of the "
            f"desired ordering of dimensions i.e. input.dim() = {nd} is not equal to len(dims) = {len(dims)}"
        )
    out = tuple(norm_dim(d, nd) for d in dims)
    if len(set(out)) != len(out):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return {"dims": out}


def _permute_fwd(x, dims):
    k = len(dims)
    return np.transpose(x, list(range(x.ndim - k)) + [x.ndim + d for d in dims])


def _permute_vjp(g, x, *, out, dims):
    k = len(dims)
    inv = [0] * k
    for i, d in enumerate(dims):
        inv[d + k] = i - k
    return (call("permute", g, dims=tuple(inv)),)


def _permute_call(input, *args, dims=None):
    return (input,), {"dims": _sizes_arg("permute", args, dims)}


def _permute_params(shapes):
    st = _st()
    nd = len(shapes[0])
    return st.tuples(st.permutations(range(nd)), st.lists(st.booleans(), min_size=nd, max_size=nd)).map(
        lambda pn: {"dims": tuple(d - nd if neg else d for d, neg in zip(*pn, strict=True))}
    )


register(
    OpSpec(
        name="permute",
        family="shape",
        arity=1,
        forward=_permute_fwd,
        vjp=_permute_vjp,
        linear=True,
        torch=lambda x, dims: torch().permute(x, tuple(dims)),
        torch_name="torch.permute",
        shape_fn=lambda s, dims: tuple(s[d] for d in dims),
        param_strategy=_permute_params,
        normalize=_permute_norm,
        saves=False,
        call=_permute_call,
        method=True,
        notes="x.permute(1, 0, 2) and x.permute((1, 0, 2)) both work; the VJP is the inverse permutation; "
        "saves nothing",
    )
)


# ---------------------------------------------------------------------------------------
# squeeze / unsqueeze / flatten
# ---------------------------------------------------------------------------------------


def _squeeze_norm(shapes, dim=None):
    (s,) = shapes
    nd = len(s)
    if dim is None:
        return {"dim": tuple(i - nd for i, v in enumerate(s) if v == 1)}
    many = isinstance(dim, (tuple, list))
    dims = [norm_dim(d, nd) for d in (dim if many else (dim,))]
    seen = set()
    for d in dims:
        if d in seen:
            raise RuntimeError(f"dim {d + max(nd, 1)} appears multiple times in the list of dims")
        seen.add(d)
    # Squeezing a dim that is not of size 1 is a no-op in torch, so only size-1 dims remain.
    return {"dim": tuple(sorted(d for d in dims if nd and s[d] == 1))}


def _squeeze_shape(s, dim):
    nd = len(s)
    return tuple(v for i, v in enumerate(s) if i - nd not in dim)


def _squeeze_params(shapes):
    st = _st()
    nd = len(shapes[0])
    choices = [st.none(), _any_dim(nd)]
    if nd:
        choices.append(st.lists(st.integers(0, nd - 1), min_size=0, max_size=nd, unique=True).map(tuple))
    return st.fixed_dictionaries({"dim": st.one_of(*choices)})


register(
    OpSpec(
        name="squeeze",
        family="shape",
        arity=1,
        forward=lambda x, dim: np.squeeze(x, axis=tuple(dim)),
        vjp=lambda g, x, *, out, dim: (call("reshape", g, shape=x.shape),),
        linear=True,
        torch=lambda x, dim: torch().squeeze(x, tuple(dim)),
        torch_name="torch.squeeze",
        shape_fn=_squeeze_shape,
        param_strategy=_squeeze_params,
        normalize=_squeeze_norm,
        saves=False,
        call=lambda input, dim=None: ((input,), {"dim": dim}),
        method=True,
        notes="dim: None (all size-1 dims), an int or a tuple; naming a dim whose size is not 1 is a no-op "
        "(torch semantics); canonical dim lists only the size-1 dims actually removed; saves nothing",
    )
)


def _unsqueeze_norm(shapes, dim):
    return {"dim": norm_dim(dim, len(shapes[0]) + 1)}


register(
    OpSpec(
        name="unsqueeze",
        family="shape",
        arity=1,
        forward=lambda x, dim: np.expand_dims(x, dim),
        vjp=lambda g, x, *, out, dim: (call("reshape", g, shape=x.shape),),
        linear=True,
        torch=lambda x, dim: torch().unsqueeze(x, dim),
        torch_name="torch.unsqueeze",
        shape_fn=lambda s, dim: tuple(np.expand_dims(np.empty(s), dim).shape),
        param_strategy=lambda shapes: _st().fixed_dictionaries(
            {"dim": _st().integers(-len(shapes[0]) - 1, len(shapes[0]))}
        ),
        normalize=_unsqueeze_norm,
        saves=False,
        call=lambda input, dim: ((input,), {"dim": dim}),
        method=True,
        notes="dim ranges over the OUTPUT's dims [-(n+1), n]; saves nothing",
    )
)


def _flatten_norm(shapes, start_dim=0, end_dim=-1):
    nd = len(shapes[0])
    s, e = norm_dim(start_dim, nd), norm_dim(end_dim, nd)
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    return {"start_dim": s, "end_dim": e}


def _flatten_shape(own, start_dim, end_dim):
    if not own:
        return (1,)  # torch: flattening a 0-d tensor gives shape (1,)
    n = len(own)
    s, e = start_dim + n, end_dim + n
    return tuple(own[:s]) + (_prod(own[s : e + 1]),) + tuple(own[e + 1 :])


def _flatten_fwd(x, start_dim, end_dim, _lead=0):
    return x.reshape(x.shape[:_lead] + _flatten_shape(x.shape[_lead:], start_dim, end_dim))


def _flatten_params(shapes):
    st = _st()
    nd = len(shapes[0])
    n = max(nd, 1)

    def order(ab):
        a, b = sorted(ab, key=lambda d: d % n)
        return {"start_dim": a, "end_dim": b}

    return st.tuples(_any_dim(nd), _any_dim(nd)).map(order)


register(
    OpSpec(
        name="flatten",
        family="shape",
        arity=1,
        forward=_flatten_fwd,
        batch_params=with_lead,
        vjp=lambda g, x, *, out, start_dim, end_dim: (call("reshape", g, shape=x.shape),),
        linear=True,
        torch=lambda x, start_dim, end_dim: torch().flatten(x, start_dim, end_dim),
        torch_name="torch.flatten",
        shape_fn=_flatten_shape,
        param_strategy=_flatten_params,
        normalize=_flatten_norm,
        saves=False,
        call=lambda input, start_dim=0, end_dim=-1: ((input,), {"start_dim": start_dim, "end_dim": end_dim}),
        method=True,
        notes="a 0-d tensor flattens to shape (1,); start_dim == end_dim returns the input itself in torch "
        "(no node) while gradspec records a node: same values, saves nothing either way",
    )
)


# ---------------------------------------------------------------------------------------
# cat / stack (variadic: the inputs are the list of tensors)
# ---------------------------------------------------------------------------------------


def _legacy_empty(shape) -> bool:
    # torch.cat skips 1-D tensors of size 0 whatever the other tensors' rank (legacy behaviour).
    return len(shape) == 1 and shape[0] == 0


def _cat_norm(shapes, dim=0):
    if not shapes:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    for i, s in enumerate(shapes):
        if len(s) == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    kept = [(i, s) for i, s in enumerate(shapes) if not _legacy_empty(s)]
    if not kept:
        return {"dim": norm_dim(dim, 1)}
    i0, s0 = kept[0]
    d = norm_dim(dim, len(s0))
    for i, s in kept[1:]:
        if len(s) != len(s0):
            raise RuntimeError(f"Tensors must have same number of dimensions: got {len(s0)} and {len(s)}")
        for k in range(len(s0)):
            if k != d + len(s0) and s[k] != s0[k]:
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {d + len(s0)}. Expected size {s0[k]} but got "
                    f"size {s[k]} for tensor number {i} in the list."
                )
    return {"dim": d}


def _cat_fwd(*arrays, dim):
    rank = max(a.ndim for a in arrays)
    kept = [a for a in arrays if a.ndim == rank]  # lower rank: a legacy empty piece (also when batched)
    return np.concatenate(kept, axis=dim).astype(np.result_type(*arrays), copy=False)


def _cat_shape(*shapes, dim):
    kept = [s for s in shapes if not _legacy_empty(s)] or list(shapes)
    out = list(kept[0])
    out[dim] = sum(s[dim] for s in kept)
    return tuple(out)


def _cat_vjp(g, *xs, out, dim):
    grads = []
    offset = 0
    rank = g.ndim
    tail = (slice(None),) * (-dim - 1)
    for x in xs:
        if x.ndim != rank:  # a skipped legacy empty piece: its gradient is empty too
            grads.append(E.Tensor(np.zeros(x.shape, dtype=g.dtype)))
            continue
        n = x.shape[dim]
        grads.append(call("index", g, index=(Ellipsis, slice(offset, offset + n)) + tail))
        offset += n
    return tuple(grads)


def _cat_params(shapes):
    st = _st()
    nd = len(shapes[0])
    ok = [
        d
        for d in range(nd)
        if all(len(s) == nd and all(s[k] == shapes[0][k] for k in range(nd) if k != d) for s in shapes)
    ]
    if not ok:
        # No dim joins these shapes: a plain default that `normalize` rejects lets a caller
        # retry with other shapes (st.nothing() would abort the caller's whole example).
        return st.just({"dim": 0})
    return st.sampled_from(ok).flatmap(lambda d: st.sampled_from([d, d - nd])).map(lambda d: {"dim": d})


def _stack_norm(shapes, dim=0):
    if not shapes:
        raise RuntimeError("stack expects a non-empty TensorList")
    s0 = tuple(shapes[0])
    for i, s in enumerate(shapes[1:], 1):
        if tuple(s) != s0:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {list(s0)} at entry 0 and {list(s)} at entry {i}"
            )
    return {"dim": norm_dim(dim, len(s0) + 1)}


def _stack_vjp(g, *xs, out, dim):
    tail = (slice(None),) * (-dim - 1)
    return tuple(call("index", g, index=(Ellipsis, i) + tail) for i in range(len(xs)))


def _stack_params(shapes):
    st = _st()
    nd = len(shapes[0])
    if any(tuple(s) != tuple(shapes[0]) for s in shapes):
        return st.just({"dim": 0})  # rejected by normalize: unequal shapes cannot be stacked
    return st.fixed_dictionaries({"dim": st.integers(-nd - 1, nd)})


def _list_call(name):
    def call_(tensors, dim=0):
        if not isinstance(tensors, (list, tuple)):
            raise TypeError(
                f"{name}(): argument 'tensors' must be a tuple or list of Tensors, not {type(tensors).__name__}"
            )
        return tuple(tensors), {"dim": dim}

    call_.__name__ = name
    return call_


register(
    OpSpec(
        name="cat",
        family="shape",
        arity=None,
        forward=_cat_fwd,
        vjp=_cat_vjp,
        linear=True,
        torch=lambda *xs, dim: torch().cat(list(xs), dim=dim),
        torch_name="torch.cat",
        shape_fn=_cat_shape,
        param_strategy=_cat_params,
        normalize=_cat_norm,
        saves=False,
        call=_list_call("cat"),
        notes="the VJP splits the gradient at the concatenation points (basic slices); 1-D empty tensors are "
        "skipped whatever the others' rank (torch's legacy rule) and get an empty gradient; dtypes promote; "
        "saves nothing (reference 5.2)",
    )
)

register(
    OpSpec(
        name="stack",
        family="shape",
        arity=None,
        forward=lambda *xs, dim: np.stack(xs, axis=dim),
        vjp=_stack_vjp,
        linear=True,
        torch=lambda *xs, dim: torch().stack(list(xs), dim=dim),
        torch_name="torch.stack",
        shape_fn=lambda *shapes, dim: tuple(np.stack([np.empty(s) for s in shapes], axis=dim).shape),
        param_strategy=_stack_params,
        normalize=_stack_norm,
        saves=False,
        call=_list_call("stack"),
        notes="all tensors must have equal shapes; dim ranges over the OUTPUT's dims; the VJP selects each slice; "
        "saves nothing",
    )
)
