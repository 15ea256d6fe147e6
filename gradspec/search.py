"""The one Hypothesis round driver behind ``gradspec fuzz``, ``verify_*`` and the pytest plugin.

Hypothesis stops a test at its first failure.  The driver runs it in *rounds*, the way
``hypothesis.find`` drives a search: each round is a ``@given`` test with ``phases`` (generate +
shrink; a first round of the *reuse* phase alone replays an example database), ``max_examples``
= what is left of the budget and ``deadline=None`` (the driver enforces its own budget of
cases or seconds).  In a round a case is a failure only when it shows a discrepancy that no
known finding covers (:func:`gradspec.findings.covered`); the first one fixes the round's target
(kind + oracle pair) and, while Hypothesis shrinks, a smaller case is a failure only if it still
shows the target.  Shrinking is bounded (``shrink_calls`` calls and ``shrink_seconds``); the
shrunk case is then localised (:func:`gradspec.findings.localise`: dead nodes dropped, cut at the
smallest failing node), its signature is the finding's, and a finding whose signature is known
only adds to the count of cases that showed it: one bug, one report.

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec.search import Driver
    >>> from gradspec import strategies as gst
    >>> def evaluate(case, mode):
    ...     v = gs.check(case, oracles=["reference", "jacobian"])
    ...     return v.discrepancies, v
    >>> drv = Driver(gst.cases(ops=["exp", "mul"], max_nodes=3), evaluate, max_examples=5, seed=0)
    >>> drv.run(), drv.cases, len(drv.findings)
    ('budget', 5, 0)
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import sys
import time
import warnings
from typing import Callable

import numpy as np

from ._private import user_warnings
from ._private.hypothesis_env import fixed_constants
from ._private.iteration_words import widen
from ._private.seeds import resolve_seed as _resolve_seed  # noqa: F401 - verify_* import it from here
from .case import Case
from .causes import Cause
from .diagnose import deferred, diagnosis_timeouts, explain
from .findings import Localised, covered, covers, localise, named_culprit, search_signature
from .result import Result, VerifyInterrupted
from .strategies import CaseGroup

__all__ = ["Driver", "Finding", "DEFAULT_MAX_EXAMPLES", "SHRINK_CALLS", "SHRINK_SECONDS", "LOCALISE_CALLS", "TIME_NOTE"]

DEFAULT_MAX_EXAMPLES = 60  # ~1-4 s for a user op, a few seconds for an engine
SHRINK_CALLS = 120  # Hypothesis shrinking calls per finding; the smallest case so far is kept (deterministic)
SHRINK_SECONDS = 10.0  # and a safety net in time, for very slow cases
LOCALISE_CALLS = 40  # checks of the deterministic reduction after shrinking (one per node of a small case)
LOCALISE_SECONDS = 5.0
# A finding the time budget (``seconds=``, ``gradspec fuzz --seconds``) cut short: kept as it is, as an interrupted one
TIME_NOTE = ("shrinking cut short: the time budget ran out while this discrepancy was being shrunk; the case is the "
             "smallest seen so far, not shrunk further, localised nor diagnosed (replay it, or run again: the example "
             "database replays it first)")
_STOPS = ("time", "interrupted", "error", "report-dir", "budget", "hang")
# Oracles that witness J^T·seed rather than run the code under test (see Driver._same_rule).
_WITNESSES = frozenset({"finite-differences", "jacobian"})
_SAME_RULE_KINDS = frozenset({"value", "nan-inf-pattern"})


class _Found(Exception):
    """Raised in the test body: this case shows the round's target (one raise site: Hypothesis
    tells failures apart by where they were raised)."""


class Stop(BaseException):
    """Ends a round at once with ``reason`` (a BaseException: Hypothesis lets it through)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass
class Finding:
    """One bug: its first discrepancy (localised), the verdict of that case, the signatures it
    covers, how many generated cases showed it, and a note (e.g. the shrink budget ran out)."""

    discrepancy: object
    verdict: object
    covers: list
    cases: int = 1
    note: str = ""
    shrink_exhausted: bool = False
    worst_rel: float = 0.0  # the largest relative error over the cases that showed it (iteration_words.widen)

    def saw(self, d) -> None:
        """One more generated case showed this finding (``d``: its discrepancy there)."""
        self.cases += 1
        rel = getattr(d, "rel_err", None)
        if isinstance(rel, float) and math.isfinite(rel):
            self.worst_rel = max(self.worst_rel, rel)

    @property
    def signature(self) -> tuple:
        return self.discrepancy.signature


class Driver:
    """Rounds of Hypothesis over ``strategy``; ``evaluate(case, mode) -> (discrepancies, verdict)``
    with mode ``generate`` / ``shrink`` / ``replay`` / ``localise``.

    ``max_examples`` / ``seconds``: the budget (generated cases, wall time); ``seed``: the seed
    of round 0 (``round_seed(rnd)`` overrides it); ``database`` / ``database_key``: Hypothesis'
    example database (failures saved there replay first with ``run(replay=True)``);
    ``known``: signatures found earlier (not hunted again; ``known_source()`` adds more at each
    round); ``on_found(finding)``: called at once
    for each new finding; ``before(case, mode)``: called before each case (may raise
    :class:`Stop`); ``progress(driver)``: after each case; ``explain(discrepancy)``: more diagnosis
    of a kept finding, before it is deduplicated by its signature.
    """

    def __init__(self, strategy, evaluate: Callable, *, max_examples: int | None = None, seconds: float | None = None,
                 seed: int = 0, round_seed: Callable[[int], int] | None = None, shrink_calls: int | None = None,
                 shrink_seconds: float | None = None, database=None, database_key: bytes | None = None,
                 known=(), known_source: Callable | None = None, on_found: Callable | None = None,
                 before: Callable | None = None, progress: Callable | None = None,
                 explain: Callable | None = None, on_group: Callable | None = None,
                 cases_per_example: float | None = None, stop_on_timeout: bool = False) -> None:
        self.strategy = strategy
        self.evaluate = evaluate
        self.started = time.perf_counter()
        self.max_examples = max_examples
        self.deadline = None if seconds is None else self.started + float(seconds)
        self.round_seed = round_seed or (lambda rnd: int(seed) + 7919 * rnd)
        self.shrink_calls = SHRINK_CALLS if shrink_calls is None else shrink_calls
        self.shrink_seconds = SHRINK_SECONDS if shrink_seconds is None else shrink_seconds
        self.database, self.database_key = database, database_key
        self.known: set = set(known)
        self.known_source = known_source  # signatures found elsewhere meanwhile (other shards)
        self.on_found, self.before, self.progress = on_found, before, progress
        self.on_group = on_group  # on_group(cases, mode): before the sets of one example are checked
        # Cases an example holds on average (value sets of a CaseGroup strategy): Hypothesis is asked
        # for the number of examples that fills the budget, not for as many examples as cases.
        self.cases_per_example = None if cases_per_example is None else max(1.0, float(cases_per_example))
        self.explain = explain  # more diagnosis of a kept finding (e.g. an engine-level cause), before dedup
        # A timeout finding ends the search (verify_*: one function under test; every later case that hangs
        # would cost the per-case timeout again, for a finding already made); a campaign goes on (other ops).
        self.stop_on_timeout = stop_on_timeout
        self._hang = False
        self.findings: dict = {}  # signature -> Finding
        self.cases = self.shrink_runs = self.replayed = self.localise_runs = 0
        self.time_to_first: float | None = None
        self.cases_to_first: int | None = None
        self.errors: list[str] = []
        self.stop_reason = ""
        self.mode = "generate"
        self._pending: dict = {}  # signature -> (discrepancy, found, verdict): met while shrinking another
        self._memo: dict = {}
        self._seen: set = set()  # fingerprints of the value sets checked (generate mode)
        self._hint = None  # leaf values of the last set that showed the target (shrink mode)
        self.repeats = 0  # value sets not checked: the same case was checked before

    # -- budget ----------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def _spent(self) -> str | None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            return "time"
        if self.max_examples is not None and self.cases >= self.max_examples:
            return "budget"
        return None

    # -- the test body ---------------------------------------------------------------------
    def _one(self, example) -> None:
        """The test body: one case, or a :class:`~gradspec.strategies.CaseGroup` (value sets of one
        graph), each set checked as a case of its own until one shows the target."""
        cases = example if isinstance(example, CaseGroup) else (example,)
        mode = self.mode
        if mode == "generate" and isinstance(example, CaseGroup):
            # Hypothesis' mutator copies a block of choices onto another and runs the result: most
            # sets of such a group are the very cases of the group it came from.  A set checked
            # before is not checked (nor counted) again.
            cases = [c for c in cases if self._fresh(c)]
        if mode == "shrink":
            self._shrink_calls += 1
            if self._shrink_calls > self.shrink_calls or time.perf_counter() > self._shrink_until:
                self._shrink_exhausted = True
                raise Stop("shrink-budget")
            if self.deadline is not None and time.perf_counter() > self.deadline:
                self._shrink_exhausted = "time"  # (reported unshrunk, with the note TIME_NOTE)
                raise Stop("time")
            if len(cases) > 1:
                # Sets checked before cost nothing (the memo): those first; then a set with the values
                # of the last set that showed the target (shrinking often keeps them while it deletes
                # other sets or simplifies the graph); then the others in order.
                def rank(c):
                    return 0 if _case_key(c) in self._memo else 1 if _values_key(c) == self._hint else 2

                cases = sorted(cases, key=rank)
        if self.on_group is not None:
            self.on_group(cases, mode)
        for case in cases:
            self._one_case(case, mode)

    def _fresh(self, case: Case) -> bool:
        key = _fingerprint(case)
        if key in self._seen:
            self.repeats += 1
            return False
        if len(self._seen) >= _SEEN_MAX:
            self._seen.clear()
        self._seen.add(key)
        return True

    def _one_case(self, case: Case, mode: str) -> None:
        if mode == "generate" and self._spent():
            raise Stop(self._spent())
        if self.before is not None:
            self.before(case, mode)
        found, verdict = self._evaluate(case, mode)
        if self.progress is not None:
            self.progress(self)
        if mode == "replay":
            if not found:
                return
            self._finish(case, found[:1], found, verdict, "replayed from the example database")
            raise _Found()
        new = [d for d in found if not covered(search_signature(d), self._frozen)]
        if mode == "generate" and new:
            new = [d for d in new if not self._same_rule(d)]
        if mode == "generate" and found and not new:
            self._count(found[0])
        if not new:
            return
        if mode == "generate":
            if self.time_to_first is None:
                self.time_to_first, self.cases_to_first = self.elapsed(), self.cases
            self._target = (new[0].kind, tuple(sorted(new[0].oracles)))
            self.mode = "shrink"
            self._shrink_until = time.perf_counter() + self.shrink_seconds
        hit = [d for d in new if (d.kind, tuple(sorted(d.oracles))) == self._target]
        for d in new:
            if d not in hit:
                self._pending.setdefault(search_signature(d), (d, found, verdict))
        if hit:
            self._last = (case, hit, found, verdict)
            self._hint = _values_key(case)
            if self._target[0] == "timeout":
                # Not shrunk: each try of a case that hangs costs the whole per-case timeout (a verify_* search
                # of 120 shrink calls at 60 s each never ended); the case that hung is the finding's.
                self._shrink_exhausted = "timeout"
                raise Stop("shrink-budget")
            raise _Found()

    def _evaluate(self, case: Case, mode: str):
        if mode == "generate":
            self.cases += 1
        elif mode == "shrink":
            self.shrink_runs += 1
            key = _case_key(case)
            if key in self._memo:
                return self._memo[key]
        elif mode == "replay":
            self.replayed += 1
        else:
            self.localise_runs += 1
        out = self.evaluate(case, mode)
        if mode == "shrink":
            self._memo[key] = out
        return out

    def _same_rule(self, d) -> bool:
        """A numeric discrepancy (a value, NaN where the others are finite) between the code under test and
        any oracle, on a case that contains an op whose rule a finding already blames (wrong-vjp): the same
        rule showing through another oracle pair or another kind (cubic_bug's g/(3y^2) is a factor off, and
        infinite at y = 0).  Shrinking it again found nothing new after ~15 s each (a new user's op whose
        forward is a Newton solve: 4 extra shrinks, 60 s of a 67 s run, all deduplicated into the first
        finding afterwards); it is counted as a case of that finding instead.  A second bug in the same op
        shows once the first is fixed."""
        if d.kind not in _SAME_RULE_KINDS or d.case is None:
            return False
        under = set(d.oracles) - _WITNESSES
        ops = set(d.case.ops)
        for f in self.findings.values():
            c = f.discrepancy.cause
            if c is not None and c.id == "wrong-vjp" and c.op in ops and under & set(f.discrepancy.oracles):
                f.saw(d)
                return True
        return False

    def _count(self, d) -> None:
        sig = search_signature(d)
        for f in self.findings.values():
            if covered(sig, f.covers):
                f.saw(d)
                return

    def unfinished(self) -> list:
        """The discrepancies seen but not kept when the search stopped early (Ctrl-C): the smallest case so far of
        the one being shrunk, then those waiting for their turn; one per signature no kept finding covers."""
        return [d for d, _verdict, _covers in self.unfinished_verdicts()]

    def unfinished_verdicts(self) -> list:
        """:meth:`unfinished` as ``[(discrepancy, its verdict, the signatures it covers)]``.  One finding stands
        for the other oracle pairs of its case that share its culprit oracle (:func:`covers`), as a kept one does:
        one bug, one report (an interrupted fuzz run listed the same wrong VJP three times, once per witness)."""
        seen = [(self._last[1][0], self._last[2], self._last[3])] if self._last is not None else []
        seen += list(self._pending.values())
        out, taken = [], set(self.known)
        for d, found, verdict in seen:
            sig = search_signature(d)
            if not covered(sig, taken):
                mine = covers(d, found)
                taken |= set(mine) | {sig}
                out.append((d, verdict, mine))
        return out

    # -- after shrinking: localise, deduplicate, report --------------------------------------
    def _finish(self, case, hit, found, verdict, note: str = "") -> None:
        target = (hit[0].kind, tuple(sorted(hit[0].oracles)))
        if hit[0].case is not None:
            case = hit[0].case  # the memo may hand back an equal case object of an earlier call
        box = {"verdict": verdict, "found": found}

        def reproduces(c):
            got, v = self._evaluate(c, "localise")
            same = [d for d in got if (d.kind, tuple(sorted(d.oracles))) == target]
            if same:
                box["verdict"], box["found"] = v, got
            return same

        left = LOCALISE_SECONDS if self.deadline is None else min(LOCALISE_SECONDS, self.deadline - time.perf_counter())
        late = left <= 0  # the time budget is spent: kept as it is (review M5: --seconds 10 ran 38.8 s)
        with deferred():  # the reduction re-checks smaller cases: only the one kept is explained, below
            loc = Localised(case, hit, None, 0, False) if target[0] == "timeout" or late else localise(
                case, hit, reproduces, max_calls=LOCALISE_CALLS, seconds=left)
        if loc.case is not case:
            hit = loc.found
        found = box["found"] if loc.case is not case else found
        for d in found:
            if loc.culprit is not None and d.case is loc.case:
                d.culprit = loc.culprit
        d = hit[0]
        if getattr(d, "verdict", None) is None and box["verdict"] is not None:
            d.verdict = box["verdict"]  # what the diagnosis re-checks (verify_* findings carry their own)
        if late and d.cause is None and target[0] != "timeout":  # (a diagnosis re-runs the code: seconds to minutes)
            d.cause = Cause("not-localised", "not diagnosed: the time budget ran out before this finding could be "
                            "localised (replay its case for the diagnosis)", evidence=d.message)
        explain(d)  # CONTRACT §8, once per kept finding, on the localised case
        d.culprit = named_culprit(d)  # (the summary's culprit is the op the cause blames, when it blames one)
        if self.explain is not None and not late:
            self.explain(d)
        exhausted = getattr(self, "_shrink_exhausted", False) or loc.exhausted
        if late and not exhausted:
            exhausted = "time"
        if exhausted == "timeout":
            why = "not shrunk: each try of a case that hangs costs the whole per-case timeout"
            note = f"{note}; {why}" if note else why
        elif exhausted == "time":
            note = f"{note}; {TIME_NOTE}" if note else TIME_NOTE
        elif exhausted and not at_floor(d.case if d.case is not None else case):
            why = (f"the shrink budget ran out ({self.shrink_calls} calls / {self.shrink_seconds:g} s of Hypothesis "
                   f"shrinking, {LOCALISE_CALLS} reduction checks): the case may not be minimal")
            note = f"{note}; {why}" if note else why
        self._keep(d, box["verdict"], covers(d, found), note, bool(exhausted))
        for t in diagnosis_timeouts([d]):  # the code under test hung when the diagnosis re-ran it
            self._keep(t, box["verdict"], [t.signature], "found while diagnosing another finding", False)

    def _keep(self, d, verdict, covered_sigs, note: str, exhausted: bool) -> None:
        sig = d.signature
        if sig in self.findings:
            self.findings[sig].saw(d)
            return
        if sig in self.known:
            # Found before this search by another one (a §5 rule search of verify_engine, another shard):
            # the cause, now diagnosed, is that finding's -- one bug, one report.
            return
        f = Finding(d, verdict, covered_sigs, note=note, shrink_exhausted=exhausted)
        f.worst_rel = d.rel_err if isinstance(d.rel_err, float) and math.isfinite(d.rel_err) else 0.0
        self.findings[sig] = f
        self.known |= set(f.covers)
        if d.kind == "timeout" and self.stop_on_timeout:
            self._hang = True
        if self.on_found is not None:
            self.on_found(f)

    # -- rounds ----------------------------------------------------------------------------
    def _prop(self, phases, max_examples: int, rnd: int, multiple: bool):
        from hypothesis import HealthCheck, Verbosity, given, settings

        @settings(max_examples=max(1, max_examples), deadline=None, database=self.database, phases=phases,
                  suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet, report_multiple_bugs=multiple,
                  print_blob=False, derandomize=False)
        @given(self.strategy)
        def gradspec_search(case):
            self._one(case)

        # What @seed does, minus its side effect of switching the example database off; both
        # attributes are the ones hypothesis.find() and @seed set.
        gradspec_search._hypothesis_internal_use_seed = self.round_seed(rnd)
        if self.database_key is not None:
            gradspec_search._hypothesis_internal_database_key = self.database_key
        return gradspec_search

    def _round(self, prop) -> str | None:
        """One Hypothesis round; a stop reason, or None to go on."""
        self._last = None
        self._shrink_calls, self._shrink_exhausted = 0, False
        from hypothesis.errors import HypothesisWarning

        with warnings.catch_warnings(), fixed_constants(), deferred():
            # fixed_constants: the same seed draws the same cases whatever code is loaded;
            # deferred: check() leaves causes unset while the search runs (explained once per finding).
            # Hypothesis' own warnings (its "overly large repr" of big cases) are no news to the user; the code under
            # test's warnings are theirs and stay visible (before: every warning was ignored here, the user's too)
            warnings.simplefilter("ignore", HypothesisWarning)
            try:
                prop()
                reason = "done"
            except _Found:
                reason = None
            except Stop as e:
                reason = e.reason
            except KeyboardInterrupt:
                raise
            except Exception as e:  # Flaky (a nondeterministic engine or a timeout), Unsatisfiable...
                if self._last is None and self.mode != "replay":
                    self.errors.append(_stopped_round(e, self._spent()))
                    return "error"
                reason = None
        if self._last is not None:
            self._finish(*self._last)
            self._last = None
        return None if reason == "shrink-budget" else reason

    def run(self, replay: bool = False) -> str:
        """Run rounds until the budget is spent or a round finds nothing new; returns why it stopped."""
        from hypothesis import Phase

        reason = None
        if replay and self.database is not None:
            self.mode, self._frozen = "replay", set(self.known)
            reason = self._round(self._prop([Phase.reuse], 1000, 0, True))
            if reason == "done":
                reason = None
        rnd = 0
        while reason not in _STOPS:
            if self._spent():
                reason = self._spent()
                break
            rnd += 1
            if self.known_source is not None:
                self.known |= set(self.known_source())
            self.mode, self._frozen = "generate", set(self.known)
            before = self.cases
            remaining = 10**9 if self.max_examples is None else self.max_examples - self.cases
            if self.cases_per_example is not None:
                # At least 10 examples: a round's first example is the simplest one, which an earlier
                # round has checked already (a repeat is not checked again, see _fresh).
                remaining = max(math.ceil(remaining / self.cases_per_example), 10)
            reason = self._round(self._prop([Phase.generate, Phase.shrink], remaining, rnd, False))
            if self._hang:
                reason = "hang"
                break
            if reason == "done":
                # Hypothesis ended the round by itself: the budget is spent, or the strategy rejected
                # too much; another round (another seed) only helps in the second case.
                reason = None if before < self.cases and not self._spent() else "budget"
        self.mode = "done"
        self._finish_pending()
        self.stop_reason = reason or "budget"
        return self.stop_reason

    def _finish_pending(self) -> None:
        """The discrepancies seen while shrinking another one, kept unless a finding covers them by now -- or blames
        the rule they show (:meth:`_same_rule`, as a generated case is judged): seen before that finding was
        diagnosed, such a case was reported as a second finding with its own cause (tryout11 #4: one wrong RK4 stage
        weight gave a wrong-vjp finding and, on a two-node graph of the same op seen meanwhile, a 'not-localised' one
        saying every node's rule agrees).  It is counted as a case of that finding instead: one bug, one report."""
        for sig, (d, found, verdict) in list(self._pending.items()):
            if not covered(sig, self.known) and not self._same_rule(d):
                self._finish(d.case, [d], found, verdict, "not shrunk: seen while shrinking another discrepancy")


class _Runner:
    """``verify_*``'s use of the :class:`Driver`: ``evaluate(case) -> [VerifyDiscrepancy]`` (each
    carrying its verdict), findings appended to the Result as they come."""

    def __init__(self, result: Result, max_examples: int | None, seconds: float | None, explain: Callable | None = None):
        self.result = result
        self.explain = explain  # the Driver's: more diagnosis of a kept finding, before dedup (e.g. an engine-level cause)
        if max_examples is None and seconds is None:
            max_examples = DEFAULT_MAX_EXAMPLES
        self.max_examples, self.seconds = max_examples, seconds
        self.found: dict = {}  # signature -> VerifyDiscrepancy found before the search (known)

    def run(self, strategy, evaluate: Callable[[Case], list]) -> None:
        R = self.result

        def on_found(f: Finding) -> None:
            d = f.discrepancy
            d.cases_showing = f.cases
            if f.note:
                d.note = f.note
            R.discrepancies.append(d)

        from ._private.saved_failures import database_for

        db, key = database_for(R.what, R.target)  # dev / fuzz profiles: a failure found once replays first
        def evaluated(case, mode):
            try:
                return evaluate(case), None
            finally:
                rec.mark(mode == "generate")

        drv = Driver(strategy, evaluated, max_examples=self.max_examples,
                     seconds=self.seconds, seed=R.seed, known={tuple(s) for s in self.found}, on_found=on_found,
                     explain=self.explain, stop_on_timeout=True, database=db, database_key=key,
                     progress=slow_hint(f"verify {R.what} {R.target}", self.max_examples, self.seconds))
        stopped = None
        try:
            with user_warnings.recording() as rec:  # the user's warnings: recorded, never raised here (reemit: once)
                drv.run(replay=db is not None)
        except KeyboardInterrupt as e:  # Ctrl-C: what was found so far goes with the exception (tryout6 #13)
            stopped = e
        except Exception as e:  # noqa: BLE001 - e.g. strategies could not build any case
            from hypothesis.errors import Unsatisfiable

            if not (isinstance(e, Unsatisfiable) or "Unsatisfiable" in type(e).__name__):
                raise
            R.note(f"Hypothesis could not generate cases: {e}")
        for f in drv.findings.values():
            f.discrepancy.cases_showing = f.cases
            widen(f.discrepancy.cause, f.worst_rel, f.cases)  # (the accuracy advised: at least the largest seen)
        for e in drv.errors:
            R.note(e)
        if drv.stop_reason == "error" and drv.errors and not drv._spent():  # no OK from the cases before it
            # (tryout7 #6; a round stopped once the budget was spent lost nothing: the cut rules judge that case)
            R.stopped = (f"{drv.errors[-1]} (the search stopped there, after {drv.cases} case{'s' * (drv.cases != 1)}; "
                         "the rest of the budget never ran)")
        if drv.stop_reason == "hang":
            R.note("the search stopped at the first case that hung (a timeout finding): every later case that hangs "
                   "would cost the per-case timeout again; fix the hang and run again")
        R.cases_run += drv.cases
        user_warnings.keep(R, rec)
        R.shrink_runs += drv.shrink_runs + drv.localise_runs
        if drv.time_to_first is not None and R.time_to_first is None:
            R.time_to_first, R.cases_to_first = drv.time_to_first, drv.cases_to_first
        R.seconds = drv.elapsed()
        if stopped is not None:
            for d in drv.unfinished():
                d.note = "not shrunk nor diagnosed: the run was interrupted (Ctrl-C) before it was"
                R.discrepancies.append(d)
            R.interrupted = f"interrupted (KeyboardInterrupt) after {R.cases_run} case{'s' * (R.cases_run != 1)}"
            # (one traceback, the interrupted one's: where Ctrl-C came, as a bare KeyboardInterrupt shows it)
            raise VerifyInterrupted(R).with_traceback(stopped.__traceback__) from None


_SEEN_MAX = 200_000  # fingerprints kept (16 bytes each); forgotten all at once past this


def at_floor(case: Case) -> bool:
    """A case as small as a finding's case gets: one node, every leaf of at most two elements (tryout8 F11: two
    2-vectors of a matmul, one (0, 1) leaf were said to be perhaps not minimal when the shrink budget ran out)."""
    return len(case.nodes) <= 1 and all(np.size(l.value) <= 2 for l in case.leaves)


def _fingerprint(case: Case) -> bytes:
    """What makes a case this case: structure, leaf values (bytes), seeds."""
    h = hashlib.blake2b(digest_size=16)
    for l in case.leaves:
        v = l.value
        h.update(f"{l.name}|{v.dtype.str}|{v.shape}|{l.requires_grad}|".encode())
        h.update(v.tobytes())
    h.update(repr([(n.name, n.op, n.inputs, n.params) for n in case.nodes]).encode())
    h.update(repr(case.roots).encode())
    for s in case.seeds:
        if s is None:
            h.update(b"|none")
        else:
            h.update(f"|{s.dtype.str}|{s.shape}|".encode())
            h.update(np.ascontiguousarray(s).tobytes())
    return h.digest()


def _values_key(case: Case) -> tuple:
    return tuple(l.value.tobytes() for l in case.leaves)


def _case_key(case: Case) -> str:
    try:
        return hashlib.sha1(case.to_json(indent=None).encode()).hexdigest()
    except Exception:  # noqa: BLE001
        return repr(id(case))


def _check_budget(max_examples, seconds) -> None:
    if max_examples is not None and (isinstance(max_examples, bool) or not isinstance(max_examples, (int, np.integer))
                                     or max_examples < 1):
        raise ValueError(f"max_examples must be a positive int or None, got {max_examples!r}")
    if seconds is not None and (not isinstance(seconds, (int, float)) or not seconds > 0):
        raise ValueError(f"seconds must be a positive number or None, got {seconds!r}")


def _stopped_round(e: Exception, spent: str | None) -> str:
    """What Hypothesis stopping a round means, in words (its own text asks "is your data generation
    depending on external state?", which is no question for a gradspec user: tryout4 #13)."""
    name = type(e).__name__
    if name == "FlakyStrategyDefinition":
        why = ("the time budget ran out inside a case (a hang or very slow code), so the re-run stopped early"
               if spent == "time" else "a check was cut part-way (a timeout: a hang or very slow code), or the code "
               "under test behaves differently from one call to the next (state kept between calls, randomness)")
        return (f"Hypothesis stopped a round: a case it ran again did not draw the same values ({name}): {why}. The "
                "cases judged before stand; to judge the one that was cut, give more time (seconds= / --seconds) "
                "or look at the code for a loop that may not end")
    if name.startswith("Flaky"):
        return (f"Hypothesis stopped a round: a case failed once and not when it ran again ({name}): the code "
                "under test (or an oracle) gives other results from one call to the next, or a check was cut by "
                f"a timeout once; {str(e)[:200]}")
    return f"Hypothesis stopped a round: {name}: {str(e)[:300]}"


HINT_AFTER = 20.0  # seconds of a verify_* run before the first progress line: quick runs stay silent
HINT_EVERY = 30.0


def slow_hint(what: str, max_examples: int | None, seconds: float | None, stream=None,
              after: float | None = None, every: float | None = None) -> Callable:
    """A ``Driver`` progress callback: once a run has gone on for ``after`` seconds, a line every ``every``
    seconds on stderr with the cases done, the time a case takes, where it goes (per oracle) and when the
    run ends.  A slow forward (12 ms, called ~660 times a case by finite differences and the jacobian
    oracle) made a 40-case run silent for 6 minutes (tryout4 #12).  Costs a clock read per case."""
    from ._private import activity

    after = HINT_AFTER if after is None else after
    every = HINT_EVERY if every is None else every
    state = {"t0": time.monotonic(), "last": None, "spent": activity.snapshot()}

    def show(drv) -> None:
        now = time.monotonic()
        el = now - state["t0"]
        if el < after or (state["last"] is not None and now - state["last"] < every):
            return
        state["last"] = now
        done = max(drv.cases + drv.shrink_runs + drv.localise_runs, 1)
        per = el / done
        split = ", ".join(f"{k} {v / done:.2g} s" for k, v in list(activity.since(state["spent"]).items())[:3])
        if seconds is not None:
            left = f"the run ends at seconds={seconds:g} (in {max(0.0, seconds - el):.0f} s)"
        elif max_examples is not None and drv.cases >= max_examples:
            # (tryout8 F11: "about 1 s more" for 90 s: shrinking, diagnosis and the backward() rules come after)
            left = (f"the max_examples={max_examples} cases are done; shrinking and diagnosing findings (and an "
                    "engine's backward() rules) follow, their time not known in advance")
        elif max_examples is not None:
            left = (f"about {per * (max_examples - drv.cases):.0f} s more for the {max_examples - drv.cases} cases "
                    f"left of max_examples={max_examples}, then shrinking and diagnosing findings (and an engine's "
                    "backward() rules)")
        else:
            left = ""
        line = (f"gradspec: {what}: {drv.cases} cases checked in {el:.0f} s, {per:.2g} s a case"
                + (f" ({split})" if split else "") + (f"; {left}" if left else ""))
        if per > 2.0:
            line += (" -- slow code under test: finite differences and the jacobian oracle call the forward "
                     "several times per input element in every case (some 50 times for a forward without a batch axis); "
                     "fewer max_examples= or a seconds= budget shorten the run")
        try:
            print(line, file=stream or sys.stderr, flush=True)
        except (OSError, ValueError):
            pass

    return show
