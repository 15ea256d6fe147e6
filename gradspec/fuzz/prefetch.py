"""Each oracle over all value sets of a group, back to back, before the sets are checked one by one.

A campaign checks the value sets of one graph (a ``CaseGroup``) in a row; ``gs.check`` runs four
oracles on a set, then the four on the next set.  Four implementations of the gradient (the reference
engine, finite differences' stencils, the JVP rules, torch's dispatcher and autograd) do not fit the
CPU's caches together: on the 400 cases of a campaign each oracle ran 1.3-2x slower interleaved than
back to back (torch 0.21 ms against 0.12, the four together 0.94 against 0.57).  So for a group, each
oracle first answers every set (``applies`` and its gradient call), and ``check`` then takes each
answer instead of computing it again: the same calls on the same cases, in another order.

What keeps the verdicts the same (``tests/test_prefetch.py`` compares whole campaigns with and without):

* only gradspec's own oracles (reference, finite differences, the jacobian, torch), whose answers depend
  on the case alone, and only when every oracle of the campaign is one of them (an engine under test
  that keeps state, or changes torch's global state, is never called in another order) and the graph
  holds no user op (user code may keep state between calls);
* each answer is taken once, by the check of that very case object; anything else (a diagnosis
  re-running an oracle, the shrinker) computes afresh;
* an oracle call that raises stores nothing: ``check`` calls it again and keeps its own exception and
  traceback;
* each call runs as in ``check`` (torch's thread setting, numpy's ignored floating-point errors, the
  case's per-check memo) and under its own ``--case-timeout`` (the alarm signal): a call cut by it
  ends the prefetch, and ``check`` runs that call under the guard as before;
* the in-flight file names the set being computed, so a crash is reported with its case;
* each set's per-case memo (``_private.percase``: its forward, op specs, exact kinks) stays open from
  the prefetch until its own check is done (``release``; ``clear`` closes what is left): the check
  takes the values the oracles computed on that very case object instead of computing them again;
* sets of one graph structure share one structure memo (``_private.structure``: what depends on the
  structure alone, e.g. a leaf's gradient precision, finite differences' watch plan), sets of
  another structure in the group get their own.

Not used with ``--isolate`` (each check runs in a child process), off the main thread (no alarm), or
before the campaign's first check (its warm-up).

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec.fuzz.prefetch import Prefetch
    >>> p = Prefetch([gs.oracles.get("reference"), gs.oracles.get("jacobian")], timeout=None)
    >>> a, b = (gs.Case.build({"x": np.array([v, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)]) for v in (0.5, 1.5))
    >>> p.run([a, b])
    2
    >>> gs.check(a, oracles=p.oracles).ok, len(p.store[id(b)][1])  # b's 4 answers (applies and gradient, 2 oracles) wait for b's check
    (True, 4)
"""

from __future__ import annotations

import copy
import signal

import numpy as np

from .. import engine as _engine
from .. import outcome as _outcome
from .._private import percase as _percase
from .._private import structure as _structure
from .._private.threads import oracle_threads
from ..check import _has_fd_jvp, _own_oracles
from ..guard import Alarm, CaseTimeout, _main_thread

__all__ = ["Prefetch"]

_MISS = object()


class Prefetch:
    """The campaign's oracles (``oracles``: copies that take prefetched answers) and the answers of the
    group being checked (``store``: id(case) -> (case, {(oracle name, method): answer}))."""

    def __init__(self, oracles, timeout: float | None) -> None:
        own = _own_oracles()
        self.timeout = timeout or None
        self.originals = list(oracles)
        self.active = all(type(o) in own for o in self.originals)
        self.store: dict = {}
        self._scopes: dict = {}  # id(case) -> (case, its open per-case memo scope): closed by release() / clear()
        self.oracles = [self._taking(o) for o in self.originals] if self.active else list(self.originals)

    def _taking(self, o):
        """A copy of ``o`` whose calls take a prefetched answer for their case if there is one (the methods
        still run on ``o`` itself, looked up per call, as ``guard``'s timed copies do)."""
        w = copy.copy(o)
        for meth in ("applies", "vjp", "result", "jacobian"):
            if callable(getattr(o, meth, None)):
                setattr(w, meth, _taker(self.store, o, meth))
        return w

    def clear(self) -> None:
        self.store.clear()
        scopes, self._scopes = self._scopes, {}
        for _, s in reversed(list(scopes.values())):
            s.__exit__(None, None, None)

    def release(self, case) -> None:
        """``case``'s check is done: its per-case memo (kept open since the prefetch) closes."""
        got = self._scopes.pop(id(case), None)
        if got is not None and got[0] is case:
            got[1].__exit__(None, None, None)

    def run(self, cases, mark=None) -> int:
        """Compute every oracle's answers on ``cases`` (``mark(case)``: before each call, the in-flight
        file); returns how many cases got answers (0 where prefetching does not apply)."""
        self.clear()
        if not self.active or len(cases) < 2 or not _main_thread():
            return 0
        cases = [c for c in cases if not _outcome.has_user_ops(c)]
        if len(cases) < 2:
            return 0
        for c in cases:
            self.store[id(c)] = (c, {})
            s = self._scopes[id(c)] = (c, _percase.scope(c))
            memo = s[1].__enter__()
            # The forward the draw computed at these very values (``strategies.value_set``): the memo's
            # forward, instead of computing it again (the kink test and the rules read it).
            env = _percase.take_forward(c)
            if env is not None and "forward" not in memo:
                memo["forward"] = env
        _structure.share(cases)  # (the sets of one graph structure: what depends on it alone, computed once)
        try:
            with oracle_threads(), _engine._quiet_fp(), _bounded(self.timeout) as arm:
                for o in self.originals:
                    if not o.available()[0]:
                        continue
                    for c in cases:
                        if mark is not None:
                            mark(c)
                        if not self._one(o, c, arm):
                            return len(cases)
        except CaseTimeout:
            pass  # cut between two calls: what is stored stays, check() computes the rest
        return len(cases)

    def _one(self, o, case, arm) -> bool:
        """``o``'s answers on ``case``, as ``check._ask_oracles`` would ask for them; False when the
        call ran out of time (prefetching stops)."""
        answers = self.store[id(case)][1]
        if o.name == "jacobian" and o.kind == "exact" and _has_fd_jvp(case):
            return True  # check() swaps in the finite-difference JVP oracle here
        try:
            arm()  # (one budget for the oracle's applies and gradient call on this case: what it cuts, check redoes)
            try:
                ok, why = o.applies(case)
            except CaseTimeout:
                raise
            except Exception:  # noqa: BLE001 - check() calls it again and reports what it raised
                return True
            answers[(o.name, "applies")] = (ok, why)
            if not ok or (o.kind == "fd" and case.n_inputs > getattr(o, "full_limit", np.inf)):
                return True
            meth = "result" if o.kind == "fd" else "jacobian" if o.name == "jacobian" else "vjp"
            try:
                answers[(o.name, meth)] = getattr(o, meth)(case)
            except CaseTimeout:
                raise
            except Exception:  # noqa: BLE001 - not kept: check() calls it again (its own traceback)
                pass
        except CaseTimeout:
            arm(0)
            return False
        return True


def _taker(store, o, meth):
    def call(*args, **kw):
        if len(args) == 1 and not kw:
            hit = store.get(id(args[0]))
            if hit is not None and hit[0] is args[0]:
                got = hit[1].pop((o.name, meth), _MISS)
                if got is not _MISS:
                    return got
        return getattr(o, meth)(*args, **kw)

    def answered(*args, **kw) -> bool:
        """Whether ``call(*args, **kw)`` takes a stored answer (``guard`` then calls it without a timer)."""
        if len(args) == 1 and not kw:
            hit = store.get(id(args[0]))
            return hit is not None and hit[0] is args[0] and (o.name, meth) in hit[1]
        return False

    call.__name__ = meth
    call.gradspec_answered = answered  # (read by guard: such a call is not timed)
    return call


class _bounded:
    """The alarm for the prefetch's calls: ``arm()`` gives the next call its own ``timeout`` (the handler
    is installed once for the group), ``arm(0)`` stops it.  Without a timeout, nothing."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self.alarm = None

    def __enter__(self):
        if self.timeout:
            self.alarm = Alarm(self.timeout, f"exceeded the per-case timeout of {self.timeout:g} s")
            self.alarm.__enter__()
            signal.setitimer(signal.ITIMER_REAL, 0)
        return self.arm

    def arm(self, seconds: float | None = None) -> None:
        if self.alarm is not None:
            signal.setitimer(signal.ITIMER_REAL, self.timeout if seconds is None else seconds)

    def __exit__(self, *exc):
        if self.alarm is not None:
            self.alarm.__exit__(*exc)  # (stops this timer, gives an outer one back what it had left)
        return False
