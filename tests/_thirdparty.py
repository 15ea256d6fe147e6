"""Engine-protocol adapters (CONTRACT §4) for two autodiff engines no one here wrote: micrograd
(scalar ``Value`` s, PyPI ``micrograd==0.1.0``) and tinygrad (PyPI ``tinygrad==0.14.0``).

Each adapter is as thin as the engine allows, so what gradspec finds is the engine's own
behaviour: micrograd's ``backward()`` is called on the root ``Value`` itself whenever it can be
(an implicit seed of a one-element root), otherwise on ``sum(seed * out)``; tinygrad tensors are
made with ``Tensor(value)`` and differentiated with ``Tensor.backward(gradient)``.
"""

from __future__ import annotations

import os

import numpy as np


class _MTensor:
    """An n-d numpy object array of micrograd Values."""

    __slots__ = ("values", "requires_grad")

    def __init__(self, values, requires_grad=True):
        self.values = values
        self.requires_grad = requires_grad

    @property
    def shape(self):
        return self.values.shape


def _obj(x, shape):
    a = np.empty(shape, dtype=object)
    a[...] = x if np.shape(x) == tuple(shape) else np.broadcast_to(x, shape)
    return a


class MicrogradEngine:
    """micrograd.engine.Value behind the Engine protocol (elementwise add/sub/mul/neg/square/relu, sum, mean)."""

    name = "micrograd"
    OPS = ("add", "sub", "mul", "neg", "square", "relu", "sum", "mean")

    def __init__(self):
        from micrograd.engine import Value

        self.Value = Value

    def supports(self, op):
        return op in self.OPS

    def leaf(self, value, requires_grad=True):
        v = np.asarray(value, dtype=np.float64)
        out = np.empty(v.shape, dtype=object)
        for idx in np.ndindex(v.shape):
            out[idx] = self.Value(float(v[idx]))
        return _MTensor(out, requires_grad)

    def apply(self, op, *args, **params):
        vs = [a.values for a in args]
        if op in ("add", "sub", "mul"):
            shape = np.broadcast_shapes(*(v.shape for v in vs))
            a, b = (_obj(v, shape) for v in vs)
            out = a + b if op == "add" else a - b if op == "sub" else a * b
        elif op == "neg":
            out = -vs[0]
        elif op == "square":
            out = vs[0] ** 2
        elif op == "relu":
            out = np.vectorize(lambda v: v.relu(), otypes=[object])(vs[0])
        elif op in ("sum", "mean"):
            x = vs[0]
            dim = params.get("dim")
            axes = tuple(range(x.ndim)) if dim in (None, ()) else tuple(np.atleast_1d(dim) % max(x.ndim, 1))
            keep = bool(params.get("keepdim", False))
            n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
            out = np.empty(np.sum(np.zeros(x.shape), axis=axes, keepdims=keep).shape, dtype=object)
            moved = np.moveaxis(x, axes, tuple(range(-len(axes), 0))).reshape(
                tuple(s for i, s in enumerate(x.shape) if i not in axes) + (n,))
            flat = out.reshape(-1) if out.ndim else out.reshape(1)
            for k, row in enumerate(moved.reshape(-1, n)):
                s = sum(row, self.Value(0.0))
                flat[k] = s * (1.0 / n) if op == "mean" else s
        else:
            raise NotImplementedError(op)
        out = np.asarray(out, dtype=object)
        if out.shape == () and not isinstance(out.item(), self.Value):
            out = _obj(out.item(), ())
        return _MTensor(out, any(a.requires_grad for a in args))

    def backward(self, tensor, gradient=None, retain_graph=False):
        vals = tensor.values
        if gradient is None:
            if vals.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            vals.flat[0].backward()  # micrograd's own entry point
            return
        g = np.asarray(gradient, dtype=np.float64)
        if g.shape != vals.shape:
            raise RuntimeError(f"Mismatch in shape: seed {g.shape} vs output {vals.shape}")
        if vals.size == 0:
            return
        loss = sum((v * float(s) for v, s in zip(vals.flat, g.flat)), self.Value(0.0))
        loss.backward()

    def grad(self, leaf):
        if not leaf.requires_grad:
            return None
        return np.array([v.grad for v in leaf.values.flat], dtype=np.float64).reshape(leaf.shape)

    def zero_grad(self, leaf):
        for v in leaf.values.flat:
            v.grad = 0

    def to_numpy(self, tensor):
        return np.array([v.data for v in tensor.values.flat], dtype=np.float64).reshape(tensor.shape)


class TinygradEngine:
    """tinygrad.Tensor behind the Engine protocol.  Without a compiler for its CPU device
    (clang) tinygrad runs on its pure-Python device; ``GRADSPEC_TINYGRAD_DEV`` picks another."""

    name = "tinygrad"
    OPS = ("add", "sub", "mul", "neg", "exp", "tanh", "sin", "sigmoid", "square", "sum", "mean")

    def __init__(self, device: str | None = None):
        from tinygrad import Context, Tensor

        self.Tensor, self.Context = Tensor, Context
        self.device = device or os.environ.get("GRADSPEC_TINYGRAD_DEV", "PYTHON")
        self.no_grad_leaves: set = set()

    def _ctx(self):
        return self.Context(DEV=self.device)

    def supports(self, op):
        return op in self.OPS

    def leaf(self, value, requires_grad=True):
        with self._ctx():
            t = self.Tensor(np.asarray(value, dtype=np.float64))
        if not requires_grad:
            self.no_grad_leaves.add(id(t))
        return t

    def apply(self, op, *args, **params):
        with self._ctx():
            if op in ("add", "sub", "mul"):
                a, b = args
                return a + b if op == "add" else a - b if op == "sub" else a * b
            if op == "neg":
                return -args[0]
            if op == "square":
                return args[0] * args[0]
            if op in ("exp", "tanh", "sin", "sigmoid"):
                return getattr(args[0], op)()
            if op in ("sum", "mean"):
                dim = params.get("dim")
                axis = None if dim in (None, ()) else tuple(np.atleast_1d(dim).tolist())
                return getattr(args[0], op)(axis=axis, keepdim=bool(params.get("keepdim", False)))
        raise NotImplementedError(op)

    def backward(self, tensor, gradient=None, retain_graph=False):
        with self._ctx():
            g = None if gradient is None else self.Tensor(np.asarray(gradient, dtype=np.float64))
            tensor.backward(g)

    def grad(self, leaf):
        if id(leaf) in self.no_grad_leaves or leaf.grad is None:
            return None
        with self._ctx():
            return np.array(leaf.grad.numpy(), dtype=np.float64)

    def zero_grad(self, leaf):
        leaf.grad = None

    def to_numpy(self, tensor):
        with self._ctx():
            return np.array(tensor.numpy(), dtype=np.float64)
