"""Where the reference and jacobian oracles spend their time on small cases, and what a lean engine path could save.

    python benchmarks/reference_split.py [--corpus FILE] [--max-n 10] [--json FILE]

For each case of ``run.py``'s corpus with at most ``--max-n`` inputs (default corpus: ``run.py``'s seed-0 draw),
in CPU time, the smallest of repeated warm calls (hot caches: the oracle alone, as ``run.py``'s per-oracle rows):

* ``reference``: the oracle (``ReferenceOracle.vjp``);
* ``build``: its graph (``build_engine_graph``: leaf tensors and one ``engine.apply`` per node, Nodes recorded);
* ``forward numerics``: the same nodes' ``spec.forward`` on arrays (no engine): what ``build`` must compute;
* ``without rules``: the oracle with every VJP rule replaced by its recorded answer (seeds, plan, the backward
  loop, ``_reduce_to``, accumulation, read-out: the engine's backward without the rules);
* ``rules alone``: each VJP rule of the case called on its own with grad mode off (its own Python and the
  engine ops it applies);
* ``lean-apply bound``: the oracle with ``engine.apply`` replaced, for grad-mode-off calls (every op inside a VJP
  rule when ``create_graph=False``), by a minimal apply with no input conversion check, no dtype promotion
  check, no view copy: ``Tensor(spec.forward(*arrays, **canonical params))``.  Not shipped (it drops checks
  torch's semantics need); it bounds what short-circuiting apply on that path can save.  Cases where it
  changes any gradient bit are left out of its column (and counted).
* ``jacobian``, its ``forward`` (``Case._evaluate``, shared with FD inside ``gs.check``) and ``propagation``
  (the JVP rules through ``_propagate``).

Printed: medians per case (us) and, for each piece, its share of the oracle summed over the cases.

Since the reference oracle replays its structure's plan (``gradspec/oracles/_reference_plan.py``), its row is
that path, while ``build``, ``without rules`` (which replaces ``engine._call_vjp``: the oracle then runs the
engine itself) and ``lean-apply bound`` describe the engine's general path.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
import run as R  # benchmarks/run.py: the corpus

import gradspec as gs
from gradspec import engine as E
from gradspec.oracles import jacobian as J
from gradspec.oracles.reference import build_engine_graph

CLOCK = time.process_time


def best(fn, reps: int = 15) -> float:
    fn()
    out = []
    for _ in range(reps):
        t = CLOCK()
        fn()
        out.append(CLOCK() - t)
    return min(out)


def quiet(fn):
    def run():
        try:
            fn()
        except Exception:  # noqa: BLE001 - an oracle refusing a case costs what it costs
            pass
    return run


def lean_apply(full):
    canonical = E._canonical

    def apply(spec, inputs, params):
        if E._GRAD_ENABLED or spec.user:
            return full(spec, inputs, params)
        for x in inputs:
            if type(x) is not E.Tensor:
                return full(spec, inputs, params)
        arrays = [t.data for t in inputs]
        if spec.normalize is not None:
            params = canonical(spec, [a.shape for a in arrays], params)
        data = spec.forward(*arrays, **params)
        return E.Tensor(data if type(data) is np.ndarray else np.asarray(data))

    return apply


def grads_bytes(oracle, case):
    try:
        return {k: None if v is None else (v.dtype.str, v.shape, v.tobytes()) for k, v in oracle.vjp(case).items()}
    except Exception as e:  # noqa: BLE001
        return repr(e)


def reference_row(oracle, case) -> dict:
    row = {"reference": best(quiet(lambda: oracle.vjp(case)))}

    def build():
        with E._quiet_fp():
            build_engine_graph(case)

    row["build"] = best(build)
    specs = [case.spec(n.op) for n in case.nodes]

    def numerics():
        with E._quiet_fp():
            env = {l.name: l.value for l in case.leaves}
            for n, spec in zip(case.nodes, specs):
                env[n.name] = spec.forward(*[env[i] for i in n.inputs], **n.params)

    row["forward numerics"] = best(quiet(numerics))
    original = E._call_vjp
    answers, calls = [], []

    def record(node, g, create_graph):
        grads = original(node, g, create_graph)
        answers.append(grads)
        calls.append((node.spec, g, node.inputs, node.out, dict(node.params)))
        return grads

    E._call_vjp = record
    quiet(lambda: oracle.vjp(case))()
    E._call_vjp = original

    def replayed():
        it = iter(answers)
        E._call_vjp = lambda node, g, create_graph: list(next(it))
        try:
            quiet(lambda: oracle.vjp(case))()
        finally:
            E._call_vjp = original

    row["without rules"] = best(replayed)

    def rules():
        prev, E._GRAD_ENABLED = E._GRAD_ENABLED, False
        try:
            with E._quiet_fp():
                for spec, g, inputs, out, params in calls:
                    spec.vjp(g, *inputs, out=out, **params)
        finally:
            E._GRAD_ENABLED = prev

    row["rules alone"] = best(quiet(rules))
    full = E.apply
    want = grads_bytes(oracle, case)
    E.apply = lean_apply(full)
    try:
        if grads_bytes(oracle, case) == want:
            row["lean-apply bound"] = best(quiet(lambda: oracle.vjp(case)))
    finally:
        E.apply = full
    return row


def jacobian_row(oracle, case) -> dict:
    row = {"jacobian": best(quiet(lambda: oracle.vjp(case)))}

    def forward():
        with E._quiet_fp():
            case._evaluate(None, 0)

    row["jacobian forward"] = best(forward)
    values = case._evaluate(None, 0)
    n = case.n_inputs

    def propagate():
        with E._quiet_fp():
            J._propagate(case, values, J._identity_block(case, 0, n), n)

    row["jacobian propagation"] = best(quiet(propagate))
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=None, help="a run.py --save-corpus file (default: run.py's seed-0 draw)")
    p.add_argument("--max-n", type=int, default=10, help="cases with at most this many inputs (default 10)")
    p.add_argument("--json", default=None, help="write the per-case rows here")
    a = p.parse_args(argv)
    corpus = R.load_corpus(a.corpus) if a.corpus else R.corpora(150, 0, 0)
    cases = [c for source, c in corpus if source == "default" and 0 < c.n_inputs <= a.max_n]
    ref, jac = gs.oracles.get("reference"), gs.oracles.get("jacobian")
    rows = []
    for case in cases:
        row = {}
        if ref.applies(case)[0]:
            row.update(reference_row(ref, case))
        if jac.applies(case)[0]:
            row.update(jacobian_row(jac, case))
        rows.append(row)
    print(f"{len(cases)} cases with n <= {a.max_n}; CPU time, best of 15 warm calls each; us")
    print("\n| piece | median per case | share of its oracle (sums) | cases |\n|---|---|---|---|")
    for oracle, keys in (("reference", ["reference", "build", "forward numerics", "without rules", "rules alone",
                                        "lean-apply bound"]),
                         ("jacobian", ["jacobian", "jacobian forward", "jacobian propagation"])):
        for k in keys:
            have = [r for r in rows if k in r and oracle in r]
            if not have:
                continue
            share = sum(r[k] for r in have) / sum(r[oracle] for r in have)
            print(f"| {k} | {statistics.median(r[k] for r in have) * 1e6:.1f} | {share:.3f} | {len(have)} |")
    left_out = sum(1 for r in rows if "reference" in r and "lean-apply bound" not in r)
    print(f"\n(lean-apply bound: {left_out} case(s) left out where it changed a gradient bit or raised)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
