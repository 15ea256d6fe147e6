"""Which inputs of a mixed-precision node get a gradient computed through float32 arithmetic
(``gradspec._check_precision.float32_grads``), and how that sets the precision a leaf's gradient is held to.

The soak's false alarms (tests/known_false_alarms/*_mixed_f32_*): atan2 / pow with a 0-dim float32 operand
beside a float64 one compute in float64, but their rules square / decrement the float32 operand in float32 (as
torch's do).  The table holds what each rule's arithmetic does, read off its formula in gradspec/ops/elementwise.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gradspec as gs
from gradspec._check_precision import float32_grads
from gradspec.check import _leaf_precisions
from gradspec.spec.registry import lookup

X64 = np.array([0.7, 1.3, 2.0])
Y32 = np.array(-0.36117283, dtype=np.float32)

CASES = [
    # op, why
    ("atan2", {0, 1}, "a * a + b * b: b squared in float32, both gradients divide by it"),
    ("pow", {0}, "b * a ** (b - 1): b - 1 in float32; b's own gradient out * log(a) is float64"),
    ("div", {1}, "g / b is float64 (b promoted exactly); -g * a / (b * b) squares b in float32"),
    ("mul", set(), "g * b and g * a: each promotes its float32 value exactly"),
    ("add", set(), "g, g: no arithmetic"),
]


@pytest.mark.parametrize("op, expected, why", CASES, ids=[c[0] for c in CASES])
def test_the_rule_s_float32_arithmetic_is_followed(op, expected, why):
    spec = lookup(op)
    out = spec.forward(X64, Y32.astype(np.float64))
    assert float32_grads(spec, [X64, Y32], out, {}) == frozenset(expected), why


def test_a_float32_cast_of_float64_values_is_not_excused():
    # A bug that computes a float64 rule in float32 (a planted .float()) is the code under test's, not torch's
    # promotion: only arithmetic on the node's own float32 inputs counts.
    spec = lookup("mul")
    planted = dataclasses.replace(spec, vjp=lambda g, a, b, *, out: ((g * b).float().double(), g * a))
    assert float32_grads(planted, [X64, Y32], X64 * Y32, {}) == frozenset()


@pytest.mark.parametrize("op, x0", [("atan2", "float32"), ("pow", "float32"), ("mul", "float64")])
def test_the_float64_leaf_is_held_to_its_rule_s_precision(op, x0):
    case = gs.Case.build({"x0": X64, "x1": Y32}, [("v0", op, ["x0", "x1"], {})], ["v0"], [np.ones(3)])
    assert _leaf_precisions(case) == {"x0": x0, "x1": "float32"}
