"""Error rates of gs.check on kinked user ops at points where some elements sit exactly on a kink (tryout7 #13g).

    python benchmarks/kink_elements.py [--points 200] [--seed 0]

Seven user ops that declare no kinks (so finite differences find them numerically): np.interp, soft-thresholding,
abs, relu, clamp(-1, 1), maximum(a, b), and gate(a, b) = max(a, 0) + b (a > 0) (a kink on a jump surface at
a = b = 0: b's partial there is a convention, review14 #3).  Each has a correct vjp and a buggy one whose bug sits beside a kink (a
slope off on one side of it, or on the piece next to it).  Points: 2 to 6 elements, each put exactly on a kink
with probability 0.4, else drawn from N(0, 1.5^2).  Prints, per op: the correct rule's agree / inconclusive /
false alarms, and for the buggy rule, among the points where the bug shows at an element off every kink (the
rule's value differs from the correct one there), how many were found (disagree), missed (agree) or left
inconclusive.  Run with PYTHONPATH=<a checkout> to measure that checkout (before/after a change).
"""

from __future__ import annotations

import argparse
import collections
import sys

import numpy as np

import gradspec as gs

XP = np.array([-2.0, -0.5, 0.0, 1.0, 2.5])
FP = np.array([1.0, -1.0, 0.5, 0.3, 2.0])


def _interp_slope(x):
    j = np.clip(np.searchsorted(XP, x, side="right"), 1, len(XP) - 1)
    return (FP[j] - FP[j - 1]) / (XP[j] - XP[j - 1]) * ((x > XP[0]) & (x < XP[-1]))


def _st(x):
    return np.sign(x) * np.maximum(np.abs(x) - 0.5, 0.0)


# name: (forward, correct vjp, buggy vjp, kinks, arity)
OPS = {
    "interp": (lambda x: np.interp(x, XP, FP), lambda g, x, o: (g * _interp_slope(x),),
               lambda g, x, o: (g * _interp_slope(x) * np.where((x > 0) & (x < 1), 1.01, 1.0),), XP, 1),
    "soft-threshold": (_st, lambda g, x, o: (g * (np.abs(x) > 0.5),), lambda g, x, o: (g * (x > 0.5),),
                       np.array([-0.5, 0.5]), 1),
    "abs": (np.abs, lambda g, x, o: (g * np.sign(x),), lambda g, x, o: (g * np.where(x < 0, -0.99, np.sign(x)),),
            np.array([0.0]), 1),
    "relu": (lambda x: np.maximum(x, 0.0), lambda g, x, o: (g * (x > 0),),
             lambda g, x, o: (g * (x > 0) * np.where(x < 0.5, 1.02, 1.0),), np.array([0.0]), 1),
    "clamp": (lambda x: np.clip(x, -1.0, 1.0), lambda g, x, o: (g * ((x > -1) & (x < 1)),),
              lambda g, x, o: (g * ((x > -1) & (x < 1)) * np.where(x > 0.5, 0.98, 1.0),), np.array([-1.0, 1.0]), 1),
    "maximum": (np.maximum, lambda g, a, b, o: (g * (a >= b), g * (a < b)),
                lambda g, a, b, o: (g * (a >= b), 1.01 * g * (a < b)), None, 2),
    # a kink on a jump surface (review14 #3): at a = b = 0, a's line has a kink, and f jumps across a = 0 wherever
    # b != 0, so b's partial depends on the convention at a = 0 (this vjp's a >= 0 is one): not comparable there
    "gate": (lambda a, b: np.maximum(a, 0.0) + b * (a > 0), lambda g, a, b, o: (g * (a >= 0), g * (a >= 0)),
             lambda g, a, b, o: (g * (a >= 0), g * (a >= 0) * np.where(a > 0, 1.01, 1.0)), np.array([0.0]), 2),
}


def _point(rng, kinks, arity):
    n = int(rng.integers(2, 7))
    x = rng.normal(0.0, 1.5, n)
    on = rng.uniform(size=n) < 0.4
    if kinks is not None:
        x[on] = rng.choice(kinks, size=int(on.sum()))
    if arity == 1:
        return [x], on
    b = rng.normal(0.0, 1.5, n)
    b[on] = x[on]  # a tie (maximum); gate: a = b = 0
    return [x, b], on


def run(points: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name, (fwd, ok, bug, kinks, arity) in OPS.items():
        good = gs.Op(f"bke_{name.replace('-', '_')}", forward=fwd, vjp=ok)
        bad = gs.Op(f"bke_{name.replace('-', '_')}_bug", forward=fwd, vjp=bug)
        counts = collections.Counter()
        for _ in range(points):
            args, on = _point(rng, kinks, arity)
            seed_ = rng.normal(size=args[0].size)
            leaves = {f"x{i}": a for i, a in enumerate(args)}
            cases = [gs.Case.build(leaves, [("y", op.name, list(leaves), {})], ["y"], [seed_]) for op in (good, bad)]
            counts["correct " + gs.check(cases[0]).status] += 1
            with np.errstate(all="ignore"):
                g_ok, g_bad = ok(seed_, *args, None), bug(seed_, *args, None)
            shows = any(np.any((np.abs(u - v) > 1e-9 * (1 + np.abs(u))) & ~on) for u, v in zip(g_ok, g_bad))
            if shows:
                counts["bug " + gs.check(cases[1]).status] += 1
        out[name] = dict(counts)
    return out


def table_main(run, points: int, doc: str, argv=None) -> int:
    """Parse --points/--seed, ``run(points, seed)`` (name -> counts of "correct <status>" / "bug <status>"), print
    the table of both kink benchmarks (kink_builtin.py too) and exit 1 on a false alarm."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--points", type=int, default=points)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    res = run(a.points, a.seed)
    total = collections.Counter()
    print(f"{'op':16} {'correct: agree':>15} {'inconcl.':>9} {'FALSE ALARM':>12} | {'bug shows':>9} {'found':>6} "
          f"{'missed':>7} {'inconcl.':>9}")
    for name, c in res.items():
        total.update(c)
        shows = sum(v for k, v in c.items() if k.startswith("bug "))
        print(f"{name:16} {c.get('correct agree', 0):>15} {c.get('correct inconclusive', 0):>9} "
              f"{c.get('correct disagree', 0):>12} | {shows:>9} {c.get('bug disagree', 0):>6} "
              f"{c.get('bug agree', 0):>7} {c.get('bug inconclusive', 0):>9}")
    shows = sum(v for k, v in total.items() if k.startswith("bug "))
    print(f"{'total':16} {total['correct agree']:>15} {total['correct inconclusive']:>9} {total['correct disagree']:>12} "
          f"| {shows:>9} {total['bug disagree']:>6} {total['bug agree']:>7} {total['bug inconclusive']:>9}")
    return 1 if total["correct disagree"] else 0


def main(argv=None) -> int:
    return table_main(run, 200, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
