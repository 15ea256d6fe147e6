"""How a torch Function was called when a finding was made, kept in ``case.json`` as data.

``verify_torch_function`` wraps ``fn`` as a user op whose shape rule and call layout it decided
from what the user gave (``example_inputs``, a ``signature``, a tuple output, positional
non-tensor arguments).  Replay (``gradspec replay``, ``repro.py``, ``gradspec explain``) must
rebuild the same op, so the case's ``meta["torch_function_specs"][op]`` records it -- as plain
data, never code (the Function itself is imported by its import path, and only when allowed):

* ``n_args`` / ``tensor_pos``: fn's positional arguments and which of them are the tensors (the
  others travel as the node's ``arg<position>`` params);
* ``shape``: ``"elementwise"`` (broadcasting over the tensors), ``"signature"`` (with
  ``signature``, a numpy gufunc signature) or ``"forward"`` (the output shape is the one fn's
  forward returns on inputs of these shapes: a rule learnt by probing fn, a tuple output
  flattened, a user's ``shape_fn``);
* ``domain``: where values were drawn (``Domain.to_json``; one, or one per tensor), or null.

:func:`check` validates a record field by field (``gradspec replay`` exits 2 naming the field);
:func:`parse` returns it with the domain rebuilt.

Example::

    >>> from gradspec._private.torchfn_record import check
    >>> check({"torch_function_specs": {"torch_fn": {"n_args": 2, "tensor_pos": [0], "shape": "forward"}}})
    >>> check({"torch_function_specs": {"torch_fn": {"n_args": 1, "tensor_pos": [0], "shape": "exec('x')"}}})
    Traceback (most recent call last):
    ...
    gradspec._private.torchfn_record.RecordError: corrupt gradspec case file: field ...shape: must be one of ...
"""

from __future__ import annotations

import math

from .inert import short_repr

__all__ = ["KEY", "SHAPES", "RecordError", "check", "parse", "record"]

KEY = "torch_function_specs"
SHAPES = ("elementwise", "signature", "forward")
_DOMAIN_NAMES = ("real", "positive", "interval", "away_from")
_MAX_ARGS = 64  # no Function.apply a user writes takes more positional arguments
_MAX_POINTS = 64


class RecordError(ValueError):
    """A malformed field of the record (``casefile`` reports it as a corrupt case file)."""


def _fail(field: str, msg: str):
    raise RecordError(f"corrupt gradspec case file: field {field}: {msg}")




def _int(v, field: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        _fail(field, f"must be an integer in [{lo}, {hi}], got {short_repr(v)}")
    return v


def _float(v, field: str, *, inf_ok: bool) -> float:
    if isinstance(v, str) and inf_ok and v in ("inf", "-inf"):
        return float(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        alt = " (or 'inf' / '-inf')" if inf_ok else ""
        _fail(field, f"must be a finite number{alt}, got {short_repr(v)}")
    return float(v)


def _domain(d, field: str):
    from ..domains import Domain

    if not isinstance(d, dict) or set(d) != {"lo", "hi", "points", "margin", "name"}:
        _fail(field, f"must be an object with lo, hi, points, margin and name (Domain.to_json), got {short_repr(d)}")
    lo = _float(d["lo"], f"{field}.lo", inf_ok=True)
    hi = _float(d["hi"], f"{field}.hi", inf_ok=True)
    if not lo < hi:
        _fail(field, f"needs lo < hi, got lo={lo!r}, hi={hi!r}")
    pts = d["points"]
    if not isinstance(pts, list) or len(pts) > _MAX_POINTS:
        _fail(f"{field}.points", f"must be a list of at most {_MAX_POINTS} numbers, got {short_repr(pts)}")
    points = tuple(_float(p, f"{field}.points[{i}]", inf_ok=False) for i, p in enumerate(pts))
    margin = _float(d["margin"], f"{field}.margin", inf_ok=False)
    if margin < 0:
        _fail(f"{field}.margin", f"must be >= 0, got {margin!r}")
    nm = d["name"]
    if not isinstance(nm, str) or not nm.replace("_", "").isalnum() or len(nm) > 64:
        _fail(f"{field}.name", f"must be a domain name such as {', '.join(map(repr, _DOMAIN_NAMES))}, got {short_repr(nm)}")
    return Domain(lo, hi, points, margin, nm)


def _one(name: str, r, field: str) -> dict:
    if not isinstance(r, dict):
        _fail(field, f"must be an object, got {type(r).__name__}")
    extra = set(r) - {"n_args", "tensor_pos", "shape", "signature", "domain"}
    if extra:
        _fail(field, f"unknown key(s) {sorted(map(str, extra))[:5]}")
    n = _int(r.get("n_args"), f"{field}.n_args", 1, _MAX_ARGS)
    pos = r.get("tensor_pos")
    if not isinstance(pos, list) or not pos:
        _fail(f"{field}.tensor_pos", f"must be a non-empty list of positions, got {short_repr(pos)}")
    pos = [_int(p, f"{field}.tensor_pos[{i}]", 0, n - 1) for i, p in enumerate(pos)]
    if len(set(pos)) != len(pos) or pos != sorted(pos):
        _fail(f"{field}.tensor_pos", f"must be increasing positions without repeats, got {short_repr(pos)}")
    shape = r.get("shape")
    if shape not in SHAPES:
        _fail(f"{field}.shape", f"must be one of {', '.join(map(repr, SHAPES))}, got {short_repr(shape)}")
    sig = r.get("signature")
    if shape == "signature":
        from .signature import parse as parse_sig

        if not isinstance(sig, str) or len(sig) > 256:
            _fail(f"{field}.signature", f"must be a gufunc signature string such as '(n)->()', got {short_repr(sig)}")
        try:
            cores = parse_sig(sig)[0]
        except Exception as e:  # noqa: BLE001 - the parser's own words say what is wrong
            _fail(f"{field}.signature", f"{short_repr(sig)} is not a gufunc signature: {e}")
        if len(cores) != len(pos):
            _fail(f"{field}.signature", f"{sig!r} has {len(cores)} input(s), tensor_pos has {len(pos)}")
    elif sig is not None:
        _fail(f"{field}.signature", "is only allowed with \"shape\": \"signature\"")
    dom = r.get("domain")
    if dom is None:
        domain = None
    elif isinstance(dom, list):
        if len(dom) != len(pos):
            _fail(f"{field}.domain", f"a list of domains needs one per tensor ({len(pos)}), got {len(dom)}")
        domain = [_domain(d, f"{field}.domain[{i}]") for i, d in enumerate(dom)]
    else:
        domain = _domain(dom, f"{field}.domain")
    return {"n_args": n, "tensor_pos": pos, "shape": shape, "signature": sig, "domain": domain}


def check(meta) -> None:
    """Validate ``meta["torch_function_specs"]`` (absent is fine); CaseFileError naming the field."""
    parse_all(meta)


def parse_all(meta) -> dict:
    recs = meta.get(KEY) if isinstance(meta, dict) else None
    if recs is None:
        return {}
    if not isinstance(recs, dict) or len(recs) > 64:
        _fail(f"meta.{KEY}", f"must be an object op name -> record (at most 64), got {short_repr(recs)}")
    out = {}
    for name, r in recs.items():
        if not isinstance(name, str) or not name or len(name) > 128:
            _fail(f"meta.{KEY} key", f"must be an op name, got {short_repr(name)}")
        out[name] = _one(name, r, f"meta.{KEY}.{name}")
    return out


def parse(meta, name: str) -> dict | None:
    """The validated record of op ``name`` (its domain a Domain, or a list of them), or None."""
    return parse_all(meta).get(name)


def record(n_args: int, tensor_pos, shape: str, signature=None, domain=None) -> dict:
    """The JSON record (``domain``: None, a Domain, or a list of them)."""
    if isinstance(domain, (list, tuple)):
        dom = [d.to_json() for d in domain]
    else:
        dom = None if domain is None else domain.to_json()
    out = {"n_args": int(n_args), "tensor_pos": [int(p) for p in tensor_pos], "shape": shape, "domain": dom}
    if shape == "signature":
        out["signature"] = signature
    return out
