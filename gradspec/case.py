"""A case: a graph of table ops (or user ops), its leaf values, and one seed per root.

Cases are what every oracle consumes, what Hypothesis generates and shrinks, what reports
show, and what ``gradspec replay`` re-runs.  They round-trip through JSON exactly: float
arrays are stored as ``float.hex`` strings (bit-exact, NaN/Inf included); nothing is pickled.

Example::

    >>> import numpy as np, gradspec as gs
    >>> case = gs.Case.build(
    ...     leaves={"x": np.array([1.0, 2.0]), "w": np.array([3.0, 4.0])},
    ...     nodes=[("h", "mul", ["x", "w"], {}), ("y", "sum", ["h"], {})],
    ...     roots=["y"],
    ... )
    >>> gs.Case.from_json(case.to_json()) == case
    True
    >>> print(case.to_text().splitlines()[2])
      h = mul(x, w)                            # (2,) float64
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import math
from typing import Any, Mapping, Sequence

import numpy as np

from ._private import graphwalk as _graphwalk
from ._private import params as _params
from ._private import percase as _percase
from .spec import registry as _registry

__all__ = ["Case", "Leaf", "NodeDef", "CaseError", "IMPLICIT", "FORMAT"]

FORMAT = "gradspec-case/1"
IMPLICIT = None  # the seed of a numel-1 root given implicitly (backward() with no gradient)


class CaseError(ValueError):
    """A case (or case file) that is malformed; the message names the part and the fix.

    ``reason``: a code for what callers decide on, never the message's wording (None: malformed).
    ``"import-not-allowed"``: the case names a module the user did not allow (the import gate).
    """

    def __init__(self, *args, reason: str | None = None) -> None:
        super().__init__(*args)
        self.reason = reason


@dataclasses.dataclass(eq=False)
class Leaf:
    name: str
    value: np.ndarray
    requires_grad: bool = True

    @property
    def shape(self) -> tuple:
        return tuple(self.value.shape)

    @property
    def dtype(self) -> str:
        return self.value.dtype.name

    @property
    def differentiable(self) -> bool:
        return self.requires_grad and self.value.dtype.kind == "f"  # float16..float64 (hot path: no issubdtype)


@dataclasses.dataclass(eq=False)
class NodeDef:
    name: str
    op: str
    inputs: list[str]
    params: dict


@dataclasses.dataclass(eq=False)
class Case:
    leaves: list[Leaf]
    nodes: list[NodeDef]
    roots: list[str]
    seeds: list[np.ndarray | None]
    engine: str = "reference"
    user_ops: dict = dataclasses.field(default_factory=dict)  # op name -> "module:attr"
    meta: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        # A case built in Python gets what build() and from_json give it: every node's params in the op's
        # canonical form, checked (sum's documented default dim=None became every dim; left raw, finite
        # differences' batched forward summed over its batch axis and torch got dim=None: a false
        # "disagree").  A bad param is a CaseError here, naming node and op.  (Roots and seeds are checked by
        # build(), from_json and gs.check: a case may be built as a probe of its shapes before its seeds exist.)
        self._canonicalize(None)

    @classmethod
    def _unchecked(cls, *fields) -> "Case":
        """A case whose checks the caller runs itself (from_json: under its size budget)."""
        case = cls.__new__(cls)
        for f, v in zip(dataclasses.fields(cls), fields):
            setattr(case, f.name, v)
        return case

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        leaves: Mapping[str, Any],
        nodes: Sequence[tuple],
        roots: Sequence[str],
        seeds: Sequence[Any] | None = None,
        *,
        requires_grad: Mapping[str, bool] | None = None,
        engine: str = "reference",
    ) -> "Case":
        """Build and validate a case. ``nodes``: (name, op, input names, params); seeds default to implicit."""
        rg = dict(requires_grad or {})
        lv = []
        for name, value in leaves.items():
            arr = np.array(value, copy=True)
            if arr.dtype == np.float16:  # (gradients are computed in float64 or float32 only)
                raise CaseError(f"leaf {name!r}: dtype float16 is not supported: float64 or float32")
            if arr.dtype.kind in "iu" and rg.get(name, False):
                arr = arr.astype(np.float64)
            lv.append(Leaf(name, arr, rg.get(name, np.issubdtype(arr.dtype, np.floating))))
        nd = [NodeDef(n, op, list(ins), dict(p or {})) for n, op, ins, p in nodes]
        case = cls(lv, nd, list(roots), [None] * len(roots) if seeds is None else [None if s is None else np.asarray(s) for s in seeds], engine)
        case.validate()  # roots and seeds (an implicit seed needs numel == 1): the constructor checks params only
        return case

    def canonicalize(self) -> None:
        """Put every node's params in the op's canonical form (idempotent)."""
        self._canonicalize(None)

    def _canonicalize(self, budget) -> dict:
        # ``budget`` (a _private.limits.Budget, when loading a file): each node's shape is checked
        # before the next node's shape rule runs (a rule may evaluate the op on ones of its input shapes).
        shapes = {l.name: l.shape for l in self.leaves}
        for n in self.nodes:
            spec = self.spec(n.op)
            ins = [shapes.get(i) for i in n.inputs]
            if any(s is None for s in ins):
                missing = [i for i, s in zip(n.inputs, ins) if s is None]
                raise CaseError(f"node {n.name!r} ({n.op}) uses {missing}, defined nowhere before it")
            # (each value: a params object is never itself a {"float": ...} value, even one whose only param is 'float')
            raw = {k: _tuplify(v) for k, v in n.params.items()} if n.params else {}
            key = (spec, tuple(ins), repr(raw)) if budget is None and _plain(raw) else None
            hit = _CANONICAL.get(key) if key is not None else None
            if hit is not None:  # (every Case construction canonicalizes: graphs repeat their nodes)
                n.params, shapes[n.name] = dict(hit[0]), hit[1]
                continue
            why = _params.problem(spec, raw)
            if why:  # (an unknown, missing or mistyped param reached the forward before: a false verdict)
                raise CaseError(f"node {n.name!r}: {why}")
            try:
                n.params = spec.canonical(ins, raw)
            except Exception as e:
                raise CaseError(f"node {n.name!r}: invalid params {_short_param(n.params)} for op {n.op!r}: "
                                f"{type(e).__name__}: {str(e)[:300]}") from None
            try:
                out = spec.out_shape(ins, n.params)
            except Exception as e:  # a shape rule that overflows on absurd params, say
                raise CaseError(f"node {n.name!r}: op {n.op!r} cannot take input shapes {ins} with params "
                                f"{_short_param(n.params)}: {type(e).__name__}: {str(e)[:300]}") from None
            if out is None:
                raise CaseError(f"node {n.name!r}: op {n.op!r} does not accept input shapes {ins} with params {n.params}")
            if budget is not None:
                try:
                    budget.add(tuple(out), f"node {n.name!r} ({n.op})")
                except ValueError as e:
                    raise CaseError(str(e)) from None
            shapes[n.name] = tuple(out)
            if key is not None:
                if len(_CANONICAL) > 4096:
                    _CANONICAL.clear()
                _CANONICAL[key] = (dict(n.params), shapes[n.name])
        return shapes

    def spec(self, op: str):
        try:
            return _registry.lookup(op)
        except KeyError as e:
            if op in self.user_ops:
                from ._private.imports import ImportSpecError, load_from_case
                from .spec.opspec import OpSpec

                try:
                    spec = load_from_case(self.user_ops[op], f"user op {op!r} at", expect=(OpSpec, type))
                except ImportSpecError as e:
                    raise CaseError(str(e), reason=getattr(e, "reason", None)) from None
                if not isinstance(spec, OpSpec):  # e.g. a torch Function (gradspec.verify.torch_function)
                    spec = _registry.resolve(op, spec, next((n for n in self.nodes if n.op == op), None), self.meta) or spec
                if not isinstance(spec, OpSpec):
                    raise CaseError(f"user op {op!r}: {self.user_ops[op]!r} is a {type(spec).__name__}, not a "
                                    "gradspec op (gs.Op(...))") from None
                return spec
            raise CaseError(str(e.args[0])) from None

    def shapes(self) -> dict[str, tuple]:
        """Shape of every leaf and node (computed from the shape rules, no evaluation)."""
        shapes = {l.name: l.shape for l in self.leaves}
        for n in self.nodes:
            shapes[n.name] = tuple(self.spec(n.op).out_shape([shapes[i] for i in n.inputs], n.params))
        return shapes

    def dtypes(self) -> dict[str, np.dtype]:
        vals = self.evaluate()
        return {k: v.dtype for k, v in vals.items()}

    def validate(self, shapes: dict | None = None) -> None:
        # (counted once: names.count per name was quadratic, a 200k-node file hung replay for minutes)
        names = collections.Counter([l.name for l in self.leaves] + [n.name for n in self.nodes])
        dup = {n for n, k in names.items() if k > 1}
        if dup:
            raise CaseError(f"names used twice in the case: {sorted(dup)}")
        if not self.roots:
            raise CaseError("a case needs at least one root")
        if len(self.seeds) != len(self.roots):
            raise CaseError(f"{len(self.roots)} roots but {len(self.seeds)} seeds: give one seed (or None) per root")
        shapes = self.shapes() if shapes is None else shapes
        for r, s in zip(self.roots, self.seeds):
            if r not in shapes:
                raise CaseError(f"root {r!r} is not a leaf or node of the case")
            if s is None:
                if int(np.prod(shapes[r])) != 1:
                    raise CaseError(
                        f"root {r!r} has shape {shapes[r]} (numel {int(np.prod(shapes[r]))}): an implicit seed "
                        "needs numel == 1; give an explicit seed of the root's shape"
                    )
            elif tuple(np.shape(s)) != shapes[r]:
                raise CaseError(f"seed for root {r!r} has shape {np.shape(s)}, the root has shape {shapes[r]}")

    # -- evaluation --------------------------------------------------------------------------
    def evaluate(self, values: Mapping[str, np.ndarray] | None = None, nbatch: int = 0) -> dict[str, np.ndarray]:
        """Forward pass in numpy. With ``nbatch``, every leaf value carries that many batch axes."""
        with np.errstate(all="ignore"):
            return self._evaluate(values, nbatch)

    def _evaluate(self, values: Mapping[str, np.ndarray] | None, nbatch: int) -> dict[str, np.ndarray]:
        # ``evaluate`` without its errstate context, for callers that already ignore FP errors
        # (the oracles run whole under one context: a context per call costs about a microsecond).
        memo = _percase.active(self)
        if memo is None:
            return self._forward(values, nbatch, None)
        specs = self._node_specs()
        if values is not None or nbatch:
            return self._forward(values, nbatch, specs)
        # While gs.check runs: the case's own forward once (the jacobian, the kink test, the verdict
        # rules all need it), computed under the same ignored FP errors as every oracle's.
        env = memo.get("forward")
        if env is None:
            with np.errstate(all="ignore"):
                env = memo["forward"] = self._forward(None, 0, specs)
        return dict(env)

    def _forward(self, values, nbatch: int, specs) -> dict[str, np.ndarray]:
        env = {l.name: (l.value if values is None or l.name not in values else values[l.name]) for l in self.leaves}
        for k, n in enumerate(self.nodes):
            spec = self.spec(n.op) if specs is None else specs[k]
            args = [env[i] for i in n.inputs]
            env[n.name] = np.asarray(spec.forward_batched(args, n.params, nbatch) if nbatch else spec.forward(*args, **n.params))
        return env

    def _node_specs(self) -> list | None:
        """The op spec of every node, in order: looked up once per ``gs.check`` of this case (None
        outside one, or when some op cannot be looked up: callers then look up node by node and
        meet the error where they always did)."""
        memo = _percase.active(self)
        if memo is None:
            return None
        specs = memo.get("specs")
        if specs is None:
            try:
                specs = memo["specs"] = [self.spec(n.op) for n in self.nodes]
            except Exception:  # noqa: BLE001 - reported by the per-node lookup of the caller
                return None
        return specs

    def ancestors(self, names) -> set[str]:
        """The leaves and nodes ``names`` are computed from, ``names`` included."""
        return _graphwalk.ancestors({n.name: n.inputs for n in self.nodes}, names)

    def grad_leaves(self) -> list[Leaf]:
        memo = _percase.active(self)  # every oracle and rule asks, while gs.check runs: once per check
        if memo is None:
            return [l for l in self.leaves if l.differentiable]
        got = memo.get("grad_leaves")
        if got is None:
            got = memo["grad_leaves"] = [l for l in self.leaves if l.differentiable]
        return list(got)

    def seed_arrays(self, values: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
        """Explicit seeds, with implicit ones made ``ones_like(root)`` (cast to the root's dtype)."""
        env = values or self.evaluate()
        out = []
        for r, s in zip(self.roots, self.seeds):
            out.append(np.ones_like(env[r]) if s is None else np.asarray(s).astype(env[r].dtype))
        return out

    @property
    def ops(self) -> list[str]:
        return [n.op for n in self.nodes]

    @property
    def n_inputs(self) -> int:
        memo = _percase.active(self)  # (asked by check and by two oracles' applies(): once per gs.check)
        if memo is None:
            return int(sum(l.value.size for l in self.grad_leaves()))
        got = memo.get("n_inputs")
        if got is None:
            got = memo["n_inputs"] = int(sum(l.value.size for l in self.grad_leaves()))
        return got

    # -- JSON ----------------------------------------------------------------------------------
    def to_json(self, indent: int | None = 1) -> str:
        d = {
            "format": FORMAT,
            "engine": self.engine,
            "user_ops": dict(self.user_ops),
            "leaves": [
                {"name": l.name, "requires_grad": l.requires_grad, "value": encode_array(l.value)} for l in self.leaves
            ],
            "nodes": [{"name": n.name, "op": n.op, "inputs": n.inputs, "params": _jsonable(n.params)} for n in self.nodes],
            "roots": list(self.roots),
            "seeds": [None if s is None else encode_array(np.asarray(s)) for s in self.seeds],
            "meta": _jsonable(self.meta),
        }
        return json.dumps(d, indent=indent, allow_nan=False)

    @classmethod
    def from_json(cls, text: str | bytes | dict, *, allow_import=(), max_elements: int | None = None) -> "Case":
        """Parse a case; a malformed or foreign file raises CaseError naming what is wrong.

        A case file is data: a user op it names by import path is imported only when its module is
        in ``allow_import`` (or already imported by your code), and sizes are checked against
        ``max_elements`` (default: ``_private.limits.default_max_elements()``) before any array
        is allocated.
        """
        from ._private import casefile, limits
        from ._private.imports import allowing

        if isinstance(text, dict):
            d = text
        else:
            try:
                d = json.loads(text)
            except (ValueError, TypeError, RecursionError) as e:
                raise CaseError(f"not a gradspec case file: invalid JSON ({str(e)[:200]})") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise CaseError(f"not a gradspec case file: expected \"format\": \"{FORMAT}\", found {str(got)[:80]!r}")
        with limits.limiting(max_elements), allowing(allow_import):
            try:
                p = casefile.parse(d)
            except casefile.CaseFileError as e:
                raise CaseError(str(e)) from None
            case = cls._unchecked([Leaf(*l) for l in p["leaves"]], [NodeDef(n, op, ins, dict(pr)) for n, op, ins, pr in p["nodes"]],
                                  p["roots"], p["seeds"], p["engine"], p["user_ops"], p["meta"])
            case.validate(case._canonicalize(p["budget"]))
        return case

    def __eq__(self, other) -> bool:
        if not isinstance(other, Case):
            return NotImplemented
        return self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    # -- text ------------------------------------------------------------------------------------
    def to_text(self, values: bool = True, evaluated: bool = True) -> str:
        """A readable listing: leaves, nodes (with shapes and, when ``evaluated``, their outputs' dtypes:
        the case is run for them), roots and seeds."""
        shapes = self.shapes()
        env = self.evaluate() if evaluated else {}
        lines = []
        for l in self.leaves:
            flag = "requires_grad" if l.requires_grad else "constant"
            v = " = " + _short(l.value) if values else ""
            lines.append(f"  {l.name}: leaf {l.shape} {l.dtype} {flag}{v}")
        for n in self.nodes:
            args = ", ".join(n.inputs)
            p = ", ".join(f"{k}={_short_param(v)}" for k, v in n.params.items() if not k.startswith("_"))
            call = f"{n.op}({args}{', ' + p if p else ''})"
            lines.append(f"  {n.name} = {call:<35s}  # {shapes[n.name]} {env[n.name].dtype if n.name in env else ''}".rstrip())
        for r, s in zip(self.roots, self.seeds):
            seed = "implicit (ones, numel 1)" if s is None else _short(np.asarray(s))
            lines.append(f"  root {r}: seed {seed}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Case(ops={self.ops}, roots={self.roots})"

    def _repr_pretty_(self, p, cycle) -> None:
        # Hypothesis prints falsifying examples with this: the readable listing, not the fields.
        p.text("Case:\n" + self.to_text())


# ---------------------------------------------------------------------------------------------
# array encoding
# ---------------------------------------------------------------------------------------------


def encode_array(a: np.ndarray) -> dict:
    a = np.asarray(a)
    # (dtype.kind rather than np.issubdtype, and a cached dtype name: both cost microseconds per call,
    # and the in-flight file encodes every case fuzz checks)
    kind = a.dtype.kind
    if kind == "f":
        # (tolist: Python floats at once, ~3x faster than float() of each numpy scalar; same values)
        data = [v.hex() for v in a.astype(np.float64).ravel().tolist()]
    elif kind == "b" or kind in "iu":
        data = a.ravel().tolist()
    else:
        raise CaseError(f"cannot store arrays of dtype {a.dtype} in a case")
    return {"dtype": _dtype_name(a.dtype), "shape": list(a.shape), "data": data}


@functools.lru_cache(maxsize=64)
def _dtype_name(dt: np.dtype) -> str:
    return dt.name


def decode_array(d: dict) -> np.ndarray:
    if not isinstance(d, dict) or not {"dtype", "shape", "data"} <= set(d):
        raise CaseError(f"array entry must have dtype, shape and data, got {str(d)[:80]!r}")
    dt = np.dtype(d["dtype"])
    shape = tuple(int(s) for s in d["shape"])
    if int(np.prod(shape)) != len(d["data"]):
        raise CaseError(f"array entry of shape {shape} has {len(d['data'])} values")
    if np.issubdtype(dt, np.floating):
        vals = np.array([float.fromhex(v) if isinstance(v, str) else float(v) for v in d["data"]], dtype=np.float64)
        return vals.astype(dt).reshape(shape)
    return np.array(d["data"], dtype=dt).reshape(shape)


# (op spec, input shapes, repr of the params) -> (canonical params, output shape), for params of plain values
# only (repr tells 1 / 1.0 / True and 0.0 / -0.0 apart; an array's repr is abbreviated, so arrays are not keyed)
_CANONICAL: dict = {}
_PLAIN = (int, float, str, type(None))


def _plain(params: dict) -> bool:
    return all(isinstance(v, _PLAIN) or (type(v) is tuple and all(isinstance(x, _PLAIN) for x in v))
               for v in params.values())


def _tuplify(x):
    if isinstance(x, list):
        return tuple(_tuplify(v) for v in x)
    if isinstance(x, dict) and set(x) == {"float"}:
        return float(x["float"])  # non-finite float params (e.g. norm's p=inf), see _jsonable
    if isinstance(x, dict):
        return {k: _tuplify(v) for k, v in x.items()}
    return x


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return {"float": repr(x)}
    return x


def _short(a: np.ndarray, n: int = 6) -> str:
    flat = np.asarray(a).ravel()
    body = ", ".join(f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v) for v in flat[:n])
    return "[" + body + (", ..." if flat.size > n else "") + "]"


def _short_param(v) -> str:
    s = repr(v)
    return s if len(s) < 40 else s[:37] + "..."
