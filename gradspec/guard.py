"""``gs.check`` with faults contained: never raises (except KeyboardInterrupt), never hangs.

Used by every entry point that runs code under test on generated cases (``gradspec fuzz``,
``gradspec replay``, ``assert_gradients``).

Timeouts that do not lie
------------------------
``timeout`` is a budget for *each oracle's own call* on the case (its ``vjp`` / ``result`` /
``jacobian``): the timer is armed when the oracle starts and disarmed when it returns, so the
comparison code between oracles, imports (``import torch`` took 1.2 s to 13 s on a loaded machine
and was charged to the first case) and one-time set-up are never counted.  :func:`warm_up` runs
the first case once, untimed, before the first timed check, so lazy imports and first-call costs
are paid there.  An oracle cut by the timer is a ``timeout`` discrepancy only when it is code under
test (``under_test``: the engine of the campaign; by default every oracle); a witness (finite
differences, the Jacobian, torch when it is not the engine under test) that runs out of time is
*skipped* for the case with the reason, never a finding against the code under test.

Two mechanisms cut a case, and the report says which:

* the **alarm signal** (``SIGALRM`` via ``signal.setitimer``, main thread): ``CaseTimeout`` is
  raised inside the oracle, so the traceback shows where it was; only Python code can be
  interrupted this way (a loop in C runs on until it returns to Python);
* the **watchdog** (``isolate=True``, ``--isolate``): the case is checked in a forked child process
  that reports which oracle it is in; when an oracle overruns its budget by :data:`GRACE` the
  child is killed (SIGKILL), which also cuts a hang in C code.  A child that dies (segfault,
  abort) is a ``crash`` discrepancy of the oracle it was in.

Off the main thread (no signals) a watchdog thread bounds the whole check instead.

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec.guard import guarded_check
    >>> case = gs.Case.build({"x": np.array([1.0, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    >>> guarded_check(case, ["reference", "jacobian"], timeout=5.0).ok
    True
    >>> guarded_check(case, ["reference", "jacobian"], timeout=5.0, isolate=True).ok
    True
"""

from __future__ import annotations

import _signal
import copy
import operator
import os
import signal
import threading
import time
import traceback

from . import oracles as _oracles
from ._private import case_budget as _case_budget
from ._private import isolate as _isolate
from .case import Case
from .causes import process_died
from .check import Discrepancy, Verdict, check, register_guard

__all__ = ["CaseTimeout", "guarded_check", "warm_up", "ALARM", "WATCHDOG", "GRACE", "Alarm", "Hung", "bounded",
           "hangs_seen", "case_listing"]

ALARM = "the alarm signal (SIGALRM, in-process)"
WATCHDOG = "the watchdog (--isolate: the process checking the case was killed)"
# How long past an oracle's budget the watchdog waits before killing the child: the alarm inside
# the child gets the first chance (it gives a traceback), the kill is for what it cannot interrupt.
GRACE = 0.5


class CaseTimeout(Exception):
    """A case exceeded the per-case timeout (raised inside whatever was running)."""


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


def _resolve(oracles) -> list:
    return [o if isinstance(o, _oracles.Oracle) else _oracles.get(o) for o in (oracles or _oracles.all_oracles())]


def _under_test(chosen, under_test) -> set:
    """Names of the oracles whose time is the code under test's: all of them unless told."""
    names = {o.name for o in chosen}
    if under_test is None:
        return names
    wanted = {under_test} if isinstance(under_test, str) else set(under_test)
    return {o.name for o in chosen if o.name in wanted or getattr(o, "spec", None) in wanted}


def guarded_check(case: Case, oracles, timeout: float | None = None, *, under_test=None,
                  isolate: bool = False) -> Verdict:
    """``gs.check(case, oracles)`` that never raises (except KeyboardInterrupt) and never hangs.

    ``timeout``: seconds for each oracle's own call (see the module docstring); ``under_test``: the
    oracle name(s) (or engine spec) whose timeout is a finding; ``isolate``: check in a child process
    that a watchdog kills when an oracle overruns (cuts hangs in C code too).
    """
    with _case_budget.case_timeout(timeout):  # the diagnosis inside check() bounds itself by it
        verdict = _guarded(case, _resolve(oracles), timeout, under_test, isolate)
    return verdict


register_guard(guarded_check)  # gs.check(case, oracles, timeout=S)


def _guarded(case, chosen, timeout, under_test, isolate) -> Verdict:
    mine = _under_test(chosen, under_test)
    if isolate and timeout and hasattr(os, "fork"):
        verdict = _isolated(case, chosen, timeout, mine)
        if getattr(verdict, "oracles", None):  # names only came back: the objects are this process's own
            plain = {o.name: o for o in chosen}
            verdict.oracles = {n: plain.get(n, o) for n, o in verdict.oracles.items() if plain.get(n, o) is not None}
    elif timeout and _main_thread():
        verdict = _timed_check(case, chosen, timeout, mine)
    elif timeout:
        verdict = _check_with_watchdog(case, chosen, timeout, len(chosen))
    else:
        verdict = _check_safely(case, chosen)
    _retag_timeouts(verdict, timeout, mine)
    return verdict


def warm_up(case: Case, oracles, cap: float = 120.0, isolate: bool = False) -> None:
    """Check ``case`` once and discard the verdict, before the first timed case: imports (torch),
    allocator set-up and first-call costs are paid here, not charged to a case.  Bounded by ``cap``
    seconds (the alarm; with ``isolate`` the case is first tried in a child the watchdog kills, and
    the warm-up in this process happens only if the child came back) so a case that really hangs or
    crashes cannot stall or kill the start."""
    chosen = _resolve(oracles)
    if any(o.name.startswith("torch") for o in chosen):
        try:  # never under a timer: an import cut half-way leaves a broken module behind (and a crash at exit)
            import torch  # noqa: F401
        except ImportError:
            pass  # the torch oracles say so themselves
    for o in chosen:
        try:
            o.available()
        except Exception:  # noqa: BLE001 - check() reports an oracle that cannot run
            pass
    if isolate and hasattr(os, "fork"):
        try:  # forked children and OpenMP do not mix: a child that used torch's thread pool could hang in it
            import torch

            torch.set_num_threads(1)
        except ImportError:
            pass
        kind = _isolate.run(lambda report: _check_safely(case, chosen), budget=cap, between=cap)[0]
        if kind != "verdict":
            return
    try:
        if _main_thread():
            previous = signal.signal(signal.SIGALRM, _Alarm(cap))
            try:
                signal.setitimer(signal.ITIMER_REAL, cap)
                _check_safely(case, chosen)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
        else:
            _check_with_watchdog(case, chosen, cap, 1)
    except CaseTimeout:
        pass


def _in_import(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


class _Alarm:
    """The SIGALRM handler.  An import is never cut: a module interrupted half-way stays broken for
    every later case (torch imports sympy lazily inside its first calls: 'module sympy has no
    attribute core' on every case after).  When the budget runs out inside an import, the import
    finishes and the call gets its budget again from there: import time is not the code's time."""

    POLL = 0.02  # seconds between looks while an import runs

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self.reset()

    def reset(self) -> None:
        self.deferred = False
        self.in_call = self.fired = self.overall = False  # overall: it fired outside an oracle's call (_timed_check)
        self.cut: list = []  # code under test cut by it (oracle names), also where check() swallowed the timeout

    def __call__(self, signum, frame):
        if _in_callback(frame):  # lost if raised here: a moment later, in the code under test again
            signal.setitimer(signal.ITIMER_REAL, 0.01)
            return
        if _in_import(frame):
            self.deferred = True
            signal.setitimer(signal.ITIMER_REAL, self.POLL)
            return
        if self.deferred:
            self.deferred = False
            signal.setitimer(signal.ITIMER_REAL, self.budget)
            return
        self.fired = True  # _timed tells a CaseTimeout the code under test caught and re-raised as its own error
        if not self.in_call:  # the whole check's bound (_timed_check): cut whatever runs next as well, until it ends
            self.overall = True
            signal.setitimer(signal.ITIMER_REAL, 0.05)
        raise CaseTimeout(f"exceeded the per-case timeout of {self.budget:g} s (--case-timeout)")


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


class _OwnTimer:
    """One call's own timer of ``timeout`` s, armed at once; an outer timer running (a diagnosis' budget, the whole
    check's bound) is read and re-armed in the same call, the call's timer narrowed to it in the rare case it had
    less left.  ``end()`` turns the call's timer off and gives the outer one back what it has left.  (A class with
    an explicit end, not a context manager: it is armed on every oracle call of a guarded check.)"""

    __slots__ = ("t0", "outer")

    def __init__(self, timeout: float) -> None:
        self.t0 = time.monotonic()
        self.outer = outer = signal.setitimer(signal.ITIMER_REAL, timeout)[0]
        if outer and outer < timeout:
            signal.setitimer(signal.ITIMER_REAL, outer)

    def end(self) -> None:
        outer = self.outer
        signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - self.t0), 1e-3) if outer else 0)


def _timed(o, timeout: float, witness: bool, report, alarm=None):
    """A copy of oracle ``o`` whose gradient calls run under their own ``timeout`` (and tell the
    watchdog, through ``report``, which oracle is running).  ``alarm``: the SIGALRM handler; when it
    fired during the call, whatever the call raised is the timeout (a user op's vjp wrapper re-raises the
    CaseTimeout raised inside the user's code as its own error, which read as 'raised', not 'timeout')."""
    w = copy.copy(o)

    def arm(meth):
        def call(*args, **kw):
            fn = getattr(o, meth)  # (looked up per call: a timed copy serves every check with these oracles)
            answered = getattr(fn, "gradspec_answered", None)
            if answered is not None and report is None and answered(*args, **kw):
                return fn(*args, **kw)  # an answer computed before (gradspec.fuzz.prefetch): nothing to time
            if report is not None:
                report("start", o.name)
            if alarm is not None:
                alarm.fired, alarm.in_call = False, True
            # The timer as it was (a diagnosis' own budget, guard.Alarm; the whole check's bound) is kept: _OwnTimer.
            timer = _OwnTimer(timeout)
            try:
                try:
                    return fn(*args, **kw)
                except Exception as e:
                    if isinstance(e, CaseTimeout) or alarm is None or not getattr(alarm, "fired", False):
                        raise
                    raise CaseTimeout(f"exceeded the per-case timeout of {timeout:g} s (--case-timeout); the code "
                                      f"under test re-raised it as {type(e).__name__}: {e}") from e
            except CaseTimeout:
                if alarm is not None and not witness:
                    alarm.cut.append(o.name)
                if witness:  # gradspec's own witness ran out of time: it says nothing about the code under test
                    raise _oracles.OracleError(
                        f"{o.name} took longer than the per-case timeout of {timeout:g} s on this case (a witness, "
                        "not the code under test: not compared)") from None
                raise
            finally:
                timer.end()
                if alarm is not None:
                    alarm.in_call = False
                if report is not None:
                    report("end", o.name)
        return call

    for meth in ("vjp", "result", "jacobian"):
        if callable(getattr(o, meth, None)):
            setattr(w, meth, arm(meth))
    # check() stands another oracle in for this one on some cases (a user op without a jvp: the jacobian by
    # finite differences): that one is timed the same way
    w._gs_retime = lambda other: _timed(other, timeout, witness, report, alarm)
    return w


class _TimedSet:
    """The timed copies of one list of oracles and the alarm they report to.  A campaign checks every case
    with the same oracles: the copies (``copy.copy`` and three wrappers each, ~10 us a check) are made once
    and kept for the next check with the same oracle objects, timeout and code under test, as long as
    neither an oracle's nor a copy's own attributes changed (a copy is then exactly what a fresh one would
    be: the wrappers look the method up per call).  One set is kept (the last); a nested check makes its own."""

    __slots__ = ("originals", "timeout", "mine", "alarm", "timed", "dicts", "busy")

    def fits(self, chosen, timeout, mine) -> bool:
        if self.busy or self.timeout != timeout or self.mine != mine or len(self.originals) != len(chosen):
            return False
        for a, b in zip(self.originals, chosen):
            if a is not b:
                return False
        for obj, d in zip(self.originals + self.timed, self.dicts):
            if not _same_attrs(obj, d):
                return False
        return True


def _same_attrs(obj, snapshot) -> bool:
    """``obj``'s attributes are still those of ``snapshot`` (``_snapshot``: its names in order, and its values):
    the same names in the same order, each bound to the very same object (compared in C: ~0.3 us an object)."""
    d = getattr(obj, "__dict__", None)
    return d is not None and tuple(d) == snapshot[0] and all(map(_is, d.values(), snapshot[1]))


def _snapshot(d: dict) -> tuple:
    return tuple(d), tuple(d.values())


_is = operator.is_
_KEPT: list = [None]  # the last _TimedSet


def _timed_set(chosen, timeout, mine, report) -> _TimedSet:
    kept = _KEPT[0]
    if report is None and kept is not None and kept.fits(chosen, timeout, mine):
        kept.alarm.reset()
        kept.busy = True
        return kept
    ts = _TimedSet()
    ts.originals, ts.timeout, ts.mine, ts.busy = list(chosen), timeout, mine, True
    ts.alarm = _Alarm(timeout)
    ts.timed = [_timed(o, timeout, o.name not in mine, report, ts.alarm) for o in chosen]
    ts.dicts = [getattr(o, "__dict__", None) for o in ts.originals + ts.timed]
    if report is None and all(d is not None for d in ts.dicts):  # (an oracle with __slots__: never kept)
        ts.dicts = [_snapshot(d) for d in ts.dicts]
        _KEPT[0] = ts
    return ts
_NO_RAISE = frozenset({"gc_callback", "__del__", "_callback", "__exit__"})
# weakref's own callbacks (WeakKeyDictionary's ``remove``, WeakSet's ``_remove``) run from the garbage
# collector too: an exception raised there is swallowed as "unraisable" (and fails a pytest run).
_NO_RAISE_FILES = (os.sep + "weakref.py", os.sep + "_weakrefset.py")


def _in_callback(frame) -> bool:
    """Whether ``frame`` runs a finalizer or a gc / weakref callback, where a raise is lost."""
    return frame is not None and (frame.f_code.co_name in _NO_RAISE or frame.f_code.co_filename.endswith(_NO_RAISE_FILES))


class Alarm:
    """``with Alarm(timeout, message):`` raises ``exc`` (default :class:`CaseTimeout`, with ``message``)
    in the main thread after ``timeout`` seconds, re-armed every ``rearm`` seconds (default
    ``timeout``) so that whatever runs next (the next oracle, which ``gs.check`` would otherwise
    start after catching the first one) is cut as well; ``.fired`` says whether it went off.  Alarms
    nest: an inner one (a case) restores the outer one (a whole run's budget) with its time left.
    The context-manager form of ``_Alarm`` (same CaseTimeout, imports never cut), for the deadlines of ``verify_*``."""

    def __init__(self, timeout: float, message: str, rearm: float | None = None, exc=None):
        self.timeout, self.message, self.rearm, self.fired = timeout, message, rearm or timeout, False
        self.exc = exc or CaseTimeout

    def _on_alarm(self, signum, frame):
        if frame is not None and (_in_callback(frame) or _in_import(frame)):
            # An exception raised in a gc callback or a finalizer is swallowed ("unraisable"), one
            # raised inside an import leaves the module broken (_Alarm): try again a moment later.
            signal.setitimer(signal.ITIMER_REAL, 0.01)
            return
        self.fired = True
        signal.setitimer(signal.ITIMER_REAL, self.rearm)
        raise self.exc(self.message)

    def __enter__(self):
        self._outer = signal.getitimer(signal.ITIMER_REAL)[0]
        self._t0 = time.monotonic()
        self._previous = signal.signal(signal.SIGALRM, self._on_alarm)
        signal.setitimer(signal.ITIMER_REAL, self.timeout)
        return self

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._previous)
        if self._outer:  # an enclosing alarm: give it back the time it had left (at least a moment)
            signal.setitimer(signal.ITIMER_REAL, max(self._outer - (time.monotonic() - self._t0), 1e-3))
        return False




class Hung(BaseException):
    """Code under test that gradspec called outside a case (a user op's forward probing shapes or repairing
    values while a case is drawn, fn called to learn its shapes) did not return within the per-case timeout:
    raised by :func:`bounded` once the call was cut.  A BaseException: the probes take an ``Exception`` as
    "these shapes are refused", which a hang is not, and it must reach the caller that reports it."""

    def __init__(self, what: str, seconds: float) -> None:
        super().__init__(f"{what} did not return within {seconds:g} s (the per-case timeout): cut by {ALARM}")
        self.what, self.seconds = what, seconds


_HANGS: list = []  # every Hung raised in this process, in order (entry points read what came during their run)


def hangs_seen(since: int = 0) -> list:
    """The texts of the hangs :func:`bounded` cut in this process, from the ``since``-th on (``len(hangs_seen())``
    before a run, to read that run's own afterwards)."""
    return _HANGS[since:]


def bounded(fn, what: str, timeout: float | None = None):
    """``fn()``, cut by the alarm signal after ``timeout`` seconds (default: the per-case timeout in effect,
    ``_private.case_budget.current()``; none: no bound) and then :class:`Hung` naming ``what``; a cut the code
    swallowed (it caught the CaseTimeout and returned or raised its own error) is a hang too.  Off the main
    thread, or inside an enclosing alarm due sooner (a ``verify_*`` time budget, which then cuts it as its own),
    ``fn`` runs as it is.  Only for code under test that runs outside a case's timed check."""
    t = _case_budget.current() if timeout is None else timeout
    if not t or not _main_thread():
        return fn()
    outer = signal.getitimer(signal.ITIMER_REAL)[0]
    if outer and outer <= t:
        return fn()
    alarm = Alarm(t, f"{what}: cut after {t:g} s", rearm=0.05)
    try:
        with alarm:
            out = fn()
    except Exception:
        if not alarm.fired:
            raise
        out = None
    if alarm.fired:
        hung = Hung(what, t)
        _HANGS.append(str(hung))
        raise hung
    return out


# The bound of a listing's forward when no per-case timeout is in effect (a verify_* report written afterwards):
# verify_*'s default per-case timeout (gradspec.verify.numerics.CASE_TIMEOUT).
LISTING_TIMEOUT = 60.0


def case_listing(case: Case) -> str:
    """``case.to_text()``, whose forward (for the output dtypes) is cut after the per-case timeout in effect
    (else :data:`LISTING_TIMEOUT`): a report of a forward that hangs is still written, its listing without them."""
    try:
        return bounded(case.to_text, "the case's forward (run for its listing)",
                       _case_budget.current() or LISTING_TIMEOUT)
    except Hung as e:
        return case.to_text(evaluated=False) + f"\n  (outputs not shown: {e})"


def _timed_check(case, chosen, timeout, mine, report=None) -> Verdict:
    ts = _timed_set(chosen, timeout, mine, report)
    alarm = ts.alarm
    enclosing, t0 = signal.getitimer(signal.ITIMER_REAL)[0], time.monotonic()  # e.g. a verify_* budget: given back
    previous = _signal.signal(signal.SIGALRM, alarm)  # (signal.signal's enum wrapping of the old handler: ~2 us a call)
    # check() also runs the code under test outside the oracles' timed calls (its rounding-noise re-runs, the
    # diagnosis): the whole check gets a bound too, which each oracle's own timer suspends and gives back.
    overall = _case_budget.check_budget(timeout, len(chosen))
    signal.setitimer(signal.ITIMER_REAL, overall)
    try:
        with _case_budget.regions(lambda fn, default: _region(fn, default, timeout, alarm)):
            verdict = _check_safely(case, ts.timed)
        if alarm.overall:  # cut outside an oracle's call, and the code under test swallowed it: still a hang
            verdict.discrepancies.append(_overall_timeout(case, chosen, mine, overall, timeout).discrepancies[0])
        swallowed = [n for n in dict.fromkeys(alarm.cut) if (verdict.errors.get(n) or ("",))[0] != CaseTimeout.__name__]
        if swallowed and not any(d.kind == "timeout" for d in verdict.discrepancies):
            # a call of the code under test cut inside check() whose error check() did not keep (the diagnosis
            # re-runs a node at other upstream gradients and names what it can from the calls that returned)
            verdict.discrepancies.append(Discrepancy(
                kind="timeout", oracles=(swallowed[0], "case-timeout"), case=case,
                message=f"{swallowed[0]} exceeded the per-case timeout of {timeout:g} s when the check re-ran it on "
                        f"parts of this case (the diagnosis: one node at a time, other upstream gradients); cut by {ALARM}"))
        # The verdict keeps the oracles it used (for the diagnosis, which may call them again):
        # give it the plain ones, never a timed copy whose timer would outlive this handler.
        plain = {o.name: o for o in chosen}
        verdict.oracles = {n: plain.get(n, o) for n, o in (getattr(verdict, "oracles", None) or {}).items()}
        return verdict
    except CaseTimeout:
        if alarm.overall:  # the code under test, run by check() outside the oracles' calls, did not return
            return _overall_timeout(case, chosen, mine, overall, timeout)
        # the timer fired just as an oracle returned: no finding, the case says nothing
        return Verdict(case, {}, [], [], {"gradspec.check": "interrupted by the case timeout between two oracles "
                                                            "(not the code under test): nothing compared"}, {})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _signal.signal(signal.SIGALRM, previous)
        ts.busy = False
        if enclosing:
            signal.setitimer(signal.ITIMER_REAL, max(enclosing - (time.monotonic() - t0), 1e-3))


def _region(fn, default, timeout: float, alarm: _Alarm):
    """``fn()`` under a timer of its own, as an oracle's call (``_timed``): ``default`` when it was cut."""
    alarm.fired, alarm.in_call = False, True
    timer = _OwnTimer(timeout)
    try:
        out = fn()
        return default if alarm.fired else out  # (a cut the code caught: what it returned then means nothing)
    except CaseTimeout:
        return default
    except Exception:
        if not alarm.fired:
            raise
        return default  # (the code re-raised the cut as its own error)
    finally:
        timer.end()
        alarm.in_call = False


def _overall_timeout(case, chosen, mine, overall, timeout) -> Verdict:
    name = next((o.name for o in chosen if o.name in mine), "gradspec.check")
    return _synthetic(case, "timeout", (name, "case-timeout"),
                      f"checking the case took longer than {overall:g} s in all (each oracle's own call is bounded by "
                      f"{timeout:g} s): the code under test, re-run by the check outside an oracle's call (rounding-"
                      f"noise re-runs, the diagnosis), did not return; cut by {ALARM}", traceback.format_exc())


def _check_with_watchdog(case, oracles, timeout, n) -> Verdict:
    box: list = []
    t = threading.Thread(target=lambda: box.append(_check_safely(case, oracles)), daemon=True)
    t.start()
    t.join(timeout * max(1, n))
    if box:
        return box[0]
    # The thread cannot be killed; it is abandoned (a daemon thread) and the campaign moves on.
    return _synthetic(case, "timeout", ("gradspec.check", "case-timeout"),
                      f"checking the case exceeded {max(1, n)} x the per-case timeout of {timeout:g} s; cut by a "
                      "watchdog thread (no signals off the main thread): the hung call keeps running in the background")


def _isolated(case, chosen, timeout, mine) -> Verdict:
    """The check in a watched child; a witness the watchdog had to kill is dropped and the case checked
    again without it (its kill took the other oracles' results with it)."""
    dropped: dict = {}
    left = list(chosen)
    while True:
        outcome = _isolate.run(lambda report: _portable(_timed_check(case, left, timeout, mine, report)),
                               budget=timeout + GRACE)
        verdict = _settle_child(case, outcome, timeout, mine)
        killed = outcome[0] == "killed" and outcome[2] is not None and outcome[2] not in mine
        if not killed or len(left) <= 2:
            verdict.skipped.update(dropped)
            return verdict
        dropped.update(verdict.skipped)
        left = [o for o in left if o.name != outcome[2]]


def _portable(verdict: Verdict) -> Verdict:
    """The verdict as the child sends it back: oracle objects (a user's engine may not pickle) by name
    only, except those made inside check() (not in the parent's list), which go as they are if they can."""
    import pickle

    for name, o in list((getattr(verdict, "oracles", None) or {}).items()):
        try:
            pickle.dumps(o)
        except Exception:  # noqa: BLE001 - an unpicklable oracle: the parent has its own by this name
            verdict.oracles[name] = None
    return verdict


def _settle_child(case, outcome, timeout, mine) -> Verdict:
    """The verdict of an isolated check, or what its watchdog saw: a kill while an oracle ran, a crash."""
    kind, value, running, seconds = outcome
    if kind == "verdict":
        return value
    name = running or "gradspec.check"
    if kind == "killed":
        text = (f"{name} exceeded the per-case timeout of {timeout:g} s (its own time: {seconds:.3g} s when cut); "
                f"cut by {WATCHDOG}: the alarm signal could not interrupt it (a loop in C code?)")
        if running is not None and name not in mine:
            v = Verdict(case, {}, [], [], {name: f"{name} took longer than the per-case timeout of {timeout:g} s on "
                                             f"this case (a witness, not the code under test: not compared; cut by "
                                             f"{WATCHDOG})"}, {})
            return v
        return _synthetic(case, "timeout", (name, "case-timeout"), text)
    # The child died (a signal or os._exit) or could not send its verdict back.
    v = _synthetic(case, "crash", ("process", name),
                   f"the process checking this case (--isolate) {value} while {name} was running", None)
    v.discrepancies[0].cause = process_died(v.discrepancies[0].message)  # CONTRACT §8: a cause for every finding
    return v


def _retag_timeouts(verdict: Verdict, timeout, mine) -> None:
    for name, (etype, _msg, tb) in list(verdict.errors.items()):
        if etype != CaseTimeout.__name__:
            continue
        text = (f"{name} exceeded the per-case timeout of {timeout:g} s (--case-timeout, its own call alone: imports "
                f"and warm-up are not counted); cut by {ALARM} here")
        matched = [d for d in verdict.discrepancies if d.kind == "raised" and d.oracles[0] == name]
        for d in matched:
            d.kind, d.message, d.traceback, d.cause = "timeout", text, tb, None
        verdict.excused.pop(name, None)  # a timeout is never "both refuse the case"
        if not matched:
            verdict.discrepancies.append(Discrepancy(kind="timeout", oracles=(name, "case-timeout"), message=text,
                                                     case=verdict.case, traceback=tb))
