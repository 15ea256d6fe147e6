"""Hypothesis strategies for gradspec: shapes, values, seeds, graphs and whole cases.

Everything is generated *valid by construction* from the op declarations (``OpSpec``): each
node's op is drawn first, then its inputs are chosen among existing tensors whose shapes fit
(or new leaves are created with shapes drawn to fit), using the op's gufunc ``signature`` or,
failing that, its ``shape_fn`` + ``param_strategy`` checked with ``out_shape``.  Leaf values
are drawn from the domains of *every* slot that consumes them; after drawing, the case is
evaluated and every node's inputs are checked against the op's domain and ``kink_distance``
(ties, clamp bounds...) with a relative margin of ``1e-3`` (far beyond the finite-difference
reach).  Failures are repaired, not rejected: the offending leaves are redrawn with tame values,
and where the structure itself is degenerate (``relu(relu(x))``, ``minimum(minimum(a, b), a)``)
the node is fed a fresh leaf instead; only the rare case that resists both is rejected.
Restricted domains with an edge (``log``, ``sqrt``...) are only ever fed by leaves, whose
values are drawn inside them.

Shrinking goes towards fewer nodes, the simplest ops (the op list is sorted simple -> complex
and an op is drawn by index), inputs that reuse the latest tensor (a chain), smaller shapes,
the value 1.0 and seeds of ones (or the implicit seed for numel-1 roots).

Example::

    >>> from hypothesis import given, settings
    >>> from gradspec import strategies as gst
    >>> @settings(max_examples=5, deadline=None)
    ... @given(gst.cases(ops=["mul", "sum", "exp"], max_nodes=3))
    ... def test(case):
    ...     assert set(case.ops) <= {"mul", "sum", "exp"}
    ...     case.evaluate()
    >>> test()
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Any, Mapping, Sequence

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.extra import numpy as hnp

from . import domains as _domains
from ._private import values as _values
from ._private.signature import SignatureError
from ._private.signature import parse as _parse_signature
from .case import Case, Leaf, NodeDef
from .spec import registry as _registry
from .spec.opspec import OpSpec

__all__ = [
    "shapes",
    "broadcastable_shapes",
    "values",
    "seeds",
    "graphs",
    "cases",
    "op_order",
    "unusable_ops",
    "Graph",
    "GraphLeaf",
    "CHECK_MARGIN",
]

CHECK_MARGIN = _values.CHECK_MARGIN
_DTYPES = ("float64", "float32")
_MAX_ABS = 1e8  # intermediate values beyond this make finite differences meaningless
_OUT_CAP = 1024  # elements of any node's output
_ATTEMPTS = 3  # planning attempts per op before falling back to a simpler op
_REPAIRS = 4  # value repairs per case before the case is rejected
_SEED_BITS = 2**32 - 1


# ---------------------------------------------------------------------------------------------
# argument validation (up front, in the style of hypothesis.extra.numpy)
# ---------------------------------------------------------------------------------------------


def _check_int(name: str, value: Any, floor: int = 0, ceiling: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgument(f"{name}={value!r} must be an integer, not {type(value).__name__}")
    if value < floor:
        raise InvalidArgument(f"{name}={value!r} must be at least {floor}; pass {name}>={floor}")
    if ceiling is not None and value > ceiling:
        raise InvalidArgument(f"{name}={value!r} must be at most {ceiling}; pass {name}<={ceiling}")


def _check_order(lo_name: str, lo: Any, hi_name: str, hi: Any) -> None:
    if hi is not None and lo > hi:
        raise InvalidArgument(f"{lo_name}={lo!r} is larger than {hi_name}={hi!r}; pass {lo_name} <= {hi_name}")


def _check_shape(shape: Any, name: str = "shape") -> tuple:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape),)
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape
    ):
        raise InvalidArgument(f"{name}={shape!r} must be a tuple of integers, e.g. {name}=(2, 3)")
    if any(s < 0 for s in shape):
        raise InvalidArgument(f"{name}={tuple(shape)!r} has a negative size; every size must be >= 0")
    return tuple(int(s) for s in shape)


def _check_dtype(dtype: Any, name: str = "dtype") -> str:
    try:
        dt = np.dtype(dtype).name
    except TypeError:
        dt = None
    if dt not in _DTYPES:
        raise InvalidArgument(f"{name}={dtype!r} is not supported: pass {name}='float64' or {name}='float32'")
    return dt


def _check_magnitudes(min_magnitude: Any, max_magnitude: Any) -> None:
    for name, v in (("min_magnitude", min_magnitude), ("max_magnitude", max_magnitude)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not math.isfinite(v):
            raise InvalidArgument(f"{name}={v!r} must be a finite number")
        if v <= 0:
            raise InvalidArgument(f"{name}={v!r} must be > 0 (exact zeros are drawn anyway where the domain allows)")
    _check_order("min_magnitude", min_magnitude, "max_magnitude", max_magnitude)
    if max_magnitude > 1e8:
        raise InvalidArgument(
            f"max_magnitude={max_magnitude!r} is beyond where float64 finite differences stay meaningful; "
            "pass max_magnitude<=1e8"
        )


def _check_domain(domain: Any) -> list:
    doms = domain if isinstance(domain, (list, tuple)) else [domain]
    out = []
    for d in doms:
        if d is None:
            continue
        if not isinstance(d, _domains.Domain):
            raise InvalidArgument(
                f"domain={domain!r} must be a gradspec.domains.Domain (e.g. gs.domains.positive()) or a list of them"
            )
        out.append(d)
    return out


# ---------------------------------------------------------------------------------------------
# shapes
# ---------------------------------------------------------------------------------------------


def _draw_side(draw, lo: int, hi: int, zero_odds: int) -> int:
    """A side in [lo, hi]: 1 often (~30%), 0 rarely (1 in 2 * zero_odds), shrinking towards 1."""
    if lo == hi:
        return lo
    r = draw(st.integers(0, 15))
    # Size 0 costs two extra choices: Hypothesis prefers shorter choice sequences when shrinking,
    # and an empty tensor (no values to draw) would otherwise be the "simplest" shape of all.
    if lo == 0 and r == 15 and draw(st.integers(0, zero_odds // 16 - 1)) == zero_odds // 16 - 1 and draw(
        st.booleans()
    ):
        return 0
    lo1 = max(lo, 1)
    if lo1 == 1 and r < 5:
        return 1
    return draw(st.integers(lo1, hi))


@st.composite
def _shapes(draw, min_dims, max_dims, min_side, max_side, zero_odds):
    nd = draw(st.integers(min_dims, max_dims))
    return tuple(_draw_side(draw, min_side, max_side, zero_odds) for _ in range(nd))


def shapes(*, min_dims: int = 0, max_dims: int = 4, min_side: int = 0, max_side: int = 5):
    """Array shapes with ``min_dims..max_dims`` axes of sizes ``min_side..max_side``.

    Size-1 axes are common (about 30% of sides), size 0 is rare; shrinks towards fewer axes of
    size 1.

    Example::

        >>> from hypothesis import given, settings
        >>> from gradspec import strategies as gst
        >>> @settings(max_examples=20)
        ... @given(gst.shapes(min_dims=1, max_dims=2, max_side=3))
        ... def test(shape):
        ...     assert 1 <= len(shape) <= 2 and all(0 <= s <= 3 for s in shape)
        >>> test()
    """
    _check_int("min_dims", min_dims)
    _check_int("max_dims", max_dims, ceiling=32)
    _check_order("min_dims", min_dims, "max_dims", max_dims)
    _check_int("min_side", min_side)
    _check_int("max_side", max_side)
    _check_order("min_side", min_side, "max_side", max_side)
    return _shapes(min_dims, max_dims, min_side, max_side, 16)


def broadcastable_shapes(
    shape: tuple = (),
    *,
    num_shapes: int | None = None,
    signature: str | None = None,
    min_dims: int = 0,
    max_dims: int | None = None,
    min_side: int = 1,
    max_side: int | None = None,
):
    """Shapes that broadcast with each other and with ``shape`` (``hypothesis.extra.numpy``'s
    ``mutually_broadcastable_shapes``): ``num_shapes`` of them (default 2), or one per input of a
    gufunc ``signature`` such as ``"(m,n),(n,p)->(m,p)"`` (core dims then match).

    Draws a ``BroadcastableShapes(input_shapes, result_shape)`` named tuple.

    Example::

        >>> import numpy as np
        >>> from hypothesis import given, settings
        >>> from gradspec import strategies as gst
        >>> @settings(max_examples=20)
        ... @given(gst.broadcastable_shapes((2, 3), num_shapes=3))
        ... def test(bs):
        ...     assert np.broadcast_shapes((2, 3), *bs.input_shapes) == bs.result_shape
        >>> test()
    """
    shape = _check_shape(shape)
    if signature is not None and num_shapes is not None:
        raise InvalidArgument(
            f"num_shapes={num_shapes!r} and signature={signature!r}: pass one of them (a signature fixes the count)"
        )
    if signature is not None:
        if not isinstance(signature, str):
            raise InvalidArgument(f"signature={signature!r} must be a string like '(m,n),(n,p)->(m,p)'")
        try:
            _parse_signature(signature)
        except SignatureError as e:
            raise InvalidArgument(f"signature={signature!r} is invalid: {e}") from None
    else:
        num_shapes = 2 if num_shapes is None else num_shapes
        _check_int("num_shapes", num_shapes, floor=1)
    _check_int("min_dims", min_dims)
    if max_dims is not None:
        _check_int("max_dims", max_dims, ceiling=32)
        _check_order("min_dims", min_dims, "max_dims", max_dims)
    _check_int("min_side", min_side)
    if max_side is not None:
        _check_int("max_side", max_side)
        _check_order("min_side", min_side, "max_side", max_side)
    kw = dict(base_shape=shape, min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)
    if signature is not None:
        return hnp.mutually_broadcastable_shapes(signature=signature.replace(" ", ""), **kw)
    return hnp.mutually_broadcastable_shapes(num_shapes=num_shapes, **kw)


# ---------------------------------------------------------------------------------------------
# values and seeds
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _elements(doms: tuple, min_magnitude: float, max_magnitude: float):
    return _values.domain_floats(list(doms), min_magnitude=min_magnitude, max_magnitude=max_magnitude)


@functools.lru_cache(maxsize=4096)
def _values_strategy_cached(shape: tuple, doms: tuple, dtype: str, min_magnitude: float, max_magnitude: float):
    n = int(np.prod(shape, dtype=np.int64))
    elems = _elements(doms, min_magnitude, max_magnitude)
    return st.lists(elems, min_size=n, max_size=n).map(
        lambda vs: np.array(vs, dtype=np.float64).astype(dtype).reshape(shape)
    )


def _values_strategy(shape, doms, dtype: str, min_magnitude: float, max_magnitude: float):
    # Strategies are cached: building and validating a fresh one per leaf dominates generation time.
    return _values_strategy_cached(tuple(shape), tuple(dict.fromkeys(doms)), dtype, min_magnitude, max_magnitude)


@functools.lru_cache(maxsize=1024)
def _bools(n: int):
    return st.lists(st.booleans(), min_size=n, max_size=n)


def values(
    shape: tuple,
    domain=None,
    *,
    dtype: str = "float64",
    min_magnitude: float = 1e-3,
    max_magnitude: float = 1e3,
):
    """Float arrays of ``shape`` whose every element lies in ``domain`` (a Domain, or a list of
    Domains that must all hold), away from its edges and singular points by a relative margin.

    Elements mix simple values (exact 0 where the domain allows it, +-1, 0.5, 2 ... so exact
    repeats are common), moderate floats, tiny (``min_magnitude``) and large
    (``max_magnitude``) magnitudes, and negatives. Never NaN or Inf. Shrinks towards 1.0.

    Example::

        >>> import numpy as np
        >>> from hypothesis import given, settings
        >>> import gradspec as gs
        >>> from gradspec import strategies as gst
        >>> @settings(max_examples=20)
        ... @given(gst.values((2, 3), gs.domains.positive()))
        ... def test(a):
        ...     assert a.shape == (2, 3) and a.dtype == np.float64 and np.all(a > 0)
        >>> test()
    """
    shape = _check_shape(shape)
    doms = _check_domain(domain)
    dt = _check_dtype(dtype)
    _check_magnitudes(min_magnitude, max_magnitude)
    if _values.Allowed.of(doms, min_magnitude, max_magnitude).empty:
        raise InvalidArgument(
            f"domain={domain!r} has no value with magnitude 0 or in [min_magnitude={min_magnitude!r}, "
            f"max_magnitude={max_magnitude!r}]: widen the magnitudes or the domain"
        )
    return _values_strategy(shape, doms, dt, float(min_magnitude), float(max_magnitude))


@functools.lru_cache(maxsize=1024)
def _small_ints(n: int):
    return st.lists(st.integers(-3, 3), min_size=n, max_size=n)


_SEED_KINDS = ("ones", "ones", "zeros", "onehot", "integers", "random", "random", "random", "random", "random")


@st.composite
def _seeds(draw, shape, dtype, implicit, mixed_dtypes):
    n = int(np.prod(shape, dtype=np.int64))
    k = draw(st.integers(0, len(_SEED_KINDS) - 1))
    if implicit and n == 1 and k <= 3:
        return None
    kind = _SEED_KINDS[k]
    if kind == "ones" or n == 0:
        a = np.ones(shape)
    elif kind == "zeros":
        a = np.zeros(shape)
    elif kind == "onehot":  # one row of the Jacobian
        a = np.zeros(n)
        a[draw(st.integers(0, n - 1))] = 1.0
        a = a.reshape(shape)
    elif kind == "integers":
        a = np.array(draw(_small_ints(n)), dtype=float).reshape(shape)
    else:
        a = draw(_values_strategy(shape, [], "float64", 1e-3, 1e3))
    dt = dtype
    if mixed_dtypes and draw(st.integers(0, 5)) == 5:
        dt = "float32" if dtype == "float64" else "float64"  # cast by backward, as torch does
    return a.astype(dt)


def seeds(shape: tuple, *, dtype: str = "float64", implicit: bool = True, mixed_dtypes: bool = True):
    """Seeds (``gradient=`` arguments of ``backward``) for a root of ``shape``.

    Random, zeros, ones, one-hot (one row of the Jacobian), integer-valued; sometimes in the
    other float dtype (a float32 seed on a float64 root: backward casts it, as torch does);
    for numel-1 roots often ``None``, the implicit seed (when ``implicit``).  Shrinks towards
    ``None`` (numel 1) or ones.

    Example::

        >>> from hypothesis import given, settings
        >>> from gradspec import strategies as gst
        >>> @settings(max_examples=20)
        ... @given(gst.seeds((1, 1)))
        ... def test(seed):
        ...     assert seed is None or seed.shape == (1, 1)
        >>> test()
    """
    shape = _check_shape(shape)
    dt = _check_dtype(dtype)
    if not isinstance(implicit, bool):
        raise InvalidArgument(f"implicit={implicit!r} must be True or False")
    if not isinstance(mixed_dtypes, bool):
        raise InvalidArgument(f"mixed_dtypes={mixed_dtypes!r} must be True or False")
    return _seeds(shape, dt, implicit, mixed_dtypes)


# ---------------------------------------------------------------------------------------------
# ops: resolution, usability, order
# ---------------------------------------------------------------------------------------------

_FAMILY_RANK = {"elementwise": 0, "reduce": 1, "shape": 1, "linalg": 2}


def _ranged(d) -> bool:
    """A domain that excludes a half-line: only leaves (whose values we draw) may feed it."""
    return d is not None and (math.isfinite(d.lo) or math.isfinite(d.hi))


def _complexity(spec: OpSpec) -> tuple:
    arity = spec.arity
    doms = spec.domains_for(arity or 1)
    score = 0 if arity == 1 else (1 if arity == 2 else 2)
    score += int(not spec.linear)
    score += int(spec.normalize is not None or spec.batch_params is not None)
    score += int(any(_ranged(d) for d in doms)) + int(any(d.points for d in doms))
    score += int(spec.kink_distance is not None)
    score += int(spec.differentiable is not None and not all(spec.differentiable))
    if spec.shape_fn is not None:
        score += 1
    elif spec.signature is not None:
        try:
            score += int(any(_parse_signature(spec.signature)[0]))
        except SignatureError:
            score += 1
    return (score, _FAMILY_RANK.get(spec.family, 3), spec.name)


def _unusable_reason(spec: OpSpec) -> str | None:
    """Why strategies cannot build this op at all (None if they can), from its declaration."""
    if spec.arity == 0:
        return "it has no inputs"
    if spec.param_strategy is not None:
        return None
    if spec.signature is not None and spec.shape_fn is None:
        return None
    if spec.arity is not None and spec.arity >= 2 and _shape_templates(spec):
        return None  # some small shapes fit with default params
    tries = [[b] * (spec.arity or k) for b in _BASES for k in (1, 2)]
    for shapes in tries:
        try:
            if spec.out_shape(shapes, spec.canonical(shapes, {})) is not None:
                return None
        except Exception:  # noqa: BLE001 - default params rejected for these shapes
            continue
    return "it declares no param_strategy and rejects default params (no shapes fit with params={})"


def unusable_ops() -> dict[str, str]:
    """Table ops the strategies leave out of the default op list, with the reason (a declaration gap).

    Example::

        >>> from gradspec import strategies as gst
        >>> isinstance(gst.unusable_ops(), dict)
        True
    """
    out = {}
    for name in _registry.public_names():
        why = _unusable_reason(_registry.lookup(name))
        if why:
            out[name] = why
    return out


def _resolve_ops(ops) -> tuple[list[OpSpec], dict]:
    user_ops: dict[str, str] = {}
    if ops is None:
        specs = [_registry.lookup(n) for n in _registry.public_names()]
        specs = [s for s in specs if _unusable_reason(s) is None]
        if not specs:
            raise InvalidArgument("ops=None but the op table has no usable op")
        return sorted(specs, key=_complexity), user_ops
    if isinstance(ops, (str, OpSpec)):
        ops = [ops]
    try:
        ops = list(ops)
    except TypeError:
        raise InvalidArgument(f"ops={ops!r} must be a list of op names (see gs.ops.names()) or None") from None
    if not ops:
        raise InvalidArgument("ops=[] is empty: pass at least one op name (see gs.ops.names()), or ops=None for all")
    specs = []
    for o in ops:
        if isinstance(o, OpSpec):
            spec = o
            if _registry.all_specs().get(spec.name) is not spec:
                if not spec.import_path:
                    raise InvalidArgument(
                        f"ops=[..., {spec!r}, ...]: this OpSpec is not in the op table, so cases could not be "
                        "replayed; register it (gs.ops.register) or give it an import_path"
                    )
                user_ops[spec.name] = spec.import_path
        elif isinstance(o, str):
            try:
                spec = _registry.lookup(o)
            except KeyError as e:
                raise InvalidArgument(f"ops={ops!r}: {e.args[0]}") from None
        else:
            raise InvalidArgument(f"ops={ops!r}: {o!r} is neither an op name nor an OpSpec")
        why = _unusable_reason(spec)
        if why:
            raise InvalidArgument(f"ops={ops!r}: strategies cannot generate op {spec.name!r}: {why}")
        if spec not in specs:
            specs.append(spec)
    return sorted(specs, key=_complexity), user_ops


def op_order(ops=None) -> list[str]:
    """The op list strategies draw from, simplest first (op index 0 is what ops shrink to).

    Example::

        >>> from gradspec import strategies as gst
        >>> gst.op_order(["sum", "mul", "neg"])
        ['neg', 'mul', 'sum']
    """
    return [s.name for s in _resolve_ops(ops)[0]]


# ---------------------------------------------------------------------------------------------
# graphs
# ---------------------------------------------------------------------------------------------


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
        return self.dtype in _DTYPES


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
        case = Case(leaves, nodes, list(self.roots), sd, user_ops=dict(self.user_ops))
        case.canonicalize()
        case.validate()
        return case

    def spec(self, op: str) -> OpSpec:
        return _spec_of(op, self.user_ops)

    def uses(self) -> dict[str, int]:
        """How many op inputs each tensor feeds (fan-out > 1, or twice in one op)."""
        out: dict[str, int] = {}
        for n in self.nodes:
            for i in n.inputs:
                out[i] = out.get(i, 0) + 1
        return out


def _spec_of(op: str, user_ops: Mapping[str, str]) -> OpSpec:
    try:
        return _registry.lookup(op)
    except KeyError:
        from ._private.imports import import_object

        return import_object(user_ops[op])


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
    return int(np.prod(shape, dtype=np.int64))


def _bshape(*shapes) -> tuple | None:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


# Shape templates for ops declared by a ``shape_fn`` with 2-3 inputs (matmul, linear, conv1d,
# losses...): which axes of input j must equal which axes of earlier inputs.  Found once per op by
# enumerating small shapes whose sizes identify the axes (2, 3, 4 for input 0; a fresh size per
# later input), keeping the combinations the shape rule accepts with default params.
_BASES = ((), (2,), (2, 3), (2, 3, 4))
_TEMPLATE_CACHE: dict = {}


def _shape_templates(spec: OpSpec) -> dict[int, list]:
    """{ndim of input 0: [template, ...]}; a template has one code tuple per later input, each
    code ``("ref", input, axis)``, ``("one",)`` or ``("new",)``.  Empty when not applicable."""
    key = id(spec)
    hit = _TEMPLATE_CACHE.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1]
    out: dict[int, list] = {}
    n = spec.arity
    if spec.shape_fn is not None and n is not None and 2 <= n <= 3:
        import itertools

        for base in _BASES:
            found: list = []

            def rec(j, shapes, codes):
                if j == n:
                    try:
                        canon = spec.canonical(shapes, {})
                    except Exception:  # noqa: BLE001 - default params rejected for these shapes
                        return
                    if spec.out_shape(shapes, canon) is not None:
                        found.append(tuple(codes))
                    return
                lookup = {1: ("one",), 4 + j: ("new",)}
                for r, sh in enumerate(shapes):
                    for a, v in enumerate(sh):
                        lookup.setdefault(v, ("ref", r, a))
                for nd in range(4):
                    for combo in itertools.product(sorted(lookup), repeat=nd):
                        rec(j + 1, shapes + [combo], codes + [tuple(lookup[v] for v in combo)])

            rec(1, [base], [])
            if found:
                out[len(base)] = found
    _TEMPLATE_CACHE[key] = (spec, out)
    return out


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

    # -- small draws -------------------------------------------------------------------------
    def side(self) -> int:
        c = self.cfg
        return _draw_side(self.draw, c.min_side, c.max_side, 32)

    def free_shape(self, ndim_lo: int, ndim_hi: int) -> tuple:
        nd = self.draw(st.integers(max(0, ndim_lo), max(0, ndim_lo, ndim_hi)))
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
        v = self.draw(st.integers(0, 3))
        if v == 0:
            return tuple(loop)
        if v == 2:
            return ()
        ones_ok = self.cfg.min_side <= 1  # leaves never get sides below min_side
        out = []
        for s in loop:
            c = self.draw(st.integers(0, 2))
            out.append(1 if c == 1 and ones_ok else self.side() if c == 2 and s == 1 else s)
        if v == 1 and out:
            out = out[self.draw(st.integers(0, len(out))):]  # drop some leading axes
        if v == 3 and room > len(out):
            out = [self.side() for _ in range(self.draw(st.integers(1, room - len(out))))] + out
        return tuple(out)

    def _choose(self, plan: list[_Slot], i: int, spec: OpSpec, dom, fits, make, strict: bool = True) -> _Slot | None:
        return self.draw(_span(self, self._choose_here, plan, i, spec, dom, fits, make, strict))

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
        # Always the same two choices, whatever the state: when an op shrinks to a simpler one
        # the choices after it keep their meaning (new leaf or not; which tensor, latest first).
        wish = self.draw(st.booleans())
        pick = self.draw(st.integers(0, max(15, len(cands) - 1)))
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
    def _free_leaf_shape(self, plan: list[_Slot], ndims: Sequence[int] | None = None) -> tuple:
        c = self.cfg
        if ndims is None:
            shape = list(self.free_shape(c.min_dims, c.max_dims))
        else:
            shape = [self.side() for _ in range(self.draw(st.sampled_from(list(ndims))))]
        return self._clamp(shape, list(range(len(shape))), self._budget(plan))

    def _plan_fn(self, spec: OpSpec) -> list[_Slot] | None:
        """Slot 0 free; later slots related to slot 0's shape (same, broadcast, one axis resized, free)."""
        n = spec.arity if spec.arity is not None else self.draw(st.integers(1, 3))
        doms = spec.domains_for(n)
        plan: list[_Slot] = []
        for i in range(n):
            if i == 0:
                target = None
            else:
                s0 = plan[0].shape
                rel = self.draw(st.integers(0, 3))
                if rel == 0 or (rel == 2 and not s0):
                    target = tuple(s0)
                elif rel == 1:
                    target = self._loop_variant(s0, self.cfg.max_dims)
                elif rel == 2:  # one axis resized (joins along a dim)
                    ax = self.draw(st.integers(0, len(s0) - 1))
                    target = tuple(self.side() if j == ax else s for j, s in enumerate(s0))
                else:
                    target = self.free_shape(self.cfg.min_dims, self.cfg.max_dims)
            slot = self._choose(
                plan, i, spec, doms[i],
                lambda shape: target is None or tuple(shape) == target,
                lambda: self._free_leaf_shape(plan) if target is None else tuple(target),
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
        tmpl = tmpls[self.draw(st.integers(0, len(tmpls) - 1))]
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
            res = self.draw(_span(self, self._attempt, spec, cores, templates))
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
        op is undefined everywhere (var of one element, an exception) before any value is drawn."""
        arrays = [_probe_array(tuple(s.shape), s.kind, s.domain, self.cfg.dtype) for s in plan]
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                y = np.asarray(spec.forward(*arrays, **params))
        except Exception:  # noqa: BLE001 - the op rejects these shapes/params
            return None
        if tuple(y.shape) != out:
            raise RuntimeError(
                f"op {spec.name!r}: its shape rule gives {out} for inputs {[s.shape for s in plan]} and params "
                f"{params}, but forward returns {tuple(y.shape)}: fix the declaration"
            )
        if np.issubdtype(y.dtype, np.floating):
            if not np.all(np.isfinite(y)):
                return None
            return "float"
        return "bool" if y.dtype == np.bool_ else "other"

    def commit(self, spec: OpSpec, plan: list[_Slot], params: dict, out: tuple, kind: str) -> None:
        inputs = []
        for s in plan:
            if s.use is None:
                name = f"x{len(self.leaves)}"
                if s.kind == "float":
                    rg = self.draw(st.integers(0, 5)) != 5  # ~1 leaf in 6 is a constant
                    leaf = GraphLeaf(name, tuple(s.shape), self.cfg.dtype, rg, [s.domain])
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
        idx = self.draw(st.integers(0, len(c.ops) - 1))
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
        # One sub-strategy per node, with its own "one more node?" flag (as st.lists does): the
        # shrinker can then delete any node's choices as a block, so graphs shrink to fewer nodes.
        while len(self.nodes) < c.max_nodes:
            if not self.draw(_span(self, _node_step, self, len(self.nodes) >= c.min_nodes)):
                break
        assume(len(self.nodes) >= c.min_nodes)
        while len(self.leaves) < c.min_leaves or not any(l.is_float for l in self.leaves):
            name = f"x{len(self.leaves)}"
            shape = list(self.free_shape(c.min_dims, c.max_dims))
            shape = self._clamp(shape, list(range(len(shape))), self._budget([]))
            self.leaves.append(GraphLeaf(name, shape, c.dtype, True, []))
            self.t[name] = _T(name, shape, "float", True, True)
            self.order.append(name)
        if not any(t.requires_grad for t in self.t.values()):
            # every float leaf was drawn constant: make them all require grad so a root exists
            for l in self.leaves:
                if l.is_float:
                    l.requires_grad = True
            self._recompute_requires_grad()
        roots = self._roots()
        return Graph(
            leaves=self.leaves,
            nodes=self.nodes,
            roots=roots,
            shapes={n: t.shape for n, t in self.t.items()},
            requires_grad={n: t.requires_grad for n, t in self.t.items()},
            user_ops=dict(c.user_ops),
        )

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
        r = self.draw(st.integers(c.min_roots, c.max_roots))
        ok = [n for n in self.order if self.t[n].requires_grad and self.t[n].kind == "float"]
        nodes = [n.name for n in reversed(self.nodes) if n.name in ok]
        leaves = [n for n in ok if self.t[n].leaf]
        roots: list[str] = []
        for k in range(r):
            free_nodes = [n for n in nodes if n not in roots]
            free_leaves = [n for n in leaves if n not in roots]
            leaf = bool(free_leaves) and self.draw(st.integers(0, 7)) == 7  # occasionally a leaf
            if free_nodes and not leaf:
                pool = free_nodes
            elif k >= c.min_roots and not leaf:
                break  # out of nodes: fewer roots rather than many leaf roots
            elif free_leaves:
                pool = free_leaves
            else:
                pool = ok  # fewer distinct tensors than min_roots: a root may repeat
            if self.draw(st.booleans()):
                pool = [n for n in pool if _numel(self.t[n].shape) == 1] or pool
            roots.append(pool[self.draw(st.integers(0, max(15, len(pool) - 1))) % len(pool)])
        return roots


_MORE = st.integers(0, 5)  # 0 (the shrink target) stops adding nodes


@st.composite
def _span(draw, builder: "_Builder", fn, *args):
    """Run ``fn(*args)`` with the builder drawing inside a sub-strategy: each node, planning
    attempt and input slot becomes one block of choices that the shrinker can delete whole (e.g.
    the second input's choices when an op shrinks from ``maximum`` to ``neg``)."""
    outer = builder.draw
    builder.draw = draw
    try:
        return fn(*args)
    finally:
        builder.draw = outer


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
    dt = _check_dtype(dtype)
    specs, user_ops = _resolve_ops(ops)
    return _Cfg(specs, user_ops, min_leaves=min_leaves, max_leaves=max_leaves, min_nodes=min_nodes,
                max_nodes=max_nodes, min_roots=min_roots, max_roots=max_roots, dtype=dt, min_dims=min_dims,
                max_dims=max_dims, min_side=min_side, max_side=max_side, max_elements=max_elements)


@st.composite
def _graphs(draw, cfg: _Cfg) -> Graph:
    return _Builder(draw, cfg).build()


def graphs(
    *,
    ops=None,
    min_leaves: int = 1,
    max_leaves: int = 4,
    min_nodes: int = 1,
    max_nodes: int = 10,
    min_roots: int = 1,
    max_roots: int = 3,
    dtype: str = "float64",
    min_dims: int = 0,
    max_dims: int = 3,
    min_side: int = 0,
    max_side: int = 4,
    max_elements: int = 256,
):
    """Graph structures (:class:`Graph`: leaves with shapes, nodes, roots; no values), shape-valid
    by construction for every op in ``ops`` (names or OpSpecs; default: the whole usable table).

    Includes fan-out, the same tensor twice in one op (``x * x``), constant leaves, bool
    condition leaves for non-differentiable inputs (``where``'s condition), and 1-3 roots
    (numel-1 roots often, occasionally a leaf).  ``min_dims``..``max_side`` bound the leaves'
    shapes wherever the op's shape rule leaves a choice (conv1d's bias stays 1-D under
    ``min_dims=2``); ``max_elements`` bounds the total number of float leaf elements.

    Shapes come from the declarations: a gufunc ``signature`` (loop dims broadcast, core dims
    matched), else ``shape_fn`` + ``param_strategy`` checked with ``out_shape``; for 2-3 input
    ``shape_fn`` ops, which axes must match is learnt once from small probe shapes.  Every
    planned node is run once on tame values, so shapes/params where the op is undefined
    everywhere (``var`` of one element) are never used.

    Example::

        >>> from hypothesis import given, settings
        >>> from gradspec import strategies as gst
        >>> @settings(max_examples=10)
        ... @given(gst.graphs(ops=["add", "sum"], max_nodes=4))
        ... def test(g):
        ...     assert 1 <= len(g.nodes) <= 4 and all(n.op in ("add", "sum") for n in g.nodes)
        >>> test()
    """
    cfg = _config(ops, min_leaves, max_leaves, min_nodes, max_nodes, min_roots, max_roots, dtype, min_dims,
                  max_dims, min_side, max_side, max_elements)
    return _graphs(cfg)


# ---------------------------------------------------------------------------------------------
# cases: values for a graph, checked against every op's domain and kinks, then repaired
# ---------------------------------------------------------------------------------------------


def _first_bad_node(g: Graph, vals: Mapping[str, np.ndarray]):
    """``(index, values, slots)`` of the first node whose inputs leave its domain (``slots``: which
    inputs), sit near a kink/tie, or whose output is not finite (or absurdly large); index None
    if every node is fine."""
    env = dict(vals)
    for idx, n in enumerate(g.nodes):
        spec = g.spec(n.op)
        args = [env[i] for i in n.inputs]
        doms = spec.domains_for(len(args))
        scale = 1.0
        slots = []
        for j, (a, d) in enumerate(zip(args, doms, strict=False)):
            a = np.asarray(a)
            if not np.issubdtype(a.dtype, np.floating):
                continue
            if not _values.element_margin_ok(d, a):
                slots.append(j)
            if a.size:
                scale = max(scale, float(np.max(np.abs(a))))
        if slots:
            return idx, env, slots
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                if spec.kink_distance is not None:
                    kd = float(spec.kink_distance(*args, **n.params))
                    if not kd >= CHECK_MARGIN * scale:
                        return idx, env, []
                out = np.asarray(spec.forward(*args, **n.params))
        except Exception:  # noqa: BLE001 - treat as invalid values; the repair redraws them
            return idx, env, []
        if np.issubdtype(out.dtype, np.floating) and out.size:
            if not np.all(np.isfinite(out)) or float(np.max(np.abs(out))) > _MAX_ABS:
                return idx, env, []
        env[n.name] = out
    return None, env, []


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
    name = f"x{len(g.leaves)}"
    while name in g.shapes:
        name += "_"
    g.leaves.append(GraphLeaf(name, shape, cfg.dtype, True, [dom]))
    g.shapes[name] = shape
    node.inputs[j] = name
    vals[name] = _values.tame_array(rng, shape, [dom], dtype=cfg.dtype)
    g.requires_grad[name] = True
    for n in g.nodes:  # a node fed by the new leaf may now require grad
        sp = g.spec(n.op)
        g.requires_grad[n.name] = g.requires_grad[n.name] or any(
            g.requires_grad[i] for k, i in enumerate(n.inputs) if sp.input_differentiable(k))
    return True


def _ancestor_leaves(g: Graph, idx: int) -> set[str]:
    leaves = {l.name for l in g.leaves}
    producers = {n.name: n for n in g.nodes}
    out, stack = set(), list(g.nodes[idx].inputs)
    while stack:
        m = stack.pop()
        if m in leaves:
            out.add(m)
        elif m in producers:
            stack.extend(producers[m].inputs)
    return out


@st.composite
def _cases(draw, cfg: _Cfg) -> Case:
    g = _Builder(draw, cfg).build()
    vals: dict[str, np.ndarray] = {}
    for l in g.leaves:
        n = _numel(l.shape)
        if l.is_float:
            vals[l.name] = draw(_values_strategy(l.shape, l.domains, l.dtype, 1e-3, 1e3))
        else:
            vals[l.name] = np.array(draw(_bools(n)), dtype=bool).reshape(l.shape)
    for attempt in range(_REPAIRS + 1):
        bad, env, slots = _first_bad_node(g, vals)
        if bad is None:
            break
        assume(attempt < _REPAIRS)
        rng = np.random.default_rng(draw(st.integers(0, _SEED_BITS)))
        # First redraw the leaves behind the failing node with tame values; if that did not
        # help, the structure is degenerate: detach the node from the offending input; last,
        # redraw every float leaf.
        if attempt >= 1 and _detach_input(g, bad, slots, vals, rng, cfg):
            continue
        redo = _ancestor_leaves(g, bad) if attempt < 2 else {l.name for l in g.leaves}
        for l in g.leaves:
            if l.name in redo and l.is_float:
                vals[l.name] = _values.tame_array(rng, l.shape, l.domains, dtype=l.dtype)
    sd = [draw(_seeds(tuple(np.shape(env[r])), np.asarray(env[r]).dtype.name, True, True)) for r in g.roots]
    case = g.case(vals, sd)
    case.meta["generator"] = "gradspec.strategies.cases"
    return case


def cases(
    *,
    ops=None,
    min_leaves: int = 1,
    max_leaves: int = 4,
    min_nodes: int = 1,
    max_nodes: int = 10,
    min_roots: int = 1,
    max_roots: int = 3,
    dtype: str = "float64",
    min_dims: int = 0,
    max_dims: int = 3,
    min_side: int = 0,
    max_side: int = 4,
    max_elements: int = 256,
):
    """Full :class:`gradspec.Case` s: a graph from :func:`graphs` (same arguments), leaf values
    drawn in the domains of the ops they feed, and one seed per root (:func:`seeds`).

    Every case validates and evaluates to finite values, and every node's inputs lie in its
    op's domain at least ``CHECK_MARGIN`` (relative) from its kinks, ties and domain edges, at
    the actual intermediate values.

    Example::

        >>> from hypothesis import given, settings
        >>> from gradspec import strategies as gst
        >>> import numpy as np
        >>> @settings(max_examples=10, deadline=None)
        ... @given(gst.cases(ops=["log", "mul"], max_nodes=3))
        ... def test(case):
        ...     env = case.evaluate()
        ...     assert all(np.all(env[n.inputs[0]] > 0) for n in case.nodes if n.op == "log")
        >>> test()
    """
    cfg = _config(ops, min_leaves, max_leaves, min_nodes, max_nodes, min_roots, max_roots, dtype, min_dims,
                  max_dims, min_side, max_side, max_elements)
    return _cases(cfg)
