"""``indices(like)``: int/bool tensors shaped like an example's index, segment id, target or mask, for
``verify_torch_function(..., args={k: gst.indices(example_k)})`` (tryout10 F7: a backward that drops duplicate
indices passed while the example's index, held in every case, had none).

What makes such bugs show is the pattern of values, not their size: a duplicate index (scatter / index_add
backwards), a constant tensor (every row in one segment, an all-False mask), an ignored target.  So each draw uses
few distinct values: either every element keeps the example's value or takes one of 1-3 values drawn for the
whole tensor (duplicates likely), or (about one draw in four) every element is one value; one draw in eight is the
example itself.  Values stay inside the example's observed range [min, max] (or ``low``/``high``, or the listed ``values``): an index outside what
the example used is the caller's error, not a gradient bug.  Shrinking goes to the example's own values
(the first choice 0), so a finding shows the smallest change from the example that still fails.
"""

from __future__ import annotations

import numbers
from typing import Any

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

__all__ = ["indices_strategy", "DESCRIPTION", "SHAPE", "EXAMPLE"]

DESCRIPTION = "_gs_indices"  # the attribute on a strategy that says what it draws (verify's note reads it)
SHAPE = "_gs_indices_shape"  # and the shape it draws (verify holds the float inputs' axes of those sizes)
EXAMPLE = "_gs_indices_example"  # and its example (verify probes fn's shapes there, never at a random draw)
# One choice of 0..7 per draw: 0 the example itself (the shortest choice sequence, so where shrinking ends: a
# shrinker prefers fewer choices, and a constant tensor took two), 1..5 a few shared values, 6..7 (about one draw in
# four) the whole tensor one value
_KIND = 7
_CONSTANT = 6


def _bounds(flat: list, is_bool: bool, low, high, values, dtype) -> tuple[Any, str]:
    """(a strategy for one value, the words for the note)."""
    import torch

    if values is not None:
        vals = sorted({bool(v) if is_bool else int(v) for v in values})
        if not vals:
            raise InvalidArgument("indices(values=[]) lists no value; give at least one")
        if not is_bool:
            info = torch.iinfo(dtype)
            if vals[0] < info.min or vals[-1] > info.max:
                raise InvalidArgument(f"indices(values=...) has {vals[0] if vals[0] < info.min else vals[-1]}, "
                                      f"outside {dtype}'s range [{info.min}, {info.max}]")
        return st.sampled_from(vals), f"values from {vals}"
    if is_bool:
        return st.booleans(), "values False/True (all-True, all-False and mixed)"
    lo = min(flat) if low is None else low
    hi = max(flat) if high is None else high
    for name, v in (("low", lo), ("high", hi)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise InvalidArgument(f"indices({name}={v!r}) must be an int")
    lo, hi = int(lo), int(hi)
    info = torch.iinfo(dtype)  # (review15b #2: high=300 on uint8 crashed inside the draw, low=-1 wrapped to 255)
    for name, v in (("low", lo), ("high", hi)):
        if not info.min <= v <= info.max:
            raise InvalidArgument(f"indices({name}={v}) is outside {str(dtype).removeprefix('torch.')}'s range "
                                  f"[{info.min}, {info.max}]: pass a value the example's dtype can hold")
    if lo > hi:
        raise InvalidArgument(f"indices(low={lo}) is larger than high={hi}: pass low <= high (the range of index "
                              "values to draw; by default the example's [min, max])")
    return st.integers(lo, hi), f"values in [{lo}, {hi}]"


def indices_strategy(like, low=None, high=None, values=None):
    """See :func:`gradspec.strategies.indices`."""
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is a dependency of verify_torch_function
        raise InvalidArgument("indices() draws torch tensors: torch is not installed") from e
    if not isinstance(like, torch.Tensor):
        raise InvalidArgument(f"indices(like) takes the example's int or bool tensor, got {type(like).__name__}")
    if like.is_floating_point() or like.is_complex():
        raise InvalidArgument(f"indices(like) takes an int or bool tensor, got a {like.dtype} (float) one: a float "
                              "tensor argument is differentiated and drawn already")
    shape, dtype = tuple(like.shape), like.dtype
    is_bool = dtype == torch.bool
    flat = like.detach().cpu().reshape(-1).tolist()
    if not flat and values is None and (low is None or high is None):
        one, words = st.just(False if is_bool else 0), "no values (an empty tensor)"
    else:
        one, words = _bounds(flat, is_bool, low, high, values, dtype)

    @st.composite
    def draw(d):
        if not flat:
            return like.detach().cpu().clone()
        kind = d(st.integers(0, _KIND))
        if kind == 0:
            return like.detach().cpu().clone()
        if kind >= _CONSTANT:  # the whole tensor one value (one segment, an all-False mask)
            out = [d(one)] * len(flat)
        else:  # each element: 0 = the example's value (where shrinking goes), k = the k-th of a few shared values
            pool = d(st.lists(one, min_size=1, max_size=3))
            out = [v if c == 0 else pool[c - 1] for v, c in zip(flat, d(st.lists(
                st.integers(0, len(pool)), min_size=len(flat), max_size=len(flat))), strict=True)]
        return torch.tensor(out, dtype=dtype).reshape(shape)

    s = draw()
    setattr(s, SHAPE, shape)
    setattr(s, EXAMPLE, like.detach().cpu().clone())
    setattr(s, DESCRIPTION, f"{str(dtype).replace('torch.', '')} tensors of shape {shape}, {words}")
    return s
