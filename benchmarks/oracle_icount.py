"""One oracle over the small cases of a corpus, R times: a fixed workload to count instructions of, where CPU time
is too noisy (the shared 2-core machine at load 10-20 moved per-case medians by +-20% between runs).

    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        python benchmarks/oracle_icount.py ORACLE R [--corpus FILE] [--max-n 10] [--no-plans] [--cold]

Run it with R = 0 and R = 10: (I refs at 10 - I refs at 0) / (10 x cases) is the oracle's instructions per
call (mean over the cases; the count of cases is printed), the same on a loaded machine as on a quiet one.
Every case is called twice before the loop (warm: imports, caches, the structure's plan).  ``--no-plans``: the
exact oracles' general path (``gradspec.oracles._plan`` disabled: the code before the plans); ``--cold``: every
call meets its structure for the first time (the plans are dropped before each call).
"""

from __future__ import annotations

import argparse

import run as R  # benchmarks/run.py: the corpus

import gradspec as gs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("oracle")
    p.add_argument("reps", type=int)
    p.add_argument("--corpus", default=None, help="a run.py --save-corpus file (default: run.py's seed-0 draw)")
    p.add_argument("--max-n", type=int, default=10)
    p.add_argument("--no-plans", action="store_true")
    p.add_argument("--cold", action="store_true")
    a = p.parse_args(argv)
    from gradspec.oracles import _plan

    if a.no_plans:
        _plan.plan = lambda case: None
    corpus = R.load_corpus(a.corpus) if a.corpus else R.corpora(150, 0, 0)
    cases = [c for source, c in corpus if source == "default" and 0 < c.n_inputs <= a.max_n]
    oracle = gs.oracles.get(a.oracle)
    ok = []
    for c in cases:
        try:
            oracle.vjp(c)
            oracle.vjp(c)
            ok.append(c)
        except Exception:  # noqa: BLE001 - a case the oracle refuses is left out
            pass
    for _ in range(a.reps):
        for c in ok:
            if a.cold:
                _plan._PLANS.clear()
            oracle.vjp(c)
    print(f"{a.oracle}: {len(ok)} cases x {a.reps}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
