"""The forward a group's draw computed for a value set, handed to that set's first check (fuzz's prefetch).

The draw's value check evaluates every node at the set's final values; ``value_set(keep_forward=True)``
offers that pass to the case (``_private.percase.offer_forward``) and the prefetch takes it as the per-case
memo's forward instead of computing it again.  What makes that safe: it is the same function on the very
leaf arrays with the same params (compared here bit for bit with ``Case._forward``), taken once, and never
where a leaf no longer holds the array it was computed from.  (Verdicts with and without the prefetch:
tests/test_prefetch.py, whose "on" campaigns now take the drawn forwards.)"""

from __future__ import annotations

import copy

import numpy as np

import gradspec as gs
from gradspec._private import percase
from gradspec._private.sampling import sample
from gradspec.case import Leaf


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _groups(n, seed, **kw):
    return sample(gs.strategies.case_groups(**kw), n, seed)


def test_the_drawn_forward_is_bit_for_bit_the_cases_own():
    offered = total = 0
    for kw, seed in ((dict(), 1), (dict(dtype="float32"), 2), (dict(dtype="mixed"), 3)):
        for group in _groups(40, seed, **kw):
            for case in group:
                total += 1
                env = percase.take_forward(case)
                if env is None:
                    continue
                offered += 1
                own = case._forward(None, 0, None)
                assert set(env) == set(own)
                assert all(_same(env[k], own[k]) for k in own), case.to_json()
    # Nearly every set gets one (none only where a node's params do not compare, or a user op).
    assert total > 100 and offered >= 0.9 * total, (offered, total)


def test_taken_once_and_never_for_a_leaf_that_changed():
    group = _groups(5, 4)
    cases = [c for g in group for c in g]
    a, b, c = cases[0], cases[1], cases[2]
    assert percase.take_forward(a) is not None
    assert percase.take_forward(a) is None  # taken: a second check computes its own
    b.leaves[0] = Leaf(b.leaves[0].name, b.leaves[0].value.copy(), b.leaves[0].requires_grad)  # other values
    assert percase.take_forward(b) is None
    # A shallow copy shares the leaf arrays (the same values): it carries the same forward, right for both.
    d = copy.copy(c)
    env = percase.take_forward(d)
    assert env is not None and all(_same(env[k], v) for k, v in d._forward(None, 0, None).items())


def test_not_offered_for_a_user_op_nor_outside_groups():
    sq = gs.Op("drawn_fwd_sq", forward=lambda x: x * x, vjp=lambda g, x, out: (2 * g * x,))
    for group in _groups(10, 5, ops=[sq, "add"]):
        for case in group:
            assert percase.take_forward(case) is None  # (a user forward may be cut and replaced by a placeholder)
    for case in sample(gs.strategies.cases(), 10, 6):
        assert percase.take_forward(case) is None
