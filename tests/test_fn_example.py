"""``verify_torch_function(fn, example_inputs=...)`` as a user meets it: sizes above the example's are
drawn (a path taken only for larger sizes is reached), findings are shrunk below the example's shape,
a correct Function defined on part of the real line (log) is checked, not rejected, and a rejected
example says why."""

from __future__ import annotations

import pytest
import torch

import gradspec as gs
from gradspec.ops.user import UserOpError

X = torch.linspace(-1.3, 1.7, 15, dtype=torch.float64).reshape(3, 5)


class PopVarBigN(torch.autograd.Function):
    """Right except when the reduced dim has >= 7 elements (a 'fast path' with a bug)."""

    @staticmethod
    def forward(ctx, x):
        m = x.mean(-1, keepdim=True)
        ctx.save_for_backward(x, m)
        return ((x - m) ** 2).mean(-1)

    @staticmethod
    def backward(ctx, g):
        x, m = ctx.saved_tensors
        n = x.shape[-1]
        return g.unsqueeze(-1) * 2 * (x - m) / (n - 1 if n >= 7 else n)


class PopVarScaled(PopVarBigN):
    @staticmethod
    def backward(ctx, g):
        x, m = ctx.saved_tensors
        return g.unsqueeze(-1) * 3 * (x - m) / x.shape[-1]  # 3 instead of 2 at every size


class Log(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.log()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g / x


class LogWrong(Log):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g / (x * x)


class Normalize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x / x.norm()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        r = x.norm()
        y = x / r
        return (g - y * (g * y).sum()) / r


def test_an_example_of_zeros_still_gives_the_shapes():
    # x / |x| is NaN at the example's own values (all zeros) but fine elsewhere: the shapes are what counts
    r = gs.verify_torch_function(Normalize.apply, example_inputs=(torch.zeros(3, 5, dtype=torch.float64),),
                                 max_examples=10, seed=0)
    assert r.status == "agree" and r.cases_run > 0, r.summary()


def test_sizes_above_the_example_are_drawn():
    # The example's last dim is 5; the bug needs 7. Before, every size was at most the example's: agree.
    r = gs.verify_torch_function(PopVarBigN.apply, example_inputs=(X,), max_examples=60, seed=0)
    assert r.status == "disagree", r.summary()
    assert all(d.case.leaves[0].value.shape[-1] >= 7 for d in r.discrepancies if d.case is not None)


def test_a_finding_is_shrunk_below_the_example_shape():
    r = gs.verify_torch_function(PopVarScaled.apply, example_inputs=(X,), max_examples=30, seed=0)
    assert r.status == "disagree", r.summary()
    # tryout4 #14: the whole-run replay is Python (it was "example_inputs=<your example>"), naming what to bind
    compile(r.replay, "<replay>", "exec")
    assert r.replay.startswith("gs.verify_torch_function(PopVarScaled.apply")
    assert "example_inputs=example_inputs" in r.replay and "# example_inputs: bind it to the object you" in r.replay
    assert "replay the whole run:\n  gs.verify_torch_function(" in r.summary()
    sizes = [d.case.leaves[0].value.size for d in r.discrepancies if d.case is not None]
    assert sizes and min(sizes) < X.numel(), sizes  # was 15: (3, 5) kept


@pytest.mark.parametrize("cls,status", [(Log, "agree"), (LogWrong, "disagree")], ids=["correct", "wrong-backward"])
def test_a_function_defined_on_positive_values_is_checked_from_a_positive_example(cls, status):
    r = gs.verify_torch_function(cls.apply, example_inputs=(X.abs() + 0.5,), max_examples=20, seed=0)
    assert r.status == status and r.cases_run > 0, r.summary()
    assert any("gs.domains.positive()" in n for n in r.notes), r.notes  # the domain it drew from is said


def test_a_rejected_example_names_the_reason_and_the_fix():
    with pytest.raises(UserOpError) as e:
        gs.verify_torch_function(Log.apply, example_inputs=(X,), max_examples=5, seed=0)
    msg = str(e.value)
    assert "returned nan at output[0, 0]" in msg and "domain=gs.domains.positive()" in msg, msg
