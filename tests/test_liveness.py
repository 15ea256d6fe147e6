"""A run that dies is visible: summary.json and index.html say "running" until the end, and the next
run in the same report dir says the last one did not finish."""

from __future__ import annotations

import json
import signal
import time

from tests.test_cli import FAST_ORACLES, gradspec, plant, start, summary


def _wait_for(path, pred, seconds=90):
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        try:
            if pred(json.loads(path.read_text())):
                return True
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    return False


def test_a_killed_run_reads_running_and_the_next_run_says_it_did_not_finish(tmp_path):
    env = plant(tmp_path)
    out = tmp_path / "r"
    proc = start("fuzz", "--engine", "gsplant:bug", "--ops", "mul,exp", "--seconds", 120, "--oracles", FAST_ORACLES,
                 "--seed", 5, "--report-dir", out, cwd=tmp_path, env=env)
    try:
        # Killed once it has written a summary with a finding in it (the planted exp bug).
        assert _wait_for(out / "summary.json", lambda s: s.get("discrepancies", 0) >= 1), "no summary while running"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    s = summary(out)
    assert s["state"] == "running" and s["status"] == "running" and "not finished" in s["reason"], s
    assert "RUNNING" in (out / "index.html").read_text()
    after = gradspec("fuzz", "--ops", "mul", "--max-examples", 3, "--oracles", FAST_ORACLES, "--seed", 1,
                     "--report-dir", out, cwd=tmp_path, env=env)
    assert after.returncode == 0, after.stderr
    assert "did not finish" in after.stderr and s["run_id"] in after.stderr
    s2 = summary(out)
    assert s2["state"] == "finished" and s2["status"] == "agree"
    assert s2["last_run"]["state"] == "did not finish" and s2["last_run"]["run_id"] == s["run_id"]
    assert "did not finish" in (out / "index.html").read_text()
    # That run finished: the one after it has nothing to say about it.
    again = gradspec("fuzz", "--ops", "mul", "--max-examples", 2, "--oracles", FAST_ORACLES, "--seed", 2,
                     "--report-dir", out, cwd=tmp_path, env=env)
    assert again.returncode == 0 and "did not finish" not in again.stderr
    assert summary(out)["last_run"] is None
