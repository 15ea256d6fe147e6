"""One search pipeline: one bug -> one finding (deduplicated by its culprit), shrinking bounded.

Planted engines (tests/_planted.py, tests/_pipeline_engines.py) go through the same round driver
as `gradspec fuzz` (in process, no report writer) and `verify_engine`.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradspec as gs
from gradspec import fuzz
from gradspec import strategies as gst
from gradspec.findings import REPEATED_INPUT, SEVERAL_ROOTS, localise
from gradspec.search import Driver
from tests._pipeline_engines import ExpDoubledTanhNegated

ORACLES = ["reference", "jacobian"]  # exact oracles: fast, and enough to see a wrong engine


def campaign(engine: str, tmp_path, n: int = 60, seed: int = 1):
    cfg = fuzz.Config(engine=engine, max_examples=n, seed=seed, report_dir=str(tmp_path), oracles=ORACLES)
    return fuzz.run_campaign(cfg)


# Engine-level bugs show in many graphs with many op sets: before the pipeline dedup by culprit,
# one bug gave 5 (repeated args) to 7 (no accumulation) reports in 400 cases (seed 1).
ONE_BUG = [
    ("no-accumulation", "tests._planted:NoAccumulation", SEVERAL_ROOTS, 60),
    ("repeated-args", "tests._planted:RepeatedArgs", REPEATED_INPUT, 150),  # x twice in one op: rarer
    ("exp-vjp-doubled", "tests._pipeline_engines:ExpDoubled", "exp", 60),
]


@pytest.mark.parametrize("engine,culprit,n", [p[1:] for p in ONE_BUG], ids=[p[0] for p in ONE_BUG])
def test_one_bug_is_one_finding(engine, culprit, n, tmp_path):
    stats = campaign(engine, tmp_path, n)
    recs = list(stats.found.values())
    assert len(recs) == 1, [(r["ops"], r["oracles"], r.get("culprit")) for r in recs]
    assert recs[0]["culprit"] == culprit
    assert recs[0]["cases"] >= 1
    if culprit in gs.ops.names():  # a wrong op: reported alone, on the inputs it had (no dead nodes)
        assert recs[0]["ops"] == [culprit]


def test_two_bugs_in_two_ops_are_two_findings(tmp_path):
    stats = campaign("tests._pipeline_engines:ExpDoubledTanhNegated", tmp_path, n=100)
    assert sorted(r["culprit"] for r in stats.found.values()) == ["exp", "tanh"]


def test_verify_engine_reports_each_wrong_op_once():
    r = gs.verify_engine(ExpDoubledTanhNegated(), max_examples=40, seed=0)
    values = [d for d in r.discrepancies if d.check_name == "values"]
    assert sorted(d.culprit for d in values) == ["exp", "tanh"], [d.message[:80] for d in values]


def test_a_shrink_budget_that_runs_out_says_so():
    # The reference engine is right, so plant the bug in what the driver sees: every case with
    # exp "fails"; one shrink call is allowed, so shrinking stops at once and says so.
    def evaluate(case, mode):
        if "exp" not in case.ops:
            return [], None
        d = gs.Discrepancy("value", ("reference", "planted"), "planted", case)
        return [d], None

    drv = Driver(gst.cases(ops=["exp", "add", "mul"], max_nodes=6), evaluate, max_examples=40, seed=3,
                 shrink_calls=1)
    drv.run()
    (f,) = drv.findings.values()
    assert f.shrink_exhausted and "shrink budget ran out" in f.note


def test_localise_drops_dead_nodes_and_cuts_at_the_first_failing_node():
    x = np.array([0.3, -0.7])
    case = gs.Case.build({"x": x}, [("a", "sin", ["x"], {}), ("b", "exp", ["a"], {}), ("c", "tanh", ["b"], {}),
                                    ("dead", "cos", ["x"], {})], ["c"], [np.ones(2)])

    def reproduces(c):  # "exp is wrong": a case fails when it contains exp
        return ["exp"] if "exp" in c.ops else []

    loc = localise(case, ["exp"], reproduces)
    assert loc.culprit == "exp" and [n.op for n in loc.case.nodes] == ["exp"]
    assert not loc.exhausted and loc.calls <= 4


def test_an_engine_level_cause_is_one_finding_whichever_ops_show_it():
    # Before: one value report per culprit op (add, exp, mul, ...) plus the rule's, all 'seed-ignored'.
    from tests._planted import SeedIgnored

    r = gs.verify_engine(SeedIgnored(), max_examples=40, seed=0)
    assert [d.cause.id for d in r.discrepancies].count("seed-ignored") == 1, [
        (d.check_name, d.cause.id, d.culprit) for d in r.discrepancies]


def test_a_wrong_vjp_with_an_input_dependent_factor_is_one_finding():
    # Before: 'scale' on a one-element case and 'other' on a larger one were two findings of one bug.
    from tests._pipeline_engines import TanhOneMinusOut

    r = gs.verify_engine(TanhOneMinusOut(), max_examples=40, seed=0)
    wrong = [d for d in r.discrepancies if d.cause is not None and d.cause.id == "wrong-vjp"]
    assert [d.cause.op for d in wrong] == ["tanh"], [(d.check_name, d.cause) for d in r.discrepancies]
