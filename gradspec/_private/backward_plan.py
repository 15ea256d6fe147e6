"""Which nodes a backward pass of the reference engine reaches, which of them run, and in what order they
become ready: the graph part of ``engine._run`` (torch's ``Engine::execute`` before the first node runs).

It reads the engine's nodes and tensors (``node.inputs``, ``node.spec.differentiable``, ``node.seq``,
``tensor.grad_fn``, ``tensor._requires_grad``) and computes nothing numeric; the engine runs the plan.

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec._private.backward_plan import plan
    >>> x = gs.tensor(np.ones(2), requires_grad=True)
    >>> y = (x * 2).sum()
    >>> p = plan([y], None, False)
    >>> [n.name() for n in p.order], p.executes is None, p.leaf_deps == {id(x): 1}
    (['SumBackward0', 'MulBackward0'], True, True)
"""

from __future__ import annotations

__all__ = ["Plan", "plan"]


class Plan:
    """``order``: every node reached from the roots (discovery order); ``edges``: id(node) -> [(input index,
    input tensor)] of the inputs gradients flow into; ``executes`` / ``evaluates``: ids of the nodes whose
    backward runs / whose incoming gradient is looked at (captured, retained), None for all of them;
    ``deps``: id(node) -> how many reached consumers feed it; ``leaf_deps``: id(leaf) -> the same for leaves."""

    __slots__ = ("root_nodes", "order", "edges", "executes", "evaluates", "deps", "leaf_deps")


def plan(roots, targets, capture: bool) -> Plan:
    """The plan of a backward pass from ``roots`` (``targets``: ``backward(inputs=)`` or ``grad``'s inputs,
    None for every leaf; ``capture``: ``grad``, which returns the targets' gradients)."""
    p = Plan()
    p.root_nodes = root_nodes = [r.grad_fn for r in roots if r.grad_fn is not None]
    p.order = order = []
    # Each node's edges (input index, input tensor) for the inputs gradients flow into (they require grad and
    # the op is differentiable in them), listed once: the engine walks them several times, and flags cannot
    # change during the run.
    p.edges = edges = {}
    # Dependencies, counted in the same walk (each node is expanded once, so each edge is counted once):
    # consumers per node, and per leaf.  torch's AccumulateGrad is a node too: a leaf's gradients are summed
    # in a buffer and accumulated ONCE, when every node feeding it has run.  That is visible when a later node
    # fails: a leaf still waiting for another branch has not been touched (a failing backward is not atomic,
    # but not per edge either; reference 5.7).
    p.deps = deps = {}
    p.leaf_deps = leaf_deps = {}
    stack = list(root_nodes)
    while stack:
        n = stack.pop()
        key = id(n)
        if key in edges:
            continue
        order.append(n)
        diff = n.spec.differentiable
        ne = []
        for i, t in enumerate(n.inputs):
            if t._requires_grad and (diff is None or diff[i]):
                ne.append((i, t))
                fn = t.grad_fn
                if fn is None:
                    leaf_deps[id(t)] = leaf_deps.get(id(t), 0) + 1
                else:
                    deps[id(fn)] = deps.get(id(fn), 0) + 1
                    if id(fn) not in edges:
                        stack.append(fn)
        edges[key] = ne
        if key not in deps:
            deps[key] = 0
    p.executes, p.evaluates = (None, None) if targets is None else _restricted(order, edges, targets, capture)
    return p


def _restricted(order, edges, targets, capture: bool) -> tuple[set, set]:
    """(executes, evaluates) with targets.  torch executes only nodes upstream of a target, plus (for backward)
    a non-leaf target's own node, which is what fills its retained grad.  Nodes that do not run are not freed
    (measured on torch 2.13).  grad() only *captures* at a non-leaf target's node: such a node is evaluated
    (captures, retain hooks) without running its backward."""
    target_ids = {id(t) for t in targets}
    target_fns = {id(t.grad_fn) for t in targets if t.grad_fn is not None}
    needed: dict[int, bool] = {}
    # Producers have lower sequence numbers than their consumers: increasing seq order.
    for n in sorted(order, key=lambda n: n.seq):
        needed[id(n)] = (not capture and id(n) in target_fns) or any(
            id(t) in target_ids or (t.grad_fn is not None and needed.get(id(t.grad_fn), False))
            for _, t in edges[id(n)]
        )
    executes = {id(n) for n in order if needed[id(n)]}
    return executes, executes | {id(n) for n in order if id(n) in target_fns}
