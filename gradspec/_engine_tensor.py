"""The engine's data: ``Tensor`` (a numpy array with autograd metadata, torch's tensor API) and ``Node``
(one recorded op application, torch's ``grad_fn``).  Part of the engine layer: ``gradspec.engine``
applies ops, runs the backward pass and binds its entry points here (:func:`_bind`) when it is imported,
so a tensor's operators and ``backward()`` run through the engine without this module importing it.

Example::

    >>> import gradspec as gs
    >>> from gradspec._engine_tensor import Tensor
    >>> x = gs.tensor([1.0, 2.0], requires_grad=True)
    >>> isinstance(x, Tensor), x.is_leaf, (x * 2).grad_fn.name()
    (True, True, 'MulBackward0')
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np

from ._private import dtypes as _dt

__all__ = ["Tensor", "Node", "MSG_NONLEAF_GRAD"]

_SEQ = itertools.count()  # nodes' creation order (torch's sequence numbers: the backward order)

# torch appends "(Triggered internally at <C++ file>:<line>.)" to this warning; that suffix names a file
# of torch's build, so gradspec keeps the sentence and drops the location.
MSG_NONLEAF_GRAD = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad attribute won't be "
    "populated during autograd.backward(). If you indeed want the .grad field to be populated for a non-leaf "
    "Tensor, use .retain_grad() on the non-leaf Tensor. If you access the non-leaf Tensor by mistake, make sure "
    "you access the leaf Tensor instead. See github.com/pytorch/pytorch/pull/30531 for more information."
)

# gradspec.engine's entry points (installed by _bind when the engine is imported).
call = None  # call(op name, *inputs, **params) -> Tensor
_backward = None  # engine.backward
_grad_enabled = None  # engine.is_grad_enabled


def _bind(call_fn, backward_fn, grad_enabled_fn) -> None:
    """Install the engine's ``call``, ``backward`` and ``is_grad_enabled`` (what a tensor's operators,
    ``backward()`` and in-place updates run)."""
    global call, _backward, _grad_enabled
    call, _backward, _grad_enabled = call_fn, backward_fn, grad_enabled_fn


# --------------------------------------------------------------------------------------
# Nodes
# --------------------------------------------------------------------------------------


class Node:
    """One recorded op application: the backward function of its output (torch's grad_fn)."""

    __slots__ = ("spec", "inputs", "params", "out", "seq", "freed", "__weakref__")

    def __init__(self, spec, inputs, params, out):
        self.spec = spec
        self.inputs = inputs
        self.params = params
        self.out = out
        self.seq = next(_SEQ)
        self.freed = False

    @property
    def saves(self) -> bool:
        """Whether the backward reads saved tensors (a freed node then refuses to run again); asked only
        of a freed node."""
        return self.spec.saves_tensors(self.params)

    def name(self) -> str:
        return _node_name(self.spec.name, self.spec.user)

    @property
    def next_functions(self):
        return tuple((t.grad_fn, i) for i, t in enumerate(self.inputs))

    def __repr__(self) -> str:
        return f"<{self.name()} object at {id(self):#x}>"


def _node_name(op_name: str, user: bool = False) -> str:
    # torch names backward nodes of built-in ops "MulBackward0" and those of a custom
    # autograd.Function "<ClassName>Backward" (no number); a user op plays the custom Function's role.
    base = "".join(part[:1].upper() + part[1:] for part in op_name.strip("_").split("_"))
    return f"{base}Backward" if user else f"{base}Backward0"


# --------------------------------------------------------------------------------------
# Tensor
# --------------------------------------------------------------------------------------


class Tensor:
    """A numpy array with autograd metadata. Create with :func:`tensor`.

    Example::

        >>> import gradspec as gs
        >>> x = gs.tensor([1.0, 2.0], requires_grad=True)
        >>> (x * x).sum().backward()
        >>> x.grad.numpy()
        array([2., 4.])
    """

    __slots__ = ("data", "_requires_grad", "grad_fn", "_grad", "_retains_grad", "__weakref__")
    __array_priority__ = 1000  # numpy defers `ndarray * Tensor` to Tensor.__rmul__

    def __init__(self, data: np.ndarray, requires_grad: bool = False, _grad_fn: Node | None = None):
        self.data = data
        self._requires_grad = bool(requires_grad) or _grad_fn is not None
        self.grad_fn = _grad_fn
        self._grad: Tensor | None = None
        self._retains_grad = False

    # -- metadata ----------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self.data.shape

    def size(self, dim: int | None = None):
        return self.data.shape if dim is None else self.data.shape[dim]

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def dim(self) -> int:
        return self.data.ndim

    def numel(self) -> int:
        return int(self.data.size)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        # torch's attribute setter refuses ANY change on a non-leaf (even to True, with the short
        # sentence), unlike requires_grad_() which accepts True as a no-op (reference 6.6).
        if not self.is_leaf:
            raise RuntimeError(_MSG_NONLEAF_FLAG if not value else _MSG_NONLEAF_FLAG.split(" If ")[0])
        if value and not _dt.is_differentiable_dtype(self.dtype):
            raise RuntimeError("only Tensors of floating point and complex dtype can require gradients")
        self._requires_grad = bool(value)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if requires_grad and not _dt.is_differentiable_dtype(self.dtype):
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        if not self.is_leaf and not requires_grad:
            raise RuntimeError(_MSG_NONLEAF_FLAG)
        if self.is_leaf:
            self._requires_grad = bool(requires_grad)
        return self

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    def retain_grad(self) -> None:
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if not self.is_leaf:
            self._retains_grad = True

    @property
    def grad(self) -> "Tensor | None":
        if not self.is_leaf and not self._retains_grad and self._grad is None:
            warnings.warn(MSG_NONLEAF_GRAD, UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        if value is None:
            self._grad = None
            return
        if not isinstance(value, Tensor):
            raise TypeError(
                f"assigned grad expected to be a Tensor or None but got grad of type {type(value).__name__}"
            )
        # torch checks the dtype before the shape (a wrong shape AND dtype reports the dtype).
        if value.dtype != self.dtype:
            raise RuntimeError(
                f"attempting to assign a gradient with dtype '{_dt.c_name(value.dtype)}' to a tensor with grad_dtype "
                f"'{_dt.scalar_type(self.dtype)}'. The gradient must match the tensor's grad_dtype (defaults to the "
                "tensor's dtype). You can set the tensor's grad_dtype attribute with a specific dtype, or None to "
                "allow any dtype. Set grad_dtype with caution. Diverging the dtypes of a tensor and its gradient may "
                "break downstream systems that assume they match."
            )
        if value.shape != self.shape:
            raise RuntimeError(
                f"attempting to assign a gradient of size '{_dt.list_repr(value.shape)}' to a tensor of size "
                f"'{_dt.list_repr(self.shape)}'. Please ensure that the gradient and the tensor are the same size"
            )
        self._grad = value

    @grad.deleter
    def grad(self) -> None:
        self._grad = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset ``.grad`` (to None, or zero in place like ``Optimizer.zero_grad(set_to_none=False)``)."""
        if set_to_none or self._grad is None:
            self._grad = None
        else:
            self._grad.data[...] = 0

    # -- data access -------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        return self.data

    def item(self):
        if self.data.size != 1:
            raise RuntimeError(f"a Tensor with {self.data.size} elements cannot be converted to Scalar")
        return self.data.reshape(()).item()

    def tolist(self):
        return self.data.tolist()

    def detach(self) -> "Tensor":
        return Tensor(self.data)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.data, dtype=dtype)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __bool__(self) -> bool:
        if self.data.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.data.reshape(()))

    def __float__(self) -> float:
        return float(self.item())

    def __repr__(self) -> str:
        body = np.array2string(self.data, separator=", ", prefix="tensor(")
        extra = []
        if self.dtype != np.float64:
            extra.append(f"dtype={_dt.torch_repr(self.dtype)}")
        if self.grad_fn is not None:
            extra.append(f"grad_fn=<{self.grad_fn.name()}>")
        elif self._requires_grad:
            extra.append("requires_grad=True")
        return "tensor(" + ", ".join([body] + extra) + ")"

    __hash__ = object.__hash__

    # -- autograd ----------------------------------------------------------------------
    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None) -> None:
        """Accumulate ``J^T . gradient`` into the ``.grad`` of every leaf (``Tensor.backward``)."""
        _backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    # -- operators -----------------------------------------------------------------------
    def __add__(self, other):
        return call("add", self, other)

    def __radd__(self, other):
        return call("add", other, self)

    def __sub__(self, other):
        return call("sub", self, other)

    def __rsub__(self, other):
        return call("sub", other, self)

    def __mul__(self, other):
        return call("mul", self, other)

    def __rmul__(self, other):
        return call("mul", other, self)

    def __truediv__(self, other):
        return call("div", self, other)

    def __rtruediv__(self, other):
        return call("div", other, self)

    def __pow__(self, other):
        return call("pow", self, other)

    def __rpow__(self, other):
        return call("pow", other, self)

    def __matmul__(self, other):
        return call("matmul", self, other)

    def __rmatmul__(self, other):
        return call("matmul", other, self)

    def __neg__(self):
        return call("neg", self)

    def __pos__(self):
        return self

    def __abs__(self):
        return call("abs", self)

    def __getitem__(self, index):
        return call("index", self, index=index)

    # Comparisons are not differentiable: they return bool tensors (no graph), as in torch.
    def _cmp(self, other, fn):
        o = other.data if isinstance(other, Tensor) else other
        return Tensor(np.asarray(fn(self.data, o)))

    def __gt__(self, other):
        return self._cmp(other, np.greater)

    def __ge__(self, other):
        return self._cmp(other, np.greater_equal)

    def __lt__(self, other):
        return self._cmp(other, np.less)

    def __le__(self, other):
        return self._cmp(other, np.less_equal)

    def eq(self, other):
        return self._cmp(other, np.equal)

    def ne(self, other):
        return self._cmp(other, np.not_equal)

    @property
    def T(self):
        return call("permute", self, dims=tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self):
        if self.ndim == 0:
            warnings.warn(
                "Tensor.mT is deprecated on 0-D tensors. This function is the identity in these cases.",
                UserWarning,
                stacklevel=2,
            )
            return self
        if self.ndim == 1:
            raise RuntimeError("tensor.mT is only supported on matrices or batches of matrices. Got 1-D tensor.")
        return call("transpose", self, dim0=-2, dim1=-1)

    def t(self):
        if self.ndim > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
        # torch records a TBackward0 node even for 0-d and 1-d inputs (the result is not a leaf).
        return call("transpose", self, dim0=0, dim1=-1)

    def clone(self):
        return call("clone", self)

    def to(self, dtype):
        return call("_cast", self, dtype=np.dtype(dtype).name)

    def double(self):
        return self.to(np.float64)

    def float(self):
        return self.to(np.float32)

    def view(self, *shape):
        return self.reshape(*shape)

    def add_(self, other):
        return self._inplace(np.add, other)

    def mul_(self, other):
        return self._inplace(np.multiply, other)

    def zero_(self):
        return self._inplace(lambda a, b: np.zeros_like(a), 0)

    def _inplace(self, fn, other):
        # Only what optimizers need: in-place updates of leaves under no_grad (reference 6.7b).
        if self.is_leaf and self._requires_grad and _grad_enabled():
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
        if not self.is_leaf and _grad_enabled():
            raise RuntimeError("gradspec's reference engine does not record in-place ops on non-leaf tensors")
        o = other.data if isinstance(other, Tensor) else other
        self.data[...] = fn(self.data, o)
        return self


_MSG_NONLEAF_FLAG = (
    "you can only change requires_grad flags of leaf variables. If you want to use a computed variable in a "
    "subgraph that doesn't require differentiation use var_no_grad = var.detach()."
)
