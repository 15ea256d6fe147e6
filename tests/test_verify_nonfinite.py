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


# (review14 #4) a case counts for a verify_* run of an op only where that op's gradient was exercised: a leaf that
# requires grad reaches its inputs and it reaches a root whose seed is not all zeros.  Decided from the case's
# structure and seeds, never from the verdict: a 100x-wrong vjp on such a case agrees, and must not be counted.
BAD100 = gs.Op("t14_bad100", forward=np.sin, vjp=lambda g, x, out: (g * 100.0,))
SIN = gs.Op("t14_sin", forward=np.sin, vjp=lambda g, x, out: (g * np.cos(x),))


def _op_cases(op: str) -> dict:
    two = {"x": np.array([0.3, 0.4]), "y": np.array([0.1, 0.2])}
    return {
        "constant input": gs.Case.build(two, [("u", op, ["x"], {}), ("w", "mul", ["u", "y"], {})], ["w"],
                                        [np.array([1.0, 2.0])], requires_grad={"x": False}),
        "zero seed": gs.Case.build(two, [("u", op, ["x"], {}), ("w", "exp", ["y"], {})], ["u", "w"],
                                   [np.zeros(2), np.ones(2)]),
        "zero seed downstream": gs.Case.build(two, [("u", op, ["x"], {}), ("w", "mul", ["u", "y"], {})], ["w"],
                                              [np.zeros(2)]),
        "output unused": gs.Case.build(two, [("u", op, ["x"], {}), ("w", "exp", ["y"], {})], ["x", "w"],
                                       [np.ones(2), np.ones(2)]),
        "one live root": gs.Case.build(two, [("u", op, ["x"], {}), ("w", "exp", ["u"], {})], ["u", "w"],
                                       [np.zeros(2), np.array([0.0, 1.0])]),
    }


@pytest.mark.parametrize("which", ["constant input", "zero seed", "zero seed downstream", "output unused"])
def test_a_case_where_the_ops_gradient_never_mattered_is_not_counted(which):
    from gradspec import outcome

    v = gs.check(_op_cases("t14_bad100")[which])
    assert v.status == "agree", v.summary()  # the 100x-wrong vjp never reached a compared value
    assert not outcome.counts_for_run(v, "t14_bad100")
    if which != "zero seed downstream":  # (a fuzz run, no op under test: the other ops' values were compared)
        assert outcome.counts_for_run(v)


def test_a_case_where_the_op_reaches_one_live_root_counts_and_finds_the_bug():
    from gradspec import outcome

    v = gs.check(_op_cases("t14_bad100")["one live root"])
    assert v.status == "disagree" and outcome.counts_for_run(v, "t14_bad100"), v.summary()
    ok = gs.check(_op_cases("t14_sin")["one live root"])
    assert ok.status == "agree" and outcome.counts_for_run(ok, "t14_sin"), ok.summary()


def test_a_run_says_how_many_cases_it_did_not_count_and_why_and_none_counted_is_inconclusive():
    from gradspec.result import Result
    from gradspec.verify.op import _note_verdicts

    cases = _op_cases("t14_sin")
    dead = [gs.check(cases[k]) for k in ("constant input", "zero seed", "output unused")]
    live = gs.check(cases["one live root"])

    none = Result(target="t", what="op", seed=0)
    for v in dead * 3:
        none.cases_run += 1
        _note_verdicts(none, [v], "t14_sin")
    assert none.judged == 0 and not none.pair_counts
    assert none.status == "inconclusive" and not none.ok, none.summary()
    assert "requires grad" in none.reason and "seeded with zeros" in none.reason, none.reason
    assert "reaches no root" in none.reason, none.reason

    some = Result(target="t", what="op", seed=0)
    for v in [live] * 12 + dead:
        some.cases_run += 1
        _note_verdicts(some, [v], "t14_sin")
    assert some.judged == 12 and some.status == "agree", some.summary()
    text = some.summary()
    assert "1 of 15 cases not counted" in text and "requires grad" in text, text
    assert "seeded with zeros" in text and "reaches no root" in text, text
