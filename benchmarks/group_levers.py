"""The two levers left for ``gradspec fuzz``'s rate (issue 15), measured before building them.

    python benchmarks/group_levers.py [--seeds 7,8,100] [--ab-reps 12] [--json FILE]

A campaign checks the value sets of one graph in a row (``case_groups()``), and the draw evaluates each
set's forward while it repairs the values.  Two ways to save check time were named and never tried:

1. **batched passes across a group's value sets**: finite differences evaluate their stencil as rows of
   one batched forward per set (``oracles/fd.py: _inline_pass``); the rows of every set of one structure
   could go through one pass (one numpy call per node for the whole group), and the sets' plain forwards
   (the per-case memo's ``forward``) through one stacked pass;
2. **the draw's forward handed to the check**: the repair pass (``strategies/_cases.py: _first_bad_node``)
   computes every node's ``spec.forward`` at the set's final values; the check's per-case memo computes
   the same forward again (``Case._evaluate``).

Each part runs in a subprocess of its own (the patches below stay there), on 400-case campaigns of
``--seeds`` (``throughput.py``'s warm-up first):

* **pieces**: CPU ms per checked case of the repair pass, the memo forward, FD's batched forwards, each
  oracle's call -- what each lever could take at most, measured inside the campaign (cold caches);
* **replay**: the groups a campaign checked, again: per structure, FD's inline forward of each set
  against one pass over the rows of all sets (their stencils concatenated, as ``_leaf_batches`` slices
  them; a constant leaf repeated per set), and the plain forwards against one stacked pass; CPU per set
  (warm: each group replayed 3 times, the last one timed); and whether each row of the one pass is the
  set's own row bit for bit (by op where not: "layout" when a set's own pass with its constant leaves
  materialized differs too);
* **identity**: whether the draw's last repair-pass forward (at the values the case holds) is the
  case's forward bit for bit, per case;
* **ab**: a prototype of lever 2 (not in gradspec: patched in here) switched on and off in alternating
  campaigns of seeds 100-102 (the same draws each way), CPU ms per case, paired differences.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

clock = time.process_time


def _campaign(seed: int, n: int = 400):
    import throughput as T

    s, cpu = T._fuzz(n, seed)
    return s["cases"], cpu


def _warm() -> None:
    import throughput as T
    import torch  # noqa: F401

    T._warm_ops()
    T._fuzz(20, 1007)


# ---------------------------------------------------------------------------------------------
# pieces: what each lever could take at most, inside the campaign
# ---------------------------------------------------------------------------------------------


def worker_pieces(seed: int) -> dict:
    from gradspec import oracles
    from gradspec.case import Case

    cases_mod = importlib.import_module("gradspec.strategies._cases")
    acc: dict = collections.defaultdict(float)
    cnt: collections.Counter = collections.Counter()

    def timed(fn, label_of):
        def call(*a, **k):
            t0 = clock()
            try:
                return fn(*a, **k)
            finally:
                label = label_of(a)
                acc[label] += clock() - t0
                cnt[label] += 1
        return call

    Case._forward = timed(Case._forward, lambda a: "FD's batched forwards" if a[2] else
                          "the memo forward (Case._evaluate)" if a[1] is None else "a forward at other values")
    cases_mod._first_bad_node = timed(cases_mod._first_bad_node, lambda a: "draw: the repair pass")
    for o in oracles.all_oracles():
        meth = "result" if o.kind == "fd" else "jacobian" if o.name == "jacobian" else "vjp"
        setattr(o, meth, timed(getattr(o, meth), lambda a, _n=o.name: f"oracle {_n}"))
    _warm()
    acc.clear()
    cnt.clear()
    n, cpu = _campaign(seed)
    return {"cases": n, "ms_per_case": 1e3 * cpu / n,
            "pieces": {k: {"ms_per_case": 1e3 * acc[k] / n, "calls_per_case": cnt[k] / n} for k in sorted(acc)}}


# ---------------------------------------------------------------------------------------------
# replay: per set against one pass over a structure's sets
# ---------------------------------------------------------------------------------------------


def worker_replay(seed: int) -> dict:
    import numpy as np

    from gradspec._private import structure
    from gradspec.fuzz import prefetch

    groups: list = []
    run = prefetch.Prefetch.run

    def keep(self, cases, mark=None):
        groups.append(list(cases))
        return run(self, cases, mark)

    prefetch.Prefetch.run = keep
    _warm()
    groups.clear()
    n_cases, _ = _campaign(seed)
    prefetch.Prefetch.run = run
    out = {"cases": n_cases, "groups": len(groups), "sets": 0, "fd_per_set": 0.0, "fd_one_pass": 0.0,
           "plain_per_set": 0.0, "plain_one_pass": 0.0, "clean_sets": 0, "clean_fd_per_set": 0.0,
           "clean_fd_one_pass": 0.0, "rows_differ": collections.Counter(), "layout": collections.Counter(),
           "sets_in_differing_structures": 0}
    with np.errstate(all="ignore"):
        for g in groups:
            for sub in _by_structure(g, structure.same):
                calls = [c for c in map(_inline_call, sub) if c is not None]
                if len(calls) >= 2:
                    _replay_one(calls, out)
    out["rows_differ"] = {" ".join(map(str, k)): v for k, v in out["rows_differ"].items()}
    out["layout"] = {" ".join(map(str, k)): v for k, v in out["layout"].items()}
    return out


def _by_structure(cases, same) -> list:
    subs: list = []
    for c in cases:
        for sub in subs:
            if same(sub[0], c):
                sub.append(c)
                break
        else:
            subs.append([c])
    return subs


def _inline_call(case):
    """``(case, x64, leaves, X)`` of the set's inline FD pass (None: no FD answer, or the chunked pass)."""
    import numpy as np

    import gradspec as gs

    fd_mod = importlib.import_module("gradspec.oracles.fd")
    got: list = []
    inline, batches = fd_mod._inline_pass, fd_mod._leaf_batches

    def grab(*a, **k):
        got.append("inline")
        return inline(*a, **k)

    def lb(c, x64, leaves, X):
        if got == ["inline"]:
            got.append((c, x64, leaves, X))
        return batches(c, x64, leaves, X)

    fd_mod._inline_pass, fd_mod._leaf_batches = grab, lb
    try:
        with np.errstate(all="ignore"):
            gs.oracles.get("finite-differences").result(case)
    except Exception:  # noqa: BLE001 - a set FD does not answer is not batched either
        pass
    finally:
        fd_mod._inline_pass, fd_mod._leaf_batches = inline, batches
    return got[1] if len(got) > 1 else None


def _one_pass_batches(calls):
    """The leaves of one pass over every set's rows: the stencils stacked, grad leaves sliced from them as
    ``_leaf_batches`` does, a constant leaf repeated per set (materialized: its values differ by set)."""
    import numpy as np

    from gradspec.oracles._fd_stencil import _repeat

    c0, _, leaves0, _ = calls[0]
    X = np.concatenate([X for _, _, _, X in calls])
    nb, grad, off, out = X.shape[0], {l.name for l in leaves0}, 0, {}
    for l in c0.leaves:
        if l.name in grad:
            out[l.name] = X[:, off:off + l.value.size].reshape((nb,) + l.value.shape)
            off += l.value.size
        else:
            out[l.name] = np.concatenate([_repeat(x64[l.name], Xi.shape[0]) for _, x64, _, Xi in calls])
    return out


def _replay_one(calls, out) -> None:
    import numpy as np

    fd_mod = importlib.import_module("gradspec.oracles.fd")
    c0 = calls[0][0]
    specs = [c0.spec(n.op) for n in c0.nodes]
    for _ in range(3):  # (the last repetition is timed: caches warm for both forms alike)
        t0 = clock()
        own = [c._forward(fd_mod._leaf_batches(c, x64, lv, X), 1, specs) for c, x64, lv, X in calls]
        t1 = clock()
        one = c0._forward(_one_pass_batches(calls), 1, specs)
        t2 = clock()
        for c, _, _, _ in calls:
            c._forward(None, 0, specs)
        t3 = clock()
        c0._forward({l.name: np.stack([c.leaves[i].value for c, _, _, _ in calls]) for i, l in enumerate(c0.leaves)}, 1, specs)
        t4 = clock()
    k = len(calls)
    out["sets"] += k
    out["fd_per_set"] += t1 - t0
    out["fd_one_pass"] += t2 - t1
    out["plain_per_set"] += t3 - t2
    out["plain_one_pass"] += t4 - t3
    bad = _rows_differ(calls, own, one, specs, out)
    if bad:
        out["sets_in_differing_structures"] += k
    else:
        out["clean_sets"] += k
        out["clean_fd_per_set"] += t1 - t0
        out["clean_fd_one_pass"] += t2 - t1


def _rows_differ(calls, own, one, specs, out) -> bool:
    """Whether any node's rows in the one pass differ from a set's own pass (bytes); counted by op."""
    import numpy as np

    from gradspec.oracles._fd_stencil import _repeat

    c0, start, bad = calls[0][0], 0, False
    for (c, x64, leaves, X), env in zip(calls, own):
        rows = X.shape[0]
        for node in c0.nodes:
            mine, theirs = env[node.name], one[node.name][start:start + rows]
            if mine.shape == theirs.shape and mine.dtype == theirs.dtype and \
                    np.ascontiguousarray(mine).tobytes() == np.ascontiguousarray(theirs).tobytes():
                continue
            bad = True
            key = (node.op, str(mine.dtype), tuple(mine.shape[1:]))
            out["rows_differ"][key] += 1
            fd_mod = importlib.import_module("gradspec.oracles.fd")
            b = fd_mod._leaf_batches(c, x64, leaves, X)
            grad = {l.name for l in leaves}
            mat = {k: (v if k in grad else np.ascontiguousarray(_repeat(x64[k], rows))) for k, v in b.items()}
            alt = c._forward(mat, 1, specs)[node.name]
            if np.ascontiguousarray(alt).tobytes() != np.ascontiguousarray(mine).tobytes():
                out["layout"][key] += 1
            break  # (later nodes inherit the difference)
        start += rows
    return bad


# ---------------------------------------------------------------------------------------------
# identity and the A/B of lever 2's prototype
# ---------------------------------------------------------------------------------------------


def _hand_over(state: dict) -> None:
    """Lever 2's prototype: the env of the last clean repair pass on a values dict goes with the case built
    from that dict (``state["on"]``), and the per-case memo takes it as the case's forward."""
    from gradspec._private import percase
    from gradspec.case import Case

    cases_mod = importlib.import_module("gradspec.strategies._cases")
    graph_mod = importlib.import_module("gradspec.strategies._graph")
    last: dict = {}
    fbn = cases_mod._first_bad_node

    def first_bad_node(g, values, allow=frozenset()):
        got = fbn(g, values, allow)
        if state["on"] and got[0] is None:
            last[id(values)] = (values, got[1])
        return got

    cases_mod._first_bad_node = first_bad_node
    for meth in ("case", "case_like"):
        def make(orig, like):
            def build(self, *a, **k):
                c = orig(self, *a, **k)
                if state["on"]:
                    values = a[1] if like else a[0]
                    hit = last.pop(id(values), None)
                    if hit is not None and hit[0] is values:
                        c._drawn_forward = hit[1]
                        if state.get("keep"):
                            state["cases"].append(c)
                return c
            return build
        setattr(graph_mod.Graph, meth, make(getattr(graph_mod.Graph, meth), meth == "case_like"))
    evaluate = Case._evaluate

    def taking(self, values, nbatch):
        if values is None and not nbatch and state["take"]:
            memo = percase.active(self)
            if memo is not None and "forward" not in memo and getattr(self, "_drawn_forward", None) is not None:
                memo["forward"] = self._drawn_forward
        return evaluate(self, values, nbatch)

    Case._evaluate = taking


def worker_identity(seeds: str) -> dict:
    import numpy as np

    state = {"on": True, "take": False}
    _hand_over(state)
    _warm()
    state.update(keep=True, cases=[])
    for s in map(int, seeds.split(",")):
        _campaign(s)
    tally: collections.Counter = collections.Counter()
    with np.errstate(all="ignore"):
        for c in state["cases"]:
            env = c._drawn_forward
            tally["cases drawn"] += 1
            if any(l.value is not env[l.name] for l in c.leaves):
                tally["a leaf array is not the drawn one"] += 1
                continue
            mine = c._forward(None, 0, None)
            same = all(mine[n.name].dtype == env[n.name].dtype and mine[n.name].shape == env[n.name].shape
                       and mine[n.name].tobytes() == np.asarray(env[n.name]).tobytes() for n in c.nodes)
            tally["forward bit-identical" if same else "forward differs"] += 1
    return dict(tally)


def worker_ab(reps: int) -> dict:
    state = {"on": False, "take": False}
    _hand_over(state)
    _warm()
    res: dict = {"on": [], "off": []}
    for rep in range(reps):
        for seed in (100, 101, 102):
            for on in ((True, False) if rep % 2 == 0 else (False, True)):
                state.update(on=on, take=on)
                n, cpu = _campaign(seed)
                res["on" if on else "off"].append(1e3 * cpu / n)
    diffs = [a - b for a, b in zip(res["off"], res["on"])]
    return {**res, "paired_off_minus_on_median": statistics.median(diffs), "paired_mean": statistics.mean(diffs)}


# ---------------------------------------------------------------------------------------------
# orchestration
# ---------------------------------------------------------------------------------------------


def _run(*args) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", *map(str, args)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="7,8,100", help="campaign seeds (400 cases each), comma-separated")
    p.add_argument("--ab-reps", type=int, default=12, help="alternations of lever 2's on/off campaigns (x3 seeds)")
    p.add_argument("--json", default=None)
    p.add_argument("--worker", nargs="+", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        kind, arg = a.worker
        fn = {"pieces": worker_pieces, "replay": worker_replay, "identity": worker_identity, "ab": worker_ab}[kind]
        print(json.dumps(fn(arg if kind == "identity" else int(arg))))
        return 0
    seeds = [int(s) for s in a.seeds.split(",")]
    res = {"pieces": {s: _run("pieces", s) for s in seeds}, "replay": {s: _run("replay", s) for s in seeds},
           "identity": _run("identity", a.seeds), "ab": _run("ab", a.ab_reps) if a.ab_reps else None}
    _print(res)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


def _print(res) -> None:
    for s, r in res["pieces"].items():
        print(f"pieces, seed {s}: {r['cases']} cases, {r['ms_per_case']:.3f} CPU ms a case")
        for k, v in r["pieces"].items():
            print(f"  {k:40s} {v['ms_per_case']:.3f} ms a case ({v['calls_per_case']:.2f} calls)")
    for s, r in res["replay"].items():
        k = max(r["sets"], 1)
        n = max(r["cases"], 1)
        print(f"replay, seed {s}: {r['sets']} of {r['cases']} sets in structures of >= 2 sets with an inline FD pass; "
              f"us a set, own pass / one pass: FD {1e6 * r['fd_per_set'] / k:.1f} / {1e6 * r['fd_one_pass'] / k:.1f}, "
              f"plain forward {1e6 * r['plain_per_set'] / k:.1f} / {1e6 * r['plain_one_pass'] / k:.1f}; saved per "
              f"checked case: FD {1e3 * (r['fd_per_set'] - r['fd_one_pass']) / n:.4f} ms, plain "
              f"{1e3 * (r['plain_per_set'] - r['plain_one_pass']) / n:.4f} ms; only structures whose rows all "
              f"agree ({r['clean_sets']} sets): FD {1e3 * (r['clean_fd_per_set'] - r['clean_fd_one_pass']) / n:.4f} ms")
        print(f"  rows differing (op dtype shape: sets), {r['sets_in_differing_structures']} sets: "
              f"{r['rows_differ']}; of them also by layout alone: {r['layout']}")
    print(f"identity: {res['identity']}")
    ab = res["ab"]
    if ab:
        print(f"lever 2 prototype, {len(ab['on'])} campaigns each way: ms a case off {statistics.median(ab['off']):.3f}, "
              f"on {statistics.median(ab['on']):.3f}; paired off - on median {ab['paired_off_minus_on_median']:.4f}, "
              f"mean {ab['paired_mean']:.4f}")


if __name__ == "__main__":
    raise SystemExit(main())
