"""Array shapes: sides that are 1 often and 0 rarely, shrinking towards fewer axes of size 1."""

from __future__ import annotations

import functools

from hypothesis import strategies as st

BOOLS = st.booleans()


@functools.lru_cache(maxsize=None)
def ints(lo: int, hi: int):
    """``st.integers(lo, hi)``, built once: a fresh strategy is validated on its first draw, and the
    builder draws dozens of small integers per case (validation cost more than the draws)."""
    return st.integers(lo, hi)


def _draw_side(draw, lo: int, hi: int, zero_odds: int) -> int:
    """A side in [lo, hi] from ONE integer choice: 1 for the lowest ~30% of its range, then lo..hi in
    order (the mapping is monotone, so shrinking the choice shrinks the side), 0 for its top value
    only (1 in ``2 * zero_odds``), so an empty tensor is rare and never where a shrink heads."""
    if lo == hi:
        return lo
    top = 2 * zero_odds - 1
    r = draw(ints(0, top))
    if r == top and lo == 0:
        return 0
    lo1 = max(lo, 1)
    ones = (3 * top) // 10 if lo1 == 1 else 0
    if r < ones:
        return 1
    return lo1 + (r - ones) * (hi - lo1 + 1) // (top - ones + 1)


@st.composite
def _shapes(draw, min_dims, max_dims, min_side, max_side, zero_odds):
    nd = draw(ints(min_dims, max_dims))
    return tuple(_draw_side(draw, min_side, max_side, zero_odds) for _ in range(nd))
