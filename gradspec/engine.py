"""The reference engine: numpy arrays, reverse mode, PyTorch 2.13's ``backward()`` semantics.

Everything an op needs is in its table declaration (``gradspec.ops``); this module is the
part that is the same for every op: building nodes, seed creation and validation
(torch's ``_make_grads``), the backward loop with torch's node order, reduction of
broadcast gradients to each input's exact shape, dtype casts, accumulation into ``.grad``,
freeing of saved buffers, ``inputs=``, ``retain_grad`` and ``autograd.grad``.

Example::

    >>> import numpy as np, gradspec as gs
    >>> x = gs.tensor(np.ones((2, 3)), requires_grad=True)
    >>> a = gs.tensor(np.ones((3, 4)))
    >>> out = x @ a
    >>> out.backward(np.array([[1., 2, 3, 4], [5, 6, 7, 8]]))
    >>> x.grad.numpy()
    array([[10., 10., 10.],
           [26., 26., 26.]])
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import inspect
import numbers
import warnings
from typing import Any, Sequence

import numpy as np

from . import _engine_tensor
from ._engine_tensor import MSG_NONLEAF_GRAD, Node, Tensor  # noqa: F401 - the engine's API (MSG_NONLEAF_GRAD)
from ._private import backward_plan as _plan
from ._private import dtypes as _dt
from .spec import registry as _registry
from .spec.opspec import set_applier as _set_applier

__all__ = [
    "DtypeMismatchError",
    "Tensor",
    "tensor",
    "backward",
    "grad",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    "call",
    "MSG_FREED",
    "MSG_IMPLICIT",
    "MSG_NONLEAF_GRAD",
    "MSG_CREATE_GRAPH",
]

MSG_IMPLICIT = "grad can be implicitly created only for scalar outputs"
MSG_FREED = (
    "Trying to backward through the graph a second time (or directly access saved tensors after they have "
    "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
    "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or if "
    "you need to access saved tensors after calling backward."
)
# torch appends "(Triggered internally at <C++ file>:<line>.)" to this warning (and to MSG_NONLEAF_GRAD); that
# suffix names a file of torch's build, so gradspec keeps the sentence and drops the location.
MSG_CREATE_GRAPH = (
    "Using backward() with create_graph=True will create a reference cycle between the parameter and its gradient "
    "which can cause a memory leak. We recommend using autograd.grad when creating the graph to avoid this. If you "
    "have to use this function, make sure to reset the .grad fields of your parameters to None after use to break "
    "the cycle and avoid the leak."
)

_GRAD_ENABLED = True
_FP_QUIET = False  # set by _quiet_fp(): numpy FP errors are already ignored, apply() need not say so again


class _QuietFP:
    """Ignore numpy floating-point errors for a whole run of engine calls (one ``np.errstate``).

    ``apply`` otherwise enters ``np.errstate(all="ignore")`` around every op's forward (torch does
    not warn on inf/nan either); that context costs about a microsecond, a sizeable part of a small
    op.  The oracles run whole under one context.  (A class, not a generator context manager: this
    is entered on every oracle call, and @contextmanager's machinery costs as much as the errstate.)
    """

    __slots__ = ("_ctx",)

    def __enter__(self):
        global _FP_QUIET
        if _FP_QUIET:
            self._ctx = None
            return None
        self._ctx = np.errstate(all="ignore")
        self._ctx.__enter__()
        _FP_QUIET = True
        return None

    def __exit__(self, *exc):
        global _FP_QUIET
        if self._ctx is not None:
            _FP_QUIET = False
            self._ctx.__exit__(*exc)
        return False


def _quiet_fp() -> _QuietFP:
    return _QuietFP()


def is_grad_enabled() -> bool:
    return _GRAD_ENABLED


class set_grad_enabled(contextlib.ContextDecorator):
    """Context manager / decorator that sets grad mode (like ``torch.set_grad_enabled``)."""

    def __init__(self, mode: bool) -> None:
        self.mode = bool(mode)
        self._prev: list[bool] = []

    def __enter__(self):
        global _GRAD_ENABLED
        self._prev.append(_GRAD_ENABLED)
        _GRAD_ENABLED = self.mode
        return self

    def __exit__(self, *exc):
        global _GRAD_ENABLED
        _GRAD_ENABLED = self._prev.pop()
        return False


class no_grad(set_grad_enabled):
    """Ops inside record no graph (``torch.no_grad``)."""

    def __init__(self) -> None:
        super().__init__(False)


class enable_grad(set_grad_enabled):
    def __init__(self) -> None:
        super().__init__(True)




def tensor(data, requires_grad: bool = False, dtype=None) -> Tensor:
    """Make a leaf tensor (``torch.tensor``). Python floats become float64 (gradspec's default).

    Example::

        >>> import gradspec as gs
        >>> gs.tensor([1.0, 2.0], requires_grad=True).requires_grad
        True
    """
    if isinstance(data, Tensor):
        data = data.data
    arr = np.array(data, dtype=dtype, copy=True)
    if dtype is None and arr.dtype == np.float16:
        arr = arr.astype(np.float32)
    if requires_grad and not _dt.is_differentiable_dtype(arr.dtype):
        raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")
    return Tensor(arr, requires_grad=requires_grad)


def _as_tensor(x, like: Tensor | None = None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    t = type(x)  # (Python floats and ints, the common case in VJP rules, without the ABC isinstance below)
    if t is float or t is int or t is bool or (isinstance(x, (bool, numbers.Number)) and not isinstance(x, np.ndarray)):
        # A Python scalar takes the tensor operand's dtype (torch's "wrapped number" rule),
        # so float32 tensors stay float32; with no tensor operand it is float64.
        if like is not None and like.data.dtype.kind in "fc":  # (_dt.is_differentiable_dtype)
            return Tensor(np.asarray(x, dtype=like.data.dtype))
        return Tensor(np.asarray(x, dtype=np.float64 if isinstance(x, float) else None))
    return Tensor(np.asarray(x))


# --------------------------------------------------------------------------------------
# Applying an op
# --------------------------------------------------------------------------------------


def call(name: str, *inputs, **params) -> Tensor:
    """Apply table op ``name`` to tensors ``inputs`` with ``params`` (the engine's one entry point)."""
    spec = _OP_TABLE.get(name)  # (registry.lookup, which explains a miss, only for a miss)
    return apply(_registry.lookup(name) if spec is None else spec, inputs, params)


_OP_TABLE = _registry.all_specs()  # (the table itself: ops registered later are in it too)


def apply(spec, inputs: Sequence[Any], params: dict) -> Tensor:
    if type(inputs) is not tuple:
        inputs = tuple(inputs)
    for x in inputs:
        if type(x) is not Tensor:
            inputs = _as_tensors(inputs)
            break
    if spec.arity is not None and len(inputs) != spec.arity:
        raise TypeError(f"{spec.name}() takes {spec.arity} tensor input(s) but {len(inputs)} were given")
    arrays = [t.data for t in inputs]
    if spec.user:
        params = spec.canonical([a.shape for a in arrays], params)
    elif spec.normalize is None:
        params = dict(params) if params else {}  # (OpSpec.canonical of an op without a normalizer: a copy)
    else:
        params = _canonical(spec, [a.shape for a in arrays], params)
    if len(arrays) > 1:
        dt = arrays[0].dtype
        for a in arrays:
            if a.dtype is not dt:  # (one dtype, the common case: nothing to promote or refuse)
                if _mixed(spec, arrays):
                    if spec.family == "elementwise":
                        arrays = _dt.promote(spec, arrays)
                    elif spec.same_dtype:
                        _dt.same_dtype(spec, arrays)
                break
    try:
        if _FP_QUIET:
            data = spec.forward(*arrays, **params)
        else:
            with np.errstate(all="ignore"):
                data = spec.forward(*arrays, **params)
    except Exception as e:
        if spec.user:
            raise RuntimeError(
                f"user op {spec.name!r}: forward raised {type(e).__name__}: {e} "
                f"(input shapes {[tuple(a.shape) for a in arrays]}, params {params})"
            ) from e
        raise
    if type(data) is not np.ndarray:  # (np.asarray of an ndarray is the array itself)
        data = np.asarray(data)
    if spec.user and data.dtype.kind == "f":
        data = _dt.keep_float_dtype(spec, arrays, data)
    if data.base is not None or not data.flags.writeable:
        # Views of inputs would let later in-place accumulation or user edits alias an input.
        data = data.copy()
    out = Tensor(data)
    if _GRAD_ENABLED:  # (spec.input_differentiable, inlined: apply runs for every op of every VJP rule)
        diff = spec.differentiable
        for i, t in enumerate(inputs):
            if t._requires_grad and (diff is None or diff[i]):
                if data.dtype.kind in "fc":  # integer/bool outputs never require grad (reference 1.8)
                    out.grad_fn = Node(spec, inputs, params, out)
                    out._requires_grad = True
                break
    return out


def _mixed(spec, arrays: list) -> bool:
    """Whether ``apply`` must promote (elementwise ops) or refuse (``same_dtype`` ops) these operands' dtypes.
    An elementwise op's non-differentiable operands (``where``'s mask) take no part in promotion: when its
    differentiable operands share one dtype, ``_dt.promote`` would return them unchanged."""
    elementwise = spec.family == "elementwise"
    if not elementwise and not spec.same_dtype:
        return False
    diff = spec.differentiable if elementwise else None
    dt = None
    for i, a in enumerate(arrays):
        if diff is not None and not diff[i]:
            continue
        if dt is None:
            dt = a.dtype
        elif a.dtype is not dt and a.dtype != dt:
            return True
    return False


def _as_tensors(inputs: tuple) -> tuple:
    like = None
    for x in inputs:
        if isinstance(x, Tensor):
            like = x
            break
    return tuple([_as_tensor(x, like) for x in inputs])


# ``OpSpec.canonical`` of a table op, remembered per (op, input shapes, params): normalizing dims and
# checking params costs 0.2-1.4 us an op (an ABC isinstance check in norm_dims alone is ~0.4 us), paid by
# every op of every forward and of every VJP rule, with the same few shapes and params over and over.
# Only params of plain immutable values are keys (a list, an array, a slice is normalized every time, and
# so is anything a normalizer might warn about); ints, bools, floats and strings are told apart by type
# (1, 1.0 and True are equal keys in a dict), and NaN and signed zeros are never keys (NaN != NaN; -0.0 ==
# 0.0).  A result holding anything mutable is not kept; each caller gets its own copy of the dict.
_CANON: dict = {}
_CANON_MAX = 4096
_KEY_SCALARS = (int, bool, str, type(None))


def _params_key(params: dict):
    key = []
    for k, v in params.items():
        t = type(v)
        if t in _KEY_SCALARS:
            key.append((k, t, v))
        elif t is float:
            if v != v or v == 0.0:
                return None
            key.append((k, t, v))
        elif t is tuple:
            for e in v:
                if type(e) is not int:
                    return None
            key.append((k, t, v))
        else:
            return None
    return tuple(key)


def _canonical(spec, shapes, params: dict) -> dict:
    pk = _params_key(params)
    if pk is None:
        return spec.canonical(shapes, params)
    key = (spec, tuple(shapes), pk)
    got = _CANON.get(key)
    if got is None:
        got = spec.canonical(shapes, params)
        if _params_key(got) is None:
            return got
        if len(_CANON) >= _CANON_MAX:
            _CANON.clear()
        _CANON[key] = got
    return dict(got)


_set_applier(apply)  # calling an OpSpec on tensors (spec layer) runs it here
DtypeMismatchError = _dt.DtypeMismatchError  # torch's dtype rules live in _private.dtypes


# --------------------------------------------------------------------------------------
# backward / grad
# --------------------------------------------------------------------------------------


def _tuple(x) -> tuple:
    if x is None:
        return ()
    if isinstance(x, (Tensor, np.ndarray)):
        return (x,)
    if isinstance(x, dict):
        return tuple(x.values())
    return tuple(x)


def _seeds_tuple(grad_tensors, n: int) -> tuple:
    # torch's _tensor_or_tensors_to_tuple: None -> (None,)*n; a tensor -> (t,); else tuple(x)
    # (so a bare float fails with "'float' object is not iterable", as in torch).
    if grad_tensors is None:
        return (None,) * n
    if isinstance(grad_tensors, (Tensor, np.ndarray)):
        return (grad_tensors,)
    return tuple(grad_tensors)


def _make_seeds(outputs: Sequence[Tensor], grads: Sequence[Any]) -> list:
    """torch.autograd._make_grads, rule for rule (semantics reference §0, §1, §2)."""
    new = []
    # zip truncates: extra seeds are silently dropped, too few are reported later (reference 2.12).
    for i, (out, g) in enumerate(zip(outputs, grads, strict=False)):
        if isinstance(g, np.ndarray):
            g = Tensor(g)
        if isinstance(g, Tensor):
            if out.data.shape != g.data.shape:
                raise RuntimeError(
                    f"Mismatch in shape: grad_output[{i}] has a shape of {_dt.size_repr(g.shape)} and output[{i}] "
                    f"has a shape of {_dt.size_repr(out.shape)}."
                )
            if (out.data.dtype.kind == "c") != (g.data.dtype.kind == "c"):  # (_dt.is_complex of each)
                raise RuntimeError(
                    "For complex Tensors, both grad_output and output are required to have the same dtype. "
                    f"Mismatch in dtype: grad_output[{i}] has a dtype of {_dt.torch_repr(g.dtype)} and output[{i}] "
                    f"has a dtype of {_dt.torch_repr(out.dtype)}."
                )
            new.append(g)
        elif g is None:
            if out._requires_grad:
                if out.data.size != 1:
                    raise RuntimeError(MSG_IMPLICIT)
                if out.data.dtype.kind != "f":  # (_dt.is_float)
                    raise RuntimeError(
                        "grad can be implicitly created only for real scalar outputs but got "
                        + _dt.torch_repr(out.dtype)
                    )
                new.append(Tensor(np.ones(out.data.shape, out.data.dtype)))  # (one element: ones_like's layout is moot)
            else:
                new.append(None)
        else:
            raise TypeError("gradients can be either Tensors or None, but got " + type(g).__name__)
    return new


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None) -> None:
    """``torch.autograd.backward``: accumulate ``sum_i J_i^T . grad_tensors[i]`` into leaves' ``.grad``.

    Example::

        >>> import numpy as np, gradspec as gs
        >>> x = gs.tensor([1.0, 2.0], requires_grad=True)
        >>> gs.backward([x * 2, x * 3], [np.ones(2), np.ones(2)])
        >>> x.grad.numpy()
        array([5., 5.])
    """
    # The order of the checks is torch's: empty `inputs`, then the seeds (_make_grads), then in
    # _run the roots and the inputs; a failing check must report the same error as torch.
    if inputs is not None:
        inputs_t = _tuple(inputs)
        if len(inputs_t) == 0:
            raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    else:
        inputs_t = ()
    roots = _tuple(tensors)
    seeds = _make_seeds(roots, _seeds_tuple(grad_tensors, len(roots)))
    if retain_graph is None:
        retain_graph = create_graph
    _run(roots, seeds, retain_graph, create_graph, targets=inputs_t or None, capture=False)


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph=False,
    allow_unused=None,
    materialize_grads=False,
) -> tuple:
    """``torch.autograd.grad``: return ``J^T . grad_outputs`` for ``inputs``; never touches ``.grad``.

    Example::

        >>> import gradspec as gs
        >>> x = gs.tensor(3.0, requires_grad=True)
        >>> (g,) = gs.grad(x ** 3, x, create_graph=True)
        >>> g.item(), gs.grad(g, x)[0].item()
        (27.0, 18.0)
    """
    if materialize_grads and allow_unused is False:
        raise ValueError(
            "Expected allow_unused to be True or not passed when materialize_grads=True, but got: allow_unused=False."
        )
    if allow_unused is None:
        allow_unused = materialize_grads
    outs = _tuple(outputs)
    ins = _tuple(inputs)
    if len(ins) == 0:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    seeds = _make_seeds(outs, _seeds_tuple(grad_outputs, len(outs)))
    if retain_graph is None:
        retain_graph = create_graph
    got = _run(outs, seeds, retain_graph, create_graph, targets=ins, capture=True)
    # As in torch, an unused input is reported only after the whole backward ran (and freed).
    result = []
    for i, t in enumerate(ins):
        g = got.get(id(t))
        if g is None:
            if not allow_unused:
                raise RuntimeError(
                    f"The differentiated Tensor at index {i} appears to not have been used in the graph. "
                    "Set allow_unused=True if this is the desired behavior."
                )
            if materialize_grads:
                g = Tensor(np.zeros_like(t.data))
        result.append(g)
    return tuple(result)


def _reduce_to(g: Tensor, inp: Tensor, node: Node | None, index: int) -> Tensor:
    """Sum a broadcast gradient down to ``inp``'s exact shape and cast it to ``inp``'s dtype.

    This is the one place where broadcasting is undone (torch's ``validate_outputs``), so no
    VJP rule has to do it.
    """
    shape = inp.data.shape
    if g.data.shape != shape:
        lead = g.ndim - len(shape)
        ok = lead >= 0 and all(s == 1 or s == gs_ for s, gs_ in zip(shape, g.shape[lead:], strict=True))
        if not ok:
            who = f"Function {node.name()}" if node is not None else "Function"
            raise RuntimeError(
                f"{who} returned an invalid gradient at index {index} - got {_dt.list_repr(g.shape)} but expected "
                f"shape compatible with {_dt.list_repr(shape)}"
            )
        dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1)
        if dims:
            g = call("sum", g, dim=dims, keepdim=True)
        if g.shape != shape:
            g = call("reshape", g, shape=shape)
    dt = inp.data.dtype
    if g.data.dtype is not dt and g.data.dtype != dt and dt.kind in "fc":  # (_dt.is_differentiable_dtype)
        g = call("_cast", g, dtype=dt.name)
    return g


def _accumulate(t: Tensor, g: Tensor, create_graph: bool) -> None:
    """AccumulateGrad (a leaf): first write is a fresh buffer, later writes add in place (§4)."""
    dt = t.data.dtype
    if g.data.dtype is not dt and g.data.dtype != dt:
        g = call("_cast", g, dtype=dt.name)
    if t._grad is None:
        if create_graph and g.requires_grad:
            t._grad = call("clone", g)
        else:
            # A copy: the incoming gradient may be the caller's own seed (reference 4.10).
            t._grad = Tensor(np.array(g.data, copy=True))
    elif create_graph:
        t._grad = call("add", t._grad, g)
    else:
        buf = t._grad.data
        if not buf.flags.writeable:
            t._grad.data = buf = buf.copy()
        with np.errstate(all="ignore"):  # inf + -inf is nan, silently, as in torch
            np.add(buf, g.data, out=buf)


def _retain(t: Tensor, g: Tensor) -> None:
    """torch's retain_grad hook on a non-leaf: first a clone, later ``grad = grad + g`` OUT of
    place (a new object each time, unlike a leaf's in-place AccumulateGrad; reference 6.2)."""
    if g.dtype != t.dtype:
        g = call("_cast", g, dtype=t.dtype.name)
    t._grad = call("clone", g) if t._grad is None else call("add", t._grad, g)


def _run(roots, seeds, retain_graph: bool, create_graph: bool, targets, capture: bool) -> dict:
    """The backward loop (torch's ``run_backward`` + ``Engine::execute``).

    ``targets``: restrict to these tensors (``backward(inputs=)``, or ``grad``'s inputs when
    ``capture``: then gradients are returned, not accumulated).
    """
    if len(roots) != len(seeds):
        raise RuntimeError(f"got {len(roots)} tensors and {len(seeds)} gradients")
    for i, r in enumerate(roots):
        if not r.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
    # Then the inputs, in order.  backward() calls retain_grad() on each of them: a tensor without
    # grad fails there, and a non-leaf input keeps retaining its grad afterwards (even if a later
    # input fails); its .grad is filled by that retain mechanism (reference 7.2, 7.4b).
    for t in targets or ():
        if capture:
            if not t.requires_grad:
                raise RuntimeError("One of the differentiated Tensors does not require grad")
        else:
            t.retain_grad()
    if create_graph and not capture:
        warnings.warn(MSG_CREATE_GRAPH, UserWarning, stacklevel=4)
    plan = _plan.plan(roots, targets, capture)
    target_ids = None if targets is None else {id(t) for t in targets}
    global _GRAD_ENABLED
    prev = _GRAD_ENABLED
    _GRAD_ENABLED = create_graph  # (set_grad_enabled(create_graph), without the context object)
    try:
        return _execute(plan, roots, seeds, retain_graph, create_graph, target_ids, capture)
    finally:
        _GRAD_ENABLED = prev


def _execute(plan, roots, seeds, retain_graph: bool, create_graph: bool, target_ids, capture: bool) -> dict:
    """Run ``plan`` (``_private.backward_plan``): seed the roots, then every node in torch's order."""
    captured: dict[int, Tensor] = {}
    pending: dict[int, Tensor] = {}  # id(node) -> its incoming gradient so far
    leaf_pending: dict[int, tuple[Tensor, Tensor]] = {}  # id(leaf) -> (leaf, its gradient so far)
    edges, deps, leaf_deps = plan.edges, plan.deps, plan.leaf_deps
    executes, evaluates = plan.executes, plan.evaluates  # (None: every node)
    for r, s in zip(roots, seeds, strict=True):
        dt = r.data.dtype
        if s.data.dtype is not dt and s.data.dtype != dt:
            s = call("_cast", s, dtype=dt.name) if s._requires_grad else Tensor(s.data.astype(dt))
        fn = r.grad_fn
        if fn is None:
            _to_leaf(leaf_pending, r, s)
        else:
            prev = pending.get(id(fn))
            pending[id(fn)] = s if prev is None else call("add", prev, s)
    if leaf_pending:
        for key in [k for k in leaf_pending if leaf_deps.get(k, 0) == 0]:
            _flush_leaf(leaf_pending, key, target_ids, capture, captured, create_graph)

    # torch's ready queue: highest sequence number first among nodes whose consumers ran.
    ready = [(-n.seq, id(n), n) for n in plan.root_nodes if deps[id(n)] == 0]
    if len(ready) > 1:
        heapq.heapify(ready)
    queued = {item[1] for item in ready}
    while ready:
        _, key, node = heapq.heappop(ready)
        g = pending.pop(key, None)
        ne = edges[key]
        if g is not None:
            if evaluates is None or key in evaluates:
                out = node.out
                if capture and id(out) in target_ids:
                    captured[id(out)] = g
                if out._retains_grad:
                    _retain(out, g)
            if executes is None or key in executes:
                if node.freed and node.saves:
                    raise RuntimeError(MSG_FREED)
                grads = _call_vjp(node, g, create_graph)
                for i, t in ne:
                    gi = grads[i]
                    if gi is None:
                        continue
                    gi = _reduce_to(gi, t, node, i)
                    fn = t.grad_fn
                    if fn is None:
                        _to_leaf(leaf_pending, t, gi)
                    else:
                        prev = pending.get(id(fn))
                        pending[id(fn)] = gi if prev is None else call("add", prev, gi)
                if not retain_graph:
                    node.freed = True
        for _, t in ne:
            c = t.grad_fn
            if c is None:
                k = id(t)
                left = leaf_deps[k] = leaf_deps[k] - 1
                if left == 0:
                    _flush_leaf(leaf_pending, k, target_ids, capture, captured, create_graph)
                continue
            k = id(c)
            left = deps[k] = deps[k] - 1
            if left == 0 and k not in queued:
                queued.add(k)
                heapq.heappush(ready, (-c.seq, k, c))
    return captured


def _to_leaf(leaf_pending: dict, t: Tensor, g: Tensor) -> None:
    prev = leaf_pending.get(id(t))
    leaf_pending[id(t)] = (t, g if prev is None else call("add", prev[1], g))


def _flush_leaf(leaf_pending: dict, key: int, target_ids, capture: bool, captured: dict, create_graph: bool) -> None:
    # The leaf's AccumulateGrad runs (torch gives it the highest priority: right away).
    item = leaf_pending.pop(key, None)
    if item is None:
        return
    if target_ids is not None and key not in target_ids:
        return
    if capture:
        captured[key] = item[1]
    else:
        _accumulate(item[0], item[1], create_graph)


def _call_vjp(node: Node, g: Tensor, create_graph: bool) -> list:
    spec = node.spec
    try:
        grads = spec.vjp(g, *node.inputs, out=node.out, **node.params)
    except Exception as e:
        if spec.user and not str(e).startswith(f"user op {spec.name!r}"):
            raise RuntimeError(f"user op {spec.name!r}: vjp raised {type(e).__name__}: {e}") from e
        raise
    if type(grads) is not tuple and (isinstance(grads, (Tensor, np.ndarray)) or grads is None):
        grads = (grads,)
    grads = list(grads)
    if len(grads) != len(node.inputs):
        raise RuntimeError(
            f"function {node.name()} returned an incorrect number of gradients "
            f"(expected {len(node.inputs)}, got {len(grads)})"
        )
    for i, gi in enumerate(grads):
        if gi is not None and type(gi) is not Tensor and not isinstance(gi, Tensor):
            arr = np.asarray(gi)
            if not _dt.is_differentiable_dtype(arr.dtype) and arr.dtype != np.bool_ and not np.issubdtype(
                arr.dtype, np.integer
            ):
                raise RuntimeError(
                    f"function {node.name()} returned a gradient of type {type(gi).__name__} at index {i}"
                    + (f" (user op {spec.name!r}, input {i})" if spec.user else "")
                )
            grads[i] = Tensor(arr)
    return grads


# Tensor methods for every table op that torch has as a method are attached by
# gradspec.functional once the op table has loaded.
def _make_method(spec):
    @functools.wraps(spec.call)
    def method(self, *args, **kwargs):
        inputs, params = spec.call(self, *args, **kwargs)
        out = apply(spec, inputs, params)
        return spec_result(spec, out, inputs, params)

    method.__name__ = spec.name
    return method


def spec_result(spec, out, inputs, params):
    post = getattr(spec, "post", None)
    return out if post is None else post(out, inputs, params)


def _signature_of(spec):
    try:
        return inspect.signature(spec.call)
    except (TypeError, ValueError):
        return None


_engine_tensor._bind(call, backward, is_grad_enabled)  # a tensor's operators and backward() run here
