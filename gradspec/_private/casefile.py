"""The case-file schema: every field of a parsed ``case.json`` checked before anything is built.

A case file is data from anywhere (CONTRACT §6).  :func:`parse` checks each field's type, every
array entry's dtype, shape and data, and the declared sizes against the element limit (before
any array is allocated), and returns plain pieces for :class:`gradspec.case.Case`.  A wrong field
raises :class:`CaseFileError` naming the field (``leaves[0].value.dtype``) and what it must be,
so ``gradspec replay`` exits 2 with that message instead of running a case no engine was meant
to see (``"dtype": "object"`` used to reach the engines and come back as "still disagrees").
"""

from __future__ import annotations

import math
import re
import unicodedata

import numpy as np

from . import limits, torchfn_record
from .inert import UNPRINTED, short_repr

__all__ = ["CaseFileError", "parse", "DTYPES", "MAX_NAME", "module_not_replayed"]

# What encode_array writes and every engine takes: float, integer and bool arrays (no object,
# string, complex or datetime arrays, which numpy would accept from the name alone).
DTYPES = ("float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")
MAX_NAME = 256  # longer names are not a graph anyone wrote; they would only bloat every page


def module_not_replayed(module: str) -> str:
    """Why a finding of ``gs.verify_module`` on ``module`` (a class name) does not replay from its case
    file, and what does (said by verify_module's notes, ``gradspec replay`` and ``repro.py``)."""
    return (f"{module} is a torch.nn.Module checked by gs.verify_module: its findings cannot be replayed by "
            "`gradspec replay` or repro.py in another process, because a case file records the parameter and input "
            f"values but not the module instance (its class's constructor arguments, buffers and state) -- "
            f"re-run the check in Python instead: gs.verify_module({module}(...), example_inputs=..., seed=...) "
            "with the seed of the run (its replay line)")


_UNPRINTED = UNPRINTED  # (control, format, line-separator characters: inert.UNPRINTED)


def _printable(v: str, field: str, allow: str = "") -> None:
    """Names, param strings and a rule finding's meta are printed as they are (``x0: leaf (2,) ...``, an op's
    error quoting its param): a control or format character in one (a newline, ESC, BEL, a bidi override)
    forged output lines and ran terminal escape sequences (tryout5 #8, redteam #6, #7), so none is allowed
    (but those in ``allow``); letters of any script are."""
    if v.isprintable():  # (the common case, in C: Python's printable excludes exactly Unicode's C* and Z* but space)
        return
    bad = next((c for c in v if c not in allow and unicodedata.category(c) in _UNPRINTED), None)
    if bad is not None:
        _fail(field, f"must not contain a control character (found {bad!r} in {short_repr(v)}): it is printed as "
              "it is, so a newline or escape sequence in it would forge output or drive the terminal")


class CaseFileError(ValueError):
    """A malformed field of a case file; the message names the field."""


def _fail(field: str, msg: str):
    raise CaseFileError(f"corrupt gradspec case file: field {field}: {msg}")




def _str(v, field: str, max_len: int = MAX_NAME) -> str:
    if not isinstance(v, str) or not v or len(v) > max_len:
        _fail(field, f"must be a non-empty string of at most {max_len} characters, got {short_repr(v)}")
    _printable(v, field)
    return v


def _list(v, field: str) -> list:
    if not isinstance(v, list):
        _fail(field, f"must be a list, got {type(v).__name__}")
    return v


def _dict(v, field: str) -> dict:
    if not isinstance(v, dict):
        _fail(field, f"must be an object, got {type(v).__name__}")
    return v


def _shape(v, field: str) -> tuple:
    _list(v, field)
    if len(v) > 32:  # numpy's own limit on dimensions (64 in numpy 2) is not one any op here needs
        _fail(field, f"has {len(v)} dimensions, at most 32 are supported")
    for i, s in enumerate(v):
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            _fail(f"{field}[{i}]", f"must be a non-negative integer, got {short_repr(s)}")
    return tuple(v)


def _array(entry, field: str, budget: limits.Budget) -> np.ndarray:
    """Check an array entry fully (dtype, shape against the budget, data), then decode it."""
    _dict(entry, field)
    missing = [k for k in ("dtype", "shape", "data") if k not in entry]
    if missing:
        _fail(field, f"an array entry needs dtype, shape and data; missing {', '.join(missing)}")
    dt = entry["dtype"]
    if dt not in DTYPES:
        _fail(f"{field}.dtype", f"must be one of {', '.join(DTYPES)}, got {short_repr(dt)}")
    shape = _shape(entry["shape"], f"{field}.shape")
    try:
        budget.add(shape, field)
    except limits.SizeError as e:
        raise CaseFileError(str(e)) from None
    data = _list(entry["data"], f"{field}.data")
    n = math.prod(shape)
    if len(data) != n:
        _fail(f"{field}.data", f"has {len(data)} values, the shape {shape} needs {n}")
    kind = np.dtype(dt).kind
    if kind == "f":
        return _floats(data, field, dt).reshape(shape)
    if kind == "b":
        bad = next((i for i, v in enumerate(data) if not isinstance(v, bool)), None)
        if bad is not None:
            _fail(f"{field}.data[{bad}]", f"must be true or false for dtype bool, got {short_repr(data[bad])}")
        return np.array(data, dtype=bool).reshape(shape)
    info = np.iinfo(dt)
    bad = next((i for i, v in enumerate(data)
                if isinstance(v, bool) or not isinstance(v, int) or not info.min <= v <= info.max), None)
    if bad is not None:
        _fail(f"{field}.data[{bad}]", f"must be an integer in [{info.min}, {info.max}] for dtype {dt}, "
                                      f"got {short_repr(data[bad])}")
    return np.array(data, dtype=dt).reshape(shape)


# float.hex()'s form ('0x1.8000000000000p+0', 'inf', 'nan'), the exponent optional: float.fromhex alone also took
# "1.5" as hex 0x1.5 = 1.3125 and "10" as 16, so a hand-written decimal string replayed another case in silence.
_HEX = re.compile(r"[+-]?(0x[0-9a-f]+(\.[0-9a-f]*)?(p[+-]?[0-9]+)?|0x\.[0-9a-f]+(p[+-]?[0-9]+)?|inf|infinity|nan)",
                  re.IGNORECASE)


def _as_number(v: str) -> str:
    """The fix for a data string that is not float.hex()'s form."""
    try:
        x = float(v) if len(v) < 64 else None
    except ValueError:
        x = None
    if x is None or not math.isfinite(x):
        return " (such as '0x1.8p+0' for 1.5, or 'inf', '-inf', 'nan'), or a JSON number"
    return f": write the JSON number {x!r} (no quotes), or its float.hex() string {x.hex()!r}"


def _floats(data: list, field: str, dt: str) -> np.ndarray:
    """The float entries of ``data`` (float.hex() strings or JSON numbers) as an array of dtype ``dt``."""
    vals = []
    for i, v in enumerate(data):
        if isinstance(v, str):
            try:
                if _HEX.fullmatch(v) is None:
                    raise ValueError
                vals.append(float.fromhex(v))
            except (ValueError, OverflowError):
                _fail(f"{field}.data[{i}]", f"{short_repr(v)} is not a float.hex() string{_as_number(v)}")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            try:
                vals.append(float(v))
            except OverflowError:
                _fail(f"{field}.data[{i}]", f"{short_repr(v)} is out of float64's range")
        else:
            _fail(f"{field}.data[{i}]", f"must be a float.hex() string or a number, got {short_repr(v)}")
    wide = np.array(vals, dtype=np.float64)
    if dt == "float64":
        return wide
    with np.errstate(over="ignore"):  # (a finite value that overflows is refused below, naming it)
        out = wide.astype(dt)
    over = np.flatnonzero(np.isinf(out) & np.isfinite(wide))
    if over.size:
        i = int(over[0])
        _fail(f"{field}.data[{i}]", f"{short_repr(data[i])} is out of {dt}'s range (largest "
              f"{float(np.finfo(dt).max):.4g}): give the array dtype float64, or write 'inf' if an infinity is meant")
    return out


def _params(v, field: str, depth: int = 0):
    """JSON params: numbers, strings, booleans, null, lists and objects, nested at most 8 deep.

    What each op accepts is its own ``normalize``'s and shape rule's business (Case.canonicalize);
    this only keeps out what no op takes: deep nests, huge integers, foreign types."""
    if depth > 8:
        _fail(field, "nests deeper than 8 levels")
    if isinstance(v, dict):
        if depth and set(v) == {"float"}:  # a non-finite float, as Case._jsonable writes it
            if v["float"] not in ("inf", "-inf", "nan"):
                _fail(field, f"a {{\"float\": ...}} entry must hold 'inf', '-inf' or 'nan', got {short_repr(v['float'])}")
            return v
        for k, x in v.items():
            _str(k, f"{field} key", 64)
            _params(x, f"{field}.{k}", depth + 1)
        return v
    if isinstance(v, list):
        for i, x in enumerate(v):
            _params(x, f"{field}[{i}]", depth + 1)
        return v
    if isinstance(v, str):
        if len(v) > 1024:
            _fail(field, f"is a string of {len(v)} characters; no op takes one longer than 1024")
        _printable(v, field)
        return v
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        if abs(v) > 2**62:  # beyond int64 no shape, axis or count means anything; numpy would overflow
            _fail(field, f"integer {short_repr(v)} is out of range")
        return v
    if isinstance(v, float):
        return v
    _fail(field, f"must be a number, string, boolean, null, list or object, got {short_repr(v)}")


# A case file holds at most one leaf, node or root per ELEMENTS_PER_NODE elements of --max-elements (16,384 at the
# default 2**27, never fewer than 1,024): gradspec's own graphs have tens of nodes, and every oracle visits each node,
# so a 200,000-node chain of neg (14 MB) kept `gradspec replay` busy for a minute even once validation was linear.
ELEMENTS_PER_NODE = 8192
MAX_META_DEPTH = 32  # gradspec nests meta 5 levels deep; Case.to_json (every report) recursed per level


def max_nodes() -> int:
    """How many leaves, nodes or roots a case file may have at the --max-elements in force."""
    return max(1024, (limits.current() or limits.default_max_elements()) // ELEMENTS_PER_NODE)


def _count(v, field: str) -> list:
    _list(v, field)
    most = max_nodes()
    if len(v) > most:
        limit = limits.current() or limits.default_max_elements()
        _fail(field, f"the file has {len(v):,} {field}, more than the {most:,} a case file may have at --max-elements "
              f"{limit:,} (one per {ELEMENTS_PER_NODE:,} elements: every oracle visits each of them, so a huge graph "
              "reads as a hang); raise --max-elements if you trust the file")
    return v


def _accuracy(claim) -> None:
    """``meta.accuracy``: the accuracy the code under test claims, as ``verify_*(rtol=, atol=)`` and ``fuzz --rtol/
    --atol`` record it.  A malformed one reached gs.check, whose ValueError read as 'still disagrees' (exit 1)."""
    if claim is None or claim == {}:
        return
    ok = isinstance(claim, dict) and set(claim) <= {"rtol", "atol"} and all(
        v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0)
        for v in claim.values())
    if not ok:
        _fail("meta.accuracy", 'must be {"rtol": number, "atol": number}, each finite and >= 0 (the accuracy the '
              f"code under test claims, as --rtol/--atol record it), got {short_repr(claim)}: fix or remove it")


def _meta_key(k) -> str:
    return f"meta.{k}" if isinstance(k, str) and len(k) <= 64 and k.isprintable() else f"meta[{short_repr(k)}]"


def _shallow(v, field: str, limit: int) -> None:
    """``v`` nests at most ``limit`` lists and objects deep (walked without recursion)."""
    stack = [(v, 0)]
    while stack:
        x, depth = stack.pop()
        if depth > limit:
            _fail(field, f"nests deeper than {limit} levels; gradspec writes no such field: remove it")
        if isinstance(x, dict):
            stack.extend((y, depth + 1) for y in x.values())
        elif isinstance(x, list):
            stack.extend((y, depth + 1) for y in x)


def _leaf_dtype(dt, requires_grad: bool, field: str) -> None:
    """Gradients are computed in float64 or float32: a float16 leaf reached torch as Half beside a
    float64 leaf and came back as 'torch's backward for mm raised on its own', a false discrepancy."""
    if dt == np.float16:
        _fail(f"{field}.value.dtype", "dtype float16 is not supported: float64 or float32")
    if requires_grad and dt.kind != "f":
        _fail(f"{field}.requires_grad", f"a leaf of dtype {dt} cannot require grad (torch: only floating point "
              "tensors can require gradients): set it to false, or give the leaf dtype float64 or float32")


def parse(d) -> dict:
    """Pieces of a validated case file: leaves, nodes, roots, seeds, engine, user_ops, meta."""
    budget = limits.Budget()
    engine = d.get("engine", "reference")
    _str(engine, "engine", 512)
    user_ops = _dict(d.get("user_ops", {}) or {}, "user_ops")
    for k, v in user_ops.items():
        _str(k, "user_ops key")
        if not isinstance(v, str) or v.count(":") != 1 or len(v) > 512:
            _fail(f"user_ops.{k}", f"must be an import path 'package.module:attr', got {short_repr(v)}")
        _printable(v, f"user_ops.{k}")
    meta = _dict(d.get("meta", {}) or {}, "meta")
    for k, v in meta.items():
        _shallow(v, _meta_key(k), MAX_META_DEPTH)
    _accuracy(meta.get("accuracy"))
    inline = meta.get("inline_ops")
    if inline is not None and not (isinstance(inline, list) and all(isinstance(s, str) for s in inline)):
        _fail("meta.inline_ops", "must be a list of op names")
    modules = meta.get("module_ops")
    if modules is not None and not (isinstance(modules, list) and all(isinstance(s, str) for s in modules)):
        _fail("meta.module_ops", "must be a list of op names")
    if meta.get("rule") is not None:  # a §5 rule finding's rule name and calls: printed by replay
        _str(meta["rule"], "meta.rule", 128)
    if meta.get("scenario") is not None:
        if not isinstance(meta["scenario"], str):
            _fail("meta.scenario", f"must be a string (the calls of a rule finding), got {short_repr(meta['scenario'])}")
        _printable(meta["scenario"], "meta.scenario", allow="\n")
    try:
        torchfn_record.check(meta)  # how a torch Function was called (verify_torch_function findings)
    except torchfn_record.RecordError as e:
        raise CaseFileError(str(e)) from None
    leaves = []
    for i, l in enumerate(_count(d.get("leaves"), "leaves")):
        f = f"leaves[{i}]"
        _dict(l, f)
        rg = l.get("requires_grad", True)
        if not isinstance(rg, bool):
            _fail(f"{f}.requires_grad", f"must be true or false, got {short_repr(rg)}")
        value = _array(l.get("value"), f"{f}.value", budget)
        _leaf_dtype(value.dtype, rg, f)
        leaves.append((_str(l.get("name"), f"{f}.name"), value, rg))
    nodes = []
    for i, n in enumerate(_count(d.get("nodes"), "nodes")):
        f = f"nodes[{i}]"
        _dict(n, f)
        inputs = [_str(x, f"{f}.inputs[{j}]") for j, x in enumerate(_list(n.get("inputs"), f"{f}.inputs"))]
        params = _params(_dict(n.get("params", {}), f"{f}.params"), f"{f}.params")
        nodes.append((_str(n.get("name"), f"{f}.name"), _str(n.get("op"), f"{f}.op", 128), inputs, params))
    roots = [_str(r, f"roots[{i}]") for i, r in enumerate(_count(d.get("roots"), "roots"))]
    seeds = [None if s is None else _array(s, f"seeds[{i}]", budget)
             for i, s in enumerate(_list(d.get("seeds"), "seeds"))]
    return {"leaves": leaves, "nodes": nodes, "roots": roots, "seeds": seeds, "engine": engine,
            "user_ops": dict(user_ops), "meta": dict(meta), "budget": budget}
