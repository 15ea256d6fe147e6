"""tryout7 findings 4 and 13b: what values verify_torch_function calls a user's torch code with.

Finding 4: a learnt-shape run (example_inputs=) drew magnitudes 0.25 to 2 only, so a backward wrong only past
|x| = 4 got "agree".  The default draws are now verify_op's (values.Decoder: simple, moderate, log-uniform up
to 1e3, repeats).  The Functions are in tests/_tryout7_reach_code.py; which is wrong comes from how each was
written, never from running gradspec."""

from __future__ import annotations

import pytest

import gradspec as gs
from tests import _tryout7_reach_code as T


def _spy(fn, seen):
    def spy(x):
        seen.append(float(x.detach().abs().max()))
        return fn(x)

    return spy


def _example(scale):
    import torch

    return (scale * torch.linspace(-1.0, 1.0, 12, dtype=torch.float64).reshape(3, 4),)


CASES = {
    # id: (Function, example scale, expected status)
    "bug-past-4-found-small-example": (T.SoftplusBranchBug, 1.0, "disagree"),
    "bug-past-4-found-large-example": (T.SoftplusBranchBug, 10.0, "disagree"),
    "correct-twin-agrees": (T.SoftplusBranch, 1.0, "agree"),
}


@pytest.mark.parametrize("fn, scale, status", CASES.values(), ids=list(CASES))
def test_default_draws_reach_large_arguments(fn, scale, status):
    seen: list = []
    r = gs.verify_torch_function(_spy(fn.apply, seen), example_inputs=_example(scale), max_examples=30, seed=0)
    assert r.status == status, (r.reason, [str(d.cause.summary) for d in r.discrepancies][:1])
    # calls past the example's own range: the draws, not only the probes around the example (which stay at it)
    assert sum(s > 4 * scale for s in seen) >= 5, sorted(seen)[-5:]
