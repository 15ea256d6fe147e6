"""A long false-alarm soak: N random cases from gradspec.strategies.cases() through gs.check.

    python benchmarks/soak.py --cases 20000 --seed 0 [--groups] [--json FILE] [--save-dir DIR]

``--groups``: the cases ``gradspec fuzz`` checks, every value set of ``gradspec.strategies.case_groups()``
(several value sets per graph), until N cases have been checked.

Every case must agree (every applicable oracle pair within tolerance); any disagreement is
saved as case JSON for `gradspec replay`.  Prints cases/s, oracle pairs compared, skips by
reason, op coverage, and the verdicts' notes (cases carrying each kind, by its first words).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hyp_seed

import gradspec as gs
from gradspec._private.kinks import summarise, tally


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--save-dir", default="soak-failures")
    p.add_argument("--groups", action="store_true", help="value sets of case_groups(), as gradspec fuzz checks")
    a = p.parse_args(argv)
    stats = collections.Counter()
    ops = collections.Counter()
    skips = collections.Counter()
    hard = collections.Counter()
    notes = collections.Counter()  # the verdicts' notes by their first words (what a user reading them would see)
    bad = []
    t0 = time.time()

    def rounds():
        # A group holds several cases: rounds of fewer examples (new seeds) until N cases are checked.
        rnd = 0
        while stats["cases"] < a.cases:
            left = a.cases - stats["cases"]

            @hyp_seed(a.seed + 7919 * rnd)
            @settings(max_examples=max(10, left // 4) if a.groups else left, database=None, deadline=None,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
            @given(gs.strategies.case_groups() if a.groups else gs.strategies.cases())
            def run(example):
                for case in (example if a.groups else [example]):
                    if stats["cases"] < a.cases:
                        one(case)

            before = stats["cases"]
            run()
            rnd += 1
            if stats["cases"] == before:
                break

    def one(case):
        v = gs.check(case)
        stats["cases"] += 1
        stats["comparisons"] += len(v.comparisons)
        for n in {n.op for n in case.nodes}:
            ops[n] += 1
        hard.update(tally(case, v.skipped))
        notes.update({str(n)[:60] for n in v.notes})
        for name, why in v.skipped.items():
            skips[f"{name}: {why.split('(')[0][:70]}"] += 1
        if not v.ok:
            os.makedirs(a.save_dir, exist_ok=True)
            path = os.path.join(a.save_dir, f"case-{len(bad)}.json")
            with open(path, "w") as f:
                f.write(case.to_json())
            bad.append({"path": path, "summary": v.summary()})
            print(f"DISAGREEMENT saved to {path}:\n{v.summary()}", file=sys.stderr)
        if stats["cases"] % 500 == 0:
            el = time.time() - t0
            print(f"{stats['cases']} cases, {stats['cases'] / el:.1f}/s, {len(bad)} disagreements", file=sys.stderr)

    rounds()
    el = time.time() - t0
    res = {"cases": stats["cases"], "disagreements": len(bad), "seconds": round(el, 1),
           "cases_per_second": round(stats["cases"] / el, 2), "comparisons": stats["comparisons"],
           "hard_regions": summarise(hard, stats["cases"]), "ops_covered": len(ops),
           "ops_in_table": len(gs.ops.names()), "ops": dict(ops.most_common()),
           "skipped": dict(skips.most_common()), "notes": sum(notes.values()),
           "notes_by_kind": dict(notes.most_common()), "failures": bad}
    print(json.dumps({k: v for k, v in res.items() if k not in ("ops", "failures")}, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
