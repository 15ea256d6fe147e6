"""The correct CG solve at an exactly singular A (tryout11 #7a).

``verify_torch_function(CGSolve.apply, at=[(ones(2, 2), ones(2))])`` said "OK — 1 cases".  No derivative exists
there: CG on the normal equations converges to the least-norm least-squares solution, continuous in A but not
differentiable at a singular A (the user's central differences along one direction: -0.386 / -0.630 / +0.722 at
h = 1e-3 / 1e-5 / 1e-7; torch.autograd.gradcheck fails).  Finite differences refused the case (its steps do not
resolve the forward), and the only pair left was reference vs the finite-difference JVP of the jacobian oracle,
which "agreed" within its own error estimate: its estimates for A's gradient, [0.192, 0.284, 0.192, 0.284], are
20 % off the backward's 0.238 each, an estimate that changes that much with its step witnesses nothing.  Now the
case is inconclusive, saying why.
"""

from __future__ import annotations

import pytest

import gradspec as gs

torch = pytest.importorskip("torch")

from tests._tryout11_cg import CGSolve  # noqa: E402


def test_correct_cg_solve_at_a_singular_matrix_is_not_ok():
    d = torch.float64
    r = gs.verify_torch_function(CGSolve.apply, at=[(torch.ones(2, 2, dtype=d), torch.ones(2, dtype=d))], seed=0,
                                 dtypes=("float64",), double_backward=False)
    assert r.status == "inconclusive", r.summary()
    assert not r.discrepancies, r.summary()  # nor a bug: the backward is right wherever a derivative exists
    text = r.summary()
    assert "finite-difference JVP agreed only within its own error estimate" in text, text
    assert "may not be differentiable at these inputs" in text, text


def test_correct_cg_solve_at_a_well_conditioned_matrix_still_agrees():
    d = torch.float64
    A = torch.tensor([[3.0, 1.0], [0.5, 2.0]], dtype=d)
    r = gs.verify_torch_function(CGSolve.apply, at=[(A, torch.tensor([1.0, -2.0], dtype=d))], seed=0,
                                 dtypes=("float64",), double_backward=False)
    assert r.status == "agree", r.summary()
