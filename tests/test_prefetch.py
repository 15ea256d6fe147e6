"""``gradspec.fuzz.prefetch``: a group's oracle answers computed back to back, then taken by each set's check.
The verdicts must be those of checking each set on its own: whole campaigns are compared with and without."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import gradspec as gs
from gradspec import oracles
from gradspec.fuzz import campaign as _campaign
from gradspec.fuzz.prefetch import Prefetch
from gradspec.fuzz.state import Config
from gradspec.guard import guarded_check
from tests._mutants import MUTANT_VJPS, planted

CPU = ["reference", "finite-differences", "jacobian", "torch-cpu"]
_SQ = gs.Op("prefetch_sq", forward=lambda x: x * x, vjp=lambda g, x, out: (2 * g * x,), torch=lambda x: x * x)


def _signature(v) -> str:
    return json.dumps({
        "status": v.status, "reason": v.reason, "skipped": sorted(v.skipped.items()),
        "errors": sorted((k, e[0], e[1]) for k, e in v.errors.items()), "notes": [str(n) for n in v.notes],
        "discrepancies": [(d.kind, list(d.oracles), d.message) for d in v.discrepancies],
        "comparisons": [(list(c.oracles), bool(c.agreed), repr(float(c.max_ratio))) for c in v.comparisons],
        "results": {k: {leaf: None if g is None else [str(np.asarray(g).dtype), np.asarray(g).tolist()]
                        for leaf, g in r.items()} for k, r in v.results.items()},
    }, default=repr, sort_keys=True)


_EVALUATE, _RUN = _campaign._Campaign._evaluate, Prefetch.run


def _campaign_verdicts(monkeypatch, tmp_path, on: bool, **cfg) -> tuple[list, int, dict]:
    """Every verdict of a campaign's generated cases, how many cases got prefetched answers, the summary."""
    seen, fetched = [], [0]
    evaluate, run = _EVALUATE, _RUN

    def record(self, case, mode):
        out = evaluate(self, case, mode)
        if mode == "generate":
            seen.append(_signature(out[1]))
        return out

    def counted(self, cases, mark=None):
        n = run(self, cases, mark) if on else 0
        fetched[0] += n
        return n

    monkeypatch.setattr(_campaign._Campaign, "_evaluate", record)
    monkeypatch.setattr(Prefetch, "run", counted)
    # (shrinking bounded by its number of calls, not by wall time: a loaded machine must not shrink less in one run)
    config = Config(oracles=CPU, report_dir=str(tmp_path / ("on" if on else "off")), replay_saved=False,
                    shrink_seconds=600.0, **cfg)
    stats = _campaign.run_campaign(config)
    return seen, fetched[0], {"cases": stats.cases, "pairs": dict(stats.pair_counts), "agree": dict(stats.pair_agree),
                              "skipped": dict(stats.skipped), "found": sorted(stats.found)}


@pytest.mark.parametrize("cfg", [dict(max_examples=150, seed=3), dict(max_examples=100, seed=9, dtype="float32")],
                         ids=["default mix", "float32"])
def test_a_campaign_gives_the_same_verdicts_with_and_without_prefetching(monkeypatch, tmp_path, cfg):
    on, fetched, s_on = _campaign_verdicts(monkeypatch, tmp_path, True, **cfg)
    off, none, s_off = _campaign_verdicts(monkeypatch, tmp_path, False, **cfg)
    assert fetched > len(on) // 2 and none == 0  # most sets were prefetched (not a group's first, nor the warm-up's)
    assert on == off
    assert s_on == s_off


def test_a_planted_wrong_vjp_is_found_alike_with_and_without_prefetching(monkeypatch, tmp_path):
    op, vjp = MUTANT_VJPS["mul-wrong-sign"]
    with planted(op, vjp):
        on, fetched, s_on = _campaign_verdicts(monkeypatch, tmp_path, True, max_examples=60, seed=5,
                                               ops=["mul", "add", "exp", "sum"])
        off, _, s_off = _campaign_verdicts(monkeypatch, tmp_path, False, max_examples=60, seed=5,
                                           ops=["mul", "add", "exp", "sum"])
    assert fetched and s_on["found"], s_on  # found, with prefetched sets before it
    assert on == off and s_on == s_off


def _cases(n=3, op="exp"):
    return [gs.Case.build({"x": np.array([0.5 + k, 2.0])}, [("y", op, ["x"], {})], ["y"], [np.ones(2)]) for k in range(n)]


def test_each_answer_is_taken_once_by_its_own_case():
    p = Prefetch([oracles.get(n) for n in CPU], timeout=None)
    cases = _cases()
    assert p.run(cases) == 3
    keys = set(p.store[id(cases[0])][1])
    assert {("torch-cpu", "vjp"), ("jacobian", "jacobian"), ("finite-differences", "result"),
            ("reference", "applies")} <= keys
    ref = p.oracles[0]
    first = ref.vjp(cases[0])
    assert ("reference", "vjp") not in p.store[id(cases[0])][1]  # taken
    again = ref.vjp(cases[0])  # computed afresh: equal, not the same object
    assert again is not first and all(np.array_equal(first[k], again[k]) for k in first)
    other = _cases(1)[0]  # equal to cases[0] but another object: never answered from the store
    assert other.to_json() == cases[0].to_json() and ref.vjp(other) is not None
    assert ("reference", "vjp") in p.store[id(cases[1])][1]


def test_a_call_that_raises_is_not_kept_and_check_reports_its_own_traceback():
    class Boom(Exception):
        pass

    ref = oracles.get("reference")
    p = Prefetch([ref, oracles.get("jacobian")], timeout=None)
    calls = []

    def vjp(case):
        calls.append(case)
        raise Boom("no")

    ref.vjp = vjp  # (an instance attribute: the registry's object, restored below)
    try:
        cases = _cases(2)
        p.run(cases)
        assert ("reference", "vjp") not in p.store[id(cases[0])][1] and len(calls) == 2
        v = gs.check(cases[0], oracles=p.oracles)
        assert len(calls) > 2 and v.errors["reference"][0] == "Boom"  # called again by check()
        assert "check.py" in v.errors["reference"][2]  # raised in check()'s own call
    finally:
        del ref.vjp


def test_what_prefetching_leaves_alone():
    class Mine(oracles.Oracle):
        name = "mine"

        def vjp(self, case):
            return oracles.get("reference").vjp(case)

    assert not Prefetch([oracles.get("reference"), Mine()], timeout=None).active  # an engine gradspec does not own
    p = Prefetch([oracles.get("reference"), oracles.get("jacobian")], timeout=None)
    assert p.run(_cases(1)) == 0  # one set: nothing to gain
    assert p.run(_cases(3, _SQ.name)) == 0  # user code may keep state between calls: not reordered


def test_a_call_past_the_timeout_ends_the_prefetch_and_check_cuts_it_under_the_guard():
    ref = oracles.get("reference")
    p = Prefetch([oracles.get("jacobian"), ref], timeout=0.2)
    slow = []

    def vjp(case):
        slow.append(case)
        time.sleep(5)

    ref.vjp = vjp
    try:
        cases = _cases(3)
        t0 = time.monotonic()
        p.run(cases)
        assert time.monotonic() - t0 < 4 and len(slow) == 1  # cut (the call sleeps 5 s), and no further call made
        assert all(("reference", "vjp") not in p.store[id(c)][1] for c in cases)
        v = guarded_check(cases[0], p.oracles, 0.2, under_test="reference")
        d = v.discrepancies[0]
        assert d.kind == "timeout" and d.oracles[0] == "reference" and "alarm signal" in d.message, v.summary()
    finally:
        del ref.vjp


def test_a_prefetch_that_fails_leaves_the_campaign_checking_as_before(monkeypatch, tmp_path):
    def broken(self, cases, mark=None):
        self.store[id(cases[0])] = (cases[0], {})
        raise RuntimeError("a bug in the prefetch")

    monkeypatch.setattr(Prefetch, "run", broken)
    stats = _campaign.run_campaign(Config(oracles=CPU, report_dir=str(tmp_path), replay_saved=False, max_examples=40,
                                          seed=3))
    assert stats.cases == 40 and not stats.errors and not stats.found, stats


def test_a_stored_answer_is_taken_without_a_timer_and_a_missing_one_is_timed(monkeypatch):
    """guard arms no per-call timer for an answer the prefetch holds (``gradspec_answered``), and times every other call."""
    import signal

    from gradspec import guard

    p = Prefetch([oracles.get(n) for n in CPU], timeout=None)
    cases = _cases(2)
    p.run(cases)
    ref = p.oracles[0]
    assert ref.vjp.gradspec_answered(cases[0]) and not ref.vjp.gradspec_answered(_cases(1)[0])
    armed = []
    real = signal.setitimer
    monkeypatch.setattr(guard.signal, "setitimer", lambda which, seconds, *a: armed.append(seconds) or real(which, seconds, *a))
    v = guarded_check(cases[0], p.oracles, 7.0, under_test="reference")
    assert v.ok and 7.0 not in armed  # every answer was stored: no oracle call armed its own 7 s
    assert not ref.vjp.gradspec_answered(cases[0])  # taken
    armed.clear()
    guarded_check(cases[0], p.oracles, 7.0, under_test="reference")  # nothing stored any more: timed again
    assert armed.count(7.0) == len(CPU)
