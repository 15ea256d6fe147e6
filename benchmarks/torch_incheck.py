"""The torch oracle's cost inside ``gs.check`` against alone, and what it does to the other oracles' calls.

    python benchmarks/torch_incheck.py [--corpus FILE] [--cases 40] [--max-n 10] [--reps 20]

For each small case of the corpus (run.py's), CPU time (medians over ``--reps`` calls, then over the cases):
the torch oracle's ``vjp`` alone (with one intra-op thread, as inside a check), the same call timed inside
``gs.check`` with the four CPU oracles and inside a check of torch alone, and each other oracle's own call
inside a check with and without torch among the oracles.  Also the CPU ticks of threads other than the main
one (torch's OpenMP workers spin after a parallel region; ``process_time`` counts them).

Session 16 (helper "torchcost") found with callgrind that the call inside a check runs no more instructions
than alone (fewer: the check's per-case memo answers the op specs) but misses a simulated 2 MB L2 ~6x as
often (instruction fetches mostly): the difference is the other oracles' code and data evicting torch's,
and torch's evicting theirs, not more work.  See benchmarks/README.md ("torch oracle inside gs.check").
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import run as R  # benchmarks/run.py: the corpus and CPU_ORACLES

import gradspec as gs
from gradspec.oracles import fd as _fd
from gradspec.oracles import jacobian as _jac
from gradspec.oracles import reference as _ref
from gradspec.oracles import torch_oracle as _torch_oracle

_CALLS = {"torch": (_torch_oracle.TorchOracle, "vjp"), "reference": (_ref.ReferenceOracle, "vjp"),
          "finite-differences": (_fd.FiniteDifferences, "result"), "jacobian": (_jac.JacobianOracle, "jacobian")}


def _timed_methods(acc: dict) -> None:
    """Every oracle's own call appends its CPU time to ``acc[name]``."""
    for name, (cls, meth) in _CALLS.items():
        orig = getattr(cls, meth)

        def timed(self, *a, _orig=orig, _name=name, **k):
            t = time.process_time()
            try:
                return _orig(self, *a, **k)
            finally:
                acc.setdefault(_name, []).append(time.process_time() - t)

        setattr(cls, meth, timed)


def _other_thread_ticks() -> int:
    main, ticks = str(threading.get_native_id()), 0
    for tid in os.listdir("/proc/self/task"):
        if tid != main:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime + stime
    return ticks


def _medians(cases, run, acc, reps) -> tuple[dict, int]:
    per: dict = {}
    before = _other_thread_ticks()
    for case in cases:
        run(case)  # warm-up, not timed
        acc.clear()
        t_all = []
        for _ in range(reps):
            t = time.process_time()
            run(case)
            t_all.append(time.process_time() - t)
        per.setdefault("whole call", []).append(statistics.median(t_all))
        for name, ts in acc.items():
            per.setdefault(name, []).append(statistics.median(ts))
    return {k: round(1e6 * statistics.median(v), 1) for k, v in per.items()}, _other_thread_ticks() - before


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=None)
    p.add_argument("--cases", type=int, default=40)
    p.add_argument("--max-n", type=int, default=10)
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args(argv)
    import torch

    corpus = R.load_corpus(a.corpus) if a.corpus else R.corpora(150, 0, 0)
    cases = [c for _, c in corpus if 0 < c.n_inputs <= a.max_n][:a.cases]
    acc: dict = {}
    _timed_methods(acc)
    orc = gs.oracles.get("torch-cpu")
    others = [o for o in R.CPU_ORACLES if o != "torch-cpu"]
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # (what gs.check sets around its oracles: gradspec._private.threads)
    try:
        alone = _medians(cases, orc.vjp, acc, a.reps)
    finally:
        torch.set_num_threads(old)
    rows = {"torch vjp alone (1 thread)": alone,
            "check, 4 CPU oracles": _medians(cases, lambda c: gs.check(c, oracles=R.CPU_ORACLES), acc, a.reps),
            "check, 3 (no torch)": _medians(cases, lambda c: gs.check(c, oracles=others), acc, a.reps),
            "check, torch only": _medians(cases, lambda c: gs.check(c, oracles=["torch-cpu"]), acc, a.reps)}
    print(f"{len(cases)} cases with n <= {a.max_n}; CPU us, median per case then over cases; load {os.getloadavg()[0]:.1f}")
    for label, (row, ticks) in rows.items():
        print(f"  {label:28s} " + "  ".join(f"{k} {v}" for k, v in row.items()) + f"  (other threads' ticks {ticks})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
