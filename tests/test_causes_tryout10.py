"""Causes tryout10 found wrong or vague (F11, F5): each finding must name what is actually wrong.

The expected words come from how each piece of code in tests/_tryout10_code.py was written wrong, never
from running gradspec."""

from __future__ import annotations

import numpy as np

import gradspec as gs
from gradspec.case import Case, Leaf, NodeDef
from tests import _tryout10_code as T


def _cumprod_case(x):
    return gs.check(Case([Leaf("x0", np.asarray(x, dtype=np.float64))], [NodeDef("v0", "t10_cumprod_div0", ["x0"], {})],
                         ["v0"], [np.ones(np.shape(x))]))


def test_a_division_by_a_zero_input_is_not_blamed_on_an_exp_overflow():
    # F11: row 1 holds the zeros that make 0/0 in the backward's "/ x"; row 0 holds 851, beyond 709.8 where exp
    # overflows in float64, but the op has no exp and row 0's gradient is finite (no zero in it)
    assert T.cumprod_div0.name == "t10_cumprod_div0"
    r = _cumprod_case([[851.0, 1.0, 2.0], [0.5, 0.0, 0.0]])
    assert r.discrepancies, "the /x backward must be found"
    s = r.discrepancies[0].cause.summary
    assert "overflow" not in s and "709" not in s, s
    assert "division by an input that is 0" in s and "x0[1, 1]" in s, s


def test_the_verify_op_run_of_tryout10_names_the_zero_input():
    # the tryout's own run (seed 0, 60 cases): its shrunk case holds |x| = 851 in another row than the NaNs
    r = gs.verify_op(T.cumprod_div0, max_examples=60, seed=0)
    assert r.discrepancies
    s = r.discrepancies[0].cause.summary
    assert "overflow" not in s and "division by an input that is 0" in s, s


def _mul_case(op, x, b):
    return gs.check(Case([Leaf("x0", np.asarray(x)), Leaf("x1", np.asarray(b))], [NodeDef("y", op.name, ["x0", "x1"], {})],
                         ["y"], [np.ones(len(x))]))


def test_an_exp_overflow_is_not_blamed_on_a_zero_input_that_divides_nothing():
    # review15 #4: at element 0, x0 = 800 (exp overflows: inf/inf) and x1 = 0 (the op divides by nothing): the
    # words must not say "a division by an input that is 0" without the overflow; moving x1 off 0 keeps the NaN
    r = _mul_case(T.mul_exp_overflow, [800.0, 0.5, 1.5], [0.0, 2.0, 3.0])
    assert r.discrepancies, "the overflowing backward must be found"
    s = r.discrepancies[0].cause.summary
    assert "overflow" in s and "|x0| = 800" in s, s
    assert "division by an input that is 0 there, x1[0]" not in s, s


def test_a_division_by_a_zero_input_next_to_a_large_input_names_the_division():
    # the other way round: x1 = 0 is the divisor (0/0), x0 = 800 at the same element but no exp anywhere
    r = _mul_case(T.mul_div_b, [800.0, 0.5, 1.5], [0.0, 2.0, 3.0])
    assert r.discrepancies, "the /b backward must be found"
    s = r.discrepancies[0].cause.summary
    assert "division by an input that is 0" in s and "x1[0]" in s and "overflow" not in s, s


def test_without_a_probe_a_zero_next_to_an_overflow_names_both():
    from gradspec._diagnose_points import nonfinite_words

    case = Case([Leaf("x0", np.array([800.0, 0.5])), Leaf("x1", np.array([0.0, 2.0]))],
                [NodeDef("y", T.mul_exp_overflow.name, ["x0", "x1"], {})], ["y"], [np.ones(2)])
    s = nonfinite_words(case, {"x0": np.array([np.nan, 2.0]), "x1": np.array([800.0, 0.5])})
    assert "both possible" in s and "overflow" in s and "x1[0] = 0" in s, s


def test_a_masked_mean_dividing_by_the_full_length_is_a_factor_per_row():
    # F5: rows with 2 and 3 of 5 elements selected get 2/5 and 3/5 of their gradient, the full row is right
    import torch

    x = torch.linspace(-1, 1, 15, dtype=torch.float64).reshape(3, 5)
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 1, 0]], dtype=torch.bool)
    r = gs.verify_torch_function(T.MaskedMeanFullCount.apply, example_inputs=(x, mask), max_examples=20, seed=0)
    assert r.discrepancies, "the full-length divisor must be found"
    s = r.discrepancies[0].cause.summary
    assert "no simple pattern" not in s and "along each row" in s and "normaliser" in s, s


def test_a_factor_per_row_that_moves_with_the_input_is_no_normaliser():
    # a factor per row fits here (1 + |x_r|^2 on each row), but it is not the same at nearby inputs: the
    # normaliser words would send the user after a count that is not there
    assert T.centre_scaled.name == "t10_centre_scaled"
    x = np.array([[0.5, -1.0, 2.0, 0.25], [1.5, 0.75, -0.5, 1.0], [-2.0, 0.5, 1.25, -0.75]])
    r = gs.check(Case([Leaf("x0", x)], [NodeDef("v0", "t10_centre_scaled", ["x0"], {})], ["v0"],
                      [np.array([[1.0, -0.5, 2.0, 0.5], [0.25, 1.0, -1.0, 1.5], [2.0, 1.0, 0.5, -1.5]])]))
    assert r.discrepancies, "the scaled backward must be found"
    s = r.discrepancies[0].cause.summary
    assert "normaliser" not in s, s
