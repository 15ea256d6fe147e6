"""Causes a user can act on, for four bugs a new user's own torch Functions had (CONTRACT §8, "name the cause").

Each of these was named by a symptom before: a broadcast bias whose backward averages ``g`` over the batch was
"scale 1/3"; a gradient of shape () for an input of shape (1,) was "permuted"; a backward that multiplies its
saved output in place was "not-localised"; a backward returning None for an input that needs a gradient had
"no simple pattern".  The Functions are copied from that user's files (module level, as theirs were).  The
expected causes are written here from the bugs; each case is a fixed one-node check or a short verify run.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gradspec as gs
from gradspec.report_cause import fix_direction
from gradspec.verify.torch_function import _torch_fn_name

ORACLES = ["reference", "finite-differences", "jacobian", "torch-cpu"]


class AddBiasMean(torch.autograd.Function):
    """x + b, b broadcast over the batch; the backward averages g over the batch instead of summing it."""

    @staticmethod
    def forward(ctx, x, b):
        return x + b

    @staticmethod
    def backward(ctx, g):
        return g, g.mean(0)


class AddBiasThird(torch.autograd.Function):
    """x + b whose backward is a third of the right one for both inputs: a constant factor, not a mean."""

    @staticmethod
    def forward(ctx, x, b):
        return x + b

    @staticmethod
    def backward(ctx, g):
        return g / 3, g.sum(0) / 3


class ScalarGrad(torch.autograd.Function):
    """3 x, whose backward sums g to a 0-d gradient: right for x of shape (), refused by torch for (1,)."""

    @staticmethod
    def forward(ctx, x):
        return x * 3.0

    @staticmethod
    def backward(ctx, g):
        return (g * 3.0).sum()


class TanhInplace(torch.autograd.Function):
    """tanh; the backward squares its saved output in place (the output tensor the caller holds)."""

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        y.mul_(y)
        return g * (1 - y)


class ExpTwiceInplace(torch.autograd.Function):
    """2 exp(x), saving the intermediate exp(x) (not an output); the backward adds 1 to it in place."""

    @staticmethod
    def forward(ctx, x):
        e = torch.exp(x)
        ctx.save_for_backward(e)
        return 2 * e

    @staticmethod
    def backward(ctx, g):
        (e,) = ctx.saved_tensors
        e.add_(1)
        return g * 2 * (e - 1)


class TanhCtxInplace(torch.autograd.Function):
    """tanh keeping its output on ctx as an attribute (no version check); the backward squares it in place."""

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.y = y.detach()
        return y

    @staticmethod
    def backward(ctx, g):
        ctx.y.mul_(ctx.y)
        return g * (1 - ctx.y)


class BwdNone(torch.autograd.Function):
    """x * y; the backward forgets x's gradient (None) and gives y the upstream gradient unscaled."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        return None, g


class BwdNoneOnly(torch.autograd.Function):
    """x * y; the backward forgets x's gradient (None), y's is right."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return None, g * x


def _op(fn) -> str:
    """The op name verify_torch_function gives fn, registering it (a tiny run)."""
    apply = fn.apply  # one object: the name is kept per object
    gs.verify_torch_function(apply, max_examples=1, seed=0)
    return _torch_fn_name(apply)


def _check(fn, leaves: dict, seed):
    op = _op(fn)
    values = {k: np.asarray(v, dtype=np.float64) for k, v in leaves.items()}
    case = gs.Case.build(values, [("out", op, list(values), {})], ["out"], [np.asarray(seed, dtype=np.float64)])
    v = gs.check(case, oracles=ORACLES)
    assert v.discrepancies, f"{fn.__name__}: the bug was not found\n{v}"
    return op, v.discrepancies


X34 = np.linspace(-1.0, 1.3, 12).reshape(3, 4)
G34 = np.array([[0.7, -1.2, 0.4, 1.1], [-0.3, 0.9, 1.6, -0.8], [1.3, 0.2, -1.5, 0.6]])


# ---------------------------------------------------------------------------------------------------------------
# 1. the broadcast reduction is a mean where a sum belongs: a factor 1 / (the size of the averaged axis)
# ---------------------------------------------------------------------------------------------------------------

# id -> (x, b, upstream g, the averaged axis, its size)
MEAN_CASES = {
    "bias-(4,)-over-axis-0-of-(3,4)": (X34, [0.5, -0.2, 0.1, 0.9], G34, 0, 3),
    "bias-(1,)-over-axis-0-of-(3,1)": (X34[:, :1], [0.4], G34[:, :1], 0, 3),
    # g.mean(0) of a (2, 3, 4) g is (3, 4); torch sums that down to b's (4,): a mean over axis 0 only
    "bias-(4,)-over-(2,3,4)-mean-over-axis-0-only": (np.linspace(-1, 1, 24).reshape(2, 3, 4), [0.5, -0.2, 0.1, 0.9],
                                                     np.linspace(1.5, -0.7, 24).reshape(2, 3, 4), 0, 2),
}


@pytest.mark.parametrize("case_id", list(MEAN_CASES), ids=list(MEAN_CASES))
def test_a_mean_over_the_broadcast_axis_is_named_as_such(case_id):
    x, b, g, axis, size = MEAN_CASES[case_id]
    op, found = _check(AddBiasMean, {"x": x, "b": b}, g)
    for d in found:
        c = d.cause
        assert (c.id, c.node, c.op, c.pattern) == ("wrong-vjp", "out", op, "broadcast-reduction"), f"{d.kind}: {c}"
        assert c.factor == pytest.approx(1 / size), c
        s = c.summary
        assert "input b" in s and f"axis {axis}" in s and "mean" in s and "sum" in s, s
        assert f"1/{size}" in s and f"g.sum({axis}" in s, s  # the factor and the fix


def test_the_mean_bias_found_by_verify_is_a_broadcast_reduction():
    # The user's own run (example inputs of a (3, 4) batch and a (4,) bias): before, 'scale' with "1/3".
    r = gs.verify_torch_function(AddBiasMean.apply, example_inputs=(torch.randn(3, 4, dtype=torch.float64),
                                                                    torch.randn(4, dtype=torch.float64)),
                                 max_examples=10, seed=1)
    assert r.discrepancies, str(r)
    for d in r.discrepancies:
        assert (d.cause.id, d.cause.pattern) == ("wrong-vjp", "broadcast-reduction"), d.cause
        assert "mean" in d.cause.summary, d.cause.summary


def test_a_factor_on_every_input_is_still_a_scale_not_a_mean():
    # Both gradients are a third of the right ones: x is not broadcast, so no broadcast reduction explains it.
    op, found = _check(AddBiasThird, {"x": X34, "b": [0.5, -0.2, 0.1, 0.9]}, G34)
    for d in found:
        assert (d.cause.id, d.cause.pattern) == ("wrong-vjp", "scale"), d.cause
        assert d.cause.factor == pytest.approx(1 / 3), d.cause


# ---------------------------------------------------------------------------------------------------------------
# 2. a gradient of shape () for an input of shape (1,): torch refuses it (its shape is not one the input
#    broadcasts to); the cause is the shape, and says what to return
# ---------------------------------------------------------------------------------------------------------------

# id -> (Function, leaves, upstream g, the input with the wrong shape, words its values get)
SHAPE_CASES = {
    "bias-mean-of-one-row-values-right": (AddBiasMean, {"x": [0.3], "b": [1.2]}, [0.8], "b", "values are right"),
    "bias-mean-of-three-rows-values-a-third": (AddBiasMean, {"x": [0.3, -0.5, 0.9], "b": [1.2]}, [0.8, -1.1, 0.6],
                                               "b", "1/3"),
    "summed-to-0-d-values-right": (ScalarGrad, {"x": [0.7]}, [1.3], "x", "values are right"),
}


@pytest.mark.parametrize("case_id", list(SHAPE_CASES), ids=list(SHAPE_CASES))
def test_a_0d_gradient_for_a_shape_1_input_is_a_wrong_shape(case_id):
    fn, leaves, g, name, words = SHAPE_CASES[case_id]
    op, found = _check(fn, leaves, g)
    k = list(leaves).index(name)
    for d in found:
        c = d.cause
        assert (c.id, c.node, c.op) == ("wrong-vjp", "out", op), f"{d.kind}: {c}"
        assert c.pattern == "other", f"{d.kind}: {c}"  # before: 'permuted' (one element is in its place)
        s = c.summary
        assert f"shape () for input {k} ({name})" in s and "shape (1,)" in s, s
        assert "torch refuses" in s and f"{name}.shape" in s, s  # what torch does, and the fix
        assert words in s, s
        assert "in its input's shape" in fix_direction(c), fix_direction(c)  # the report's fix line


def test_torch_refuses_a_0d_gradient_for_a_shape_1_input():
    # What the cause above says torch does (the reference's torch_backward_semantics.md: a gradient is summed down
    # only when the input's shape expands to it; () does not expand to (1,)).
    b = torch.tensor([1.2], dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"invalid gradient at index 0 - got \[\] but expected shape compatible"):
        ScalarGrad.apply(b).sum().backward()


# ---------------------------------------------------------------------------------------------------------------
# 3. a backward that modifies a saved tensor in place: right once, another answer (or torch's error) the next time
# ---------------------------------------------------------------------------------------------------------------

# id -> (Function, words the cause names the mutated tensor with)
INPLACE_CASES = {
    "saved-output-squared-in-place": (TanhInplace, "ctx.saved_tensors[0] (also the Function's output 0)"),
    "saved-intermediate-incremented-in-place": (ExpTwiceInplace, "ctx.saved_tensors[0]"),
    "ctx-attribute-squared-in-place": (TanhCtxInplace, "ctx.y"),
}


@pytest.mark.parametrize("case_id", list(INPLACE_CASES), ids=list(INPLACE_CASES))
def test_a_backward_that_modifies_a_saved_tensor_in_place_is_named(case_id):
    fn, what = INPLACE_CASES[case_id]
    r = gs.verify_torch_function(fn.apply, arity=1, max_examples=5, seed=1)
    assert r.discrepancies, str(r)
    for d in r.discrepancies:
        c = d.cause
        assert (c.id, c.op) == ("wrong-vjp", f"torch_{fn.__name__}"), f"{d.kind}: {c}"
        assert c.node in {n.name for n in d.case.nodes if n.op == c.op}, c
        s = c.summary
        assert "modifies a saved tensor in place" in s and what in s, s
        assert "a second call gives a different gradient" in s and "out of place" in s, s
        assert "out of place" in fix_direction(c), fix_direction(c)  # not "multiply by 1/factor"


# ---------------------------------------------------------------------------------------------------------------
# 4. a backward returning None for an input that needs a gradient: torch takes it as zeros
# ---------------------------------------------------------------------------------------------------------------

# id -> (Function, the other input's gradient is also wrong)
NONE_CASES = {
    "None-for-x-and-y-unscaled": (BwdNone, True),
    "None-for-x-y-right": (BwdNoneOnly, False),
}


@pytest.mark.parametrize("case_id", list(NONE_CASES), ids=list(NONE_CASES))
def test_none_returned_for_an_input_that_needs_a_gradient_is_named(case_id):
    fn, other_wrong = NONE_CASES[case_id]
    # J^T·g for x is g * y = [0.4, -3.6]: not zero, so None (zeros for torch) is wrong
    op, found = _check(fn, {"x": [1.5, -2.0], "y": [0.5, 3.0]}, [0.8, -1.2])
    for d in found:
        c = d.cause
        assert (c.id, c.node, c.op) == ("wrong-vjp", "out", op), f"{d.kind}: {c}"
        s = c.summary
        assert "returns None for input 0 (x), which requires grad and reaches the output" in s, s
        assert "treated as zero" in s and "[0.4, -3.6]" in s, s  # what torch does, what it should be
        assert ("input 1 (y)" in s) == other_wrong, s
        assert "needs_input_grad" in fix_direction(c), fix_direction(c)


def test_none_found_by_verify_is_named():
    # The user's run: before, "it differs from J^T·g by at most 6.1e-14 relative, the size of float32's rounding"
    r = gs.verify_torch_function(BwdNone.apply, arity=2, max_examples=20, seed=5)
    assert r.discrepancies, str(r)
    for d in r.discrepancies:
        assert d.cause.id == "wrong-vjp" and "returns None for input 0" in d.cause.summary, d.cause


class TanhPowInplace(torch.autograd.Function):
    """tanh; the backward squares its saved output with pow_ (in place) and then squares it again: wrong already
    on the first call (1 - tanh^4), and the saved output is changed for the next one."""

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        y.pow_(2)
        return g * (1 - y * y)


def test_a_wrong_gradient_computed_from_a_tensor_modified_in_place_names_the_modification():
    # Before: 'scale' ("it is 1.58003 × J^T·g; remove that factor") on the shrunk one-element case.
    r = gs.verify_torch_function(TanhPowInplace.apply, arity=1, max_examples=10, seed=1)
    assert r.discrepancies, str(r)
    for d in r.discrepancies:
        c = d.cause
        assert c.id == "wrong-vjp" and c.op == "torch_TanhPowInplace", c
        assert "modifies a saved tensor in place (ctx.saved_tensors[0]" in c.summary, c.summary
        assert "wrong from the first call on" in c.summary, c.summary
        assert "out of place" in fix_direction(c), fix_direction(c)
