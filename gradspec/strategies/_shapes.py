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
    """A side in [lo, hi], mostly from ONE integer choice r in 0..15: 1 for r < 4 (25%), lo..hi in
    order for r = 4..14 (the mapping is monotone, so shrinking r shrinks the side), and for r = 15 a
    second choice that makes it 0 only rarely (1 in ``2 * zero_odds`` overall): an empty tensor is
    rare and never where a shrink heads."""
    if lo == hi:
        return lo
    r = draw(ints(0, 15))
    lo1 = max(lo, 1)
    if r == 15:
        if lo == 0 and draw(ints(0, zero_odds // 8 - 1)) == 0:
            return 0
        return hi
    if lo1 == 1 and r < 4:
        return 1
    k = r - 4 if lo1 == 1 else r
    return lo1 + k * (hi - lo1 + 1) // (11 if lo1 == 1 else 15)


@st.composite
def _shapes(draw, min_dims, max_dims, min_side, max_side, zero_odds):
    nd = draw(ints(min_dims, max_dims))
    return tuple(_draw_side(draw, min_side, max_side, zero_odds) for _ in range(nd))


# Ops that reduce or normalise over some axes of their input.  Their VJP bugs (a mean divided by the
# wrong count, a softmax's sum(g*s) over the wrong axis, an unsqueeze at the wrong place) only show on a
# *partial* reduction of an input with two or more axes of size > 1: reducing everything, a 1-D input or
# size-1 axes gives the right answer by accident.  tryout8 measured 8% of cases with such a node in a
# 13-op campaign, and a mean bug changed a gradient in 0.7% of cases: 200-1000-case runs missed it.
AXIS_OPS = frozenset({"sum", "mean", "softmax", "log_softmax", "logsumexp", "var", "std"})


def wide_shape(draw, min_dims: int, max_dims: int, min_side: int, max_side: int) -> tuple | None:
    """A shape with at least two axes of size > 1 (its last two), for the input of an ``AXIS_OPS`` op;
    None where the bounds allow none."""
    lo = max(2, min_side)
    if max_dims < 2 or max_side < lo:
        return None
    nd = draw(ints(max(2, min_dims), max_dims))
    lead = [_draw_side(draw, min_side, max_side, 32) for _ in range(nd - 2)]
    return tuple(lead + [_draw_side(draw, lo, max_side, 32) for _ in range(2)])
