"""Causes a new user found wrong or vague (tryout3 #10): each finding must name what is actually wrong.

The expected words come from how each piece of code in tests/_tryout3_code.py was written wrong, never
from running gradspec."""

from __future__ import annotations

import numpy as np
import pytest

import gradspec as gs
from tests import _tryout3_code as T


def _floor_ste_case():
    # the user's floor_ste_case.json: one node, x = 0.001 (a jump of floor(4x)/4 at 0, 0.001 away)
    return gs.check(gs.Case.build({"x0": np.array(0.001)}, [("v0", "t3_floor_ste", ["x0"], {})], ["v0"]))


CASES = {
    # id: (run, cause id, words the summary must hold, words it must not)
    "straight-through-floor-one-node": (
        lambda: _floor_ste_case().discrepancies, "wrong-vjp", "node v0 = t3_floor_ste", "every node"),
    "straight-through-floor-says-flat": (
        lambda: _floor_ste_case().discrepancies, "wrong-vjp", "returns g unchanged", "no simple pattern"),
    "constant-output-backward-returns-g": (
        lambda: gs.verify_torch_function(T.ConstOut.apply, arity=1, max_examples=30, seed=0).discrepancies,
        "wrong-vjp", "J^T·g is 0 here", "no simple pattern"),
    "g-applied-twice": (
        lambda: gs.verify_op("t3_lse_bad", max_examples=60, seed=0).discrepancies, "wrong-vjp",
        "not linear in the upstream gradient", "no single pattern"),
    "exp-overflow-inf-over-inf": (
        lambda: gs.verify_torch_function(T.SoftplusNaive.apply, arity=1, max_examples=60, seed=0).discrepancies,
        "wrong-vjp", "overflow", "division by an input"),
    "forward-mutates-input": (
        lambda: gs.verify_torch_function(T.ForwardMutatesInput.apply, arity=1, max_examples=30, seed=0).discrepancies,
        "forward-mutates-input", "mark_dirty", "keeps state between calls"),
}


@pytest.mark.parametrize("run, cause_id, words, not_words", CASES.values(), ids=list(CASES))
def test_the_cause_names_what_is_wrong(run, cause_id, words, not_words):
    found = run()
    assert found, "the wrong code must be found"
    c = found[0].cause
    assert c is not None and c.id == cause_id, (c.id if c else None, c.summary if c else None)
    assert words in c.summary and not_words not in c.summary, c.summary


def test_a_non_tensor_argument_held_fixed_is_said_with_how_to_vary_it():
    # tryout3 #11: HuberBuggy passes at delta = 1.0 (where its bug has no effect) and nothing said delta never moved
    import torch

    x = torch.linspace(-3, 3, 12, dtype=torch.float64).reshape(3, 4)
    r = gs.verify_torch_function(T.HuberBuggy.apply, example_inputs=(x, 1.0), max_examples=10, seed=0)
    held = [n for n in r.notes if "held" in n]
    assert held and "position 1" in held[0] and "1.0" in held[0] and "args={1:" in held[0], r.notes


def test_a_wrong_shaped_gradient_torch_sums_down_gets_a_note():
    # tryout3 #12: the README promises gradspec reads a wrong-shaped gradient and says whether torch sums it down
    import torch

    r = gs.verify_torch_function(T.BiasAddNoReduce.apply, example_inputs=(torch.ones(3, 4, dtype=torch.float64),
                                                                          torch.ones(4, dtype=torch.float64)),
                                 max_examples=10, seed=0)
    shaped = [n for n in r.notes if "sums it down" in n]
    assert r.ok and shaped and "tensor input 1 in shape" in shaped[0], r.notes
