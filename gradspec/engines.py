"""The ``Engine`` protocol a third-party autodiff engine implements, and the built-in adapters.

Example::

    >>> import numpy as np, gradspec as gs
    >>> eng = gs.engines.get("reference")
    >>> x = eng.leaf(np.array([1.0, 2.0]))
    >>> y = eng.apply("mul", x, x)
    >>> eng.backward(y, np.ones(2))
    >>> eng.grad(x)
    array([2., 4.])
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from ._private.imports import ImportSpecError, import_object

__all__ = ["Engine", "ReferenceEngine", "TorchEngine", "get", "EngineError"]


class EngineError(ValueError):
    """An engine name or object that cannot be used (the message says why and what to do)."""


@runtime_checkable
class Engine(Protocol):
    name: str

    def supports(self, op: str) -> bool: ...

    def leaf(self, value: np.ndarray, requires_grad: bool = True) -> Any: ...

    def apply(self, op: str, *args: Any, **params: Any) -> Any: ...

    def backward(self, tensor: Any, gradient: np.ndarray | None = None, retain_graph: bool = False) -> None: ...

    def grad(self, leaf: Any) -> np.ndarray | None: ...

    def zero_grad(self, leaf: Any) -> None: ...

    def to_numpy(self, tensor: Any) -> np.ndarray: ...


class ReferenceEngine:
    """gradspec's own reference engine behind the Engine protocol."""

    name = "reference"

    def supports(self, op: str) -> bool:
        from .ops import _registry

        return op in _registry.all_specs() and not op.startswith("_")

    def leaf(self, value, requires_grad=True):
        from . import engine as E

        return E.tensor(np.array(value, copy=True), requires_grad=requires_grad)

    def apply(self, op, *args, **params):
        from . import engine as E

        return E.call(op, *args, **params)

    def backward(self, tensor, gradient=None, retain_graph=False):
        tensor.backward(None if gradient is None else np.asarray(gradient), retain_graph=retain_graph)

    def grad(self, leaf):
        g = leaf.grad
        return None if g is None else np.array(g.numpy(), copy=True)

    def zero_grad(self, leaf):
        leaf.grad = None

    def to_numpy(self, tensor):
        return np.array(tensor.numpy(), copy=True)


class TorchEngine:
    """PyTorch (CPU or CUDA) behind the Engine protocol, using each op's torch mapping."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self.name = f"torch-{device}"

    def _torch(self):
        import torch

        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise EngineError("torch-cuda: torch.cuda.is_available() is False (no CUDA device)")
        return torch

    def supports(self, op: str) -> bool:
        from .ops import _registry

        spec = _registry.all_specs().get(op)
        return spec is not None and not op.startswith("_") and spec.torch is not None

    def leaf(self, value, requires_grad=True):
        torch = self._torch()
        t = torch.from_numpy(np.array(value, copy=True)).to(self.device)
        return t.requires_grad_(True) if requires_grad and t.is_floating_point() else t

    def apply(self, op, *args, **params):
        from . import ops

        spec = ops.get(op)
        shapes = [tuple(a.shape) for a in args]
        return spec.torch(*args, **spec.canonical(shapes, params))

    def backward(self, tensor, gradient=None, retain_graph=False):
        torch = self._torch()
        g = None if gradient is None else torch.from_numpy(np.array(gradient, copy=True)).to(self.device)
        tensor.backward(g, retain_graph=retain_graph)

    def grad(self, leaf):
        return None if leaf.grad is None else leaf.grad.detach().cpu().numpy().copy()

    def zero_grad(self, leaf):
        leaf.grad = None

    def to_numpy(self, tensor):
        return tensor.detach().cpu().numpy().copy()


_BUILTIN = {"reference": ReferenceEngine, "torch-cpu": lambda: TorchEngine("cpu"), "torch-cuda": lambda: TorchEngine("cuda")}
_METHODS = ("supports", "leaf", "apply", "backward", "grad", "zero_grad", "to_numpy")


def get(name_or_engine) -> Engine:
    """A built-in engine by name, a user's engine by ``"package.module:attr"``, or an engine object
    (checked against the protocol)."""
    obj = name_or_engine
    if isinstance(obj, str):
        if obj in _BUILTIN:
            return _BUILTIN[obj]()
        if ":" not in obj:
            raise EngineError(f"unknown engine {obj!r}: use one of {', '.join(_BUILTIN)} or 'package.module:attr'")
        try:
            obj = import_object(obj)
        except ImportSpecError as e:
            raise EngineError(str(e)) from None
        if isinstance(obj, type) or (callable(obj) and not all(hasattr(obj, m) for m in _METHODS)):
            try:
                obj = obj()
            except Exception as e:
                raise EngineError(f"engine factory {name_or_engine!r} raised {type(e).__name__}: {e}") from None
    missing = [m for m in _METHODS if not callable(getattr(obj, m, None))]
    if missing or not isinstance(getattr(obj, "name", None), str):
        what = ", ".join(missing + ([] if isinstance(getattr(obj, "name", None), str) else ["name (a str attribute)"]))
        raise EngineError(
            f"{name_or_engine!r} does not implement the gradspec Engine protocol: missing {what}. "
            "See gradspec.engines.Engine."
        )
    return obj
