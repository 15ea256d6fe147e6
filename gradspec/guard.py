"""``gs.check`` with faults contained: never raises (except KeyboardInterrupt), never hangs.

Used by every entry point that runs code under test on generated cases (``gradspec fuzz``,
``gradspec replay``, ``assert_gradients``).  An oracle that hangs is cut by the per-case timeout
(``signal.setitimer`` in the main thread, a watchdog thread elsewhere: only Python code can be
interrupted, a C loop is cut when it returns to Python) and recorded as a ``timeout`` discrepancy.

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec.guard import guarded_check
    >>> case = gs.Case.build({"x": np.array([1.0, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    >>> guarded_check(case, ["reference", "jacobian"], timeout=5.0).ok
    True
"""

from __future__ import annotations

import signal
import threading
import traceback

from .case import Case
from .check import Discrepancy, Verdict, check

__all__ = ["CaseTimeout", "guarded_check"]


class CaseTimeout(Exception):
    """A case exceeded the per-case timeout (raised inside whatever was running)."""


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


def guarded_check(case: Case, oracles, timeout: float | None = None) -> Verdict:
    """``gs.check(case, oracles)`` that never raises (except KeyboardInterrupt) and never hangs.

    An oracle that raises is recorded by ``check`` itself; one that exceeds ``timeout`` seconds
    gets :class:`CaseTimeout` raised inside it (so its traceback shows where it hung) and becomes
    a ``timeout`` discrepancy; a failure of ``check`` itself becomes a ``check-error`` discrepancy.
    """
    if timeout and _main_thread():
        verdict = _check_with_alarm(case, oracles, timeout)
    elif timeout:
        verdict = _check_with_watchdog(case, oracles, timeout)
    else:
        verdict = _check_safely(case, oracles)
    _retag_timeouts(verdict, timeout)
    return verdict


def _synthetic(case, kind, pair, message, tb=None) -> Verdict:
    d = Discrepancy(kind=kind, oracles=pair, message=message, case=case, traceback=tb)
    return Verdict(case, {}, [], [d], {}, {})


def _check_safely(case, oracles) -> Verdict:
    try:
        return check(case, oracles=oracles)
    except CaseTimeout:
        raise
    except Exception as e:
        return _synthetic(case, "check-error", ("gradspec.check", "case"),
                          f"gs.check itself raised {type(e).__name__}: {e}", traceback.format_exc())


def _check_with_alarm(case, oracles, timeout) -> Verdict:
    def on_alarm(signum, frame):
        # Re-armed so that whatever runs next (the next oracle) is cut as well.
        signal.setitimer(signal.ITIMER_REAL, timeout)
        raise CaseTimeout(f"exceeded the per-case timeout of {timeout:g} s (--case-timeout)")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout)
            return _check_safely(case, oracles)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    except CaseTimeout:
        return _synthetic(case, "timeout", ("gradspec.check", "case-timeout"),
                          f"checking the case exceeded the per-case timeout of {timeout:g} s outside any oracle",
                          traceback.format_exc())


def _check_with_watchdog(case, oracles, timeout) -> Verdict:
    box: list = []
    t = threading.Thread(target=lambda: box.append(_check_safely(case, oracles)), daemon=True)
    t.start()
    t.join(timeout)
    if box:
        return box[0]
    # The thread cannot be killed; it is abandoned (a daemon thread) and the campaign moves on.
    return _synthetic(case, "timeout", ("gradspec.check", "case-timeout"),
                      f"checking the case exceeded the per-case timeout of {timeout:g} s (watchdog thread: "
                      "the hung oracle keeps running in the background)")


def _retag_timeouts(verdict: Verdict, timeout) -> None:
    for name, (etype, _msg, tb) in verdict.errors.items():
        if etype != CaseTimeout.__name__:
            continue
        mine = [d for d in verdict.discrepancies if d.kind == "raised" and d.oracles[0] == name]
        text = f"{name} exceeded the per-case timeout of {timeout:g} s (--case-timeout); it was cut here"
        for d in mine:
            d.kind, d.message, d.traceback = "timeout", text, tb
        if not mine:
            verdict.discrepancies.append(Discrepancy(kind="timeout", oracles=(name, "case-timeout"), message=text,
                                                     case=verdict.case, traceback=tb))
