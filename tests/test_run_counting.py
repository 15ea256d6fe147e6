"""What a run counts (CONTRACT §3/§6: a run that compared nothing is never OK; every run says what was not counted).

One mechanism (``gradspec.outcome.run_count``) decides, for ``verify_*`` (the op under test) and for ``gradspec fuzz``
(every op of a case: the engine's), whether a case's comparisons judged a gradient: a case whose roots are all
seeded with zeros compares only zeros, and an op whose output reaches no root (or only roots seeded with zeros) had
its vjp run on nothing that reaches a compared value.  fuzz counted such cases in its per-op tallies (session 14
stopped verify_* from doing so): the cases are still checked (a disagreement always counts), but not counted, and the
run says "K of N cases not counted: why" on the terminal, in summary.json, index.html and --summary-md.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import gradspec as gs
from gradspec import outcome

TWO = {"x": np.array([0.3, 0.4]), "y": np.array([0.1, 0.2])}
ZERO_SEEDED = gs.Case.build(TWO, [("u", "sin", ["x"], {}), ("w", "mul", ["u", "y"], {})], ["w"], [np.zeros(2)])
DEAD_COS = gs.Case.build(TWO, [("u", "cos", ["x"], {}), ("w", "exp", ["y"], {})], ["w"], [np.ones(2)])
LIVE = gs.Case.build(TWO, [("u", "sin", ["x"], {}), ("w", "mul", ["u", "y"], {})], ["w"], [np.array([1.0, 2.0])])


def test_a_case_seeded_with_zeros_counts_for_no_op_and_says_why():
    v = gs.check(ZERO_SEEDED)
    assert v.status == "agree" and v.comparisons, v.summary()
    assert not outcome.counts_for_run(v)  # (no op under test: fuzz) -- counted on main
    assert outcome.run_count(v) == ([], outcome.ZERO_SEEDS)
    assert outcome.uncounted_reason(v) == outcome.ZERO_SEEDS


def test_a_case_counts_for_the_ops_it_exercised_only():
    v = gs.check(DEAD_COS)
    assert v.status == "agree", v.summary()
    assert outcome.run_count(v) == (["exp"], "")  # cos reaches no root: its vjp ran on nothing compared
    assert outcome.run_count(gs.check(LIVE)) == (["sin", "mul"], "")
    assert not outcome.counts_for_run(v, "cos") and outcome.uncounted_reason(v, "cos") == outcome.UNUSED


def _campaign(tmp_path, cases):
    from gradspec.fuzz.campaign import _Campaign
    from gradspec.fuzz.state import Config

    cfg = Config(report_dir=str(tmp_path / "r"), max_examples=len(cases), seed=1, case_timeout=None)
    camp = _Campaign(cfg, 0)
    for c in cases:
        camp.stats.cases += 1
        camp.count(c, gs.check(c))
    return cfg, camp.stats


def test_fuzz_counts_only_cases_that_exercised_a_gradient_and_says_so_everywhere(tmp_path, capsys):
    from gradspec import ci_outputs, report
    from gradspec.cli import _print_summary
    from gradspec.fuzz.state import summary_json

    cfg, stats = _campaign(tmp_path, [ZERO_SEEDED, ZERO_SEEDED, DEAD_COS, LIVE])
    s = summary_json(cfg, stats, ops=["sin", "mul", "cos", "exp"])
    assert s["cases"] == 4 and s["counted"] == 2, s
    assert s["not_counted"] == {outcome.ZERO_SEEDS: 2}, s["not_counted"]
    assert s["ops"] == {"cos": 0, "exp": 1, "mul": 1, "sin": 1}, s["ops"]  # per op: counted cases only
    assert s["ops_drawn"]["cos"] == 1 and s["ops_drawn"]["sin"] == 3, s["ops_drawn"]
    assert s["status"] == "agree"
    assert sum(s["oracles"].values()) == sum(len(gs.check(c).comparisons) for c in (DEAD_COS, LIVE))
    line = f"2 of 4 cases not counted: {outcome.ZERO_SEEDS}"

    _print_summary(cfg, s, None, ["sin", "mul", "cos", "exp"])
    out = capsys.readouterr().out
    assert line in out and "never counted" in out and "cos (1 case)" in out, out
    assert "compared nothing" not in out, out  # (those cases compared values, none that judge a gradient)

    md = ci_outputs.summary_markdown(s, cfg.report_dir)
    assert line in md and "cos (1 case)" in md, md

    index = report.write_run_report(cfg.report_dir, s, [])
    html = open(index, encoding="utf-8").read()
    assert "2 of 4 cases not counted" in html and "cos (1 case)" in html and "red: never counted" in html


def test_a_fuzz_run_where_no_case_counted_is_inconclusive_and_says_why(tmp_path):
    from gradspec.fuzz.state import summary_json

    cfg, stats = _campaign(tmp_path, [ZERO_SEEDED] * 3)
    s = summary_json(cfg, stats, ops=["sin", "mul"])
    assert s["status"] == "inconclusive" and s["counted"] == 0, s
    assert "seeded with zeros" in s["reason"], s["reason"]
    assert s["ops"] == {"mul": 0, "sin": 0}


def test_shards_add_up_what_they_counted(tmp_path):
    from gradspec.fuzz.state import Stats

    _, a = _campaign(tmp_path, [ZERO_SEEDED, LIVE])
    _, b = _campaign(tmp_path, [DEAD_COS])
    merged = Stats.from_json(json.loads(json.dumps(a.to_json())))
    merged.merge(Stats.from_json(json.loads(json.dumps(b.to_json()))))
    assert merged.counted == 2 and merged.not_counted() == {outcome.ZERO_SEEDS: 1}
    assert merged.op_drawn["cos"] == 1 and merged.op_counts["cos"] == 0 and merged.op_counts["sin"] == 1
    assert os.path.isdir(tmp_path / "r")


# (fixrun #2) a user op whose forward is never finite on the values drawn: fuzz said "no gradient value compared"
# without naming the op or its domain (the draws were not tallied in a campaign, and a worker sent none back)
@pytest.mark.parametrize("workers", [1, 2])
def test_fuzz_names_the_op_and_its_domain_when_its_forward_was_never_finite(tmp_path, capsys, workers):
    from gradspec import cli

    out = tmp_path / "r"
    rc = cli.main(["fuzz", "--ops", "tests._tryout9_code:log1mexp_negdomain", "--max-examples", "20", "--seed", "1",
                   "--workers", str(workers), "--report-dir", str(out)])
    text = capsys.readouterr()
    s = json.loads((out / "summary.json").read_text())
    assert rc == 3 and s["status"] == "inconclusive", text.out + text.err
    assert "t9_log1mexp_negdomain" in s["reason"] and "interval(-5, -1)" in s["reason"], s["reason"]
    assert "not finite (NaN) at every value drawn" in s["reason"] and "check the domain" in s["reason"], s["reason"]
    drawn = s["draws"]["t9_log1mexp_negdomain"]
    assert drawn["finite"] == 0 and drawn["skipped"] > 0, drawn
    assert s["reason"] in text.out, text.out


@pytest.mark.parametrize("workers", [1, 2])
def test_fuzz_counts_the_draws_a_user_forward_refused(tmp_path, capsys, workers):
    """log on the real line: NaN at every negative draw; the run checks the positive ones and says how many draws
    were skipped, per op, however many workers drew them."""
    from gradspec import cli

    out = tmp_path / "r"
    rc = cli.main(["fuzz", "--ops", "tests._tryout9_code:log_real", "--max-examples", "20", "--seed", "1",
                   "--workers", str(workers), "--report-dir", str(out)])
    text = capsys.readouterr()
    s = json.loads((out / "summary.json").read_text())
    assert rc == 0 and s["status"] == "agree", text.out + text.err
    drawn = s["draws"]["t9_log_real"]
    assert drawn["finite"] > 0 and drawn["skipped"] > 0, drawn
    line = next((ln for ln in text.out.splitlines() if "t9_log_real" in ln and "draws" in ln), "")
    assert f"{drawn['skipped']} of {drawn['skipped'] + drawn['finite']} draws" in line and "real()" in line, text.out


# (fixrun #4) verify_* spent part of its budget on cases it then did not count (verify_op of sin, 60 cases, seed 3:
# 8 where sin's output reached no root or only roots seeded with zeros): it draws only cases that exercise the op
NOT_EXERCISED = (outcome.CONSTANT_INPUTS, outcome.UNUSED, outcome.ZERO_SEEDS)
SIN = gs.Op("fr4_sin", forward=np.sin, vjp=lambda g, x, out: (g * np.cos(x),))
SIN_BAD = gs.Op("fr4_sin_bad", forward=np.sin, vjp=lambda g, x, out: (g * np.cos(x) * 1.01,))


def _dead(r) -> int:
    return sum(n for k, n in r.inconclusive.items() if k in NOT_EXERCISED)


# Before: 8 and 13 of 60 (verify_op, seeds 3 and 4), 17 of 60 (torch.sin, seed 4).  A case is redrawn up to 3 times
# and the last try kept (verify.op.exercising): with ~1 in 4 dead, about 1 in 64 left, <= 2 of 60 in a run.
@pytest.mark.parametrize("seed", [3, 4])
def test_verify_op_spends_its_budget_on_cases_that_exercise_the_op(seed):
    r = gs.verify_op(SIN, max_examples=60, seed=seed)
    assert r.status == "agree" and r.cases_run == 60, r.summary()
    assert _dead(r) <= 2, dict(r.inconclusive)


def test_verify_torch_function_spends_its_budget_on_cases_that_exercise_the_function():
    import torch

    r = gs.verify_torch_function(torch.sin, arity=1, max_examples=60, seed=4)
    assert r.status == "agree", r.summary()
    assert _dead(r) <= 2, dict(r.inconclusive)


def test_an_op_no_case_can_exercise_still_runs(monkeypatch):
    """The last try is kept: a filter would have ended the run with Hypothesis' Unsatisfiable (the run then says
    why nothing counted: test_a_run_says_how_many_cases_it_did_not_count_and_why_and_none_counted_is_inconclusive)."""
    from hypothesis import given, settings

    import gradspec.verify.op as V

    calls = []
    monkeypatch.setattr(outcome, "exercises", lambda case, op: calls.append(op) and False)
    never = V._op_cases(SIN, V.COMPANIONS, {})
    seen = []

    @settings(max_examples=5, database=None, deadline=None)
    @given(never)
    def run(case):
        seen.append(case)

    run()
    assert len(seen) == 5 and len(calls) >= 3 * 5, len(calls)  # (every case after its 3 tries)


def test_a_bug_still_shrinks_to_a_small_case_that_exercises_the_op():
    r = gs.verify_op(SIN_BAD, max_examples=60, seed=3)
    assert r.status == "disagree", r.summary()
    case = r.discrepancies[0].case
    assert outcome.exercises(case, "fr4_sin_bad") and len(case.nodes) <= 2, case.to_json()
