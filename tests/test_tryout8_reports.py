"""What a new engine author found in gradspec's reports (tryout8: F4, F7, F8): each finding must say what is
actually wrong.  The engines are the planted ones of tests/_planted.py (their bugs are written there, not
derived from running gradspec)."""

from __future__ import annotations

import numpy as np

import gradspec as gs
from gradspec.oracles.engine_oracle import EngineOracle
from tests import _planted as P

# a forward that is constant (x - x) with a backward that passes g on: J = 0, J^T·g = 0 for every g
t8_flat_ste = gs.Op("t8_flat_ste", forward=lambda x: x - x, vjp=lambda g, x, out: (g,))


def _cause(case, engine):
    v = gs.check(case, [gs.oracles.get("reference"), EngineOracle(engine, name=engine.name)])
    assert v.status == "disagree", v.status
    c = v.discrepancies[0].cause
    assert c is not None
    return c


def test_softmax_with_a_seed_in_its_null_space_is_not_called_a_flat_forward():
    # tryout8 F8: softmax over dim -2 of a (2, 1) input with a seed of ones: J^T·1 = 0 because softmax's
    # outputs sum to 1 along dim, not because the forward is constant; the engine sums g*s over the last axis
    case = gs.Case.build({"x0": np.array([[0.5], [-1.0]])}, [("v0", "softmax", ["x0"], {"dim": -2})], ["v0"],
                         seeds=[np.ones((2, 1))])
    c = _cause(case, P.SoftmaxLastAxis())
    assert c.id == "wrong-vjp", (c.id, c.summary)
    assert "forward does not change" not in c.summary and "straight-through" not in c.summary, c.summary
    assert "J^T·g is 0 for this upstream gradient" in c.summary, c.summary


def test_a_flat_forward_still_gets_the_flat_forward_words():
    # the other side: a forward that really is constant (x - x) with a backward that passes g on
    case = gs.Case.build({"x0": np.array([0.5, -1.0])}, [("v0", "t8_flat_ste", ["x0"], {})], ["v0"],
                         seeds=[np.array([1.0, 2.0])])
    c = gs.check(case).discrepancies[0].cause
    assert "forward does not change" in c.summary, c.summary
