"""Canonical forms of ``dim`` arguments: negative ints, so a leading batch axis never shifts them; and the axes a
gradient is summed over down to a broadcast input's shape (:func:`summed_to`)."""

from __future__ import annotations

from typing import Iterable

import numpy as np


def norm_dim(dim: int, ndim: int, *, name: str = "dim") -> int:
    """One dim as a negative index into a rank-``ndim`` array (a 0-d array counts as rank 1)."""
    n = max(ndim, 1)
    d = int(dim)
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
    return d - n if d >= 0 else d


def norm_dims(dim, ndim: int) -> tuple[int, ...]:
    """``None`` -> all dims; an int or a sequence -> sorted unique negative dims."""
    if dim is None:
        return tuple(range(-ndim, 0))
    if isinstance(dim, Iterable) and not isinstance(dim, (str, bytes)):
        dims = [norm_dim(d, ndim) for d in dim]
        if len(set(dims)) != len(dims):
            raise RuntimeError(f"dim {tuple(dim)} appears multiple times in the list of dims")
        if len(dims) == 0:  # torch: an empty dim list reduces everything
            return tuple(range(-ndim, 0))
        return tuple(sorted(dims))
    if ndim == 0:
        norm_dim(dim, ndim)
        return ()
    return (norm_dim(dim, ndim),)


def pos_dims(dims: Iterable[int], ndim: int) -> tuple[int, ...]:
    return tuple(d + ndim if d < 0 else d for d in dims)


def summed_to(grad, shape) -> np.ndarray | None:
    """``grad`` summed, keeping its rank, over the axes along which an input of ``shape`` was broadcast to
    ``grad.shape`` (the leading ones, and those where ``shape`` has 1 and ``grad`` does not); None when ``shape``
    has the larger rank.  The one reduction behind ``gradspec.ops.user.sum_to`` (which raises on a mismatch) and
    the diagnosis' ``vjp_patterns._sum_to`` (which returns None).

    >>> summed_to(np.ones((2, 3)), (3,)).tolist()
    [[2.0, 2.0, 2.0]]
    """
    grad = np.asarray(grad)
    lead = grad.ndim - len(shape)
    if lead < 0:
        return None
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and grad.shape[lead + i] != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad
