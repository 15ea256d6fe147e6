"""Several value sets per graph (``gs.strategies.case_groups``) through the search driver and the campaign:
each set is one case, a failing set shrinks to a group of that one set, saved failures replay."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import InvalidArgument

import gradspec as gs
from gradspec import fuzz
from gradspec import strategies as gst
from gradspec._private.sampling import sample
from gradspec.fuzz.campaign import sets_per_graph
from gradspec.search import Driver
from gradspec.strategies._groups import mean_sets
from tests import _planted  # noqa: F401 - registers the planted ops

ORACLES = ["reference", "jacobian"]

# x |x| whose VJP has the wrong sign below -1 only (2x instead of 2|x|).  tests._planted's pl_xabsx_sign is wrong for
# every negative x, so since the shaky-estimate rule keeps a large gap as a witness (b03082e) the first value set a
# group draws (small values) already fails on every seed: a bug the simplest values miss needs a threshold.
OP = "tg_xabsx_below_minus1"
gs.Op(OP, forward=lambda x: x * np.abs(x), vjp=lambda g, x, out: (np.where(x < -1, 2.0 * x, 2.0 * np.abs(x)) * g,))


def _structure(case):
    return ([(l.name, l.value.shape, l.value.dtype.name, l.requires_grad) for l in case.leaves],
            [(n.name, n.op, list(n.inputs), repr(n.params)) for n in case.nodes], list(case.roots))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(gst.case_groups(ops=["add", "mul", "exp", "sum", "relu", "maximum"], max_nodes=5, max_sets=6))
def test_sets_of_a_group_share_the_graph_and_differ_in_values(group):
    assert 1 <= len(group) <= 6
    first = group[0]
    keys = set()
    for case in group:
        case.validate()
        env = case.evaluate()
        assert all(np.all(np.isfinite(v)) for v in env.values() if np.asarray(v).dtype.kind == "f")
        if not any(len(c.leaves) != len(first.leaves) for c in group):  # no set had an input detached
            assert _structure(case) == _structure(first)
        keys.add(case.to_json(indent=None))
    assert len(keys) == len(group)  # no set repeats another


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "4"], ids=repr)
def test_max_sets_is_validated_up_front(bad):
    with pytest.raises(InvalidArgument, match="max_sets"):
        gst.case_groups(max_sets=bad)


def test_groups_hold_about_the_expected_number_of_sets():
    # Small graphs (the byte cap never binds): the mean number of sets is what mean_sets() says,
    # within the sampling error of 150 groups (each a geometric-like count with sd ~ mean).
    groups = sample(gst.case_groups(ops=["add", "mul", "exp"], max_nodes=3, max_leaves=2, max_side=2), 150, 0)
    mean = float(np.mean([len(g) for g in groups]))
    assert 0.6 * mean_sets(32) <= mean <= 1.4 * mean_sets(32), mean


@pytest.mark.parametrize("budget,sets", [(12, 1), (49, 1), (60, 2), (200, 8), (300, 12), (400, 16), (800, 32), (10**12, 32)])
def test_sets_per_graph_grows_with_the_budget(budget, sets):
    assert sets_per_graph(budget) == sets


def _xabsx_driver(seed, **kw):
    """A driver over groups of a planted op whose VJP is wrong for inputs below -1 only."""
    log = {"groups": 0, "current": None, "failing_group": None, "first_failing_index": None}

    def on_group(cases, mode):
        log["current"] = list(cases)
        if mode == "generate":
            log["groups"] += 1

    def evaluate(case, mode):
        v = gs.check(case, oracles=ORACLES)
        if v.discrepancies and mode == "shrink":
            log["failing_group"] = log["current"]  # the last one is what shrinking ended with
        if v.discrepancies and mode == "generate" and log["first_failing_index"] is None:
            log["first_failing_index"] = [c is case for c in log["current"]].index(True)
        return v.discrepancies, v

    strategy = gst.case_groups(ops=[OP, "add"], max_nodes=3, max_sets=32)
    return Driver(strategy, evaluate, seed=seed, on_group=on_group, cases_per_example=mean_sets(32), **kw), log


def test_a_failure_in_a_later_value_set_shrinks_to_the_minimal_case():
    # A run whose first failure is in a later set of its group (the value sets are what found it; which
    # seed gives one depends on the draw, so the first of a few seeds that does) ...
    for seed in range(3, 13):
        drv, log = _xabsx_driver(seed=seed, max_examples=300)
        drv.run()
        assert len(drv.findings) == 1
        if log["first_failing_index"] >= 1:
            break
    else:
        pytest.fail("in 10 runs the bug was always found in the first value set of a group")
    # ... is reported as the minimal case: the planted op alone on one negative element.  (The last
    # failing group may keep a passing set beside the failing one -- Hypothesis does not always delete
    # it -- but the report is the failing case alone.)
    assert len(log["failing_group"]) <= 2
    (f,) = drv.findings.values()
    case = f.discrepancy.case
    assert case.ops == [OP] and sum(l.value.size for l in case.leaves) == 1
    assert float(case.leaves[0].value.ravel()[0]) < -1  # the bug needs an input below -1: kept by shrinking


def test_saved_failures_of_groups_replay_from_the_database(tmp_path):
    db = DirectoryBasedExampleDatabase(str(tmp_path / "db"))
    first, _ = _xabsx_driver(seed=3, max_examples=300, database=db, database_key=b"groups")
    first.run()
    assert len(first.findings) == 1
    again, _ = _xabsx_driver(seed=99, max_examples=5, database=db, database_key=b"groups")
    again.run(replay=True)
    assert again.replayed >= 1
    replayed = [f for f in again.findings.values() if "replayed from the example database" in f.note]
    assert replayed and replayed[0].discrepancy.case.ops == [OP]


def test_every_value_set_counts_as_one_case():
    drv, log = _xabsx_driver(seed=5, max_examples=80)
    seen = []
    inner = drv.evaluate
    drv.evaluate = lambda case, mode: (seen.append(mode), inner(case, mode))[1]
    drv.run()
    assert drv.stop_reason == "budget"
    assert drv.cases == seen.count("generate") == 80
    assert log["groups"] < drv.cases  # several sets per graph


def test_a_campaign_counts_value_sets_and_finds_the_planted_op(tmp_path):
    cfg = fuzz.Config(ops=["tests._planted:pl_mul_slice", "add", "exp"], max_examples=150, seed=2,
                      report_dir=str(tmp_path), oracles=ORACLES)
    stats = fuzz.run_campaign(cfg)
    assert stats.cases == 150
    assert any(r["culprit"] == "pl_mul_slice" for r in stats.found.values()), list(stats.found.values())
