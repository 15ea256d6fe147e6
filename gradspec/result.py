"""What a ``verify_*`` run returns: :class:`Result` and its findings, :class:`VerifyDiscrepancy`.

The search layer fills a Result; the report layer writes it as HTML (``Result.write_html`` calls
the writer that :mod:`gradspec.result_html` installs, so this module never imports the report).

Example::

    >>> from gradspec.result import Result
    >>> r = Result(target="'cube'", what="op", seed=0)
    >>> r.status, r.ok, r.reason
    ('inconclusive', False, 'no case ran')
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable

from . import outcome as _outcome
from . import tolerances as _tol
from .check import Discrepancy

__all__ = ["Result", "VerifyDiscrepancy", "VerifyInterrupted", "set_html_writer", "RULE_SKIPS_BY_DESIGN"]

_HTML_WRITER: list[Callable] = []


def set_html_writer(fn: Callable) -> None:
    """Install ``fn(result, directory) -> path`` as what ``Result.write_html`` calls (the report layer does)."""
    _HTML_WRITER[:] = [fn]


@dataclasses.dataclass
class VerifyDiscrepancy(Discrepancy):
    """A discrepancy found by a ``verify_*`` run: what ``check()`` reports, plus how to replay it.

    ``kind`` is one of check()'s (``value``, ``shape``, ``none-vs-zeros``, ``nan-inf-pattern``,
    ``raised``), a user-op contract breach (``vjp-raised``, ``vjp-count``, ``vjp-shape``,
    ``vjp-dtype``, ``vjp-writes-input``, ``forward-raised``, ``jvp-raised``), or a backward()
    rule an engine broke (``implicit-seed``, ``seed-shape``, ``accumulation``,
    ``repeated-argument``, ``reset``, ``retain-graph``, ``freeing``, ``none-before-backward``,
    ``error-type``, ``requires-grad``).  ``case`` is the (shrunk) case where there is one;
    ``snippet`` is a few lines of Python that show an engine rule being broken.
    """

    replay: str = ""
    snippet: str | None = None
    check_name: str | None = None
    verdict: Any = dataclasses.field(default=None, repr=False)

    cases_showing: int = 1  # generated cases that showed this finding (gradspec.search counts them)
    note: str = ""  # e.g. the shrink budget ran out

    @property
    def signature(self) -> tuple:
        # A finding on a case is deduplicated like every finding (Discrepancy.signature: the cause,
        # or kind + oracle pair + culprit op once localised); an engine rule by its check.
        if self.case is not None:
            return super().signature
        return (self.kind, tuple(sorted(self.oracles)), (self.check_name or "",))

    def describe(self) -> str:
        lines = [f"[{self.kind}] {self.message}"]
        if self.cause is not None:  # CONTRACT §8: what is wrong and where, before the case
            lines.append(f"  cause: {self.cause}")
        if self.case is not None:
            lines.append("  case:")
            try:
                lines += ["  " + ln for ln in self.case.to_text().splitlines()]
            except Exception as e:  # noqa: BLE001 - a case that cannot even print is still reported
                lines.append(f"    (cannot list the case: {type(e).__name__}: {e})")
        if self.snippet:
            lines.append("  what happened:")
            lines += ["    " + ln for ln in self.snippet.splitlines()]
        if self.cases_showing > 1:
            lines.append(f"  shown by {self.cases_showing} generated cases (one finding: the same culprit)")
        if self.note:
            lines.append(f"  note: {self.note}")
        if self.replay:
            lines.append("  replay: " + self.replay.replace("\n", "\n          "))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()


class VerifyInterrupted(KeyboardInterrupt):
    """Ctrl-C (a KeyboardInterrupt) during a ``verify_*`` run: still a KeyboardInterrupt, as Python's
    convention is, carrying what the run had found so far as ``.result`` -- its discrepancies (a finding
    still being shrunk, unshrunk and undiagnosed, with a note saying so) and status ``disagree``, or
    ``inconclusive`` ("interrupted ...") when it had found none (tryout6 #13: everything was lost).

    >>> r = Result(target="'cube'", what="op", seed=0, cases_run=12, interrupted="interrupted after 12 cases")
    >>> e = VerifyInterrupted(r)
    >>> isinstance(e, KeyboardInterrupt), e.result.status, e.result.reason
    (True, 'inconclusive', 'interrupted after 12 cases')
    """

    def __init__(self, result: "Result") -> None:
        super().__init__(result.interrupted)
        self.result = result

    def __str__(self) -> str:
        return (f"{self.result.interrupted}: what the run found so far is this exception's .result "
                f"(except KeyboardInterrupt as e: e.result)\n{self.result.summary()}")


# A §5 rule skipped for what the engine is (or, under strict=False, a torch-specific detail): nothing left
# unchecked.  Any other skip (the time budget was spent, the engine hung) leaves a run inconclusive.
RULE_SKIPS_BY_DESIGN = ("strict=False", "the engine supports no", "the reference engine is the rules' oracle",
                        "no engine object")


@dataclasses.dataclass
class Result:
    """The outcome of a ``verify_*`` run.

    ``ok`` is true when no discrepancy was found; ``cases_run`` counts generated cases (shrinking
    re-runs excluded); ``discrepancies`` are :class:`VerifyDiscrepancy` s (shrunk cases);
    ``notes`` are observations that do not fail the run (torch-specific details under
    ``strict=False``, oracles that could not run...); ``checks`` maps each named property of an
    engine run to ``"passed"``, ``"failed"``, ``"note"`` or ``"skipped: why"``.
    """

    target: str
    what: str  # "op" | "torch function" | "engine"
    seed: int
    discrepancies: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    cases_run: int = 0
    shrink_runs: int = 0
    seconds: float = 0.0
    time_to_first: float | None = None
    cases_to_first: int | None = None
    first_found_by: str | None = None  # what found the first discrepancy when no value case did (§5 rules)
    max_examples: int | None = None
    budget_seconds: float | None = None
    strict: bool | None = None
    checks: dict = dataclasses.field(default_factory=dict)
    op_counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    pair_counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    pair_agree: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    replay: str = ""
    inconclusive: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # why -> cases
    unran: list = dataclasses.field(default_factory=list)  # why the code under test never ran (its first error)
    # cases at a point where the code is not differentiable (kink, jump): skipped, never reported
    nondifferentiable: int = 0
    nondifferentiable_reasons: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    # cases on which some pair of oracles was compared (a case verdict agree or disagree); None: not counted
    judged: int | None = None
    accuracy: dict | None = None  # {"rtol", "atol"} the code under test claims
    cut: str = ""  # why a case was cut by the time budget, not judged: no "agree" then (verify.numerics.cut_by_budget)
    not_a_function: str = ""  # why the code under test is not a function of its inputs (_private.determinism)
    interrupted: str = ""  # a KeyboardInterrupt (Ctrl-C) stopped the run: what it found so far is all there is
    stopped: str = ""  # the search stopped on an error (a Hypothesis round raised): the rest of the budget never ran
    # cases per precision ("float64" / "float32" / "mixed" -> [cases, judged, cases whose forward raised, first error,
    # cases whose forward overflowed where float64's is finite, the first]):
    # a precision whose forward raised on every case was never checked (tryout7 #5: "OK" with the float32 half unrun)
    precisions: dict = dataclasses.field(default_factory=dict)
    # draws of values the code under test's forward was not finite at (or raised on), skipped and redrawn: one line
    # per op (verify.numerics.fold_draws); ``unfinite``: why the run is inconclusive when it was never finite
    draws_skipped: list = dataclasses.field(default_factory=list)
    unfinite: str = ""
    # what every case held at the example's value (a torch function's int/bool tensor arguments and numbers): one
    # phrase each; a passing gs.assert_torch_function warns with them (tryout10 F7: a green test hid them)
    held: list = dataclasses.field(default_factory=list)

    def _status_reason(self) -> tuple[str, str]:
        if self.not_a_function:  # no comparison means anything (its findings set aside: determinism.set_aside)
            return "inconclusive", self.not_a_function
        if self.interrupted and not self.discrepancies:  # what was not run vouches for nothing
            return "inconclusive", self.interrupted
        compared = sum(self.pair_counts.values()) + sum(v == "passed" for v in self.checks.values())
        status, reason = _outcome.run_status(self.cases_run, len(self.discrepancies), compared,
                                             self.inconclusive.most_common(), self.unran)
        if status != "disagree" and self.unfinite:  # every value drawn was refused: nothing of it was checked
            return "inconclusive", self.unfinite + (f"; {reason}" if reason else "")
        if status == "agree" and self.cut:  # a case the budget cut was not judged: never a clean bill of health
            return "inconclusive", self.cut
        if status == "inconclusive" and self.cut:  # the cut first: it is why (tryout5 #10: "no pair ... compared")
            return status, f"{self.cut}; {reason}"
        if status == "agree" and self.stopped:  # the rest of the budget never ran (tryout7 #6: OK with 12 of 40)
            return "inconclusive", self.stopped
        if status == "inconclusive" and self.stopped and not self.unran:  # (the code's own error first: it is why)
            return status, f"{reason}; {self.stopped}"
        if status == "agree" and self.unran_precision():
            return "inconclusive", self.unran_precision()
        unrun = [f"{k} ({v[len('skipped: '):]})" for k, v in self.checks.items() if isinstance(v, str)
                 and v.startswith("skipped: ") and not v[len("skipped: "):].startswith(RULE_SKIPS_BY_DESIGN)]
        if status == "agree" and unrun:  # a backward() rule that never ran says nothing (the budget, a hang)
            return "inconclusive", f"{len(unrun)} backward() rule(s) (§5) were not checked: {'; '.join(unrun)}"
        if status == "agree" and self.thinly_judged() and not any(v == "passed" for v in self.checks.values()):
            return "inconclusive", self.thinly_judged()
        return status, reason

    def unran_precision(self) -> str:
        """Why a precision was never checked, or "": the forward raised (a float64-only solver refusing float32) or
        overflowed (naive log-sum-exp in float32) on every case drawn in it while the other precision agreed."""
        for dtype, (cases, judged, raised, error, over, first, *_rest) in self.precisions.items():
            if not cases or judged or raised + over < cases or len(self.precisions) < 2:
                continue
            fix = ("if fn is meant for float64 only, pass dtypes=('float64',)" if dtype == "float32" and self.what
                   in ("torch function", "module") else "")
            what = (f"raised on every {dtype} case ({cases} of {self.cases_run} cases; {error})" if raised == cases else
                    f"was not finite where the float64 forward is (an overflow) on every {dtype} case ({cases} of "
                    f"{self.cases_run} cases; first: {first})" if over == cases else
                    f"raised or overflowed on every {dtype} case ({cases} of {self.cases_run}; {error or first})")
            return (f"{dtype} was never checked: the forward {what} and only the other cases were judged: "
                    + (f"{fix}, or fix the forward" if fix else f"fix the forward for {dtype} inputs"))
        return ""

    def thinly_judged(self) -> str:
        """Why an "agree" would say little, or "": most cases were not judged (non-differentiable points,
        oracles that stepped aside) and fewer than MIN_JUDGED_CASES compared a pair of oracles
        (gradspec.tolerances: MIN_JUDGED_CASES)."""
        judged = self._judged()
        if judged is None or 2 * judged >= self.cases_run or judged >= _tol.MIN_JUDGED_CASES:
            return ""
        return (f"only {judged} of {self.cases_run} cases compared a pair of oracles ({self._unjudged_text()}), "
                f"fewer than the {_tol.MIN_JUDGED_CASES} that can vouch for the gradient: raise max_examples (or "
                "seconds), or draw inputs away from the non-differentiable points (domain=)")

    def _judged(self) -> int | None:
        # (shrinking re-checks cases: a run that found something may count more evaluations than cases)
        return None if self.judged is None else min(self.judged, self.cases_run)

    def _unjudged_text(self) -> str:
        parts = [f"{self.nondifferentiable} at non-differentiable points"] if self.nondifferentiable else []
        rest = self.cases_run - (self._judged() or 0) - self.nondifferentiable
        if rest > 0:  # (the reasons: Result.inconclusive, the run's notes)
            parts.append(f"{rest} inconclusive for other reasons")
        return ", ".join(parts) or "the others were not judged"

    @property
    def status(self) -> str:
        """``"agree"``, ``"disagree"`` or ``"inconclusive"`` (CONTRACT §3); ``ok`` is True only for agree.

        Inconclusive: no case ran, or no case compared a pair of oracles (nor passed a backward() rule)."""
        return self._status_reason()[0]

    @property
    def reason(self) -> str:
        """Why the run was inconclusive ("" otherwise), with the code under test's error when it never ran."""
        return self._status_reason()[1]

    @property
    def ok(self) -> bool:
        return self.status == "agree"

    @property
    def kinds(self) -> list[str]:
        return [d.kind for d in self.discrepancies]

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def summary(self) -> str:
        n = len(self.discrepancies)
        status, reason = self._status_reason()
        head = ("OK" if status == "agree" else f"INCONCLUSIVE ({reason})" if status == "inconclusive"
                else f"FAILED ({n} discrepanc{'y' if n == 1 else 'ies'})")
        lines = [
            f"gradspec verify {self.what} {self.target}: {head} — {self.cases_run} cases in {self.seconds:.2f} s, "
            f"seed {self.seed}"
        ]
        lines += [f"  {d}" for d in self.draws_skipped if not self.unfinite]  # (else the head says it)
        lines += [f"  {k} of {self.cases_run} cases not counted: {why}" for why, k in self.inconclusive.items()
                  if why in _outcome.UNCOUNTED]
        if self.nondifferentiable:
            lines.append(f"  {self.nondifferentiable} case(s) at non-differentiable points (kinks, jumps) skipped, "
                         "not judged")
        if self.judged is not None and 2 * self._judged() < self.cases_run and status != "disagree":
            lines.append(f"  only {self._judged()} of {self.cases_run} cases were judged ({self._unjudged_text()}): "
                         "raise max_examples (or seconds), or draw inputs away from the non-differentiable points (domain=)")
        for dtype, (cases, _judged, _raised, _error, over, first, *_rest) in self.precisions.items():
            if over:
                lines.append(f"  the {dtype} forward was not finite where the float64 forward is (an overflow) on {over} "
                             f"of {cases} {dtype} cases, not judged there; first: {first}")
        if self.accuracy:
            lines.append(f"  claimed accuracy: rtol={self.accuracy['rtol']:g}, atol={self.accuracy['atol']:g}")
        if self.time_to_first is not None:
            by = (f"found by {self.first_found_by}" + (f", after {self.cases_to_first} value cases" if self.cases_to_first
                                                      else "") if self.first_found_by else f"{self.cases_to_first} cases")
            lines.append(f"  first discrepancy after {self.time_to_first:.2f} s ({by})")
        if self.checks:
            failed = [k for k, v in self.checks.items() if v == "failed"]
            # a rule hit only by one op's wrong VJP is no broken rule: that bug is a value discrepancy below
            apart = collections.Counter(v for v in self.checks.values() if v.startswith("passed apart from"))
            lines.append(f"  backward() rules: {sum(v == 'passed' for v in self.checks.values())} passed"
                         + "".join(f", {k} {v}" for v, k in apart.items())
                         + (f", failed: {', '.join(failed)}" if failed else ""))
        for i, d in enumerate(self.discrepancies):
            lines.append(f"--- discrepancy {i + 1} of {len(self.discrepancies)}")
            lines.append(d.describe())
        if self.notes:
            lines.append("notes:")
            lines += [f"  - {n}" for n in self.notes]
        if not self.ok and self.replay:
            lines.append(f"replay the whole run: {self.replay}" if "\n" not in self.replay else
                         "replay the whole run:\n  " + self.replay.replace("\n", "\n  "))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "what": self.what,
            "ok": self.ok,
            "status": self.status,
            "reason": self.reason,
            "inconclusive": dict(self.inconclusive.most_common(10)),
            "seed": self.seed,
            "cases": self.cases_run,
            "shrink_runs": self.shrink_runs,
            "discrepancies": len(self.discrepancies),
            "seconds": round(self.seconds, 3),
            "time_to_first": None if self.time_to_first is None else round(self.time_to_first, 3),
            "cases_to_first": self.cases_to_first,
            "first_found_by": self.first_found_by,
            "strict": self.strict,
            "checks": dict(self.checks),
            "notes": list(self.notes),
            "ops": dict(sorted(self.op_counts.items())),
            "oracles": {f"{a} vs {b}": n for (a, b), n in sorted(self.pair_counts.items())},
            "agreement": {f"{a} vs {b}": self.pair_agree[(a, b)] for (a, b) in sorted(self.pair_counts)},
            "skipped": dict(self.skipped.most_common()),
            "nondifferentiable": self.nondifferentiable,
            "draws_skipped": list(self.draws_skipped),
            "judged": self._judged(),
            "accuracy": self.accuracy,
            "replay": self.replay,
            "items": [
                {"kind": d.kind, "oracles": list(d.oracles), "message": d.message, "replay": d.replay,
                 "snippet": d.snippet, "check": d.check_name}
                for d in self.discrepancies
            ],
        }

    def write_html(self, directory: str) -> str:
        """Write ``directory/index.html`` (the run), ``summary.json`` and one folder per
        discrepancy (``index.html``, and for cases ``case.json`` + ``repro.py``); returns the
        path of ``index.html``."""
        if not _HTML_WRITER:
            raise RuntimeError("no HTML writer installed: import gradspec (the package) before writing a report")
        return _HTML_WRITER[0](self, directory)
