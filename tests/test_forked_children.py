"""A child gradspec forks without exec keeps no report-dir lock and dies with its parent (review F3, F4).

``--isolate``'s per-case child and replay's check child inherited the report dir's lock descriptor, and nothing
ended them when their parent was SIGKILLed (the OOM killer, a CI runner's hard cancel, ``kill -9 -- -PGID`` of
replay, whose check child is in a process group of its own): a child hanging in C code lived on, and the next run
on the report dir was refused, naming a dead pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from gradspec._private import isolate
from gradspec._private.safefs import InUse, release_lock, report_dir_lock

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not os.path.isdir("/proc"),
                                reason="forked children, found in /proc")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1")
    env.pop("GRADSPEC_REPLAY_IN_PROCESS", None)
    return env


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def _read_pid(path, proc) -> int:
    """The pid a child wrote into ``path`` (waits for it; ``proc``: the parent, whose output says why not)."""
    for _ in range(600):
        if os.path.exists(path) and open(path).read().strip():
            return int(open(path).read())
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    proc.wait(60)
    raise AssertionError(f"no child pid (the parent's exit status: {proc.returncode})")


def _gone(pid: int) -> bool:
    for _ in range(300):  # (the kernel delivers the parent-death signal at once; the wait is for a loaded machine)
        if not _alive(pid):
            return True
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return False


def test_an_isolated_child_does_not_hold_the_report_dir_lock(tmp_path):
    fd = report_dir_lock(str(tmp_path))
    try:
        def probe(report):
            try:
                os.fstat(fd)
                return "open"
            except OSError:
                return "closed"
        assert isolate.run(probe, budget=60)[:2] == ("verdict", "closed")
    finally:
        release_lock(fd)


CONTROLLER = """
import os, sys, time
from gradspec._private import isolate
from gradspec._private.safefs import report_dir_lock
fd = report_dir_lock(sys.argv[1])

def hang(report):
    with open(sys.argv[2], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(300)  # (a hang in C code: nothing in the child ends it)

isolate.run(hang, budget=300)
"""


def test_an_isolated_child_dies_with_its_killed_parent_and_the_report_dir_is_free(tmp_path):
    rd, pidfile = tmp_path / "rd", tmp_path / "child.pid"
    rd.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(rd), str(pidfile)], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # (an orphan keeps pipes open)
    child = _read_pid(pidfile, proc)
    proc.kill()  # SIGKILL: no finally runs in the parent
    proc.wait(60)
    assert _gone(child), "the isolated child outlived its killed parent"
    release_lock(report_dir_lock(str(rd)))  # (before: InUse, naming the dead parent)


SLEEPY = """
import os, time
from gradspec.engines import ReferenceEngine


class Sleepy(ReferenceEngine):
    name = "sleepy"

    def backward(self, tensor, gradient=None, retain_graph=False):
        with open(os.environ["GS_CHILD_PID"], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(300)
        return super().backward(tensor, gradient, retain_graph)
"""


def test_replays_check_child_dies_with_replays_process_group(tmp_path):
    import numpy as np

    import gradspec as gs

    (tmp_path / "gssleepy.py").write_text(SLEEPY)
    case = gs.Case.build({"x": np.array([0.5, 1.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    case.engine = "gssleepy:Sleepy"
    (tmp_path / "case.json").write_text(case.to_json())
    env = dict(_env(), PYTHONPATH=os.pathsep.join([ROOT, str(tmp_path)]), GS_CHILD_PID=str(tmp_path / "child.pid"))
    proc = subprocess.Popen([sys.executable, "-m", "gradspec.cli", "replay", str(tmp_path / "case.json"),
                             "--allow-import", "gssleepy", "--case-timeout", "100"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    child = _read_pid(tmp_path / "child.pid", proc)
    assert os.getpgid(child) != proc.pid  # (its own group, which `kill -9 -- -PGID` of replay misses)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(60)
    assert _gone(child), "replay's check child outlived replay's process group"


def test_a_refusal_says_when_the_pid_in_the_lock_file_is_dead(tmp_path):
    import fcntl
    import socket

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(60)
    fd = report_dir_lock(str(tmp_path))  # held here, as by a surviving fork of a process that died
    try:
        # (truncated first, as report_dir_lock writes: over this process's longer "pid NNNN on host" the dead pid's
        # shorter line left a tail, "pid 980 on vm\nm", that no longer parses: the fresh-clone CI saw it once)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {dead.pid} on {socket.gethostname()}\n".encode(), 0)
        with pytest.raises(InUse) as e:
            holder = subprocess.run([sys.executable, "-c", "import sys; from gradspec._private.safefs import "
                                     "report_dir_lock; report_dir_lock(sys.argv[1])", str(tmp_path)],
                                    env=_env(), capture_output=True, text=True, timeout=120)
            if "InUse" in holder.stderr:
                raise InUse(str(tmp_path), holder.stderr.strip().splitlines()[-1])
        assert f"pid {dead.pid}" in str(e.value) and "no longer running" in str(e.value), str(e.value)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        release_lock(fd)
