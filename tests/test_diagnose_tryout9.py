"""Causes that named the wrong fix or blurred the culprit (CONTRACT §8): a probabilistic-programming author's bugs.

- F3: ``torch.where(x > 0, x * log(x), 0)`` has a NaN gradient at x < 0, and the cause said "a 0/0 or inf/inf: a
  division by an input that is 0 there?".  There is no division: the branch ``where`` does not select is NaN
  there (log(-1)), and the zero gradient ``where`` sends it times that branch's derivative is 0 * nan.  The cause
  must name the unselected branch and the double-where fix, found from evidence (a select op whose unselected
  input is non-finite, met while the function runs), never from the function's name.
- F4: a backward that averages a broadcast input's gradient where the sum belongs was "scale 0.5 ... remove that
  factor" when two inputs (1,) were broadcast to (2,) and both were averaged: each hypothesis replaced one input's
  gradient only.  The same bug on one broadcast input was already "broadcast-reduction".
- F6: a wrong digamma sign in d/da of a Beta log-density, its ratio varying with the input, read "at this input
  it is -1.756 × J^T·g ..." without saying that only a's gradient is wrong.

The Functions are small copies of the user's (mylib/statlib.py); every case is a fixed one-node check.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gradspec as gs
from gradspec.verify.torch_function import _torch_fn_name


def _op(fn, arity: int) -> str:
    gs.verify_torch_function(fn, arity=arity, max_examples=1, seed=0)  # registers it as an op
    return _torch_fn_name(fn)


def _causes(op: str, leaves: dict, seed, oracles=("reference", "finite-differences")) -> list:
    case = gs.Case.build({k: np.asarray(v, dtype=np.float64) for k, v in leaves.items()},
                         [("y", op, list(leaves), {})], ["y"], [np.asarray(seed, dtype=np.float64)])
    v = gs.check(case, oracles=list(oracles))
    assert v.discrepancies, f"{op}: the bug was not found\n{v}"
    return [d.cause for d in v.discrepancies]


# ---------------------------------------------------------------------------------------------------------------
# F3: the NaN of a branch torch.where does not select
# ---------------------------------------------------------------------------------------------------------------


def xlogx_where(x):
    return torch.where(x > 0, x * torch.log(x), torch.zeros_like(x))


def xlogx_where_other(x):  # the non-finite branch as where's third argument, a Python number as its second
    return torch.where(x <= 0, 0.0, x * torch.log(x))


def xlogx_method(x):  # Tensor.where
    return (x * torch.log(x)).where(x > 0, torch.zeros_like(x))


def xlogx_masked_fill(x):
    return (x * torch.log(x)).masked_fill(x <= 0, 0.0)


def xlogx_nan_to_num(x):  # the NaN masked in the value by nan_to_num (brief s15 #4): its backward meets it all the same
    return torch.nan_to_num(x * torch.log(x))


def xlogx_nan_to_num_method(x):
    return (x * torch.log(x)).nan_to_num(nan=0.0)


def xlogx_safe(x):  # the double-where: right everywhere
    safe = torch.where(x > 0, x, torch.ones_like(x))
    return torch.where(x > 0, safe * torch.log(safe), torch.zeros_like(x))


class XlogxFn(torch.autograd.Function):
    """The same where in a custom Function's forward (run under no_grad: no trap there), and a backward that
    computes log(x) + 1 unguarded: its own NaN at x < 0, which no where explains."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.where(x > 0, x * torch.log(x), torch.zeros_like(x))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (torch.log(x) + 1)


# id -> (fn, x): each has a NaN gradient at the negative elements only
WHERE_TRAPS = {
    "where-input-branch": (xlogx_where, [-1.0]),
    "where-input-branch-two-elements": (xlogx_where, [-1.0, 2.0]),
    "where-other-branch-scalar-input": (xlogx_where_other, [-0.5, 1.5]),
    "tensor-where-method": (xlogx_method, [-2.0, 0.7]),
    "masked-fill": (xlogx_masked_fill, [-1.0, 3.0]),
    "nan-to-num": (xlogx_nan_to_num, [-1.0, 3.0]),
    "nan-to-num-method": (xlogx_nan_to_num_method, [-0.5, 2.0]),
}


@pytest.mark.parametrize("case_id", list(WHERE_TRAPS), ids=list(WHERE_TRAPS))
def test_the_unselected_branch_of_a_where_is_named_with_the_double_where_fix(case_id):
    fn, x = WHERE_TRAPS[case_id]
    op = _op(fn, 1)
    for c in _causes(op, {"x0": x}, np.ones(len(x))):
        assert (c.id, c.node, c.pattern, c.subpattern) == ("wrong-vjp", "y", "other", "unselected-branch"), c
        assert "division" not in c.summary and "0/0" not in c.summary, c.summary
        assert "does not select" in c.summary and "nan" in c.summary, c.summary
        name = "masked_fill" if "masked" in case_id else "nan_to_num" if "nan-to-num" in case_id else "where"
        assert name in c.summary and ".py:" in c.summary, c.summary  # the call and where it is in the user's code
        assert "double-where" in c.fix and "safe" in c.fix, c.fix


def test_the_double_where_is_right():
    op = _op(xlogx_safe, 1)
    case = gs.Case.build({"x0": np.array([-1.0, 2.0])}, [("y", op, ["x0"], {})], ["y"], [np.ones(2)])
    v = gs.check(case, oracles=["reference", "finite-differences"])
    assert not v.discrepancies, str(v)


def test_a_backward_s_own_nan_is_not_blamed_on_the_where_in_its_forward():
    op = _op(XlogxFn.apply, 1)
    for c in _causes(op, {"x0": [-1.0, 2.0]}, np.ones(2)):
        assert c.id == "wrong-vjp" and c.subpattern != "unselected-branch", c
        assert "does not select" not in c.summary and "double-where" not in c.fix, c


class MaskedRatioFn(torch.autograd.Function):
    """x -> x * y / y (x where y != 0): its backward computes g * y / y, NaN where y = 0, and masks it with
    nan_to_num: a finite gradient, 0 where it should be g (brief s15 #4: masked, finite but wrong)."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(y)
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return torch.nan_to_num(g * y / y), None


def test_a_nan_masked_by_nan_to_num_in_a_backward_is_named_beside_the_finite_wrong_value():
    op = _op(MaskedRatioFn.apply, 2)
    for c in _causes(op, {"x0": [0.5, 1.5], "x1": [0.0, 2.0]}, np.ones(2)):
        assert c.id == "wrong-vjp", c
        assert "nan_to_num" in c.summary and "masks" in c.summary and ".py:" in c.summary, c.summary


# ---------------------------------------------------------------------------------------------------------------
# F4: a mean over the broadcast axis where the sum belongs, on several inputs at once
# ---------------------------------------------------------------------------------------------------------------


def _reduce(t, shape, how):
    while t.dim() > len(shape):
        t = how(t, 0, False)
    for i, s in enumerate(shape):
        if s == 1 and t.shape[i] != 1:
            t = how(t, i, True)
    return t


def _mean(t, dim, keep):
    return t.mean(dim, keepdim=keep)


def _sum(t, dim, keep):
    return t.sum(dim, keepdim=keep)


class GammaLogPdf(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, a, b):
        ctx.save_for_backward(x, a, b)
        return a * torch.log(b) + (a - 1) * torch.log(x) - b * x - torch.lgamma(a)

    @staticmethod
    def grads(ctx, g):
        x, a, b = ctx.saved_tensors
        return (x, a, b), (g * ((a - 1) / x - b), g * (torch.log(b) + torch.log(x) - torch.digamma(a)), g * (a / b - x))


class GammaMean(GammaLogPdf):  # the user's bug: every broadcast input's gradient averaged
    @staticmethod
    def backward(ctx, g):
        ins, gs_ = GammaLogPdf.grads(ctx, g)
        return tuple(_reduce(gi, i.shape, _mean) for i, gi in zip(ins, gs_))


class GammaHalf(GammaLogPdf):  # a true factor 1/2 on a and b, summed correctly
    @staticmethod
    def backward(ctx, g):
        ins, gs_ = GammaLogPdf.grads(ctx, g)
        out = [_reduce(gi, i.shape, _sum) for i, gi in zip(ins, gs_)]
        return out[0], 0.5 * out[1], 0.5 * out[2]


_POS = {"x0": [0.62, 1.37], "x1": [1.31], "x2": [0.88]}
_POS3 = {"x0": [0.62, 1.37, 0.45], "x1": [1.31], "x2": [0.88]}
_POS2D = {"x0": [[0.62, 1.37, 0.45], [1.1, 0.3, 0.9]], "x1": [[1.31, 0.8, 1.7]], "x2": [[0.88]]}

# id -> (Function, leaves, words every wrong input's part must hold)
BROADCAST_MEANS = {
    "two-inputs-1-to-2": (GammaMean, _POS, ["x1 (1,)", "x2 (1,)", "1/2", "g.sum(0, keepdim=True)"]),
    "two-inputs-1-to-3": (GammaMean, _POS3, ["x1 (1,)", "x2 (1,)", "1/3", "g.sum(0, keepdim=True)"]),
    "two-inputs-different-axes-2d": (GammaMean, _POS2D, ["x1 (1, 3)", "x2 (1, 1)", "axis 0 (size 2)", "1/2",
                                                         "1/6"]),
}


@pytest.mark.parametrize("case_id", list(BROADCAST_MEANS), ids=list(BROADCAST_MEANS))
def test_a_mean_over_the_broadcast_axis_on_several_inputs_is_broadcast_reduction(case_id):
    fn, leaves, words = BROADCAST_MEANS[case_id]
    op = _op(fn.apply, 3)
    seed = np.linspace(0.7, -1.3, np.asarray(leaves["x0"]).size).reshape(np.shape(leaves["x0"]))
    for c in _causes(op, leaves, seed):
        assert (c.id, c.pattern) == ("wrong-vjp", "broadcast-reduction"), c
        assert "remove that factor" not in c.summary, c.summary
        for w in words:
            assert w in c.summary, (w, c.summary)
        assert "x0" in c.summary and "right" in c.summary, c.summary  # x0 (not broadcast) is right, and said so


def test_a_true_factor_on_broadcast_inputs_of_another_size_stays_a_factor():
    # 1/2 on inputs broadcast 3 times: no mean over the copies gives 1/2
    op = _op(GammaHalf.apply, 3)
    for c in _causes(op, _POS3, np.array([0.7, -0.3, -1.3])):
        assert (c.pattern, c.factor) == ("scale", 0.5), c


# ---------------------------------------------------------------------------------------------------------------
# F6: a ratio that varies with the input, on one input of three: that input is named
# ---------------------------------------------------------------------------------------------------------------


class BetaBadDigamma(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, a, b):
        ctx.save_for_backward(x, a, b)
        return (a - 1) * torch.log(x) + (b - 1) * torch.log1p(-x) - (torch.lgamma(a) + torch.lgamma(b)
                                                                       - torch.lgamma(a + b))

    @staticmethod
    def backward(ctx, g):
        x, a, b = ctx.saved_tensors
        dab = torch.digamma(a + b)
        return (g * ((a - 1) / x - (b - 1) / (1 - x)), g * (torch.log(x) - torch.digamma(a) - dab),  # sign of dab
                g * (torch.log1p(-x) - torch.digamma(b) + dab))


def test_a_varying_ratio_on_one_input_names_that_input():
    op = _op(BetaBadDigamma.apply, 3)
    leaves = {"x0": [0.3757657312], "x1": [1.120846401], "x2": [0.7485137609]}
    for c in _causes(op, leaves, np.ones(1)):
        assert c.pattern == "other" and "varies with the input" in c.summary, c
        assert "only input x1's gradient is wrong" in c.summary, c.summary
        assert "x0, x2 are right" in c.summary, c.summary


def test_a_where_of_table_ops_in_a_graph_names_the_unselected_branch():
    # the same trap built from gradspec's own ops: every node's rule is right alone (the reference, as torch, gives
    # NaN there; J^T·g of the graph is finite); before, "comes from how the graph combines them ... or an oracle"
    case = gs.Case.build({"x": np.array([-1.0, 2.0]), "c": np.array([False, True])},
                         [("l", "log", ["x"], {}), ("m", "mul", ["x", "l"], {}), ("w", "where", ["c", "m", "x"], {}),
                          ("s", "sum", ["w"], {})], ["s"])
    v = gs.check(case, oracles=["reference", "jacobian"])
    assert v.discrepancies, str(v)
    for d in v.discrepancies:
        c = d.cause
        assert (c.id, c.node, c.pattern, c.subpattern) == ("not-localised", "w", "other", "unselected-branch"), c
        assert "does not select its second input m" in c.summary and "nan" in c.summary, c.summary
        assert "double-where" in c.fix, c.fix
