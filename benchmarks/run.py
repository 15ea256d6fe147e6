"""Cost of gradspec's oracles, side by side with torch.autograd.gradcheck, in one run.

    python benchmarks/run.py [--quick] [--json FILE] [--cases N] [--seed S]

The graphs are the random cases of ``gradspec.strategies.cases()`` (a fixed, seeded sample:
the same corpus the false-alarm tests use), not a hand-picked set; that generator almost never
draws more than 100 inputs, so the n <= 1000 bucket comes from a second seeded sample of it with
larger leaves (``MID_STRATEGY``), which fills only that bucket.  For every case:

* each oracle's time (reference, finite-differences, jacobian, torch-cpu) and all CPU oracles
  together (``gs.check`` with those four, comparisons included: the number the goal is about),
  and the four run back to back without ``check`` (what the comparisons add), and ``check`` with
  each oracle's answer replayed (``check``'s own cost: applicability and kink tests, comparisons, rules);
* ``torch.autograd.gradcheck`` (default, slow mode: full numerical and analytical Jacobians)
  on the same graph written as a torch function of the differentiable leaves, in float64;
* one batched forward of the graph at 2n points (what plain central differences must evaluate)
  vs the FD oracle (3n + 1 points, error estimate and kink-reach check included).

Reported: medians of per-case ratios, overall and per input-size bucket (n <= 10, <= 100,
<= 1000), the fixed cost of building the torch graph, a scaling table in n for full vs
directional finite differences, and (not with --quick) how much slower the oracles run back
to back than alone.  Times are medians of repeated runs after one
untimed warm-up call (each timed run repeated until it has taken at least 20 ms in total), in CPU
seconds of this process (``--clock wall`` for wall time; ``--no-extras`` skips the last two tables).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import numpy as np

import gradspec as gs
from gradspec._private.sampling import sample
from gradspec.oracles.fd import fd_directional, fd_gradient
from gradspec.oracles.torch_oracle import build_torch_graph

CPU_ORACLES = ["reference", "finite-differences", "jacobian", "torch-cpu"]


# The clock of every timing: CPU time of this process by default (the benchmark machine is shared:
# wall time there mostly measures the other processes; a run at load 7.6 on 2 cores gave wall-clock
# ratios 30% off the CPU-time ones), wall time with --clock wall.
CLOCK = time.process_time


def timeit(fn, min_total=0.02, max_reps=200):
    fn()  # warm-up, not timed: first calls pay for imports, lazy initialisation and fresh memory pages
    reps, total, times = 0, 0.0, []
    while total < min_total and reps < max_reps:
        t = CLOCK()
        fn()
        dt = CLOCK() - t
        times.append(dt)
        total += dt
        reps += 1
    return statistics.median(times)


def torch_function(case):
    import torch

    leaves = case.grad_leaves()
    # Constant leaves are built once, outside f: gradcheck is charged only for the graph itself.
    grad_names = {l.name for l in leaves}
    constants = {
        l.name: torch.from_numpy(np.array(l.value, dtype=np.float64 if l.value.dtype.kind == "f" else l.value.dtype))
        for l in case.leaves if l.name not in grad_names
    }

    def f(*xs):
        env = dict(constants)
        for l, x in zip(leaves, xs):
            env[l.name] = x
        for n in case.nodes:
            env[n.name] = gs.ops.get(n.op).torch(*[env[i] for i in n.inputs], **n.params)
        return tuple(env[r] for r in case.roots)

    inputs = tuple(torch.from_numpy(np.array(l.value, dtype=np.float64)).requires_grad_(True) for l in leaves)
    return f, inputs


def batched_forward_2n(case):
    leaves = case.grad_leaves()
    n = case.n_inputs
    vals = {l.name: np.asarray(l.value, dtype=np.float64) if l.value.dtype.kind == "f" else l.value for l in case.leaves}
    batches = {k: np.broadcast_to(v, (2 * n,) + np.shape(v)) for k, v in vals.items()}
    for l in leaves:
        batches[l.name] = np.array(batches[l.name])  # perturbed copies are materialized, as FD must
    return lambda: case.evaluate(batches, nbatch=1)


def plain_central_differences(case):
    """The least any batched numpy FD must do: build the 2n points x +- h e_j, one batched forward,
    contract with the seeds, (s+ - s-) / 2h.  No error estimate, no kink check, no centre: the
    floor of the FD-vs-forward ratio, measured on the same graphs.  The forward is called the way
    the FD oracle calls it (the nodes' op specs from the op table, one errstate around the whole),
    so the ratio measures FD's extra work, not a cheaper entry into the same forward."""
    from gradspec.oracles import fd
    from gradspec.spec import registry

    leaves, x64, n = case.grad_leaves(), fd._as64(case), case.n_inputs
    flat = np.concatenate([x64[l.name].ravel() for l in leaves])
    table = registry.all_specs()

    def run():
        with np.errstate(all="ignore"):
            specs = [table.get(node.op) or case.spec(node.op) for node in case.nodes]
            h = fd.STEP * np.maximum(1.0, np.abs(flat))
            X = np.empty((2 * n, n))
            X[:] = flat
            rows = np.arange(2 * n)
            X[rows, rows % n] += np.concatenate([h, -h])
            env = case._forward(fd._leaf_batches(case, x64, leaves, X), 1, specs)
            seeds = case.seed_arrays({r: env[r][0] for r in case.roots})
            s = sum(env[r].reshape(2 * n, -1).astype(np.float64) @ np.ravel(sd).astype(np.float64)
                    for r, sd in zip(case.roots, seeds))
            return (s[:n] - s[n:]) / (2 * h)

    return run


def replay_oracles(case):
    """The four CPU oracles, each answering ``case`` with its result computed once (gs.check's own cost)."""
    import copy

    out = []
    for name in CPU_ORACLES:
        o = gs.oracles.get(name)
        fake = copy.copy(o)  # (same class: check() treats it as that oracle)
        try:
            if o.kind == "fd":
                r = o.result(case)
                fake.result = lambda case, r=r, **kw: r
            elif o.name == "jacobian":
                j = o.jacobian(case)
                fake.jacobian = lambda case, j=j: j
            else:
                v = o.vjp(case)
                fake.vjp = lambda case, v=v: v
        except Exception as e:  # an oracle that refuses the case: its refusal replayed too (running it again inside
            def refuse(*args, e=e, **kw):  # check() counted the oracle's work before it refused as check's own)
                raise e.with_traceback(None)
            setattr(fake, "result" if o.kind == "fd" else "jacobian" if o.name == "jacobian" else "vjp", refuse)
        out.append(fake)
    return out


def bucket(n):
    return "n<=10" if n <= 10 else "n<=100" if n <= 100 else "n<=1000" if n <= 1000 else "n>1000"


# The default strategy draws almost no graph above 100 inputs, so the n <= 1000 bucket comes from a
# second sample of the same generator with larger leaves (still random cases, not hand-picked); it
# only fills that bucket: the overall ratios are those of the default corpus alone.
MID_STRATEGY = dict(min_dims=2, min_side=4, max_side=12, max_elements=1000)


def corpora(n_cases, n_mid, seed):
    default = [c for c in sample(gs.strategies.cases(), n_cases, seed) if c.n_inputs > 0]
    mid = [c for c in sample(gs.strategies.cases(**MID_STRATEGY), n_mid, seed) if 100 < c.n_inputs <= 1000] if n_mid else []
    return [("default", c) for c in default] + [("mid", c) for c in mid]


def save_corpus(path, corpus):
    with open(path, "w") as f:
        json.dump([{"corpus": source, "case": json.loads(case.to_json())} for source, case in corpus], f)


def load_corpus(path):
    with open(path) as f:
        return [(item["corpus"], gs.Case.from_json(item["case"])) for item in json.load(f)]


def run(corpus, quick):
    import torch

    rows = []
    for source, case in corpus:
        row = {"corpus": source, "n": case.n_inputs, "nodes": len(case.nodes), "ops": [n.op for n in case.nodes]}
        v = gs.check(case, oracles=CPU_ORACLES)
        row["ok"] = v.ok
        usable = [o for o in CPU_ORACLES if o in v.results]
        for o in usable:
            orc = gs.oracles.get(o)
            row[o] = timeit(lambda orc=orc: orc.vjp(case))
        row["oracles_alone_sum"] = sum(row[o] for o in usable)
        row["all_cpu_oracles"] = timeit(lambda: gs.check(case, oracles=CPU_ORACLES))
        # The same oracles back to back without check()'s applicability tests and comparisons:
        # what the comparisons cost, and how much slower code runs interleaved than alone.
        orcs = [gs.oracles.get(o) for o in usable]
        row["oracles_back_to_back"] = timeit(lambda: [o.vjp(case) for o in orcs])
        # check() with each oracle's answer replayed (computed once, returned at once): what the
        # applicability tests, kink checks, pair comparisons and verdict rules cost by themselves.
        replayed = replay_oracles(case)
        row["check_oracles_replayed"] = timeit(lambda: gs.check(case, oracles=replayed))
        f, inputs = torch_function(case)
        try:
            row["gradcheck"] = timeit(lambda: torch.autograd.gradcheck(f, inputs, raise_exception=False))
        except Exception as e:  # gradcheck cannot run on every graph (e.g. outputs without grad)
            row["gradcheck_error"] = f"{type(e).__name__}: {e}"[:200]
        row["batched_forward_2n"] = timeit(batched_forward_2n(case))
        if "finite-differences" in v.results:
            # FD's error bound is computed when first read: "fd" is FD as gs.check paid for it on this case
            # (deferred where the check left the bound unread), "fd_full" with the bound read
            full = timeit(lambda: dict(fd_gradient(case).error))
            row["fd"] = timeit(lambda: fd_gradient(case)) if getattr(v.fd_error, "pending", False) else full
            row["fd_full"] = full
            row["fd_plain"] = timeit(plain_central_differences(case))
        row["torch_graph_build"] = timeit(lambda: build_torch_graph(case))
        rows.append(row)
    return rows


def ratios(rows, num, den):
    out = {}
    groups = {"all": [r for r in rows if r.get("corpus", "default") == "default"]}
    for r in rows:
        groups.setdefault(bucket(r["n"]), []).append(r)
    for name, rs in groups.items():
        vals = [r[num] / r[den] for r in rs if num in r and den in r and r[den] > 0]
        out[name] = {"median": statistics.median(vals) if vals else None, "cases": len(vals)}
    return out


def scaling(quick):
    sizes = [10, 100, 500] if quick else [10, 100, 170, 500, 1000, 2000, 4000]  # per leaf: n = 2 x size
    out = []
    rng = np.random.default_rng(0)
    for n in sizes:
        x = rng.uniform(0.5, 1.5, n)
        case = gs.Case.build({"x": x, "w": rng.standard_normal(n)},
                             [("a", "mul", ["x", "w"], {}), ("b", "tanh", ["a"], {}), ("y", "sum", ["b"], {})], ["y"])
        k = 16
        dirs = {l.name: rng.standard_normal((k,) + l.shape) / np.sqrt(2 * n) for l in case.grad_leaves()}
        # gs.check on the same function with a vector root (its seed drawn once): n columns and n / 2
        # rows of J for the jacobian oracle, full FD up to 1000 inputs, directional above.
        vec = gs.Case.build({"x": x, "w": case.leaves[1].value}, [("a", "mul", ["x", "w"], {}), ("b", "tanh", ["a"], {})],
                            ["b"], [rng.standard_normal(n)])
        out.append({"n": case.n_inputs, "fd_full": timeit(lambda: fd_gradient(case)),
                    "fd_directional_16": timeit(lambda: fd_directional(case, dirs)),
                    "check_vector_root": timeit(lambda: gs.check(vec, oracles=CPU_ORACLES))})
    return out


def interleaving(cases):
    """Why the oracles cost more back to back than alone: per case, (calls back to back) / (sum of solo timings)."""
    corpus = [c for source, c in cases if source == "default" and 0 < c.n_inputs <= 10][:60]
    R, F, J, T = [gs.oracles.get(o) for o in CPU_ORACLES]
    groups = {"same oracle twice (reference, reference)": [R, R], "the three numpy oracles": [R, F, J],
              "all four": [R, F, J, T]}
    out = {k: [] for k in groups}
    # The cause: the caches.  A pass over 8 MB of memory (which evicts this machine's 2 MiB L2 and much
    # more) between two calls slows the next call as much as another oracle does; pure-Python work in
    # between does not (measured: the reference oracle 83 -> 175 us after the sweep, 86 us after JSON
    # work, 101 us after the torch oracle).  Four implementations of the gradient (engine, numpy
    # stencils, JVP rules, torch's dispatcher and autograd) do not fit the caches together.  Not work
    # (session 13): back to back the calls make the very Python calls they make alone (cProfile's
    # counts), and neither the collector, torch's thread count nor page faults change the ratio; each
    # oracle runs 1.3-1.9x slower between the others than alone (torch the most).
    sweep = np.ones(2**20)
    evicted = "reference after reading 8 MB (evicts the caches)"
    out[evicted] = []
    for case in corpus:
        try:
            solo = {o.name: timeit(lambda o=o: o.vjp(case)) for o in (R, F, J, T)}
        except Exception:  # an oracle that refuses this case
            continue
        for k, seq in groups.items():
            out[k].append(timeit(lambda seq=seq: [o.vjp(case) for o in seq]) / sum(solo[o.name] for o in seq))
        out[evicted].append((timeit(lambda: (sweep.sum(), R.vjp(case))) - timeit(sweep.sum)) / solo[R.name])
    return {k: statistics.median(v) for k, v in out.items() if v}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="30 cases and a short scaling table")
    p.add_argument("--cases", type=int, default=None)
    p.add_argument("--mid-cases", type=int, default=None,
                   help="draws from the larger-leaf strategy for the n <= 1000 bucket (default 80, --quick 20)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the numbers here")
    # Hypothesis mixes constants found in the project's own source into what it draws, so the same seed
    # gives other graphs once the code changes: to compare two versions, save the corpus with one and
    # load it with the other.
    p.add_argument("--save-corpus", default=None, metavar="FILE", help="write the cases used (JSON) here")
    p.add_argument("--corpus", default=None, metavar="FILE", help="use the cases of a --save-corpus file instead of sampling")
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                   help="cpu: this process's CPU time (default; the machine is shared), wall: time.perf_counter")
    p.add_argument("--no-extras", action="store_true", help="skip the FD scaling and interleaving tables")
    a = p.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if a.clock == "cpu" else time.perf_counter
    n = a.cases or (30 if a.quick else 150)
    t0 = time.time()
    if a.corpus:
        corpus = load_corpus(a.corpus)
    else:
        corpus = corpora(n, a.mid_cases if a.mid_cases is not None else (20 if a.quick else 80), a.seed)
    if a.save_corpus:
        save_corpus(a.save_corpus, corpus)
    rows = run(corpus, a.quick)
    res = {
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(), "processor": platform.processor(),
                    "numpy": np.__version__, "torch": __import__("torch").__version__},
        "cases": sum(r["corpus"] == "default" for r in rows),
        "mid_cases": sum(r["corpus"] == "mid" for r in rows),
        "mid_strategy": MID_STRATEGY,
        "false_alarms": sum(not r["ok"] for r in rows),
        "ratio_all_cpu_oracles_vs_gradcheck": ratios(rows, "all_cpu_oracles", "gradcheck")["all"]["median"],
        "ratio_fd_vs_batched_forward": ratios(rows, "fd", "batched_forward_2n")["all"]["median"],
        "per_bucket": {
            "all_cpu_oracles_vs_gradcheck": ratios(rows, "all_cpu_oracles", "gradcheck"),
            "oracles_back_to_back_vs_gradcheck": ratios(rows, "oracles_back_to_back", "gradcheck"),
            "check_with_oracles_replayed_vs_gradcheck": ratios(rows, "check_oracles_replayed", "gradcheck"),
            "oracles_alone_sum_vs_gradcheck": ratios(rows, "oracles_alone_sum", "gradcheck"),
            "fd_vs_batched_forward": ratios(rows, "fd", "batched_forward_2n"),
            "plain_central_differences_vs_batched_forward": ratios(rows, "fd_plain", "batched_forward_2n"),
            # issue 15's FD goal (<= 2): the FD oracle against plain central differences on the same graph
            "fd_vs_plain_central_differences": ratios(rows, "fd", "fd_plain"),
            "fd_full_vs_plain_central_differences": ratios(rows, "fd_full", "fd_plain"),
            **{f"{o}_vs_gradcheck": ratios(rows, o, "gradcheck") for o in CPU_ORACLES},
        },
        "median_seconds": {k: statistics.median([r[k] for r in rows if k in r and r["corpus"] == "default"]) for k in
                           CPU_ORACLES + ["all_cpu_oracles", "oracles_back_to_back", "check_oracles_replayed", "gradcheck", "fd",
                                          "batched_forward_2n", "torch_graph_build"]
                           if any(k in r and r["corpus"] == "default" for r in rows)},
        "clock": a.clock,
        "scaling": [] if a.no_extras else scaling(a.quick),
        "interleaving_back_to_back_vs_solo_sum": {} if a.quick or a.no_extras else interleaving(corpus),
        "wall_seconds": round(time.time() - t0, 1),
        "rows": rows,
    }
    print(f"{res['cases']} cases + {res['mid_cases']} with 100 < n <= 1000 from cases(**{MID_STRATEGY}) "
          f"(false alarms: {res['false_alarms']}), {res['wall_seconds']} s")
    print(f"ratio all CPU oracles / gradcheck (median of per-case ratios): {res['ratio_all_cpu_oracles_vs_gradcheck']:.3f}")
    print(f"ratio FD / one batched forward of 2n points: {res['ratio_fd_vs_batched_forward']:.3f}")
    print("\n| ratio (median per case) | all (default corpus) | n<=10 | n<=100 | n<=1000 |\n|---|---|---|---|---|")
    for name, d in res["per_bucket"].items():
        cells = [f"{d[b]['median']:.3f} ({d[b]['cases']})" if b in d and d[b]["median"] is not None else "-"
                 for b in ("all", "n<=10", "n<=100", "n<=1000")]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\n| median seconds per case | |\n|---|---|")
    for k, v in res["median_seconds"].items():
        print(f"| {k} | {v * 1e3:.2f} ms |")
    print("\n| n | FD full | FD directional (16 dirs) | gs.check, 4 CPU oracles, vector root |\n|---|---|---|---|")
    for s in res["scaling"]:
        print(f"| {s['n']} | {s['fd_full'] * 1e3:.2f} ms | {s['fd_directional_16'] * 1e3:.2f} ms | {s['check_vector_root'] * 1e3:.2f} ms |")
    if res["interleaving_back_to_back_vs_solo_sum"]:
        print("\n| oracles called back to back, n <= 10 | time / sum of solo timings (median per case) |\n|---|---|")
        for k, v in res["interleaving_back_to_back_vs_solo_sum"].items():
            print(f"| {k} | {v:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
