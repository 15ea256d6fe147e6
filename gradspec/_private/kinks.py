"""Nodes that sit exactly on a tie or kink, where no derivative exists.

At ``relu(0)``, ``abs(0)``, ``maximum(a, a)``, a ``max`` with two equal extreme elements or a
``clamp`` at its bound, the gradient is a *convention* (torch's: 0 for relu, g/2 to each side of a
``maximum`` tie...), which the exact oracles (the reference engine, torch) implement and can be
compared on.  Finite differences and the forward-mode jacobian have no such convention -- a
one-sided slope, an average, whatever their rule happens to do -- so they step aside there, and
say so (the reason starts with ``EXCLUDED``, which reports count).

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec._private.kinks import exact_kinks
    >>> case = gs.Case.build({"x": np.array([0.0, 2.0])}, [("y", "relu", ["x"], {})], ["y"], [np.ones(2)])
    >>> exact_kinks(case)
    ['y = relu(x)']
"""

from __future__ import annotations

import math

import numpy as np

from . import percase

__all__ = ["exact_kinks", "exclusion", "tally", "summarise", "EXCLUDED", "OTHERS_UNJUDGED", "center_kink_distances",
           "snapshot"]

EXCLUDED = "exact tie/kink"
# What a case found not differentiable as a whole leaves unjudged: every element -- where a jump was found, or a kink
# by a witness other than finite differences' per-element lines.  (Where FD's lines find kinks at some elements only,
# those alone are left out and the others compared: gradspec.oracles.fd._finer, tryout7 #13g.)
OTHERS_UNJUDGED = ("; the case's other elements go unjudged with it: to judge them, check a point with that element "
                   "moved off the kink (gs.Case.build, or verify_torch_function(at=...))")


def exact_kinks(case) -> list[str]:
    """``"node = op(inputs)"`` for every node whose inputs are at distance 0 from one of its op's
    kinks or ties (its ``kink_distance``, or a singular point of its domain), at the case's values.
    Computed once per ``gs.check`` of the case (finite differences and the jacobian both ask)."""
    return list(percase.once(case, "exact_kinks", lambda: _exact_kinks(case))[0])


def center_kink_distances(case) -> dict | None:
    """While ``gs.check`` runs on ``case``, after ``exact_kinks``: node name -> (its inputs at the case's
    values as (dtype, shape, bytes) of C-contiguous arrays, ``float(kink_distance(*inputs, **params))``)
    for the nodes of gradspec's own ops whose kink distance was computed there; else None.  Finite
    differences' reach check asks the same distance at the same point (its batched pass's row 0): where
    the inputs are the very same bytes it takes the number instead of computing it again."""
    memo = percase.active(case)
    got = None if memo is None else memo.get("exact_kinks")
    return None if got is None else got[1]


def snapshot(a):
    """(dtype, shape, bytes) of a C-contiguous array, else None: what ``center_kink_distances`` compares
    (a function of equal dtype, shape, layout and bytes computes the same float)."""
    if type(a) is np.ndarray and a.flags.c_contiguous:
        return a.dtype, a.shape, a.tobytes()
    return None


def exclusion(case, oracle: str) -> str | None:
    """The reason ``oracle`` (finite differences, the jacobian) cannot judge ``case``, or None."""
    at = exact_kinks(case)
    if not at:
        return None
    return (f"{oracle}: {EXCLUDED} at {'; '.join(at[:3])}{' ...' if len(at) > 3 else ''}: no derivative exists "
            "there (only the exact oracles compare, on torch's convention)")


def _exact_kinks(case) -> tuple[list[str], dict]:
    specs = case._node_specs() or [case.spec(n.op) for n in case.nodes]
    get = _KINKS.get
    watched = []
    for n, spec in zip(case.nodes, specs):
        hit = get(id(spec))  # (_kink_info's cache hit, inline: this runs for every node of every check)
        info = hit[3] if hit is not None and hit[0] is spec and hit[1] is spec.domain and hit[2] is spec.kink_distance \
            else _kink_info(spec)
        if info:
            watched.append((n, spec))
    out: list[str] = []
    known: dict = {}
    if not watched:
        return out, known
    with np.errstate(all="ignore"):  # (one context for the forward and the distances: each costs ~1 us)
        try:
            env = case._evaluate(None, 0)
        except Exception:  # noqa: BLE001 - a case that does not evaluate has no kinks to speak of
            return out, known
        for n, spec in watched:
            args = [env[i] for i in n.inputs]
            try:
                d, kd = _distance(spec, args, n.params)
            except Exception:  # noqa: BLE001 - a kink rule that fails is no evidence of a kink
                continue
            if d == 0:
                out.append(f"{n.name} = {n.op}({', '.join(n.inputs)})")
            elif kd is not None and not spec.user:  # (user code may not answer alike twice: asked again)
                snaps = [snapshot(a) for a in args]
                if None not in snaps:
                    known[n.name] = (snaps, kd)
    return out, known


_KINKS: dict = {}  # id(spec) -> (spec, its domain, its kink_distance, whether it has kinks or singular points)


def _kink_info(spec) -> bool:
    """``_has_kinks(spec)``, kept per op spec (a property of its declaration, asked for every node of every
    check; the spec is held, so its id is not reused while cached)."""
    hit = _KINKS.get(id(spec))
    if hit is not None and hit[0] is spec and hit[1] is spec.domain and hit[2] is spec.kink_distance:
        return hit[3]
    info = _has_kinks(spec)
    if len(_KINKS) > 4096:  # user ops made afresh in a loop: keep the cache bounded
        _KINKS.clear()
    _KINKS[id(spec)] = (spec, spec.domain, spec.kink_distance, info)
    return info


def _has_kinks(spec) -> bool:
    if spec.kink_distance is not None:
        return True
    return any(d.points for d in spec.domains_for(spec.arity or 1))


_MIN = np.minimum.reduce  # (np.min without its Python wrapper: the same reduction, ~1 us less a call)


def _distance(spec, args, params) -> tuple[float, float | None]:
    """(a distance of ``args`` to the op's nearest singular point or kink that is 0 exactly where the
    distance ``min(min |a - p| over the domains' points, kink_distance)`` is, the kink distance alone
    where the op has one, else None).  A few float64 or float32 elements are tested on Python floats:
    ``a - p`` is 0 exactly where ``a`` equals ``p`` (in ``a``'s dtype, as numpy casts ``p``), and a NaN
    element makes numpy's ``min |a - p|`` NaN, which no minimum takes (so the array counts for nothing)."""
    d = np.inf
    for dom, a in zip(spec.domains_for(len(args)), args):
        if not dom.points:
            continue
        a = np.asarray(a)
        if not (a.size and a.dtype.kind == "f"):
            continue
        if a.size <= _SMALL and a.dtype in _CAST:
            pts = _cast_points(a.dtype, dom.points)
            if pts is not None:  # (a point at inf: inf - inf is NaN, not 0; numpy below)
                vals = a.ravel().tolist()
                total = sum(vals)
                if total != total and any(x != x for x in vals):  # (a NaN sum may be inf - inf: look)
                    continue
                if any(p in vals for p in pts):  # (``in`` compares with ==: -0.0 == 0.0, as x - p == 0)
                    d = 0.0
                continue
        d = min(d, min(float(_MIN(np.abs(a - p), axis=None)) for p in dom.points))
    kd = None
    if spec.kink_distance is not None:
        kd = float(spec.kink_distance(*args, **params))
        d = min(d, kd)
    return d, kd


def _cast_points(dtype, points: tuple) -> list | None:
    """The domain's points as ``_CAST`` makes them for ``dtype``, or None where one is not finite (kept per
    dtype and points: the same few domains are asked about for every node of every check)."""
    key = (dtype, points)
    try:
        return _POINTS[key]
    except KeyError:
        pass
    except TypeError:  # (points that are not a tuple of floats: not kept)
        key = None
    pts = [_CAST[dtype](p) for p in points]
    pts = pts if math.isfinite(sum(pts)) else None
    if key is not None:
        if len(_POINTS) > 1024:
            _POINTS.clear()
        _POINTS[key] = pts
    return pts


_POINTS: dict = {}
_SMALL = 16  # elements
# a domain point as numpy casts it to the array's dtype (a Python float is a "weak" scalar: it takes the
# array's dtype), as a Python float; points are finite, so the cast and the comparison are exact
_CAST = {np.dtype(np.float64): float, np.dtype(np.float32): lambda p: float(np.float32(p))}


def tally(case, skipped: dict) -> list[str]:
    """What one checked case adds to a campaign's hard-region counts: its precision
    (``case.meta["dtype"]``, else from its leaves), whether it carries an exact tie/kink, and
    which oracles stepped aside because of one."""
    dt = case.meta.get("dtype")
    if dt is None:
        dts = {l.value.dtype.name for l in case.leaves if l.value.dtype.kind == "f"}
        dt = "mixed" if len(dts) > 1 else (dts.pop() if dts else "float64")
    out = [f"dtype {dt}"]
    if case.meta.get("hard") or any(EXCLUDED in why for why in skipped.values()):
        out.append("tie/kink")
    out += [f"excluded {name}" for name, why in skipped.items() if EXCLUDED in why]
    return out


def summarise(counts, cases: int) -> dict:
    """``summary.json["hard_regions"]`` from the summed ``tally`` keys."""
    return {
        "cases": cases,
        "dtypes": {k[6:]: v for k, v in sorted(counts.items()) if k.startswith("dtype ")},
        "tie_kink_cases": counts.get("tie/kink", 0),
        "excluded_at_ties_kinks": {k[9:]: v for k, v in sorted(counts.items()) if k.startswith("excluded ")},
    }
