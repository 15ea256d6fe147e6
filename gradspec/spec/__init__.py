"""The bottom of the op machinery: the declaration format (:class:`OpSpec`) and the op table.

Everything above (the engine, the op families, the oracles, the strategies) reads ops from here;
``gradspec.ops`` fills the table and is what users import (``gs.ops.get``, ``gs.ops.OpSpec``).

Example::

    >>> import gradspec
    >>> from gradspec.spec import OpSpec, lookup
    >>> isinstance(lookup("mul"), OpSpec)
    True
"""

from __future__ import annotations

from .opspec import OpSpec, Unsupported, align_ranks
from .registry import all_specs, lookup, public_names, register

__all__ = ["OpSpec", "Unsupported", "align_ranks", "register", "lookup", "public_names", "all_specs"]
