"""Values and seeds for a graph: leaf values (one bytes choice per leaf), the hard-region plant,
the domain/kink check at the actual intermediate values, repairs, and one seed per root."""

from __future__ import annotations

import functools
import math
import warnings
from typing import Mapping

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from .._private import draw_tally as _draw_tally
from .._private import graphwalk as _graphwalk
from .._private import percase as _percase
from .._private import values as _values
from ..case import Case
from . import _bounded, _hard
from ._graph import Graph, GraphLeaf, _Builder, _Cfg, _numel
from ._shapes import ints

CHECK_MARGIN = _values.CHECK_MARGIN
_MAX_ABS = 1e8  # intermediate values beyond this make finite differences meaningless
_REPAIRS = 4  # value repairs per case before the case is rejected
_SEED_BITS = 2**32 - 1
_BPE = _values.BYTES_PER_ELEMENT


# ---------------------------------------------------------------------------------------------
# values and seeds
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _raw(nbytes: int):
    return st.binary(min_size=nbytes, max_size=nbytes)


def draw_array(draw, shape: tuple, doms, dtype: str, min_magnitude: float = 1e-3, max_magnitude: float = 1e3):
    """One bytes choice -> an array of ``shape`` in every domain of ``doms`` (see ``values.Decoder``)."""
    n = _numel(shape)
    dec = _values.decoder(tuple(dict.fromkeys(doms)), min_magnitude, max_magnitude)
    raw = draw(_raw(n * _BPE)) if n else b""
    return dec(raw, n).astype(dtype).reshape(shape)


@functools.lru_cache(maxsize=4096)
def _values_strategy_cached(shape: tuple, doms: tuple, dtype: str, min_magnitude: float, max_magnitude: float):
    n = _numel(shape)
    dec = _values.decoder(doms, min_magnitude, max_magnitude)
    return _raw(n * _BPE).map(lambda raw: dec(raw, n).astype(dtype).reshape(shape))


def _values_strategy(shape, doms, dtype: str, min_magnitude: float, max_magnitude: float):
    # Strategies are cached: building and validating a fresh one per leaf dominates generation time.
    return _values_strategy_cached(tuple(shape), tuple(dict.fromkeys(doms)), dtype, min_magnitude, max_magnitude)


def draw_bools(draw, shape: tuple) -> np.ndarray:
    """One bytes choice -> a bool array (odd byte = True; shrinks to all False)."""
    n = _numel(shape)
    raw = draw(_raw(n)) if n else b""
    return (np.frombuffer(raw, dtype=np.uint8) & 1).astype(bool).reshape(shape)


_SEED_KINDS = ("ones", "ones", "zeros", "onehot", "integers", "random", "random", "random", "random", "random")
_SEED_KIND = ints(0, len(_SEED_KINDS) - 1)
_OTHER_DTYPE = ints(0, 5)
_SMALL_INTS = np.array([0.0, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0])


@st.composite
def _seeds(draw, shape, dtype, implicit, mixed_dtypes):
    return draw_seed(draw, shape, dtype, implicit, mixed_dtypes)


def draw_seed(draw, shape, dtype, implicit, mixed_dtypes):
    """What ``seeds()`` draws, with the caller's ``draw`` (a composite per seed costs more than the seed)."""
    n = _numel(shape)
    k = draw(_SEED_KIND)
    if implicit and n == 1 and k <= 3:
        return None
    kind = _SEED_KINDS[k]
    if kind == "ones" or n == 0:
        a = np.ones(shape)
    elif kind == "zeros":
        a = np.zeros(shape)
    elif kind == "onehot":  # one row of the Jacobian
        a = np.zeros(n)
        a[draw(ints(0, n - 1))] = 1.0
        a = a.reshape(shape)
    elif kind == "integers":
        a = _SMALL_INTS[np.frombuffer(draw(_raw(n)), dtype=np.uint8) % 7].reshape(shape)
    else:
        a = draw_array(draw, shape, (), "float64")
    dt = dtype
    if mixed_dtypes and draw(_OTHER_DTYPE) == 5:
        dt = "float32" if dtype == "float64" else "float64"  # cast by backward, as torch does
    return a.astype(dt)


# ---------------------------------------------------------------------------------------------
# the check at the actual values, and repairs
# ---------------------------------------------------------------------------------------------


def _first_bad_node(g: Graph, vals: Mapping[str, np.ndarray], allow=frozenset()):
    """``(index, values, slots)`` of the first node whose inputs leave its domain (``slots``: which
    inputs), sit near a kink/tie, or whose output is not finite (or absurdly large); index None
    if every node is fine.  Nodes in ``allow`` (a planted tie/kink) may sit exactly on their kink --
    at distance 0, not merely near it."""
    env = dict(vals)
    plan = _node_plan(g)
    # One floating-point context for the whole pass (one per node cost as much as a small forward).
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for idx, n in enumerate(g.nodes):
            bad = _bad_at(plan[idx], idx, n, env, allow)
            if bad is not None:
                return idx, env, bad
    return None, env, []


def _leaf_plan(g: Graph) -> list:
    """Per leaf: ``(name, shape, numel, bytes strategy, decoder or None for a bool leaf, dtype)``, what
    ``draw_array``/``draw_bools`` look up per call, kept on the graph for all its value sets.  Leaves
    change after the build only by a repair's detach, which appends one: the leaf count is the key."""
    hit = getattr(g, "_leaf_plan", None)
    if hit is not None and hit[0] == len(g.leaves):
        return hit[1]
    plan = []
    for l in g.leaves:
        n = _numel(l.shape)
        if l.is_float:
            dec = _values.decoder(tuple(dict.fromkeys(l.domains)), 1e-3, 1e3)
            plan.append((l.name, l.shape, n, _raw(n * _BPE) if n else None, dec, l.dtype))
        else:
            plan.append((l.name, l.shape, n, _raw(n) if n else None, None, "bool"))
    g._leaf_plan = (len(g.leaves), plan)
    return plan


def leaf_values(draw, g: Graph) -> dict[str, np.ndarray]:
    """One bytes choice per leaf -> its values: ``draw_array`` for a float leaf, ``draw_bools`` for a bool
    one (the same choices and decoding; their per-leaf lookups are done once per graph, ``_leaf_plan``)."""
    vals: dict[str, np.ndarray] = {}
    for name, shape, n, raw, dec, dtype in _leaf_plan(g):
        b = draw(raw) if n else b""
        if dec is not None:
            vals[name] = dec(b, n).astype(dtype).reshape(shape)
        else:
            vals[name] = (np.frombuffer(b, dtype=np.uint8) & 1).astype(bool).reshape(shape)
    return vals


def _node_plan(g: Graph) -> list:
    """Per node: its spec and the input slots whose domain restricts values, with that domain.  A
    graph's value sets share it (kept on the graph, for its ops as they are: a repair that detaches
    an input onto a new leaf changes no op and no domain)."""
    ops = tuple(n.op for n in g.nodes)
    hit = getattr(g, "_node_plan", None)
    if hit is not None and hit[0] == ops:
        return hit[1]
    plan = []
    for n in g.nodes:
        spec = g.spec(n.op)
        doms = spec.domains_for(len(n.inputs))
        plan.append((spec, [(j, d) for j, d in enumerate(doms[:len(n.inputs)]) if _restricts(d)]))
    g._node_plan = (ops, plan)
    return plan


def _restricts(d) -> bool:
    """Whether domain ``d`` can reject a finite value: ``real()`` (no bound, no singular point) cannot,
    and the values checked are always finite (leaves are drawn finite, and a node's float output joins
    the values only after ``_tame``), so its margin test -- a loop over every element -- is skipped."""
    return d is not None and (math.isfinite(d.lo) or math.isfinite(d.hi) or bool(d.points))


def _bad_at(node_plan: tuple, idx: int, n, env: dict, allow) -> list | None:
    """None if node ``n`` is fine at ``env`` (its output is added to ``env``), else the offending input
    slots (empty: the node as a whole -- a kink, an exception, a non-finite or huge output)."""
    spec, restricted = node_plan
    args = [env[i] for i in n.inputs]
    planted = idx in allow
    running = False  # (an exception of the forward, not of kink_distance, is the code under test refusing values)
    if not planted and restricted:
        slots = [j for j, d in restricted if args[j].dtype.kind == "f" and not _values.element_margin_ok(d, args[j])]
        if slots:
            return slots
    try:
        if planted:
            kd = spec.singular_distance(args, n.params)
            if not (kd == 0 or kd >= CHECK_MARGIN * _input_scale(args)):
                return []
        elif spec.kink_distance is not None:
            kd = float(spec.kink_distance(*args, **n.params))
            if not kd >= CHECK_MARGIN * _input_scale(args):
                return []
        running = True
        out = _bounded.forward(spec, args, n.params, "the value repair of a case being drawn")
        if out is None:  # a user forward that hung (cut by the per-case timeout): the case's own check meets it
            env[n.name] = _bounded.placeholder(spec, args, n.params)
            return None
        out = np.asarray(out)
    except Exception as e:  # noqa: BLE001 - treat as invalid values; the repair redraws them
        if running and spec.user and _draw_tally.active():  # the code under test refused values of its domain
            _draw_tally.seen(spec.name, args, error=e)
        return []
    if spec.user and _draw_tally.active():  # (draws a user op's forward is not finite at: skipped, counted)
        _draw_tally.seen(spec.name, args, out, bound=_MAX_ABS)
    if out.dtype.kind == "f" and out.size and not _tame(out):
        return []
    env[n.name] = out
    return None


def _tame(out: np.ndarray) -> bool:
    """Every element finite and at most _MAX_ABS in size."""
    if out.size <= 16:  # element by element: one numpy reduction costs more than a few comparisons
        return all(abs(v) <= _MAX_ABS for v in out.ravel().tolist())  # False for NaN and inf too
    # max |out| is NaN when any element is NaN, inf when any is infinite: one reduction checks all three
    return bool(np.abs(out).max() <= _MAX_ABS)


def _input_scale(args) -> float:
    """max(1, the largest |element| of the float inputs): what a kink distance is relative to."""
    scale = 1.0
    for a in args:
        if a.dtype.kind == "f" and a.size:
            if a.size <= 16:  # the same maximum in Python floats (exact: |x| and max round nothing)
                scale = max(scale, max(abs(v) for v in a.ravel().tolist()))
            else:
                scale = max(scale, float(np.max(np.abs(a))))
    return scale


def _detach_input(g: Graph, idx: int, slots: list, vals: dict, rng, cfg: _Cfg) -> bool:
    """Feed node ``idx`` a fresh leaf instead of a node output it gets degenerate values from.

    Some structures defeat any value repair: ``relu(relu(x))`` (exact zeros at relu's kink),
    ``minimum(minimum(a, b), a)`` (a tie by construction), ``relu(x - x)``, ``exp(exp(exp(x)))``.
    Replacing the offending input by a new leaf of the same shape (tame values in the slot's
    domain) keeps the node and its op; it needs a free leaf slot (``max_leaves``)."""
    node = g.nodes[idx]
    spec = g.spec(node.op)
    leaf_names = {l.name for l in g.leaves}
    cand = [j for j in (slots or range(len(node.inputs)))
            if node.inputs[j] not in leaf_names and spec.input_differentiable(j)]
    if not cand or len(g.leaves) >= cfg.max_leaves:
        return False
    j = cand[-1]
    shape = tuple(g.shapes[node.inputs[j]])
    dom = spec.domains_for(len(node.inputs))[j]
    dtype = np.asarray(vals[node.inputs[j]]).dtype.name if node.inputs[j] in vals else g.leaves[0].dtype
    dtype = dtype if dtype in ("float32", "float64") else "float64"
    name = f"x{len(g.leaves)}"
    while name in g.shapes:
        name += "_"
    g.leaves.append(GraphLeaf(name, shape, dtype, True, [dom]))
    g.shapes[name] = shape
    node.inputs[j] = name
    vals[name] = _values.tame_array(rng, shape, [dom], dtype=dtype)
    g.requires_grad[name] = True
    for n in g.nodes:  # a node fed by the new leaf may now require grad
        sp = g.spec(n.op)
        g.requires_grad[n.name] = g.requires_grad[n.name] or any(
            g.requires_grad[i] for k, i in enumerate(n.inputs) if sp.input_differentiable(k))
    return True


def _ancestor_leaves(g: Graph, idx: int) -> set[str]:
    walked = _graphwalk.ancestors({n.name: n.inputs for n in g.nodes}, g.nodes[idx].inputs)
    return {l.name for l in g.leaves} & walked


def _repair(draw, g: Graph, vals: dict, cfg: _Cfg, reject: bool = True, shared: bool = False):
    """Make every node's inputs valid and clean (see ``_first_bad_node``); returns ``(values, graph)``:
    the evaluated values (None: the values resisted every repair and not ``reject``; a case that
    resists is rejected otherwise) and the graph they are for -- ``g`` itself, or, if an input had to
    be detached onto a new leaf and ``g`` is ``shared`` (a group's graph), a copy of it."""
    for attempt in range(_REPAIRS + 1):
        bad, env, slots = _first_bad_node(g, vals)
        if bad is None:
            return env, g
        if not reject and attempt >= _REPAIRS:
            return None, g
        assume(attempt < _REPAIRS)
        rng = np.random.default_rng(draw(ints(0, _SEED_BITS)))
        # First redraw the leaves behind the failing node with tame values; if that did not
        # help, the structure is degenerate: detach the node from the offending input; last,
        # redraw every float leaf.
        if attempt >= 1:
            if shared:  # copied only where a detach may change it: most value sets need no repair
                g, shared = g.copy(), False
            if _detach_input(g, bad, slots, vals, rng, cfg):
                continue
        redo = _ancestor_leaves(g, bad) if attempt < 2 else {l.name for l in g.leaves}
        for l in g.leaves:
            if l.name in redo and l.is_float:
                vals[l.name] = _values.tame_array(rng, l.shape, l.domains, dtype=l.dtype)
    raise AssertionError("unreachable")  # pragma: no cover - assume() above ends the loop


def value_set(draw, g: Graph, cfg: _Cfg, dtype_mode: str, reject: bool = True, template: Case | None = None,
              seed_blocks: bool = True, shared: bool = False, keep_forward: bool = False) -> Case | None:
    """One set of values for graph ``g`` (leaf values, repairs, the hard-region plant, one seed per
    root) as a :class:`Case`.  ``g`` may be changed by a repair (an input detached onto a fresh
    leaf) unless ``shared``: then such a repair works on a copy.  None when the values resist repair
    and not ``reject``.
    ``template``: a case of the same graph, whose canonical structure is reused if no repair changed it.
    ``seed_blocks``: each seed drawn as a block of its own (as ``cases()`` always has: Hypothesis'
    mutator copies such blocks, which shapes the mix it generates); a group's sets draw them inline.
    ``keep_forward``: the value check's last clean pass (every node's forward at these very values) is
    offered to the case's first check (``_private.percase.offer_forward``; fuzz's prefetch takes it)."""
    vals = leaf_values(draw, g)
    env, g = _repair(draw, g, vals, cfg, reject, shared)
    if env is None:
        return None
    planted_env: list = []

    def bad_node(graph, values, allow=frozenset()):
        out = _first_bad_node(graph, values, allow)
        planted_env[:] = [out[1]]
        return out

    vals, hard = _hard.maybe_plant(draw, g, vals, bad_node)
    if hard:  # the plant's own check evaluated the graph at the planted values (the same call, done once)
        env = planted_env[0]
    if seed_blocks:
        sd = [draw(_seeds(tuple(np.shape(env[r])), np.asarray(env[r]).dtype.name, True, True)) for r in g.roots]
    else:
        sd = [draw_seed(draw, tuple(np.shape(env[r])), np.asarray(env[r]).dtype.name, True, True) for r in g.roots]
    if template is not None and len(g.leaves) == len(template.leaves):  # a repair detaches onto a new leaf
        case = g.case_like(template, vals, sd)
    else:
        case = g.case(vals, sd)
    case.meta["generator"] = "gradspec.strategies.cases"
    case.meta["dtype"] = dtype_mode
    if hard:
        case.meta["hard"] = hard
    if keep_forward:
        _offer_forward(case, g, env)
    return case


def _offer_forward(case: Case, g: Graph, env: dict) -> None:
    """Offer ``env`` (the clean pass of ``_first_bad_node`` at the case's final values) as the case's
    forward where it is exactly what ``Case._forward`` computes: the same function (no user op: theirs
    may be cut by a timeout and replaced by a placeholder), the very leaf arrays, the same ops, inputs
    and params node by node (the case's canonical params equal the graph's, which ``spec.canonical``
    made; anything that cannot be compared is not offered)."""
    if len(case.nodes) != len(g.nodes) or any(spec.user for spec, _ in _node_plan(g)):
        return
    try:
        for cn, gn in zip(case.nodes, g.nodes):
            if cn.name != gn.name or cn.op != gn.op or cn.inputs != gn.inputs or not bool(cn.params == gn.params):
                return
    except Exception:  # noqa: BLE001 - params that do not compare (arrays): the check computes its own
        return
    _percase.offer_forward(case, env)


@st.composite
def _cases(draw, cfg: _Cfg) -> Case:
    builder = _Builder(draw, cfg)
    g = builder.build()
    return value_set(draw, g, cfg, builder.dtype_mode)
