"""gradspec's pytest plugin (entry point ``pytest11``), tested with ``pytester``: profiles, HTML reports of
failing gradient checks in a user's own tests, Hypothesis shrinking, ``pytest -n 2``."""

from __future__ import annotations

import json
import os
import sys

import pytest

pytest_plugins = ["pytester"]

USER_TESTS = '''
import numpy as np
import gradspec as gs
from gradspec.engines import ReferenceEngine
from gradspec.testing import assert_gradients

ORACLES = ["reference", "jacobian"]


class ExpOffByHalf(ReferenceEngine):
    name = "mine"

    def apply(self, op, *args, **params):
        from gradspec import engine as E
        y = E.call(op, *args, **params)
        if op == "exp":
            y = y + (args[0] - args[0].detach()) * 0.5
        return y


def case(*ops):
    nodes, last = [], "x"
    for k, op in enumerate(ops):
        nodes.append((f"h{k}", op, [last], {}))
        last = f"h{k}"
    return gs.Case.build({"x": np.array([0.5, 2.0])}, nodes, [last], [np.ones(2)])


def test_agrees(gradspec_check):
    gradspec_check(case("neg", "tanh"), oracles=ORACLES, engine=ExpOffByHalf())


def test_fixture_reports(gradspec_check):
    gradspec_check(case("exp"), oracles=ORACLES, engine=ExpOffByHalf())


def test_helper_reports():
    assert_gradients(case("neg", "exp"), oracles=ORACLES, engine=ExpOffByHalf())
'''


def _folders(d) -> list:
    return sorted(p for p in d.iterdir() if p.is_dir() and p.name.startswith("d-")) if d.exists() else []


@pytest.fixture
def restore_hypothesis_profile():
    """The inner pytest sessions load a profile in this very process: put the outer one back."""
    from hypothesis import settings

    before = settings._current_profile
    yield
    settings.load_profile(before)


@pytest.fixture
def clean_env(monkeypatch):
    for k in ("GRADSPEC_REPORT_DIR", "GRADSPEC_SESSION_ID", "GRADSPEC_PROFILE", "CI", "PYTEST_XDIST_WORKER"):
        monkeypatch.delenv(k, raising=False)


def test_entry_point_is_installed():
    from importlib.metadata import entry_points

    eps = [e for e in entry_points(group="pytest11") if e.name == "gradspec"]
    assert eps and eps[0].value == "gradspec.pytest_plugin"


@pytest.mark.parametrize("profile, derandomize, examples",
                         [("ci", True, 60), ("dev", False, 30), ("fuzz", False, 5000)])
def test_gradspec_profile_option(pytester, restore_hypothesis_profile, clean_env, profile, derandomize, examples):
    pytester.makepyfile(f"""
        from hypothesis import settings

        def test_profile():
            assert settings().derandomize is {derandomize}
            assert settings().max_examples == {examples}
            assert settings().deadline is None
    """)
    result = pytester.runpytest("--gradspec-profile", profile)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"gradspec: hypothesis profile '{profile}'"])


def test_unknown_profile_is_a_usage_error(pytester, restore_hypothesis_profile, clean_env):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--gradspec-profile", "turbo")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid choice*turbo*"])


def test_failing_checks_write_html_reports(pytester, restore_hypothesis_profile, clean_env):
    pytester.makepyfile(test_user=USER_TESTS)
    rep = pytester.path / "rep"
    result = pytester.runpytest("--gradspec-profile", "ci", f"--gradspec-report-dir={rep}")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*HTML report: *rep/d-*/index.html*", "*gradspec: 2 gradient discrepancy report(s)*",
                                 "*index: *rep/index.html*"])
    folders = _folders(rep)
    assert len(folders) == 2
    tests = {json.loads((f / "discrepancy.json").read_text())["test"] for f in folders}
    # the fixture passes the node id; gs.assert_gradients finds it on its own (PYTEST_CURRENT_TEST)
    assert tests == {"test_user.py::test_fixture_reports", "test_user.py::test_helper_reports"}
    for f in folders:
        for name in ("index.html", "case.json", "repro.py"):
            assert (f / name).stat().st_size > 0
    index = (rep / "index.html").read_text()
    assert all(f.name in index for f in folders)
    # the session page says what it holds: the failing checks of this session and their tests (before:
    # titled "gradspec test report", with "No comparisons" and "0 of 0 ops appeared in at least one case")
    assert "<title>gradspec test report: 2 failing gradient checks" in index
    assert "test_user.py::test_fixture_reports" in index and "test_user.py::test_helper_reports" in index
    assert "checks that passed are not listed here" in index
    assert "No comparisons" not in index and "0 of 0 ops" not in index
    assert "GRADSPEC_REPORT_DIR" not in os.environ  # the inner session left the environment as it was


def test_without_a_report_dir_nothing_is_written(pytester, restore_hypothesis_profile, clean_env):
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest("--gradspec-profile", "ci")
    result.assert_outcomes(passed=1, failed=2)
    assert "HTML report: /" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*reference vs mine*"])  # the assertion still names the disagreement
    assert not [p for p in pytester.path.rglob("index.html")]


def test_hypothesis_test_writes_only_the_shrunk_failure(pytester, restore_hypothesis_profile, clean_env):
    pytester.makepyfile(test_hyp=USER_TESTS + '''

from hypothesis import given, settings
from gradspec import strategies as gst


@settings(max_examples=25, database=None)
@given(gst.cases(ops=["neg", "mul", "exp"], max_nodes=4))
def test_random_graphs(case):
    assert_gradients(case, oracles=ORACLES, engine=ExpOffByHalf())
''')
    rep = pytester.path / "rep"
    result = pytester.runpytest("--gradspec-profile", "ci", f"--gradspec-report-dir={rep}", "-k", "random_graphs")
    result.assert_outcomes(failed=1)
    (folder,) = _folders(rep)  # not one per example tried while shrinking
    rec = json.loads((folder / "discrepancy.json").read_text())
    assert "exp" in rec["ops"] and len(rec["ops"]) <= 2  # shrunk: the buggy op, at most one more


def test_reports_under_xdist(pytester, clean_env):
    pytester.makepyfile(test_user=USER_TESTS)
    rep = pytester.path / "rep"
    result = pytester.runpytest_subprocess("-n", "2", "--gradspec-profile", "ci",
                                           f"--gradspec-report-dir={rep}")
    result.assert_outcomes(passed=1, failed=2)
    folders = _folders(rep)
    assert len(folders) == 2
    index = (rep / "index.html").read_text()  # written by the controller once the workers are done
    assert all(f.name in index for f in folders)
    result.stdout.fnmatch_lines(["*gradspec: 2 gradient discrepancy report(s)*"])


# ---------------------------------------------------------------------------------------------
# gs.assert_op / assert_torch_function / assert_engine, verify_* results in the report dir
# ---------------------------------------------------------------------------------------------

VERIFY_TESTS = '''
import numpy as np
import pytest
import torch
import gradspec as gs
from gradspec.engines import ReferenceEngine

BUGGY = {buggy}


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (3.0 if BUGGY else 2.0) * x * g


cube = gs.Op("plugin_cube", forward=lambda x: x ** 3,
             vjp=lambda g, x, out: ((2.0 if BUGGY else 3.0) * x ** 2 * g,))


class NoReset(ReferenceEngine):
    name = "no-reset"

    def zero_grad(self, leaf):
        if not BUGGY:
            super().zero_grad(leaf)


def test_function_one():
    gs.assert_torch_function(Square.apply, max_examples=15, seed=0)


def test_function_two():
    gs.assert_torch_function(Square.apply, max_examples=15, seed=0)


def test_op():
    gs.assert_op(cube, max_examples=15, seed=0)


def test_engine():
    gs.assert_engine(NoReset(), max_examples=5, seed=0)


def test_bare_verify():
    r = gs.verify_op(cube, max_examples=15, seed=1)
    assert r.cases_run == 15
'''


# In subprocesses: a second in-process session re-importing a module of torch.autograd.Functions
# under the same name crashes the interpreter.
def _records(rep) -> list:
    return [json.loads((f / "discrepancy.json").read_text()) for f in _folders(rep)]


def test_assert_helpers_fail_with_cause_and_replay(pytester, restore_hypothesis_profile, clean_env):
    pytester.makepyfile(test_v=VERIFY_TESTS.format(buggy=True))
    result = pytester.runpytest_subprocess("--gradspec-profile", "ci", "-k", "not bare")
    result.assert_outcomes(failed=4)
    out = result.stdout.str()
    assert out.count("VerificationFailed") >= 4
    result.stdout.fnmatch_lines([
        "*gradspec: verify torch function Square.apply: 1 finding*",
        "*replay the whole run: gs.verify_torch_function(Square.apply, seed=0*",
        "*gradspec: verify op 'plugin_cube'*",
        "*gradspec: verify engine*reset*",
    ])


def test_assert_helpers_pass_on_correct_code(pytester, restore_hypothesis_profile, clean_env):
    pytester.makepyfile(test_v=VERIFY_TESTS.format(buggy=False))
    result = pytester.runpytest_subprocess("--gradspec-profile", "ci")
    result.assert_outcomes(passed=5)


def test_a_report_folder_per_test_and_finding(pytester, restore_hypothesis_profile, clean_env):
    """Two tests failing on the same Function keep two reports; a bare verify_* failure is written too."""
    pytester.makepyfile(test_v=VERIFY_TESTS.format(buggy=True))
    rep = pytester.path / "rep"
    result = pytester.runpytest_subprocess("--gradspec-profile", "ci", f"--gradspec-report-dir={rep}")
    result.assert_outcomes(failed=4, passed=1)  # the bare verify_* call does not fail its test...
    tests = sorted(r["test"] for r in _records(rep))
    # ...but its finding is in the report dir, with the test's id, like the four assertions'
    assert {"test_v.py::test_function_one", "test_v.py::test_function_two", "test_v.py::test_op",
            "test_v.py::test_engine", "test_v.py::test_bare_verify"} == set(tests)
    assert tests.count("test_v.py::test_function_one") == 1 and tests.count("test_v.py::test_function_two") == 1
    index = (rep / "index.html").read_text()
    assert all(f.name in index for f in _folders(rep))
    result.stdout.fnmatch_lines(["*HTML report: *rep/d-*/index.html*"])


def test_session_index_is_rebuilt_each_session(pytester, restore_hypothesis_profile, clean_env):
    """After the bug is fixed, the next session's index lists no failure of its own (the old folders are
    marked as not failing in this session) instead of the stale index of the failing session."""
    rep = pytester.path / "rep"
    pytester.makepyfile(test_v=VERIFY_TESTS.format(buggy=True))
    pytester.runpytest_subprocess("--gradspec-profile", "ci", f"--gradspec-report-dir={rep}", "-k", "function_one")
    assert "1 failing gradient check in this test session" in (rep / "index.html").read_text()
    pytester.makepyfile(test_v=VERIFY_TESTS.format(buggy=False))
    result = pytester.runpytest_subprocess("--gradspec-profile", "ci", f"--gradspec-report-dir={rep}", "-k", "function_one")
    result.assert_outcomes(passed=1)
    index = (rep / "index.html").read_text()
    assert "0 failing gradient checks in this test session" in index
    assert "did not fail in this session" in index


SEED_TEST = '''
import hashlib, sys
import gradspec as gs
from gradspec import search

cube = gs.Op("seed_cube", forward=lambda x: x ** 3, vjp=lambda g, x, out: (3 * x ** 2 * g,))


def fingerprint():
    keys = []
    orig = search._case_key
    # the text of each case (values, ops, seeds): case.json would also differ by the op's import path
    search._case_key = lambda c: keys.append(c.to_text()) or orig(c)
    try:
        gs.verify_op(cube, max_examples=40, seed=11)
    finally:
        search._case_key = orig
    return hashlib.sha1("".join(keys).encode()).hexdigest()


def test_fingerprint():
    print("FINGERPRINT", fingerprint())


if __name__ == "__main__":
    print("FINGERPRINT", fingerprint())
'''


def test_same_seed_same_cases_with_and_without_the_plugin(pytester, clean_env):
    """Hypothesis draws constants from loaded local modules; the plugin loads gradspec.fuzz, pytest loads
    the tests: the same seed drew other cases under pytest until verify_* stopped using those constants."""
    pytester.makepyfile(test_seed=SEED_TEST)
    plain = pytester.run(sys.executable, "test_seed.py")
    plugin = pytester.runpytest_subprocess("-s", "--gradspec-profile", "dev")
    without = pytester.runpytest_subprocess("-s", "-p", "no:gradspec")
    prints = [next(ln for ln in r.stdout.lines if "FINGERPRINT" in ln).split("FINGERPRINT")[1]
              for r in (plain, plugin, without)]
    assert prints[0] == prints[1] == prints[2], prints


NO_SEED_TESTS = '''
import torch
import gradspec as gs


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3.0 * x * g  # wrong: 2 x g


def test_one():
    gs.assert_torch_function(Square.apply, max_examples=3)


def test_two():
    gs.assert_torch_function(Square.apply, max_examples=3)
'''


def test_ci_profile_fixes_the_seed_of_a_call_without_one(pytester, clean_env):
    """Under the derandomized ci profile a verify_* call without seed= used the system's entropy: every run
    printed another seed (and could pass a bug another run finds). Now it is derived from the test id, as
    Hypothesis' derandomize does, and the replay line names it."""
    import re

    pytester.makepyfile(test_noseed=NO_SEED_TESTS)
    seeds = []
    for _ in range(2):
        result = pytester.runpytest_subprocess("--gradspec-profile", "ci")
        result.assert_outcomes(failed=2)
        found = re.findall(r"replay the whole run: gs\.verify_torch_function\(Square\.apply, seed=(\d+)",
                           result.stdout.str())
        assert len(found) == 2, result.stdout.str()[-3000:]
        seeds.append(found)
    assert seeds[0] == seeds[1]
    assert seeds[0][0] != seeds[0][1]  # from each test's own id


def test_ci_profile_outside_a_test_uses_the_fixed_seed(monkeypatch, restore_hypothesis_profile):
    from hypothesis import settings

    from gradspec._private.seeds import FIXED_SEED, resolve_seed
    from gradspec.profiles import register_profiles

    register_profiles()
    settings.load_profile("ci")
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    monkeypatch.delenv("GRADSPEC_TEST_KEY", raising=False)  # the plugin's key of this very test
    assert resolve_seed(None) == FIXED_SEED
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_a.py::test_b (call)")
    assert resolve_seed(None) == resolve_seed(None) != FIXED_SEED
    assert resolve_seed(5) == 5


def test_an_inner_session_leaves_the_outer_sessions_profile_loaded(pytester):
    # pytester's in-process session loads its own gradspec profile (dev by default); the outer session (ci in CI)
    # ran every later test under dev before: randomized, and verify_* kept saved failures in .hypothesis/.
    from hypothesis import settings

    before = settings.get_current_profile_name()
    pytester.makepyfile("def test_inner():\n    from hypothesis import settings\n"
                        "    assert settings.get_current_profile_name() == 'dev'\n")
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--gradspec-profile", "dev")
    res.assert_outcomes(passed=1)
    assert settings.get_current_profile_name() == before


def test_an_inconclusive_run_is_not_listed_as_a_discrepancy(pytester, restore_hypothesis_profile, clean_env):
    # tryout7 #13f: "gradspec: 3 gradient discrepancy report(s)" listed a run where nothing ran as "inconclusive ()"
    pytester.makepyfile(test_user=USER_TESTS + '''

import torch


class F64Only(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        if x.dtype != torch.float64:
            raise TypeError("float64 only")
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        raise AssertionError("never reached: the forward refuses float32, the only precision asked for")


def test_nothing_ran():
    gs.assert_torch_function(F64Only.apply, arity=1, max_examples=3, seed=1, dtypes=("float32",))
''')
    rep = pytester.path / "rep"
    result = pytester.runpytest("--gradspec-profile", "ci", f"--gradspec-report-dir={rep}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=3)
    out = result.stdout.str()
    assert "gradspec: 2 gradient discrepancy report(s), 1 inconclusive run(s)" in out, out[-2000:]
    assert "inconclusive ()" not in out
    result.stdout.fnmatch_lines(["*rep/d-*/index.html  inconclusive: *TypeError: float64 only* "
                                 "test_user.py::test_nothing_ran"])
