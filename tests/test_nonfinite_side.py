"""A cause says which side is not finite, as its evidence shows (tryout11 #12).

The user's pytest run of a CG solve whose adjoint used A where A^T belongs shrank to an all-ones (singular) A; the
forward was NaN next to it, so J^T·g from finite differences of the forward was NaN on some elements while the
backward was finite everywhere.  The cause read "your backward ... is wrong — it is not finite where J^T·g is"
(evidence: reference [-0.115, ...] vs J^T·g [nan, ...]): the opposite of its evidence.  Now the elements where J^T·g
is not finite witness nothing and are said to; the rest is classified on its own.
"""

from __future__ import annotations

import numpy as np

import gradspec as gs
from gradspec._private.vjp_patterns import NO_WITNESS, classify
from gradspec.oracles import jacobian


def _classify(u, t):
    case = gs.Case.build({"x0": np.array([0.5, -1.0, 2.0, 0.25])}, [("v0", "exp", ["x0"], {})], ["v0"],
                         seeds=[np.array([1.0, 2.0, -1.0, 0.5])])
    return classify(case, case.nodes[0], case.spec("exp"), case.grad_leaves(), {"x0": np.asarray(u)},
                    {"x0": np.asarray(t)}, jacobian.jacobian(case), case.seeds[0])


def test_a_finite_backward_is_never_said_to_be_the_non_finite_side():
    truth = np.exp([0.5, -1.0, 2.0, 0.25]) * np.array([1.0, 2.0, -1.0, 0.5])
    t = truth.copy()
    t[0] = np.nan  # J^T·g's estimate is NaN at one element, the backward finite there
    pattern, factor, detail = _classify(2.0 * truth, t)  # ... and twice J^T·g on every element
    assert "not finite where J^T·g is" not in detail, detail
    assert "J^T·g is not finite on 1 of 4 elements" in detail, detail
    assert pattern == "scale" and factor == 2.0, (pattern, factor, detail)  # the bug, named on the 3 finite elements


def test_a_backward_that_agrees_wherever_j_t_g_is_finite_is_not_called_wrong():
    truth = np.exp([0.5, -1.0, 2.0, 0.25]) * np.array([1.0, 2.0, -1.0, 0.5])
    t = truth.copy()
    t[[0, 2]] = np.nan
    pattern, factor, detail = _classify(truth, t)
    assert detail.startswith(NO_WITNESS) and "agrees with J^T·g on every element where J^T·g is finite" in detail
    assert pattern == "other" and factor is None


def test_a_non_finite_backward_where_j_t_g_is_finite_is_still_said_so():
    truth = np.exp([0.5, -1.0, 2.0, 0.25]) * np.array([1.0, 2.0, -1.0, 0.5])
    u = truth.copy()
    u[1] = np.inf
    assert _classify(u, truth)[2] == "it is not finite where J^T·g is (1 of 4 elements)"
