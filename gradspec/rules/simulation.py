"""Known wrong backward() semantics, simulated: what an engine with one of them reads back.

Each *flag* is one way engines get CONTRACT §5 wrong (a seed of ones, implicit ones for any
shape, .grad overwritten instead of added, intermediate gradients carried over between calls,
the root's gradient assigned, .grad never updated, reset ignored, a repeated argument counted
once, no freeing...).  :func:`simulate` replays a :class:`~gradspec.rules.scenario.Scenario`
under a set of flags, with every node's local Jacobian taken from the reference engine, so the
numbers a wrong engine would produce on the very same calls are known exactly;
:mod:`gradspec.rules.diagnosis` matches an engine's trace against them.

Example (an engine that ignores the seed it is given: exp's gradient with a seed of ones)::

    >>> import numpy as np
    >>> from gradspec.engines import ReferenceEngine
    >>> from gradspec.rules.simulation import matches, simulate
    >>> from gradspec.rules.scenario import Scenario, Step, run
    >>> sc = Scenario({"x": np.array([0.0, 1.0])}, [("y", "exp", ("x",), {})],
    ...               [Step("backward", "y", np.array([0.0, 3.0]))])
    >>> ref = run(sc, ReferenceEngine())
    >>> wrong = simulate(sc, {"seed-ignored"}, ref)
    >>> wrong.obs[-1].grads["x"], ref.obs[-1].grads["x"]
    (array([1.        , 2.71828183]), array([0.        , 8.15484549]))
    >>> matches(sc, wrong, ref, {"seed-ignored"}), matches(sc, wrong, ref, set())
    (True, False)
"""

from __future__ import annotations

import numpy as np

from .._private import graphwalk as _graphwalk
from .scenario import Obs, Scenario, Step, Trace, first_difference, raise_reason

__all__ = ["FLAGS", "VALUE_FLAGS", "MAX_JAC_ELEMENTS", "TooBig", "jacobians", "simulate", "matches", "grad_scales"]

# flag -> (CONTRACT §8 id, the sentence a user can act on).  Order = preference when several match.
FLAGS = {
    "seed-ignored": ("seed-ignored", "backward(y, seed) computes with a seed of ones: the seed you pass is ignored; "
                                     "use it as the upstream gradient of the root"),
    "seed-mean": ("seed-misapplied", "backward(y, seed) uses the mean of the seed for every element instead of the "
                                     "seed itself: the gradient must be J^T . seed"),
    "implicit-any-shape": ("implicit-seed-non-scalar", "backward(y) without a seed runs with ones for an output of "
                                                       "numel != 1; torch raises 'grad can be implicitly created only "
                                                       "for scalar outputs' (only numel == 1 gets an implicit seed)"),
    "seed-broadcast": ("seed-shape-accepted", "a seed of another shape than the output's is broadcast instead of "
                                              "refused; torch requires the seed's shape to equal the output's exactly"),
    "overwrite": ("accumulation-overwrite", "a later backward replaces .grad instead of adding to it: accumulate "
                                            "(grad += new) in every backward call"),
    "overwrite-clears": ("accumulation-overwrite", "every backward starts by clearing .grad of all leaves: "
                                                   "gradients never accumulate across calls or roots; add to .grad "
                                                   "and let only zero_grad reset it"),
    "overwrite-edge-last": ("accumulation-overwrite", "a leaf used by several ops keeps only one use's gradient "
                                                      "(the last one delivered is assigned): add every use's gradient"),
    "overwrite-edge-dfs": ("accumulation-overwrite", "a leaf used by several ops keeps only one use's gradient "
                                                     "(the last one delivered in depth-first order is assigned): add "
                                                     "every use's gradient"),
    "overwrite-edge-first": ("accumulation-overwrite", "a leaf used by several ops keeps only one use's gradient "
                                                       "(the first one delivered): add every use's gradient"),
    # The same lost uses inside one backward, but .grad still adds across calls (the engine assigns a leaf's
    # gradient per use while collecting it, then accumulates the survivor into .grad).
    "uses-overwrite-last": ("uses-overwrite", "within one backward, a leaf used several times (by several ops, "
                                                      "or twice by one op) keeps only one use's gradient (the last one "
                                                      "delivered), though .grad still adds across calls: add every "
                                                      "use's gradient"),
    "uses-overwrite-dfs": ("uses-overwrite", "within one backward, a leaf used several times (by several ops, "
                                                     "or twice by one op) keeps only one use's gradient (the last one "
                                                     "delivered in depth-first order), though .grad still adds across "
                                                     "calls: add every use's gradient"),
    "uses-overwrite-first": ("uses-overwrite", "within one backward, a leaf used several times (by several "
                                                       "ops, or twice by one op) keeps only one use's gradient (the "
                                                       "first one delivered), though .grad still adds across calls: "
                                                       "add every use's gradient"),
    "overwrite-inner-last": ("accumulation-overwrite", "an intermediate tensor used by several ops passes on only one "
                                                       "use's gradient (the last one delivered is assigned): add the "
                                                       "gradients of all its uses before back-propagating it"),
    "overwrite-inner-dfs": ("accumulation-overwrite", "an intermediate tensor used by several ops passes on only one "
                                                      "use's gradient (the last one delivered in depth-first order is "
                                                      "assigned): add the gradients of all its uses before "
                                                      "back-propagating it"),
    # tryout4's diamond engine: nodes taken in depth-first pre-order from the root (a stack: pop a node, push its
    # inputs), so a node used by several ops can pass its gradient on before every use has added to it
    "order-preorder": ("backward-order", "backward visits the nodes in depth-first pre-order, not in reverse "
                                         "topological order: a tensor used by several ops passes its gradient on "
                                         "before every use has added to it (add(neg(x), x) gives 1 for x.grad, not "
                                         "0); sort the nodes topologically (a node after every node that uses it) "
                                         "before back-propagating"),
    # the same order with the leaves in it (tryout4's myengine.DiamondOrder): a leaf's gradient is stored when the
    # walk reaches it, and what its later uses deliver is lost
    "order-preorder-leaves": ("backward-order", "backward visits the nodes and leaves in depth-first pre-order, not "
                                                "in reverse topological order: a tensor or leaf used by several ops is "
                                                "taken before every use has added to it, and what comes later is lost "
                                                "(add(neg(x), x) gives 1 for x.grad, not 0); sort the graph "
                                                "topologically (a node after every node that uses it) before "
                                                "back-propagating"),
    "stale": ("stale-intermediate-grads", "gradients of intermediate nodes are kept from the previous backward and "
                                          "flow again: reset every non-leaf's gradient at the start of each backward"),
    "root-assigned": ("root-grad-assigned", "backward(root) sets the root's gradient to the seed instead of adding "
                                            "it: a root that is a leaf (or already holds a gradient) loses what it had"),
    "root-assigned-implicit": ("root-grad-assigned", "backward(root) without a seed sets the root's gradient to ones "
                                                     "instead of adding them (micrograd's self.grad = 1): a root that "
                                                     "is a leaf, or holds a gradient from an earlier call, loses it"),
    "not-updated": ("grad-not-updated", ".grad of the leaves is never updated by backward()"),
    "not-updated-0d": ("grad-not-updated", "a 0-d leaf (shape ()) never receives a gradient, while leaves of other "
                                           "shapes do: make 0-d leaves part of the graph like any other tensor"),
    "not-updated-numel1": ("grad-not-updated", "leaves of one element never receive a gradient"),
    "reset-ignored": ("reset-ignored", "zero_grad does not reset: the next backward adds to the old gradient; "
                                       "zero_grad must set .grad back to None"),
    "repeated-drop-second": ("repeated-input-dropped", "op(x, x): the second use of x is treated as a constant, "
                                                       "so its gradient is lost; add the gradients of both arguments"),
    "repeated-drop-first": ("repeated-input-dropped", "op(x, x): the first use of x is lost; add the gradients of "
                                                      "both arguments"),
    "no-freeing": ("no-freeing", "a second backward through a graph freed by the first one does not raise; torch "
                                 "raises 'Trying to backward through the graph a second time' unless retain_graph=True"),
}
VALUE_FLAGS = [f for f in FLAGS if f not in ("implicit-any-shape", "seed-broadcast", "no-freeing")]
MAX_JAC_ELEMENTS = 1 << 14  # local Jacobians are dense; bigger graphs are not diagnosed this way


class TooBig(ValueError):
    """A node too large for dense local Jacobians."""


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def jacobians(sc: Scenario) -> dict:
    """node -> [J_j (out numel x input numel) or None per input position], from the reference."""
    if "jac" in sc._cache:
        return sc._cache["jac"]
    from .. import engine as E
    from .scenario import forward_values

    vals = forward_values(sc)
    sc._cache.setdefault("shapes", {k: tuple(np.shape(v)) for k, v in vals.items()})
    out = {}
    for name, op, ins, params in sc.nodes:
        m = vals[name].size
        sizes = [np.size(vals[i]) for i in ins]
        if m * max(sizes + [1]) > MAX_JAC_ELEMENTS:
            raise TooBig(f"node {name} ({op}) has {m} outputs and inputs of up to {max(sizes)} elements")
        diff = [np.asarray(vals[i]).dtype.kind == "f" and (i not in sc.leaves or sc.rg(i)) for i in ins]
        ts = [E.tensor(np.array(vals[i], copy=True), requires_grad=d) for i, d in zip(ins, diff)]
        with E.enable_grad():
            y = E.call(op, *ts, **params)
        Js = [np.zeros((m, n)) if d else None for n, d in zip(sizes, diff)]
        if getattr(y, "requires_grad", False):
            for e in range(m):
                for t in ts:
                    t.grad = None
                basis = np.zeros(m)
                basis[e] = 1.0
                y.backward(basis.reshape(vals[name].shape), retain_graph=True)
                for j, t in enumerate(ts):
                    if Js[j] is None:
                        continue
                    if t.grad is None:
                        Js[j] = None if e == 0 else Js[j]
                        continue
                    Js[j][e] = np.asarray(t.grad.numpy(), dtype=np.float64).ravel()
        out[name] = Js
    sc._cache["jac"] = out
    return out


def _ancestors(sc: Scenario, root: str) -> set:
    return _graphwalk.ancestors({name: ins for name, _op, ins, _p in sc.nodes}, [root])


class _Sim:
    def __init__(self, sc: Scenario, flags: frozenset, absolute: bool):
        self.sc, self.flags, self.abs = sc, flags, absolute
        self.J = jacobians(sc)
        self.shapes = sc.shapes()
        self.leaf_grad = {n: None for n in sc.leaves}
        self.node_grad: dict = {}
        self.implicit = False
        self.taken: dict = {}  # leaf -> how many nodes were back-propagated when the walk stored its gradient

    def frozen(self, leaf) -> bool:
        f, shape = self.flags, self.shapes[leaf]
        return ("not-updated" in f or ("not-updated-0d" in f and shape == ())
                or ("not-updated-numel1" in f and _numel(shape) == 1))

    def seed(self, s: Step) -> np.ndarray:
        shape = self.shapes[s.target]
        if s.seed is None:
            g = np.ones(shape)
        else:
            g = np.asarray(s.seed, dtype=np.float64)
            if g.shape != shape:
                g = np.broadcast_to(g, shape)
            elif "seed-ignored" in self.flags:
                g = np.ones(shape)
            elif "seed-mean" in self.flags:
                g = np.full(shape, float(np.mean(g)) if g.size else 0.0)
        return np.abs(g) if self.abs else np.array(g, dtype=np.float64)

    def backward(self, root: str, seed: np.ndarray) -> None:
        sc, f = self.sc, self.flags
        contrib: dict = {n: [] for n in sc.leaves}
        if "overwrite-clears" in f:
            self.leaf_grad = {n: None for n in sc.leaves}
        if root in sc.leaves:
            if sc.rg(root):
                assign = "root-assigned" in f or ("root-assigned-implicit" in f and self.implicit)
                if assign and not self.frozen(root):
                    self.leaf_grad[root] = seed.copy()
                    return
                contrib[root].append(seed)
            return self._leaves(contrib)
        anc = _ancestors(sc, root)
        stale = "stale" in f
        inner_assign = "overwrite-inner-last" in f or "overwrite-inner-dfs" in f
        g = {n: self.node_grad[n].copy() for n in anc if stale and n in self.node_grad}
        assign = "root-assigned" in f or ("root-assigned-implicit" in f and self.implicit)
        g[root] = seed.copy() if (assign or root not in g) else g[root] + seed
        self.taken: dict = {}
        for at, (name, _op, ins, _p) in enumerate(self.order(root)):
            if name not in anc or name not in g:
                continue
            G = g[name].ravel()
            for j, inp in enumerate(ins):
                J = self.J[name][j]
                if J is None or (inp in sc.leaves and not sc.rg(inp)):
                    continue
                if list(ins).count(inp) > 1:
                    pos = [k for k, x in enumerate(ins) if x == inp]
                    if ("repeated-drop-second" in f and j != pos[0]) or ("repeated-drop-first" in f and j != pos[-1]):
                        continue
                c = ((np.abs(J).T @ np.abs(G)) if self.abs else (J.T @ G)).reshape(self.shapes[inp])
                if inp in sc.leaves:
                    if at < self.taken.get(inp, at + 1):
                        contrib[inp].append(c)
                elif inner_assign:  # the last use delivered wins (the order: self.order)
                    g[inp] = c
                else:
                    g[inp] = g[inp] + c if inp in g else c
        if stale:
            self.node_grad.update(g)
        self._leaves(contrib)

    def order(self, root: str) -> list:
        """Nodes in the order their gradients are pushed: reverse creation order, or (for the
        DFS variant) the reverse of a depth-first topological sort from the root, inputs in order,
        as micrograd-style engines build it; only the edge-overwrite variants can tell."""
        by = {n[0]: n for n in self.sc.nodes}
        if self.flags & {"order-preorder", "order-preorder-leaves"}:
            out, seen, stack = [], set(), [root]
            while stack:
                n = stack.pop()
                if n in seen or (n not in by and not self.sc.rg(n)):
                    continue
                seen.add(n)
                if n in by:
                    out.append(by[n])
                    stack.extend(by[n][2])
                elif "order-preorder-leaves" in self.flags:
                    self.taken[n] = len(out)  # its gradient is stored now: later nodes' contributions are lost
            return out
        if not self.flags & {"overwrite-edge-dfs", "overwrite-inner-dfs", "uses-overwrite-dfs"}:
            return list(reversed(self.sc.nodes))
        topo, seen = [], set()

        def visit(n):
            if n in seen or n not in by:
                return
            seen.add(n)
            for i in by[n][2]:
                visit(i)
            topo.append(by[n])

        visit(root)
        return list(reversed(topo))

    def _leaves(self, contrib: dict) -> None:
        f = self.flags
        for leaf, cs in contrib.items():
            if not cs or self.frozen(leaf):
                continue
            total = np.sum(cs, axis=0)
            if f & {"uses-overwrite-last", "uses-overwrite-dfs"}:
                total = cs[-1]
            elif "uses-overwrite-first" in f:
                total = cs[0]
            old = self.leaf_grad[leaf]
            if "overwrite-edge-last" in f or "overwrite-edge-dfs" in f:
                self.leaf_grad[leaf] = cs[-1].copy()
            elif "overwrite-edge-first" in f:
                self.leaf_grad[leaf] = cs[0].copy()
            elif "overwrite" in f or old is None:
                self.leaf_grad[leaf] = total
            else:
                self.leaf_grad[leaf] = old + total

    def snapshot(self) -> dict:
        return {k: None if v is None else v.copy() for k, v in self.leaf_grad.items()}


def simulate(sc: Scenario, flags, ref: Trace, absolute: bool = False) -> Trace:
    """What an engine with the wrong semantics ``flags`` observes on ``sc`` (torch's raises from ``ref``)."""
    flags = frozenset(flags)
    sim = _Sim(sc, flags, absolute)
    obs = [Obs(None, sim.snapshot())]
    for k, s in enumerate(sc.steps):
        ref_raised = ref.obs[k + 1].raised if k + 1 < len(ref.obs) else None
        if s.kind == "zero_grad":
            if ref_raised is None and "reset-ignored" not in flags:
                sim.leaf_grad[s.target] = None
            obs.append(Obs(ref_raised, sim.snapshot()))
            continue
        if ref_raised is not None:
            why = raise_reason(sc, k)
            shape_ok = s.seed is not None and _broadcastable(np.shape(s.seed), sc.shapes()[s.target])
            excused = ((why == "implicit" and "implicit-any-shape" in flags)
                       or (why == "shape" and "seed-broadcast" in flags and shape_ok)
                       or (why == "freeing" and "no-freeing" in flags))
            if not excused:
                obs.append(Obs(ref_raised, sim.snapshot()))
                continue
        sim.implicit = s.seed is None
        sim.backward(s.target, sim.seed(s))
        obs.append(Obs(None, sim.snapshot()))
    return Trace(None, obs)


def _broadcastable(src, dst) -> bool:
    try:
        np.broadcast_shapes(tuple(src), tuple(dst))
        return np.broadcast_shapes(tuple(src), tuple(dst)) == tuple(dst)
    except ValueError:
        return False


def grad_scales(sc, ref, flags_list) -> list:
    """Per call and leaf: the largest |J|^T |seed| of the semantics compared (bounds rounding)."""
    out = None
    for flags in flags_list:
        t = simulate(sc, flags, ref, absolute=True)
        cur = [{k: (np.zeros(0) if v is None else v) for k, v in o.grads.items()} for o in t.obs]
        if out is None:
            out = cur
        else:
            out = [{k: (np.maximum(a[k], b[k]) if np.shape(a[k]) == np.shape(b[k]) else a[k]) for k in a}
                   for a, b in zip(out, cur)]
    return [{k: (None if v.size == 0 else v) for k, v in d.items()} for d in out]


def matches(sc: Scenario, got: Trace, ref: Trace, flags, strict: bool = False) -> bool:
    want = simulate(sc, flags, ref)
    scales = grad_scales(sc, ref, [frozenset(), frozenset(flags)])
    return first_difference(sc, got, want, scales, none_is_zeros=not strict) is None
