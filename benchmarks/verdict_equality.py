"""Do two versions of gradspec give the same verdicts?  For cost work that must not change any answer.

    python benchmarks/verdict_equality.py --before DIR [--corpus FILE] [--json FILE] [--list]

``DIR`` is an older checkout (e.g. ``git worktree add /tmp/old <commit>`` or ``git archive <commit> |
tar -x -C /tmp/old``); this checkout is "after".  Both run in their own subprocess on the same cases
(a corpus is drawn with this checkout and saved to ``--corpus`` unless that file exists: Hypothesis
draws other graphs once the code changes, so both versions must read the same file).  Cases: 300
default draws, 100 float32, 30 with larger leaves, 100 with at most 3 nodes and 2 leaves; each checked
with the four CPU oracles, every third also with three subsets of them (no jacobian: no path scale;
jacobian and FD: two estimates; torch and the reference), and the cases holding a planted-bug op
(``tests/_mutants.py``: 7 wrong VJP rules, 40 cases each at most) checked with that bug in place, so
the disagreement paths (rounding noise, explanations) are compared too.

Compared per check, exactly: status, reason, skipped, excused, errors, notes, every discrepancy (kind,
oracles, message, leaf, index, abs err, tolerance, cause), every comparison (agreed, max_ratio to the
last bit) and every gradient's dtype and values.  Exit status 1 when anything differs.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from collections import Counter

HERE = pathlib.Path(__file__).resolve().parent
CPU = ["reference", "finite-differences", "jacobian", "torch-cpu"]
SUBSETS = (["reference", "finite-differences", "torch-cpu"], ["jacobian", "finite-differences"], ["torch-cpu", "reference"])
DRAWS = (({}, 300, 1), ({"dtype": "float32"}, 100, 2),
         ({"min_dims": 2, "min_side": 4, "max_side": 12, "max_elements": 1000}, 30, 3),
         ({"max_nodes": 3, "max_leaves": 2}, 100, 4))


def make_corpus(path: str) -> None:
    import gradspec as gs
    from gradspec._private.sampling import sample

    items = [json.loads(c.to_json()) for kw, n, seed in DRAWS for c in sample(gs.strategies.cases(**kw), n, seed)]
    with open(path, "w") as f:
        json.dump(items, f)


def signature(v) -> dict:
    import numpy as np

    return {
        "status": v.status, "reason": v.reason, "unjudged": v.unjudged, "nondifferentiable": v.nondifferentiable,
        "skipped": sorted(v.skipped.items()), "excused": sorted(v.excused.items()),
        "errors": sorted((k, e[0], e[1]) for k, e in v.errors.items()), "notes": [str(n) for n in v.notes],
        "discrepancies": [(d.kind, list(d.oracles), d.message, d.leaf, None if d.index is None else list(d.index),
                           repr(d.abs_err), repr(d.tolerance), None if d.cause is None else d.cause.id)
                          for d in v.discrepancies],
        "comparisons": [(list(c.oracles), bool(c.agreed), repr(float(c.max_ratio))) for c in v.comparisons],
        "results": {k: {leaf: None if g is None else [str(np.asarray(g).dtype), np.asarray(g).tolist()]
                        for leaf, g in r.items()} for k, r in v.results.items()},
    }


def dump(corpus: str, out: str) -> None:
    """Every check of the corpus with the gradspec this process imports (run in a subprocess)."""
    import gradspec as gs

    sys.path.insert(0, str(HERE.parent))  # tests._mutants: the planted VJP bugs
    from tests._mutants import MUTANT_VJPS, planted

    with open(corpus) as f:
        cases = [gs.Case.from_json(d) for d in json.load(f)]
    res = {"cpu": [signature(gs.check(c, oracles=CPU)) for c in cases]}
    for sub in SUBSETS:
        res["+".join(sub)] = [signature(gs.check(c, oracles=sub)) for c in cases[::3]]
    for name, (op, vjp) in MUTANT_VJPS.items():
        with planted(op, vjp):
            res[name] = [signature(gs.check(c, oracles=CPU)) for c in cases if op in c.ops][:40]
    with open(out, "w") as f:
        json.dump({"gradspec": gs.__file__, "checks": res}, f, default=repr)


def run_version(src: str | None, corpus: str, out: str) -> None:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pathlib.Path(src).resolve())] + [p for p in [env.get("PYTHONPATH")] if p])
    subprocess.run([sys.executable, __file__, "--dump", corpus, out], env=env, check=True, cwd=tempfile.gettempdir())


def compare(before: dict, after: dict) -> list[str]:
    diffs = []
    for key, rows in before["checks"].items():
        other = after["checks"].get(key, [])
        if len(rows) != len(other):
            diffs.append(f"{key}: {len(rows)} checks before, {len(other)} after")
            continue
        for i, (a, b) in enumerate(zip(rows, other)):
            fields = [f for f in a if a[f] != b.get(f)]
            if fields:
                diffs.append(f"{key} #{i}: " + "; ".join(f"{f}: {str(a[f])[:150]} -> {str(b.get(f))[:150]}" for f in fields))
    return diffs


def classify(key: str, a: dict, b: dict) -> tuple[str, bool]:
    """What changed in one check (``--list``), and whether it is a regression: a correct case (the 'cpu' key and
    the oracle subsets: every op as shipped) going from agree/inconclusive to disagree, or a planted bug going
    from disagree to anything else.  Classes, first that applies: ``status A -> B``; ``witnesses`` (the same
    status, an oracle refused/skipped/errored on one side only: a judgement gained or lost); ``ratio/bound`` (the
    same status, refusals and values, a comparison's max_ratio or a discrepancy's tolerance moved); ``values``
    (estimates differ); ``notes`` (text only)."""
    planted = key != "cpu" and "+" not in key
    if a["status"] != b["status"]:
        bad = (b["status"] == "disagree" and a["status"] != "disagree") if not planted else (
            a["status"] == "disagree" and b["status"] != "disagree")
        return f"status {a['status']} -> {b['status']}", bad
    if any(a[f] != b[f] for f in ("skipped", "excused", "errors", "unjudged", "nondifferentiable")) or (
            set(a["results"]) != set(b["results"])):
        return "witnesses", False
    if a["results"] != b["results"]:
        return "values", False
    if a["comparisons"] != b["comparisons"] or a["discrepancies"] != b["discrepancies"]:
        return "ratio/bound", False
    return "notes", False


def listing(before: dict, after: dict) -> list[str]:
    """One line per differing check: key #i, its class, bad or not, and what moved (``--list``)."""
    out = []
    for key, rows in before["checks"].items():
        for i, (a, b) in enumerate(zip(rows, after["checks"].get(key, []))):
            fields = [f for f in a if a[f] != b.get(f)]
            if not fields:
                continue
            what, bad = classify(key, a, b)
            lost = sorted(set(a["results"]) - set(b["results"]))
            won = sorted(set(b["results"]) - set(a["results"]))
            extra = (f" witnesses lost {lost}" if lost else "") + (f" gained {won}" if won else "")
            ratios = [(x[0], x[2], y[2]) for x, y in zip(a["comparisons"], b["comparisons"]) if x != y]
            out.append(f"{'BAD ' if bad else ''}{key} #{i} [{what}]{extra} fields {fields}"
                       + (f" ratios {ratios[:3]}" if ratios else ""))
    return out


def _load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", help="an older checkout (its gradspec/ is imported in the 'before' subprocess)")
    p.add_argument("--corpus", default=None, help="the cases (JSON list); drawn with this checkout and saved if missing")
    p.add_argument("--json", default=None, help="write both versions' verdicts here")
    p.add_argument("--list", action="store_true", help="list every differing check with its class (classify())")
    p.add_argument("--dump", nargs=2, metavar=("CORPUS", "OUT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.dump:
        dump(*a.dump)
        return 0
    if not a.before:
        p.error("--before DIR is required (an older checkout)")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = a.corpus or os.path.join(tmp, "corpus.json")
        if not os.path.exists(corpus):
            make_corpus(corpus)
        outs = {}
        for name, src in (("before", a.before), ("after", None)):
            outs[name] = os.path.join(tmp, f"{name}.json")
            run_version(src, corpus, outs[name])
        before, after = (_load(outs[k]) for k in ("before", "after"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"before": before, "after": after}, f)
    total = sum(len(v) for v in before["checks"].values())
    counts = Counter(r["status"] for rows in after["checks"].values() for r in rows)
    diffs = compare(before, after)
    print(f"before: {before['gradspec']}\nafter:  {after['gradspec']}")
    print(f"{total} checks ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}): {len(diffs)} differ")
    if a.list:
        rows = listing(before, after)
        kinds = Counter(r.split("[", 1)[1].split("]", 1)[0] for r in rows)
        print(f"classes: {', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}; "
              f"regressions (correct -> disagree, planted bug -> not disagree): {sum(r.startswith('BAD') for r in rows)}")
        for r in rows:
            print("  " + r)
        return 1 if any(r.startswith("BAD") for r in rows) else 0
    for d in diffs[:20]:
        print("  " + d)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
