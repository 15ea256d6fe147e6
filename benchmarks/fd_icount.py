"""The FD oracle against plain central differences in instructions (callgrind), old vs new: a load-independent
companion of ``fd_vs_plain.py`` for a shared machine.

    python benchmarks/fd_icount.py --corpus FILE [--before DIR] [--out DIR]

CPU time on a machine shared with other jobs moves by +-5% between runs (``fd_vs_plain.py`` alternates the two
versions, which cancels drift, not noise); valgrind's instruction count moves by ~0.5% (hashing, allocation addresses).  Each version runs
once under ``valgrind --tool=callgrind --dump-before=time_sleep``: the worker calls ``time.sleep(0)`` between
cases, so each dump holds one case's work -- ``fd_gradient`` twice, then ``plain_central_differences`` twice
(after one warm-up call of each).  Reported per input-size bucket: the median over cases of FD / plain in
instructions, and the median of FD's instructions after / before.  Instructions are not time (FD / plain is
~1.7 in instructions where it is ~2.1 in CPU time at n <= 10): a before/after check of a change's cost, not the
issue's measure.  Needs valgrind; ~15 min per version on 2 loaded cores.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUCKETS = ("n<=10", "n<=100", "n<=1000")


def _bucket(n):
    return "n<=10" if n <= 10 else "n<=100" if n <= 100 else "n<=1000" if n <= 1000 else "n>1000"


def worker(corpus_path, ns_path):
    sys.path.insert(0, HERE)
    import run as R

    from gradspec.oracles.fd import fd_gradient

    cases = []
    for _, case in R.load_corpus(corpus_path):
        if case.n_inputs > 1000:
            continue
        try:
            fd_gradient(case)
        except Exception:  # noqa: BLE001 - a refused case has no estimate to count
            continue
        cases.append((case, R.plain_central_differences(case)))
    for case, plain in cases:
        fd_gradient(case)
        plain()
    with open(ns_path, "w") as f:
        json.dump([case.n_inputs for case, _ in cases], f)
    for case, plain in cases:
        time.sleep(0)  # (a dump: the work since the previous one)
        fd_gradient(case)
        fd_gradient(case)
        time.sleep(0)
        plain()
        plain()
    time.sleep(0)


def run_version(corpus, path, out):
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, PYTHONHASHSEED="0")
    if path:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    ns_path = os.path.join(out, "ns.json")
    subprocess.run(["valgrind", "--tool=callgrind", "--dump-before=time_sleep",
                    f"--callgrind-out-file={os.path.join(out, 'cg.out')}", sys.executable, __file__, "--worker",
                    "--corpus", corpus, "--ns", ns_path], env=env, check=True, capture_output=True)
    with open(ns_path) as f:
        ns = json.load(f)
    files = sorted(glob.glob(os.path.join(out, "cg.out.*")), key=lambda p: int(p.rsplit(".", 1)[1]))
    totals = []
    for p in files:
        with open(p) as f:
            totals.append(next(int(line.split()[1]) for line in f if line.startswith("totals:")))
    segs = totals[1:]  # (the first dump: the imports and warm-up calls)
    return ns, segs[0::2][: len(ns)], segs[1::2][: len(ns)]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True, help="a run.py --save-corpus file")
    p.add_argument("--before", default=None, metavar="DIR", help="a checkout of the old code")
    p.add_argument("--out", default=None, metavar="DIR", help="where the dumps go (default: a temporary directory)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ns", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        worker(a.corpus, a.ns)
        return 0
    out = a.out or tempfile.mkdtemp(prefix="fd_icount_")
    corpus = os.path.abspath(a.corpus)
    got = {"after": run_version(corpus, None, os.path.join(out, "after"))}
    if a.before:
        got["before"] = run_version(corpus, os.path.abspath(a.before), os.path.join(out, "before"))
    print("| median per case (instructions) | " + " | ".join(BUCKETS) + " |\n|---|---|---|---|")
    for v, (ns, fd, plain) in got.items():
        cells = []
        for b in BUCKETS:
            idx = [i for i, n in enumerate(ns) if _bucket(n) == b]
            cells.append(f"{statistics.median(fd[i] / plain[i] for i in idx):.3f}" if idx else "-")
        print(f"| {v}: fd / plain | " + " | ".join(cells) + " |")
    if "before" in got and got["before"][0] == got["after"][0]:
        ns, fd_a, _ = got["after"]
        fd_b = got["before"][1]
        cells = []
        for b in BUCKETS:
            idx = [i for i, n in enumerate(ns) if _bucket(n) == b]
            cells.append(f"{statistics.median(fd_a[i] / fd_b[i] for i in idx):.3f}" if idx else "-")
        print("| fd after / before | " + " | ".join(cells) + " |")
    print(f"dumps in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
