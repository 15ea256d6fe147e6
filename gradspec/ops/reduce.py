"""Reductions over ``dim`` (one dim, a tuple of dims, or all) with ``keepdim``.

Canonical params: ``dim`` is a sorted tuple of *negative* dims (all dims for a full
reduction), so the same params work on arrays with extra leading batch axes.
"""

from __future__ import annotations

import numpy as np

from .. import engine as E
from .._private.dims import norm_dims
from ._common import torch
from ._registry import register
from ._spec import OpSpec

__all__: list[str] = []

call = E.call


def _st():
    from hypothesis import strategies as st

    return st


def dim_params(shapes, *, extra=None):
    """Strategy for {dim, keepdim}: None (all), one dim, or a tuple of dims, positive or negative."""
    st = _st()
    nd = len(shapes[0])
    choices = [st.none()]
    if nd:
        choices.append(st.integers(-nd, nd - 1))
        choices.append(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True).map(tuple))
    base = {"dim": st.one_of(*choices), "keepdim": st.booleans()}
    base.update(extra or {})
    return st.fixed_dictionaries(base)


def _norm_reduce(shapes, dim=None, keepdim=False, **rest):
    return {"dim": norm_dims(dim, len(shapes[0])), "keepdim": bool(keepdim), **rest}


def reduced_shape(shape, dim, keepdim):
    nd = len(shape)
    pos = {d + nd for d in dim}
    if keepdim:
        return tuple(1 if i in pos else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in pos)


def expand_back(g, x, dim, keepdim):
    """Undo a reduction's shape: re-insert reduced dims (size 1) and expand to x's shape."""
    if not keepdim and dim:
        g = call("reshape", g, shape=reduced_shape(x.shape, dim, True))
    return call("expand", g, size=x.shape)


def torch_reduce(fn):
    def run(x, dim, keepdim, **kw):
        if x.ndim == 0 or len(dim) == 0:
            return fn(x, **kw) if x.ndim == 0 else fn(x, dim=tuple(range(x.ndim)), keepdim=keepdim, **kw)
        return fn(x, dim=dim, keepdim=keepdim, **kw)

    return run


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
