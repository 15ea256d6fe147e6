"""torch's "degrees of freedom is <= 0" UserWarning from gradspec's own torch twin of std()/var() (evaluated at one
element with correction=1, a point gradspec draws on purpose: NaN forward and gradient, torch's convention) no longer
reaches the user's output (session 15 carried it: it leaked into test and soak output).  The filter sits around
gradspec's own torch call only: the same warning from a user's function is theirs and stays visible."""

from __future__ import annotations

import warnings

import numpy as np
import torch

import gradspec as gs

DOF = "degrees of freedom is <= 0"


def _dof_warnings(run) -> list:
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        run()
    return [str(w.message) for w in got if DOF in str(w.message)]


def test_gradspecs_own_std_at_zero_degrees_of_freedom_does_not_warn():
    for op in ("std", "var"):
        case = gs.Case.build({"x": np.array([0.5])}, [("s", op, ["x"], {"correction": 1})], ["s"], [np.ones(())])
        got = _dof_warnings(lambda case=case: gs.check(case, oracles=["reference", "torch-cpu"]))
        assert got == [], (op, got)


def _user_fn(x):
    # the user's own std of one-element slices (correction=1): NaN, which their code masks (of a detached copy: a
    # constant term); torch warns, as it should
    s = torch.std(x.detach()[..., :1], dim=-1, keepdim=True)
    return x * 2 + torch.nan_to_num(s)


def test_a_users_own_std_warning_stays_visible():
    """The same warning from a user op's torch twin (their code, run by the torch oracle) reaches them."""
    gs.Op("openfix_twice_masked_std", forward=lambda x: 2 * x, vjp=lambda g, x, out: (2 * g,), torch=_user_fn)
    case = gs.Case.build({"x": np.array([0.5, 1.5])}, [("y", "openfix_twice_masked_std", ["x"], {})], ["y"],
                         [np.ones(2)])
    got = _dof_warnings(lambda: gs.check(case, oracles=["reference", "torch-cpu"]))
    assert got, "the user's torch.std warning was swallowed"


def _warning_fn(x):
    warnings.warn("openfix: the user's own warning", UserWarning, stacklevel=2)
    return x * 2


def test_a_users_function_warning_reaches_them_from_a_verify_run():
    """verify_* ran its whole search under warnings.simplefilter("ignore") (for Hypothesis' own warnings): every
    warning of the user's function was swallowed.  Only Hypothesis' are ignored there now."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        r = gs.verify_torch_function(_warning_fn, max_examples=5, seed=0)
    assert r.status == "agree", r.summary()
    assert any("the user's own warning" in str(w.message) for w in got), [str(w.message)[:60] for w in got]
