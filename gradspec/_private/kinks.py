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

import numpy as np

from . import percase

__all__ = ["exact_kinks", "exclusion", "tally", "summarise", "EXCLUDED"]

EXCLUDED = "exact tie/kink"


def exact_kinks(case) -> list[str]:
    """``"node = op(inputs)"`` for every node whose inputs are at distance 0 from one of its op's
    kinks or ties (its ``kink_distance``, or a singular point of its domain), at the case's values.
    Computed once per ``gs.check`` of the case (finite differences and the jacobian both ask)."""
    return list(percase.once(case, "exact_kinks", lambda: _exact_kinks(case)))


def _exact_kinks(case) -> list[str]:
    specs = case._node_specs() or [case.spec(n.op) for n in case.nodes]
    watched = [(n, spec) for n, spec in zip(case.nodes, specs) if _has_kinks(spec)]
    if not watched:
        return []
    out = []
    with np.errstate(all="ignore"):  # (one context for the forward and the distances: each costs ~1 us)
        try:
            env = case._evaluate(None, 0)
        except Exception:  # noqa: BLE001 - a case that does not evaluate has no kinks to speak of
            return []
        for n, spec in watched:
            args = [env[i] for i in n.inputs]
            try:
                d = _distance(spec, args, n.params)
            except Exception:  # noqa: BLE001 - a kink rule that fails is no evidence of a kink
                continue
            if d == 0:
                out.append(f"{n.name} = {n.op}({', '.join(n.inputs)})")
    return out


def exclusion(case, oracle: str) -> str | None:
    """The reason ``oracle`` (finite differences, the jacobian) cannot judge ``case``, or None."""
    at = exact_kinks(case)
    if not at:
        return None
    return (f"{oracle}: {EXCLUDED} at {'; '.join(at[:3])}{' ...' if len(at) > 3 else ''}: no derivative exists "
            "there (only the exact oracles compare, on torch's convention)")


def _has_kinks(spec) -> bool:
    if spec.kink_distance is not None:
        return True
    return any(d.points for d in spec.domains_for(spec.arity or 1))


def _distance(spec, args, params) -> float:
    d = np.inf
    for dom, a in zip(spec.domains_for(len(args)), args):
        a = np.asarray(a)
        if a.size and a.dtype.kind == "f" and dom.points:
            d = min(d, min(float(np.min(np.abs(a - p))) for p in dom.points))
    if spec.kink_distance is not None:
        d = min(d, float(spec.kink_distance(*args, **params)))
    return d


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
