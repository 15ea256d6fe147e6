"""Indexing-like shape ops (``index``, ``gather``, ``index_select``, ...): take flat positions,
scatter-add back.

Split from :mod:`gradspec.ops.shape` (its module docstring describes the conventions): the
positions are computed once from the params and the input's own shape, with torch's semantics;
the VJP is the matching scatter-ADD (``np.add.at``, so duplicated indices accumulate), whose own
VJP is the take again.

Example::

    >>> import numpy as np, gradspec as gs
    >>> gs.ops.get("gather").family
    'shape'
"""

from __future__ import annotations

import functools
import operator
import warnings

import numpy as np

from .. import engine as E
from .._private.dims import norm_dim
from ..spec.opspec import OpSpec
from ..spec.registry import register
from ._common import torch, with_lead
from .shape import _any_dim, _prod, _st

__all__: list[str] = []

call = E.call


# ---------------------------------------------------------------------------------------
# Indexing-like ops: take flat positions, scatter-add back
# ---------------------------------------------------------------------------------------

_POS_CACHE: dict = {}


def _positions(name, fn, shape, params) -> np.ndarray:
    """Flat positions (into the C-order flattened input) that op ``name`` takes, cached."""
    key = (name, tuple(shape), repr(sorted(params.items())))
    pos = _POS_CACHE.get(key)
    if pos is None:
        if len(_POS_CACHE) > 512:
            _POS_CACHE.clear()
        pos = np.array(fn(tuple(shape), **params), dtype=np.int64)  # own, writable copy
        _POS_CACHE[key] = pos
    return pos


def _take(x, pos, lead):
    flat = x.reshape(x.shape[:lead] + (_prod(x.shape[lead:]),))
    return flat[(Ellipsis, pos)]


def _scatter_add(g, pos, shape, lead):
    lead_shape = g.shape[:lead]
    out = np.zeros(lead_shape + (_prod(shape),), dtype=g.dtype)
    np.add.at(out, (Ellipsis, pos), g)  # add.at: duplicated positions accumulate
    return out.reshape(lead_shape + tuple(shape))


def _scatter_torch(g, shape, pos):
    t = torch()
    z = t.zeros(_prod(shape), dtype=g.dtype)
    flat = t.tensor(np.array(pos, dtype=np.int64).reshape(-1))
    return z.index_put((flat,), g.reshape(-1), accumulate=True).reshape(tuple(shape))


def _declare_take(name, positions, *, saves, **spec_fields):
    """Register op ``name`` (take at ``positions(shape, **params)``) and its scatter-add adjoint."""
    back = f"_{name}_backward"

    def forward(x, _lead=0, **p):
        return _take(x, _positions(name, positions, x.shape[_lead:], p), _lead)

    def shape_fn(s, **p):
        return tuple(_positions(name, positions, s, p).shape)

    def back_forward(g, shape, _lead=0, **p):
        return _scatter_add(g, _positions(name, positions, shape, p), tuple(shape), _lead)

    def back_shape(s, shape, **p):
        want = tuple(_positions(name, positions, tuple(shape), p).shape)
        return tuple(shape) if tuple(s) == want else None

    register(
        OpSpec(
            name=name,
            family="shape",
            arity=1,
            forward=forward,
            batch_params=with_lead,
            vjp=lambda g, x, *, out, **p: (call(back, g, shape=x.shape, **p),),
            linear=True,
            shape_fn=shape_fn,
            saves=saves,
            **spec_fields,
        )
    )
    register(
        OpSpec(
            name=back,
            family="internal",
            arity=1,
            forward=back_forward,
            batch_params=with_lead,
            # The adjoint of a scatter-add is the take again: double backward stays a graph.
            vjp=lambda g, x, *, out, shape, **p: (call(name, g, **p),),
            linear=True,
            torch=lambda g, shape, **p: _scatter_torch(g, shape, positions(tuple(shape), **p)),
            torch_name=f"index_put_(accumulate=True) (adjoint of {name})",
            shape_fn=back_shape,
            normalize=lambda shapes, shape, **p: {**p, "shape": tuple(int(v) for v in shape)},
            saves=saves,
            notes=f"scatter-add of the gradient into zeros of the input's shape: the VJP of {name}",
        )
    )


def _int_array(value, shape, dtype_error):
    """An index argument (gs.Tensor, ndarray, nested list, int) as an int64 array."""
    if isinstance(value, E.Tensor):
        value = value.data
    a = np.asarray(value)
    if a.size == 0 and a.dtype.kind == "f":
        a = a.astype(np.int64)  # [] parses as float64; torch.tensor([]) used as an index is long
    if a.dtype.kind not in "iu":
        raise RuntimeError(dtype_error)
    a = a.astype(np.int64)
    if shape is not None:
        a = a.reshape(tuple(int(v) for v in shape))
    return a


def _c_strides(shape):
    strides = []
    acc = 1
    for v in reversed(shape):
        strides.append(acc)
        acc *= int(v)
    return strides[::-1]


# -- index: x[key] ----------------------------------------------------------------------

_MSG_SEQ_AS_TUPLE = (
    "Using a non-tuple sequence for multidimensional indexing is deprecated and will be changed in pytorch 2.9; "
    "use x[tuple(seq)] instead of x[seq]. In pytorch 2.9 this will be interpreted as tensor index, "
    "x[torch.tensor(seq)], which will result either in an error or a different result"
)
_MSG_BOOL = (
    "gradspec: boolean (mask) indexing is not supported by the reference engine; index with integer positions "
    "instead, e.g. x[np.nonzero(mask)]"
)
_ITEM_KINDS = ("int", "slice", "none", "ellipsis", "array")


def _key_items(key) -> list:
    """The user's key as a list of raw items, with torch 2.13's tuple / sequence rules."""
    if isinstance(key, list) and key and all(isinstance(k, dict) for k in key):
        return list(key)  # already the item form (canonical or drawn by the strategy)
    if isinstance(key, tuple):
        return list(key)
    if isinstance(key, list) and len(key) < 32 and any(
        k is None or k is Ellipsis or isinstance(k, (list, tuple, slice, np.ndarray, E.Tensor)) for k in key
    ):
        # numpy's old heuristic, still torch 2.13's: such a list means a tuple of indices.
        warnings.warn(_MSG_SEQ_AS_TUPLE, UserWarning, stacklevel=4)
        return list(key)
    return [key]


def _item(k) -> dict:
    """One raw item as an item dict (not yet checked against the shape)."""
    if isinstance(k, dict):
        kinds = [kk for kk in _ITEM_KINDS if kk in k]
        if len(kinds) != 1:
            raise IndexError(f"invalid index item {k!r}: expected exactly one of {', '.join(_ITEM_KINDS)}")
        kind = kinds[0]
        if kind == "int":
            return _item(operator.index(k["int"]))
        if kind == "slice":
            return _item(slice(*k["slice"]))
        if kind == "array":
            a = np.asarray(k["array"])
            return _item(a.reshape(tuple(k["shape"])) if k.get("shape") is not None else a)
        return {kind: True}
    if k is None:
        return {"none": True}
    if k is Ellipsis:
        return {"ellipsis": True}
    if isinstance(k, (bool, np.bool_)):
        raise IndexError(_MSG_BOOL)
    if isinstance(k, (int, np.integer)):
        return {"int": int(k)}
    if isinstance(k, slice):
        start, stop, step = (None if v is None else operator.index(v) for v in (k.start, k.stop, k.step))
        if step == 0:
            raise ValueError("slice step cannot be zero")
        if step is not None and step < 0:
            raise ValueError("step must be greater than zero")
        return {"slice": [start, stop, 1 if step is None else step]}
    if isinstance(k, (E.Tensor, np.ndarray, list, tuple)):
        data = k.data if isinstance(k, E.Tensor) else k
        if np.asarray(data).dtype == np.bool_:
            raise IndexError(_MSG_BOOL)
        try:
            a = _int_array(data, None, "")
        except RuntimeError:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors") from None
        if a.ndim == 0:
            return {"int": int(a)}  # a 0-d integer tensor indexes like an int (SelectBackward0)
        return {"array": a.tolist(), "shape": list(a.shape)}
    raise IndexError(
        "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid indices "
        f"(got {type(k).__name__})"
    )


def _index_norm(shapes, index):
    (s,) = shapes
    nd = len(s)
    items = [_item(k) for k in _key_items(index)]
    if sum("ellipsis" in it for it in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consuming = [it for it in items if "int" in it or "slice" in it or "array" in it]
    if nd == 0 and consuming:
        first = consuming[0]
        if "int" in first:
            raise IndexError(
                "invalid index of a 0-dim tensor. Use `tensor.item()` in Python or `tensor.item<T>()` in C++ to "
                "convert a 0-dim tensor to a number"
            )
        if "slice" in first:
            raise IndexError("slice() cannot be applied to a 0-dim tensor.")
    if len(consuming) > nd:
        raise IndexError(f"too many indices for tensor of dimension {nd}")
    out = []
    arrays = []
    dim = 0
    for it in items:
        if "ellipsis" in it:
            dim += nd - len(consuming)
            out.append(it)
        elif "none" in it:
            out.append(it)
        elif "int" in it:
            v, size = it["int"], s[dim]
            if not -size <= v < size:
                raise IndexError(f"index {v} is out of bounds for dimension {dim} with size {size}")
            out.append({"int": v % size})
            dim += 1
        elif "slice" in it:
            out.append({"slice": list(slice(*it["slice"]).indices(s[dim]))})
            dim += 1
        else:
            a, size = np.asarray(it["array"], dtype=np.int64).reshape(it["shape"]), s[dim]
            bad = a[(a < -size) | (a >= size)]
            if bad.size:
                raise IndexError(f"index {int(bad.flat[0])} is out of bounds for dimension {dim} with size {size}")
            a = a % size if size else a
            arrays.append(a.shape)
            out.append({"array": a.tolist(), "shape": list(a.shape)})
            dim += 1
    try:
        np.broadcast_shapes(*arrays)
    except ValueError:
        shapes_txt = ", ".join(str(list(sh)) for sh in arrays)
        raise IndexError(
            f"shape mismatch: indexing tensors could not be broadcast together with shapes {shapes_txt}"
        ) from None
    # `x[()]` is `x[...]`; an empty list would read back as an empty index array.
    return {"index": out or [{"ellipsis": True}]}


def _torch_getitem(a, items):
    """``a[key]`` with torch's semantics (not numpy's) for canonical ``items``.

    torch first applies the basic items (ints select, slices, None, Ellipsis), remembering
    where each index array sits in the result, then advanced-indexes that result: the
    broadcast index dims replace the indexed dims in place when those are adjacent there,
    else they go to the front.  numpy instead counts ints as advanced indices, so e.g.
    ``x[0, :, [1, 2]]`` is (3, 2) in torch but (2, 3) in numpy.
    """
    nd = a.ndim
    consumed = sum(1 for it in items if "int" in it or "slice" in it or "array" in it)
    basic, adv = [], []
    r = 0
    for it in items:
        if "int" in it:
            basic.append(it["int"])
        elif "slice" in it:
            basic.append(slice(*it["slice"]))
            r += 1
        elif "none" in it:
            basic.append(None)
            r += 1
        elif "ellipsis" in it:
            n = nd - consumed
            basic.extend([slice(None)] * n)
            r += n
        else:
            basic.append(slice(None))
            adv.append((r, np.asarray(it["array"], dtype=np.int64).reshape(it["shape"])))
            r += 1
    y = a[tuple(basic)]
    if not adv:
        return y
    ps = [p for p, _ in adv]
    arrs = tuple(x for _, x in adv)
    if ps == list(range(ps[0], ps[0] + len(ps))):
        return y[(slice(None),) * ps[0] + arrs]
    return np.moveaxis(y, ps, list(range(len(ps))))[arrs]


def _index_positions(shape, index):
    return _torch_getitem(np.arange(_prod(shape), dtype=np.int64).reshape(shape), index)


def _torch_key(index):
    t = torch()
    key = []
    for it in index:
        if "int" in it:
            key.append(it["int"])
        elif "slice" in it:
            key.append(slice(*it["slice"]))
        elif "none" in it:
            key.append(None)
        elif "ellipsis" in it:
            key.append(Ellipsis)
        else:
            key.append(t.as_tensor(np.asarray(it["array"], dtype=np.int64).reshape(it["shape"])))
    return tuple(key)


def _index_params(shapes):
    """Strategy for a key in the JSON-friendly item form, deliberately NOT canonical.

    Negative ints, slices with None/negative/out-of-range bounds and steps, None, an Ellipsis
    over a run of dims, and up to two broadcasting index arrays with duplicates.
    """
    (s,) = shapes
    nd = len(s)
    return _index_params_composite()(s, nd)


@functools.cache
def _index_params_composite():
    # Defined once (Hypothesis parses a composite's source when it is defined: ~1-2 ms, paid per
    # new input shape when the composite was defined inside _index_params)
    st = _st()

    @st.composite
    def draw(draw, s, nd):
        common = draw(st.sampled_from([(2,), (3,), (1,), (0,), (2, 2)]))
        items, n_arrays = [], 0
        for size in s:
            kinds = ["full", "slice"] + (["int", "array", "array"] if size > 0 else [])
            kind = draw(st.sampled_from(kinds))
            if kind == "array" and n_arrays == 2:
                kind = "slice"
            if kind == "full":
                items.append({"slice": [None, None, None]})
            elif kind == "slice":
                bound = st.one_of(st.none(), st.integers(-size - 1, size + 1))
                items.append({"slice": [draw(bound), draw(bound), draw(st.one_of(st.none(), st.integers(1, 3)))]})
            elif kind == "int":
                items.append({"int": draw(st.integers(-size, size - 1))})
            else:
                n_arrays += 1
                shp = tuple(v if draw(st.booleans()) else 1 for v in common)
                vals = draw(st.lists(st.integers(-size, size - 1), min_size=_prod(shp), max_size=_prod(shp)))
                items.append({"array": np.asarray(vals, dtype=np.int64).reshape(shp).tolist(), "shape": list(shp)})
        if nd and draw(st.booleans()):
            a = draw(st.integers(0, nd))
            b = draw(st.integers(a, nd))
            items[a:b] = [{"ellipsis": True}]
        elif draw(st.booleans()):
            items = items[: draw(st.integers(0, len(items)))]  # trailing dims are implicitly full
        for _ in range(draw(st.integers(0, 2))):
            items.insert(draw(st.integers(0, len(items))), {"none": True})
        return {"index": items or [{"ellipsis": True}]}

    return draw


_declare_take(
    "index",
    _index_positions,
    saves=lambda p: any("array" in it for it in p["index"]),
    torch=lambda x, index: x[_torch_key(index)],
    torch_name="Tensor.__getitem__",
    normalize=_index_norm,
    param_strategy=_index_params,
    call=lambda input, index: ((input,), {"index": index}),
    notes="x[key] with ints (negative too), slices with positive steps, None, one Ellipsis and integer index "
    "arrays (several broadcast; torch's placement rule: ints are applied first as selects, then the index dims "
    "go in place if adjacent, else to the front). Duplicated indices ACCUMULATE in the VJP (scatter-add). "
    "Basic indexing saves nothing; any index array saves it (IndexBackward0). Bool masks are not supported. "
    "Canonical key: a list of {'int': i} / {'slice': [start, stop, step]} / {'none': True} / "
    "{'ellipsis': True} / {'array': nested ints, 'shape': [...]}",
)


# -- gather ------------------------------------------------------------------------------


def _gather_norm(shapes, dim, index, index_shape=None):
    (s,) = shapes
    a = _int_array(index, index_shape, "gather(): Expected dtype int32/int64 for index")
    d = norm_dim(dim, len(s))
    s1, i1 = tuple(s) or (1,), a.shape or (1,)  # torch treats a 0-d input or index as 1-D here
    if len(i1) != len(s1):
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    dp = d + len(s1)
    for k in range(len(s1)):
        if k != dp and i1[k] > s1[k]:
            raise RuntimeError(
                f"Size does not match at dimension {k} expected index {list(a.shape)} to be no larger than self "
                f"{list(s)} apart from dimension {dp}"
            )
    bad = a[(a < 0) | (a >= s1[dp])]
    if bad.size:
        raise RuntimeError(f"index {int(bad.flat[0])} is out of bounds for dimension {dp} with size {s1[dp]}")
    return {"dim": d, "index": a.tolist(), "index_shape": tuple(a.shape)}


def _gather_positions(shape, dim, index, index_shape):
    s1 = tuple(shape) or (1,)
    idx = np.asarray(index, dtype=np.int64).reshape(tuple(index_shape))
    i1 = idx.reshape(idx.shape or (1,))
    dp = dim + len(s1)
    strides = _c_strides(s1)
    grids = np.indices(i1.shape, sparse=True) if i1.ndim else []
    pos = i1 * strides[dp]
    for k, grid in enumerate(grids):
        if k != dp:
            pos = pos + grid * strides[k]
    return np.broadcast_to(pos, i1.shape).reshape(idx.shape)


def _gather_call(input, dim, index, *, sparse_grad=False):
    if sparse_grad:
        raise NotImplementedError("gradspec: gather(sparse_grad=True) (a sparse gradient) is not supported")
    return (input,), {"dim": dim, "index": index}


def _gather_params(shapes):
    (s,) = shapes
    nd = len(s)
    return _gather_params_composite()(s, nd)


@functools.cache
def _gather_params_composite():
    # Defined once (Hypothesis parses a composite's source when it is defined: ~1-2 ms, paid per
    # new input shape when the composite was defined inside _gather_params)
    st = _st()

    @st.composite
    def draw(draw, s, nd):
        dim = draw(_any_dim(nd))
        if nd == 0:
            ishape, size = draw(st.sampled_from([(), (1,), (3,)])), 1
        else:
            dp = dim % nd
            size = s[dp]
            ishape = tuple(
                (draw(st.integers(0, 4)) if size else 0) if k == dp else draw(st.integers(0, s[k])) for k in range(nd)
            )
        n = _prod(ishape)
        vals = draw(st.lists(st.integers(0, size - 1), min_size=n, max_size=n)) if n else []
        return {"dim": dim, "index": np.asarray(vals, dtype=np.int64).reshape(ishape).tolist(), "index_shape": ishape}

    return draw


_declare_take(
    "gather",
    _gather_positions,
    saves=True,
    torch=lambda x, dim, index, index_shape: torch().gather(
        x, dim, torch().as_tensor(np.asarray(index, dtype=np.int64).reshape(tuple(index_shape)))
    ),
    torch_name="torch.gather",
    normalize=_gather_norm,
    param_strategy=_gather_params,
    call=_gather_call,
    method=True,
    notes="out[i][j][k] = input[i][index[i][j][k]][k] (dim=1): index has the input's rank, is no larger than it "
    "outside dim, values in [0, size) (no negative wrap, as in torch); duplicates accumulate in the VJP "
    "(scatter_add); saves the index (GatherBackward0). Canonical index: nested list + index_shape",
)


# -- index_select ------------------------------------------------------------------------


def _index_select_norm(shapes, dim, index):
    (s,) = shapes
    a = _int_array(index, None, "index_select(): Expected dtype int32 or int64 for index")
    if a.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    d = norm_dim(dim, len(s))
    if not s and a.size != 1:
        raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got {a.size} value(s)")
    size = s[d] if s else 1
    bad = a[(a < 0) | (a >= size)]
    if bad.size:
        raise RuntimeError(f"INDICES element is out of DATA bounds, id={int(bad.flat[0])} axis_dim={size}")
    return {"dim": d, "index": a.reshape(-1).tolist()}


def _index_select_positions(shape, dim, index):
    s1 = tuple(shape) or (1,)
    base = np.arange(_prod(s1), dtype=np.int64).reshape(s1)
    pos = np.take(base, np.asarray(index, dtype=np.int64), axis=dim)
    return pos.reshape(()) if not shape else pos


def _index_select_params(shapes):
    (s,) = shapes
    nd = len(s)
    return _index_select_params_composite()(s, nd)


@functools.cache
def _index_select_params_composite():
    # Defined once (Hypothesis parses a composite's source when it is defined: ~1-2 ms, paid per
    # new input shape when the composite was defined inside _index_select_params)
    st = _st()

    @st.composite
    def draw(draw, s, nd):
        dim = draw(_any_dim(nd))
        if nd == 0:
            return {"dim": dim, "index": [0]}
        size = s[dim % nd]
        vals = draw(st.lists(st.integers(0, size - 1), min_size=0, max_size=5)) if size else []
        return {"dim": dim, "index": vals}

    return draw


_declare_take(
    "index_select",
    _index_select_positions,
    saves=True,
    torch=lambda x, dim, index: torch().index_select(x, dim, torch().as_tensor(np.asarray(index, dtype=np.int64))),
    torch_name="torch.index_select",
    normalize=_index_select_norm,
    param_strategy=_index_select_params,
    call=lambda input, dim, index: ((input,), {"dim": dim, "index": index}),
    method=True,
    notes="1-D (or 0-d) int index, values in [0, size); duplicates accumulate in the VJP (index_add); a 0-d "
    "input takes a one-element index and stays 0-d; saves the index (IndexSelectBackward0)",
)
