"""Where the FD oracle's instructions go, piece by piece (callgrind), beside plain central differences.

    python benchmarks/fd_split.py --corpus FILE [--out DIR] [--buckets 10,100]

For the corpus' cases whose FD error bound ``gs.check`` leaves unread (``fd_vs_plain.py``'s "fd": FD as the check
pays for it, the common case), one ``fd_gradient`` call is recorded with each helper it calls (``_inputs``,
``_steps``, the watch plan, the stencil, the batched forward, the centre's scale, the seeds, the contraction, the
reach of the watched values, the even-part check, the kink/reach check, the settled test, the deferred error
bound, the result...) and their arguments.  Under ``valgrind --tool=callgrind --dump-before=time_sleep`` each
helper is then replayed on its recorded arguments for every case of a bucket between two dumps (after a warm-up
replay), so a dump holds one helper's instructions over the bucket; then plain central differences (``run.py``)
and whole ``fd_gradient`` calls.  Reported per bucket: mean instructions per case of each helper (less what
replaying a no-op the same way costs), its share of FD, and the rest ("glue": the bodies of ``fd_gradient``,
``_run_pass``, ``_inline_pass``, ``_float64_gradient``, ``oracle_call``, the objects they build).  A helper replayed
alone runs warm, so shares are of a warm FD; the kink/reach check (``_fd_kinkpos.near_kinks``) includes
``check_reach``, listed apart.  Load-independent to ~0.5%; ~25 min at load 20 on 2 cores (the recording runs
``gs.check`` on every case under valgrind).  Session 16 (helper fdplain).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PIECES = ("_inputs", "_steps", "_specs", "_watch_plan", "_user_code", "_watched", "_stencil", "_leaf_batches",
          "_row0_scale", "_batch_seeds64", "_s_only", "_leaf_reach_small", "_leaf_reach", "_reach", "_settled",
          "_settled_small", "_deferred_error", "_result", "_largest_of", "_floor")
OTHER = (("_even", "suspects"), ("_kinkpos", "near_kinks"), ("_kinkpos", "check_reach"), ("_probes", "staircase"))


def _noop():
    pass


def _record(F, C):
    """Wrap FD's helpers so that a call records (label, function, args, kwargs); returns the log and an undo."""
    log, undo = [], []

    def wrap(mod, name):
        f = getattr(mod, name)

        def w(*a, **k):
            log.append((name, f, a, k))
            return f(*a, **k)
        setattr(mod, name, w)
        undo.append((mod, name, f))

    for name in PIECES:
        wrap(F, name)
    for mod, name in OTHER:
        wrap(getattr(F, mod), name)
    fwd = C.Case._forward

    def forward(self, *a, **k):
        log.append(("_forward", fwd, (self,) + a, k))
        return fwd(self, *a, **k)
    C.Case._forward = forward
    undo.append((C.Case, "_forward", fwd))
    return log, undo


def worker(corpus, buckets, order_path):
    sys.path.insert(0, HERE)
    import run as R

    import gradspec as gs
    import gradspec.case as C
    import gradspec.oracles.fd as F
    from gradspec import engine

    log, undo = _record(F, C)
    plan, lo = {}, 0
    for hi in buckets:
        items = []
        for _, case in R.load_corpus(corpus):
            if not lo < case.n_inputs <= hi:
                continue
            try:
                F.fd_gradient(case)
            except Exception:  # noqa: BLE001 - a refused case has no estimate to count
                continue
            if not getattr(gs.check(case, oracles=R.CPU_ORACLES).fd_error, "pending", False):
                continue
            log.clear()
            F.fd_gradient(case)
            # (a no-op entry: what replaying one helper costs besides the helper, subtracted from each)
            items.append((case, list(log) + [("_noop", _noop, (), {})], R.plain_central_differences(case)))
            log.clear()
        plan[f"n<={hi}"], lo = items, hi
    for mod, name, f in undo:
        setattr(mod, name, f)
    labels = list(PIECES) + [name for _, name in OTHER] + ["_forward", "_noop"]

    def replay(calls, label):
        for lab, f, a, k in calls:
            if lab == label:
                try:
                    f(*a, **k)
                except Exception:  # noqa: BLE001 - a refusal raised inside (check_reach), as in the recorded call
                    pass

    order = []
    with engine._quiet_fp():  # (as fd_gradient's oracle_call)
        for b, items in plan.items():
            time.sleep(0)
            order.append((b, "warm-up"))
            for _, calls, plain in items:
                for lab in labels:
                    replay(calls, lab)
                plain()
            for lab in labels:
                time.sleep(0)  # (a dump: the work since the previous one)
                order.append((b, lab))
                for _, calls, _ in items:
                    replay(calls, lab)
            time.sleep(0)
            order.append((b, "plain"))
            for _, _, plain in items:
                plain()
    for b, items in plan.items():
        time.sleep(0)
        order.append((b, "warm-up"))
        for case, _, _ in items:
            F.fd_gradient(case)
        time.sleep(0)
        order.append((b, "fd"))
        for case, _, _ in items:
            F.fd_gradient(case)
    time.sleep(0)
    with open(order_path, "w") as f:
        json.dump({"order": order, "cases": {b: len(v) for b, v in plan.items()}}, f)


def report(out):
    with open(os.path.join(out, "order.json")) as f:
        meta = json.load(f)
    files = sorted(glob.glob(os.path.join(out, "cg.out.*")), key=lambda p: int(p.rsplit(".", 1)[1]))
    totals = []
    for p in files:
        with open(p) as f:
            totals.append(next(int(line.split()[1]) for line in f if line.startswith("totals:")))
    got: dict = {}
    for (b, lab), v in zip(meta["order"], totals[1:]):  # (the first dump: imports and recording)
        got.setdefault(b, {})[lab] = v / max(1, meta["cases"][b])
    for b, r in got.items():
        fd, plain = r.pop("fd"), r.pop("plain")
        r.pop("warm-up", None)
        noop = r.pop("_noop")
        r = {lab: max(0.0, v - noop) for lab, v in r.items()}  # (a helper called k times: k - 1 calls' overhead stay)
        inside = r.get("check_reach", 0.0)  # (runs inside near_kinks)
        print(f"{b}: {meta['cases'][b]} cases (error bound deferred), mean instructions per case: FD {fd / 1e3:.0f}k, "
              f"plain central differences {plain / 1e3:.0f}k")
        for lab, v in sorted(r.items(), key=lambda kv: -kv[1]):
            if v >= 0.002 * fd:
                print(f"  {lab:18s} {v / 1e3:8.1f}k {v / fd:6.1%}")
        print(f"  (each helper less {noop / 1e3:.1f}k a replay, the cost of replaying a no-op)")
        rest = fd - (sum(r.values()) - inside)
        print(f"  {'rest (glue)':18s} {rest / 1e3:8.1f}k {rest / fd:6.1%}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True, help="a run.py --save-corpus file")
    p.add_argument("--out", default=None, metavar="DIR", help="where the dumps go (default: a temporary directory)")
    p.add_argument("--buckets", default="10,100", help="upper ends of the input-size buckets")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--order", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    buckets = [int(x) for x in a.buckets.split(",")]
    if a.worker:
        worker(a.corpus, buckets, a.order)
        return 0
    out = a.out or tempfile.mkdtemp(prefix="fd_split_")
    os.makedirs(out, exist_ok=True)
    subprocess.run(["valgrind", "--tool=callgrind", "--dump-before=time_sleep",
                    f"--callgrind-out-file={os.path.join(out, 'cg.out')}", sys.executable, __file__, "--worker",
                    "--corpus", os.path.abspath(a.corpus), "--buckets", a.buckets,
                    "--order", os.path.join(out, "order.json")],
                   env=dict(os.environ, PYTHONHASHSEED="0"), check=True, capture_output=True)
    report(out)
    print(f"dumps in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
