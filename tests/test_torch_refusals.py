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
