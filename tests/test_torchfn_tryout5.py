"""A new user's torch Functions (tryout5 #1, #2, #4, #9): right code agrees, wrong code is found with a cause
that names the actual mistake.  The expected words come from how each Function in tests/_tryout5_torchfn.py was
written (its comments), never from running gradspec."""

from __future__ import annotations

import pytest

import gradspec as gs
from tests import _tryout5_torchfn as T


def _x():
    import torch

    return torch.linspace(-1.5, 1.3, 12, dtype=torch.float64).reshape(3, 4)


def _verify(fn, n=2, **kw):
    return gs.verify_torch_function(fn, example_inputs=tuple(_x() + k for k in range(n)), max_examples=25, seed=1,
                                    **kw)


# tryout5 #1: a correct in-place Function (ctx.mark_dirty) was "wrong-vjp: your backward raised RuntimeError (a leaf
# Variable that requires grad has been used in an in-place operation.)": torch refused the *forward* on the leaf
# gradspec passed, as it refuses any in-place op on one; a caller passes a non-leaf.
def test_a_correct_in_place_function_agrees():
    r = _verify(T.MulInplace.apply, n=1)
    assert r.status == "agree", [d.cause.summary if d.cause else d.message for d in r.discrepancies]
    assert any("in place" in str(n) and "mark_dirty" in str(n) for n in r.notes), r.notes


def test_a_wrong_in_place_function_is_named_by_its_factor():
    r = _verify(T.MulInplaceBuggy.apply, n=1)
    assert r.status == "disagree"
    c = r.discrepancies[0].cause
    assert c is not None and c.id == "wrong-vjp", c
    assert "raised" not in c.summary and "leaf Variable" not in c.summary, c.summary
    assert "factor" in c.summary and "1/2" in c.summary, c.summary


# tryout5 #2: a backward that detaches x*x is differentiable only through the upstream gradient g: the double backward
# is silently wrong when g requires grad (a gradient penalty), which gradspec's g (a constant) never showed.
def test_a_double_backward_through_a_detached_term_is_found():
    r = _verify(T.CubeBadDouble.apply, n=1)
    assert r.status == "disagree", r.notes
    d = r.discrepancies[0]
    assert d.cause is not None and d.cause.id == "wrong-double-backward", d.cause
    assert not any("torch raises" in str(n) for n in r.notes), r.notes


def test_a_correct_double_backward_agrees():
    r = _verify(T.Cube.apply, n=1)
    assert r.status == "agree", [d.cause.summary if d.cause else d.message for d in r.discrepancies]
    assert any("double backward, create_graph=True) are checked" in str(n) for n in r.notes), r.notes


# tryout5 #4: a backward returning None for an input that requires grad: "... is wrong — no gradient to compare".
NONE_CASES = {
    # id: (fn, tensor inputs, words the cause must hold)
    "needs-input-grad-of-the-wrong-input": (T.BilinearBuggy.apply, 2,
                                            ("returns None for input 1", "requires grad", "ctx.needs_input_grad[1]")),
    "materialize-grads-off": (T.SinCosBuggy.apply, 1, ("returns None for input 0", "requires grad")),
}


@pytest.mark.parametrize("fn, n, words", NONE_CASES.values(), ids=list(NONE_CASES))
def test_none_for_an_input_that_requires_grad_is_named(fn, n, words):
    r = _verify(fn, n=n)
    assert r.status == "disagree"
    c = r.discrepancies[0].cause
    assert c is not None and c.id == "wrong-vjp", c
    assert "no gradient to compare" not in c.summary and all(w in c.summary for w in words), c.summary


@pytest.mark.parametrize("fn, n", [(T.Bilinear.apply, 2), (T.SinCos.apply, 1)], ids=["bilinear", "sincos"])
def test_the_right_twins_agree(fn, n):
    r = _verify(fn, n=n)
    assert r.status == "agree", [d.cause.summary if d.cause else d.message for d in r.discrepancies]


# tryout5 #9: a backward returning another float dtype than its input's: "no simple pattern" / "rounding".
DTYPE_CASES = {
    "float32-for-float64": (T.ExpFloat32Grad.apply, ("returns float32", "float64")),
    "float16-for-float64": (T.DoubleHalfGrad.apply, ("returns float16", "float64")),
}


@pytest.mark.parametrize("fn, words", DTYPE_CASES.values(), ids=list(DTYPE_CASES))
def test_a_gradient_of_another_dtype_is_named(fn, words):
    r = _verify(fn, n=1, dtypes=("float64",))
    assert r.status == "disagree"
    c = r.discrepancies[0].cause
    assert c is not None and c.id == "wrong-vjp", c
    assert all(w in c.summary for w in words), c.summary


# ... also where the Function runs inside a plain function (tryout5's twice_buggy): torch differentiates the plain
# function's own ops to any order, but not what the Function's backward cut from the graph.
def test_a_wrong_double_backward_inside_a_plain_function_is_found():
    r = _verify(T.cube_of_sin_bad_double, n=1)
    found = [d for d in r.discrepancies if d.cause is not None and d.cause.id == "wrong-double-backward"]
    assert found, r.notes
    assert "CubeBadDouble.backward" in found[0].cause.summary, found[0].cause.summary


def test_a_right_double_backward_inside_a_plain_function_agrees():
    r = _verify(T.cube_of_sin, n=1)
    assert r.status == "agree", [d.cause.summary if d.cause else d.message for d in r.discrepancies]
    assert any("double backward, create_graph=True) are checked" in str(n) for n in r.notes), r.notes
