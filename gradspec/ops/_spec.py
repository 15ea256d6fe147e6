"""Back-compat path of :mod:`gradspec.spec.opspec` (the declaration format moved to the spec layer)."""

from __future__ import annotations

from ..spec.opspec import OpSpec, Unsupported, _linear_jvp, align_ranks  # noqa: F401

__all__ = ["OpSpec", "Unsupported", "align_ranks"]
