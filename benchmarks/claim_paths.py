"""A claimed accuracy on random graphs: correct loose ops stay silent, ops 10x beyond their claim are found.

    python benchmarks/claim_paths.py [--cases N] [--seed S] [--json FILE]

Four user ops, each claimed at ``rtol = 1e-4`` (``case.meta["accuracy"]``, what ``fuzz --rtol 1e-4`` records):

* ``ndtri1``: tryout9's ndtri, one Newton step from a start 1e-3 off (its derivative is off by up to ~3e-5
  relative), the exact implicit vjp: correct at its claim;
* ``ndtri1_bug``: the same forward, its vjp x (1 + 1e-3): 10x its claim;
* ``exp_loose`` / ``exp_loose_bug``: exp with a vjp off by 3e-5 / 1e-3 relative.

Each op is mixed with exp, log, add, mul, sum and logsumexp in N graphs drawn with a fixed seed (the same cases
for every version of gradspec: ``gradspec._private.sampling.sample``), each checked with the reference, finite
differences and the jacobian.  Counted per op: cases judged, cases where the op's node reaches a root (the
others cannot show it), cases with a value discrepancy.  Then N value sets of tryout9's graph, whose two paths
cancel (:func:`cancelling`), the same count.  Then N value sets of a 1,012-input case (:func:`directional`: 12
leaves through the op beside a 1000-element leaf that reaches no user op), which gs.check compares along random
directions (above fd.full_limit).  Run it with ``PYTHONPATH`` set to each version to compare.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import gradspec as gs

RTOL = 1e-4
TABLE = ["exp", "log", "add", "mul", "sum", "logsumexp"]


def _ndtri1(p):
    from scipy.special import ndtr, ndtri

    y = ndtri(p) * (1 + 1e-3)
    return y - (ndtr(y) - p) * np.sqrt(2 * np.pi) * np.exp(0.5 * y * y)


def _ndtri_vjp(factor):
    return lambda g, p, out: (g * np.sqrt(2 * np.pi) * np.exp(0.5 * out * out) * factor,)


OPS = {
    "ndtri1": (gs.Op("bench_ndtri1", forward=_ndtri1, vjp=_ndtri_vjp(1.0), domain=gs.domains.interval(0, 1)), False),
    "ndtri1_bug": (gs.Op("bench_ndtri1_bug", forward=_ndtri1, vjp=_ndtri_vjp(1 + 10 * RTOL),
                         domain=gs.domains.interval(0, 1)), True),
    "exp_loose": (gs.Op("bench_exp_loose", forward=np.exp, vjp=lambda g, x, out: (g * out * (1 + 0.3 * RTOL),)), False),
    "exp_loose_bug": (gs.Op("bench_exp_loose_bug", forward=np.exp, vjp=lambda g, x, out: (g * out * (1 + 10 * RTOL),)),
                      True),
}


def run(n: int, seed: int) -> dict:
    from gradspec._private.sampling import sample

    out = {}
    for name, (op, planted) in OPS.items():
        judged = reach = found = found_with_op = 0
        for case in sample(gs.strategies.cases(ops=[op.name] + TABLE, dtype="float64"), n, seed):
            case.meta["accuracy"] = {"rtol": RTOL, "atol": 0.0}
            v = gs.check(case, oracles=["reference", "finite-differences", "jacobian"])
            if not v.comparisons or v.unjudged:
                continue
            judged += 1
            on_path = op.name in {nd.op for nd in case.nodes if nd.name in case.ancestors(case.roots)}
            reach += on_path
            if any(d.kind == "value" for d in v.discrepancies):
                found += 1
                found_with_op += on_path
        out[name] = {"planted": planted, "cases": n, "judged": judged, "op_reaches_a_root": reach,
                     "value_discrepancies": found, "of_them_op_reaches_a_root": found_with_op}
    return out


def cancelling(n: int, seed: int) -> dict:
    """tryout9's graph, n value sets: v = exp(op(x)) (seed 1) and w = exp(x), w's seed chosen so that the two path
    terms cancel to a fraction 10^U(-3, -0.3) of the one through the op (x in (0.01, 0.99))."""
    from scipy.special import ndtri

    rng = np.random.default_rng(seed)
    out = {}
    for name, (op, planted) in OPS.items():
        found = 0
        for _ in range(n):
            x = rng.uniform(0.01, 0.99, 3)
            y = ndtri(x) if name.startswith("ndtri") else np.exp(x)
            dy = np.sqrt(2 * np.pi) * np.exp(0.5 * y * y) if name.startswith("ndtri") else y
            frac = 10 ** rng.uniform(-3, -0.3, 3)
            case = gs.Case.build({"x": x}, [("u", op.name, ["x"], {}), ("v", "exp", ["u"], {}), ("w", "exp", ["x"], {})],
                                 ["v", "w"], [np.ones(3), -np.exp(y) * dy * (1 - frac) / np.exp(x)])
            case.meta["accuracy"] = {"rtol": RTOL, "atol": 0.0}
            v = gs.check(case, oracles=["reference", "finite-differences", "jacobian"])
            found += any(d.kind == "value" for d in v.discrepancies)
        out[name] = {"planted": planted, "cases": n, "value_discrepancies": found}
    return out


def directional(n: int, seed: int) -> dict:
    """n value sets of a case of 1,012 inputs: 12 one-element leaves, each through the op to a root of seed 1, and a
    leaf z of 1000 elements, exp(z) with seed 1, that reaches no user op.  Above fd.full_limit gs.check compares
    <u, grad> along 16 random directions: session 14's claim summed |u| |grad| over z's elements too, and an op 10x
    beyond its claim agreed."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, (op, planted) in OPS.items():
        found = 0
        for _ in range(n):
            low, high = (0.01, 0.99) if name.startswith("ndtri") else (-1.0, 1.0)
            leaves = {f"x{i}": rng.uniform(low, high, 1) for i in range(12)}
            leaves["z"] = rng.uniform(-1, 1, 1000)
            nodes, roots, seeds = [("ez", "exp", ["z"], {})], ["ez"], [np.ones(1000)]
            for i in range(12):
                nodes.append((f"u{i}", op.name, [f"x{i}"], {}))
                roots.append(f"u{i}")
                seeds.append(rng.choice([-1.0, 1.0], 1))
            case = gs.Case.build(leaves, nodes, roots, seeds)
            case.meta["accuracy"] = {"rtol": RTOL, "atol": 0.0}
            v = gs.check(case, oracles=["reference", "finite-differences"])
            found += any(d.kind == "value" for d in v.discrepancies)
        out[name] = {"planted": planted, "cases": n, "value_discrepancies": found}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    res = run(a.cases, a.seed)
    print(f"{'op':16s} {'planted':>7s} {'cases':>5s} {'judged':>6s} {'op on a path':>12s} {'value disc.':>11s}")
    for name, r in res.items():
        print(f"{name:16s} {str(r['planted']):>7s} {r['cases']:5d} {r['judged']:6d} {r['op_reaches_a_root']:12d} "
              f"{r['value_discrepancies']:11d}")
    canc = cancelling(a.cases, a.seed)
    print("cancelling paths (tryout9's graph):")
    for name, r in canc.items():
        print(f"{name:16s} {str(r['planted']):>7s} {r['cases']:5d} {r['value_discrepancies']:11d}")
    dire = directional(a.cases, a.seed)
    print("1,012 inputs, directional comparison (12 through the op, 1000 not):")
    for name, r in dire.items():
        print(f"{name:16s} {str(r['planted']):>7s} {r['cases']:5d} {r['value_discrepancies']:11d}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"random": res, "cancelling": canc, "directional": dire}, f, indent=1)


if __name__ == "__main__":
    main()
