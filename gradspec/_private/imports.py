"""Loading user objects named "package.module:attr" (engines, user ops) with clear errors."""

from __future__ import annotations

import importlib


class ImportSpecError(ValueError):
    pass


def import_object(path: str):
    if not isinstance(path, str) or ":" not in path:
        raise ImportSpecError(f"{path!r} is not of the form 'package.module:attr'")
    mod_name, _, attr = path.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise ImportSpecError(
            f"cannot import module {mod_name!r} (from {path!r}): {e}. Is it installed or on PYTHONPATH?"
        ) from None
    obj = mod
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportSpecError(f"module {mod_name!r} has no attribute {attr!r} (from {path!r})") from None
    return obj
