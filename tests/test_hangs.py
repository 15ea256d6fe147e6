"""Code that hangs never hangs gradspec and never reads as OK (tryout3 finding 1).

A hang is a ``timeout`` finding wherever the code under test is run: the generated case, the shrinking and
the reduction of the search, and the diagnosis of a finding (which re-runs the code on one node at other
upstream gradients).  A time budget that runs out while a case has been running for long is no "agree":
the run is inconclusive and says which case was cut.  Each scenario runs in a child process with a bound,
so a regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.test_cli import gradspec, summary

pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="per-case timeouts need signal.setitimer")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each scenario prints {"status", "kinds", "causes", "reason", "seconds"} as JSON on its last line.
PRELUDE = textwrap.dedent('''
    import json, time
    import numpy as np
    import gradspec as gs
    from gradspec.verify import numerics
    from gradspec.guard import guarded_check
    from tests import _hangs
    from gradspec._private import case_budget
    numerics.CASE_TIMEOUT = 2.0  # the verify_* per-case deadline (60 s by default), short for the test
    case_budget.DIAGNOSIS_MIN = 3.0  # (30 s by default) the diagnosis of these one-node cases takes < 0.5 s
    t0 = time.perf_counter()

    def show(r, ds=None):
        ds = r.discrepancies if ds is None else ds
        print(json.dumps({"status": r.status, "kinds": sorted(d.kind for d in ds),
                          "causes": [d.cause.summary if d.cause else "" for d in ds], "reason": r.reason,
                          "seconds": time.perf_counter() - t0}))

    def case(op, n):
        return gs.Case.build({"x": np.linspace(0.1, 0.9, n)}, [("y", op, ["x"], {})], ["y"], [np.ones(n)])
''')

SCENARIOS = {
    # guarded_check: the alarm fires inside the user's vjp, whose wrapper re-raises it as its own error
    "guarded-hang": "show(guarded_check(case('my_hang', 5), ['reference', 'jacobian'], timeout=1.0))",
    "guarded-hang-isolate": "show(guarded_check(case('my_hang', 5), ['reference', 'jacobian'], timeout=1.0, "
                            "isolate=True))",
    # a value finding whose diagnosis (fresh upstream gradients) hangs
    "guarded-diagnosis-hangs": "show(guarded_check(case('my_wrong_then_hang', 3), ['reference', 'jacobian'], "
                               "timeout=1.0))",
    # the search's order: the case checked with the diagnosis deferred, then its finding explained (Driver._finish)
    "search-diagnosis-hangs": textwrap.dedent('''
        from gradspec._private.case_budget import case_timeout
        from gradspec.diagnose import deferred, diagnosis_timeouts, explain
        with case_timeout(1.0):
            with deferred():
                v = guarded_check(case('my_wrong_then_hang', 3), ['reference', 'jacobian'], timeout=1.0)
            d = next(x for x in v.discrepancies if x.kind == 'value')
            d.verdict = v
            explain(d)
        show(v, v.discrepancies + diagnosis_timeouts([d]))
    '''),
    # the search: generated case, shrinking, reduction
    "verify_torch_function-max-examples": "show(gs.verify_torch_function(_hangs.HangsInBackward.apply, arity=1, "
                                          "max_examples=10, seed=0))",
    # the time budget runs out inside a hanging case: never "agree"
    # (a case deadline of 30 s: the budget, not the deadline, cuts the hanging case; the user saw "OK - 2 cases")
    "verify_torch_function-seconds": "numerics.CASE_TIMEOUT = 30.0\n"
                                     "show(gs.verify_torch_function(_hangs.HangsInBackward.apply, arity=1, "
                                     "seconds=3, seed=0))",
}
NEEDS_TORCH = {"verify_torch_function-max-examples", "verify_torch_function-seconds"}


def _run(snippet: str, bound: float) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-c", PRELUDE + snippet], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=bound)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_hang_is_a_timeout_finding_and_gradspec_returns(name):
    if name in NEEDS_TORCH:
        pytest.importorskip("torch")
    got = _run(SCENARIOS[name], bound=150)
    if name == "verify_torch_function-seconds":
        # the hanging case is cut by the budget; on a loaded machine the budget can run out before a case was
        # checked at all: inconclusive either way, and the reason names the time budget (never "agree")
        assert got["status"] == "inconclusive" and "time budget" in got["reason"], got
        return
    assert got["status"] == "disagree", got
    assert "timeout" in got["kinds"], got
    assert "raised" not in got["kinds"], got  # the alarm re-raised by the user op's wrapper is still a timeout
    if "diagnosis" in name:
        assert "value" in got["kinds"], got  # the finding itself is kept


def test_fuzz_with_an_op_that_hangs_ends_with_a_timeout_finding(tmp_path):
    """The user's fuzz_stacks.py: a vjp that hangs on more than 3 elements, --case-timeout 1."""
    out = tmp_path / "rep"
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1")
    env.pop("GRADSPEC_REPORT_DIR", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = gradspec("fuzz", "--ops", "tests._hangs:hang_op", "--oracles", "reference,jacobian", "--case-timeout", 1,
                    "--max-examples", 20, "--seed", 1, "--report-dir", out, cwd=ROOT, env=env, timeout=150)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert [r["kind"] for r in summary(out)["reports"]] == ["timeout"], proc.stdout


@pytest.mark.parametrize("spent, words", [("time", "the time budget ran out inside a case"),
                                          (None, "a check was cut part-way")], ids=["budget-cut", "other"])
def test_hypothesis_stopping_a_round_is_said_in_gradspecs_words(spent, words):
    """tryout4 #13: a hanging backward cut by the time budget left Hypothesis' raw "FlakyStrategyDefinition:
    Inconsistent data generation! ... Is your data generation depending on external state?" as a note."""
    from hypothesis.errors import FlakyStrategyDefinition

    from gradspec.search import Driver

    d = Driver.__new__(Driver)
    d.errors, d.mode, d._last = [], "generate", None
    d.deadline = 0.0 if spent == "time" else None
    d.max_examples, d.cases = None, 0

    def prop():
        raise FlakyStrategyDefinition("Inconsistent data generation! Data generation behaved differently between "
                                      "test cases. Is your data generation depending on external state?")

    assert d._round(prop) == "error"
    (text,) = d.errors
    assert words in text and "give more time" in text and "external state" not in text, text


# A user forward that hangs where gradspec calls it before any case exists (reliability review H5a): the graph
# generator's shape probe and value repair, and the shape learning of verify_torch_function / verify_op(example_inputs=).
FORWARD_SCENARIOS = {
    # the probe is cut, the node kept: the case's own check meets the hang (a timeout finding on the op)
    "verify_op-probe": "from tests import _hangs_forward as H\n"
                       "show(gs.verify_op(H.forward_hangs, max_examples=3, seed=0))",
    # learning the shapes from the example: no case can run; inconclusive, naming the op and the probe
    "verify_op-example": "from tests import _hangs_forward as H\n"
                         "show(gs.verify_op(H.forward_hangs, example_inputs=(np.ones(3),), max_examples=3, seed=0))",
    "verify_torch_function-arity": "from tests import _hangs_forward as H\n"
                                   "show(gs.verify_torch_function(H.ForwardHangs.apply, arity=1, max_examples=3, seed=0))",
    "verify_torch_function-example": "import torch\nfrom tests import _hangs_forward as H\n"
                                     "show(gs.verify_torch_function(H.ForwardHangs.apply, example_inputs=(torch.ones(3),), "
                                     "max_examples=3, seed=0))",
    # a case whose forward hangs: each of its runs is cut by its own timer (the determinism probe and the forward's
    # error check of check(), the jacobian's finite-difference stand-in), not by the whole check's bound (62 s at
    # 1 s) after a localisation of the hang
    "guarded-forward-hangs": "from tests import _hangs_forward\n"
                             "v = guarded_check(case('my_forward_hangs', 3), ['reference', 'jacobian'], timeout=1.0)\n"
                             "print(json.dumps([d.message for d in v.discrepancies]))\nshow(v)",
}


@pytest.mark.parametrize("name", list(FORWARD_SCENARIOS))
def test_a_forward_that_hangs_before_any_case_is_cut_and_reported(name):
    if "torch" in name:
        pytest.importorskip("torch")
    proc = _run_raw(FORWARD_SCENARIOS[name], bound=240)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    if name.endswith(("-example", "-arity")):  # no case can exist: inconclusive, never agree, naming what hung
        assert got["status"] == "inconclusive", got
        assert "to learn its shapes" in got["reason"] and "did not return within 2 s" in got["reason"], got
        assert ("my_forward_hangs" in got["reason"]) == name.startswith("verify_op"), got
        return
    assert got["status"] == "disagree" and "timeout" in got["kinds"], got
    if name == "guarded-forward-hangs":
        messages = json.loads(proc.stdout.strip().splitlines()[-2])
        assert not any("in all" in m or "diagnosis" in m for m in messages), messages


def _run_raw(snippet: str, bound: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-c", PRELUDE + snippet], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=bound)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_fuzz_with_a_forward_that_hangs_in_the_shape_probe_ends_with_a_timeout_finding(tmp_path):
    """H5a: the graph generator's shape probe ran the user's forward with no timeout: fuzz --case-timeout 1 never
    ended (killed by the outer timeout after 0 cases)."""
    out = tmp_path / "rep"
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1")
    env.pop("GRADSPEC_REPORT_DIR", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = gradspec("fuzz", "--ops", "tests._hangs_forward:forward_hangs", "--oracles", "reference,jacobian",
                    "--case-timeout", 1, "--max-examples", 3, "--seed", 1, "--report-dir", out, cwd=ROOT, env=env,
                    timeout=400)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    reports = summary(out)["reports"]
    assert [r["kind"] for r in reports] == ["timeout"], proc.stdout
    assert reports[0]["ops"] == ["my_forward_hangs"], reports
