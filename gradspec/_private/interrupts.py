"""SIGINT, SIGTERM and SIGHUP stop a run the way Ctrl-C does: what was computed is kept and written.

A CI job that is cancelled, ``docker stop``, ``timeout(1)`` and a closed terminal send SIGTERM or SIGHUP,
whose default action ends the process at once: a campaign lost its summary, its CI outputs and the
finding it was shrinking (chaos review H2).  Under :func:`graceful` the first of these signals raises
``KeyboardInterrupt`` in the main thread, as Ctrl-C does, so the same code paths keep what ran; a
*second* SIGTERM or SIGHUP ends the process at once by that signal (the sender insists: a hard stop).
A second Ctrl-C raises ``KeyboardInterrupt`` again, as before.

:func:`deferred` holds signals back while something must not be cut in half (a finding's report being
written, the final summary): a signal that comes then is acted on when the block ends.

:func:`exit_code` is the exit status of an interrupted command: 130 for SIGINT (CONTRACT §6), and
128 + the signal's number for the others (143 for SIGTERM, 129 for SIGHUP), the status a shell, a CI
runner or ``docker`` expects of a process stopped by that signal.

Example::

    >>> import os, signal
    >>> from gradspec._private import interrupts
    >>> interrupts.reset()
    >>> try:
    ...     with interrupts.graceful():
    ...         os.kill(os.getpid(), signal.SIGTERM)
    ...         for _ in range(10**6): pass   # (the handler runs between bytecodes)
    ... except KeyboardInterrupt:
    ...     print("stopped", interrupts.exit_code())
    stopped 143
    >>> interrupts.reset()
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Callable

__all__ = ["SIGNALS", "count", "deferred", "exit_code", "graceful", "name", "received", "reset"]

SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))

_got: list = []  # the signals this process received under graceful/deferred, in order
_state = {"defer": 0, "pending": False, "once": False}
_listeners: list = []  # callables (signum, hard) told of every signal, innermost last


def reset() -> None:
    """Forget the signals received (a new command in this process, or a forked child)."""
    _got.clear()
    _state["defer"], _state["pending"] = 0, False


def received() -> int | None:
    """The first signal received since :func:`reset` (None if none)."""
    return _got[0] if _got else None


def count() -> int:
    """How many signals were received since :func:`reset` (a campaign counts only those after its start)."""
    return len(_got)


def name(signum: int | None) -> str:
    try:
        return signal.Signals(signum).name
    except (ValueError, TypeError):
        return f"signal {signum}"


def exit_code(signum: int | None = None) -> int:
    """130 for Ctrl-C (or no signal at all: an interruption is Ctrl-C's), else 128 + the signal number."""
    signum = received() if signum is None else signum
    return 130 if signum is None else 128 + int(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _die(signum: int) -> None:
    """The hard stop: the signal's default action, now."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _handler(signum, frame) -> None:
    hard = signum != signal.SIGINT and bool(_got)
    _got.append(signum)
    for cb in list(_listeners):
        try:
            cb(signum, hard)
        except Exception:  # noqa: BLE001 - a listener must not turn a signal into another error
            pass
    if hard:
        _die(signum)
    if _state["defer"] or (_state["once"] and len(_got) > 1):
        _state["pending"] = True
        return
    raise KeyboardInterrupt


@contextmanager
def _installed(listener: Callable | None, once: bool = False):
    if not _main_thread():  # (signal handlers can only be set in the main thread)
        yield
        return
    was_once = _state["once"]
    _state["once"] = was_once or once
    previous = {}
    for s in SIGNALS:
        try:
            previous[s] = signal.signal(s, _handler)
        except (ValueError, OSError):
            pass
    if listener is not None:
        _listeners.append(listener)
    try:
        yield
    finally:
        if listener is not None and listener in _listeners:
            _listeners.remove(listener)
        for s, h in previous.items():
            try:
                signal.signal(s, h if h is not None else signal.SIG_DFL)
            except (ValueError, OSError):
                pass
        _state["once"] = was_once


@contextmanager
def graceful(listener: Callable | None = None, once: bool = False):
    """SIGINT, SIGTERM and SIGHUP raise ``KeyboardInterrupt`` (the first time; a second SIGTERM/SIGHUP is a
    hard stop); ``listener(signum, hard)`` is told of each first (e.g. to set a flag that outlives an
    engine swallowing the ``KeyboardInterrupt``).  ``once``: a SIGINT after the first signal is only
    recorded (a campaign worker gets the terminal's Ctrl-C and its controller's word: one interruption)."""
    with _installed(listener, once):
        yield


@contextmanager
def deferred(raise_after: bool = True):
    """Signals that come inside the block are acted on when it ends: ``KeyboardInterrupt`` then
    (``raise_after``), or nothing (the block was the last thing to do); a second SIGTERM/SIGHUP is still
    a hard stop."""
    with _installed(None):
        _state["defer"] += 1
        ok = False
        try:
            yield
            ok = True
        finally:
            _state["defer"] -= 1
            pending = _state["pending"] and not _state["defer"]
            if not _state["defer"]:
                _state["pending"] = False
    if ok and pending and raise_after:
        raise KeyboardInterrupt
