"""Drawn int/bool tensor arguments (tryout10 F7's follow-up): ``args={k: gs.strategies.indices(example_k)}`` beside
``example_inputs`` searches the values of an index, segment id or mask (same shape as the example's, values in its
observed range, duplicates and constant tensors likely, shrinking towards the example's own values) instead of
holding them.  Expectations come from how each Function in tests/_tryout10_torchfn.py was written (its comments):
a bug that needs a duplicate index / a False mask element is found although the example has none."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, find, given, settings
from hypothesis.errors import InvalidArgument

import gradspec as gs
from tests import _tryout10_torchfn as T

X6 = torch.linspace(-1, 1, 18, dtype=torch.float64).reshape(6, 3)
IDX6 = torch.tensor([0, 1, 2, 3, 4, 5])  # no duplicate segment id: the held example hides the bug


def _summaries(r):
    return [d.cause.summary if d.cause else d.message for d in r.discrepancies]


# --- the strategy on its own


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(t=gs.strategies.indices(torch.tensor([[3, 5, 4], [4, 3, 5]])))
def test_drawn_indices_keep_the_examples_shape_dtype_and_range(t):
    assert t.shape == (2, 3) and t.dtype == torch.int64
    assert int(t.min()) >= 3 and int(t.max()) <= 5  # never outside [min, max]: an out-of-range index is the user's


def test_drawn_indices_shrink_to_the_examples_own_values():
    ex = torch.tensor([2, 0, 1, 2])
    assert find(gs.strategies.indices(ex), lambda t: True).tolist() == ex.tolist()


def test_duplicates_and_all_false_masks_are_likely():
    """Among 200 draws from a permutation example most have a duplicate, and an all-False mask (from an all-True
    example) comes up often: Hypothesis draws few distinct values on purpose."""
    dups, all_false, n = 0, 0, 200
    idx, mask = gs.strategies.indices(torch.tensor([0, 2, 1, 3])), gs.strategies.indices(torch.ones(2, 3, dtype=torch.bool))

    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(i=idx, m=mask)
    def draw(i, m):
        nonlocal dups, all_false
        dups += int(len(set(i.tolist())) < 4)
        all_false += int(not bool(m.any()))

    draw()
    assert dups >= n // 4 and all_false >= n // 20, (dups, all_false)


def test_values_and_bounds_are_checked():
    with pytest.raises(InvalidArgument, match="low"):
        gs.strategies.indices(torch.tensor([1, 2]), low=3, high=2)
    with pytest.raises(InvalidArgument, match="float"):
        gs.strategies.indices(torch.ones(2))
    s = gs.strategies.indices(torch.tensor([1, -100, 2]), values=[-100, 0, 1, 2, 3])
    t = find(s, lambda t: 0 in t.tolist() or 3 in t.tolist())
    assert set(t.tolist()) <= {-100, 0, 1, 2, 3}


# --- verify_torch_function with a drawn index / mask


def test_a_segment_sum_that_drops_duplicate_rows_is_found_without_at():
    r = gs.verify_torch_function(T.SegmentSumFirstRowOnly.apply, example_inputs=(X6, IDX6, 6),
                                 args={1: gs.strategies.indices(IDX6)}, max_examples=30, seed=0)
    assert r.status == "disagree", (r.status, r.reason, r.notes)
    assert r.held == [p for p in r.held if not p.startswith("position 1")], r.held


def test_the_same_segment_sum_passes_when_the_index_is_held():
    """(why the test above needs the draw: the example index has no duplicate)"""
    r = gs.verify_torch_function(T.SegmentSumFirstRowOnly.apply, example_inputs=(X6, IDX6, 6), max_examples=10, seed=0)
    assert r.status == "agree", (r.status, _summaries(r))


def test_a_right_segment_sum_agrees_with_drawn_indices():
    r = gs.verify_torch_function(T.SegmentSum.apply, example_inputs=(X6, IDX6, 6),
                                 args={1: gs.strategies.indices(IDX6)}, max_examples=30, seed=0)
    assert r.status == "agree", (r.status, r.reason, _summaries(r))


def test_a_drawn_index_is_not_called_held_and_its_range_is_said():
    r = gs.verify_torch_function(T.SegmentSum.apply, example_inputs=(X6, IDX6, 6),
                                 args={1: gs.strategies.indices(IDX6)}, max_examples=5, seed=0)
    assert not any(p.startswith("position 1") for p in r.held), r.held
    held = [n for n in r.notes if "held at one value" in n]
    assert not held or "position 1" not in held[0], held
    drawn = [n for n in r.notes if "position 1" in n and "drawn" in n]
    assert drawn and "[0, 5]" in drawn[0] and "int64" in drawn[0] and "(6,)" in drawn[0], r.notes


def test_a_drawn_duplicate_index_finds_gather_rows_drop_dups():
    """tryout10 F7's own repro: the example index [0, 2, 1] has no duplicate."""
    x, idx = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(4, 3), torch.tensor([0, 2, 1])
    r = gs.verify_torch_function(T.GatherRowsDropDups.apply, example_inputs=(x, idx),
                                 args={1: gs.strategies.indices(idx)}, max_examples=30, seed=0)
    assert r.status == "disagree", (r.status, r.reason)
    assert "index_add" in r.discrepancies[0].cause.summary, r.discrepancies[0].cause.summary


MASK = torch.ones(3, 4, dtype=torch.bool)  # all True: the held example hides a wrong count
X34 = torch.linspace(-1.5, 1.3, 12, dtype=torch.float64).reshape(3, 4)


def test_a_masked_mean_with_a_wrong_count_is_found_with_a_drawn_mask():
    r = gs.verify_torch_function(T.MaskedMeanFullCount.apply, example_inputs=(X34, MASK),
                                 args={1: gs.strategies.indices(MASK)}, max_examples=30, seed=0)
    assert r.status == "disagree", (r.status, r.reason)


def test_a_right_masked_mean_agrees_with_all_false_rows_drawn():
    r = gs.verify_torch_function(T.MaskedMean.apply, example_inputs=(X34, MASK),
                                 args={1: gs.strategies.indices(MASK)}, max_examples=30, seed=0)
    assert r.status == "agree", (r.status, r.reason, _summaries(r))


def test_a_masked_mean_that_is_nan_at_an_all_false_row_is_no_crash_and_no_false_finding():
    """0/0 at an all-False row is NaN in forward and backward alike: never a wrong-gradient finding, never a crash
    (the run agrees on the cases where the forward is finite, or is inconclusive saying why)."""
    r = gs.verify_torch_function(T.MaskedMeanNoClamp.apply, example_inputs=(X34, MASK),
                                 args={1: gs.strategies.indices(MASK)}, max_examples=30, seed=0)
    assert r.status in ("agree", "inconclusive"), (r.status, _summaries(r))


def test_dims_of_the_size_of_a_drawn_target_are_held_as_for_a_held_one():
    """SoftmaxXent is right whenever every row of the logits has its target (tryout5 #6): drawn targets keep the
    example's shape, so the logits' rows stay at the targets' count, as with held ones (before: the rows varied)."""
    from tests import _tryout5_domain_code as T5

    rows: list = []

    def xent(logits, target, s):
        if logits.requires_grad:  # a case's backward (the shape probes run without grad, on fresh sizes)
            rows.append(logits.shape[0])
        return T5.SoftmaxXent.apply(logits, target, s)

    logits, target = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(3, 4), torch.tensor([0, 2, 1])
    r = gs.verify_torch_function(xent, example_inputs=(logits, target, 0.1),
                                 args={1: gs.strategies.indices(target, low=0, high=3)}, max_examples=30, seed=1)
    assert r.status == "agree", (r.status, _summaries(r))
    assert set(rows) == {3}, sorted(set(rows))
    assert any("x0 axis 0 = 3" in str(n) for n in r.notes), r.notes


def test_shapes_are_probed_at_the_examples_own_index():
    """fn_shapes probed a drawn argument at strategy.example(), a random unseeded draw: MaskedMeanNoClamp (NaN at an
    all-False row) was then refused up front as 'fn rejects its own example_inputs' in some runs.  A drawn
    gs.strategies.indices argument is probed at its example's values: the first call of each run sees them (on main
    a run's first call saw the example about one run in eight: three runs all seeing it by chance, < 1%)."""
    first: list = []

    def mm(x, mask):
        if len(first) == len(seen_runs):
            first.append(mask.tolist())
        return T.MaskedMean.apply(x, mask)

    seen_runs: list = []
    mask = torch.tensor([[True, False, True, True], [False, True, True, True], [True, True, True, False]])
    for seed in range(3):
        gs.verify_torch_function(mm, example_inputs=(X34, mask), args={1: gs.strategies.indices(mask)},
                                 max_examples=2, seed=seed)
        seen_runs.append(seed)
    assert first == [mask.tolist()] * 3, first


@pytest.mark.parametrize("kw", [{"high": 300}, {"low": -1}], ids=["high-above-uint8", "low-below-uint8"])
def test_low_and_high_outside_the_dtype_range_are_refused_up_front(kw):
    # review15b #2: high=300 on a uint8 example crashed inside the draw; low=-1 wrapped silently to 255
    import torch
    from hypothesis.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="uint8's range"):
        gs.strategies.indices(torch.tensor([0, 2, 1], dtype=torch.uint8), **kw)
