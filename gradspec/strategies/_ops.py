"""Which ops the strategies draw, in which order (simplest first: op index 0 is what ops shrink to),
and what they learn once per op from its declaration (shape templates of ``shape_fn`` ops)."""

from __future__ import annotations

import itertools
import math
from typing import Mapping

from hypothesis.errors import InvalidArgument

from .._private.signature import SignatureError
from .._private.signature import parse as _parse_signature
from ..spec import registry as _registry
from ..spec.opspec import OpSpec

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


def _spec_of(op: str, user_ops: Mapping[str, str]) -> OpSpec:
    try:
        return _registry.lookup(op)
    except KeyError:
        from ._private.imports import import_object

        return import_object(user_ops[op])




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

