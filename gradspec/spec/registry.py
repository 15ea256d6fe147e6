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

__all__ = ["register", "lookup", "public_names", "all_specs", "register_resolver", "resolve"]

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


# Turning what a case file names for a user op into an OpSpec when it is not one already (a torch
# Function recorded by verify_torch_function): upper layers register the conversion here.
_RESOLVERS: list = []


def register_resolver(fn) -> None:
    """Have ``fn(name, obj, node, meta) -> OpSpec | None`` turn a case file's user-op object into an op."""
    if fn not in _RESOLVERS:
        _RESOLVERS.append(fn)


def resolve(name: str, obj, node, meta=None) -> OpSpec | None:
    for fn in _RESOLVERS:
        spec = fn(name, obj, node, meta or {})
        if spec is not None:
            return spec
    return None
