"""Run a function in a forked child under a watchdog that knows which step the child is in.

The child calls ``report("start", name)`` / ``report("end", name)`` around each step; the parent
kills it (SIGKILL) when a step runs longer than ``budget`` seconds, or when it spends longer than
``between`` seconds outside any step.  A signal cannot interrupt a loop in C code; a kill can.
The child's return value comes back pickled through a pipe (it is this process's own fork, so
unpickling it trusts nothing foreign).

Returns ``(kind, value, running, seconds)``: ``("verdict", result, None, 0)``, ``("killed", None,
step, seconds in it)`` or ``("died", how, step or None, seconds)``.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import sys
import time

__all__ = ["run", "enabled", "enabling"]

_ENABLED = [False]  # --isolate for the whole command (set once by the command line)


def enabled() -> bool:
    """Whether the command line asked for --isolate (code under test run in watched child processes)."""
    return _ENABLED[0] and hasattr(os, "fork")


class enabling:
    def __init__(self, on: bool) -> None:
        self.on, self.before = bool(on), None

    def __enter__(self):
        self.before, _ENABLED[0] = _ENABLED[0], self.on or _ENABLED[0]

    def __exit__(self, *exc):
        _ENABLED[0] = self.before

_HEAD = struct.Struct("!cI")


def _send(fd: int, tag: bytes, data: bytes) -> None:
    msg = _HEAD.pack(tag, len(data)) + data
    while msg:
        n = os.write(fd, msg)
        msg = msg[n:]


def _child(fn, w: int) -> None:  # pragma: no cover - runs in the forked child
    code = 0
    try:
        result = fn(lambda event, name: _send(w, b"S" if event == "start" else b"E", str(name).encode()))
        _send(w, b"V", pickle.dumps(result))
    except BaseException as e:  # noqa: BLE001 - the child always ends here
        code = 3
        try:
            _send(w, b"X", f"{type(e).__name__}: {e}".encode())
        except BaseException:  # noqa: BLE001
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                pass
        os._exit(code)


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"died of {signal.Signals(sig).name}"
        except ValueError:
            return f"died of signal {sig}"
    return f"exited with status {os.WEXITSTATUS(status)} without a verdict"


def run(fn, budget: float, between: float | None = None):
    between = max(60.0, 20 * budget) if between is None else between
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        from .forked import forked_child

        forked_child(parent)  # (no report-dir lock kept, no orphan left by a kill -9 of the parent: review F3)
        os.close(r)
        _child(fn, w)
    os.close(w)
    running, started, buf, result, error = None, time.monotonic(), b"", None, None
    reaped = False
    try:
        while True:
            now = time.monotonic()
            wait = (started + budget if running else started + between) - now
            ready, _, _ = select.select([r], [], [], max(0.0, wait))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                reaped = True
                return ("killed", None, running, time.monotonic() - started)
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= _HEAD.size:
                tag, n = _HEAD.unpack_from(buf)
                if len(buf) < _HEAD.size + n:
                    break
                data, buf = buf[_HEAD.size:_HEAD.size + n], buf[_HEAD.size + n:]
                if tag == b"S":
                    running, started = data.decode(), time.monotonic()
                elif tag == b"E":
                    running, started = None, time.monotonic()
                elif tag == b"V":
                    result = data
                else:
                    error = data.decode(errors="replace")
        _, status = os.waitpid(pid, 0)
        reaped = True
        if result is not None:
            return ("verdict", pickle.loads(result), None, 0.0)  # noqa: S301 - our own child's bytes
        how = f"failed: {error}" if error else _how(status)
        return ("died", how, running, time.monotonic() - started)
    finally:
        os.close(r)
        if not reaped:  # interrupted (Ctrl-C): the child must not outlive us
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
