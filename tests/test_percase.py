"""``gs.check`` computes a case's forward, op specs and exact kinks once and shares them among the
oracles and the verdict rules (``gradspec._private.percase``).  Sharing must change nothing but the
time: every verdict (status, reason, comparisons and their ratios, discrepancies, exclusions, notes,
the gradients themselves) is the one the unshared path gives, where each oracle and rule computes
everything itself."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import gradspec as gs
from gradspec._private import percase
from gradspec._private.sampling import sample
from tests import _verdict_ops as V

CPU = ["reference", "finite-differences", "jacobian", "torch-cpu"]


def _summary(v) -> dict:
    """Everything a verdict says, with gradients as exact bytes."""
    def arrays(d):
        return {k: None if a is None else (np.asarray(a).dtype.str, np.asarray(a).shape, np.asarray(a).tobytes())
                for k, a in (d or {}).items()}

    return {
        "status": v.status, "reason": v.reason, "summary": v.summary(),
        "comparisons": [(c.oracles, c.agreed, repr(c.max_ratio)) for c in v.comparisons],
        "discrepancies": [(d.kind, d.oracles, d.message, d.leaf, d.index, repr(d.abs_err), repr(d.tolerance))
                          for d in v.discrepancies],
        "skipped": v.skipped, "excused": v.excused, "notes": [str(n) for n in v.notes],
        "errors": {k: e[:2] for k, e in v.errors.items()}, "unjudged": v.unjudged,
        "nondifferentiable": v.nondifferentiable,
        "results": {k: arrays(r) for k, r in v.results.items()}, "fd_error": arrays(v.fd_error),
        "jacobian": None if v.jacobian is None else v.jacobian.matrix.tobytes(),
    }


def _cases():
    # The strategies' default mix (float32 and mixed cases, exact ties/kinks in ~5%), plus user ops
    # whose vjp raises, returns too many gradients, or whose twin differs (raised / excused / notes).
    out = list(sample(gs.strategies.cases(), 120, seed=21))
    for i, op in enumerate([V.raising_vjp, V.two_grads, V.softplus, V.softplus_wrong]):
        out += sample(gs.strategies.cases(ops=[op, "mul", "add", "sum", "tanh", "relu", "maximum"]), 8, seed=i)
    return out


@pytest.fixture(scope="module")
def cases():
    return _cases()


@pytest.mark.parametrize("oracles", [CPU, None], ids=["4-cpu-oracles", "default-oracles"])
def test_shared_per_case_values_change_no_verdict(cases, oracles, monkeypatch):
    shared = [_summary(gs.check(c, oracles=oracles)) for c in cases]
    monkeypatch.setattr(percase, "scope", lambda case: contextlib.nullcontext())  # every oracle on its own
    alone = [_summary(gs.check(c, oracles=oracles)) for c in cases]
    statuses = {s["status"] for s in shared}
    assert {"agree", "disagree"} <= statuses, statuses  # the sample reaches more than the all-agree path
    for i, (a, b) in enumerate(zip(shared, alone)):
        assert a == b, f"case {i}: {cases[i].to_text()}"


def test_the_memo_lives_for_one_check_only():
    case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    before = gs.check(case, oracles=CPU)
    case.leaves[0].value[:] = [1.0, 3.0]  # a case edited between two checks is checked afresh
    after = gs.check(case, oracles=CPU)
    np.testing.assert_allclose(after.results["reference"]["x"], np.exp([1.0, 3.0]))
    assert not np.array_equal(before.results["jacobian"]["x"], after.results["jacobian"]["x"])
    assert percase.active(case) is None
