"""tryout7's silent OKs (findings 5, 6, 8): a run where part of the work never ran, or that stopped on an error, is
never "agree"; a domain too narrow to draw from gets a clear answer, never a bare traceback."""

from __future__ import annotations

import pytest

import gradspec as gs
from tests import _tryout7_code as T


def _x(n=3):
    import torch

    return torch.linspace(-1.2, 0.9, n, dtype=torch.float64)


def test_float32_half_never_ran_is_not_ok():
    """#5: fn's forward raises on every float32 case: float32 was never checked, so the run is no OK; the reason
    names the error and the way to say float64 only."""
    r = gs.verify_torch_function(T.F64OnlyForward.apply, example_inputs=(_x(),), max_examples=20, seed=50)
    assert r.status == "inconclusive", r.summary()
    assert "float32" in r.reason and "TypeError: float64 only" in r.reason, r.reason
    assert "dtypes=('float64',)" in r.reason, r.reason


def test_float64_only_declared_agrees():
    r = gs.verify_torch_function(T.F64OnlyForward.apply, example_inputs=(_x(),), max_examples=10, seed=50,
                                 dtypes=("float64",))
    assert r.status == "agree", r.summary()


def test_search_stopped_by_an_error_is_not_ok():
    """#6: the search stops on gradspec's own "fix the declaration" error (fn's output shape is not the
    signature's for a batched A): no OK from the cases before it; the reason carries the error."""
    r = gs.verify_torch_function(T.SolveOk.apply, signature="(n,n),(n)->(n)", max_examples=40, seed=1)
    assert r.status == "inconclusive", r.summary()
    assert "fix the declaration" in r.reason and "stopped" in r.reason, r.reason
    assert r.summary().splitlines()[0].count("INCONCLUSIVE") == 1


def test_fuzz_stopped_by_an_error_is_not_ok(tmp_path):
    """#6 in `gradspec fuzz`: an op whose forward breaks its declared shape rule stops the search; exit 3 with the
    error as the reason, not exit 0 from the cases before it."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("GRADSPEC_REPORT_DIR", "PYTEST_XDIST_WORKER")}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run([sys.executable, "-m", "gradspec.cli", "fuzz", "--ops", "tests._tryout7_code:shapey",
                          "--max-examples", "60", "--seed", "3", "--oracles", "reference,jacobian",
                          "--report-dir", str(tmp_path / "rep")], cwd=root, env=env, capture_output=True, text=True,
                         timeout=300)
    s = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert run.returncode == 3, run.stdout + run.stderr
    assert s["status"] == "inconclusive" and "fix the declaration" in s["reason"], s["reason"]


# #8: intervals gradspec cannot draw from (values keep 1.5e-3 * max(1, |edge|) inside each edge, magnitudes up to 1e3)
NARROW = {"around-kink": (0.499, 0.501), "around-zero": (-1e-3, 1e-3), "above-1e3": (2000.0, 3000.0)}


@pytest.mark.parametrize("lo,hi", list(NARROW.values()), ids=list(NARROW))
def test_undrawable_domain_is_a_clear_error(lo, hi):
    with pytest.raises(ValueError, match=r"verify_torch_function: no value can be drawn from interval") as e:
        gs.verify_torch_function(T.soft, example_inputs=(_x(),), domain=gs.domains.interval(lo, hi), max_examples=5,
                                 seed=0)
    assert "gs.check" in str(e.value)  # the way to check chosen points instead


def test_undrawable_op_domain_is_a_clear_error():
    op = gs.Op("t7_soft_narrow", forward=T.soft_np, vjp=T.soft_np_vjp, domain=gs.domains.interval(0.499, 0.501))
    with pytest.raises(ValueError, match=r"verify_op: no value can be drawn from interval \(0.499, 0.501\)"):
        gs.verify_op(op, max_examples=5, seed=1)


def test_drawable_narrow_domain_still_runs():
    r = gs.verify_torch_function(T.soft, example_inputs=(_x(),), domain=gs.domains.interval(0.49, 0.51),
                                 max_examples=5, seed=0)
    assert r.status == "agree", r.summary()


# #11: seconds= made a correct DEQ flaky: the budget ended inside a slow (float32, 10000-iteration) case, which was cut
# and left the run inconclusive -- or not, by a few milliseconds. A case that merely started late (it had run no
# longer than the cases before it take) is a case the budget did not reach; only a case running far longer than any
# finished one (a hang, most likely) keeps the run from an "agree". (case durations in s; budget 0.6 s + 0.5 s grace)
CUTS = {
    "started-late": ([0.3, 0.3, 0.9], False),
    "hang-after-quick-cases": ([0.05, 0.05, 5.0], True),
    "first-case-cut": ([5.0], True),
}


@pytest.mark.parametrize("durations, inconclusive", CUTS.values(), ids=list(CUTS))
def test_a_case_cut_by_the_budget(durations, inconclusive):
    import time

    from gradspec.result import Result
    from gradspec.verify.numerics import with_deadline

    r = Result(target="fn", what="torch function", seed=1)
    run = with_deadline(lambda d: time.sleep(d) or [], r, 0.6, "fn", "")
    for d in durations:
        assert run(d) == []
    assert bool(r.cut) == inconclusive, (r.cut, r.notes)
    if not inconclusive:
        assert any("started late" in n for n in r.notes), r.notes


def test_a_float32_overflow_is_said_in_the_summary():
    """#13a: the float32 forward overflowed to inf on some cases (not judged there): the summary says so above the
    notes, and the note no longer reads "(the output's largest value 0)"."""
    import torch

    # (interval(90, 100): exp(x) overflows float32 (max 3.4e38 = e^88.7) at every value drawn there)
    r = gs.verify_torch_function(T.lse_naive, example_inputs=(torch.full((3, 4), 95.0, dtype=torch.float64),),
                                 domain=gs.domains.interval(90.0, 100.0), max_examples=40, seed=15)
    head = r.summary().split("notes:")[0]
    assert "float32" in head and "not finite" in head and "overflow" in head, r.summary()
    # every float32 case drawn there overflowed: float32 was never checked, so no "OK"
    assert r.status == "inconclusive" and "float32 was never checked" in r.reason, r.summary()
    assert not any("largest value 0)" in n for n in r.notes), r.notes
    assert sum(n.startswith("float32 forward vs float64 forward") for n in r.notes) <= 1, r.notes


def test_verify_op_says_when_no_float32_case_ran():
    """#5 in verify_op: the generator drops the float32 draws of an op whose forward refuses them; the run says so."""
    import numpy as np

    op = gs.Op("t7_f64only", forward=T.f64_only_np, vjp=lambda g, x, out: (g * np.cos(x),))
    r = gs.verify_op(op, max_examples=20, seed=3)
    assert any("no case of this run was float32" in n and "TypeError: float64 only" in n for n in r.notes), r.notes
