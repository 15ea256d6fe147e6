"""A check must not change the user's model: after a verify call every tensor the user owns has the same ``.grad``
(None stays None; a gradient the user had is the same object with the same values) and the same values and
version as before.  Before session 12 the torch oracle's backward (``torch.autograd.backward`` without ``inputs=``)
and the backward-twice check added their gradients into every leaf fn's graph reached: the parameters of an
``nn.Linear`` fn holds in a closure, of a ``gs.Op``'s torch twin, and, through a reentrant checkpoint's
``.backward()``, of the checkpointed block."""

from __future__ import annotations

import warnings

import pytest

import gradspec as gs


def _linear(seed: int = 0):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Linear(3, 3).double()


def _x():
    import torch

    return torch.linspace(-1.0, 1.2, 6, dtype=torch.float64).reshape(2, 3)


def _closure(lin):
    import torch

    return lambda x: torch.tanh(lin(x))


def _checkpointed(lin):
    import torch
    import torch.utils.checkpoint as cp

    def fn(x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return cp.checkpoint(lambda t: torch.tanh(lin(t)), x, use_reentrant=True) * 2

    return fn


def _verify_fn(make):
    def run(lin):
        return gs.verify_torch_function(make(lin), example_inputs=(_x(),), max_examples=4, seed=0)
    return run


def _verify_op(lin):
    # a user op whose torch twin holds the layer (forward and vjp in numpy, from the same weights)
    w, b = lin.weight.detach().numpy().copy(), lin.bias.detach().numpy().copy()
    op = gs.Op("sidefx_affine", forward=lambda x: x @ w.T + b, vjp=lambda g, x, out: (g @ w,),
               torch=lambda x: lin(x), signature="(n)->(n)", arity=1)
    return gs.verify_op(op, max_examples=4, seed=0)


def _net(lin):
    import torch

    return torch.nn.Sequential(lin, torch.nn.BatchNorm1d(3), torch.nn.Tanh()).double()


def _verify_module(net):
    import torch

    return gs.verify_module(net, example_inputs=(torch.linspace(-1, 1, 15, dtype=torch.float64).reshape(5, 3),),
                            max_examples=3, seed=0)


# what the user owns (built around a seeded nn.Linear), the verify call that must leave it alone, and whether the
# layer holds a gradient of the user's own training step (kept as the same object with the same values)
RUNS = {
    "closure-linear": (lambda lin: lin, _verify_fn(_closure), False),
    "closure-linear-grad-set": (lambda lin: lin, _verify_fn(_closure), True),
    "reentrant-checkpoint-grad-set": (lambda lin: lin, _verify_fn(_checkpointed), True),
    "op-torch-twin-grad-set": (lambda lin: lin, _verify_op, True),
    "module-with-buffers": (_net, _verify_module, False),  # (BatchNorm's running statistics: updated in forward)
    "closure-module-with-buffers": (_net, _verify_fn(_closure), False),  # (fn's own calls update them: put back)
}


def _state(tensors: dict) -> dict:
    return {n: (t.grad, None if t.grad is None else t.grad.clone(), t._version, t.detach().clone())
            for n, t in tensors.items()}


def _changes(tensors: dict, before: dict) -> list:
    import torch

    out = []
    for n, t in tensors.items():
        g, gval, version, value = before[n]
        if t.grad is not g:
            out.append(f"{n}.grad was {'None' if g is None else 'a tensor'}, now another object")
        elif g is not None and not torch.equal(t.grad, gval):
            out.append(f"{n}.grad's values changed")
        if t._version != version or not torch.equal(t.detach(), value):
            out.append(f"{n} changed (version {version} -> {t._version})")
    return out


@pytest.mark.parametrize("owner, run, had_grad", RUNS.values(), ids=RUNS.keys())
def test_verify_leaves_the_users_tensors_alone(owner, run, had_grad):
    import torch

    lin = _linear()
    if had_grad:
        lin.weight.grad = torch.full_like(lin.weight, 0.25)
        lin.bias.grad = torch.full_like(lin.bias, -0.5)
    model = owner(lin)
    owned = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    before = _state(owned)
    r = run(model)
    assert r.cases_run > 0, r.summary()  # (the user's code ran: what could have touched the tensors)
    assert _changes(owned, before) == []


# 2. A Function whose forward writes into its input (scratch space, ctx.mark_dirty forgotten): the torch oracle's
# leaves shared the case's memory (torch.from_numpy), so the witnesses that ran after it saw other inputs and the
# write itself was never reported (SquareScratch below: 'agree' before session 12).

def _square_scratch():
    import torch

    class SquareScratch(torch.autograd.Function):
        """y = x * x, then x used as scratch space (x.add_(1)); the backward is right for the x it saved."""

        @staticmethod
        def forward(ctx, x):
            y = x * x
            ctx.save_for_backward(x.clone())
            x.add_(1.0)
            return y

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    return SquareScratch


def test_a_check_keeps_the_cases_values_when_fn_writes_into_its_input():
    import numpy as np

    from gradspec.verify.torch_call import CallLayout
    from gradspec.verify.torch_function import _torch_fn_name, _torch_wrap

    apply = _square_scratch().apply
    spec = _torch_wrap(apply, _torch_fn_name(apply), CallLayout.plain(1), None, None, None, {})
    x = np.array([0.5, -1.0])
    case = gs.Case.build({"x0": x.copy()}, [("v0", spec.name, ["x0"], {})], ["v0"], seeds=[np.array([1.0, 2.0])])
    v = gs.check(case, oracles=["torch-cpu", "reference", "finite-differences"])
    assert np.array_equal(case.leaves[0].value, x), case.leaves[0].value  # (before: [1.5, 0.0], written by torch)
    assert v.status == "agree", v  # one use of x: every witness on its own copy computes 2 x g at the same x


def test_a_forward_that_writes_into_its_input_is_reported():
    r = gs.verify_torch_function(_square_scratch().apply, arity=1, max_examples=20, seed=0)
    causes = [d.cause.id for d in r.discrepancies if d.cause is not None]
    noted = [n for n in r.notes if "in place without ctx.mark_dirty" in n and "SquareScratch" in n]
    assert "forward-mutates-input" in causes or noted, (r.status, causes, r.notes)
