"""The FD oracle against plain central differences on the same graphs, in CPU time, old vs new.

    python benchmarks/fd_vs_plain.py --corpus FILE [--before DIR] [--rounds 3] [--json FILE]

Issue 15's FD goal: ``fd_gradient`` (3n + 1 points, the error estimate, the noise line, reach and
kink checks) at most 2x plain central differences (``run.py: plain_central_differences``: 2n
points, one batched forward, one contraction, nothing else) per input-size bucket.  The corpus is
a ``run.py --save-corpus`` file (the same graphs for both versions: Hypothesis draws depend on the
source it sees).  Each version runs in its own subprocesses (``--before``: a checkout of the old
code, put first on ``PYTHONPATH``), rounds alternating, so machine drift hits both alike; times are
``time.process_time`` (CPU, not wall: the machine is shared), the minimum over 5 repeats of a loop
of calls, after one warm-up call.  Reported: per bucket, the median over cases of FD / plain and FD
/ one batched forward of 2n points, the median of the rounds.  FD's error bound is computed when first
read (``gradspec.oracles._fd_lazy``) and ``gs.check`` reads it only where a comparison needs it, so FD
is timed three ways: ``fd`` as ``gs.check`` pays for it on that case (the bound deferred where the check
left it unread, else computed), ``fd_full`` with the bound read, ``fd_lazy`` without (the share of cases
the check left unread: ``deferred_share``).  All outside a check's per-case scope, as before.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUCKETS = ("n<=10", "n<=100", "n<=1000")


def _tmin(fn, budget=0.01):
    fn()
    t = time.process_time()
    fn()
    one = max(time.process_time() - t, 1e-7)
    reps = max(1, min(200, int(budget / one)))
    best = float("inf")
    for _ in range(5):
        t = time.process_time()
        for _ in range(reps):
            fn()
        best = min(best, (time.process_time() - t) / reps)
    return best


def worker(corpus_path):
    sys.path.insert(0, HERE)
    import run as R

    import gradspec as gs
    from gradspec.oracles.fd import fd_gradient

    def full():  # the estimate and its error bound (read: computed now where it is deferred)
        res = fd_gradient(case)
        for _ in res.error.items():
            pass

    out = []
    for _, case in R.load_corpus(corpus_path):
        try:
            fd_gradient(case)
        except Exception:  # noqa: BLE001 - a refused case has no estimate to time
            continue
        v = gs.check(case, oracles=R.CPU_ORACLES)
        deferred = getattr(v.fd_error, "pending", False)  # gs.check did without FD's error bound
        lazy, whole = _tmin(lambda: fd_gradient(case)), _tmin(full)
        out.append({"n": case.n_inputs, "fd": lazy if deferred else whole, "fd_full": whole, "fd_lazy": lazy,
                    "deferred": deferred, "plain": _tmin(R.plain_central_differences(case)),
                    "forward": _tmin(R.batched_forward_2n(case))})
    json.dump(out, sys.stdout)


def _bucket(n):
    return "n<=10" if n <= 10 else "n<=100" if n <= 100 else "n<=1000" if n <= 1000 else "n>1000"


def summarise(rows):
    res = {}
    for b in BUCKETS:
        rs = [r for r in rows if _bucket(r["n"]) == b]
        if rs:
            res[b] = {"cases": len(rs), "fd_vs_plain": statistics.median(r["fd"] / r["plain"] for r in rs),
                      "fd_full_vs_plain": statistics.median(r.get("fd_full", r["fd"]) / r["plain"] for r in rs),
                      "fd_lazy_vs_plain": statistics.median(r.get("fd_lazy", r["fd"]) / r["plain"] for r in rs),
                      "deferred_share": sum(bool(r.get("deferred")) for r in rs) / len(rs),
                      "fd_vs_forward": statistics.median(r["fd"] / r["forward"] for r in rs),
                      "plain_vs_forward": statistics.median(r["plain"] / r["forward"] for r in rs),
                      "fd_us": statistics.median(r["fd"] for r in rs) * 1e6}
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True, help="a run.py --save-corpus file")
    p.add_argument("--before", default=None, metavar="DIR", help="a checkout of the old code")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        worker(a.corpus)
        return 0
    versions = {"after": None} | ({"before": os.path.abspath(a.before)} if a.before else {})
    runs = {v: [] for v in versions}
    for _ in range(a.rounds):
        for v, path in versions.items():
            env = dict(os.environ)
            if path:
                env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
            text = subprocess.run([sys.executable, __file__, "--worker", "--corpus", a.corpus], env=env,
                                  capture_output=True, text=True, check=True).stdout
            runs[v].append(summarise(json.loads(text)))
    res = {}
    for v, rs in runs.items():
        res[v] = {b: {k: statistics.median(r[b][k] for r in rs) for k in rs[0][b]} for b in rs[0]}
    print("| median per case (CPU time) | " + " | ".join(BUCKETS) + " |\n|---|---|---|---|")
    for v in res:
        for k in ("fd_vs_plain", "fd_full_vs_plain", "fd_lazy_vs_plain", "deferred_share", "fd_vs_forward",
                  "plain_vs_forward", "fd_us"):
            cells = [f"{res[v][b][k]:.2f}" if b in res[v] else "-" for b in BUCKETS]
            print(f"| {v}: {k} | " + " | ".join(cells) + " |")
    print("cases per bucket: " + ", ".join(f"{b} {int(res['after'][b]['cases'])}" for b in res["after"]))
    print("fd: FD as gs.check pays for it (its error bound deferred where the check left it so: deferred_share of the "
          "cases); fd_full: the estimate and its error bound; fd_lazy: the estimate alone (error bound deferred). An "
          "old checkout without the deferral computes the bound at once: its three are one.")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": res, "rounds": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
