"""A forward that is not finite at the values drawn (tryout9 #1): never a silent "agree".

log1mexp written for x > 0 but declared on interval(-5, -1) is NaN at every value drawn.  The generator redraws such
values, so the only cases left had leaves of 0 elements, where the oracles compare shapes and dtypes but no value:
verify_op and verify_torch_function said "agree, 30/30 judged, every pair agreed".  A run that compared no value is
inconclusive and says why (the forward was never finite: check the domain); a forward that is not finite on part of
its domain has those draws counted as skipped, with the reason, in the result and its summary.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradspec as gs
from tests import _tryout9_code as T

NEVER_FINITE = {  # a run over a domain where the forward is NaN at every value
    "verify_op": lambda: gs.verify_op(T.log1mexp_negdomain, max_examples=30, seed=0),
    "verify_torch_function": lambda: gs.verify_torch_function(T.Log1mexp.apply, arity=1,
                                                              domain=gs.domains.interval(-5, -1), max_examples=30, seed=0),
}


@pytest.mark.parametrize("run", list(NEVER_FINITE), ids=list(NEVER_FINITE))
def test_a_forward_never_finite_on_the_domain_is_inconclusive(run):
    r = NEVER_FINITE[run]()
    assert r.status == "inconclusive" and not r.ok, r.summary()
    assert "not finite" in r.reason and "check the domain" in r.reason and "interval(-5" in r.reason, r.reason
    assert not r.judged, r.summary()
    assert not sum(r.pair_agree.values()), dict(r.pair_agree)  # no pair "agreed" on values never compared
    assert r.reason in r.summary() and r.to_json()["status"] == "inconclusive"


def test_a_check_of_empty_leaves_still_agrees_on_shapes_but_a_run_of_them_vouches_for_nothing():
    """gs.check on a case whose leaves have 0 elements compares the gradients' shapes (a wrong one is found) and
    says no value was compared; a run is judged only by cases that compared values."""
    from gradspec.result import Result
    from gradspec.verify.op import _note_verdicts

    empty = gs.Case.build({"x": np.ones((0, 3))}, [("y", "sin", ["x"], {})], ["y"], [np.ones((0, 3))])
    v = gs.check(empty)
    assert v.status == "agree" and any("no values to compare" in str(n) for n in v.notes)
    result = Result(target="t", what="op", seed=0)
    for _ in range(3):
        result.cases_run += 1
        _note_verdicts(result, [v])
    assert result.judged == 0 and not result.pair_counts
    assert result.status == "inconclusive" and "0 elements" in result.reason, result.reason


def test_draws_where_the_forward_is_not_finite_are_counted_as_skipped():
    """log on the real line: NaN at every negative draw.  Those draws are skipped with the reason (counted), the
    positive ones are checked (a correct vjp agrees, a wrong one is found)."""
    r = gs.verify_op(T.log_real, max_examples=30, seed=0)
    assert r.status == "agree", r.summary()
    skipped = {k: n for k, n in r.skipped.items() if "not finite" in k}
    assert skipped and all(n > 0 for n in skipped.values()) and "t9_log_real" in next(iter(skipped)), dict(r.skipped)
    line = next((ln for ln in r.summary().splitlines() if "not finite" in ln and "skipped" in ln), "")
    assert "t9_log_real" in line and f"{sum(skipped.values())} of" in line, r.summary()
    assert "not finite" not in r.reason
    bad = gs.verify_op(T.log_real_bad, max_examples=30, seed=0)
    assert bad.status == "disagree", bad.summary()


def test_a_forward_finite_everywhere_skips_nothing():
    op = gs.Op("t9_tanh", forward=np.tanh, vjp=lambda g, x, out: (g * (1 - out ** 2),))
    r = gs.verify_op(op, max_examples=20, seed=0)
    assert r.ok and not any("not finite" in k for k in r.skipped), dict(r.skipped)
    assert "not finite" not in r.summary()


def test_a_fuzz_run_that_compared_no_value_is_inconclusive(tmp_path, capsys):
    """The same op through ``gradspec fuzz``: exit 0 and "agreement 30/30" before; exit 3 with the reason now."""
    from gradspec import cli

    rc = cli.main(["fuzz", "--ops", "tests._tryout9_code:log1mexp_negdomain", "--max-examples", "20", "--seed", "1",
                   "--report-dir", str(tmp_path / "r")])
    out = capsys.readouterr()
    assert rc == 3, out.out + out.err
    assert "0 elements" in out.out + out.err and "no gradient value compared" in out.out + out.err


def test_two_runs_in_two_threads_keep_their_own_draw_tallies():
    """(review14 #5) The tally stack was one list for the process: thread A's skipped draw landed in thread B's run
    (opened after A's), A's stayed empty.  Events order the two threads; nothing is timed."""
    import threading

    from gradspec._private import draw_tally as T

    a_in, b_in, a_seen, b_read = (threading.Event() for _ in range(4))
    got: dict = {}

    def run_a():
        with T.tallying() as t:
            a_in.set()
            b_in.wait()
            T.seen("t14_op_a", [np.array([1.0])], np.array([np.nan]))  # A's own draw, while B's run is open
            a_seen.set()
            b_read.wait()
            got["A"] = dict(t)

    def run_b():
        a_in.wait()
        with T.tallying() as t:
            b_in.set()
            a_seen.wait()
            got["B"] = dict(t)
            got["B active"] = T.active()
            b_read.set()

    threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert list(got["A"]) == ["t14_op_a"] and got["A"]["t14_op_a"].skipped == 1, got
    assert got["B"] == {} and got["B active"], got
    assert not T.active()  # (this thread opened no run)
