"""A worker that stops answering is killed, so a distributed campaign ends in bounded time (review H5c).

A campaign worker (``gradspec fuzz --workers K``) that is stopped (``SIGSTOP``, ``kill -STOP``, a debugger) or
wedged (a C loop that holds the GIL: the alarm signal cannot cut it) sends the controller nothing: xdist's
controller waited for its chunk for ever.  Each worker now beats: a daemon thread touches its file in the run's
worker-local folder (``STATE/workers/<pid>``, the file the controller's Ctrl-C reads) every :data:`BEAT` seconds,
whatever the worker is doing -- a slow case, a long shrink and a hang that the per-case timeout will cut all beat
on (the thread runs between the worker's bytecodes).  The controller's :class:`Watchdog` kills (SIGKILL) a worker
of this run on this machine, one of its own child processes, whose beat is older than :func:`silence_bound`: xdist
then sees it die as it sees any worker killed by a signal -- its chunk is run again on a fresh worker, or is
``lost`` (exit 3), and the case it was on is a ``crash`` finding (cause ``process-died``) whose message says the
controller killed it for its silence.  Workers on other machines (``--tx``) are not watched (their folder is there).

Example::

    >>> from gradspec.fuzz.heartbeat import silence_bound
    >>> silence_bound(1.0) >= 30.0
    True
"""

from __future__ import annotations

import os
import signal
import threading
import time

__all__ = ["BEAT", "SILENCE_MIN", "Watchdog", "silence_bound", "start_beating"]

BEAT = 1.0  # seconds between a worker's beats
# A beat this old means the worker no longer runs: 30 beats missed (a loaded machine delays a thread by seconds,
# never by tens of them).  GRADSPEC_WORKER_SILENCE=S sets it (tests: a few seconds).
SILENCE_MIN = 30.0
# The watchdog's own tick this late (in periods) means it was stopped or suspended too: a loaded machine delays a
# thread by a second or two, and re-arming the deadlines then only delays a kill by that much.
_TICK_GAP = 3.0
_BEATING: dict = {}  # path -> the thread beating it (one per worker process and run)


def silence_bound(case_timeout: float | None) -> float:
    """Seconds without a beat after which a worker is taken to be stopped or wedged: :data:`SILENCE_MIN`, or three
    per-case timeouts if longer (a C call that holds the GIL that long is cut by nothing else either)."""
    env = os.environ.get("GRADSPEC_WORKER_SILENCE")
    if env:
        try:
            return max(0.5, float(env))
        except ValueError:
            pass
    return max(SILENCE_MIN, 3.0 * float(case_timeout or 0.0))


def start_beating(path: str) -> None:
    """Touch ``path`` every :data:`BEAT` seconds from a daemon thread of this process, until it exits."""
    if path in _BEATING and _BEATING[path].is_alive():
        return

    def beat():
        while True:
            try:
                os.utime(path)
            except OSError:
                return  # the run's folder is gone: the run is over
            time.sleep(BEAT)

    t = threading.Thread(target=beat, name="gradspec-heartbeat", daemon=True)
    _BEATING[path] = t
    t.start()


def _parent_of(pid: int) -> int | None:
    """The parent of live process ``pid`` (None: gone, a zombie -- it exited and awaits its wait --, or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state, ppid = f.read().rsplit(b")", 1)[1].split()[:2]
    except (OSError, ValueError):
        return None
    return None if state in (b"Z", b"X") else int(ppid)


class Watchdog:
    """In the controller: every :data:`BEAT` seconds, the workers' beat files in ``folder`` (pid-named); a child
    process of this one whose beat has not changed for ``bound`` seconds is killed.  ``killed``: pid -> seconds
    silent.

    Silence is measured on the watchdog's own monotonic ``clock`` (review F2): per pid, the time it last saw the
    file's mtime change.  Comparing the mtime with the wall clock killed every worker after the whole process group
    was stopped (Ctrl-Z then ``fg``, a laptop's sleep, a VM pause) or the wall clock stepped forward: the workers'
    beats looked silent for the length of the pause.  A gap in the watchdog's own ticks (its last tick older than
    :data:`_TICK_GAP` periods) means it was stopped too, with the workers: every deadline is re-armed from now."""

    def __init__(self, folder: str, bound: float, clock=time.monotonic) -> None:
        self.folder, self.bound, self._clock = folder, bound, clock
        self.killed: dict = {}
        self._seen: dict = {}  # pid -> (the beat file's last mtime seen, clock time it was first seen so)
        self._last_tick: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gradspec-watchdog", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5.0)
        return False

    def _watch(self) -> None:
        while not self._stop.wait(BEAT):
            self.tick()

    def tick(self) -> None:
        """One look at the beat files (the watchdog thread calls it every :data:`BEAT` seconds)."""
        now = self._clock()
        if self._last_tick is not None and now - self._last_tick > _TICK_GAP * BEAT:
            self._seen = {pid: (mtime, now) for pid, (mtime, _) in self._seen.items()}  # stopped with them
        self._last_tick = now
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        seen = {}
        for name in names:
            if not name.isdigit() or int(name) in self.killed:
                continue
            pid = int(name)
            try:
                mtime = os.stat(os.path.join(self.folder, name)).st_mtime_ns
            except OSError:
                continue
            last = self._seen.get(pid)
            seen[pid] = last if last is not None and last[0] == mtime else (mtime, now)
            silent = now - seen[pid][1]
            if silent > self.bound:
                self._kill(pid, silent)
        self._seen = seen  # (the files of exited workers are forgotten)

    def _kill(self, pid: int, silent: float) -> None:
        if pid == os.getpid() or _parent_of(pid) != os.getpid():  # only this run's own local workers
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            return
        self.killed[pid] = silent
