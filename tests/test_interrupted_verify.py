"""tryout6 #13: Ctrl-C during a verify_* call in Python loses nothing it found.

It still raises a KeyboardInterrupt (Python's convention: Ctrl-C stops the program), a gs.VerifyInterrupted whose
``.result`` holds what was found so far: a disagreement found before the interruption is in it (status disagree),
and a run interrupted before finding anything is inconclusive, never agree.  The interruption is raised inside the
user's forward at its n-th call, where SIGINT's handler raises it."""

from __future__ import annotations

import pytest

import gradspec as gs
from tests import _tryout6_torchio as T

EXAMPLES = 15


def _x():
    import torch

    return torch.linspace(-1.5, 1.3, 12, dtype=torch.float64).reshape(3, 4)


def _run(fn):
    return gs.verify_torch_function(fn, example_inputs=(_x(),), max_examples=EXAMPLES, seed=1)


@pytest.fixture(scope="module")
def calls():
    """How many forward calls a whole run makes, for the right and the wrong backward (interruptions go inside)."""
    out = {}
    for scale in (1.0, 1.3):
        c = T.CtrlC(at=-1, scale=scale)
        out[scale] = (_run(c.apply).status, c.calls)
    return out


# (backward's factor, where the interruption comes as a fraction of the whole run's calls)
WHEN = {"right-at-0.5": (1.0, 0.5), "wrong-at-0.05": (1.3, 0.05), "wrong-at-0.5": (1.3, 0.5)}


@pytest.mark.parametrize("scale, when", WHEN.values(), ids=WHEN.keys())
def test_ctrl_c_raises_with_what_was_found_so_far(calls, scale, when):
    whole, n = calls[scale]
    assert whole == ("agree" if scale == 1.0 else "disagree")  # the uninterrupted run (the witness of the rest)
    c = T.CtrlC(at=max(1, int(when * n)), scale=scale)
    with pytest.raises(KeyboardInterrupt) as e:
        _run(c.apply)
    assert isinstance(e.value, gs.VerifyInterrupted)
    r = e.value.result
    assert r.status != "agree" and "interrupted" in str(e.value), (r.status, str(e.value))
    if scale == 1.0:
        assert r.status == "inconclusive" and not r.discrepancies and "interrupted" in r.reason, r.reason
    elif when >= 0.5:  # a 1.3x backward disagrees on every case: found by half way through the run, and kept
        assert r.status == "disagree" and r.discrepancies, r.summary()
    else:
        assert r.status in ("disagree", "inconclusive") and bool(r.discrepancies) == (r.status == "disagree")
