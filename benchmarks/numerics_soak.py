"""Error rates of gradspec on real users' numerical code (issue 13), and torch's thread cost.

Three measurements, each bounded (a few minutes in all on 2 cores):

1. ``points``: each planted family of ``tests/_planted_real.py`` (numpy user ops) at N points drawn
   from a fixed-seed generator -- integer ties for the projection, poles at 1e-5..1 from x,
   condition number 1e5 solves alone and chained -- through ``gs.check`` with reference, finite
   differences and the jacobian (finite-difference JVPs): false alarms on the correct rule,
   bugs caught on the buggy twin, non-differentiable skips and oracle refusals.
2. ``verify``: ``gs.verify_torch_function`` on each correct planted Function and its buggy twin
   (several seeds): false alarms in N cases, found/planted.
3. ``threads``: one small call of a planted Function (forward + backward) and one ``gs.check`` of a
   case built on it, with torch's default intra-op threads and with one.

Run::

    PYTHONPATH=. python benchmarks/numerics_soak.py [--points 300] [--cases 100] [--seeds 3]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gradspec as gs  # noqa: E402
from tests import _planted_real as R  # noqa: E402
from tests.test_numerics import _pole_point, _solve_point, _sparsemax_point  # noqa: E402

ORACLES = ["reference", "finite-differences", "jacobian"]


FAMILIES = {
    "kinked projection (sparsemax)": (R.np_sparsemax_op, None, _sparsemax_point, 1),
    "pole 1/(x-a)": (R.np_pole_op, R.np_pole_bug, _pole_point, 1),
    "solve, cond 1e5": (R.np_illsolve_op, R.np_illsolve_bug, _solve_point, 1),
    "solve, cond 1e5, twice (cond ~1e10)": (R.np_illsolve_op, R.np_illsolve_bug, _solve_point, 2),
}


def _case(op, leaves, seed, depth):
    nodes = [("y0", op.name, list(leaves), {})]
    for k in range(1, depth):
        nodes.append((f"y{k}", op.name, [f"y{k - 1}"], {}))
    return gs.Case.build(leaves, nodes, [nodes[-1][0]], [np.asarray(seed, dtype=float)])


def points(n: int) -> None:
    print(f"\n## gs.check at {n} drawn points per family (reference, finite differences, jacobian)\n")
    print("| family | false alarms | bugs caught | non-differentiable skips | FD refusals | FD-JVP refusals | s |")
    print("|---|---|---|---|---|---|---|")
    for name, (ok, bug, draw, depth) in FAMILIES.items():
        rng = np.random.default_rng(13)
        alarms = caught = nondiff = fd_ref = jac_ref = 0
        t = time.perf_counter()
        for _ in range(n):
            leaves, seed = draw(rng)
            v = gs.check(_case(ok, leaves, seed, depth), oracles=ORACLES)
            alarms += bool(v.discrepancies)
            nondiff += bool(v.nondifferentiable)
            fd_ref += "finite-differences" in v.skipped and not v.nondifferentiable
            jac_ref += "jacobian" in v.skipped and not v.nondifferentiable
            if bug is not None:
                caught += bool(gs.check(_case(bug, leaves, seed, depth), oracles=ORACLES).discrepancies)
        bugs = f"{caught}/{n}" if bug is not None else "-"
        print(f"| {name} | {alarms}/{n} | {bugs} | {nondiff} | {fd_ref} | {jac_ref} | {time.perf_counter() - t:.1f} |")


def verify(cases: int, seeds: int) -> None:
    print(f"\n## gs.verify_torch_function, {cases} cases x {seeds} seeds per Function\n")
    print("| family | correct: runs with a false alarm | cases | non-differentiable skips | bug found in | s |")
    print("|---|---|---|---|---|---|")
    for name, f in R.FAMILIES.items():
        t = time.perf_counter()
        alarms, ran, nondiff, found = 0, 0, 0, 0
        for seed in range(seeds):
            r = gs.verify_torch_function(f.ok, max_examples=cases, seed=seed, **f.kwargs)
            alarms += not r.ok
            ran += r.cases_run
            nondiff += r.nondifferentiable
            if not r.ok:
                print(f"  false alarm ({name}, seed {seed}): {r.discrepancies[0].message[:300]}", file=sys.stderr)
            b = gs.verify_torch_function(f.bug, max_examples=cases, seed=seed, **f.kwargs)
            found += not b.ok
        print(f"| {name} | {alarms}/{seeds} | {ran} | {nondiff} | {found}/{seeds} | {time.perf_counter() - t:.0f} |")


def _timeit(fn, reps=300) -> float:
    for _ in range(20):
        fn()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def threads() -> None:
    import torch

    from gradspec._private import threads as T

    default = torch.get_num_threads()
    z = torch.tensor([0.3, -1.2, 0.7, 2.0, 0.1], dtype=torch.float64, requires_grad=True)
    a = torch.randn(6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, requires_grad=True)

    def small_call():
        R.Sparsemax.apply(z).sum().backward()
        R.IllSolve.apply(a, b).sum().backward()

    out = collections.OrderedDict()
    for label, n in ((f"torch default ({default} threads)", default), ("1 thread", 1)):
        torch.set_num_threads(n)
        call = _timeit(small_call)
        torch.set_num_threads(default)
        os.environ[T.ENV] = str(n)  # what gradspec sets inside its oracles
        t = time.perf_counter()
        r = gs.verify_torch_function(R.Sparsemax.apply, signature="(n)->(n)", max_examples=40, seed=0)
        out[label] = (call, time.perf_counter() - t, r.cases_run)
    os.environ.pop(T.ENV, None)
    print("\n## torch threads\n")
    print(f"machine: {os.cpu_count()} CPUs (shared), torch {torch.__version__}\n")
    print("| setting | small Function calls (2 x fwd + bwd) | verify_torch_function(Sparsemax), 40 cases |")
    print("|---|---|---|")
    for label, (call, run, n) in out.items():
        print(f"| {label} | {call * 1e3:.3f} ms | {run:.2f} s ({n} cases) |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--points", type=int, default=300)
    p.add_argument("--cases", type=int, default=100)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--only", choices=["points", "verify", "threads"], default=None)
    a = p.parse_args()
    if a.only in (None, "threads"):
        threads()
    if a.only in (None, "points"):
        points(a.points)
    if a.only in (None, "verify"):
        verify(a.cases, a.seeds)


if __name__ == "__main__":
    main()
