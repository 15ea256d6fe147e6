"""Where a plain torch function leaves the derivative on purpose or by mistake: ``detach()``, ``register_hook``,
ops run under ``torch.no_grad()`` on tensors that require grad (tryout6 #7).

Torch's autograd applies those exactly as written, so a gradient that differs from the derivative there is the
code's doing, not "torch's autograd is wrong": the diagnosis names them (file and line).  :func:`recording` runs
one call under a pass-through ``TorchFunctionMode`` that notes them; nothing the call computes changes.  Code
inside a custom ``autograd.Function``'s forward (which torch runs under no_grad) is not noted: the Function's own
backward is what is checked there.

Example::

    >>> import torch
    >>> from gradspec._private.torch_cuts import recording
    >>> x = torch.ones(2, requires_grad=True)
    >>> with recording() as cuts:
    ...     y = x + (torch.sin(x) - x).detach()
    >>> cuts[0].split(" at ")[0]
    'detach()'
"""

from __future__ import annotations

import contextlib
import os
import sys

__all__ = ["recording", "words"]

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the gradspec package
_MOST = 4  # notes kept per call (the first ones name the place; more add nothing)


def _user_frame() -> str | None:
    """``file:line (in func)`` of the code that made the call (the innermost frame outside torch), or None where
    that is gradspec's own code, or a custom Function's forward (torch's ``Function.apply`` is on the stack
    between the user's code and here)."""
    f, where = sys._getframe(2), ""
    while f is not None:
        name = f.f_code.co_filename
        if f"{os.sep}torch{os.sep}" in name:
            if name.endswith(os.path.join("autograd", "function.py")) and f.f_code.co_name == "apply":
                return None
        elif not where:
            if os.path.abspath(name).startswith(_HERE):
                return None
            where = f"{os.path.basename(name)}:{f.f_lineno} (in {f.f_code.co_name})"
        f = f.f_back
    return where or None


def _requires_grad(args) -> bool:
    import torch

    for a in args:
        if isinstance(a, torch.Tensor) and a.requires_grad:
            return True
        if isinstance(a, (list, tuple)) and _requires_grad(a):
            return True
    return False


@contextlib.contextmanager
def recording():
    """A list, filled while the block runs, of ``"what at file:line (in func)"`` for each detach / register_hook /
    op under no_grad on a tensor that requires grad (at most a few; the first of each kind)."""
    import torch
    from torch.overrides import TorchFunctionMode

    found: list = []
    detach = {torch.Tensor.detach, torch.Tensor.detach_, torch.detach}

    class _Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if len(found) < _MOST:
                what = None
                if func in detach and _requires_grad(args):
                    what = "detach()"
                elif func is torch.Tensor.register_hook:
                    what = "register_hook"
                elif not torch.is_grad_enabled() and _requires_grad(args):
                    what = "torch.no_grad()"
                where = None if what is None else _user_frame()
                if where and not any(t.split(" at ")[0] == what for t in found):
                    found.append(f"{what} at {where}")
            return func(*args, **(kwargs or {}))

    with _Mode():
        yield found


def words(cuts: list) -> str:
    """The clause naming them, for a cause's summary ("" for none)."""
    if not cuts:
        return ""
    return (f"which leaves the derivative on purpose or by mistake with {', '.join(cuts)}: torch's autograd "
            "applies that as written")
