"""tryout5 findings 5, 6, 9 and 10's cause naming: what fn is called with, and what a finding says.

The Functions are in tests/_tryout5_domain_code.py; the expected words come from how each was written (its
bug, its overflow), never from running gradspec."""

from __future__ import annotations

import pytest

import gradspec as gs
from gradspec.ops.user import UserOpError
from tests import _tryout5_domain_code as T


def _t(*shape, center=0.0, seed=0):
    import torch

    g = torch.Generator().manual_seed(seed)
    return center + 0.5 * torch.randn(*shape, generator=g, dtype=torch.float64)


def _spy(fn, seen):
    def spy(x):
        seen.append((float(x.min()), float(x.max())))
        return fn(x)

    return spy


# ---- finding 5: domain= honoured, and the forward's overflow named as such ---------------------------------------

DOMAINS = {
    # id: (domain, the values fn must see somewhere, the values it must never see outside)
    # (-1000, 1000): a third of the cases spread over it, 12 values each uniform over it: |x| > 50 in one of them
    # fails with probability (1/20)^12; the tame part alone (magnitudes 0.25 to 2) never reaches it
    "wide-interval-is-explored": ((-1000.0, 1000.0), lambda lo, hi: hi > 50 or lo < -50),
    "narrow-interval-is-respected": ((5.0, 6.0), lambda lo, hi: True),
}


@pytest.mark.parametrize("dom, reached", DOMAINS.values(), ids=list(DOMAINS))
def test_an_explicit_interval_domain_is_explored(dom, reached):
    seen: list = []
    r = gs.verify_torch_function(_spy(T.LSENaive.apply, seen), example_inputs=(_t(3, 4),),
                                 domain=gs.domains.interval(*dom), max_examples=20, seed=1)
    assert r.status == "agree", r.reason
    lo, hi = min(s[0] for s in seen), max(s[1] for s in seen)
    assert reached(lo, hi), (lo, hi)
    assert all(dom[0] < a and b < dom[1] for a, b in seen), (lo, hi)  # (probes and cases: all inside the domain)
    assert any("domain=" in str(n) and "interval" in str(n) for n in r.notes), r.notes


def test_a_forward_that_is_inf_on_the_example_is_said():
    # exp(800) overflows: the user's own example gives an inf forward; the cases are drawn elsewhere (finite),
    # and the run must say that its example was not a point gradspec could check
    r = gs.verify_torch_function(T.LSENaive.apply, example_inputs=(_t(3, 4, center=800.0),), max_examples=10, seed=1)
    notes = [str(n) for n in r.notes if "example_inputs" in str(n) and "inf" in str(n)]
    assert notes, r.notes
    assert "forward" in notes[0] and "not a gradient" in notes[0], notes[0]


def test_a_forward_overflowing_inside_the_domain_is_not_blamed_on_the_example():
    # the example (~700) gives a finite forward (exp(701) < max float64); values drawn from (600, 800) reach past
    # log(max float64) = 709.8, where the forward overflows
    x = _t(3, 4, center=700.0)
    assert bool(T.LSENaive.apply(x).isfinite().all())
    with pytest.raises(UserOpError) as e:
        gs.verify_torch_function(T.LSENaive.apply, example_inputs=(x,), domain=gs.domains.interval(600, 800),
                                 max_examples=10, seed=1)
    text = str(e.value)
    assert "rejects its own example_inputs" not in text, text
    assert "domain= (interval (600, 800))" in text and "inside" in text and "inf" in text, text
    assert "not a gradient" in text and "log, sqrt" not in text, text


# ---- finding 6: int tensor arguments named, and the dims tied to them held ---------------------------------------

def _xent_example():
    import torch

    return (_t(3, 4), torch.tensor([0, 2, 1]), 0.1)


def test_an_int_tensor_argument_is_named_in_the_notes():
    r = gs.verify_torch_function(T.SoftmaxXent.apply, example_inputs=_xent_example(), max_examples=5, seed=1)
    held = [str(n) for n in r.notes if "position 1" in str(n)]
    assert held and "int64" in held[0] and "(3,)" in held[0], r.notes
    assert any("position 2 = 0.1" in str(n) for n in r.notes), r.notes


def test_dims_of_the_size_of_an_int_tensor_argument_are_held():
    # SoftmaxXent is right whenever every row of the logits has its target (3 rows, 3 targets): calls with other
    # row counts are calls no caller makes, and were reported as a wrong gradient
    rows: list = []

    def xent(logits, target, s):
        if logits.requires_grad:  # a case's backward (the shape probes run without grad, on fresh sizes)
            rows.append(logits.shape[0])
        return T.SoftmaxXent.apply(logits, target, s)

    r = gs.verify_torch_function(xent, example_inputs=_xent_example(), max_examples=30, seed=1)
    assert r.status == "agree", [d.cause.summary for d in r.discrepancies[:1]]
    assert set(rows) == {3}, sorted(set(rows))
    assert any("x0 axis 0 = 3" in str(n) for n in r.notes), r.notes
    bad = gs.verify_torch_function(T.SoftmaxXentBuggy.apply, example_inputs=_xent_example(), max_examples=30, seed=1)
    assert bad.status == "disagree"  # the smoothing bug is still found with the rows held


def test_a_mask_argument_that_fixes_the_shape_is_said():
    import torch

    mask = torch.tensor([[1, 0, 1, 1], [0, 1, 1, 0], [1, 1, 0, 1]])
    r = gs.verify_torch_function(T.MaskedScale.apply, example_inputs=(_t(3, 4), mask), max_examples=5, seed=1)
    held = [str(n) for n in r.notes if "position 1" in str(n)]
    assert held and "shape (3, 4)" in held[0], r.notes
    assert any("x0 axis 0 = 3, x0 axis 1 = 4" in str(n) for n in r.notes), r.notes  # x0's shape fixed: said


def test_the_evidence_shows_the_elements_that_differ():
    import numpy as np

    from gradspec._diagnose_text import _evidence
    from gradspec.case import Leaf

    class Mini:
        leaves = [Leaf("x0", np.arange(16.0).reshape(4, 4))]

    t = {"x0": np.ones((4, 4))}
    u = {"x0": np.ones((4, 4))}
    u["x0"][3, 1] = 5.0  # the one element that differs, far past the first six shown
    text = _evidence(Mini, Mini.leaves, u, t, np.ones(4), "reference", "J^T·g")
    assert "[3, 1]" in text and "5" in text.split("[3, 1]")[1][:40], text
# ---- finding 9: wrong axis, swapped gradients ----------------------------------------------------------------------

CAUSES = {
    # id: (run, words the summary must hold, words it must not)
    "swapped-gradients": (
        lambda: gs.verify_torch_function(T.MulSwapped.apply, example_inputs=(_t(3, 4), _t(3, 4, seed=1) + 1),
                                         max_examples=30, seed=1),
        "swapped", "ratio varies"),
    "bias-reduced-over-the-wrong-axis": (
        lambda: gs.verify_torch_function(T.AddBiasWrongAxis.apply, example_inputs=(_t(3, 4), _t(4)), max_examples=30,
                                         seed=1),
        "axis 1", "no simple pattern"),
}


@pytest.mark.parametrize("run, words, not_words", CAUSES.values(), ids=list(CAUSES))
def test_common_backward_mistakes_are_named(run, words, not_words):
    r = run()
    assert r.discrepancies, "the wrong backward must be found"
    c = r.discrepancies[0].cause
    assert c is not None and c.id == "wrong-vjp", (c.id if c else None)
    assert words in c.summary and not_words not in c.summary, c.summary


# ---- finding 10's cause naming: the user's own names for the code and the leaves -----------------------------------

def _cube_wrapped(x):
    from tests import _planted_user as pu

    return pu.scaled_cube_noscale(x, 1.5)


def test_a_custom_op_finding_names_its_registered_backward():
    from tests import _planted_user as pu

    for fn, ex in ((pu.scaled_cube_noscale, pu.CUBE_EXAMPLE), (_cube_wrapped, pu.CUBE_EXAMPLE[:1])):
        r = gs.verify_torch_function(fn, example_inputs=ex, max_examples=20, seed=0)
        assert r.discrepancies, fn
        text = r.discrepancies[0].cause.summary
        assert "_cube_bwd_noscale" in text and "GeneratedBackwardFor" not in text, text


def test_a_module_finding_names_the_parameter():
    import torch

    r = gs.verify_module(T.RMSNormBuggy(4), example_inputs=(torch.randn(5, 4, dtype=torch.float64),), max_examples=30,
                         seed=1)
    assert r.discrepancies
    text = r.discrepancies[0].cause.summary
    # the weight's gradient is wrong (the batch reduction forgotten); leaf x0 is the weight, x1 the input
    assert "x0 (weight)" in text and "x1 (input 0)" in text, text


def test_values_of_the_domain_where_the_forward_overflows_are_said():
    # LSENaive overflows for x > log(max float64) = 709.8: drawn over (-1000, 1000), a row of 4 values uniform on
    # it holds one above 709.8 with probability 1 - 0.855^4 = 0.47, so some spread cases are skipped, and said
    r = gs.verify_torch_function(T.LSENaive.apply, example_inputs=(_t(3, 4),), domain=gs.domains.interval(-1000, 1000),
                                 max_examples=30, seed=1)
    said = [str(n) for n in r.notes if "not finite" in str(n) and "domain=" in str(n)]
    assert said and "not a gradient bug" in said[0], r.notes
