"""``gradspec replay CASE.json --case-timeout S`` ends on a case whose forward hangs, and leaves no process behind
(reliability review H5b).

Before: the check was cut by the timeout, but replay then printed the case's listing, which runs its forward with
no bound (it hung for good); and a replay told to stop (``timeout``'s SIGTERM) passed SIGINT on to its check
process and waited for it for ever, so a hang that ignores KeyboardInterrupt kept replay and its processes alive
(killed from outside, the check process was left running).  Now every part of the check process is bounded by
the per-case timeout, its process group is killed when it does not stop within ``cli.STOP_GRACE`` of a signal (or
runs past its whole bound), and replay exits as it would otherwise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import gradspec as gs
from tests import _hangs_forward

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not hasattr(signal, "setitimer"),
                                reason="replay's check process and the timeouts need fork and setitimer")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _case_file(tmp_path, op) -> str:
    case = gs.Case.build({"x": np.linspace(0.1, 0.9, 3)}, [("y", op.name, ["x"], {})], ["y"], [np.ones(3)])
    case.engine = "reference"
    case.user_ops[op.name] = f"tests._hangs_forward:{[k for k, v in vars(_hangs_forward).items() if v is op][0]}"
    path = tmp_path / "case.json"
    path.write_text(case.to_json())
    return str(path)


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1")
    env.pop("GRADSPEC_REPLAY_IN_PROCESS", None)
    return env


def _left(path: str) -> list:
    """Processes still running whose command line names ``path`` (replay and the processes it forked)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if path.encode() in f.read():
                    out.append(int(pid))
        except OSError:
            pass
    return out


def test_replay_of_a_forward_that_hangs_ends_with_a_timeout(tmp_path):
    path = _case_file(tmp_path, _hangs_forward.forward_hangs)
    proc = subprocess.run([sys.executable, "-m", "gradspec.cli", "replay", path, "--allow-import", "tests._hangs_forward",
                           "--oracles", "reference,jacobian", "--case-timeout", "1"], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=300)  # (before: never ended)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "timeout" in proc.stdout and "still disagrees" in proc.stdout, proc.stdout
    assert "outputs not shown" in proc.stdout, proc.stdout  # the listing, its forward cut


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds leftover processes in /proc")
@pytest.mark.parametrize("isolate", [False, True], ids=["alarm", "isolate"])
def test_replay_told_to_stop_ends_and_leaves_no_process_when_the_hang_ignores_it(tmp_path, isolate):
    path = _case_file(tmp_path, _hangs_forward.forward_hangs_stubborn)
    proc = subprocess.Popen([sys.executable, "-m", "gradspec.cli", "replay", path, "--allow-import",
                             "tests._hangs_forward", "--oracles", "reference,jacobian", "--case-timeout", "1",
                             *(["--isolate"] if isolate else [])], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and len(_left(path)) < 2:  # replay has forked its check process
            time.sleep(0.2)
        time.sleep(3.0)  # the check process is in the stubborn forward by now (the alarm cannot stop it)
        proc.send_signal(signal.SIGTERM)  # as `timeout` does
        stdout, stderr = proc.communicate(timeout=120)  # (before: replay waited for its child for ever)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stdout + stderr
    for _ in range(50):  # (a killed process disappears once its parent has waited for it)
        if not _left(path):
            break
        time.sleep(0.1)
    assert _left(path) == [], "processes left running"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="the blocked check process is seen in /proc")
def test_replay_of_a_check_blocked_in_c_ends_inconclusive_and_says_how_to_check_it(tmp_path):
    """tryout11 #1b: a check process blocked in C (a deadlock: no CPU, no signal handler runs) was waited for until
    the net bound under every part of the check (220 s at --case-timeout 1; 34 min at the default 60 s), then
    called "still hangs on it" (exit 1), a finding of the engine's.  Now it is killed after max(10, timeout + 5) s
    without CPU and said to be blocked: inconclusive (exit 3), with the way to check it without the fork."""
    path = _case_file(tmp_path, _hangs_forward.vjp_blocks)
    proc = subprocess.run([sys.executable, "-m", "gradspec.cli", "replay", path, "--allow-import", "tests._hangs_forward",
                           "--oracles", "reference,jacobian", "--case-timeout", "1"], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "inconclusive: the check of this case was blocked" in proc.stdout, proc.stdout
    assert "used no CPU for 10 s" in proc.stdout and "GRADSPEC_REPLAY_IN_PROCESS=1 gradspec replay" in proc.stdout
    assert "still hangs" not in proc.stdout, proc.stdout
    assert _left(path) == [], "processes left running"


def _forked(body) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            body()
        finally:
            os._exit(0)
    return pid


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the child's CPU time in /proc")
def test_wait_child_kills_a_child_that_uses_no_cpu_and_lets_one_that_computes_end():
    from gradspec._private.child_wait import BLOCKED, wait_child

    r, w = os.pipe()
    try:
        pid = _forked(lambda: os.read(r, 1))  # nobody writes: blocked, no CPU
        assert wait_child(pid, bound=600, idle=2.0) == (None, BLOCKED)

        def compute():  # ~4 s of CPU (twice the idle limit): its CPU time moves all along
            end = time.process_time() + 4.0
            while time.process_time() < end:
                pass

        status, cut = wait_child(_forked(compute), bound=600, idle=2.0)
        assert cut is None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        os.close(r)
        os.close(w)
