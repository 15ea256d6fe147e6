"""Shapes as users have them (``verify_torch_function``): tied input shapes, tuple outputs, positional
non-tensor arguments, one-way broadcasting, ranks up to 6, and runs whose shape rules admit no case.

The planted Functions live in ``tests/_planted_user.py``: each buggy one is found, each correct twin
agrees (fixed seeds, small budgets).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gradspec as gs
from gradspec import search
from gradspec._private import shapes_learn as sl
from tests import _planted_user as U

BUDGET = 30


@pytest.fixture(autouse=True)
def _short_shrinking(monkeypatch):
    monkeypatch.setattr(search, "SHRINK_CALLS", 25)  # CI speed; still deterministic


@pytest.mark.parametrize("bug", list(U.USER_BUGS))
def test_planted_user_function_is_found(bug):
    buggy, _, kw, kinds = U.USER_BUGS[bug]
    r = gs.verify_torch_function(buggy, max_examples=BUDGET, seed=0, **kw)
    assert r.status == "disagree", f"{bug}: not found\n{r}"
    assert set(r.kinds) & set(kinds), f"{bug}: found {r.kinds}, expected one of {kinds}\n{r}"


@pytest.mark.parametrize("bug", list(U.USER_BUGS))
def test_correct_twin_agrees(bug):
    _, correct, kw, _ = U.USER_BUGS[bug]
    r = gs.verify_torch_function(correct, max_examples=BUDGET, seed=0, **kw)
    assert r.status == "agree", str(r)
    assert r.cases_run == BUDGET  # every case ran: the tie rules were satisfiable


def test_needs_input_grad_bug_is_a_gradient_lost_for_the_second_input():
    r = gs.verify_torch_function(U.MulAddFirstOnly.apply, example_inputs=U.MULADD_EXAMPLE, max_examples=BUDGET,
                                 seed=0)
    d = r.discrepancies[0]
    # the finding's case has a leaf that does not require grad: the situation of the bug
    assert any(not l.requires_grad for l in d.case.leaves), d.case.to_text()


def test_a_shape_rule_that_admits_nothing_is_inconclusive_with_the_reason():
    r = gs.verify_torch_function(U.AffineGate.apply, shape_fn=lambda *shapes: None, max_examples=5, seed=0)
    assert r.status == "inconclusive" and not r.ok and r.cases_run == 0
    assert any("shape_fn accepted none of the shapes" in n and "example_inputs" in n for n in r.notes), r.notes
    with pytest.raises(gs.testing.VerificationInconclusive, match="INCONCLUSIVE"):
        gs.assert_torch_function(U.AffineGate.apply, shape_fn=lambda *shapes: None, max_examples=5, seed=0)


def test_fn_rejecting_its_own_example_is_a_clear_error():
    with pytest.raises(gs.UserOpError, match="rejects its own example_inputs"):
        gs.verify_torch_function(U.AffineGate.apply, example_inputs=(torch.ones(3, 4), torch.ones(5),
                                                                     torch.ones(3), torch.ones(3)), max_examples=2)


class OneWayMul(torch.autograd.Function):
    """a * b where only b broadcasts (into a's shape); a never broadcasts into b."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b.expand_as(a)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        gb = g * a
        gb = gb.sum(tuple(range(gb.ndim - b.ndim))) if gb.ndim > b.ndim else gb
        return g * b.expand_as(a), gb


def test_one_way_broadcasting_is_detected_not_reported():
    """A gufunc signature promises two-way broadcasting; fn does it one way only: checked one way, with a note."""
    r = gs.verify_torch_function(OneWayMul.apply, signature="(n),(n)->(n)", max_examples=BUDGET, seed=0)
    assert r.status == "agree", str(r)
    assert any("one-way" in n for n in r.notes), r.notes
    r = gs.verify_torch_function(OneWayMul.apply, signature="(n),(n)->(n)", broadcast="one-way", max_examples=10,
                                 seed=0)
    assert r.status == "agree", str(r)


def _tied(example):
    """A probe for (A @ x + b): A (m, n), x (n,), b (m,), with a leading batch on A only."""
    def probe(shapes):
        a, x, b = shapes
        return len(a) >= 2 and x == (a[-1],) and b == (a[-2],)
    return probe


LEARN = [
    ("matvec", [(3, 4), (4,), (3,)], _tied, "x0: (d0, d1), x1: (d1,), x2: (d0,)"),
    ("square", [(3, 3)], lambda ex: lambda s: len(s[0]) == 2 and s[0][0] == s[0][1], "x0: (d0, d0)"),
    ("fixed xyz", [(5, 3)], lambda ex: lambda s: len(s[0]) == 2 and s[0][1] == 3, "x0: (d0, 3)"),
    ("broadcast 1", [(5, 3), (1, 3)], lambda ex: lambda s: s[0][1] == s[1][1] and s[1][0] in (1, s[0][0]),
     "x0: (d0, d1), x1: (d0|1, d1)"),
]


@pytest.mark.parametrize("name, example, make, expected", LEARN, ids=[c[0] for c in LEARN])
def test_learn_ties(name, example, make, expected):
    m = sl.learn(example, make(example), explore=False)
    assert m.describe() == expected


@pytest.mark.parametrize("name, example, make, expected", LEARN, ids=[c[0] for c in LEARN])
def test_drawn_shapes_keep_every_tie(name, example, make, expected):
    probe = make(example)
    m = sl.learn(example, probe, explore=False)

    @settings(max_examples=40, database=None, derandomize=True)
    @given(st.data())
    def check(data):
        shapes = m.draw(data.draw)
        assert probe(shapes), shapes

    check()


def test_signature_ranks_reach_six():
    m = sl.from_signature([("a", "b", "c", "d", "e")], broadcast="full")
    ranks = set()

    @settings(max_examples=80, database=None, derandomize=True)
    @given(st.data())
    def collect(data):
        ranks.add(len(m.draw(data.draw)[0]))

    collect()
    assert ranks == {5, 6}


def test_one_way_model_never_broadcasts_input_zero():
    m = sl.from_signature([("n",), ("n",)], broadcast="one-way")

    @settings(max_examples=60, database=None, derandomize=True)
    @given(st.data())
    def check(data):
        a, b = m.draw(data.draw)
        # the loop dims broadcast towards a's: their broadcast shape is a's own
        assert np.broadcast_shapes(a[:-1], b[:-1]) == a[:-1], (a, b)

    check()


# ---------------------------------------------------------------------------------------------
# modern torch: custom ops and modules
# ---------------------------------------------------------------------------------------------


def test_custom_op_needs_its_non_tensor_argument():
    with pytest.raises(gs.UserOpError, match=r"takes a non-tensor argument 'k' \(float\) at position 1.*args=\{1: "):
        gs.verify_torch_function(U.scaled_cube, max_examples=2)
    r = gs.verify_torch_function(U.scaled_cube, args={1: st.floats(0.5, 2.0)}, max_examples=10, seed=0)
    assert r.status == "agree" and r.target == "gradspec_planted::scaled_cube", str(r)


def test_verify_module_names_the_leaves_and_keeps_parameter_shapes():
    r = gs.verify_module(U.TinyNet(U.LinearFn), example_inputs=U.NET_EXAMPLE, max_examples=8, seed=0)
    assert r.status == "agree" and r.what == "module", str(r)
    assert "leaves: x0 = W, x1 = b, x2 = scale, x3 = input 0" in r.notes
    assert any("x0: (2, 3), x1: (2,), x2: (2,), x3: (d0, 3)" in n for n in r.notes), r.notes
    assert r.replay.startswith("gs.verify_module(TinyNet")


def test_verify_module_does_not_touch_the_users_module():
    net = U.TinyNet(U.LinearFn)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    gs.verify_module(net, example_inputs=(torch.randn(4, 3),), max_examples=3, seed=0)
    assert all(v.dtype == torch.float32 and torch.equal(v, before[k]) for k, v in net.state_dict().items())
    assert all(p.grad is None for p in net.parameters())


# ---------------------------------------------------------------------------------------------
# verify_op(example_inputs=...): the same learnt ties for a gs.Op
# ---------------------------------------------------------------------------------------------


def _affine4_shape(a, x, b, c):
    return U.affine_shape(a, x, b, c)


affine4_ok = gs.Op("affine4_ok", forward=lambda A, x, b, c: (A @ x + b) * c, shape_fn=_affine4_shape,
                   vjp=lambda g, A, x, b, c, out: (np.outer(g * c, x), A.T @ (g * c), g * c, g * (A @ x + b)))
affine4_bad = gs.Op("affine4_bad", forward=lambda A, x, b, c: (A @ x + b) * c, shape_fn=_affine4_shape,
                    vjp=lambda g, A, x, b, c, out: (np.outer(g * c, x), A.T @ (g * c), g, g * (A @ x + b)))
AFFINE_NP = tuple(t.numpy() for t in U.AFFINE_EXAMPLE)


@pytest.mark.parametrize("op, found", [(affine4_bad, True), (affine4_ok, False)], ids=["buggy", "correct"])
def test_verify_op_with_example_inputs_keeps_four_input_ties(op, found):
    r = gs.verify_op(op, example_inputs=AFFINE_NP, max_examples=20, seed=0)
    assert r.cases_run == 20 and (r.status == "disagree") == found and (found or r.ok), str(r)
    assert any("x0: (d0, d1), x1: (d1,), x2: (d0,), x3: (d0,)" in n for n in r.notes), r.notes
