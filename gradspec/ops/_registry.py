"""Back-compat path of :mod:`gradspec.spec.registry` (the op table moved to the spec layer)."""

from __future__ import annotations

from ..spec.registry import _TABLE, all_specs, lookup, public_names, register  # noqa: F401

__all__ = ["register", "lookup", "public_names", "all_specs"]
