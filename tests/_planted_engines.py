"""A small numpy autodiff engine written from scratch (not the reference engine), with one switch per
broken CONTRACT §5 rule: the planted engines that ``gradspec fuzz --engine`` must find and
diagnose with the right CONTRACT §8 id.  ``Mini()`` with no switch is the correct twin.

Each bug is the way real engines get it wrong: ``stale`` keeps the gradients of intermediate
nodes from one backward to the next (micrograd), ``root-assigned`` sets the root's gradient to
the seed instead of adding it (micrograd's ``self.grad = 1``), ``zero-d-no-grad`` never fills
the gradient of a 0-d leaf (tinygrad's const tensors), ``edge-overwrite`` assigns each use's
gradient into ``.grad`` (losing the other uses), ``use-overwrite`` loses them within one backward but adds
the survivor to ``.grad`` (so calls still accumulate), ``seed-mean`` broadcasts the mean of the
seed, ``implicit-0d-only`` refuses the implicit seed unless the output is 0-d, ``dfs-preorder`` orders
the backward by a depth-first pre-order (tryout4's diamond engine: a node used twice passes its gradient
on before every use has added to it; ``dfs-preorder-leaves``: leaves are in that order too, so a leaf's
later uses are lost, as in tryout4's myengine.DiamondOrder), ``broadcast-mean`` reduces every broadcast gradient over the leading
axes with a mean (tryout4's BadBroadcast: one shared helper, every op; ``add-broadcast-mean``: add's alone, one
op's bug), ``tanh-raises-0d`` has a tanh
backward that raises numpy's AxisError on a 0-d input (tryout4's matmul raising for 1-D @ 1-D),
``grad-on-constant`` also writes ``.grad`` into leaves created with ``requires_grad=False`` (tryout8's minigrad:
torch leaves them None), ``retain-ignored`` frees the graph after every backward, whatever retain_graph
says, ``backward-raises`` is a half-written engine whose backward() always raises, ``inplace-add`` has an add that
writes into its first operand's buffer when that operand is an intermediate (exp's saved output is then
corrupted: all three tryout8's), ``backward-inplace`` computes exp's VJP into exp's saved output (a second backward
through the graph reads other numbers).  ``float32`` is no bug: the engine keeps every value (leaves and nodes) in
float32, as GPU-style engines do (``float32_backward_inplace``: that engine with ``backward-inplace``).
"""

from __future__ import annotations

import numpy as np

SAVES = {"mul", "exp", "tanh", "sin", "square"}  # like torch 2.13: these keep tensors for backward


class T:
    __slots__ = ("value", "parents", "grad", "requires_grad", "is_leaf", "op", "freed")

    def __init__(self, value, parents=(), requires_grad=False, is_leaf=False, op="leaf"):
        self.value = value
        self.parents = parents  # ((input T, vjp g -> contribution), ...)
        self.grad = None
        self.requires_grad = requires_grad
        self.is_leaf = is_leaf
        self.op = op
        self.freed = False

    @property
    def shape(self):
        return self.value.shape


def _unbroadcast(g, shape):
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for i, n in enumerate(shape):
        if n == 1 and g.shape[i] != 1:
            g = g.sum(axis=i, keepdims=True)
    return g


def _unbroadcast_mean(g, shape):
    while g.ndim > len(shape):
        g = g.mean(axis=0)  # the bug: the leading axes averaged
    for i, n in enumerate(shape):
        if n == 1 and g.shape[i] != 1:
            g = g.sum(axis=i, keepdims=True)
    return g


def _unbroadcast_left(g, shape):
    # tryout8 F7 (minigrad's bcast): size-1 axes looked up on the un-reduced gradient from the left, so a
    # (1,) input broadcast against (k, 2) sums axis 0 of g and keeps axis 1: a (2,) gradient
    for i, n in enumerate(shape):
        if n == 1 and i < g.ndim and g.shape[i] != 1:
            g = g.sum(axis=i, keepdims=True)
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    return g


class Mini:
    """Engine protocol (CONTRACT §4) over T; ``Mini(*bugs)`` plants the named bugs."""

    OPS = ("add", "sub", "mul", "neg", "exp", "tanh", "sin", "square", "sum")

    def __init__(self, *bugs):
        self.bugs = frozenset(bugs)
        self.name = "mini" + "".join(f"+{b}" for b in sorted(self.bugs))
        self.dtype = np.float32 if "float32" in self.bugs else np.float64

    def supports(self, op):
        return op in self.OPS

    def leaf(self, value, requires_grad=True):
        v = np.array(value, dtype=self.dtype, copy=True)
        return T(v, requires_grad=requires_grad, is_leaf=True)

    def apply(self, op, *args, **params):
        v = [a.value for a in args]
        if op == "add" and "inplace-add" in self.bugs and not args[0].is_leaf and v[0].shape == np.broadcast_shapes(
                v[0].shape, v[1].shape):
            out, fns = np.add(v[0], v[1], out=v[0]), [lambda g: g, lambda g: g]  # reuses the input's buffer
        elif op == "add":
            out, fns = v[0] + v[1], [lambda g: g, lambda g: g]
        elif op == "sub":
            out, fns = v[0] - v[1], [lambda g: g, lambda g: -g]
        elif op == "mul":
            out, fns = v[0] * v[1], [lambda g: g * v[1], lambda g: g * v[0]]
        elif op == "neg":
            out, fns = -v[0], [lambda g: -g]
        elif op == "exp" and "backward-inplace" in self.bugs:  # the VJP computed into the saved output's array
            e = np.array(np.exp(v[0]))  # (an array even for 0-d: np.exp gives a scalar there)
            out, fns = e, [lambda g: np.multiply(g, e, out=e) if np.shape(g) == e.shape else g * e]
        elif op == "exp":
            e = np.exp(v[0])
            out, fns = e, [lambda g: g * e]
        elif op == "tanh":
            t = np.tanh(v[0])
            if "tanh-raises-0d" in self.bugs:
                out, fns = t, [lambda g: g * (1 - t * t) if np.ndim(g) else np.swapaxes(g, -1, -2)]
            else:
                out, fns = t, [lambda g: g * (1 - t * t)]
        elif op == "sin":
            out, fns = np.sin(v[0]), [lambda g: g * np.cos(v[0])]
        elif op == "square":
            out, fns = v[0] * v[0], [lambda g: 2 * g * v[0]]
        elif op == "sum":
            shape = v[0].shape
            dim = params.pop("dim", None)
            keep = params.pop("keepdim", False)
            axes = tuple(range(len(shape))) if dim is None or dim == () else tuple(np.atleast_1d(dim) % max(len(shape), 1))
            out = np.sum(v[0], axis=axes, keepdims=keep)
            fns = [lambda g: np.broadcast_to(np.expand_dims(g, axes) if not keep else g, shape).copy()]
        else:
            raise NotImplementedError(op)
        if params:
            raise TypeError(f"mini: {op} does not take {sorted(params)}")
        out = np.asarray(out, dtype=self.dtype)
        mean = "broadcast-mean" in self.bugs or (op == "add" and "add-broadcast-mean" in self.bugs)
        un = _unbroadcast_mean if mean else (
            _unbroadcast_left if "broadcast-left" in self.bugs else _unbroadcast)
        # grad-on-constant: a constant leaf is an input of the backward too (its gradient is stored)
        wrong = "grad-on-constant" in self.bugs and any(a.requires_grad for a in args)
        parents = tuple((a, (lambda g, f=f, s=a.shape: un(np.asarray(f(g)), s)))
                        for a, f in zip(args, fns) if a.requires_grad or (wrong and a.is_leaf))
        return T(out, parents, requires_grad=bool(parents), op=op)

    def _seed(self, t, gradient):
        if gradient is None:
            if t.value.size != 1 or ("implicit-0d-only" in self.bugs and t.value.shape != ()):
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            return np.ones(t.shape)
        g = np.array(gradient, dtype=np.float64)
        if g.shape != t.shape:
            raise RuntimeError(f"Mismatch in shape: seed {g.shape} vs output {t.shape}")
        if "seed-mean" in self.bugs:
            g = np.full(t.shape, g.mean())
        return g

    def backward(self, tensor, gradient=None, retain_graph=False):
        if not tensor.requires_grad:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
        if "backward-raises" in self.bugs:
            raise RuntimeError("backward not implemented")
        seed = self._seed(tensor, gradient)
        topo, seen = [], set()

        def visit(t):
            if id(t) in seen:
                return
            seen.add(id(t))
            for p, _f in t.parents:
                visit(p)
            topo.append(t)

        visit(tensor)
        if any(t.freed for t in topo):
            raise RuntimeError("Trying to backward through the graph a second time")
        stale = "stale" in self.bugs
        grads = {}  # id -> this call's gradient (non-stale engines)
        if tensor.is_leaf or stale:
            if tensor.is_leaf and self._frozen(tensor):
                return
            if "root-assigned" in self.bugs or "edge-overwrite" in self.bugs or tensor.grad is None:
                tensor.grad = seed.copy()
            else:
                tensor.grad = tensor.grad + seed
            if tensor.is_leaf:
                return
        else:
            grads[id(tensor)] = seed
        leaf_in, taken = {}, set()
        preorder = self.bugs & {"dfs-preorder", "dfs-preorder-leaves"}
        for t in (_preorder(tensor) if preorder else reversed(topo)):
            if t.is_leaf:
                if "dfs-preorder-leaves" in self.bugs:
                    taken.add(id(t))  # its gradient is stored now: what later uses deliver is lost
                continue
            G = t.grad if stale else grads.get(id(t))
            if G is None:
                continue
            for p, f in t.parents:
                c = f(G)
                if p.is_leaf:
                    if id(p) not in taken:
                        leaf_in.setdefault(id(p), (p, []))[1].append(c)
                elif stale:
                    p.grad = c if p.grad is None else p.grad + c
                elif "inner-overwrite" in self.bugs:  # an intermediate used twice: the last use wins
                    grads[id(p)] = c
                else:
                    grads[id(p)] = grads[id(p)] + c if id(p) in grads else c
        for p, cs in leaf_in.values():
            if self._frozen(p):
                continue
            if "edge-overwrite" in self.bugs:
                p.grad = cs[-1].copy()
            else:
                # use-overwrite: each use assigns the leaf's gradient of this call (tryout3's NoLeafAccum)
                total = cs[-1] if "use-overwrite" in self.bugs else np.sum(cs, axis=0)
                p.grad = total if p.grad is None else p.grad + total
        if not retain_graph or "retain-ignored" in self.bugs:
            for t in topo:
                if t.op in SAVES:
                    t.freed = True

    def _frozen(self, leaf) -> bool:
        return "zero-d-no-grad" in self.bugs and leaf.value.shape == ()

    def grad(self, leaf):
        return None if leaf.grad is None else np.array(leaf.grad, dtype=self.dtype, copy=True)

    def zero_grad(self, leaf):
        leaf.grad = None

    def to_numpy(self, tensor):
        return np.array(tensor.value, copy=True)


def _preorder(root) -> list:
    order, seen, stack = [], set(), [root]
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        order.append(t)
        stack.extend(p for p, _f in t.parents)
    return order


# module-level factories, so the CLI can load each one as "tests._planted_engines:<name>"
def correct():
    return Mini()


def stale():
    return Mini("stale")


def root_assigned():
    return Mini("root-assigned")


def micrograd_like():
    return Mini("stale", "root-assigned")


def zero_d_no_grad():
    return Mini("zero-d-no-grad")


def edge_overwrite():
    return Mini("edge-overwrite")


def use_overwrite():
    return Mini("use-overwrite")


def seed_mean():
    return Mini("seed-mean")


def implicit_0d_only():
    return Mini("implicit-0d-only")


def inner_overwrite():
    return Mini("inner-overwrite")


def dfs_preorder():
    return Mini("dfs-preorder")


def broadcast_mean():
    return Mini("broadcast-mean")


def add_broadcast_mean():
    return Mini("add-broadcast-mean")


def tanh_raises_0d():
    return Mini("tanh-raises-0d")


def grad_on_constant():
    return Mini("grad-on-constant")


def retain_ignored():
    return Mini("retain-ignored")


def backward_raises():
    return Mini("backward-raises")


def inplace_add():
    return Mini("inplace-add")


def broadcast_left():
    return Mini("broadcast-left")


def backward_inplace():
    return Mini("backward-inplace")


def float32_backward_inplace():
    return Mini("float32", "backward-inplace")
