"""How fast the §5 rule searches find and diagnose each planted engine (tests/test_engine_rules.py's table).

    python benchmarks/rules_planted.py            # check_rules at its default budget, every planted engine
    python benchmarks/rules_planted.py --cli      # the same through `gradspec fuzz --engine module:attr` (default budget)

Prints, per planted engine: the expected §8 id, whether it was found with that id, the rule and the
number of scenarios that rule ran until the finding, seconds to the finding and for the whole run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gradspec import rules as R  # noqa: E402
from tests.test_engine_rules import PLANTED  # noqa: E402

PATHS = {"implicit-any-shape": "tests._planted:ImplicitAnyShape", "implicit-0d-only": "tests._planted_engines:implicit_0d_only",
         "seed-broadcast": "tests._planted:SeedBroadcast", "seed-ignored": "tests._planted:SeedIgnored",
         "seed-mean": "tests._planted_engines:seed_mean", "no-accumulation": "tests._planted:NoAccumulation",
         "edge-overwrite": "tests._planted_engines:edge_overwrite", "stale": "tests._planted_engines:stale",
         "root-assigned": "tests._planted_engines:root_assigned", "zero-d-no-grad": "tests._planted_engines:zero_d_no_grad",
         "no-reset": "tests._planted:NoReset", "no-freeing": "tests._planted:NoFreeing",
         "repeated-args": "tests._planted:RepeatedArgs", "zeros-not-none": "tests._planted:ZerosBeforeBackward",
         "sum-relative-1e-6": "tests._planted:SumScaled"}


def api() -> None:
    ok = 0
    for name, (factory, cid, _rule) in PLANTED.items():
        t0 = time.perf_counter()
        res = R.check_rules(factory(), seed=0)
        total = time.perf_counter() - t0
        f = next((f for f in res.findings if f.cause.id == cid), None)
        ok += f is not None
        where = f"{f.rule}, scenario {f.examples}, {f.seconds:.2f} s" if f else "NOT FOUND"
        print(f"{name:20s} {cid:26s} {'found' if f else 'MISSED':6s} {where:45s} run {total:5.1f} s "
              f"({len(res.findings)} finding(s))")
    print(f"found {ok}/{len(PLANTED)}")


def cli() -> None:
    ok = 0
    env = dict(os.environ, PYTHONPATH=ROOT)
    for name, (_f, cid, _rule) in PLANTED.items():
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "gradspec.cli", "fuzz", "--engine", PATHS[name], "--seed", "0",
                            "--report-dir", d, "-q"], env=env, cwd=ROOT, capture_output=True, text=True)
            total = time.perf_counter() - t0
            s = json.load(open(os.path.join(d, "summary.json")))
        ids = sorted({(r.get("cause") or {}).get("id") for r in s["reports"]} - {None})
        hit = cid in ids
        ok += hit
        print(f"{name:20s} {cid:26s} {'found' if hit else 'MISSED':6s} {total:5.1f} s  causes {ids}")
    print(f"found {ok}/{len(PLANTED)} through the CLI at the default budget")


if __name__ == "__main__":
    cli() if "--cli" in sys.argv else api()
