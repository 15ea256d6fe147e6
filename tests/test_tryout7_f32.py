"""tryout7 finding 3: a correct op computing in float32 inside (3 tanh(float32(x)), exact float64 vjp) was called
wrong at tryout7's saved case, whose small elements put float32 noise on FD's noise line: FD took it for float64
noise, skipped its float32 probe, and stepped in float64 over the large element's float32 staircase.  Expected
words come from how the ops are written (tests/_tryout7_reach_code.py), never from running gradspec."""

from __future__ import annotations

import numpy as np
import pytest

import gradspec as gs
from tests import _tryout7_reach_code as T


def _case(op):
    return gs.Case.build({"x0": np.array(T.TANH32_X)}, [("v0", op.name, ["x0"], {})], ["v0"],
                         [np.array(T.TANH32_SEED)])


ROWS = {
    # id: (op, expected status)
    "correct-agrees": (T.tanh32_times3, "agree"),
    "2%-off-found": (T.tanh32_times3_off, "disagree"),  # 2% >> float32's ~1e-3 relative FD bound at its step
}


@pytest.mark.parametrize("op, status", ROWS.values(), ids=list(ROWS))
def test_float32_inside_with_noisy_small_elements(op, status):
    v = gs.check(_case(op))
    assert v.status == status, [d.message for d in v.discrepancies][:2]
    if status == "agree":
        assert any("float32" in n for n in v.notes), v.notes
