"""outcome._mismatch never called a torch twin different where either side was infinite (review16a #3): the
allowance TWIN_ULPS * eps * max(|a|, |b|) is inf there and |a - b| <= inf held, so inf vs -inf, 1.0 vs inf and
-inf vs 3.0 counted as the same function (a twin that overflows, or has the wrong sign at a pole, still counted as
torch's gradient).  Same-signed infinities at the same position agree; anything else is a mismatch."""

from __future__ import annotations

import numpy as np
import pytest

from gradspec.outcome import _mismatch

EPS = np.finfo(np.float64).eps


class _Node:
    op, name, inputs = "u", "a", ["x"]


def _differs(a, b) -> bool:
    return _mismatch(_Node, [np.array([0.0])], np.array([a]), np.array([b]), EPS) is not None


@pytest.mark.parametrize("a, b", [(np.inf, -np.inf), (1.0, np.inf), (np.inf, 1.0), (-np.inf, 3.0), (np.nan, np.inf)])
def test_an_infinity_on_one_side_only_is_a_mismatch(a, b):
    assert _differs(a, b)


@pytest.mark.parametrize("a, b", [(np.inf, np.inf), (-np.inf, -np.inf), (np.nan, np.nan), (1.0, 1.0 + 2 * EPS)])
def test_the_same_value_is_no_mismatch(a, b):
    assert not _differs(a, b)
