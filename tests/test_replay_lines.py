"""The replay lines ``gradspec fuzz`` prints (and the CI summary shows) run as printed (chaos M1).

A finding on a user op needs ``--allow-import`` of the op's module: without it the copied line exited 2.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from tests.test_cli import FAST_ORACLES, gradspec

HERE = Path(__file__).resolve().parent


def test_printed_and_ci_replay_lines_of_a_user_op_finding_run_as_printed(tmp_path):
    shutil.copy(HERE / "_chaos_user_ops.py", tmp_path / "chaosops.py")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    r = gradspec("fuzz", "--ops", "chaosops:bad_double", "--oracles", FAST_ORACLES, "--max-examples", 10,
                 "--seed", 1, "--shrink-seconds", 2, "--report-dir", tmp_path / "rep",
                 "--junitxml", tmp_path / "j.xml", "--summary-md", tmp_path / "s.md", cwd=tmp_path, env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    printed = [ln.strip() for ln in r.stdout.splitlines() if ln.strip().startswith("gradspec replay")]
    junit = [ln.split("replay: ", 1)[1].strip() for ln in (tmp_path / "j.xml").read_text().splitlines()
             if "replay: gradspec replay" in ln]
    md = (tmp_path / "s.md").read_text()
    assert "case.json --allow-import chaosops`" in md, md
    assert printed and junit, r.stdout
    for line in (printed[0], junit[0]):
        assert "--allow-import chaosops" in line, line
        rr = gradspec(*shlex.split(line)[1:], cwd=tmp_path, env=env)
        assert rr.returncode == 1, line + "\n" + rr.stdout + rr.stderr  # still disagrees (2 = could not run)


def test_verify_ops_whole_run_replay_runs_when_pasted_into_a_fresh_interpreter():
    """chaos M1: "replay the whole run: from m import op; gs.verify_op(...)" had no `import gradspec as gs`."""
    import gradspec as gs
    from tests._chaos_user_ops import bad_double

    result = gs.verify_op(bad_double, seed=1, max_examples=4)
    assert not result.ok and result.replay.startswith("import gradspec as gs; from tests._chaos_user_ops import")
    namespace: dict = {}
    exec(result.replay, namespace)  # a NameError (gs) before the fix


def test_an_earlier_report_that_cannot_be_rechecked_is_exit_2_naming_module_and_flag(tmp_path):
    """chaos M6 / CONTRACT §6: a rerun without the user op's module read "0 still present", exit 0 (as if fixed)."""
    shutil.copy(HERE / "_chaos_user_ops.py", tmp_path / "chaosops.py")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    common = ("--oracles", FAST_ORACLES, "--seed", 1, "--shrink-seconds", 2, "--report-dir", tmp_path / "rep", "-q")
    r = gradspec("fuzz", "--ops", "chaosops:bad_double", "--max-examples", 10, *common, cwd=tmp_path, env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    r = gradspec("fuzz", "--ops", "add", "--max-examples", 4, *common, cwd=tmp_path, env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "chaosops" in r.stderr and "--allow-import" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = gradspec("fuzz", "--ops", "add", "--max-examples", 4, "--allow-import", "chaosops", *common, cwd=tmp_path,
                 env=env)
    assert r.returncode == 1 and "1 still present" in r.stderr, r.stdout + r.stderr  # re-checked: still there
