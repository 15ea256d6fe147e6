"""tryout6 #2: torch refusing ``torch.autograd.grad`` (a reentrant checkpoint) is not a finding against the user's
code: the gradient is taken as training takes it (``.backward()``), and a wrong backward inside is still found.
The fixtures are in tests/_tryout6_torchio.py; what each must give comes from how it was written."""

from __future__ import annotations

import warnings

import pytest

import gradspec as gs
from tests import _tryout6_torchio as T


def _verify(fn):
    import torch

    x = torch.linspace(-1.5, 1.3, 12, dtype=torch.float64).reshape(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # (torch's checkpoint warns on calls without grad)
        return gs.verify_torch_function(fn, example_inputs=(x,), max_examples=15, seed=1)


RIGHT = {
    # id: (fn, does the result say its backward ran through .backward()?)
    "reentrant-checkpoint": (T.ckpt_reentrant, True),
    "reentrant-checkpoint-deep-in-graph": (T.ckpt_reentrant_inside, True),
    "refusal-raised-deep-in-graph": (T.refuses_grad_inside, True),
    "non-reentrant-checkpoint": (T.ckpt_nonreentrant, False),
}


@pytest.mark.parametrize("fn, noted", RIGHT.values(), ids=RIGHT.keys())
def test_right_code_behind_a_grad_refusal_agrees(fn, noted):
    r = _verify(fn)
    assert r.status == "agree", [d.cause.summary if d.cause else d.message for d in r.discrepancies]
    said = [str(n) for n in r.notes if ".backward() without inputs=" in str(n)]
    assert bool(said) == noted, r.notes


def test_a_wrong_backward_inside_a_reentrant_checkpoint_is_found_and_named():
    r = _verify(T.ckpt_reentrant_wrong)
    assert r.status == "disagree"
    c = r.discrepancies[0].cause
    assert c is not None and c.id == "wrong-vjp", c
    # torch's CheckpointFunction is not the user's code (Scale13 runs only when the backward recomputes the block,
    # so the graph before backward does not show it to be named)
    assert "CheckpointFunction" not in c.summary and "raised" not in c.summary, c.summary
    assert c.pattern == "scale" and c.factor == pytest.approx(1.3, rel=1e-6), c  # (exact 1.3 up to FD error)


def test_the_users_grad_is_left_as_it_was():
    import torch

    from gradspec._private.torch_grad import grad

    x = torch.tensor([0.3, -0.7], dtype=torch.float64, requires_grad=True)
    x.grad = torch.tensor([5.0, 6.0], dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        (g,) = grad([T.ckpt_reentrant(x)], [x], [torch.ones(2, dtype=torch.float64)])
    y = x.detach()
    want = (1 - torch.tanh(y) ** 2) * torch.sigmoid(y) + torch.tanh(y) * torch.sigmoid(y) * (1 - torch.sigmoid(y))
    assert torch.allclose(g, want, rtol=1e-12, atol=0)  # (float64, a few ops: agreement to rounding)
    assert x.grad.tolist() == [5.0, 6.0]


MODULES = {
    # id: (module, right?)
    "module-non-reentrant-checkpoint": (lambda: T.CheckpointedNet(False), True),
    "module-reentrant-checkpoint-wrong": (lambda: T.CheckpointedWrongNet(True), False),
    "module-non-reentrant-checkpoint-wrong": (lambda: T.CheckpointedWrongNet(False), False),
}


@pytest.mark.parametrize("make, right", MODULES.values(), ids=MODULES.keys())
def test_a_checkpointed_module_is_checked_with_its_own_parameters(make, right):
    # verify_module runs the module with gradspec's copies of its parameters; a checkpoint recomputes the block in
    # backward, after torch.func.functional_call has put the module's own parameters back: every gradient of a
    # right module was "wrong" (non-reentrant: "no simple pattern"; reentrant: "no gradient flows to lin.weight")
    import torch

    net = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        r = gs.verify_module(net, example_inputs=(torch.linspace(-1, 1, 8).reshape(2, 4),), max_examples=6, seed=1)
    if right:
        assert r.status == "agree", [d.cause.summary if d.cause else d.message for d in r.discrepancies]
        assert any("checkpoint" in str(n) for n in r.notes), r.notes
    else:
        assert r.status == "disagree"
        assert any(d.cause is not None and d.cause.pattern == "scale" and d.cause.factor == pytest.approx(1.3, rel=1e-6)
                   for d in r.discrepancies), [d.cause for d in r.discrepancies]
    assert net.lin.weight.grad is None  # (the user's module is not touched)


@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non-reentrant"])
def test_the_module_function_keeps_its_parameters_through_a_checkpoints_recomputation(reentrant):
    # (with every leaf requiring grad; where the module's input does not, torch's reentrant checkpoint itself gives
    # the parameters no gradient -- "None of the inputs have requires_grad=True" -- which is reported, rightly)
    import torch

    from gradspec.verify import torch_module

    fn, example, _ = torch_module.module_function(T.CheckpointedNet(reentrant), (torch.linspace(-1, 1, 8).reshape(2, 4),))
    # (parameters other than the module's own: the recomputation must use these, not the module's)
    w, b, x = ((t.detach() + (0.25 if i < 2 else 0.0)).requires_grad_(True) for i, t in enumerate(example))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        fn(w, b, x).sum().backward()
    h = torch.tanh(x.detach() @ w.detach().T + b.detach())
    d = 1 - h * h  # d tanh(z) / dz, z = x w^T + b
    for got, want in ((w.grad, d.T @ x.detach()), (b.grad, d.sum(0)), (x.grad, d @ w.detach())):
        assert got is not None and torch.allclose(got, want, rtol=1e-12, atol=1e-14), (got, want)  # (float64 rounding)
