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
