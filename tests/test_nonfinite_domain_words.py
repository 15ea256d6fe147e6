"""The non-finite note named "a 0/0, inf-inf or 0·inf" for every NaN made from finite inputs, a domain error too
(review16a #4: sqrt(-1), pow(-1, 0.5); log(-1)'s gradient is finite, so no such note).
A NaN where a finite input lies outside the op's real domain (``ops.get(op).domains_for``) is now said to be that; a 0/0 is still said to be a 0/0."""

from __future__ import annotations

import numpy as np
import pytest

import gradspec as gs
from gradspec._check_nonfinite import CASE_KEY


def _note(leaves, nodes) -> str:
    case = gs.Case.build(leaves, nodes + [("s", "sum", [nodes[-1][0]], {})], ["s"], [None])
    return next(str(n) for n in gs.check(case).notes if CASE_KEY in str(n))


@pytest.mark.parametrize("op, params", [("sqrt", {}), ("pow_scalar", {"exponent": 0.5})])
def test_a_domain_error_is_named_as_one(op, params):
    note = _note({"x": np.array([-1.0, 2.0])}, [("a", op, ["x"], params)])
    assert "outside" in note and "domain" in note and "0/0" not in note, note


def test_a_zero_over_zero_is_still_a_zero_over_zero():
    note = _note({"x": np.array([0.0, 1.0]), "y": np.array([0.0, 2.0])}, [("a", "div", ["x", "y"], {})])
    assert "0/0" in note and "outside" not in note, note
