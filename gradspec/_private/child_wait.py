"""Waiting for ``gradspec replay``'s check process: its whole bound, a signal to replay, and a child that is blocked.

The check process's every part is bounded by the per-case timeout, but only where the alarm signal can cut it:
a wait in C code (a deadlock: OpenMP's thread pool after a fork, tryout11 #1; a lock never released) sees no
signal, and before, only the net bound under everything (``3 x check budget + diagnosis + 4 x timeout``, 34 min
at the default 60 s) ended it, so replay printed nothing for half an hour.  Such a wait uses no CPU; code that
computes does.  The child's process group (it and what it forked: ``--isolate``'s children compute while it
waits for them) is therefore watched: no CPU at all for ``idle`` seconds is a blocked child, killed and said to
be one.  Linux only (``/proc``); elsewhere the net bound is all there is.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["wait_child", "group_cpu_ticks", "STOP_GRACE", "BLOCKED", "LATE"]

# Seconds a replay child told to stop (a signal to replay) has before it is killed: a hang in C code, or code that
# swallows KeyboardInterrupt, never stops (review H5b: `timeout` then killed replay and left the child running).
STOP_GRACE = 5.0

BLOCKED, LATE = "blocked", "late"

_POLL = 0.05  # seconds between waitpid polls
_CPU_EVERY = 1.0  # seconds between reads of the group's CPU time (a scan of /proc: a few ms)


def group_cpu_ticks(pid: int) -> int | None:
    """Clock ticks of CPU used so far by process ``pid`` (with its reaped children) and every live process of
    process group ``pid``; None where /proc cannot say."""
    total, seen = 0, False
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # (ended meanwhile)
        # after the command: state ppid pgrp ... utime(11) stime(12) cutime(13) cstime(14)
        if int(name) == pid:
            total += sum(int(v) for v in fields[11:15])
            seen = True
        elif int(fields[2]) == pid:
            total += int(fields[11]) + int(fields[12])
    return total if seen else None


def wait_child(pid: int, bound: float | None = None, idle: float | None = None) -> tuple[int | None, str | None]:
    """``(wait status, None)`` when the child ended; ``(None, LATE)`` when it ran past ``bound`` seconds and
    ``(None, BLOCKED)`` when its group used no CPU for ``idle`` seconds (both killed).  A signal to this
    process (Ctrl-C to the group, or ``kill -INT`` / SIGTERM of this pid alone) is passed on as SIGINT, which
    the child takes as Ctrl-C (never as a second, hard signal); a second one, or :data:`STOP_GRACE` seconds
    without an end, kills the child and its process group (a hang in C code cannot see a KeyboardInterrupt);
    the status is then the killed child's."""
    from . import interrupts

    told: list = []  # when the first signal was passed on

    def kill() -> None:
        for how in (os.killpg, os.kill):  # the group first (the child's own children); before it is reaped
            try:
                how(pid, signal.SIGKILL)
            except OSError:
                pass

    def forward(signum, hard):
        if hard or told:
            kill()
        else:
            try:
                os.kill(pid, signal.SIGINT)
            except OSError:
                pass
        told.append(time.monotonic())

    start = time.monotonic()
    cpu, cpu_since, cpu_read = None, start, 0.0  # last CPU reading, since when it has not moved, when read
    with interrupts.graceful(forward):
        while True:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    return status, None
                now = time.monotonic()
                cut = LATE if bound is not None and now - start > bound else None
                if cut is None and idle is not None and now - cpu_read >= _CPU_EVERY:
                    cpu_read, ticks = now, group_cpu_ticks(pid)
                    if ticks is None or ticks != cpu:
                        cpu, cpu_since = ticks, now
                    elif now - cpu_since > idle:
                        cut = BLOCKED
                if cut or (told and now - told[0] > STOP_GRACE):
                    kill()
                    status = os.waitpid(pid, 0)[1]
                    return (None, cut) if cut and not told else (status, None)
                time.sleep(_POLL)
            except KeyboardInterrupt:
                continue
