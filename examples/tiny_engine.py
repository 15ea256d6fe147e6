"""A tiny third-party autodiff engine (micrograd-style scalar Values), verified by gradspec.

The engine stores a tensor as a numpy object array of scalar ``Value`` s; every op builds one
``Value`` per output element with its local derivatives, and ``backward`` runs reverse mode over
the scalar graph.  A thin tensor layer on top gives it PyTorch's backward() semantics, which is
what ``gs.verify_engine`` holds every engine to (CONTRACT §5):

* implicit seed only for outputs of one element (any shape), explicit seeds of exactly the
  output's shape, errors as ``RuntimeError``;
* gradients accumulate into leaves across calls, roots and uses; ``zero_grad`` sets them back
  to ``None``; a leaf no backward reached has ``None``;
* after a backward without ``retain_graph``, ops that saved tensors for their backward (mul,
  exp, tanh, relu: like torch) are freed, and a second backward through them raises.

Run it::

    python examples/tiny_engine.py          # verifies TinyEngine, prints the result, exit 0 if OK

or from the command line of gradspec's Python API::

    gs.verify_engine("tiny_engine:TinyEngine")   # with examples/ on PYTHONPATH
"""

from __future__ import annotations

import math
import sys

import numpy as np


class Value:
    """One scalar of the graph: its value, the Values it was computed from, and d self / d parent."""

    __slots__ = ("data", "parents", "local")

    def __init__(self, data: float, parents: tuple = (), local: tuple = ()):
        self.data = float(data)
        self.parents = parents
        self.local = local

    def __add__(self, other):
        return Value(self.data + other.data, (self, other), (1.0, 1.0))

    def __sub__(self, other):
        return Value(self.data - other.data, (self, other), (1.0, -1.0))

    def __mul__(self, other):
        return Value(self.data * other.data, (self, other), (other.data, self.data))

    def __neg__(self):
        return Value(-self.data, (self,), (-1.0,))

    def exp(self):
        e = math.exp(self.data) if self.data < 709.0 else math.inf
        return Value(e, (self,), (e,))

    def tanh(self):
        t = math.tanh(self.data)
        return Value(t, (self,), (1.0 - t * t,))

    def relu(self):
        return Value(max(self.data, 0.0), (self,), (1.0 if self.data > 0 else 0.0,))


def _obj(shape) -> np.ndarray:
    return np.empty(shape, dtype=object)


class Tensor:
    """An n-d array of Values plus what backward() semantics need at the tensor level."""

    def __init__(self, values: np.ndarray, parents=(), requires_grad=False, saves=False, op="leaf"):
        self.values = values
        self.parents = tuple(parents)
        self.requires_grad = requires_grad
        self.saves = saves  # the op kept tensors for its backward (freed after a backward)
        self.freed = False
        self.op = op
        self.grad: np.ndarray | None = None  # leaves only

    @property
    def shape(self) -> tuple:
        return self.values.shape

    @property
    def is_leaf(self) -> bool:
        return not self.parents


def _elementwise(fn, *arrays) -> np.ndarray:
    arrays = np.broadcast_arrays(*arrays)
    out = _obj(arrays[0].shape)
    for idx in np.ndindex(*out.shape):
        out[idx] = fn(*[a[idx] for a in arrays])
    return out


def _sum(values: np.ndarray, dim: tuple, keepdim: bool) -> np.ndarray:
    nd = values.ndim
    axes = tuple(sorted(d % nd for d in dim)) if (dim and nd) else tuple(range(nd))
    keep = [a for a in range(nd) if a not in axes]
    moved = np.transpose(values, keep + list(axes))
    rows = moved.reshape(tuple(values.shape[a] for a in keep) + (-1,))
    out = _obj(rows.shape[:-1])
    for idx in np.ndindex(*out.shape):
        total = Value(0.0)
        for v in rows[idx]:
            total = total + v
        out[idx] = total
    if keepdim:
        out = out.reshape(tuple(1 if a in axes else values.shape[a] for a in range(nd)))
    return out


class TinyEngine:
    """The gradspec Engine protocol over the scalar engine above."""

    name = "tiny"
    # op name -> (function on Values, saves tensors for backward like torch does)
    OPS = {
        "add": (lambda a, b: a + b, False),
        "sub": (lambda a, b: a - b, False),
        "mul": (lambda a, b: a * b, True),
        "neg": (lambda a: -a, False),
        "exp": (lambda a: a.exp(), True),
        "tanh": (lambda a: a.tanh(), True),
        "relu": (lambda a: a.relu(), True),
    }

    def supports(self, op: str) -> bool:
        return op in self.OPS or op == "sum"

    def leaf(self, value, requires_grad: bool = True) -> Tensor:
        arr = np.asarray(value, dtype=np.float64)
        vals = _obj(arr.shape)
        for idx in np.ndindex(*arr.shape):
            vals[idx] = Value(arr[idx])
        return Tensor(vals, requires_grad=requires_grad)

    def apply(self, op: str, *args: Tensor, **params) -> Tensor:
        rg = any(a.requires_grad for a in args)
        if op == "sum":
            (x,) = args
            out = _sum(x.values, tuple(params.get("dim") or ()), bool(params.get("keepdim", False)))
            saves = False
        else:
            fn, saves = self.OPS[op]
            out = _elementwise(fn, *[a.values for a in args])
        # Like torch, only ops with an input that requires grad are part of the graph.
        return Tensor(out, args if rg else (), requires_grad=rg, saves=saves and rg, op=op)

    def backward(self, tensor: Tensor, gradient=None, retain_graph: bool = False) -> None:
        if not tensor.requires_grad:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
        if gradient is None:
            if tensor.values.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            gradient = np.ones(tensor.shape)
        gradient = np.asarray(gradient, dtype=np.float64)
        if gradient.shape != tensor.shape:
            raise RuntimeError(f"Mismatch in shape: grad_output[0] has a shape of {gradient.shape} and output[0] "
                               f"has a shape of {tensor.shape}.")
        # Tensor level: what this backward traverses (for freeing and for which leaves get a grad).
        order, seen, stack = [], set(), [tensor]
        while stack:
            t = stack.pop()
            if id(t) in seen or not t.requires_grad:
                continue
            seen.add(id(t))
            order.append(t)
            stack.extend(t.parents)
        if any(t.freed and t.saves for t in order):
            raise RuntimeError("Trying to backward through the graph a second time (or directly access saved "
                               "tensors after they have already been freed). Specify retain_graph=True.")
        # Scalar level: reverse mode over the Values of this root.
        grads: dict[int, float] = {}
        topo, visited = [], set()
        for idx in np.ndindex(*tensor.shape):
            v = tensor.values[idx]
            grads[id(v)] = grads.get(id(v), 0.0) + float(gradient[idx])
            self._topo(v, topo, visited)
        for v in reversed(topo):
            g = grads.get(id(v))
            if not g:
                continue
            for p, d in zip(v.parents, v.local, strict=True):
                grads[id(p)] = grads.get(id(p), 0.0) + g * d
        for t in order:
            if t.is_leaf:
                contrib = np.zeros(t.shape)
                for idx in np.ndindex(*t.shape):
                    contrib[idx] = grads.get(id(t.values[idx]), 0.0)
                t.grad = contrib if t.grad is None else t.grad + contrib
            elif not retain_graph:
                t.freed = True

    @staticmethod
    def _topo(root: Value, topo: list, visited: set) -> None:
        stack = [(root, False)]
        while stack:
            v, done = stack.pop()
            if done:
                topo.append(v)
                continue
            if id(v) in visited:
                continue
            visited.add(id(v))
            stack.append((v, True))
            stack.extend((p, False) for p in v.parents)

    def grad(self, leaf: Tensor):
        return None if leaf.grad is None else leaf.grad.copy()

    def zero_grad(self, leaf: Tensor) -> None:
        leaf.grad = None

    def to_numpy(self, tensor: Tensor) -> np.ndarray:
        out = np.zeros(tensor.shape)
        for idx in np.ndindex(*tensor.shape):
            out[idx] = tensor.values[idx].data
        return out


def main() -> int:
    import gradspec as gs

    result = gs.verify_engine(TinyEngine(), seed=0, max_examples=60)
    print(result.summary())
    print("TinyEngine passes verify_engine" if result.ok else "TinyEngine FAILS verify_engine")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
