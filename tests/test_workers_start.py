"""``gradspec fuzz --workers`` says why nothing ran (tryout3 finding 6).

* a folder named ``gradspec`` in the working directory (a clone of the repository, no ``__init__.py`` at
  its top) was a namespace package on the workers' ``sys.path`` ahead of the editable install: every chunk
  failed with an empty op table and the run said only "the worker session ended with 1";
* a ``--seconds`` budget spent while the workers start said "no case ran" and nothing else.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.test_cli import summary

pytest.importorskip("xdist")


def gradspec(*args, cwd, env, timeout):
    """The console script, as the user ran it (``python -m`` would put the cwd first on the controller's path too)."""
    script = os.path.join(os.path.dirname(sys.executable), "gradspec")
    if not os.path.exists(script):
        pytest.skip("no gradspec console script next to this Python")
    return subprocess.run([script, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GRADSPEC_REPORT_DIR", "PYTEST_XDIST_WORKER")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def test_a_gradspec_folder_in_the_cwd_does_not_stop_the_workers(tmp_path):
    (tmp_path / "gradspec").mkdir()  # as a clone of the repository looks from its parent folder
    out = tmp_path / "rep"
    proc = gradspec("fuzz", "--max-examples", 30, "--ops", "exp,mul", "--oracles", "reference,jacobian", "--workers", 2,
                    "--seed", 5, "--report-dir", out, cwd=tmp_path, env=_env(), timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary(out)["cases"] == 30


def test_a_budget_spent_starting_the_workers_is_named():
    # 1 s cannot fit the start of two workers here (torch's import alone takes seconds); if it ever does,
    # cases ran and there is nothing to explain
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        proc = gradspec("fuzz", "--seconds", 1, "--ops", "exp,mul", "--oracles", "reference,jacobian", "--workers", 2,
                        "--seed", 5, "--report-dir", os.path.join(d, "rep"), cwd=d, env=_env(), timeout=240)
        cases = summary(__import__("pathlib").Path(d) / "rep")["cases"]
    if cases == 0:
        assert proc.returncode == 3, proc.stdout
        assert "workers were still starting" in proc.stdout, proc.stdout
