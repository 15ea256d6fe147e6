"""tryout11 #13: near-degenerate eigh (eigenvalues 1e-6 apart).  The correct backward agrees there; the
un-symmetrised one was excused as "exact tie/kink detected numerically ... (kink)".  The kink probe sees the
forward only (the same for both), at steps of 1e-6 |x| and 1/8 of it: the eigenvectors turn within 1e-6 there,
so its one-sided slopes differ at both steps, as at a kink, and the probe runs only after a failure.  It cannot
tell such a narrow smooth feature from a kink, so the case stays unjudged, but the reason now says what was not
judged (the disagreement it excuses) and that a feature narrower than its steps reads as a kink too."""

from __future__ import annotations

import torch

import gradspec as gs
from tests import _tryout11_eigh as E


def _near_tie(gap):
    R = torch.linalg.qr(torch.tensor([[1.0, 2, 0.5], [0.3, -1, 2], [1.5, 0.2, -0.7]], dtype=torch.float64))[0]
    return R @ torch.diag(torch.tensor([1.0, 1 + gap, 2.0], dtype=torch.float64)) @ R.T


def test_a_kink_excuse_says_what_it_did_not_judge():
    r = gs.verify_torch_function(E.EighNoSym.apply, at=[(_near_tie(1e-6),)], seed=0, dtypes=("float64",))
    assert r.status == "inconclusive", r.summary()
    reason = str(r.reason)
    assert "not judged: reference vs " in reason, reason
    assert "narrower than" in reason, reason


def test_the_same_bug_off_the_near_tie_is_found():
    r = gs.verify_torch_function(E.EighNoSym.apply, at=[(_near_tie(1e-3),)], seed=0, dtypes=("float64",))
    assert r.status == "disagree", r.summary()
