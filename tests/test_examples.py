"""The scripts in ``examples/`` run as a user would run them (``python examples/x.py``): each
prints its result and exits 0 when the demonstration holds (bug found and fix clean; user ops
clean; the tiny engine passes ``verify_engine``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EXAMPLES = [
    ("custom_function.py", ["smoke test y.sum().backward() passes for the buggy version: True",
                            "gradspec verify torch function RowNormalizeBuggy.apply: FAILED",
                            "buggy: bug found", "fixed: clean", "replay"]),
    ("user_op.py", ["gradspec verify op 'soft_threshold': OK", "soft_threshold: verified clean",
                    "weighted_power_sum: verified clean"]),
    ("custom_op.py", ["gradspec_examples::scaled_tanh_buggy: torch.library.opcheck: passes",
                      "gradspec_examples::scaled_tanh_buggy: gradspec: bug found",
                      "gradspec_examples::scaled_tanh: gradspec: clean",
                      "opcheck passes both; gradspec finds the buggy backward and passes the correct one: True"]),
    ("nn_module.py", ["smoke test out.backward(torch.ones_like(out)) passes for the buggy layer: True",
                      "gradspec verify module TwoLayerNet: FAILED", "buggy: bug found", "fixed: clean"]),
    ("tiny_engine.py", ["gradspec verify engine tiny: OK", "backward() rules: 13 passed",
                        "TinyEngine passes verify_engine"]),
]


@pytest.mark.parametrize("script, expected", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_example_runs(script, expected):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", script)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for line in expected:
        assert line in proc.stdout, f"{line!r} not in the output of {script}:\n{proc.stdout}"


_BUGGY_TEST = '''
import torch
import gradspec as gs
from test_my_gradients import RowNormalize


class RowNormalizeBuggy(RowNormalize):
    @staticmethod
    def backward(ctx, g):
        y, n = ctx.saved_tensors
        return (g - y * y.sum(-1, keepdim=True)) / n  # <g, y> written as sum(y): right only for g = ones


def test_row_normalize_buggy_gradient():
    gs.assert_torch_function(RowNormalizeBuggy.apply, example_inputs=(torch.randn(3, 4, dtype=torch.float64),),
                             max_examples=20)
'''


def _ci_command() -> list:
    """The pytest command examples/ci/pytest-gradients.yml runs (its 'gradient tests' step), as words."""
    with open(os.path.join(ROOT, "examples", "ci", "pytest-gradients.yml"), encoding="utf-8") as f:
        lines = [l.strip() for l in f if l.strip().startswith("run: python -m pytest")]
    assert len(lines) == 1, lines
    return lines[0][len("run: "):].split()


def test_the_ci_recipe_for_pytest_runs_as_documented(tmp_path):
    # tryout10 F8: the README's CI recipe for gradient tests written as pytest tests, run as the workflow runs
    # it (its own command, in a project holding the example test and a buggy twin): pytest fails on the twin
    # only, the JUnit file carries gradspec's cause, and the report dir holds the index and the twin's report
    import shutil
    import xml.etree.ElementTree as ET

    (tmp_path / "tests").mkdir()
    shutil.copy(os.path.join(ROOT, "examples", "ci", "test_my_gradients.py"), tmp_path / "tests")
    (tmp_path / "tests" / "test_buggy.py").write_text(_BUGGY_TEST)
    cmd = [sys.executable if w == "python" else w for w in _ci_command()]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(tmp_path / "tests")]))
    proc = subprocess.run(cmd + ["-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=900, env=env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "reports" / "junit.xml").iter("testcase")}
    assert set(cases) == {"test_row_normalize_gradient", "test_row_normalize_buggy_gradient"}, cases
    assert cases["test_row_normalize_gradient"].find("failure") is None
    failure = cases["test_row_normalize_buggy_gradient"].find("failure")
    assert failure is not None and "backward" in (failure.get("message", "") + (failure.text or "")), failure
    assert (tmp_path / "reports" / "index.html").is_file()
    found = [p for p in (tmp_path / "reports").iterdir() if p.is_dir() and p.name.startswith("d-")]
    assert len(found) == 1 and (found[0] / "case.json").is_file(), sorted(p.name for p in (tmp_path / "reports").iterdir())
    assert "test_row_normalize_buggy_gradient" in (tmp_path / "reports" / "index.html").read_text()
