"""Second-order gradients of a torch Function are checked (tryout 2, finding 5: a wrong double backward passed
6 of 6 runs with no note): autograd through fn's backward vs central differences of its first-order backward."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gradspec as gs


class _CubeBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, g, x):
        ctx.save_for_backward(g, x)
        return 3 * x ** 2 * g

    @staticmethod
    def backward(ctx, gg):
        g, x = ctx.saved_tensors
        return 3 * x ** 2 * gg, 6 * x * g * gg


class _CubeBackwardDropsTerm(_CubeBackward):
    @staticmethod
    def backward(ctx, gg):
        g, x = ctx.saved_tensors
        return 3 * x ** 2 * gg, None  # the product-rule term for x forgotten


class _Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _CubeBackward.apply(g, x)


class _CubeBug(_Cube):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _CubeBackwardDropsTerm.apply(g, x)


class _CubeTorchOps(_Cube):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * g  # differentiable by autograd itself: right to second order


class _CubeNumpy(_Cube):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return torch.as_tensor(3 * x.detach().numpy() ** 2 * g.detach().numpy())  # not differentiable


class _SinSavesIntermediate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(torch.cos(x))  # computed inside forward: a constant to autograd in double backward
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        (c,) = ctx.saved_tensors
        return c * g  # right to first order


class _CubeBugOnce(_Cube):
    """tryout3's FixedPointOnce: @once_differentiable, whose backward turns grad back on inside (so with a
    constant upstream gradient its outputs carry a graph, wrong to second order); torch refuses to
    differentiate it twice wherever its upstream gradient requires grad: an expected refusal, not a finding."""

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            return _CubeBackwardDropsTerm.apply(g, x)


FUNCTIONS = {
    # id: (fn, second-order finding expected, words a note must hold or None)
    "double-backward-right": (_Cube.apply, False, "second-order gradients (double backward, create_graph=True) are "
                                                  "checked"),
    "double-backward-drops-term": (_CubeBug.apply, True, None),
    "backward-in-torch-ops": (_CubeTorchOps.apply, False, "are checked"),
    "saves-an-intermediate": (_SinSavesIntermediate.apply, False, "it saves 1 tensor(s) computed inside forward"),
    "backward-through-numpy": (_CubeNumpy.apply, False, "second-order gradients (double backward) not checked: "
                                                        "fn's backward is not differentiable"),
    "once-differentiable": (_CubeBugOnce.apply, False, "marked @once_differentiable: torch refuses"),
}


@pytest.mark.parametrize("fn, wrong, note", FUNCTIONS.values(), ids=list(FUNCTIONS))
def test_second_order_gradients_of_a_torch_function(fn, wrong, note):
    r = gs.verify_torch_function(fn, max_examples=10, seed=2)
    found = [d for d in r.discrepancies if d.cause is not None and d.cause.id == "wrong-double-backward"]
    if not wrong:
        assert r.ok, str(r)
        assert any(note in n for n in r.notes), r.notes
        return
    assert found and not r.ok, str(r)
    assert "double backward of CubeBug" in found[0].cause.summary, found[0].cause.summary


class _ExpTwice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.exp(x)
        ctx.save_for_backward(y)  # its output: autograd differentiates it through this very (wrong) backward
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return 2 * y * g  # wrong to first order (a factor 2)


def test_a_wrong_first_order_backward_is_not_also_called_a_wrong_double_backward():
    # A new user's LSEBug / CubicBug got a second finding 'the double backward ... is wrong' beside the real one.
    r = gs.verify_torch_function(_ExpTwice.apply, max_examples=30, seed=0)
    ids = [d.cause.id for d in r.discrepancies if d.cause is not None]
    assert "wrong-vjp" in ids and "wrong-double-backward" not in ids, ids


def _double_findings(r) -> list:
    return [d for d in r.discrepancies if d.cause is not None and d.cause.id == "wrong-double-backward"]


def test_the_double_backward_check_can_be_skipped_and_the_run_says_so():
    # tryout3 #9: first-order-correct code (an implicit-function gradient) had no way to skip the second order.
    r = gs.verify_torch_function(_CubeBug.apply, max_examples=10, seed=2, double_backward=False)
    assert r.ok and not _double_findings(r), str(r)
    assert any("not checked (double_backward=False)" in n for n in r.notes), r.notes
    assert "double_backward=False" in r.replay


def test_a_second_order_finding_names_the_inputs_it_perturbs_and_replay_honours_the_opt_out():
    from gradspec.case import Case
    from gradspec.verify.torch_function import replay_checks

    r = gs.verify_torch_function(_CubeBug.apply, max_examples=10, seed=2)
    (d,) = _double_findings(r)
    node = next(n for n in d.case.nodes if n.op.endswith("CubeBug"))
    # the case's first-order flags say nothing of the second-order check: the case says what it perturbs
    assert d.case.meta["double_backward_perturbs"] == list(node.inputs), d.case.meta
    assert "perturbing " + ", ".join(node.inputs) in d.cause.evidence, d.cause.evidence
    again = Case.from_json(d.case.to_json())
    assert [f.cause.id for f in replay_checks(again)[0]] == ["wrong-double-backward"]
    again.meta["double_backward"] = False  # what a double_backward=False run records in every case
    assert replay_checks(again)[0] == []


def test_an_opted_out_run_records_it_in_its_cases():
    r = gs.verify_torch_function(_ExpTwice.apply, max_examples=30, seed=0, double_backward=False)
    assert r.discrepancies and all(d.case.meta.get("double_backward") is False for d in r.discrepancies if d.case)


# Inputs with 0 elements at fn's node (tryout9 #7): the second-order check's own max() over the empty tensors raised
# "max(): Expected reduction dim ...", reported as "autograd through fn's backward raised RuntimeError" -- gradspec's
# bug blamed on the user, and the second-order check of the run given up.
EMPTY_INPUTS = {
    "one-empty-input": [torch.zeros(0, dtype=torch.float64)],
    "empty-batch": [torch.zeros((0, 3), dtype=torch.float64)],
}


@pytest.mark.parametrize("xs", EMPTY_INPUTS.values(), ids=list(EMPTY_INPUTS))
def test_the_second_order_check_of_empty_inputs_does_not_raise(xs):
    from gradspec.verify.torch_double import directional_second_order

    got = directional_second_order(_Cube.apply, xs, {})
    assert got is None or got[0] in (None, 0.0), got  # nothing to differentiate: no second-order term


def test_a_case_with_empty_inputs_leaves_the_double_backward_check_to_the_others():
    from gradspec.result import Result
    from gradspec.spec import registry
    from gradspec.verify.torch_double import CLEAN_CHECKS, DoubleBackwardCheck
    from gradspec.verify.torch_function import _torch_fn_name

    assert gs.verify_torch_function(_Cube.apply, max_examples=3, seed=0).ok  # registers the Function as an op
    name = _torch_fn_name(_Cube.apply)
    result = Result(target="t", what="torch function", seed=0)
    check = DoubleBackwardCheck(registry.lookup(name), "t", "", result)
    case = gs.Case.build({"x": np.zeros((0, 2))}, [("y", name, ["x"], {})], ["y"], [np.ones((0, 2))])
    assert check(case) == [] and check.left == CLEAN_CHECKS, result.notes  # skipped, not a clean check used up
    assert not any("raised" in n for n in result.notes), result.notes


def test_gradspecs_own_error_in_the_second_order_check_is_not_blamed_on_fn(monkeypatch):
    from gradspec.result import Result
    from gradspec.spec import registry
    from gradspec.verify import torch_double
    from gradspec.verify.torch_function import _torch_fn_name

    assert gs.verify_torch_function(_Cube.apply, max_examples=3, seed=0).ok
    name = _torch_fn_name(_Cube.apply)
    result = Result(target="t", what="torch function", seed=0)
    check = torch_double.DoubleBackwardCheck(registry.lookup(name), "t", "", result)

    def broken(*a, **k):
        raise ZeroDivisionError("a slip in gradspec's own arithmetic")

    monkeypatch.setattr(torch_double, "_fixed", broken)
    case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", name, ["x"], {})], ["y"], [np.ones(2)])
    assert check(case) == []
    note = next(n for n in result.notes if "ZeroDivisionError" in n)
    assert "gradspec" in note and "not your code" in note and "fn's backward raised" not in note, note


class _HalfSquareWhereInBackward(torch.autograd.Function):
    """0.5 (x - 1)^2 for x > 1, else 0; its backward is right to first order, but selects with torch.where from a
    branch that is NaN where it is not taken (exp(log(x - 1)) at x < 1): autograd through that backward sends the
    branch a zero gradient, and log's backward makes it 0 · nan = NaN there (the where trap, tryout9 F3, inside a
    backward).  (At x = 1 exactly the branch is finite, exp(-inf) = 0, and its backward 0 · inf: NaN unnamed.)"""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.where(x > 1, 0.5 * (x - 1) ** 2, torch.zeros_like(x))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.where(x > 1, torch.exp(torch.log(x - 1)), torch.zeros_like(x))


def test_a_nan_double_backward_from_a_where_in_the_backward_is_found_and_named():
    # brief s15 fixtrust #4: the second-order sum was NaN, its error bound too (it adds |autograd|), and the check
    # dropped the case as "not finite": the run agreed and said second-order gradients were checked
    from gradspec.verify.torch_double import directional_second_order

    x = [torch.tensor([-1.0, 2.0], dtype=torch.float64)]
    auto, fd, err = directional_second_order(_HalfSquareWhereInBackward.apply, x, {})
    assert np.isnan(auto) and np.isfinite(fd) and np.isfinite(err), (auto, fd, err)
    r = gs.verify_torch_function(_HalfSquareWhereInBackward.apply, arity=1, max_examples=30, seed=1)
    found = _double_findings(r)
    assert found and not r.ok, str(r)
    summary = found[0].cause.summary
    assert "torch.where" in summary and "nan" in summary and "test_torch_double.py" in summary, summary
    assert "double-where" in found[0].cause.fix, found[0].cause.fix
