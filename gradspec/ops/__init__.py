"""The op table: one declaration per op drives the engine, the oracles, the strategies and torch.

Example::

    >>> import gradspec as gs
    >>> "matmul" in gs.ops.names()
    True
    >>> gs.ops.get("sum").family
    'reduce'
"""

from __future__ import annotations

from ..spec.opspec import OpSpec, Unsupported
from ..spec.registry import lookup, public_names, register

# Importing the family modules fills the table (each declaration registers itself).
# The order is the table's order (strategies draw ops by their position in it): each split module
# right after the one it was split from.
from . import elementwise, reduce, reduce_stats, shape, indexing, linalg, nn  # noqa: E402,F401  isort: skip

from .user import Op, UserOpError  # noqa: E402

__all__ = ["OpSpec", "Unsupported", "Op", "UserOpError", "names", "get", "register", "specs"]


def names() -> list[str]:
    """Names of the public ops in the table, sorted."""
    return public_names()


def get(name: str) -> OpSpec:
    """The declaration of op ``name`` (table op or registered user op); KeyError with a hint if unknown."""
    return lookup(name)


def specs() -> list[OpSpec]:
    """All public op declarations, sorted by name."""
    return [lookup(n) for n in public_names()]
