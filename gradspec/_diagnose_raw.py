"""What the code under test returns at one node, before any check: the raw gradients of a user op's vjp
or of a torch Function's backward (torch's own validation would sum a gradient of the wrong shape down, or
refuse it, before gradspec sees it), and the causes read from them.

Private to :mod:`gradspec.diagnose`.

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec._diagnose_raw import _split_case
    >>> case = gs.Case.build({"x": np.array([1.0, 2.0])}, [("y", "mul", ["x", "x"], {})], ["y"], [np.ones(2)])
    >>> [l.name for l in _split_case(case, case.nodes[0]).leaves]
    ['x__use0', 'x__use1']
"""

from __future__ import annotations

import numpy as np

from ._diagnose_text import _fmt, _is_engine, _is_torch_function, _where, _whose
from ._private.vjp_patterns import shape_pattern
from .case import Case, Leaf, NodeDef
from .causes import Cause
from .oracles import jacobian as _jac

__all__: list = []


def _split_case(mini, node, every: bool = False) -> Case:
    """``node`` with each input position its own leaf ``<input>__use<k>`` (differentiable as in ``mini``, or
    every float input when ``every``): the gradient of each use of a repeated input, apart."""
    leaves, names = [], []
    for k, i in enumerate(node.inputs):
        src = next(l for l in mini.leaves if l.name == i)
        v = np.array(src.value, copy=True)
        leaves.append(Leaf(f"{i}__use{k}", v, (v.dtype.kind == "f") if every else src.differentiable))
        names.append(f"{i}__use{k}")
    return Case(leaves, [NodeDef(node.name, node.op, names, dict(node.params))], [node.name], list(mini.seeds),
                engine=mini.engine, user_ops=dict(mini.user_ops))


def _returned_shapes(mini, node, spec, suspect, hidden: bool = False) -> Cause | None:
    """The cause when the code under test returns gradients of the wrong shapes, named from the arrays it
    returned before any shape check (a user op's vjp called directly; a torch Function's backward called
    through its graph node, which is what torch's own validation would have refused or silently summed)."""
    if _is_engine(str(suspect)) or not spec.user or (str(suspect).startswith("torch") and not _is_torch_function(spec)):
        return None
    try:
        vals = {l.name: np.asarray(l.value) for l in mini.leaves}
        ins = [vals[i] for i in node.inputs]
        g = np.asarray(mini.seeds[0], dtype=np.float64)
        raw = _raw_grads(spec, ins, mini.evaluate()[node.name], g, node.params)
        if raw is None or not any(r is not None and np.shape(r) != np.shape(x) for r, x in zip(raw, ins)):
            return None
        split = _split_case(mini, node, every=True)
        right = _jac.jacobian(split).vjp
    except Exception:  # noqa: BLE001 - no raw gradients to name: the caller's cause stands
        return None
    want = [right.get(f"{i}__use{k}") for k, i in enumerate(node.inputs)]
    named = shape_pattern(list(node.inputs), raw, want, reducible=_is_torch_function(spec))
    if named is None:
        return None
    pattern, detail = named
    if hidden and str(suspect).startswith("torch"):
        detail += ("; torch's autograd summed the gradient of the wrong shape down to the input's shape without a "
                   "word (it is expandable to it), so it showed as wrong values")
    ev = [f"inputs: {'; '.join(f'{i} {np.shape(x)} = {_fmt(x)}' for i, x in zip(node.inputs, ins))}",
          f"upstream g {g.shape} = {_fmt(g)}"]
    ev += [f"{i}: returned {np.shape(r)} {_fmt(r)} vs J^T·g {np.shape(w)} {_fmt(w)}"
           for i, r, w in zip(node.inputs, raw, want) if r is not None and w is not None]
    return Cause("wrong-vjp", f"{_where(node, spec)}: {_whose(spec, suspect)} returns gradients of the wrong shape — "
                 f"{detail}", node=node.name, op=node.op, evidence="; ".join(ev), pattern=pattern)


def _raw_grads(spec, ins: list, out, g: np.ndarray, params: dict) -> list | None:
    """What the code under test returns for each input position at one node, unchecked (None: not known)."""
    if _is_torch_function(spec) and spec.torch is not None:
        return _torch_raw_grads(spec, ins, g, params)
    fn = getattr(spec, "user_vjp", None)
    if fn is None:
        return None
    with np.errstate(all="ignore"):
        res = fn(np.array(g, copy=True), *[np.array(x, copy=True) for x in ins], np.array(out, copy=True), **params)
    res = (res,) if isinstance(res, np.ndarray) or res is None or np.isscalar(res) else tuple(res)
    if len(res) != len(ins):
        return None
    return [None if r is None else np.asarray(r) for r in res]


def _torch_raw_grads(spec, ins: list, g: np.ndarray, params: dict) -> list | None:
    import torch

    xs = [torch.tensor(np.array(x, dtype=np.float64), requires_grad=True) for x in ins]
    with torch.enable_grad():
        y = spec.torch(*xs, **params)
    fn = getattr(y, "grad_fn", None)
    if not isinstance(y, torch.Tensor) or fn is None or not hasattr(fn, "_forward_cls"):
        return None  # not a custom Function's own output: no unchecked gradients to read
    res = fn.apply(torch.from_numpy(np.array(g, dtype=np.float64).reshape(tuple(y.shape))))
    res = res if isinstance(res, tuple) else (res,)
    # The Function's inputs that need a gradient, in order, are the graph edges that lead somewhere.
    needs = [k for k, b in enumerate(fn.needs_input_grad) if b]
    edges = [e for e, _ in fn.next_functions if e is not None]
    out = [None] * len(xs)
    for k, e in zip(needs, edges):
        var = getattr(e, "variable", None)
        j = next((j for j, x in enumerate(xs) if x is var), None)
        if j is not None and k < len(res) and isinstance(res[k], torch.Tensor):
            out[j] = res[k].detach().numpy().copy()
    return out
