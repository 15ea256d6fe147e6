"""The floor of ``gs.check`` with four CPU witnesses, against ``torch.autograd.gradcheck``, per size bucket.

    python benchmarks/check_floor.py [--corpus FILE] [--cases N] [--json FILE]

What must any check with these four independent witnesses spend on a case, whatever its bookkeeping?
For each case of ``run.py``'s corpus (the same buckets), in CPU time, medians of repeated warm runs:

* ``reference``: the numpy calls gradspec's engine makes for the case (each op's forward and every op
  its VJP rules evaluate, broadcast reductions included), recorded once and replayed as bare calls: a
  hand-written reverse mode with the same formulas and no autograd bookkeeping;
* ``jacobian``: the forward (``spec.forward`` per node) and the JVP rules' calls, recorded and replayed,
  and the contraction ``J^T . seed``;
* ``finite-differences``: plain central differences (``run.py: plain_central_differences``: the 2n
  points, one batched forward, one contraction; no error estimate, no kink test);
* ``torch``: the graph in torch (``from_numpy`` leaves, each op's torch mapping),
  ``torch.autograd.backward`` and the gradients read back as numpy;
* ``compare``: every pair of the four, leaf by leaf, ``|a - b| <= rtol |b| + atol`` (one numpy
  expression per pair and leaf).

``floor_alone`` sums the five timed each on its own (hot caches); ``floor_back_to_back`` runs them one
after the other on each case, as a check must (four code bases through the caches).  Both are divided by
gradcheck's time on the same graph, and ``gs.check`` (the four CPU oracles) is shown beside them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys

import numpy as np
import run as R  # benchmarks/run.py: the corpus, timeit, the torch function for gradcheck

import gradspec as gs
from gradspec import engine as E


def record_reference(case):
    """The (forward, arrays, params) of every op the reference oracle applies on ``case``."""
    calls = []
    original = E.apply

    def recording(spec, inputs, params):
        out = original(spec, inputs, params)
        arrays = [x.data if isinstance(x, E.Tensor) else np.asarray(x) for x in inputs]
        calls.append((spec.forward, arrays, spec.canonical([a.shape for a in arrays], params)))
        return out

    E.apply = recording
    try:
        gs.oracles.get("reference").vjp(case)
    finally:
        E.apply = original
    return calls


def record_jvps(case):
    """The JVP rule calls of the jacobian oracle on ``case`` (its tangents copied, as a rule may write them)."""
    specs = {n.op: case.spec(n.op) for n in case.nodes}
    originals = {op: s.jvp for op, s in specs.items()}
    calls = []

    def wrap(fn):
        def w(tangents, *prim, **kw):
            calls.append((fn, [None if t is None else np.array(t) for t in tangents], prim, kw))
            return fn(tangents, *prim, **kw)
        return w

    for op, s in specs.items():
        if s.jvp is not None:
            s.jvp = wrap(originals[op])
    try:
        jac = gs.oracles.get("jacobian").jacobian(case)
    finally:
        for op, s in specs.items():
            s.jvp = originals[op]
    return calls, jac.matrix, jac.seed_vector


def floors(case):
    """name -> a callable doing that witness's least work on ``case``."""
    import torch

    ref = record_reference(case)
    jvps, J, v = record_jvps(case)
    specs = [case.spec(n.op) for n in case.nodes]
    leaves = case.grad_leaves()

    def reference():
        for f, a, p in ref:
            f(*a, **p)

    def jacobian():
        env = {l.name: l.value for l in case.leaves}
        for n, s in zip(case.nodes, specs):
            env[n.name] = s.forward(*[env[i] for i in n.inputs], **n.params)
        for f, tangents, prim, kw in jvps:
            f([None if t is None else t.copy() for t in tangents], *prim, **kw)
        return J.T @ v

    def torch_():
        env = {}
        for l in case.leaves:
            t = torch.from_numpy(l.value)
            env[l.name] = t.requires_grad_(True) if l.differentiable else t
        for n, s in zip(case.nodes, specs):
            env[n.name] = s.torch(*[env[i] for i in n.inputs], **n.params)
        roots = [env[r] for r in case.roots]
        torch.autograd.backward(roots, [None if s is None else torch.from_numpy(np.asarray(s)) for s in case.seeds])
        return [None if env[l.name].grad is None else env[l.name].grad.numpy() for l in leaves]

    grads = [np.asarray(g, dtype=np.float64) for g in gs.oracles.get("reference").vjp(case).values() if g is not None]

    def compare():
        for _ in itertools.combinations(range(4), 2):
            for g in grads:
                np.all(np.abs(g - g) <= 1e-7 * np.abs(g) + 1e-12)

    return {"reference": reference, "jacobian": jacobian, "finite-differences": R.plain_central_differences(case),
            "torch": torch_, "compare": compare}


def measure(corpus):
    import torch

    rows = []
    for source, case in corpus:
        v = gs.check(case, oracles=R.CPU_ORACLES)
        if not all(o in v.results for o in R.CPU_ORACLES):
            continue  # a witness stepped aside: its floor would be charged for nothing
        try:
            fl = floors(case)
            f, inputs = R.torch_function(case)
            row = {"corpus": source, "n": case.n_inputs,
                   "gradcheck": R.timeit(lambda: torch.autograd.gradcheck(f, inputs, raise_exception=False))}
        except Exception as e:  # noqa: BLE001 - a graph the floor programs or gradcheck cannot run
            print(f"skipped a case: {type(e).__name__}: {e}"[:160], file=sys.stderr)
            continue
        for name, fn in fl.items():
            row[name] = R.timeit(fn)
        row["floor_alone"] = sum(row[k] for k in fl)
        row["floor_back_to_back"] = R.timeit(lambda: [fn() for fn in fl.values()])
        row["check"] = R.timeit(lambda: gs.check(case, oracles=R.CPU_ORACLES))
        rows.append(row)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=None, help="a run.py --save-corpus file (default: run.py's sample, seed 0)")
    p.add_argument("--cases", type=int, default=150)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    corpus = R.load_corpus(a.corpus) if a.corpus else R.corpora(a.cases, 80, 0)
    with E._quiet_fp():  # (as the oracles run: numpy's FP errors ignored)
        rows = measure(corpus)
    keys = ["reference", "jacobian", "finite-differences", "torch", "compare", "floor_alone", "floor_back_to_back",
            "check"]
    out = {k: R.ratios(rows, k, "gradcheck") for k in keys}
    print(f"{len(rows)} cases with all four witnesses; median per case of time / gradcheck's time (cases)\n")
    print("| / gradcheck | all (default corpus) | n<=10 | n<=100 | n<=1000 |\n|---|---|---|---|---|")
    for k in keys:
        cells = [f"{out[k][b]['median']:.3f} ({out[k][b]['cases']})" if b in out[k] and out[k][b]["median"] is not None
                 else "-" for b in ("all", "n<=10", "n<=100", "n<=1000")]
        print(f"| {k} | " + " | ".join(cells) + " |")
    small = [r for r in rows if r["n"] <= 10]
    if small:
        print("\nn <= 10, median seconds: " + ", ".join(
            f"{k} {statistics.median(r[k] for r in small) * 1e6:.0f} us" for k in keys + ["gradcheck"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ratios": out, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
