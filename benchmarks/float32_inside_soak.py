"""Error rates on code that computes in float32 inside (``x.float()`` ... cast back): false alarms on correct
Functions, bugs found on their wrong twins, one ``verify_*`` run per seed.  ``--set inside``: the float32
result is the output (``tests/_float32_inside.py``); ``--set hidden``: the float32 part is hidden behind float64
arithmetic in the same output (``x + tanh(x.float()).double()``, ``tests/_float32_hidden.py``); ``--set float64``:
correct float64 code that resolves its inputs coarsely (a naive logsumexp over domain=interval(-1000, 1000), whose
exp values underflow near x = -735; an LU solve of condition 1e8 fed by 1e-8 tanh(M)), where "float32 noted"
counts false labels ("computes in float32 inside"); ``--set all``: the three.

Run from the repository root (the Functions are read from this checkout's ``tests/_float32_inside.py``;
``gradspec`` from the first one on ``sys.path``, so an older checkout goes first on PYTHONPATH for "before")::

    PYTHONPATH=. python benchmarks/float32_inside_soak.py [--seeds 20] [--which correct|wrong|both] [--set inside|hidden|both|float64|all]
    PYTHONPATH=OLD_CHECKOUT python benchmarks/float32_inside_soak.py ...

Prints, per Function, the seeds whose run disagreed (correct code: false alarms) or did not (wrong code:
missed), and the inconclusive runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _functions(name="_float32_inside"):
    spec = importlib.util.spec_from_file_location(f"{name}_soak_fns", os.path.join(HERE, "tests", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tables(which_set):
    """(correct, wrong): rows (label, Function or op, verify_torch_function keywords, None for a numpy op)."""
    correct, wrong = [], []
    if which_set in ("inside", "both", "all"):
        F = _functions()
        correct += [("tanh", F.TanhThroughFloat32, {"arity": 1}), ("exp(sin)", F.ExpSinThroughFloat32, {"arity": 1}),
                    ("x*y", F.MulThroughFloat32, {"arity": 2}), ("sum x^2", F.SumSquaresThroughFloat32, {"arity": 1}),
                    ("numpy op tanh", F.np_tanh32, None)]
        wrong += [("tanh +1e-3", F.TanhThroughFloat32Off, {"arity": 1}), ("tanh x1.01", F.TanhThroughFloat32Scaled, {"arity": 1}),
                  ("exp(sin) x1.01", F.ExpSinThroughFloat32Scaled, {"arity": 1}),
                  ("x*y, -dy", F.MulThroughFloat32WrongSign, {"arity": 2}),
                  ("sum x^2 +1e-3", F.SumSquaresThroughFloat32Off, {"arity": 1}), ("numpy op tanh x1.01", F.np_tanh32_off, None)]
    if which_set in ("hidden", "both", "all"):
        H = _functions("_float32_hidden")
        correct += H.CORRECT
        wrong += H.WRONG
    if which_set in ("float64", "all"):
        correct += _float64_rows()
    return correct, wrong


def _float64_rows():
    """Correct float64 code whose outputs step far above float64 rounding at float32-sized scales: no run of
    it may say "computes in float32 inside" (tests/test_float32_false_label.py has one seed of each)."""
    import numpy as np
    import torch

    import gradspec as gs
    from tests import _tryout4_verdicts as T4
    from tests import _tryout5_domain_code as T5

    x = torch.as_tensor(np.random.default_rng(0).standard_normal((3, 4)))
    return [("logsumexp naive, wide", T5.LSENaive, {"example_inputs": (x,), "domain": gs.domains.interval(-1000, 1000)}),
            ("LU solve cond 1e8", T4.solve_fn(T4.Solve, 8), {"example_inputs": T4.example(0), "dtypes": ("float64",)}),
            ("LU solve cond 1e6", T4.solve_fn(T4.Solve, 6), {"example_inputs": T4.example(0), "dtypes": ("float64",)})]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--which", choices=["correct", "wrong", "both"], default="both")
    p.add_argument("--set", choices=["inside", "hidden", "both", "float64", "all"], default="inside", dest="which_set")
    a = p.parse_args()
    import gradspec as gs

    seeds = list(range(1, a.seeds + 1))
    correct, wrong = _tables(a.which_set)

    def run(fn, kw, seed):
        r = gs.verify_op(fn, seed=seed) if kw is None else gs.verify_torch_function(getattr(fn, "apply", fn), seed=seed, **kw)
        seen[0] += any("float32 inside" in n for n in r.notes)
        return r.status

    t0 = time.process_time()
    print(f"gradspec from {os.path.dirname(gs.__file__)}; seeds 1..{a.seeds}, 60 cases per run")
    for label, table, bad in (("correct", correct, "disagree"), ("wrong", wrong, None)):
        if a.which not in (label, "both"):
            continue
        for name, fn, kw in table:
            seen = [0]
            st = {s: run(fn, kw, s) for s in seeds}
            if bad:
                hits = [s for s, v in st.items() if v == bad]
                print(f"{label:8} {name:22} false alarms {len(hits)}/{len(seeds)} {hits}  "
                      f"inconclusive {sum(v == 'inconclusive' for v in st.values())}  "
                      f"float32 noted {seen[0]}/{len(seeds)}", flush=True)
            else:
                missed = [s for s, v in st.items() if v != "disagree"]
                print(f"{label:8} {name:22} found {len(seeds) - len(missed)}/{len(seeds)}  missed {missed}", flush=True)
    print(f"CPU {time.process_time() - t0:.0f} s")


if __name__ == "__main__":
    main()
