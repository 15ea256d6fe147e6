"""Intended surrogate gradients (tryout6 #7, #5): ``surrogate=`` declares the gradient a backward is meant to
compute (a straight-through estimator, gradient reversal, a stop-gradient mix), so the correct trick agrees and
its buggy twin is still found; ``nn.Embedding(padding_idx=)`` is recognised; and where nothing is declared, the
cause names what leaves the derivative (a flat forward, detach, a hook, no_grad) instead of "torch is wrong"."""

from __future__ import annotations

import pytest
import torch

import gradspec as gs
from tests import _tryout6_surrogate as t6

X = (torch.linspace(-2.5, 2.5, 12, dtype=torch.float64).reshape(3, 4),)  # |x| > 1 on a third of the elements


def _clip(x):
    return x.clamp(-1, 1)


def _reversed(x):
    return -t6.LAMBDA * x


def _identity(x):
    return x


def _half_of_hooked(x):
    return torch.sin(x)  # 2 sin(x) with its gradient halved: the gradient of sin(x)


# (id, fn, surrogate, status, pattern of the finding's cause or None)
DECLARED = [
    ("ste", t6.STE.apply, _clip, "agree", None),
    ("ste-forgets-clip", t6.STENoClip.apply, _clip, "disagree", None),
    ("reversal", t6.GradReverse.apply, _reversed, "agree", None),
    ("reversal-wrong-sign", t6.GradReverseWrongSign.apply, _reversed, "disagree", "sign"),
    ("stop-gradient-mix", t6.stop_grad_mix, _identity, "agree", None),
    ("hook-declared", t6.hook_scaled, _half_of_hooked, "agree", None),
]


@pytest.mark.parametrize("fn,surrogate,status,pattern", [c[1:] for c in DECLARED], ids=[c[0] for c in DECLARED])
def test_declared_surrogate(fn, surrogate, status, pattern):
    r = gs.verify_torch_function(fn, example_inputs=X, surrogate=surrogate, max_examples=12, seed=1)
    assert r.status == status, (r.status, [d.cause.summary for d in r.discrepancies[:1]])
    assert any("surrogate" in n for n in r.notes)
    if status == "disagree":
        c = r.discrepancies[0].cause
        assert c.id == "wrong-vjp", c
        if pattern:
            assert c.pattern == pattern, c.summary
        assert "surrogate" in c.summary + c.evidence  # J^T·g is the declared one, and the words say so


def test_surrogate_refused_when_not_callable():
    with pytest.raises(TypeError, match="surrogate"):
        gs.verify_torch_function(t6.STE.apply, example_inputs=X, surrogate=3, max_examples=2, seed=1)


def test_surrogate_of_another_shape_is_a_usage_error():
    with pytest.raises(gs.ops.user.UserOpError, match="surrogate"):
        gs.verify_torch_function(t6.STE.apply, example_inputs=X, surrogate=lambda x: x.sum(), max_examples=2, seed=1)


# (id, the module's quantiser, status): a module's surrogate is a module with the same parameters
MODULES = [("ste", t6.STE.apply, "agree"), ("ste-forgets-clip", t6.STENoClip.apply, "disagree")]


@pytest.mark.parametrize("ste,status", [c[1:] for c in MODULES], ids=[c[0] for c in MODULES])
def test_module_surrogate(ste, status):
    torch.manual_seed(0)
    r = gs.verify_module(t6.QuantNet(ste), example_inputs=(2 * X[0][:, :3],), surrogate=t6.QuantNetSurrogate(),
                         max_examples=6, seed=1, dtypes=("float64",))
    assert r.status == status, [d.cause.summary for d in r.discrepancies[:1]]


def test_module_surrogate_without_the_parameters_is_a_usage_error():
    with pytest.raises(gs.ops.user.UserOpError, match="fc.weight"):
        gs.verify_module(t6.QuantNet(), example_inputs=(X[0][:, :3],), surrogate=torch.nn.Linear(3, 4),
                         max_examples=2, seed=1)


# Nothing declared: the cause names what leaves the derivative (tryout6 #7), never "torch's autograd is wrong"
# for a hook / no_grad / detach, nor a "factor that changes with g" for a flat forward.
UNDECLARED = [
    ("ste-flat-forward", t6.STE.apply, ("J^T·g is 0", "surrogate="), ("factor that changes",)),
    ("hook", t6.hook_scaled, ("register_hook",), ("autograd computes through hook_scaled is wrong",)),
    ("no-grad", t6.no_grad_inside, ("no_grad",), ("autograd computes through no_grad_inside is wrong",)),
    ("detach", t6.stop_grad_mix, ("detach",), ("autograd computes through stop_grad_mix is wrong",)),
]


@pytest.mark.parametrize("fn,said,unsaid", [c[1:] for c in UNDECLARED], ids=[c[0] for c in UNDECLARED])
def test_undeclared_cause_names_it(fn, said, unsaid):
    r = gs.verify_torch_function(fn, example_inputs=X, max_examples=10, seed=1, dtypes=("float64",))
    assert r.status == "disagree"
    summary = r.discrepancies[0].cause.summary
    for s in said:
        assert s in summary, summary
    for s in unsaid:
        assert s not in summary, summary
    assert any("surrogate=" in n for n in r.notes)  # the run says how to declare one


def test_embedding_padding_row_recognised():
    torch.manual_seed(0)
    r = gs.verify_module(t6.Emb(0), example_inputs=(t6.IDX,), max_examples=6, seed=1, dtypes=("float64",))
    assert r.status == "agree", [d.cause.summary for d in r.discrepancies[:1]]
    assert any("padding_idx" in n for n in r.notes)


def test_embedding_padding_row_tied_to_a_projection():
    # only the lookup's gradient is left out of the padding row; the tied projection's reaches it
    torch.manual_seed(0)
    r = gs.verify_module(t6.TiedEmb(), example_inputs=(t6.IDX_REPEATED,), max_examples=6, seed=1, dtypes=("float64",))
    assert r.status == "agree", [d.cause.summary for d in r.discrepancies[:1]]


def test_embedding_padding_row_recognised_real_bug_still_found():
    torch.manual_seed(0)
    r = gs.verify_module(t6.EmbHalf(), example_inputs=(t6.IDX,), max_examples=6, seed=1, dtypes=("float64",))
    assert r.status == "disagree"
    assert r.discrepancies[0].cause.pattern == "scale", r.discrepancies[0].cause.summary


def test_a_dropped_row_is_a_dropped_row_not_a_partial_sum():
    w = torch.randn(10, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    r = gs.verify_torch_function(t6.EmbedDropRow0.apply, example_inputs=(w, t6.IDX_REPEATED), max_examples=6, seed=1,
                                 dtypes=("float64",))
    assert r.status == "disagree"
    summary = r.discrepancies[0].cause.summary
    assert "only some of them are summed" not in summary, summary
    assert "is 0 on" in summary, summary


def _pad_tied(w, idx):
    return torch.nn.functional.embedding(idx, w, padding_idx=0) @ w.T


def _pad_last(w, idx):
    return torch.tanh(torch.nn.functional.embedding(idx, w, padding_idx=-1))


def _pad_then_half(w, idx):
    return t6.Half.apply(torch.nn.functional.embedding(idx, w, padding_idx=0))


# F.embedding(..., padding_idx=) in a PLAIN function (session 12): recognised as nn.Embedding's is in a module.
# (fn, indices, status, the cause's pattern where it disagrees); before: every row here disagreed (a dropped row)
PLAIN_PADDING = {
    "pad-0": (t6.embedding_pad0, t6.IDX_REPEATED, "agree", None),
    "pad-minus-1": (_pad_last, torch.tensor([[9, 3, 9, 1]]), "agree", None),
    "tied-projection": (_pad_tied, t6.IDX_REPEATED, "agree", None),  # the projection's gradient reaches row 0
    "bug-after-padded-lookup": (_pad_then_half, t6.IDX, "disagree", "scale"),
}


@pytest.mark.parametrize("fn, idx, status, pattern", PLAIN_PADDING.values(), ids=PLAIN_PADDING.keys())
def test_padding_in_a_plain_function_is_recognised(fn, idx, status, pattern):
    w = torch.randn(10, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    r = gs.verify_torch_function(fn, example_inputs=(w, idx), max_examples=6, seed=1, dtypes=("float64",))
    assert r.status == status, [d.cause.summary for d in r.discrepancies[:1]]
    assert any("padding_idx=" in n and "F.embedding" in n for n in r.notes), r.notes
    if pattern is not None:
        assert r.discrepancies[0].cause.pattern == pattern, r.discrepancies[0].cause.summary


def test_a_backward_not_linear_in_g_gets_no_surrogate_hint():
    r = gs.verify_torch_function(t6.ClipGrad.apply, example_inputs=X, max_examples=6, seed=1, dtypes=("float64",))
    assert r.status == "disagree"
    assert "not linear in the upstream gradient" in r.discrepancies[0].cause.summary
    assert not any("surrogate=" in n for n in r.notes)  # no function has that as its derivative
