"""Finite differences near a ramp far narrower than its step (tryout6 #3): a correct numpy rmsnorm over a last
axis of size 1, three in a row, at x = 0, has the exact gradient (1/sqrt(eps))^3 = 1e9 (reference and torch
agree); FD's step (6e-6) spans the whole ramp (width ~1e-9) and gave 1.9e5, with an error bound taken from a
noise line that crossed the ramp and read it as noise.  It was reported as the code's error, and the pair
(finite differences, torch) was blamed on "state kept between calls".  FD must step aside there, saying why,
and still witness where it resolves the function; a real bug at the ramp is still found (reference vs torch).
"""

from __future__ import annotations

import numpy as np
import pytest

import gradspec as gs
from gradspec.oracles.fd import FiniteDifferences
from tests import _steep_code as S

# tryout6's case (rmsnorm_falsealarm_case.json, found by `gradspec fuzz --ops myops:rmsnorm`): x0[1, 3] = 0
TRYOUT6_X = [-6.5131, -1.0, -1.0, -2.0, 8.0566, -1.5297, 9.3223, 0.0, -10.0, 866.6785, 5.5638, -2.0, -2.0, -10.0,
             -7.1134, 7.1500]

STEEP = {  # name: (applications, x): FD's step cannot resolve the ramp there
    "three-at-0": (3, [0.0]),
    "three-at-3e-9": (3, [3e-9]),
    "tryout6-case": (3, TRYOUT6_X),
}


def _fd_why(v) -> str:
    return v.skipped.get("finite-differences", "") + str(v.excused.get("finite-differences", ""))


@pytest.mark.parametrize("times, x", STEEP.values(), ids=list(STEEP))
def test_fd_steps_aside_at_a_ramp_narrower_than_its_step(times, x):
    v = gs.check(S.stacked(np.reshape(x, (-1, 1)), times=times))
    assert v.status == "agree", str(v)  # reference and torch-cpu agree at 1e9
    assert "narrower than the step" in _fd_why(v), str(v)


@pytest.mark.parametrize("times, x", STEEP.values(), ids=list(STEEP))
def test_a_bug_at_the_ramp_is_still_found_and_not_blamed_on_state(times, x):
    v = gs.check(S.stacked(np.reshape(x, (-1, 1)), "t6_rmsnorm_half", times))
    assert v.status == "disagree" and ("reference", "torch-cpu") in {tuple(d.oracles) for d in v.discrepancies}, str(v)
    assert not any("state between calls" in d.cause.summary for d in v.discrepancies), [d.cause for d in v.discrepancies]


WITNESS = {  # name: (applications, x): the ramp is resolved (once at 0: width 1e-3) or far away
    "once-at-0": (1, [0.0]),
    "once-at-0.001": (1, [0.001]),
}


@pytest.mark.parametrize("times, x", WITNESS.values(), ids=list(WITNESS))
def test_fd_still_witnesses_where_it_resolves_the_function(times, x):
    v = gs.check(S.stacked(np.reshape(x, (-1, 1)), times=times))
    assert v.status == "agree" and "finite-differences" in v.results, str(v)
    bad = gs.check(S.stacked(np.reshape(x, (-1, 1)), "t6_rmsnorm_half", times))
    assert any("finite-differences" in d.oracles for d in bad.discrepancies), str(bad)


def test_noise_is_still_held_as_noise():
    # A forward rough at every spacing (pseudo-noise 1e-9 x sin(1e15 x), like an ill-conditioned solve's
    # rounding): the narrow line is as rough as the first, FD's bound holds it and it still witnesses.
    op = S.noisy_square
    v = gs.check(S.single([1.3, -0.7], op.name))
    assert v.status == "agree" and "finite-differences" in v.results, str(v)


class _HalfFD(FiniteDifferences):
    """Finite differences off by half: a wrong witness, against the reference and torch alike."""

    def result(self, case, check_reach: bool = True):
        r = super().result(case, check_reach)
        r.grads = {k: 0.5 * g for k, g in r.grads.items()}
        return r


def test_a_witness_wrong_against_both_sides_is_not_blamed_on_state_between_calls():
    # the pair (finite differences, torch-cpu) alone said "your vjp ... keeps state between calls" (tryout6 #3):
    # finite differences disagree with the reference too, and torch runs the op's torch= twin, never its vjp
    v = gs.check(S.stacked(np.array([[0.7]]), "t6_square", 2), oracles=["reference", _HalfFD(), "torch-cpu"])
    assert {tuple(d.oracles) for d in v.discrepancies} == {("reference", "finite-differences"),
                                                           ("finite-differences", "torch-cpu")}, str(v)
    assert not any("state between calls" in d.cause.summary for d in v.discrepancies), [d.cause for d in v.discrepancies]


def test_a_user_op_with_an_empty_output_beside_others_is_estimated():
    # tryout6's `gradspec fuzz --ops myops:ste`: a case with a (1, 0, 1) leaf through a user op made finite
    # differences raise "zero-size array to reduction operation maximum" (the float32 probe's largest output
    # rise), so the case compared nothing
    case = gs.Case.build({"x0": np.zeros((1, 0, 1)), "x1": np.linspace(-1, 1, 12).reshape(1, 4, 3)},
                         [("v0", "t6_square", ["x0"], {}), ("v1", "t6_square", ["x1"], {})], ["v0", "v1"],
                         [np.ones((1, 0, 1)), np.ones((1, 4, 3))])
    v = gs.check(case, oracles=["reference", "finite-differences"])
    assert v.status == "agree" and "finite-differences" in v.results, str(v)


def test_explain_says_its_jacobian_is_an_estimate_with_its_error():
    # `gradspec explain` of tryout6's case showed J^T.seed 9.67e8 (finite-difference JVPs of the user op, which has
    # no jvp) beside the code's exact 1e9 as "relative 0.034", with no word that J itself was an estimate
    from gradspec.explain import code_gradients, explain

    e = explain(S.stacked(np.array([[0.0]])))
    e.code, e.code_label = code_gradients(e.case)
    text = e.text()
    assert "an estimate: J comes from finite-difference JVPs of t6_rmsnorm" in text, text
    assert "within 4x it, no evidence against the code" in text, text
