"""A time budget bounds the shrinking, localising and diagnosing of what it finds too (reliability review M5).

``gradspec fuzz --seconds 10`` ran 38.8 s: the search stopped drawing at the budget, but a finding made near its
end was then localised (up to 5 s of reduction checks) and diagnosed (re-runs of the code under test, up to
3 per-case timeouts) past it, and its note said "the shrink budget ran out (120 calls / 60 s ...)", which was
not why.  Now a finding the budget cuts short is kept as it is, unshrunk, with the note ``search.TIME_NOTE`` and a
``not-localised`` cause that says why (an interrupted shrink is kept the same way), and the §5 rule searches stop
shrinking at their share of the budget.  No timed assertion: the budget is made to run out during the first check
(the deadline moved to "now"), so the cut is certain whatever the machine's load.
"""

from __future__ import annotations

import time

import numpy as np

import gradspec as gs
from gradspec.check import Discrepancy, Verdict
from gradspec.search import TIME_NOTE, Driver


def _case() -> gs.Case:
    return gs.Case.build({"x": np.array([0.5, 1.5])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])


def test_a_finding_the_time_budget_cuts_short_is_kept_unshrunk_with_the_reason():
    from hypothesis import strategies as st

    calls = []

    def evaluate(case, mode):
        calls.append(mode)
        drv.deadline = time.perf_counter() - 1e-3  # the budget runs out while this case is checked
        d = Discrepancy(kind="value", oracles=("reference", "planted"), message="planted: off by 0.5", case=case)
        return [d], Verdict(case, {}, [], [d], {}, {})

    drv = Driver(st.just(_case()), evaluate, seconds=3600, max_examples=5)
    drv.run()
    (f,) = drv.findings.values()
    assert TIME_NOTE in f.note and f.shrink_exhausted, f.note
    assert f.discrepancy.cause is not None and f.discrepancy.cause.id == "not-localised", f.discrepancy.cause
    assert "time budget ran out" in f.discrepancy.cause.summary
    assert "localise" not in calls, calls  # no reduction checks past the budget
