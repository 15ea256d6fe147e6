"""The Hypothesis round driver behind ``verify_op``, ``verify_torch_function`` and ``verify_engine``.

Hypothesis stops at the first failure of a test; a search runs it in *rounds*: each round ends
at a new finding (shrunk, within a bounded number of shrink calls and seconds), which joins the
known set; the next round looks for something else, until a round finds nothing new or the
budget (cases or seconds) is spent.

Example::

    >>> from gradspec.search import _resolve_seed
    >>> _resolve_seed(3)
    3
"""

from __future__ import annotations

import hashlib
import random
import time
import warnings
from typing import Callable

import numpy as np

from ._private.hypothesis_env import fixed_constants
from .case import Case
from .diagnose import deferred, explain
from .result import Result

__all__ = ["DEFAULT_MAX_EXAMPLES", "SHRINK_CALLS", "SHRINK_SECONDS"]

DEFAULT_MAX_EXAMPLES = 60  # ~1-4 s for a user op, a few seconds for an engine
SHRINK_CALLS = 120  # shrinking attempts per failure before the smallest case so far is kept (deterministic)
SHRINK_SECONDS = 10.0  # and a safety net in time, for very slow cases


class _Found(Exception):
    pass


class _StopShrinking(BaseException):
    """Raised out of Hypothesis when the shrinking time is up (a BaseException, so Hypothesis
    lets it through at once instead of trying more candidates)."""


class _OutOfBudget(BaseException):
    """Raised out of Hypothesis when the time budget is spent."""


class _Runner:
    """Runs Hypothesis over ``strategy`` calling ``evaluate(case) -> [VerifyDiscrepancy]``."""

    def __init__(self, result: Result, max_examples: int | None, seconds: float | None):
        self.result = result
        self.started = time.perf_counter()
        if max_examples is None and seconds is None:
            max_examples = DEFAULT_MAX_EXAMPLES
        self.max_examples = max_examples
        self.deadline = None if seconds is None else self.started + float(seconds)
        self.found: dict = {}  # signature -> VerifyDiscrepancy
        self.memo: dict = {}

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def out_of_budget(self) -> bool:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            return True
        return self.max_examples is not None and self.result.cases_run >= self.max_examples

    def run(self, strategy, evaluate: Callable[[Case], list]) -> None:
        from hypothesis import HealthCheck, Phase, Verbosity, given, settings
        from hypothesis import seed as hyp_seed
        from hypothesis.errors import Flaky

        R = self.result
        rounds = 0
        while not self.out_of_budget():
            rounds += 1
            state = {"shrinking": False, "since": None, "last": None, "calls": 0, "target": set()}

            def one(case):
                key = _case_key(case)
                if state["shrinking"]:
                    R.shrink_runs += 1
                    state["calls"] += 1
                    if state["calls"] > SHRINK_CALLS or time.perf_counter() - state["since"] > SHRINK_SECONDS:
                        raise _StopShrinking()  # keep the smallest failing case found so far
                    if key in self.memo:
                        new = self.memo[key]
                    else:
                        new = self._new(evaluate(case))
                        self.memo[key] = new
                    # Shrink towards a smaller case of the SAME failure; others wait for a later round.
                    new = [d for d in new if d.signature in state["target"]]
                else:
                    if self.out_of_budget():
                        raise _OutOfBudget()
                    R.cases_run += 1
                    new = self._new(evaluate(case))
                    self.memo[key] = new
                    if new and R.time_to_first is None:
                        R.time_to_first = self.elapsed()
                        R.cases_to_first = R.cases_run
                if new:
                    if not state["shrinking"]:
                        state["shrinking"], state["since"] = True, time.perf_counter()
                        state["target"] = {d.signature for d in new}
                    state["last"] = new
                    raise _Found(new)

            remaining = 10**9 if self.max_examples is None else max(1, self.max_examples - R.cases_run)

            @settings(max_examples=remaining, deadline=None, database=None, derandomize=False,
                      phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck),
                      verbosity=Verbosity.quiet, print_blob=False, report_multiple_bugs=False)
            @given(strategy)
            def prop(case):
                one(case)

            prop = hyp_seed(R.seed + 7919 * rounds)(prop)
            try:
                with warnings.catch_warnings(), fixed_constants(), deferred():
                    warnings.simplefilter("ignore")
                    prop()
                break  # a whole round without anything new: done
            except _Found as f:
                self._record(f.args[0])
            except _StopShrinking:
                self._record(state["last"])
            except _OutOfBudget:
                break
            except Flaky:
                if state["last"]:
                    self._record(state["last"])
                else:
                    break
            except Exception as e:  # noqa: BLE001 - e.g. strategies could not build any case
                from hypothesis.errors import Unsatisfiable

                if isinstance(e, Unsatisfiable) or "Unsatisfiable" in type(e).__name__:
                    R.note(f"Hypothesis could not generate cases: {e}")
                    break
                raise
        R.seconds = self.elapsed()

    def _new(self, found: list) -> list:
        return [d for d in found if d.signature not in self.found]

    def _record(self, found: list) -> None:
        for d in found:
            explain(d)  # CONTRACT §8, once per kept finding (check() defers it while the search shrinks)
            if d.signature not in self.found:
                self.found[d.signature] = d
                self.result.discrepancies.append(d)


def _case_key(case: Case) -> str:
    try:
        return hashlib.sha1(case.to_json(indent=None).encode()).hexdigest()
    except Exception:  # noqa: BLE001
        return repr(id(case))


def _resolve_seed(seed) -> int:
    if seed is None:
        return random.SystemRandom().randrange(2**31)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int or None, got {seed!r}")
    return int(seed)


def _check_budget(max_examples, seconds) -> None:
    if max_examples is not None and (isinstance(max_examples, bool) or not isinstance(max_examples, (int, np.integer))
                                     or max_examples < 1):
        raise ValueError(f"max_examples must be a positive int or None, got {max_examples!r}")
    if seconds is not None and (not isinstance(seconds, (int, float)) or not seconds > 0):
        raise ValueError(f"seconds must be a positive number or None, got {seconds!r}")
