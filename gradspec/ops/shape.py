"""Shape ops: views, joins and indexing.  All are linear, so their JVP is their forward."""

from __future__ import annotations

import numpy as np

from .. import engine as E
from ._common import torch
from ._registry import register
from ._spec import OpSpec

__all__: list[str] = []

call = E.call


def _reshape_norm(shapes, shape):
    (s,) = shapes
    shape = tuple(int(v) for v in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    n = int(np.prod(s))
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    if -1 in shape:
        rest = int(np.prod([v for v in shape if v != -1]))
        if rest == 0 or n % rest:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {n}")
        shape = tuple(n // rest if v == -1 else v for v in shape)
    if int(np.prod(shape)) != n:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {n}")
    return {"shape": shape}


def _reshape_call(input, *shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return (input,), {"shape": shape}


register(
    OpSpec(
        name="reshape",
        family="shape",
        arity=1,
        forward=lambda x, shape: np.reshape(x, tuple(shape)),
        batch_params=lambda p, b: {"shape": tuple(b) + tuple(p["shape"])},
        vjp=lambda g, x, *, out, shape: (call("reshape", g, shape=x.shape),),
        linear=True,
        torch=lambda x, shape: torch().reshape(x, shape),
        torch_name="torch.reshape",
        shape_fn=lambda s, shape: tuple(shape) if int(np.prod(s)) == int(np.prod(shape)) else None,
        normalize=_reshape_norm,
        saves=False,
        call=_reshape_call,
        method=True,
    )
)


def _expand_norm(shapes, size):
    (s,) = shapes
    size = tuple(int(v) for v in size)
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
                raise RuntimeError("expand: -1 is not allowed in a leading, non-existing dimension")
            v = s[i - lead]
        out.append(v)
    return {"size": tuple(out)}


def _expand_fwd(x, size, _lead=0):
    # With `_lead` batch axes in front, x's own axes are aligned to the right of `size`.
    missing = len(size) - x.ndim
    if missing > 0:
        x = x.reshape(x.shape[:_lead] + (1,) * missing + x.shape[_lead:])
    return np.broadcast_to(x, tuple(size))


register(
    OpSpec(
        name="expand",
        family="shape",
        arity=1,
        forward=_expand_fwd,
        vjp=lambda g, x, *, out, size: (g,),  # the engine sums g back to x's shape
        linear=True,
        torch=lambda x, size: x.expand(*size),
        torch_name="Tensor.expand",
        shape_fn=lambda s, size: tuple(size) if _expandable(s, size) else None,
        normalize=_expand_norm,
        batch_params=lambda p, b: {"size": tuple(b) + tuple(p["size"]), "_lead": len(b)},
        saves=False,
        call=lambda input, *size: ((input,), {"size": tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)}),
        method=True,
    )
)


def _expandable(s, size):
    try:
        return np.broadcast_shapes(tuple(s), tuple(size)) == tuple(size)
    except ValueError:
        return False
