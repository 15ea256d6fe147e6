"""What a failing gradient assertion says in a user's pytest run (tryout9 #5, #9): the §8 cause and its summary
in every assertion text (gs.assert_gradients, the ``gradspec_check`` fixture, gs.assert_op: one formatter,
``Cause.describe``), and a replay a test can follow (a test has no ``result`` to call ``write_html`` on)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

USER_TESTS = '''
import numpy as np
import gradspec as gs

# the vjp of x**3 with 2 for 3: a constant factor, diagnosed as wrong-vjp (pattern scale)
cube = gs.Op("msg_cube", forward=lambda x: x ** 3, vjp=lambda g, x, out: (2.0 * x ** 2 * g,))


def case():
    return gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", "msg_cube", ["x"], {})], ["y"], [np.ones(2)])


def test_helper():
    gs.assert_gradients(case())


def test_fixture(gradspec_check):
    gradspec_check(case())


def test_assert_op():
    gs.assert_op(cube, max_examples=15, seed=0)
'''

# (in subprocesses: a third in-process session of these tests crashed the interpreter, as test_plugin.py notes)
# what gs.check's diagnosis says of this bug (its cause id and the start of its summary)
CAUSE = "wrong-vjp"
SUMMARY = "your vjp is wrong"


@pytest.fixture
def clean_env(monkeypatch):
    for k in ("GRADSPEC_REPORT_DIR", "GRADSPEC_SESSION_ID", "GRADSPEC_PROFILE", "CI", "PYTEST_XDIST_WORKER"):
        monkeypatch.delenv(k, raising=False)


@pytest.fixture
def restore_hypothesis_profile():
    from hypothesis import settings

    before = settings._current_profile
    yield
    settings.load_profile(before)


def _failures(result) -> dict:
    """The failure text of each test, by test name."""
    out, blocks, name = result.stdout.str(), {}, None
    for line in out.splitlines():
        if line.startswith("_____") and line.rstrip("_ ").strip("_ "):
            name = line.strip("_ ").strip()
            blocks[name] = []
        elif name:
            blocks[name].append(line)
    return {k: "\n".join(v) for k, v in blocks.items()}


@pytest.mark.parametrize("test", ["test_helper", "test_fixture", "test_assert_op"])
def test_every_assertion_text_names_the_cause(pytester, restore_hypothesis_profile, clean_env, test):
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("--gradspec-profile", "ci", "-k", test)
    result.assert_outcomes(failed=1)
    text = _failures(result)[test]
    assert CAUSE in text and SUMMARY in text, text


def test_the_cause_is_said_alike_by_check_and_by_the_assertions():
    import numpy as np

    import gradspec as gs
    from gradspec.testing import GradientMismatch, failure_message

    cube = gs.Op("msg_cube2", forward=lambda x: x ** 3, vjp=lambda g, x, out: (2.0 * x ** 2 * g,))
    case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", "msg_cube2", ["x"], {})], ["y"], [np.ones(2)])
    v = gs.check(case)
    text = v.discrepancies[0].cause.describe()
    assert text.startswith(CAUSE) and SUMMARY in text and "evidence" in text, text
    assert text in v.summary()  # `assert v.ok, v` shows it too
    with pytest.raises(GradientMismatch) as e:
        gs.assert_gradients(case)
    assert text in str(e.value) and str(e.value).count(text) == 1, str(e.value)  # once, however many pairs saw it
    r = gs.verify_op(cube, max_examples=10, seed=0)
    assert any(d.cause.describe() in failure_message(r) for d in r.discrepancies if d.cause is not None)


def test_a_failing_assertion_in_a_test_says_how_to_get_the_case_file(pytester, restore_hypothesis_profile,
                                                                      clean_env):
    """No report dir: the replay line names --gradspec-report-dir (a test has no ``result`` to write_html)."""
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("--gradspec-profile", "ci", "-k", "test_assert_op")
    text = _failures(result)["test_assert_op"]
    assert "result.write_html" not in text, text
    assert "--gradspec-report-dir" in text and "gradspec replay" in text, text
    rep = pytester.path / "rep"
    result = pytester.runpytest_subprocess("--gradspec-profile", "ci", "-k", "test_assert_op", f"--gradspec-report-dir={rep}")
    text = _failures(result)["test_assert_op"]
    assert f"gradspec replay {rep}" in text and "result.write_html" not in text, text
