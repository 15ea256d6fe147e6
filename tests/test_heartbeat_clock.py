"""The controller's Watchdog measures a worker's silence on its own monotonic clock (review F2).

It compared each beat file's mtime with ``time.time()``: after the whole process group was stopped (Ctrl-Z then
``fg``, a laptop's sleep, a VM pause) or the wall clock stepped forward by more than the bound, every worker looked
silent and was killed -- a false ``crash`` finding, exit 1 on a correct engine.  The watched "workers" here are
real child processes of the test (the Watchdog kills only its own children); the clock is a fake one the test moves.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gradspec.fuzz import heartbeat


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def child():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    yield p
    p.kill()
    p.wait(30)


def _beat(path, wall: float) -> None:
    """A beat whose mtime is ``wall`` (the worker's wall clock, whatever it says)."""
    with open(path, "a"):
        pass
    os.utime(path, (wall, wall))


def _ticks(dog, clock, seconds: float, beat=None) -> None:
    """The watchdog's ticks over ``seconds`` of its clock, one per BEAT (``beat()`` between them: a beating worker)."""
    for _ in range(int(seconds / heartbeat.BEAT)):
        clock.now += heartbeat.BEAT
        if beat:
            beat()
        dog.tick()


def test_a_wall_clock_step_forward_kills_no_beating_worker(tmp_path, child):
    path = tmp_path / str(child.pid)
    clock, stamp = Clock(), [time.time() - 3600.0]  # the beats' mtimes are an hour behind the wall clock (a step)

    def beat():
        stamp[0] += heartbeat.BEAT
        _beat(path, stamp[0])

    beat()
    dog = heartbeat.Watchdog(str(tmp_path), bound=5.0, clock=clock)
    _ticks(dog, clock, 20.0, beat)
    assert dog.killed == {} and child.poll() is None


def test_a_stop_of_the_whole_group_kills_no_worker(tmp_path, child):
    path = tmp_path / str(child.pid)
    clock = Clock()
    _beat(path, 1.0)
    dog = heartbeat.Watchdog(str(tmp_path), bound=5.0, clock=clock)
    _ticks(dog, clock, 3.0, lambda: _beat(path, 1.0 + clock.now))
    clock.now += 60.0  # the watchdog and its workers were stopped for a minute: no beat, no tick
    dog.tick()  # the watchdog wakes before the worker's beat thread
    _ticks(dog, clock, 4.0)  # the worker is silent less than the bound since they all woke
    assert dog.killed == {} and child.poll() is None
    _ticks(dog, clock, 10.0, lambda: _beat(path, 1.0 + clock.now))
    assert dog.killed == {} and child.poll() is None


def test_a_silent_worker_is_still_killed_after_the_bound_on_the_watchdogs_clock(tmp_path, child):
    path = tmp_path / str(child.pid)
    clock = Clock()
    _beat(path, time.time() + 3600.0)  # (an mtime in the future changes nothing: only its changes count)
    dog = heartbeat.Watchdog(str(tmp_path), bound=5.0, clock=clock)
    _ticks(dog, clock, 5.0)
    assert dog.killed == {} and child.poll() is None  # silent for the bound, not longer
    _ticks(dog, clock, 2.0)
    assert list(dog.killed) == [child.pid] and dog.killed[child.pid] > 5.0
    assert child.wait(60) == -9
