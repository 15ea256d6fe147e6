"""tryout11 #10: a torch twin that is NaN exactly where the op's forward is NaN computes the same function there.

NaN == NaN positions were compared against a rounding allowance that is itself NaN (ulps of max(|NaN|, |NaN|)),
so the twin was called "another function ... forward nan vs torch twin nan (relative difference nan)"."""

from __future__ import annotations

import numpy as np
import torch

import gradspec as gs
from gradspec.outcome import twin_mismatches

sqrt_op = gs.Op("t11_sqrt", forward=np.sqrt, vjp=lambda g, x, out: (g / (2 * out),), torch=torch.sqrt)
# a twin that is finite where the forward is NaN: another function there (still a mismatch)
sqrt_abs_twin = gs.Op("t11_sqrt_abs", forward=np.sqrt, vjp=lambda g, x, out: (g / (2 * out),),
                      torch=lambda x: torch.sqrt(x.abs()))


def _case(op):
    return gs.Case.build({"x": np.array([-1.0, 4.0])}, [("y", op, ["x"], {})], ["y"], [np.ones(2)])


def test_nan_where_the_forward_is_nan_is_no_twin_mismatch():
    with np.errstate(invalid="ignore"):
        assert twin_mismatches(_case("t11_sqrt"), "float64") == []


def test_a_finite_twin_where_the_forward_is_nan_is_still_a_mismatch():
    with np.errstate(invalid="ignore"):
        (c,) = twin_mismatches(_case("t11_sqrt_abs"), "float64")
    assert c.id == "twin-mismatch" and "y[0]" in c.evidence and "forward nan vs torch twin 1.0" in c.evidence
