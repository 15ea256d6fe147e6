"""gradspec's pytest plugin (entry point ``pytest11``), tested with ``pytester``: profiles, HTML reports of
failing gradient checks in a user's own tests, Hypothesis shrinking, ``pytest -n 2``."""

from __future__ import annotations

import json
import os

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
    assert tests == {"test_user.py::test_fixture_reports", None}  # the fixture records the node id
    for f in folders:
        for name in ("index.html", "case.json", "repro.py"):
            assert (f / name).stat().st_size > 0
    index = (rep / "index.html").read_text()
    assert all(f.name in index for f in folders)
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
