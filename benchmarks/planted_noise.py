"""Planted VJP bugs in ops with kinks that compare nothing (norm, std, softplus, clamp) and in sin downstream
of norm: how many drawn cases holding the op each verdict calls them.  For changes to the rounding-noise
model (``gradspec/_check_noise.py``), whose floor could hide a bug where it grows.

    python benchmarks/planted_noise.py --corpus FILE --make        # draw the corpus once, with this checkout
    PYTHONPATH=<older checkout> python benchmarks/planted_noise.py --corpus FILE > before.json
    python benchmarks/planted_noise.py --corpus FILE > after.json

Both versions must read the same corpus (Hypothesis draws other cases once the code changes).  Prints JSON:
per op, dtype and relative error planted (the op's VJP x (1 + rel)), cases and how many agree, disagree or
are inconclusive; the same cases without a bug must all agree.
"""

from __future__ import annotations

import argparse
import collections
import json

import gradspec as gs
from gradspec import engine as E

OPS = {"norm": ["norm", "sin", "mul", "add", "exp", "sum"], "std": ["std", "sin", "mul", "add", "exp", "sum"],
       "softplus": ["softplus", "sin", "mul", "add", "sum"], "clamp": ["clamp", "sin", "mul", "add", "sum"],
       "sin": ["norm", "sin", "mul", "add", "sum"]}


def make(path):
    from gradspec._private.sampling import sample
    out = {}
    for op, ops in OPS.items():
        for dt, seed in (("float64", 1), ("float32", 2)):
            cs = [c for c in sample(gs.strategies.cases(ops=ops, dtype=dt, max_nodes=5), 150, seed) if op in c.ops]
            if op == "sin":
                cs = [c for c in cs if "norm" in c.ops]
            out[f"{op}/{dt}"] = [c.to_json() for c in cs[:60]]
    json.dump(out, open(path, "w"))


def mutant(spec, rel):
    orig = spec.vjp

    def vjp(g, *xs, out, **p):
        r = orig(g, *xs, out=out, **p)
        r = (r,) if isinstance(r, E.Tensor) or r is None else r
        return tuple(None if t is None else t * (1.0 + rel) for t in r)

    return orig, vjp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--make", action="store_true")
    a = ap.parse_args()
    if a.make:
        make(a.corpus)
        return
    corpus = json.load(open(a.corpus))
    res = {}
    for key, items in corpus.items():
        op, dt = key.split("/")
        cases = [gs.Case.from_json(s) for s in items]
        for rel in ((1e-6, 1e-3) if dt == "float64" else (1e-4, 1e-2)):
            spec = gs.ops.get(op)
            orig, bad = mutant(spec, rel)
            spec.vjp = bad
            c = collections.Counter()
            try:
                for case in cases:
                    c[gs.check(case).status] += 1
            finally:
                spec.vjp = orig
            res[f"{op}-x(1+{rel:g})/{dt}"] = dict(cases=len(cases), **c)
        c = collections.Counter(gs.check(case).status for case in cases)  # no bug: every case should agree
        res[f"{op}-correct/{dt}"] = dict(cases=len(cases), **c)
    print(json.dumps({"gradspec": gs.__file__, "res": res}, indent=1))


if __name__ == "__main__":
    main()
