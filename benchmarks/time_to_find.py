"""How long gradspec takes to find each planted bug (user ops, torch Functions, engines).

    python benchmarks/time_to_find.py [--seeds 0 1 2 3] [--json FILE]

Every bug of ``tests/_planted.py`` goes through the matching ``gs.verify_*`` (default budget) once
per seed; reported per family: how many runs found the bug, the median and the slowest time to
the first discrepancy (``Result.time_to_first``).  This is where the time to find is measured;
the test suite only asserts that each bug is found.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tests import _planted as P  # noqa: E402

FAMILIES = {"op": "user ops (gs.verify_op)", "torch": "torch Functions (gs.verify_torch_function)",
            "engine": "engines (gs.verify_engine)"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    rows = []
    for name, p in P.BUGS.items():
        for seed in a.seeds:
            r = P.run(p, seed=seed)  # the default budget, what a user gets
            rows.append({"bug": name, "how": p.how, "seed": seed, "found": not r.ok, "time_to_find": r.time_to_first,
                         "cases_to_find": r.cases_to_first})
    print("| family | runs | found | median time to find | slowest |\n|---|---|---|---|---|")
    out = {}
    for how, label in FAMILIES.items():
        rs = [r for r in rows if r["how"] == how]
        times = [r["time_to_find"] for r in rs if r["found"] and r["time_to_find"] is not None]
        out[how] = {"runs": len(rs), "found": sum(r["found"] for r in rs),
                    "median_s": statistics.median(times) if times else None, "max_s": max(times) if times else None}
        med = f"{out[how]['median_s']:.3f} s" if times else "-"
        mx = f"{out[how]['max_s']:.3f} s" if times else "-"
        print(f"| {label} | {len(rs)} | {out[how]['found']} | {med} | {mx} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"families": out, "rows": rows}, f, indent=1)
    return 0 if all(r["found"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
