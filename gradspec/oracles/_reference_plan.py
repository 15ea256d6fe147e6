"""The reference oracle's forward and backward replayed from its structure's plan: the engine's work, without
re-deriving per call what the structure fixes.

``engine.apply`` + ``engine.backward`` on a case's graph do, per call: look every op up, canonicalize its params,
build a ``Node`` per op, check the seeds, walk the graph for the backward plan (``_private.backward_plan``),
run torch's ready queue, and for every gradient check its shape and dtype against its input.  For one
structure the op specs, the canonical params (``engine._canonical``: a function of op, input shapes and params),
the order in which nodes run and which input each gradient flows into are the same on every call: they are
worked out on the first call of a structure and kept in its plan (``_plan.Plan.reference``); which tensors
require grad is computed afresh on every call (as ``apply`` does) and the backward order is kept per pattern.

Exactly the engine's arithmetic, in the engine's order: the same ``spec.forward`` and VJP rule calls with the
same arguments (rules run with grad mode off, as in ``backward``), gradients summed into a node or leaf in the
order they arrive (torch's ready queue: highest sequence number first), each reduced by ``engine._reduce_to``
where its shape or dtype is not its input's, the leaf's result a fresh copy (``engine._accumulate``).  So the
gradients are bit for bit the engine's (``benchmarks/verdict_equality.py``; ``tests/test_oracle_plans.py``).

From a structure's ``straightline.COMPILE_AFTER``-th call on, ``_forward`` and ``_loop`` run as straight-line code
generated once per structure (forward) and per schedule (backward) by ``_private.straightline``: the same calls
with the same arguments in the same order, each position a local variable instead of a list slot.

Whatever this path does not replay goes to the engine (:func:`vjp` returns None, or the run is abandoned
before anything is returned, and the engine runs it from the start): grad mode off around the oracle; an
engine function replaced (tests corrupt the engine on purpose: their mutants must reach the oracle); operands
of mixed dtypes (promotion or refusal); seeds that ``_make_seeds`` would refuse or a root without grad (the
engine's own error); a root listed twice (the ready queue then visits its node twice); a rule returning a
non-tensor.  An exception of an op's forward or VJP rule propagates as it does from the engine (the same
call, at the same point of the same sequence).
"""

from __future__ import annotations

import heapq

import numpy as np

from .. import engine as E
from .._engine_tensor import Tensor, _node_name
from .._private import straightline as _straight

__all__ = ["vjp"]

# The engine functions this path stands for: when one is replaced (a test's mutant, check's rounding-noise
# re-run), the engine runs instead.
_HOOKS = ("apply", "backward", "_make_seeds", "_run", "_execute", "_call_vjp", "_reduce_to", "_accumulate",
          "_to_leaf", "_flush_leaf", "_retain", "_canonical")
_ORIGINAL = tuple(E.__dict__[name] for name in _HOOKS)
_NODE_INIT = E.Node.__init__

_RAW, _DYN = "raw", "dynamic"  # a node's params: the case's own (no normalizer) / canonicalized on every call



class _Abandon(Exception):
    """Something this path does not replay: the engine runs the case instead."""


class _RefPlan:
    """``canon``: per node, its canonical params (a dict), ``_RAW``, ``_DYN`` or None (not seen yet);
    ``cand``: per node, the positions of its inputs the op is differentiable in; ``orders``: the backward
    schedule per requires-grad pattern."""

    __slots__ = ("canon", "cand", "orders", "calls", "forward", "backwards", "named")

    def __init__(self, p) -> None:
        self.canon = [None] * len(p.specs)
        self.cand = []
        for spec, ins in zip(p.specs, p.inputs):
            if spec.arity is not None and len(ins) != spec.arity:
                raise _Abandon  # (apply's own TypeError)
            diff = spec.differentiable
            self.cand.append(tuple(j for i, j in enumerate(ins) if diff is None or diff[i]))
        self.orders: dict = {}
        self.calls = 0
        self.forward = None  # (the straight-line forward, once generated)
        self.backwards: dict = {}  # (the straight-line backward per schedule, once generated)
        self.named = [_Named(spec) for spec in p.specs]


def _intact() -> bool:
    # (functions compare by identity: one C-level tuple comparison)
    return tuple(map(E.__dict__.get, _HOOKS)) == _ORIGINAL and E.Node.__init__ is _NODE_INIT


def vjp(case, p):
    """``ReferenceOracle.vjp`` of ``case`` (plan ``p``), or None where the engine must run it (module docstring).
    Runs inside ``oracle_call`` (FP errors ignored)."""
    if not E._GRAD_ENABLED or not _intact():
        return None
    rp = p.reference
    if rp is None:
        try:
            rp = p.reference = _RefPlan(p)
        except _Abandon:
            p.reference = False
            return None
    elif rp is False:
        return None
    rp.calls = calls = rp.calls + 1
    try:
        fwd = rp.forward
        if fwd is None and calls >= _straight.COMPILE_AFTER:
            fwd = _compile_forward(p, rp)
        ts, rg, params = fwd(case.leaves, case.nodes) if fwd else _forward(case, p, rp)
        return _backward(case, p, rp, ts, rg, params, calls >= _straight.COMPILE_AFTER)
    except _Abandon:
        return None


def _compile_forward(p, rp):
    """``_forward`` of this structure as straight-line code, once every node's params are known (False where
    some node's are not yet: the loop runs and fills them)."""
    how = []
    for c in rp.canon:
        if c is None:
            return None
        how.append(("raw",) if c is _RAW else ("dyn",) if c is _DYN else ("const", c))
    rp.forward = _straight.forward_function(
        p.specs, how, p.inputs, rp.cand, p.nleaves,
        {"Tensor": Tensor, "array": np.array, "asarray": np.asarray, "ndarray": np.ndarray, "Abandon": _Abandon,
         "mixed": E._mixed, "params": _params, "canon": rp.canon})
    return rp.forward


def _forward(case, p, rp):
    """The leaves and every node's output as engine tensors (what ``build_engine_graph`` makes, without Nodes),
    whether each requires grad, and each node's params as its op got them."""
    ts = []
    rg = []
    used = []
    datas = []  # (each tensor's array, by position: no attribute lookups in the loop)
    for leaf in case.leaves:
        a = np.array(leaf.value, copy=True)
        t = Tensor(a)
        t._requires_grad = d = bool(leaf.differentiable)
        ts.append(t)
        rg.append(d)
        datas.append(a)
    canon, cand, nodes = rp.canon, rp.cand, case.nodes
    get = datas.__getitem__
    for k, (spec, ins) in enumerate(zip(p.specs, p.inputs)):
        arrays = list(map(get, ins))
        if len(arrays) > 1:
            dt = arrays[0].dtype
            for a in arrays:
                if a.dtype is not dt:
                    if E._mixed(spec, arrays):
                        raise _Abandon  # (promotion or refusal: apply's)
                    break
        params = canon[k]
        if type(params) is not dict:
            params = _params(spec, arrays, nodes[k].params, canon, k)
        used.append(params)
        data = spec.forward(*arrays, **params)
        if type(data) is not np.ndarray:
            data = np.asarray(data)
        if data.base is not None or not data.flags.writeable:
            data = data.copy()  # (apply's: no view of an input)
        t = Tensor(data)
        r = False
        if data.dtype.kind in "fc":  # (integer/bool outputs never require grad)
            for j in cand[k]:
                if rg[j]:
                    r = t._requires_grad = True
                    break
        ts.append(t)
        rg.append(r)
        datas.append(data)
    return ts, rg, used


def _params(spec, arrays, raw: dict, canon: list, k: int) -> dict:
    """Node ``k``'s params as ``apply`` passes them; what it may keep for the structure goes into ``canon``."""
    how = canon[k]
    if how is _RAW:
        return raw
    if spec.normalize is None:
        canon[k] = _RAW  # (apply passes a copy of the params: the op reads them as keywords)
        return raw
    params = E._canonical(spec, [a.shape for a in arrays], raw)
    if how is None:
        # kept only where _canonical keeps it too (plain params in and out: a function of the structure)
        canon[k] = params if E._params_key(raw) is not None and E._params_key(params) is not None else _DYN
    return params


def _seeds(case, p, ts) -> list:
    """The roots' seeds as ``backward`` makes them (``_make_seeds``, then the cast to the root's dtype)."""
    seeds = case.seeds
    if len(seeds) != len(p.roots):
        raise _Abandon
    out = []
    for s, r in zip(seeds, p.roots):
        root = ts[r].data
        if s is None:
            if root.size != 1 or root.dtype.kind != "f":
                raise _Abandon
            out.append(Tensor(np.ones(root.shape, root.dtype)))
            continue
        a = np.array(s, copy=True)
        if a.shape != root.shape or (a.dtype.kind == "c") != (root.dtype.kind == "c"):
            raise _Abandon
        dt = root.dtype
        if a.dtype is not dt and a.dtype != dt:
            a = a.astype(dt)
        out.append(Tensor(a))
    return out


def _backward(case, p, rp, ts, rg, used, straight: bool) -> dict:
    key = bytes(rg)
    order = rp.orders.get(key)
    if order is None:
        order = rp.orders[key] = _order(p, rp, rg)
    if order is False:
        raise _Abandon
    seeds = _seeds(case, p, ts)
    bwd = rp.backwards.get(key) if straight else None
    if bwd is None and straight:
        bwd = rp.backwards[key] = _straight.backward_function(
            order, p.roots, p.grad_leaves, len(ts), {"rule": _rule, "reduce_to": E._reduce_to, "add": _add})
    prev_mode = E._GRAD_ENABLED
    E._GRAD_ENABLED = False  # (backward without create_graph: the rules' ops record nothing)
    try:
        if bwd is not None:
            got = bwd(ts, used, seeds, rp.named)
        else:
            got = _loop(ts, used, seeds, p, order, rp.named)
    finally:
        E._GRAD_ENABLED = prev_mode
    out = {}
    leaves = case.leaves
    for i, g in zip(p.grad_leaves, got):
        if g is not None:
            dt = ts[i].data.dtype
            if g.data.dtype is not dt and g.data.dtype != dt:
                g = E.call("_cast", g, dtype=dt.name)
            g = np.array(g.data, copy=True)  # (_accumulate's fresh buffer)
        out[leaves[i].name] = g
    return out


def _loop(ts, used, seeds, p, order, named) -> list:
    """The backward over ``order`` (grad mode off): the gradient reaching each differentiable leaf, or None."""
    pending = [None] * len(ts)  # per position: its incoming gradient so far
    for s, r in zip(seeds, p.roots):
        pending[r] = s  # (no root twice: see _order)
    tensor = ts.__getitem__
    for k, pos, spec, ins, edges in order:
        g = pending[pos]
        if g is None:
            continue
        pending[pos] = None
        grads = _rule(spec, g, list(map(tensor, ins)), ts[pos], used[k])
        for i, j in edges:
            gi = grads[i]
            if gi is None:
                continue
            inp = ts[j].data
            d = gi.data
            if d.shape != inp.shape or d.dtype is not inp.dtype:
                gi = E._reduce_to(gi, ts[j], named[k], i)
            prev = pending[j]
            pending[j] = gi if prev is None else _add(prev, gi)
    return [pending[i] for i in p.grad_leaves]


def _rule(spec, g, inputs, out, params) -> list:
    """``engine._call_vjp`` for a table op: its rule's gradients, one per input, tensors or None."""
    grads = spec.vjp(g, *inputs, out=out, **params)
    if type(grads) is not tuple:
        grads = (grads,) if isinstance(grads, (Tensor, np.ndarray)) or grads is None else list(grads)
    if len(grads) != len(inputs):
        raise _Abandon  # (the engine's error)
    for gi in grads:
        if gi is not None and type(gi) is not Tensor:
            raise _Abandon  # (converted, or refused, by the engine)
    return grads


def _add(a: Tensor, b: Tensor) -> Tensor:
    """``engine.call("add", a, b)`` with grad mode off; operands of one dtype and shape add directly."""
    x, y = a.data, b.data
    if x.dtype is not y.dtype or x.shape != y.shape:
        return E.call("add", a, b)
    d = E._OP_TABLE["add"].forward(x, y)
    return Tensor(d if type(d) is np.ndarray else np.asarray(d))


class _Named:
    """What ``_reduce_to`` reads of a node: its name, for its error message."""

    __slots__ = ("spec",)

    def __init__(self, spec) -> None:
        self.spec = spec

    def name(self) -> str:
        return _node_name(self.spec.name, self.spec.user)


def _order(p, rp, rg):
    """The engine's backward schedule for this requires-grad pattern: [(node index, its position, spec, input
    positions, [(input index, input position)] of the inputs gradients flow into)] in the order
    ``engine._execute`` runs them, or False when this path does not replay it."""
    nleaves = p.nleaves
    roots = p.roots
    if len(set(roots)) != len(roots) or not all(rg[r] for r in roots):
        return False  # (a root twice; a root without grad: the engine's own error)
    edges = {}
    deps = {}
    stack = [r - nleaves for r in roots if r >= nleaves]
    root_nodes = list(stack)
    while stack:  # (backward_plan.plan: each reached node expanded once, each edge counted once)
        k = stack.pop()
        if k in edges:
            continue
        diff = p.specs[k].differentiable
        ne = []
        for i, j in enumerate(p.inputs[k]):
            if rg[j] and (diff is None or diff[i]):
                ne.append((i, j))
                if j >= nleaves:
                    c = j - nleaves
                    deps[c] = deps.get(c, 0) + 1
                    if c not in edges:
                        stack.append(c)
        edges[k] = ne
        deps.setdefault(k, 0)
    # torch's ready queue (engine._execute): highest sequence number (here: node index) first
    ready = [(-k, k) for k in root_nodes if deps[k] == 0]
    heapq.heapify(ready)
    queued = {k for _, k in ready}
    order = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append((k, nleaves + k, p.specs[k], p.inputs[k], edges[k]))
        for _, j in edges[k]:
            if j >= nleaves:
                c = j - nleaves
                deps[c] -= 1
                if deps[c] == 0 and c not in queued:
                    queued.add(c)
                    heapq.heappush(ready, (-c, c))
    return order
