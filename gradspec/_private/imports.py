"""Loading user objects named "package.module:attr" (engines, user ops, torch Functions) with clear errors.

Two doors, one mechanism:

* :func:`import_object` loads a path the user gave in code or on the command line (``--engine``,
  ``--ops``, ``gs.engines.get("pkg.mod:engine")``): the user chose to run that code.
* :func:`load_from_case` loads a path read from a case file (``case.json``'s ``engine``, its
  ``user_ops``, a recorded torch Function).  A case file is data: it travels as a CI artifact or a
  bug attachment, and opening one must be as safe as opening any JSON file.  So the module is
  imported (and anything in it called) only when the user allowed it: :func:`allowing` (the
  command line's ``--allow-import MODULE``, ``--engine``, ``--ops``; ``allow_import=`` in Python).
  Otherwise :class:`ImportNotAllowed` names the module and the flag.  Every import of a name taken
  from a case goes through :func:`load_from_case`.

One exception needs no permission: a path whose module is already imported and whose object is
of the expected type (``expect``), e.g. a user op the user's own code defined and imported
before loading the case.  Resolving it runs no new code (the module ran when the user imported it),
and an object of a gradspec type cannot be a stdlib function such as ``os:abort``.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import inspect
import os
import sys

__all__ = ["ImportSpecError", "ImportNotAllowed", "import_object", "load_from_case", "allowing", "allowed_modules",
           "importable_path", "module_of", "cwd_importable", "not_an_op"]


class ImportSpecError(ValueError):
    pass


class ImportNotAllowed(ImportSpecError):
    """A case file names a module the user did not allow; the message names the module and the flag.
    ``reason`` is what callers decide on (the command line's exit 2), never the message's wording."""

    reason = "import-not-allowed"

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self.module = module_of(path)
        self.what = what
        shown = self.module if self.module.isprintable() and len(self.module) <= 200 else repr(self.module[:200])
        super().__init__(
            f"the case file names {what} {path[:300]!r}, which would import module {shown!r}: a case file is data, "
            f"so gradspec imports nothing it names unless you allow it. If you trust this module, pass "
            f"--allow-import {shown} (or name it with --engine / --ops on the command line; in Python: "
            f"allow_import=[{shown!r}])"
        )


_ALLOWED: contextvars.ContextVar[frozenset] = contextvars.ContextVar("gradspec_allowed_imports", default=frozenset())


def cwd_importable() -> None:
    """Make modules in the current working directory importable, as ``python -m`` does: the one way
    ``gradspec`` (every command) and a report's ``repro.py`` find the user's ``mymod`` of
    ``mymod:MyFunction`` when run from the folder that holds it (importing still needs permission
    for names read from a case file: :func:`load_from_case`)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def module_of(path: str) -> str:
    return path.partition(":")[0] if isinstance(path, str) else ""


def allowed_modules() -> frozenset:
    """Modules the user allowed in the current context (a module allows its submodules too)."""
    return _ALLOWED.get()


@contextlib.contextmanager
def allowing(modules):
    """Within the block, :func:`load_from_case` may import ``modules`` (names or ``module:attr`` paths)."""
    add = frozenset(module_of(m) if ":" in m else m for m in (modules or ()) if isinstance(m, str) and m)
    token = _ALLOWED.set(_ALLOWED.get() | add)
    try:
        yield
    finally:
        _ALLOWED.reset(token)


def _permitted(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in _ALLOWED.get())


def _split(path) -> tuple[str, str]:
    if not isinstance(path, str) or path.count(":") != 1:
        raise ImportSpecError(f"{str(path)[:200]!r} is not of the form 'package.module:attr'")
    mod_name, _, attr = path.partition(":")
    parts = mod_name.split(".") + attr.split(".")
    if not all(p.isidentifier() for p in parts):
        raise ImportSpecError(f"{path[:200]!r} is not of the form 'package.module:attr' (dotted Python identifiers)")
    return mod_name, attr


def _getattr_path(obj, attr: str, mod_name: str, path: str):
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportSpecError(f"module {mod_name!r} has no attribute {attr!r} (from {path!r})") from None
    return obj


def import_object(path: str):
    """The object at ``"package.module:attr"``, a path the user gave (not one read from a case file)."""
    mod_name, attr = _split(path)
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise ImportSpecError(
            f"cannot import module {mod_name!r} (from {path!r}): {e}. Is it installed or on PYTHONPATH?"
        ) from None
    return _getattr_path(mod, attr, mod_name, path)


def load_from_case(path, what: str, expect: type | tuple | None = None):
    """The object at ``path``, a name read from a case file; :class:`ImportNotAllowed` unless allowed.

    ``what`` says what the case names ("engine", "user op 'frob'"); ``expect`` the type an object
    already loaded by the user's own code must have to be used without permission.
    """
    mod_name, attr = _split(path)
    if not _permitted(mod_name):
        mod = sys.modules.get(mod_name)
        if mod is None or expect is None:
            raise ImportNotAllowed(path, what)
        obj = mod
        for part in attr.split("."):  # getattr_static: no module __getattr__, property or descriptor runs
            obj = inspect.getattr_static(obj, part, None)
        if not isinstance(obj, expect):
            raise ImportNotAllowed(path, what)
        return obj
    return import_object(path)


def importable_path(obj) -> str | None:
    """``"module:QualName"`` under which ``obj`` (a class or function) can be imported again, or None
    when it was defined inline (in ``__main__``, inside a function) or is not reachable by that name."""
    # an object that wraps the user's function (torch.library.custom_op's CustomOpDef, a functools.wraps
    # decorator) is found under that function's module and name: ``myops:fused_bias_gelu``
    inner = getattr(obj, "_init_fn", None) or getattr(obj, "__wrapped__", None)
    named = obj if isinstance(getattr(obj, "__qualname__", None), str) or inner is None else inner
    mod_name = getattr(named, "__module__", None)
    qual = getattr(named, "__qualname__", None)
    if not mod_name or mod_name == "__main__" or not isinstance(qual, str) or "<" in qual:
        return None
    mod = sys.modules.get(mod_name)
    if mod is None:
        return None
    found = mod
    for part in qual.split("."):
        found = inspect.getattr_static(found, part, None)
        if found is None:
            return None
    return f"{mod_name}:{qual}" if found is obj else None


def not_an_op(path: str, obj) -> str:
    """Why ``obj``, loaded from ``path`` for ``--ops``, is not a gradspec op, and what to use instead
    (a torch Function is checked with ``gs.verify_torch_function``, not by the op-table campaign)."""
    takes = ("--ops takes table op names (add,exp,...) and gs.Op(...) objects as module:attr "
             "(see `gradspec ops`)")
    owner = getattr(obj, "__self__", None)  # Cls.apply is a method bound to the Function class
    fn_cls = owner if isinstance(owner, type) else obj
    try:
        import torch

        is_fn = isinstance(fn_cls, type) and issubclass(fn_cls, torch.autograd.Function)
    except ImportError:  # pragma: no cover - torch is a dependency
        is_fn = False
    if is_fn:
        return (f"{path} is a torch.autograd.Function, not a gradspec op: check its backward with "
                f"gs.verify_torch_function({fn_cls.__name__}.apply) in Python; {takes}")
    what = "a function" if callable(obj) and not isinstance(obj, type) else f"a {type(obj).__name__}"
    return (f"{path} is {what}, not a gradspec op: wrap numpy code in gs.Op(name, forward=..., vjp=...), "
            f"or check a function on torch tensors with gs.verify_torch_function; {takes}")
