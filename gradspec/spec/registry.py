"""The op table itself: a name -> OpSpec mapping filled by the family modules (``gradspec.ops``).

Example::

    >>> import gradspec
    >>> from gradspec.spec import registry
    >>> registry.lookup("exp").name
    'exp'
"""

from __future__ import annotations

import difflib

from .opspec import OpSpec

__all__ = ["register", "lookup", "public_names", "all_specs"]

_TABLE: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    if spec.name in _TABLE and not spec.user:
        raise ValueError(f"op {spec.name!r} is declared twice in the op table")
    _TABLE[spec.name] = spec
    return spec


def lookup(name: str) -> OpSpec:
    try:
        return _TABLE[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_TABLE), n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise KeyError(f"no op named {name!r} in the gradspec op table.{hint} See `gradspec ops` for the list.") from None


def public_names() -> list[str]:
    return sorted(n for n, s in _TABLE.items() if not n.startswith("_") and not s.user)


def all_specs() -> dict[str, OpSpec]:
    return _TABLE
