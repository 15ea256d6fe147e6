"""The per-case timeout in effect, for code that re-runs the code under test outside an oracle's timed call.

``gradspec fuzz --case-timeout``, ``guarded_check`` and ``verify_*`` time each oracle's call on a case.  The
diagnosis of a finding (``gradspec.diagnose``) re-runs the code under test afterwards, on one node at a time
and at other upstream gradients; a hang there hung the whole run.  The entry points say here which per-case
timeout is in effect, and the diagnosis bounds itself by it (a hang there is a ``timeout`` finding too).

Example::

    >>> from gradspec._private.case_budget import case_timeout, current
    >>> current() is None
    True
    >>> with case_timeout(5.0):
    ...     current()
    5.0
    >>> diagnosis_budget(60.0), check_budget(1.0, 2)
    (180.0, 62.0)
"""

from __future__ import annotations

import contextlib
import contextvars

__all__ = ["case_timeout", "current", "diagnosis_budget", "check_budget", "DIAGNOSIS_FACTOR", "DIAGNOSIS_MIN",
           "timed_region", "regions"]

_TIMEOUT: contextvars.ContextVar = contextvars.ContextVar("gradspec_case_timeout", default=None)
_REGION: contextvars.ContextVar = contextvars.ContextVar("gradspec_timed_region", default=None)


@contextlib.contextmanager
def case_timeout(seconds):
    """Inside, :func:`current` is ``seconds`` (None or 0: no timeout; the outer one is kept)."""
    if not seconds:
        yield
        return
    token = _TIMEOUT.set(float(seconds))
    try:
        yield
    finally:
        _TIMEOUT.reset(token)


def current() -> float | None:
    """The per-case timeout in effect (seconds), or None."""
    return _TIMEOUT.get()


# The diagnosis re-runs the code under test a few dozen times (one node at a time, other upstream gradients and
# inputs); each run is no bigger than the case, whose every oracle call fitted the per-case timeout.  It is
# bounded as a whole by DIAGNOSIS_FACTOR per-case timeouts (at least DIAGNOSIS_MIN seconds, for slow code
# under short timeouts); past that the code under test is taken to hang there.
DIAGNOSIS_FACTOR = 3.0
DIAGNOSIS_MIN = 30.0


def diagnosis_budget(timeout: float) -> float:
    """Seconds the diagnosis of one finding may take under a per-case ``timeout``."""
    return max(DIAGNOSIS_MIN, DIAGNOSIS_FACTOR * float(timeout))


def check_budget(timeout: float, oracles: int) -> float:
    """Wall seconds one guarded check of ``oracles`` oracles may take in all: each oracle's own call, plus what
    ``check()`` runs outside them (the rounding-noise re-runs of the code under test, the diagnosis), twice
    over.  Past that the code under test is taken to hang outside an oracle's timed call."""
    return oracles * float(timeout) + 2 * diagnosis_budget(timeout)


def timed_region(fn, default):
    """``fn()`` when it is code under test that ``check()`` runs before the oracles (the determinism probe calls
    each user op's forward): inside a guarded check it gets the per-case timeout of its own, as an oracle's call
    does (``gradspec.guard``), and ``default`` is returned when it was cut -- the oracles then meet the hang
    themselves and report it as theirs.  Else (no guarded check) ``fn()`` as it is."""
    runner = _REGION.get()
    return fn() if runner is None else runner(fn, default)


@contextlib.contextmanager
def regions(runner):
    """Inside, :func:`timed_region` runs its function through ``runner(fn, default)`` (set by ``gradspec.guard``)."""
    token = _REGION.set(runner)
    try:
        yield
    finally:
        _REGION.reset(token)
