"""Graph structures, shape-valid by construction: the builder behind ``graphs()`` and ``cases()``.

Each node's op is drawn first (by index into the simple -> complex op list), then its inputs are
chosen among existing tensors whose shapes fit, or new leaves are created with shapes drawn to
fit, using the op's gufunc ``signature`` or, failing that, its ``shape_fn`` + ``param_strategy``
checked with ``out_shape``; every planned node is run once on tame values of its shapes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import warnings
from typing import Any, Mapping, Sequence

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from .._private import draw_tally as _draw_tally
from .._private import values as _values
from .._private.signature import SignatureError
from .._private.signature import parse as _parse_signature
from ..case import Case, Leaf, NodeDef
from ..spec.opspec import OpSpec
from . import _args, _bounded, _hard
from ._args import _check_int, _check_order
from ._ops import _ranged, _resolve_ops, _shape_templates, _spec_of
from ._shapes import AXIS_OPS, BOOLS, _draw_side, ints, wide_shape

_OUT_CAP = 1024  # elements of any node's output
_ATTEMPTS = 3  # planning attempts per op before falling back to a simpler op

@dataclasses.dataclass
class GraphLeaf:
    """A leaf of a generated graph: its shape, dtype, whether it requires grad, and the domains
    of every op input it feeds (its values must lie in all of them)."""

    name: str
    shape: tuple
    dtype: str
    requires_grad: bool = True
    domains: list = dataclasses.field(default_factory=list)

    @property
    def is_float(self) -> bool:
        return self.dtype in _args.DTYPES


@dataclasses.dataclass
class Graph:
    """The structure of a case, without values: leaves, nodes (canonical params), roots.

    ``Graph.case(values, seeds)`` turns it into a :class:`gradspec.Case`.

    Example::

        >>> import numpy as np
        >>> from hypothesis import find, settings
        >>> from gradspec import strategies as gst
        >>> g = find(gst.graphs(ops=["mul"]), lambda g: True, settings=settings(database=None))
        >>> case = g.case({l.name: np.ones(l.shape) for l in g.leaves})
        >>> case.ops
        ['mul']
    """

    leaves: list[GraphLeaf]
    nodes: list[NodeDef]
    roots: list[str]
    shapes: dict[str, tuple]
    requires_grad: dict[str, bool]
    user_ops: dict = dataclasses.field(default_factory=dict)

    def case(self, values: Mapping[str, np.ndarray], seeds: Sequence | None = None) -> Case:
        leaves = [Leaf(l.name, np.asarray(values[l.name]), l.requires_grad) for l in self.leaves]
        nodes = [NodeDef(n.name, n.op, list(n.inputs), dict(n.params)) for n in self.nodes]
        sd = [None] * len(self.roots) if seeds is None else list(seeds)
        case = Case(leaves, nodes, list(self.roots), sd, user_ops=dict(self.user_ops))  # (canonical params)
        # Roots and seeds checked against the shapes the builder computed with the same shape rules
        # (Case.shapes() would run every node's rule again: most of this call's cost) -- valid while
        # every leaf value has its planned shape, else the rules run on the values' shapes.
        planned = all(l.value.shape == self.shapes.get(l.name) for l in leaves)
        case.validate(self.shapes if planned else None)
        return case

    def case_like(self, template: Case, values: Mapping[str, np.ndarray], seeds: Sequence) -> Case:
        """:meth:`case` for another value set of the graph ``template`` was made from (same leaves,
        nodes and roots): its canonical params are reused, the shape rules are not run again."""
        leaves = [Leaf(l.name, np.asarray(values[l.name]), l.requires_grad) for l in self.leaves]
        nodes = [NodeDef(n.name, n.op, list(n.inputs), dict(n.params)) for n in template.nodes]
        return Case._unchecked(leaves, nodes, list(template.roots), list(seeds), "reference", dict(self.user_ops), {})

    def spec(self, op: str) -> OpSpec:
        return _spec_of(op, self.user_ops)

    def copy(self) -> "Graph":
        """A copy that a value repair may change (it detaches node inputs onto new leaves) without
        touching this one."""
        return Graph([dataclasses.replace(l, domains=list(l.domains)) for l in self.leaves],
                     [NodeDef(n.name, n.op, list(n.inputs), n.params) for n in self.nodes], list(self.roots),
                     dict(self.shapes), dict(self.requires_grad), self.user_ops)

    def uses(self) -> dict[str, int]:
        """How many op inputs each tensor feeds (fan-out > 1, or twice in one op)."""
        out: dict[str, int] = {}
        for n in self.nodes:
            for i in n.inputs:
                out[i] = out.get(i, 0) + 1
        return out



class _Cfg:
    """Validated arguments of graphs()/cases() (a plain class: Hypothesis pretty-prints
    dataclasses field by field, which would put every OpSpec in the strategy's repr)."""

    FIELDS = ("min_leaves", "max_leaves", "min_nodes", "max_nodes", "min_roots", "max_roots", "dtype", "min_dims",
              "max_dims", "min_side", "max_side", "max_elements")

    def __init__(self, ops: list, user_ops: dict, **kw):
        self.ops = ops
        self.user_ops = user_ops
        for k in self.FIELDS:
            setattr(self, k, kw.pop(k))
        assert not kw, kw

    def __repr__(self) -> str:
        return f"ops={[s.name for s in self.ops]}, " + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.FIELDS)


@dataclasses.dataclass
class _T:
    """What the builder knows of a tensor (leaf or node)."""

    name: str
    shape: tuple
    kind: str  # "float", "bool" or "other"
    leaf: bool
    requires_grad: bool


@dataclasses.dataclass
class _Slot:
    kind: str
    domain: Any
    use: str | None = None  # existing tensor
    shape: tuple | None = None


def _numel(shape) -> int:
    return int(math.prod(shape))  # np.prod of a tuple costs ~5 us


def _bshape(*shapes) -> tuple | None:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


@functools.lru_cache(maxsize=4096)
def _probe_array(shape: tuple, kind: str, domain, dtype: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    if kind == "bool":
        a = rng.random(shape) < 0.5
    else:
        a = _values.tame_array(rng, shape, [domain], dtype=dtype)
    a.setflags(write=False)  # shared between probes
    return a


_PARAM_CACHE: dict = {}
# The probe's verdict on a user op whose forward is not finite at tame values of the planned shapes: the shapes are
# dropped (None), and the draw is counted for the run in progress (_private.draw_tally), as the value repair's are.
_UNFINITE = {"unfinite NaN": np.array([np.nan]), "unfinite inf": np.array([np.inf])}
_PROBE_CACHE: dict = {}  # (op, planned shapes/kinds/domains, params, out, dtype) -> probe verdict


def _param_strategy(spec: OpSpec, shapes: tuple):
    """``spec.param_strategy(shapes)``, cached (a declaration's strategy depends on the shapes only)."""
    key = (id(spec), shapes)
    hit = _PARAM_CACHE.get(key)
    if hit is None or hit[0] is not spec:
        if len(_PARAM_CACHE) > 20000:
            _PARAM_CACHE.clear()
        hit = _PARAM_CACHE[key] = (spec, spec.param_strategy(shapes))
    return hit[1]


def _template_make(codes: tuple, shapes: list, new: int) -> tuple:
    return tuple(shapes[c[1]][c[2]] if c[0] == "ref" else 1 if c[0] == "one" else new for c in codes)


def _template_match(codes: tuple, shapes: list, shape: tuple) -> bool:
    if len(shape) != len(codes):
        return False
    news = {s for c, s in zip(codes, shape, strict=True) if c[0] == "new"}
    if len(news) > 1:
        return False
    return all(
        c[0] == "new" or s == (shapes[c[1]][c[2]] if c[0] == "ref" else 1) for c, s in zip(codes, shape, strict=True)
    )



class _Builder:
    def __init__(self, draw, cfg: _Cfg):
        self.draw = draw
        self.cfg = cfg
        self.leaves: list[GraphLeaf] = []
        self.nodes: list[NodeDef] = []
        self.t: dict[str, _T] = {}
        self.order: list[str] = []
        self.elements = 0
        self._allowed_cache: dict = {}
        self.dtype_mode = cfg.dtype  # the case's precision, once drawn: float64, float32 or mixed
        self.dtype = "float32" if cfg.dtype == "float32" else "float64"  # of every leaf while building

    # -- small draws -------------------------------------------------------------------------
    def side(self) -> int:
        c = self.cfg
        return _draw_side(self.draw, c.min_side, c.max_side, 32)

    def free_shape(self, ndim_lo: int, ndim_hi: int) -> tuple:
        nd = self.draw(ints(max(0, ndim_lo), max(0, ndim_lo, ndim_hi)))
        return tuple(self.side() for _ in range(nd))

    # -- candidates ----------------------------------------------------------------------------
    def _leaf(self, name: str) -> GraphLeaf:
        return next(l for l in self.leaves if l.name == name)

    def _domain_ok(self, t: _T, dom, kind: str, plan: list[_Slot] = ()) -> bool:
        if t.kind != kind:
            return False
        if kind != "float":
            return True
        pending = tuple(s.domain for s in plan if s.use == t.name)
        if not _ranged(dom) and not any(_ranged(d) for d in pending):
            return True
        if not t.leaf:
            return False  # a node's range is unknown: restricted domains are fed by leaves only
        doms = tuple(self._leaf(t.name).domains) + pending + (dom,)
        key = (doms,)
        if key not in self._allowed_cache:
            self._allowed_cache[key] = not _values.Allowed.of(list(doms), 1e-3, 1e3).empty
        return self._allowed_cache[key]

    def _want_new(self, planned_new: int, wish: bool) -> bool:
        budget = self.cfg.max_leaves - len(self.leaves) - planned_new
        if budget <= 0:
            return False
        if len(self.leaves) + planned_new < self.cfg.min_leaves:
            return True
        return wish

    def _budget(self, planned: list[_Slot]) -> int:
        used = sum(_numel(s.shape) for s in planned if s.use is None and s.shape is not None and s.kind == "float")
        return self.cfg.max_elements - self.elements - used

    def _clamp(self, shape: list, free: list[int], budget: int) -> tuple:
        """Set free axes to 1 (leading first) until the leaf fits the element budget."""
        if self.cfg.min_side > 1:
            return tuple(shape)
        for i in free:
            if _numel(shape) <= max(budget, 1):
                break
            shape[i] = min(shape[i], 1)
        return tuple(shape)

    # -- planning by signature ------------------------------------------------------------------
    def _loop_variant(self, loop: tuple, room: int) -> tuple:
        """A loop shape that broadcasts with ``loop``: the same (shrink target), a variant, or ()."""
        v = self.draw(ints(0, 3))
        if v == 0:
            return tuple(loop)
        if v == 2:
            return ()
        ones_ok = self.cfg.min_side <= 1  # leaves never get sides below min_side
        out = []
        for s in loop:
            c = self.draw(ints(0, 2))
            out.append(1 if c == 1 and ones_ok else self.side() if c == 2 and s == 1 else s)
        if v == 1 and out:
            out = out[self.draw(ints(0, len(out))):]  # drop some leading axes
        if v == 3 and room > len(out):
            out = [self.side() for _ in range(self.draw(ints(1, room - len(out))))] + out
        return tuple(out)

    def _choose(self, plan: list[_Slot], i: int, spec: OpSpec, dom, fits, make, strict: bool = True) -> _Slot | None:
        return _span(self, self._choose_here, plan, i, spec, dom, fits, make, strict)

    def _choose_here(self, plan: list[_Slot], i: int, spec: OpSpec, dom, fits, make, strict: bool) -> _Slot | None:
        """Slot ``i``: reuse an existing tensor whose shape ``fits`` (latest first: the shrink target),
        or a new leaf of shape ``make()`` while the leaf budget lasts."""
        kind = "float" if spec.input_differentiable(i) else "bool"
        slot = _Slot(kind, dom)
        # x against itself is a tie by construction in ops with ties (maximum, ...)
        taken = {s.use for s in plan} if spec.kink_distance is not None else set()
        cands = [
            n for n in reversed(self.order)
            if n not in taken and self._domain_ok(self.t[n], dom, kind, plan) and fits(self.t[n].shape)
        ]
        # Always the same single choice, whatever the state: when an op shrinks to a simpler one
        # the choices after it keep their meaning.  Its low half reuses a tensor (0: the latest, the
        # shrink target), its high half asks for a new leaf.
        top = max(15, len(cands) - 1)
        c = self.draw(ints(0, 2 * top + 1))
        wish, pick = c > top, c % (top + 1)
        planned_new = sum(s.use is None for s in plan)
        if cands and not self._want_new(planned_new, wish):
            slot.use = cands[pick % len(cands)]
            slot.shape = self.t[slot.use].shape
        elif self.cfg.max_leaves - len(self.leaves) - planned_new > 0:
            slot.shape = make()
            if slot.shape is None or (strict and not self._leaf_shape_ok(slot.shape)):
                return None
        else:
            return None
        return slot

    def _leaf_shape_ok(self, shape: tuple) -> bool:
        c = self.cfg
        return c.min_dims <= len(shape) <= c.max_dims and all(c.min_side <= s <= c.max_side for s in shape)

    def _plan_signature(self, spec: OpSpec, cores: list[tuple]) -> list[_Slot] | None:
        doms = spec.domains_for(len(cores))
        sizes: dict[str, int] = {}
        loop: tuple | None = None
        plan: list[_Slot] = []
        for i, core in enumerate(cores):
            slot = self._choose(
                plan, i, spec, doms[i],
                lambda shape: self._fits_core(shape, core, sizes, loop),
                lambda: self._new_core_shape(core, sizes, loop, plan),
            )
            if slot is None:
                return None
            shape = slot.shape
            k = len(shape) - len(core)
            for name, s in zip(core, shape[k:], strict=True):
                if not name.isdigit():
                    sizes[name] = s
            loop = tuple(shape[:k]) if loop is None else _bshape(loop, shape[:k])
            if loop is None:
                return None
            plan.append(slot)
        return plan

    @staticmethod
    def _fits_core(shape: tuple, core: tuple, sizes: dict, loop: tuple | None) -> bool:
        if len(shape) < len(core):
            return False
        k = len(shape) - len(core)
        local = dict(sizes)
        for name, s in zip(core, shape[k:], strict=True):
            if name.isdigit():
                if int(name) != s:
                    return False
            elif local.setdefault(name, s) != s:
                return False
        if loop is None:
            return True
        b = _bshape(loop, shape[:k])
        return b is not None and _numel(b) <= _OUT_CAP

    def _new_core_shape(self, core: tuple, sizes: dict, loop: tuple | None, plan: list[_Slot]) -> tuple:
        c = self.cfg
        local = dict(sizes)
        core_shape, free_core = [], []
        for j, name in enumerate(core):
            if name.isdigit():
                core_shape.append(int(name))
            elif name in local:
                core_shape.append(local[name])
            else:
                local[name] = self.side()
                core_shape.append(local[name])
                if core.index(name) == j and core.count(name) == 1:
                    free_core.append(j)
        room = max(0, c.max_dims - len(core))
        if loop is None:
            lp = self.free_shape(c.min_dims - len(core), room)
        else:
            lp = self._loop_variant(loop, room)
        if len(lp) + len(core) < c.min_dims:
            k = c.min_dims - len(core) - len(lp)
            lp = ((1,) * k if c.min_side <= 1 else tuple(self.side() for _ in range(k))) + tuple(lp)
        shape = list(lp) + core_shape
        free = list(range(len(lp))) + [len(lp) + j for j in free_core]
        return self._clamp(shape, free, self._budget(plan))

    # -- planning by shape_fn (reductions, shape ops, variadic joins) -----------------------------
    def _free_leaf_shape(self, plan: list[_Slot], ndims: Sequence[int] | None = None, wide: bool = False) -> tuple:
        c = self.cfg
        # A reduction's new input: 3 times in 4 two axes > 1 (see AXIS_OPS); choice 0 is the plain
        # shape, so shrinking still heads for it.
        shape = wide and self.draw(_WIDE) and wide_shape(self.draw, c.min_dims, c.max_dims, c.min_side, c.max_side)
        if shape:
            shape = list(shape)
        elif ndims is None:
            shape = list(self.free_shape(c.min_dims, c.max_dims))
        else:
            shape = [self.side() for _ in range(ndims[self.draw(ints(0, len(ndims) - 1))])]
        return self._clamp(shape, list(range(len(shape))), self._budget(plan))

    def _plan_fn(self, spec: OpSpec) -> list[_Slot] | None:
        """Slot 0 free; later slots related to slot 0's shape (same, broadcast, one axis resized, free)."""
        n = spec.arity if spec.arity is not None else self.draw(ints(1, 3))
        doms = spec.domains_for(n)
        wide = spec.name in AXIS_OPS and not spec.user
        plan: list[_Slot] = []
        for i in range(n):
            if i == 0:
                target = None
            else:
                s0 = plan[0].shape
                rel = self.draw(ints(0, 3))
                if rel == 0 or (rel == 2 and not s0):
                    target = tuple(s0)
                elif rel == 1:
                    target = self._loop_variant(s0, self.cfg.max_dims)
                elif rel == 2:  # one axis resized (joins along a dim)
                    ax = self.draw(ints(0, len(s0) - 1))
                    target = tuple(self.side() if j == ax else s for j, s in enumerate(s0))
                else:
                    target = self.free_shape(self.cfg.min_dims, self.cfg.max_dims)
            slot = self._choose(
                plan, i, spec, doms[i],
                lambda shape: target is None or tuple(shape) == target,
                lambda: self._free_leaf_shape(plan, wide=wide) if target is None else tuple(target),
            )
            if slot is None:
                return None
            plan.append(slot)
        return plan

    def _plan_templates(self, spec: OpSpec, templates: dict) -> list[_Slot] | None:
        """Slot 0 of an ndim the op has templates for; later slots instantiate one template
        (axes equal to earlier slots' axes, ones, or one new size), see ``_shape_templates``."""
        n = spec.arity
        doms = spec.domains_for(n)
        c = self.cfg
        ndims = [d for d in sorted(templates) if c.min_dims <= d <= c.max_dims]
        if not ndims:
            return None
        slot0 = self._choose([], 0, spec, doms[0], lambda shape: len(shape) in templates,
                             lambda: self._free_leaf_shape([], ndims))
        if slot0 is None:
            return None
        plan = [slot0]
        tmpls = [
            t for t in templates[len(slot0.shape)]
            if all(c.min_dims <= len(codes) <= c.max_dims for codes in t)
            and (c.min_side <= 1 or not any(code == ("one",) for codes in t for code in codes))
        ]
        # The dims/sides bounds are kept wherever the op's shape rule leaves a choice; an op
        # that needs, say, a 1-D bias under min_dims=2 still gets one.
        strict = bool(tmpls)
        tmpls = tmpls or templates[len(slot0.shape)]
        tmpl = tmpls[self.draw(ints(0, len(tmpls) - 1))]
        for i in range(1, n):
            codes = tmpl[i - 1]
            shapes = [s.shape for s in plan]
            slot = self._choose(
                plan, i, spec, doms[i],
                lambda shape: _template_match(codes, shapes, shape),
                lambda: _template_make(codes, shapes, self.side()),
                strict,
            )
            if slot is None:
                return None
            plan.append(slot)
        return plan

    # -- one node --------------------------------------------------------------------------------
    def try_op(self, spec: OpSpec):
        cores = None
        if spec.shape_fn is None and spec.signature is not None and spec.arity is not None:
            try:
                cores = _parse_signature(spec.signature)[0]
            except SignatureError:
                cores = None
            if cores is not None and len(cores) != spec.arity:
                cores = None
        templates = _shape_templates(spec) if cores is None else None
        for _ in range(_ATTEMPTS):
            res = _span(self, self._attempt, spec, cores, templates)
            if res is not None:
                return res
        return None

    def _attempt(self, spec: OpSpec, cores, templates):
        if cores is not None:
            plan = self._plan_signature(spec, cores)
        elif templates:
            plan = self._plan_templates(spec, templates)
        else:
            plan = self._plan_fn(spec)
        if plan is None:
            return None
        shapes = [tuple(s.shape) for s in plan]
        for _ in range(2 if spec.param_strategy is not None else 1):  # params that fit these shapes
            params = self.draw(_param_strategy(spec, tuple(shapes))) if spec.param_strategy is not None else {}
            try:
                canon = spec.canonical(shapes, dict(params))
            except Exception:  # noqa: BLE001 - params invalid for these shapes: try again
                continue
            out = spec.out_shape(shapes, canon)
            if out is None or _numel(out) > _OUT_CAP:
                continue
            kind = self._probe(spec, plan, canon, tuple(out))
            if kind is None:
                continue
            return plan, canon, tuple(out), kind
        return None

    def _probe(self, spec: OpSpec, plan: list[_Slot], params: dict, out: tuple) -> str | None:
        """Run forward once on tame values of the planned shapes: rejects shapes/params where the
        op is undefined everywhere (var of one element, an exception) before any value is drawn.
        The probe's inputs depend on shapes, kinds, domains and dtype only, so its verdict is cached."""
        try:
            key = (id(spec), tuple((tuple(s.shape), s.kind, s.domain) for s in plan), repr(sorted(params.items())),
                   out, self.dtype)
            hash(key)
        except TypeError:  # an unhashable domain: probe every time
            key = None
        hit = _PROBE_CACHE.get(key) if key is not None else None
        if hit is not None and hit[0] is spec:
            kind = hit[1]
        else:
            kind = self._probe_now(spec, plan, params, out)
            if key is not None:
                if len(_PROBE_CACHE) > 50000:
                    _PROBE_CACHE.clear()
                _PROBE_CACHE[key] = (spec, kind)
        if kind in _UNFINITE:  # a user op's forward not finite at tame values of its domain: a draw skipped, counted
            if _draw_tally.active():  # (a cached verdict too: the run in progress is told of every shape it drops)
                _draw_tally.seen(spec.name, [_probe_array(tuple(s.shape), s.kind, s.domain, self.dtype) for s in plan],
                                 _UNFINITE[kind])
            return None
        return kind

    def _probe_now(self, spec: OpSpec, plan: list[_Slot], params: dict, out: tuple) -> str | None:
        arrays = [_probe_array(tuple(s.shape), s.kind, s.domain, self.dtype) for s in plan]
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                y = _bounded.forward(spec, arrays, params, "the shape probe of a node being drawn")
        except Exception:  # noqa: BLE001 - the op rejects these shapes/params
            return None
        if y is None:  # a user forward that hung (cut by the per-case timeout): the case's own check meets it
            return "float"
        y = np.asarray(y)
        if tuple(y.shape) != out:
            rule = f"signature {spec.signature!r}" if spec.signature and spec.shape_fn is None else "shape rule"
            raise RuntimeError(
                f"op {spec.name!r}: its {rule} gives {out} for inputs {[s.shape for s in plan]} and params "
                f"{params}, but forward returns {tuple(y.shape)}: fix the declaration (signature= / shape_fn=), or "
                "the forward where it should follow it"
            )
        if np.issubdtype(y.dtype, np.floating):
            if not np.all(np.isfinite(y)):
                return None if not spec.user else "unfinite NaN" if np.isnan(y).any() else "unfinite inf"
            return "float"
        return "bool" if y.dtype == np.bool_ else "other"

    def commit(self, spec: OpSpec, plan: list[_Slot], params: dict, out: tuple, kind: str) -> None:
        inputs = []
        for s in plan:
            if s.use is None:
                name = f"x{len(self.leaves)}"
                if s.kind == "float":
                    rg = self.draw(ints(0, 5)) != 5  # ~1 leaf in 6 is a constant
                    leaf = GraphLeaf(name, tuple(s.shape), self.dtype, rg, [s.domain])
                    self.elements += _numel(s.shape)
                else:
                    leaf = GraphLeaf(name, tuple(s.shape), "bool", False, [])
                self.leaves.append(leaf)
                self.t[name] = _T(name, tuple(s.shape), s.kind, True, leaf.requires_grad)
                self.order.append(name)
                s.use = name
            elif self.t[s.use].leaf and s.kind == "float":
                self._leaf(s.use).domains.append(s.domain)
            inputs.append(s.use)
        rg = kind == "float" and any(
            self.t[n].requires_grad for i, n in enumerate(inputs) if spec.input_differentiable(i)
        )
        name = f"v{len(self.nodes)}"
        self.nodes.append(NodeDef(name, spec.name, inputs, params))
        self.t[name] = _T(name, out, kind, False, rg)
        self.order.append(name)

    # -- the whole graph -----------------------------------------------------------------------
    def add_node(self) -> bool:
        c = self.cfg
        idx = self.draw(ints(0, len(c.ops) - 1))
        # If the drawn op cannot be built here (no leaf budget left and no tensor fits), fall
        # back to the simplest ops (op 0 of the default list takes any float tensor); a short
        # user list is tried whole.
        others = c.ops[:idx] + c.ops[idx + 1:]
        for spec in [c.ops[idx]] + (others if len(others) <= 8 else others[:4]):
            res = self.try_op(spec)
            if res is not None:
                self.commit(spec, *res)
                return True
        return False

    def build(self) -> Graph:
        c = self.cfg
        self.dtype_mode = _hard.draw_dtype_mode(self.draw, c.dtype)
        self.dtype = "float32" if self.dtype_mode == "float32" else "float64"
        # One sub-strategy per node, with its own "one more node?" flag (as st.lists does): the
        # shrinker can then delete any node's choices as a block, so graphs shrink to fewer nodes.
        while len(self.nodes) < c.max_nodes:
            if not _span(self, _node_step, self, len(self.nodes) >= c.min_nodes):
                break
        assume(len(self.nodes) >= c.min_nodes)
        while len(self.leaves) < c.min_leaves or not any(l.is_float for l in self.leaves):
            name = f"x{len(self.leaves)}"
            shape = list(self.free_shape(c.min_dims, c.max_dims))
            shape = self._clamp(shape, list(range(len(shape))), self._budget([]))
            self.leaves.append(GraphLeaf(name, shape, self.dtype, True, []))
            self.t[name] = _T(name, shape, "float", True, True)
            self.order.append(name)
        if not any(t.requires_grad for t in self.t.values()):
            # every float leaf was drawn constant: make them all require grad so a root exists
            for l in self.leaves:
                if l.is_float:
                    l.requires_grad = True
            self._recompute_requires_grad()
        roots = self._roots()
        g = Graph(
            leaves=self.leaves,
            nodes=self.nodes,
            roots=roots,
            shapes={n: t.shape for n, t in self.t.items()},
            requires_grad={n: t.requires_grad for n, t in self.t.items()},
            user_ops=dict(c.user_ops),
        )
        if self.dtype_mode == "mixed":
            dts = _hard.mixed_dtypes(g, self.draw(_MIX_PICK))
            if dts is None:  # one float leaf, or every op needs one dtype: plain float64
                self.dtype_mode = "float64"
            else:
                for l, dt in zip(g.leaves, dts, strict=True):
                    l.dtype = dt
        return g

    def _recompute_requires_grad(self) -> None:
        for l in self.leaves:
            self.t[l.name].requires_grad = l.requires_grad
        for n in self.nodes:
            spec = _spec_of(n.op, self.cfg.user_ops)
            t = self.t[n.name]
            t.requires_grad = t.kind == "float" and any(
                self.t[i].requires_grad for j, i in enumerate(n.inputs) if spec.input_differentiable(j)
            )

    def _roots(self) -> list[str]:
        """1-3 roots: nodes (the last node first: the shrink target), occasionally a leaf; numel-1
        tensors preferred half of the time so the implicit-seed rule is exercised often."""
        c = self.cfg
        r = self.draw(ints(c.min_roots, c.max_roots))
        ok = [n for n in self.order if self.t[n].requires_grad and self.t[n].kind == "float"]
        nodes = [n.name for n in reversed(self.nodes) if n.name in ok]
        leaves = [n for n in ok if self.t[n].leaf]
        roots: list[str] = []
        for k in range(r):
            free_nodes = [n for n in nodes if n not in roots]
            free_leaves = [n for n in leaves if n not in roots]
            leaf = bool(free_leaves) and self.draw(ints(0, 7)) == 7  # occasionally a leaf
            if free_nodes and not leaf:
                pool = free_nodes
            elif k >= c.min_roots and not leaf:
                break  # out of nodes: fewer roots rather than many leaf roots
            elif free_leaves:
                pool = free_leaves
            else:
                pool = ok  # fewer distinct tensors than min_roots: a root may repeat
            if self.draw(BOOLS):
                pool = [n for n in pool if _numel(self.t[n].shape) == 1] or pool
            roots.append(pool[self.draw(ints(0, max(15, len(pool) - 1))) % len(pool)])
        return roots


_WIDE = st.integers(0, 3)  # 0 (the shrink target): a reduction's new input of any shape, else a wide one
_MORE = st.integers(0, 7)  # 0 (the shrink target) stops adding nodes
_MIX_PICK = st.integers(0, 15)  # which float leaf starts the float32 set of a mixed graph


_PENDING = threading.local()  # (builder, fn, args) handed to the next draw of _SPAN


@st.composite
def _span_strategy(draw):
    """Run ``fn(*args)`` with the builder drawing inside a sub-strategy: each node, planning
    attempt and input slot becomes one block of choices that the shrinker can delete whole (e.g.
    the second input's choices when an op shrinks from ``maximum`` to ``neg``), and that Hypothesis'
    mutator can copy onto another block (how ``x * x`` and fan-out come about)."""
    builder, fn, args = _PENDING.stack.pop()
    outer = builder.draw
    builder.draw = draw
    try:
        return fn(*args)
    finally:
        builder.draw = outer


# ONE strategy object for every block: a fresh composite per call was validated by Hypothesis on
# its first draw, which cost more than everything the block drew.
_SPAN = _span_strategy()


def _span(builder: "_Builder", fn, *args):
    """Draw ``fn(*args)`` as one block (see ``_span_strategy``)."""
    stack = getattr(_PENDING, "stack", None)
    if stack is None:
        stack = _PENDING.stack = []
    entry = (builder, fn, args)
    stack.append(entry)
    try:
        return builder.draw(_SPAN)
    finally:
        if stack and stack[-1] is entry:  # the draw stopped before the block ran (Hypothesis' StopTest)
            stack.pop()


def _node_step(builder: "_Builder", optional: bool) -> bool:
    # The "one more node?" flag sits in the node's block, as in st.lists.
    if optional and builder.draw(_MORE) == 0:
        return False
    return builder.add_node()


def _config(ops, min_leaves, max_leaves, min_nodes, max_nodes, min_roots, max_roots, dtype, min_dims, max_dims,
            min_side, max_side, max_elements) -> _Cfg:
    _check_int("min_leaves", min_leaves, floor=1)
    _check_int("max_leaves", max_leaves, floor=1)
    _check_order("min_leaves", min_leaves, "max_leaves", max_leaves)
    _check_int("min_nodes", min_nodes)
    _check_int("max_nodes", max_nodes)
    _check_order("min_nodes", min_nodes, "max_nodes", max_nodes)
    _check_int("min_roots", min_roots, floor=1)
    _check_int("max_roots", max_roots, floor=1)
    _check_order("min_roots", min_roots, "max_roots", max_roots)
    _check_int("min_dims", min_dims)
    _check_int("max_dims", max_dims, ceiling=32)
    _check_order("min_dims", min_dims, "max_dims", max_dims)
    _check_int("min_side", min_side)
    _check_int("max_side", max_side)
    _check_order("min_side", min_side, "max_side", max_side)
    _check_int("max_elements", max_elements, floor=1)
    dt = _args._check_dtype_mix(dtype)
    specs, user_ops = _resolve_ops(ops)
    return _Cfg(specs, user_ops, min_leaves=min_leaves, max_leaves=max_leaves, min_nodes=min_nodes,
                max_nodes=max_nodes, min_roots=min_roots, max_roots=max_roots, dtype=dt, min_dims=min_dims,
                max_dims=max_dims, min_side=min_side, max_side=max_side, max_elements=max_elements)


@st.composite
def _graphs(draw, cfg: _Cfg) -> Graph:
    return _Builder(draw, cfg).build()
