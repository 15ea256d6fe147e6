"""The ``ci`` profile's seed of a ``verify_*`` call without ``seed=`` is the same on every run of a test:
it must not depend on pytest's rootdir, which changes with the command line (an existing directory named
by ``--gradspec-report-dir DIR`` takes part in pytest's rootdir computation) and with the cwd."""

from __future__ import annotations

import re

import pytest

pytest_plugins = ["pytester"]

SEED_TESTS = '''
import pytest
from gradspec._private.seeds import resolve_seed


@pytest.mark.parametrize("name", ["a", "b"])
def test_seed(name):
    print(f"SEED[{name}]={resolve_seed(None)}")
'''

# (id, cwd relative to pytester.path, arguments): every way of running the same test file.
RUNS = [
    ("plain", "proj", ["tests/test_s.py"]),
    ("existing-report-dir", "proj", ["tests/test_s.py", "--gradspec-report-dir", "../rep"]),
    ("report-dir-equals", "proj", ["tests/test_s.py", "--gradspec-report-dir=../rep"]),
    ("other-cwd", ".", ["proj/tests/test_s.py"]),
    ("other-cwd-report-dir", "rep", ["../proj/tests/test_s.py", "--gradspec-report-dir", "."]),
]


@pytest.fixture
def clean_env(monkeypatch):
    for k in ("GRADSPEC_REPORT_DIR", "GRADSPEC_SESSION_ID", "GRADSPEC_PROFILE", "CI", "PYTEST_XDIST_WORKER"):
        monkeypatch.delenv(k, raising=False)


def test_ci_seed_does_not_depend_on_the_rootdir(pytester, monkeypatch, clean_env):
    (pytester.path / "proj" / "tests").mkdir(parents=True)
    (pytester.path / "proj" / "tests" / "test_s.py").write_text(SEED_TESTS)
    (pytester.path / "rep").mkdir()
    seen = {}
    for rid, cwd, args in RUNS:
        monkeypatch.chdir(pytester.path / cwd)
        result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", "--gradspec-profile", "ci", *args)
        result.assert_outcomes(passed=2)
        seen[rid] = dict(re.findall(r"SEED\[(\w)\]=(\d+)", result.stdout.str()))
        assert sorted(seen[rid]) == ["a", "b"], (rid, result.stdout.str()[-2000:])
    assert seen["plain"]["a"] != seen["plain"]["b"]  # each parametrization has its own seed
    assert {rid: s == seen["plain"] for rid, s in seen.items()} == {rid: True for rid, _, _ in RUNS}, seen
