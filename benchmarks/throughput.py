"""Fuzz throughput against a bare Hypothesis loop, case distribution and time to a shrunk report.

    python benchmarks/throughput.py [--before DIR] [--cases N] [--rounds R] [--shrink-seeds 3,4,5,6] [--json FILE]

``--before DIR``: a checkout of older gradspec code (``git worktree add DIR <commit>``) measured in the
same run, each version in its own subprocesses (``PYTHONPATH`` points at the version's root), rounds
alternating between versions so both see the same machine.

* **rate**: ``gradspec fuzz --engine reference --workers 1`` (all CPU oracles) verified cases per CPU
  second, and in the same process a bare Hypothesis loop drawing two float64 arrays of
  ``mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4)`` with floats in [-10, 10];
  the ratio of the two.  CPU time (``time.process_time``), not wall time: the machine is shared and
  wall time mostly measures the other tenants.  A few cases of every op and a 20-case campaign warm
  the caches first.  Also the same bare loop in a process of its own (numpy and Hypothesis only, see
  ``worker_bare``), and the ratio against it: the stricter yardstick.
* **split**: the CPU time of a campaign spent drawing cases (inside the strategy), checking them
  (``gs.check`` and its guard, and the oracle answers a group's sets get before their checks:
  ``gradspec.fuzz.prefetch``) and the rest (Hypothesis' engine, bookkeeping, reports); within them,
  the graph build per group, each oracle's own call and its ``applies``, and the in-flight file.
* **distribution**: of the cases ``gradspec fuzz`` really checks (campaigns of ``--cases`` cases, the
  rate's budget, seeds 7, 8, ... until ``--sample`` cases are in; how many of them are distinct:
  Hypothesis re-runs choice sequences whose tail it had to fill with the simplest choices, i.e. the
  same case again; and how many graphs they came from: each graph is checked with several value
  sets, more of them in longer campaigns), and of ``gradspec.strategies.cases()`` sampled: ops per
  case, leaves, ranks, float elements, broadcasting, fan-out, x*x, non-ones seeds, float32 / mixed,
  multi-root, exact tie/kink cases.  Graph-level measures vary with the few hundred graphs a sample
  holds (a mean over 1,000 cases from ~100 graphs moves by ~10%): use a large ``--sample``.
* **shrink**: planted bugs of ``tests/_planted.py`` under ``gradspec fuzz`` (each on every seed of
  ``--shrink-seeds``): wall seconds from the first failing check to the first report folder written
  (shrinking and writing), median over the runs; how many runs found their bug, the checks and CPU seconds
  to the first failure, and how small the shrunk reports are (nodes, leaves, float elements, values other
  than the simple ones the draw shrinks towards and other than 1.0, seeds not all ones): a change to the
  draws must not make shrinking slower or its results bigger.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SHRINK_BUGS = {  # id -> gradspec fuzz arguments (value bugs fuzz must find and shrink)
    "op-broadcast-first-slice": ["--ops", "tests._planted:pl_mul_slice,add,exp", "--allow-import", "tests"],
    "op-seed-mean": ["--ops", "tests._planted:pl_sq_seedmean,add,exp", "--allow-import", "tests"],
    "op-normalisation": ["--ops", "tests._planted:pl_mean_norm,add,exp", "--allow-import", "tests"],
    "op-sign-negative": ["--ops", "tests._planted:pl_xabsx_sign,add,exp", "--allow-import", "tests"],
    "engine-seed-ignored": ["--engine", "tests._planted:SeedIgnored", "--ops", "add,mul,exp,sum"],
    "engine-sum-relative-1e-6": ["--engine", "tests._planted:SumScaled", "--ops", "add,mul,exp,sum"],
}


# ---------------------------------------------------------------------------------------------
# workers (run in a subprocess with the version under test on PYTHONPATH)
# ---------------------------------------------------------------------------------------------


def _bare_rate(n: int) -> float:
    import numpy as np
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    @st.composite
    def two_arrays(draw):
        bs = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
        return [draw(hnp.arrays(np.float64, s, elements=st.floats(-10, 10))) for s in bs.input_shapes]

    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(two_arrays())
    def loop(arrays):
        pass

    t0 = time.process_time()
    loop()
    return n / (time.process_time() - t0)


def _fuzz(n: int, seed: int, extra=()) -> tuple[dict, float]:
    from gradspec import cli

    with tempfile.TemporaryDirectory() as d:
        t0 = time.process_time()
        with open(os.devnull, "w") as null:
            out, err = sys.stdout, sys.stderr
            sys.stdout = sys.stderr = null
            try:
                cli.main(["fuzz", "--engine", "reference", "--workers", "1", "--max-examples", str(n), "--seed",
                          str(seed), "--report-dir", os.path.join(d, "r"), "-q", *extra])
            finally:
                sys.stdout, sys.stderr = out, err
        cpu = time.process_time() - t0
        with open(os.path.join(d, "r", "summary.json")) as f:
            return json.load(f), cpu


def _warm_ops() -> None:
    """Draw a few cases of every op: the strategies' one-time per-op work (shape templates learnt from
    probes: ~0.4 CPU s for conv1d alone) is paid before timing, in either version."""
    import gradspec as gs
    from gradspec._private.sampling import sample

    for op in gs.ops.names():
        try:
            sample(gs.strategies.cases(ops=[op], max_nodes=2), 3, 0)
        except Exception:  # noqa: BLE001 - an op that cannot be drawn alone
            pass


def worker_rate(n: int, seed: int) -> dict:
    import torch  # noqa: F401

    import gradspec  # noqa: F401 - imports (torch too) before any timing

    _warm_ops()
    _fuzz(20, seed + 1000)  # warm-up: strategy caches, torch's first calls
    bare1 = _bare_rate(n)
    s, cpu = _fuzz(n, seed)
    bare2 = _bare_rate(n)
    bare = (bare1 + bare2) / 2
    rate = s["cases"] / cpu
    return {"bare_per_s": bare, "fuzz_per_s": rate, "ratio": rate / bare, "cases": s["cases"]}


def worker_bare(n: int) -> dict:
    """The bare loop in a process that imports numpy and Hypothesis only.  In the campaign's process the
    same loop runs 10-25% slower, and by an amount that moves with what else is loaded: the cyclic
    collector walks torch's and gradspec's import-time heap (unless frozen), and Hypothesis mixes
    constants from every loaded local module into its draws.  So both are reported."""
    rates = [_bare_rate(n) for _ in range(3)]
    return {"bare_per_s": statistics.median(rates)}


def worker_split(n: int, seed: int) -> dict:
    """CPU time of one campaign spent drawing, checking, and elsewhere."""
    from hypothesis import strategies as st

    from gradspec import strategies

    acc = {"draw": 0.0, "check": 0.0}

    def timed_strategy(orig):
        def make(**kw):
            inner = orig(**kw)

            @st.composite
            def timed(draw):
                t0 = time.process_time()
                try:
                    return draw(inner)
                finally:
                    acc["draw"] += time.process_time() - t0

            return timed()
        return make

    for name in ("cases", "case_groups"):  # case_groups: several value sets per graph (newer code)
        if hasattr(strategies, name):
            setattr(strategies, name, timed_strategy(getattr(strategies, name)))
    orig_check = importlib.import_module("gradspec.check").check

    def timed_check(*a, **k):
        t0 = time.process_time()
        try:
            return orig_check(*a, **k)
        finally:
            acc["check"] += time.process_time() - t0

    for mod in list(sys.modules.values()):  # every module that imported check() by name
        if mod is not None and getattr(mod, "check", None) is orig_check and mod.__name__.startswith("gradspec"):
            mod.check = timed_check
    detail = _time_parts()
    _warm_ops()
    _fuzz(20, seed + 1000)
    acc.update(draw=0.0, check=0.0)
    detail.clear()
    s, cpu = _fuzz(n, seed)
    check = acc["check"] + detail.get(PREFETCH, 0.0)  # (oracle calls made for the checks, ahead of them)
    return {"cpu": cpu, "draw": acc["draw"], "check": check, "other": cpu - acc["draw"] - check,
            "cases": s["cases"], "detail": dict(detail)}


def _time_parts() -> dict:
    """CPU seconds of the pieces inside draw / check / other (filled as the campaign runs): the graph
    build of a group, each oracle's own call (``applies`` apart), the in-flight file.  Found by name and
    skipped where a version lacks them.  The oracles are the registry's objects (``guard`` copies them
    with their instance attributes, so the wrappers set here are the ones its timed copies call)."""
    parts: dict = {}

    def wrap(obj, attr, label):
        orig = getattr(obj, attr, None)
        if not callable(orig):
            return

        def timed(*a, **k):
            t0 = time.process_time()
            try:
                return orig(*a, **k)
            finally:
                parts[label] = parts.get(label, 0.0) + time.process_time() - t0

        setattr(obj, attr, timed)

    graph = sys.modules.get("gradspec.strategies._graph") or importlib.import_module("gradspec.strategies._graph")
    if hasattr(graph, "_Builder"):
        wrap(graph._Builder, "build", "draw: graph build (per group)")
    from gradspec import oracles

    for o in oracles.all_oracles():  # the method gs.check calls on each kind of oracle (one, not nested ones)
        wrap(o, "result" if o.kind == "fd" else "jacobian" if o.name == "jacobian" else "vjp", f"check: {o.name}")
        wrap(o, "applies", f"check: {o.name} applies()")
    try:
        inflight = importlib.import_module("gradspec.fuzz.inflight")
        for meth in ("group", "start", "end"):
            wrap(inflight.Inflight, meth, "other: in-flight file")
    except ImportError:
        pass
    try:  # the group's oracle answers computed before its checks (worker_split counts them as check)
        wrap(importlib.import_module("gradspec.fuzz.prefetch").Prefetch, "run", PREFETCH)
    except ImportError:
        pass
    return parts


PREFETCH = "check: prefetch (each oracle over the group's sets, before their checks)"


def _dist_metrics(cases) -> dict:
    import numpy as np

    m = {k: [] for k in ("ops", "leaves", "elements", "max_rank", "broadcast", "fan_out", "x*x", "non_ones_seed",
                         "float32", "mixed", "multi_root", "tie_kink")}
    for c in cases:
        env = c.evaluate()
        uses: dict = {}
        for nd in c.nodes:
            for i in nd.inputs:
                uses[i] = uses.get(i, 0) + 1
        floats = [l for l in c.leaves if l.value.dtype.kind == "f"]
        dts = {l.value.dtype.name for l in floats}
        m["ops"].append(len(c.nodes))
        m["leaves"].append(len(c.leaves))
        m["elements"].append(sum(l.value.size for l in floats))
        m["max_rank"].append(max(l.value.ndim for l in c.leaves))
        m["broadcast"].append(any(len({np.shape(env[i]) for i in nd.inputs}) > 1 and c.spec(nd.op).broadcasting
                                  for nd in c.nodes))
        m["fan_out"].append(any(u > 1 for u in uses.values()))
        m["x*x"].append(any(len(set(nd.inputs)) < len(nd.inputs) for nd in c.nodes))
        m["non_ones_seed"].append(any(s is not None and not np.all(s == 1) for s in c.seeds))
        m["float32"].append(dts == {"float32"})
        m["mixed"].append(len(dts) > 1)
        m["multi_root"].append(len(c.roots) > 1)
        hit = False
        for nd in c.nodes:  # exactly on a kink/tie (the same test as gradspec._private.kinks, inlined for old code)
            spec = c.spec(nd.op)
            try:
                with np.errstate(all="ignore"):
                    hit |= spec.singular_distance([env[i] for i in nd.inputs], nd.params) == 0
            except Exception:  # noqa: BLE001
                pass
        m["tie_kink"].append(hit)
    out = {k: float(np.mean(v)) for k, v in m.items()}
    out["rank_histogram"] = {int(r): int(k) for r, k in zip(*np.unique(m["max_rank"], return_counts=True))}
    out["cases"] = len(cases)
    return out


def worker_distribution(n: int, seed: int) -> dict:
    import gradspec as gs
    from gradspec._private.sampling import sample

    return _dist_metrics(sample(gs.strategies.cases(), n, seed))


def worker_fuzz_distribution(n: int, seed: int, budget: int | None = None) -> dict:
    """The cases ``gradspec fuzz`` really checks (generate mode), from campaigns of ``budget`` cases (the
    rate's budget: how many value sets a graph gets depends on it) with seeds ``seed``, ``seed + 1``, ...
    until ``n`` cases are in; how many of them repeat a case checked before in the same run (the same
    graph, values and seeds), and how many graphs (distinct structures: ops, wiring, leaf shapes and
    dtypes, roots) they came from."""
    import hashlib

    from gradspec import fuzz

    checked: list = []
    mod = sys.modules[fuzz.run_campaign.__module__]
    orig = mod._Campaign._evaluate

    def evaluate(self, case, mode):
        if mode == "generate":
            checked.append(case)
        return orig(self, case, mode)

    mod._Campaign._evaluate = evaluate
    keys, graphs = set(), set()
    k = 0
    while len(checked) < n:
        start = len(checked)
        _fuzz(budget or n, seed + k)
        k += 1
        if len(checked) == start:
            break
        run = checked[start:]
        keys |= {(k, hashlib.sha1(c.to_json(indent=None).encode()).hexdigest()) for c in run}
        graphs |= {(k, _structure(c)) for c in run}
    out = _dist_metrics(checked)
    out["unique"] = len(keys)
    out["graphs"] = len(graphs)
    out["budget"] = budget or n
    return out


def _structure(case) -> str:
    """A case's graph without its values and seeds (what the value sets of one group share)."""
    return json.dumps([[(l.name, list(l.value.shape), l.value.dtype.name, l.requires_grad) for l in case.leaves],
                       [(nd.name, nd.op, list(nd.inputs), repr(nd.params)) for nd in case.nodes], list(case.roots)])


def worker_shrink(bug: str, seed: int) -> dict:

    first = []
    checks = [0]
    orig_check = importlib.import_module("gradspec.check").check

    def watch(*a, **k):
        v = orig_check(*a, **k)
        if not first:
            checks[0] += 1
        if v.discrepancies and not first:
            first.append((time.time(), time.process_time()))
        return v

    for mod in list(sys.modules.values()):
        if mod is not None and getattr(mod, "check", None) is orig_check and mod.__name__.startswith("gradspec"):
            mod.check = watch
    import gradspec.fuzz  # noqa: F401 - the campaign class, found by its methods in either layout

    reported = []
    for name, mod in list(sys.modules.items()):
        if not name.startswith("gradspec.fuzz") or mod is None:
            continue
        for cls in [c for c in vars(mod).values() if isinstance(c, type) and c.__module__ == name]:
            if hasattr(cls, "record") and (hasattr(cls, "one") or hasattr(cls, "_evaluate")):  # older: one()
                orig_record = cls.record

                def record(self, *a, _orig=orig_record, **k):
                    out = _orig(self, *a, **k)
                    if not reported:
                        reported.append((time.time(), time.process_time()))
                    return out

                cls.record = record
    with tempfile.TemporaryDirectory() as d:
        rd = os.path.join(d, "r")
        from gradspec import cli

        args = list(SHRINK_BUGS[bug])
        if "--allow-import" not in open(cli.__file__).read() and "--allow-import" in args:  # older code
            i = args.index("--allow-import")
            del args[i:i + 2]

        t0, c0 = time.time(), time.process_time()
        with open(os.devnull, "w") as null:
            out, err = sys.stdout, sys.stderr
            sys.stdout = sys.stderr = null
            try:
                rc = cli.main(["fuzz", "--max-examples", "400", "--seed", str(seed), "--report-dir", rd, "-q",
                               "--oracles", "reference,jacobian,finite-differences", *args])
            finally:
                sys.stdout, sys.stderr = out, err
        t1 = time.time()
        with open(os.path.join(rd, "summary.json")) as f:
            summ = json.load(f)
        shrunk = [_shrunk_size(os.path.join(rd, d, "case.json")) for d in sorted(os.listdir(rd))
                  if os.path.isfile(os.path.join(rd, d, "case.json"))]
    found = bool(first) and bool(reported)
    return {"rc": rc, "found": found, "cases": summ["cases"], "run_seconds": t1 - t0,
            "to_first_failure": (first[0][0] - t0) if first else None,
            "to_first_failure_cpu": (first[0][1] - c0) if first else None, "shrunk": shrunk,
            "first_cases": checks[0] if first else None,
            "first_failure_to_report": (reported[0][0] - first[0][0]) if found else None,
            "first_failure_to_report_cpu": (reported[0][1] - first[0][1]) if found else None,
            "shrink_runs": summ.get("shrink_runs"), "reports": summ["discrepancies"]}


def _shrunk_size(path: str) -> dict:
    """How small a reported (shrunk) case is: nodes, leaves, float elements, elements other than the
    simple values the draw shrinks towards (``values.NICE``) and other than 1.0, seeds not all ones.
    Read from the case file's JSON as data (its user ops are not imported)."""
    nice = (1.0, 0.0, -1.0, 2.0, 0.5, -0.5, -2.0, 3.0, -3.0, 0.25, 10.0, -10.0, 1e-3, -1e-3, 1e3, -1e3)
    with open(path) as f:
        p = json.load(f)
    vals = [float.fromhex(x) if isinstance(x, str) else float(x) for l in p["leaves"]
            if l["value"]["dtype"].startswith("float") for x in l["value"]["data"]]
    seeds = [s for s in p.get("seeds", []) if s is not None]
    return {"nodes": len(p["nodes"]), "leaves": len(p["leaves"]), "elements": len(vals),
            "non_simple": sum(v not in nice for v in vals), "non_one": sum(v != 1.0 for v in vals),
            "non_ones_seeds": sum(any((float.fromhex(x) if isinstance(x, str) else float(x)) != 1.0
                                      for x in s["data"]) for s in seeds)}


# ---------------------------------------------------------------------------------------------
# orchestration
# ---------------------------------------------------------------------------------------------


def _run(version_root: str, *args) -> dict:
    env = dict(os.environ, PYTHONPATH=version_root, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", *map(str, args)], cwd=version_root,
                          env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} in {version_root} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _med(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default=None, help="root of an older checkout to measure side by side")
    p.add_argument("--cases", type=int, default=400, help="cases per fuzz rate measurement")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sample", type=int, default=1000, help="cases sampled for the distribution")
    p.add_argument("--no-shrink", action="store_true")
    p.add_argument("--shrink-seeds", default="3", type=lambda t: [int(x) for x in t.split(",")],
                   help="campaign seeds of each planted bug, comma-separated (e.g. 3,4,5,6)")
    p.add_argument("--json", default=None)
    p.add_argument("--worker", nargs="+", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        kind, *rest = a.worker
        fn = {"rate": worker_rate, "bare": worker_bare, "split": worker_split, "dist": worker_distribution, "shrink": worker_shrink,
              "fuzzdist": worker_fuzz_distribution}[kind]
        args = [int(x) if x.isdigit() else x for x in rest]
        print(json.dumps(fn(*args)))
        return 0
    versions = {"after": ROOT}
    if a.before:
        versions["before"] = os.path.abspath(a.before)
    res: dict = {v: {"rate": [], "split": None, "dist": None, "fuzzdist": None, "shrink": {}} for v in versions}
    for r in range(a.rounds):
        for v, root in (versions.items() if r % 2 == 0 else reversed(list(versions.items()))):
            row = _run(root, "rate", a.cases, 100 + r)
            row["bare_clean_per_s"] = _run(root, "bare", a.cases)["bare_per_s"]
            row["ratio_clean"] = row["fuzz_per_s"] / row["bare_clean_per_s"]
            res[v]["rate"].append(row)
            print(f"[round {r}] {v}: fuzz {row['fuzz_per_s']:.0f} cases/CPU-s, bare {row['bare_per_s']:.0f}/CPU-s, "
                  f"ratio {row['ratio']:.2f}; bare alone {row['bare_clean_per_s']:.0f}/CPU-s, ratio "
                  f"{row['ratio_clean']:.2f}", file=sys.stderr)
    for v, root in versions.items():
        res[v]["split"] = _run(root, "split", a.cases, 7)
        res[v]["dist"] = _run(root, "dist", a.sample, 0)
        res[v]["fuzzdist"] = _run(root, "fuzzdist", a.sample, 7, a.cases)
        if not a.no_shrink:
            for bug in SHRINK_BUGS:
                res[v]["shrink"][bug] = []
                for seed in a.shrink_seeds:
                    try:
                        res[v]["shrink"][bug].append(_run(root, "shrink", bug, seed))
                    except RuntimeError as e:
                        res[v]["shrink"][bug].append({"error": str(e)[-300:]})
    for v in versions:
        rates = res[v]["rate"]
        res[v]["summary"] = {"ratio_median": _med(rates, "ratio"), "fuzz_per_cpu_s": _med(rates, "fuzz_per_s"),
                             "bare_per_cpu_s": _med(rates, "bare_per_s"),
                             "ratio_clean_median": _med(rates, "ratio_clean"),
                             "bare_clean_per_cpu_s": _med(rates, "bare_clean_per_s"),
                             "first_failure_to_report_median_s": _med(_runs(res[v]), "first_failure_to_report"),
                             "first_failure_to_report_median_cpu_s": _med(_runs(res[v]), "first_failure_to_report_cpu")}
    _print(res)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


def _print(res):
    vs = list(res)
    print("| measure | " + " | ".join(vs) + " |")
    print("|---|" + "---|" * len(vs))

    def row(name, fn):
        print(f"| {name} | " + " | ".join(fn(res[v]) for v in vs) + " |")

    row("fuzz cases / CPU s (median)", lambda r: f"{r['summary']['fuzz_per_cpu_s']:.0f}")
    row("bare Hypothesis loop / CPU s", lambda r: f"{r['summary']['bare_per_cpu_s']:.0f}")
    row("**ratio** (goal >= 0.7)", lambda r: f"**{r['summary']['ratio_median']:.2f}**")
    row("bare loop alone (numpy + Hypothesis only) / CPU s", lambda r: f"{r['summary']['bare_clean_per_cpu_s']:.0f}")
    row("ratio against the bare loop alone", lambda r: f"{r['summary']['ratio_clean_median']:.2f}")
    for k in ("draw", "check", "other"):
        row(f"CPU share: {k}", lambda r, k=k: f"{r['split'][k] / r['split']['cpu']:.0%}")
    row("CPU ms per case: draw", lambda r: f"{1e3 * r['split']['draw'] / r['split']['cases']:.2f}")
    row("CPU ms per case: check", lambda r: f"{1e3 * r['split']['check'] / r['split']['cases']:.2f}")
    row("CPU ms per case: other", lambda r: f"{1e3 * r['split']['other'] / r['split']['cases']:.2f}")
    labels = sorted({k for v in vs for k in res[v]["split"].get("detail", {})})
    for k in labels:
        row(f"CPU ms per case, within: {k}", lambda r, k=k: "-" if k not in r["split"].get("detail", {})
            else f"{1e3 * r['split']['detail'][k] / r['split']['cases']:.3f}")
    row("fuzz: distinct cases among those checked", lambda r: f"{r['fuzzdist']['unique']} of {r['fuzzdist']['cases']}")
    row("fuzz: graphs (distinct structures) they came from, cases per graph",
        lambda r: f"{r['fuzzdist'].get('graphs', '-')}, {r['fuzzdist']['cases'] / max(1, r['fuzzdist'].get('graphs', 0)):.1f}"
        if r['fuzzdist'].get('graphs') else "-")
    row("**graphs / CPU s** (rate / cases per graph)",
        lambda r: f"{r['summary']['fuzz_per_cpu_s'] * r['fuzzdist']['graphs'] / max(1, r['fuzzdist']['cases']):.0f}"
        if r['fuzzdist'].get('graphs') else "-")
    row("**distinct cases / CPU s** (rate x distinct share)",
        lambda r: f"**{r['summary']['fuzz_per_cpu_s'] * r['fuzzdist']['unique'] / max(1, r['fuzzdist']['cases']):.0f}**")
    for src, label in (("fuzzdist", "checked by fuzz"), ("dist", "cases() sampled")):
        for k in ("ops", "leaves", "elements", "broadcast", "fan_out", "x*x", "non_ones_seed", "float32", "mixed",
                  "multi_root", "tie_kink"):
            row(f"dist ({label}): {k}", lambda r, k=k, src=src: f"{r[src][k]:.3g}")
        row(f"dist ({label}): max leaf rank 0/1/2/3", lambda r, src=src: "/".join(
            str(r[src]["rank_histogram"].get(str(i), r[src]["rank_histogram"].get(i, 0))) for i in range(4)))
    for bug in SHRINK_BUGS:
        row(f"first failure -> report s: {bug}", lambda r, b=bug: "; ".join(_fmt(x) for x in r["shrink"].get(b, [])))
    row("planted bugs found (bug x seed runs)", lambda r: f"{sum(bool(x.get('found')) for x in _runs(r))} of "
        f"{len(_runs(r))}")
    row("mean checks / CPU s from the start to the first failure", _mean_of)
    for k in ("nodes", "leaves", "elements", "non_simple", "non_one", "non_ones_seeds"):
        row(f"shrunk reports: mean {k} (sum over the runs' reports)", lambda r, k=k: _shrunk_mean(r, k))
    row("**median first failure -> report s** (goal <= 5)",
        lambda r: "n/a" if r["summary"]["first_failure_to_report_median_s"] is None
        else f"**{r['summary']['first_failure_to_report_median_s']:.1f}** wall, "
        f"{r['summary']['first_failure_to_report_median_cpu_s']:.1f} CPU")


def _runs(r) -> list:
    """Every shrink run of a version (one per planted bug and seed; older results: one per bug)."""
    return [x for v in r["shrink"].values() for x in (v if isinstance(v, list) else [v])]


def _mean_of(r) -> str:
    runs = [x for x in _runs(r) if x.get("to_first_failure_cpu") is not None and x.get("first_cases") is not None]
    if not runs:
        return "-"
    return (f"{statistics.mean(x['first_cases'] for x in runs):.1f} cases / "
            f"{statistics.mean(x['to_first_failure_cpu'] for x in runs):.3f} CPU s")


def _shrunk_mean(r, k) -> str:
    sizes = [sz for x in _runs(r) for sz in x.get("shrunk", [])]
    return f"{statistics.mean(sz[k] for sz in sizes):.2f} ({sum(sz[k] for sz in sizes)})" if sizes else "-"


def _fmt(s):
    if not s:
        return "-"
    if "error" in s:
        return "error"
    if not s.get("found"):
        return f"not found ({s.get('cases')} cases)"
    return (f"{s['first_failure_to_report']:.1f} wall / {s['first_failure_to_report_cpu']:.1f} CPU, "
            f"{s['shrink_runs']} shrink runs")


if __name__ == "__main__":
    sys.exit(main())
