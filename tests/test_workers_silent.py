"""A campaign worker that stops answering is killed and its chunk reported: the run ends (review H5c).

``gradspec fuzz --workers 2``: one worker stops itself with SIGSTOP in the middle of a case (a ``kill -STOP``, a
debugger, code wedged where no signal reaches it).  It sent nothing more, and xdist's controller waited for its
chunk for ever.  Now each worker beats (``gradspec/fuzz/heartbeat.py``) and the controller kills a worker silent
for longer than the bound (``GRADSPEC_WORKER_SILENCE``, a few seconds here): its chunk runs again on a fresh
worker, and the case it was on is a ``crash`` finding (cause ``process-died``) that says why it was killed, as for
a worker killed by a signal.
"""

from __future__ import annotations

import json
import signal

import pytest

from tests.test_cli import FAST_ORACLES, gradspec, plant, summary

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")

STOP_ONCE = '''
import os, signal
from gsplant import Planted


class StopOnce(Planted):
    """Stops its worker process (SIGSTOP) the first time a worker applies exp (a marker file remembers)."""

    def apply(self, op, *args, **params):
        marker = os.environ["GS_STOP_MARKER"]
        if op == "exp" and os.environ.get("PYTEST_XDIST_WORKER") and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGSTOP)
        return super().apply(op, *args, **params)


engine = StopOnce("stoponce", bug_op="none")
'''


def test_a_stopped_worker_is_killed_its_case_reported_and_its_chunk_run_again(tmp_path):
    env = plant(tmp_path)
    (tmp_path / "gsstoponce.py").write_text(STOP_ONCE)
    env.update(GS_STOP_MARKER=str(tmp_path / "stopped"), GRADSPEC_WORKER_SILENCE="4",
               GRADSPEC_WORKER_DIR=str(tmp_path / "local"))
    r = gradspec("fuzz", "--engine", "gsstoponce:engine", "--ops", "exp,mul", "--oracles", FAST_ORACLES,
                 "--max-examples", 16, "--seed", 4, "--shrink-seconds", 3, "--report-dir", tmp_path / "reports",
                 "--workers", 2, "-q", cwd=tmp_path, env=env, timeout=400)  # (before: never ended)
    assert (tmp_path / "stopped").exists(), "no worker stopped itself"
    assert r.returncode == 1, r.stdout + r.stderr  # the case in flight is a crash finding, as for a killed worker
    s = summary(tmp_path / "reports")
    crash = next(rec for rec in s["reports"] if rec["kind"] == "crash")
    assert "no heartbeat" in crash["message"] and "SIGSTOP" in crash["message"], crash["message"]
    assert crash["cause"]["id"] == "process-died"
    case = json.loads((tmp_path / "reports" / crash["id"] / "case.json").read_text())
    assert "exp" in [n["op"] for n in case["nodes"]]  # the case it was on
    assert s["lost"] == [] and s["cases"] == 16, (s["lost"], s["cases"])  # its chunk ran again
