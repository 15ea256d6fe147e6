"""``gs.<op>`` functions and Tensor methods, generated from the op table.

Every public op is a function with torch's name and argument names, e.g.
``gs.sum(x, dim=1, keepdim=True)``; ops torch also has as methods are Tensor methods.

Example::

    >>> import numpy as np, gradspec as gs
    >>> x = gs.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    >>> gs.sum(x, dim=1, keepdim=True).shape
    (2, 1)
    >>> x.exp().sum().item() > 0
    True
"""

from __future__ import annotations

import functools
import inspect

from . import engine as _E
from .spec import registry as _registry

__all__: list[str] = []


def _make_function(spec):
    def fn(*args, **kwargs):
        target = spec
        if spec.dispatch is not None:
            name, inputs, params = spec.dispatch(*args, **kwargs)
            target = _registry.lookup(name)
        else:
            inputs, params = spec.call(*args, **kwargs)
        out = _E.apply(target, inputs, params)
        return _E.spec_result(target, out, inputs, params)

    fn.__name__ = fn.__qualname__ = spec.name
    try:
        fn.__signature__ = inspect.signature(spec.dispatch or spec.call)
    except (TypeError, ValueError):
        pass
    fn.__doc__ = f"{spec.torch_name or spec.name} in gradspec's reference engine.\n\n{spec.notes}".strip()
    return fn


def _install() -> None:
    g = globals()
    for name, spec in _registry.all_specs().items():
        if spec.user or spec.call is None:
            continue
        f = _make_function(spec)
        if not name.startswith("_"):
            g[name] = f
            __all__.append(name)
        if spec.method:

            def method(self, *args, _f=f, **kwargs):
                return _f(self, *args, **kwargs)

            method.__name__ = name
            functools.update_wrapper(method, f, assigned=("__doc__",))
            if not hasattr(_E.Tensor, name) or name in ("clone",):
                setattr(_E.Tensor, name, method)


_install()
