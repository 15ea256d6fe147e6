"""A user op with a torch twin, wrong by a factor 1/2 (tests/_steep_code.rmsnorm_half), at a ramp about 1e-3 wide
(rmsnorm over an axis of size 1 is x / sqrt(x^2 + 1e-6)): the pair (reference, torch-cpu) was "not-localised"
while (reference, finite-differences) on the same case was wrong-vjp 'scale'.  Localising the node alone took the
jacobian twin (a finite-difference JVP, whose step ~7e-4 is the ramp's width) as the witness although check had
set its pair with the code aside as too shaky to witness (a note); finite differences (step 6e-6) resolve the
ramp and decide.  The expected cause comes from how the op was written wrong: its vjp is half the gradient."""

from __future__ import annotations

import numpy as np
import pytest

import gradspec as gs
from tests import _steep_code as S

RAMP = {  # name: (applications, x); the rows marked before were not-localised on main at 73ff3cf
    "once-at-0": (1, 0.0),  # before
    "once-at-0.001": (1, 1e-3),  # before
    "once-at-0.003": (1, 3e-3),  # before
    "twice-at-0": (2, 0.0),  # before (finite differences refuse the whole graph there; each node alone resolves)
    "once-at-0.0003": (1, 3e-4),  # (the jacobian twin witnesses here: the control)
}


@pytest.mark.parametrize("times, x", RAMP.values(), ids=list(RAMP))
def test_a_halved_rule_at_a_narrow_ramp_is_named_scale(times, x):
    v = gs.check(S.stacked(np.reshape([x], (-1, 1)), "t6_rmsnorm_half", times))
    assert v.status == "disagree"
    assert ("reference", "torch-cpu") in {tuple(d.oracles) for d in v.discrepancies}, str(v)
    for d in v.discrepancies:
        assert d.cause.id == "wrong-vjp" and d.cause.pattern == "scale", (d.oracles, d.cause.id, d.cause.summary)
        assert d.cause.op == "t6_rmsnorm_half" and abs(d.cause.factor - 0.5) < 1e-6, (d.cause.factor, d.cause.summary)
