"""A user's code that warns on part of its domain (review16a #1, #2).  Since 45a0a7f the search no longer ignores
every warning; under ``-W error`` (pytest ``filterwarnings = error``) such a warning raised inside the search, the
draw was taken for a forward that raises and silently redrawn: that part of the domain was never checked (a 10%
backward bug there read 'agree').  With Python's default filters the one warning was printed ~60 times (each
catch_warnings() entry resets the once-per-location registry).  Now the user's code runs with its warnings recorded
(the point is checked whatever the filters say), each distinct warning is re-emitted once after the run (their
filters decide how it shows: under 'error' it raises then, the finished Result attached) and a note counts them."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import gradspec as gs

MSG = "fixwarn16: inputs below -1 are deprecated"


class _WarnyBug(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        if (x < -1).any():
            warnings.warn(MSG, UserWarning, stacklevel=1)  # (the user's own line)
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.where(x < -1, 1.1 * torch.cos(x), torch.cos(x))  # 10% wrong where it warns


def warnybug(x):
    return _WarnyBug.apply(x)


def _np_warny_vjp(g, x, out):
    return (g * np.where(x > 1.5, 1.1, 1.0) * np.cos(x),)  # 10% wrong where the forward warns


def _np_warny(x):
    if np.any(x > 1.5):
        warnings.warn(MSG, UserWarning, stacklevel=1)  # (the user's own line)
    return np.sin(x)


def _run_error(run):
    """Run under warnings-as-errors; the Result (returned, or attached to the user's re-emitted warning)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return run(), None
        except UserWarning as e:
            return getattr(e, "gradspec_result", None), e


def test_warning_as_error_does_not_hide_the_domain_where_fn_warns():
    r, e = _run_error(lambda: gs.verify_torch_function(warnybug, max_examples=60, seed=1))
    assert e is not None and MSG in str(e), "the user's warning was not re-emitted under -W error"
    assert r is not None, "the finished Result was not attached to the re-emitted warning"
    assert r.status == "disagree", r.summary()
    assert any("warned" in n and MSG in n for n in r.notes), r.notes


def test_verify_op_warning_as_error_still_checks_there():
    op = gs.Op("fixwarn16_np_warny", forward=_np_warny, vjp=_np_warny_vjp)
    r, e = _run_error(lambda: gs.verify_op(op, max_examples=60, seed=1))
    assert r is not None and r.status == "disagree", (e, r and r.summary())


def test_a_warning_is_shown_once_with_default_filters():
    op = gs.Op("fixwarn16_np_warny_ok", forward=_np_warny, vjp=lambda g, x, out: (g * np.cos(x),))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("default")
        r = gs.verify_op(op, max_examples=30, seed=1)
    mine = [w for w in got if MSG in str(w.message)]
    assert len(mine) == 1, len(mine)
    assert mine[0].filename == __file__, mine[0].filename  # the user's line, as warnings.warn named it
    assert r.status == "agree", r.summary()
    note = next(n for n in r.notes if "warned" in n)
    assert MSG in note and "UserWarning" in note, note


def test_a_warning_on_every_call_is_checked_not_inconclusive():
    def always(x):
        warnings.warn(MSG, UserWarning, stacklevel=1)  # (the user's own line)
        return x * 2

    r, e = _run_error(lambda: gs.verify_torch_function(always, max_examples=10, seed=0))
    assert e is not None and r is not None, e
    assert r.status == "agree" and r.cases_run >= 5, r.summary()


@pytest.mark.parametrize("action", ["ignore"])
def test_the_users_ignore_filter_is_honoured(action):
    op = gs.Op("fixwarn16_np_warny_ok2", forward=_np_warny, vjp=lambda g, x, out: (g * np.cos(x),))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter(action)
        gs.verify_op(op, max_examples=10, seed=1)
    assert not [w for w in got if MSG in str(w.message)]


class _RaisesBelow(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        if (x < -1).any():
            raise ValueError("fixwarn16: negative input")
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)


def test_draws_where_fn_raises_are_counted_with_learnt_shapes():
    """The learnt-shapes generator (example_inputs=) redrew values where fn raised silently (review16a's w7 path:
    28 raising calls, no note); the generic one counts them in draws_skipped.  Now both do."""
    r = gs.verify_torch_function(_RaisesBelow.apply, example_inputs=(torch.randn(3, dtype=torch.float64),),
                                 max_examples=40, seed=1)
    assert any("raised" in line and "negative input" in line for line in r.draws_skipped), r.draws_skipped
