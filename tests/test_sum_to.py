"""One ``sum_to`` (fixrun #5): the public ``gradspec.ops.user.sum_to`` (raises on a mismatch) and the diagnosis'
``vjp_patterns._sum_to`` (None on a mismatch) were two copies of the broadcast reduction that summed in different
orders (the diagnosis summed the leading axes, then each size-1 axis: up to 7e-12 apart on the shapes below).  One
reduction now (``_private.dims.summed_to``); the public function behaves as before."""

from __future__ import annotations

import numpy as np
import pytest

from gradspec._private.vjp_patterns import _sum_to
from gradspec.ops.user import sum_to

SHAPES = [((5, 7, 3), (7, 1)), ((4, 9, 8), (1, 8)), ((3, 50, 40), (50, 1)), ((6, 1000), (1,)), ((40, 30, 20), (1, 1)),
          ((2, 3), (2, 3)), ((2, 3), (3,))]


@pytest.mark.parametrize("shape, target", SHAPES, ids=[f"{s}->{t}" for s, t in SHAPES])
def test_the_diagnosis_sums_a_broadcast_gradient_as_sum_to_does_to_the_last_bit(shape, target):
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.standard_normal(shape) * 10 ** rng.uniform(-3, 3, shape)
        mine, public = _sum_to(a, target), sum_to(a, target)
        assert mine.shape == public.shape == target and np.array_equal(mine, public), np.max(np.abs(mine - public))


def test_a_mismatch_raises_in_public_and_is_none_inside():
    with pytest.raises(ValueError, match="larger rank"):
        sum_to(np.ones(3), (2, 3))
    assert _sum_to(np.ones(3), (2, 3)) is None
    assert _sum_to(np.ones((3, 2)), (2, 3)) is None  # (the public one reshapes here, as it always did)
    assert sum_to(np.ones((3, 2)), (2, 3)).shape == (2, 3)
    assert sum_to(np.ones((2, 3)), (3,)).tolist() == [2.0, 2.0, 2.0]
