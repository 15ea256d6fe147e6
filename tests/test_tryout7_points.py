"""tryout7 finding 12: a torch Function checked at points the user chooses (verify_torch_function(at=[...]),
a new optional keyword), kinks included.  Soft-thresholding has kinks at |x| = 0.5; SoftThresholdBug gives no
gradient on x < -0.5 (tests/_tryout7_reach_code.py).  The expected statuses follow from those definitions."""

from __future__ import annotations

import pytest

import gradspec as gs
from gradspec.ops.user import UserOpError
from tests import _tryout7_reach_code as T


def _at(*values):
    import torch

    return [(torch.tensor(v, dtype=torch.float64),) for v in values]


ROWS = {
    # id: (Function, points, status, how many cases)
    "correct-smooth": (T.SoftThreshold, _at([0.3, -1.2, 1.5, -1.5]), "agree", 1),
    "bug-smooth": (T.SoftThresholdBug, _at([0.3, -1.2, 1.5, -1.5]), "disagree", 1),
    "bug-at-second-point": (T.SoftThresholdBug, _at([0.3, 1.2], [-0.7, 2.0]), "disagree", 2),
    # exactly at a kink (every element): not differentiable, never agree, never a discrepancy
    "correct-at-kinks": (T.SoftThreshold, _at([0.5, -0.5]), "inconclusive", 1),
    "bug-at-kinks": (T.SoftThresholdBug, _at([0.5, -0.5]), "inconclusive", 1),
}


@pytest.mark.parametrize("fn, points, status, n", ROWS.values(), ids=list(ROWS))
def test_a_function_is_checked_at_the_points_given(fn, points, status, n):
    r = gs.verify_torch_function(fn.apply, at=points, seed=0)
    assert r.status == status, (r.reason, [d.message for d in r.discrepancies][:1])
    assert r.cases_run == n, r.cases_run
    assert any("at=" in str(note) for note in r.notes), r.notes
    if status == "inconclusive":
        assert r.nondifferentiable >= 1 and "kink" in r.reason, r.reason
        assert "other elements go unjudged" in r.reason and "at=" in r.reason, r.reason  # (tryout7 #13g: said)


def test_a_point_that_does_not_fit_the_call_is_a_clear_error():
    import torch

    x = torch.ones(3, dtype=torch.float64)
    with pytest.raises(UserOpError, match=r"at=\[1\].*2 arguments"):
        gs.verify_torch_function(torch.mul, at=[(x, x), (x,)], seed=0)
