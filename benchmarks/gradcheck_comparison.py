"""torch.autograd.gradcheck vs gradspec's verify_op on the same planted user-op bugs.

Each planted bug of ``tests/_planted.py`` (a ``gs.Op`` with a broken VJP) is checked twice:

* with ``torch.autograd.gradcheck`` at a typical input, the way such ops are usually tested:
  ``torch.randn`` of a typical shape in float64 (the same shape for every operand of an
  elementwise op, matrices for matmul, a typical param), the op wrapped in an
  ``autograd.Function`` whose backward is the op's own VJP;
* with ``gs.verify_op(op, seed=...)`` at its default budget.

The table says which of the two finds each bug and how long it takes (gradcheck: the call;
gradspec: the time to the first discrepancy, and the whole run).  ``--json FILE`` also writes the
rows as JSON.

Run it from the repository root::

    python benchmarks/gradcheck_comparison.py [--seed N] [--max-examples N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import gradspec as gs  # noqa: E402
from tests import _planted as P  # noqa: E402

# Typical inputs, as a developer would write them for gradcheck: shapes, and params.
TYPICAL = {
    "(),()->()": ([(3, 4), (3, 4)], {}),
    "()->()": ([(3, 4)], {}),
    "(n)->()": ([(3, 4)], {}),
    "(n)->(n)": ([(3, 4)], {}),
    "(m,n),(n,p)->(m,p)": ([(3, 4), (4, 2)], {}),
}
TYPICAL_BY_OP = {
    "pl_perm_inv": ([(2, 3, 4)], {"p": (2, 0, 1)}),
    "pl_take_assign": ([(3, 5)], {"idx": (0, 2, 4)}),
    "pl_cat_split": ([(3, 4), (3, 4)], {}),
    "pl_soft_nolam": ([(3, 4)], {"lam": 0.5}),
}


def _as_function(op, params):
    """The user op as a torch.autograd.Function (backward = the op's own numpy VJP)."""

    class UserOpFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *xs):
            arrays = [x.detach().numpy() for x in xs]
            out = np.asarray(op.forward(*arrays, **params), dtype=np.float64)
            ctx.arrays, ctx.out = arrays, out
            return torch.from_numpy(out.copy())

        @staticmethod
        def backward(ctx, g):
            res = op.user_vjp(g.detach().numpy(), *ctx.arrays, ctx.out, **params)
            if isinstance(res, np.ndarray) or res is None:
                res = (res,)
            return tuple(None if r is None else torch.as_tensor(np.asarray(r)) for r in res)

    return UserOpFunction.apply


def run_gradcheck(op) -> dict:
    shapes, params = TYPICAL_BY_OP.get(op.name) or TYPICAL[op.signature]
    torch.manual_seed(0)
    xs = [torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in shapes]
    fn = _as_function(op, params)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ok = torch.autograd.gradcheck(fn, tuple(xs), raise_exception=False)
        outcome = "passes" if ok else "found"
        err = None
    except Exception as e:  # noqa: BLE001 - an error from the backward is a finding too
        outcome, err = "found (error)", f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
    return {"outcome": outcome, "seconds": time.perf_counter() - t0, "input": " ".join(map(str, shapes))
            + (f" {params}" if params else ""), "error": err}


def run_gradspec(op, seed: int, max_examples: int | None) -> dict:
    t0 = time.perf_counter()
    r = gs.verify_op(op, seed=seed, max_examples=max_examples)
    return {"outcome": "passes" if r.ok else "found", "seconds": time.perf_counter() - t0,
            "time_to_find": r.time_to_first, "cases_to_find": r.cases_to_first, "cases": r.cases_run,
            "kinds": sorted(set(r.kinds))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-examples", type=int, default=None, help="gradspec budget (default: its default)")
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    ap.add_argument("--only", default="", help="substring filter on bug ids")
    args = ap.parse_args(argv)
    rows = []
    for bug, p in P.BUGS.items():
        if p.how != "op" or args.only not in bug:
            continue
        gc = run_gradcheck(p.target)
        gsr = run_gradspec(p.target, args.seed, args.max_examples)
        rows.append({"bug": bug, "family": p.family, "op": p.target.name, "gradcheck": gc, "gradspec": gsr})
        print(f"  {bug}: gradcheck {gc['outcome']}, gradspec {gsr['outcome']}", file=sys.stderr)

    print("| planted bug | family | gradcheck at a typical input | gradcheck s | gradspec verify_op | time to find s "
          "| cases to find | kinds |")
    print("|---|---|---|---:|---|---:|---:|---|")
    for r in rows:
        gc, g = r["gradcheck"], r["gradspec"]
        ttf = "" if g["time_to_find"] is None else f"{g['time_to_find']:.3f}"
        print(f"| {r['bug']} | {r['family']} | {gc['outcome']} (`{gc['input']}`) | {gc['seconds']:.3f} | "
              f"{g['outcome']} | {ttf} | {g['cases_to_find'] or ''} | {', '.join(g['kinds'])} |")
    n = len(rows)
    gc_found = sum(r["gradcheck"]["outcome"] != "passes" for r in rows)
    gs_found = sum(r["gradspec"]["outcome"] == "found" for r in rows)
    ttfs = [r["gradspec"]["time_to_find"] for r in rows if r["gradspec"]["time_to_find"] is not None]
    summary = {
        "bugs": n,
        "gradcheck_found": gc_found,
        "gradspec_found": gs_found,
        "gradspec_median_time_to_find": statistics.median(ttfs) if ttfs else None,
        "gradspec_max_time_to_find": max(ttfs) if ttfs else None,
        "gradcheck_median_seconds": statistics.median(r["gradcheck"]["seconds"] for r in rows) if rows else None,
        "gradspec_median_run_seconds": statistics.median(r["gradspec"]["seconds"] for r in rows) if rows else None,
        "seed": args.seed,
    }
    print()
    print(f"gradcheck found {gc_found} of {n}; gradspec found {gs_found} of {n}; gradspec median time to find "
          f"{summary['gradspec_median_time_to_find'] or float('nan'):.3f} s (max "
          f"{summary['gradspec_max_time_to_find'] or float('nan'):.3f} s); median gradcheck call "
          f"{summary['gradcheck_median_seconds'] or float('nan'):.3f} s, median full verify_op run "
          f"{summary['gradspec_median_run_seconds'] or float('nan'):.2f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"summary": summary, "rows": rows}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
