"""A worker that dies without a traceback (SIGKILL, ``os._exit``) and then an interrupted run.

``gradspec fuzz --workers 2``: one worker dies in the middle of a case (no faulthandler dump: a kill, an
``os._exit``), the campaign goes on, and then the controller is interrupted (``kill -INT``).  The interrupted run
discounted every in-flight case without a traceback as the interruption's (the workers it stops mid-case are no
crash: tests/test_workers.py), so the earlier death was dropped silently: the run said "interrupted, nothing found"
(exit 130) with no crash.  Now a process that was already dead when the interruption came is a ``crash`` finding
with the case it was on, whatever the interruption did to the others.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.test_cli import FAST_ORACLES, plant, start, summary

# Slow in workers (a case takes >= 0.3 s: the run is still going when the signal comes); the first exp applied in a
# worker kills that worker (once: a marker file remembers), without a traceback.
DIE_ONCE_SLOW = '''
import os, signal
from gsplant import Planted


class DieOnceSlow(Planted):
    def _armed(self):
        return bool(os.environ.get("PYTEST_XDIST_WORKER"))

    def apply(self, op, *args, **params):
        marker = os.environ["GS_DIE_MARKER"]
        if op == "exp" and self._armed() and not os.path.exists(marker):
            open(marker, "w").close()
            if os.environ["GS_DIE_HOW"] == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(7)
        return super().apply(op, *args, **params)


engine = DieOnceSlow("dieonceslow", bug_op="none", faults={"exp": "slow", "mul": "slow"})
'''


@pytest.mark.parametrize("how", ["sigkill", "os_exit"])
def test_a_worker_dead_before_the_interruption_is_a_crash_with_its_case(tmp_path, how):
    env = plant(tmp_path)
    (tmp_path / "gsdieonceslow.py").write_text(DIE_ONCE_SLOW)
    marker = tmp_path / "died"
    env.update(GS_DIE_MARKER=str(marker), GS_DIE_HOW=how, GRADSPEC_WORKER_DIR=str(tmp_path / "local"))
    out = tmp_path / "reports"
    proc = start("fuzz", "--engine", "gsdieonceslow:engine", "--ops", "exp,mul", "--oracles", FAST_ORACLES,
                 "--workers", 2, "--seconds", 120, "--seed", 3, "--report-dir", out, cwd=tmp_path, env=env)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None and not marker.exists():
            time.sleep(0.2)
        assert proc.poll() is None and marker.exists(), "no worker died"
        time.sleep(3.0)  # the campaign goes on with the other worker (and a replacement) for a while
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    s = summary(out)
    assert s["interrupted"] is True, s
    crashes = [rec for rec in s["reports"] if rec["kind"] == "crash"]
    assert len(crashes) == 1, (s["reports"], stdout + stderr)  # the dead worker, and only it
    assert crashes[0]["cause"]["id"] == "process-died"
    case = json.loads((out / crashes[0]["id"] / "case.json").read_text())
    assert "exp" in [n["op"] for n in case["nodes"]]  # the case it was on
    assert proc.returncode == 1, stdout + stderr  # a finding: not "interrupted, nothing found" (130)
