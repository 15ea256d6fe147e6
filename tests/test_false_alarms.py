"""No false alarms on correct code: each case here was a discrepancy reported on a correct gradient
(found by hunting with gs.verify_torch_function / gradspec fuzz on correct code), and must agree now.

A correct gradient is never a discrepancy (README, "never cry wolf"); the buggy twins that must still
be found are beside each case.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradspec as gs
from gradspec.verify import torch_function as TF
from tests import _correct_code as C

# ---------------------------------------------------------------------------------------------
# backward twice (retain_graph=True) must give twice the gradient: NaN elements are no evidence
# ---------------------------------------------------------------------------------------------

NAN = float("nan")
TWICE = {
    # one backward, two backwards, which element (if any) did not double
    "doubled": ([0.5, -1.0], [1.0, -2.0], None),
    # a NaN gradient (0 / 0 at a = b = 0, torch's own value there) beside finite ones: the finite
    # ones doubled; before, max(|g1|) was NaN, every threshold NaN, and element 0 was reported
    "nan-beside-finite": ([0.5, NAN], [1.0, NAN], None),
    "inf-beside-finite": ([0.5, np.inf], [1.0, np.inf], None),
    "not-doubled": ([0.5, -1.0], [0.5, -2.0], (0,)),
    "not-doubled-beside-nan": ([NAN, 0.5, -1.0], [NAN, 1.0, -1.5], (2,)),
}


@pytest.mark.parametrize("g1, g2, bad", TWICE.values(), ids=list(TWICE))
def test_backward_twice_compares_the_finite_elements(g1, g2, bad):
    assert TF._not_doubled(np.array(g1), np.array(g2)) == bad


# gs.verify_torch_function on hypot and atan2 as torch writes them: seed 2 draws a = b = 0 in one
# element (NaN gradient, as torch's); the run reported "after one backward 0.5, after two 1.0
# (expected 1.0)" at another element.
@pytest.mark.parametrize("fn", [C.Hypot.apply, C.Atan2.apply], ids=["hypot", "atan2"])
def test_verify_torch_function_nan_at_the_origin_is_no_accumulation_finding(fn):
    r = gs.verify_torch_function(fn, max_examples=60, seed=2)
    assert "accumulation" not in r.kinds, str(r)
    assert r.ok, str(r)
