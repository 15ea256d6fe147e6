"""The tensors a user's torch code holds of its own, and their values kept across a check.

A check calls the user's ``fn`` thousands of times.  Where fn holds a module of its own (a closure's or a global's
``nn.BatchNorm1d`` in training mode, a counter buffer), each call updates its buffers: before session 12 a
``verify_torch_function`` run left the user's running statistics averaged over every probe and case, and
``num_batches_tracked`` at 1461.  :func:`kept` finds the modules and tensors fn reaches by name (its closure, the
globals its code names, a bound method's ``self``, a ``functools.partial``'s arguments, a few levels of helper
functions): each module's buffers are copies in the module's place while the check runs (the user's tensor
objects are never written), and any other tensor reached gets its values back when the check ends.  Parameters keep
their values (autograd refuses an in-place change of
one that requires grad); their ``.grad`` is the backward's business (:mod:`gradspec._private.torch_grad`).

Example::

    >>> import torch
    >>> from gradspec._private.torch_owned import kept
    >>> bn = torch.nn.BatchNorm1d(2)
    >>> fn = lambda x: bn(x)
    >>> with kept(fn):
    ...     _ = fn(torch.randn(4, 2))
    >>> float(bn.running_mean.abs().sum()), int(bn.num_batches_tracked)
    (0.0, 0)
"""

from __future__ import annotations

import contextlib
import functools
import types

__all__ = ["kept", "reached", "keeping"]

_DEPTH = 3  # helper functions followed from fn (fn -> helper -> the helper's helper)
_LARGEST = 1 << 24  # elements: a bigger tensor (a data set held in a global) is not copied to be put back


def reached(fn, depth: int = _DEPTH) -> tuple[list, list]:
    """``(modules, tensors)`` fn reaches by name: each ``nn.Module`` (its submodules included), and each tensor
    held outside a module that is not a parameter requiring grad (no duplicates, in the order met)."""
    import torch

    modules: dict = {}
    tensors: dict = {}
    seen: set = set()

    def visit(obj, d: int) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.nn.Module):
            for m in obj.modules():
                modules.setdefault(id(m), m)
        elif isinstance(obj, torch.Tensor):
            if not (isinstance(obj, torch.nn.Parameter) and obj.requires_grad) and obj.numel() <= _LARGEST:
                tensors.setdefault(id(obj), obj)
        elif isinstance(obj, (list, tuple, set, frozenset)) and len(obj) <= 64:
            for x in obj:
                visit(x, d)
        elif isinstance(obj, dict) and len(obj) <= 64:
            for x in obj.values():
                visit(x, d)
        elif d > 0:
            for x in _named(obj):
                visit(x, d - 1)

    visit(fn, depth)
    return list(modules.values()), list(tensors.values())


def _named(obj) -> list:
    """What a callable names: closure cells, the globals its code reads, a bound method's self, a partial's args."""
    if isinstance(obj, functools.partial):
        return [obj.func, *obj.args, *obj.keywords.values()]
    if isinstance(obj, types.MethodType):
        return [obj.__self__, obj.__func__]
    if isinstance(obj, type):  # (Function.apply's class: its forward and backward name the user's globals)
        return [m.__func__ for m in (obj.__dict__.get(k) for k in ("forward", "backward", "setup_context"))
                if isinstance(m, staticmethod)]
    if not isinstance(obj, types.FunctionType) or str(getattr(obj, "__module__", "")).startswith("torch"):
        return []
    found = []
    for cell in obj.__closure__ or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    g = obj.__globals__
    found += [g[n] for n in _names(obj.__code__) if n in g and not isinstance(g[n], types.ModuleType)]
    return found


def _names(code) -> set:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _names(c)
    return names


@contextlib.contextmanager
def kept(*fns):
    """Within: each buffer of a module the callables ``fns`` reach (:func:`reached`) is a copy, in the module's
    place (the user's own tensor object is never written: its values and version stay); each other tensor they
    reach holds the values it held on entry when the block ends (written back only where they changed, through
    ``.data``: no version bump, no autograd)."""
    import torch

    swapped: list = []  # (module, buffer name, the user's tensor)
    copies: dict = {}  # id of a user's buffer -> its copy (a buffer shared by two modules stays one tensor)
    slots: set = set()
    held: list = []
    ids: set = set()
    try:
        for fn in fns:
            if fn is None:
                continue
            modules, tensors = reached(fn)
            for m in modules:
                for name, b in list(m._buffers.items()):
                    if b is not None and b.numel() <= _LARGEST and (id(m), name) not in slots:
                        slots.add((id(m), name))
                        swapped.append((m, name, b))
                        m._buffers[name] = copies.setdefault(id(b), b.detach().clone())
            for t in tensors:
                if id(t) not in ids and id(t) not in copies:
                    ids.add(id(t))
                    held.append((t, t.detach().clone()))
        yield
    finally:
        for m, name, b in swapped:
            m._buffers[name] = b
        for t, v in held:
            now = t.data
            if now.shape != v.shape or now.dtype != v.dtype:
                t.data = v
            elif not torch.equal(now, v):
                now.copy_(v)


def keeping(entry):
    """``entry(fn, ...)`` (a ``verify_*`` entry point) run within :func:`kept` of what it calls of the user's: fn,
    a user op's torch twin, a surrogate."""

    @functools.wraps(entry)
    def run(fn, *args, **kw):
        with kept(fn, getattr(fn, "torch", None), kw.get("surrogate")):
            return entry(fn, *args, **kw)

    return run
