"""No false alarms on correct code: each case here was a discrepancy reported on a correct gradient
(found by hunting with gs.verify_torch_function / gradspec fuzz on correct code), and must agree now.

A correct gradient is never a discrepancy (README, "never cry wolf"); the buggy twins that must still
be found are beside each case.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradspec as gs
from gradspec.verify import torch_function as TF
from tests import _correct_code as C

# ---------------------------------------------------------------------------------------------
# backward twice (retain_graph=True) must give twice the gradient: NaN elements are no evidence
# ---------------------------------------------------------------------------------------------

NAN = float("nan")
TWICE = {
    # one backward, two backwards, which element (if any) did not double
    "doubled": ([0.5, -1.0], [1.0, -2.0], None),
    # a NaN gradient (0 / 0 at a = b = 0, torch's own value there) beside finite ones: the finite
    # ones doubled; before, max(|g1|) was NaN, every threshold NaN, and element 0 was reported
    "nan-beside-finite": ([0.5, NAN], [1.0, NAN], None),
    "inf-beside-finite": ([0.5, np.inf], [1.0, np.inf], None),
    "not-doubled": ([0.5, -1.0], [0.5, -2.0], (0,)),
    "not-doubled-beside-nan": ([NAN, 0.5, -1.0], [NAN, 1.0, -1.5], (2,)),
}


@pytest.mark.parametrize("g1, g2, bad", TWICE.values(), ids=list(TWICE))
def test_backward_twice_compares_the_finite_elements(g1, g2, bad):
    assert TF._not_doubled(np.array(g1), np.array(g2)) == bad


# gs.verify_torch_function on hypot and atan2 as torch writes them: seed 2 draws a = b = 0 in one
# element (NaN gradient, as torch's); the run reported "after one backward 0.5, after two 1.0
# (expected 1.0)" at another element.
@pytest.mark.parametrize("fn", [C.Hypot.apply, C.Atan2.apply], ids=["hypot", "atan2"])
def test_verify_torch_function_nan_at_the_origin_is_no_accumulation_finding(fn):
    r = gs.verify_torch_function(fn, max_examples=60, seed=2)
    assert "accumulation" not in r.kinds, str(r)
    assert r.ok, str(r)


# ---------------------------------------------------------------------------------------------
# gs.check: gradients that rounding alone decides
# ---------------------------------------------------------------------------------------------

# gradspec fuzz --engine reference --dtype float32 --seed 1 --max-examples 400: cos(x2 ** x3) in float32
# with x2 ** x3 = 7.3e7, where one float32 ulp is 8 radians: the gradient of x3, -sin(v2) v2 log(x2), is
# anything in +-4.4e8 depending on the last bit of pow (reference 4.1e8, torch -1.7e8).  The rounding noise
# saw it (a 4-ulp jitter moves the phase by 8 to 32 radians), but its two jittered runs both landed near
# the reference's value (|sin| ~ 0.9 at each), so 4 x their spread, 5.2e8, fell short of the 5.8e8 apart.
COS_OF_HUGE_PHASE_CASE = (
    '{"format": "gradspec-case/1", "engine": "reference", "user_ops": {}, "leaves": [{"name": "x0", "requires_grad":'
    ' true, "value": {"dtype": "float32", "shape": [1], "data": ["0x1.0000000000000p+0"]}}, {"name": "x1", "requires'
    '_grad": true, "value": {"dtype": "float32", "shape": [1], "data": ["0x1.0000000000000p+0"]}}, {"name": "x2", "re'
    'quires_grad": false, "value": {"dtype": "float32", "shape": [1, 1, 1], "data": ["0x1.3a51d40000000p-9"]}}, {"nam'
    'e": "x3", "requires_grad": true, "value": {"dtype": "float32", "shape": [], "data": ["-0x1.7f6c8c0000000p+1"]}}]'
    ', "nodes": [{"name": "v0", "op": "gelu", "inputs": ["x0"], "params": {"approximate": "none"}}, {"name": "v1", "o'
    'p": "cat", "inputs": ["v0", "x1"], "params": {"dim": -1}}, {"name": "v2", "op": "pow", "inputs": ["x2", "x3"], "'
    'params": {}}, {"name": "v3", "op": "pow_scalar", "inputs": ["x2"], "params": {"exponent": 2}}, {"name": "v4", "o'
    'p": "log_softmax", "inputs": ["v2"], "params": {"dim": -2}}, {"name": "v5", "op": "cos", "inputs": ["v2"], "para'
    'ms": {}}, {"name": "v6", "op": "log1p", "inputs": ["x2"], "params": {}}, {"name": "v7", "op": "neg", "inputs": ['
    '"v6"], "params": {}}], "roots": ["v5", "v4"], "seeds": [null, null], "meta": {"generator": "gradspec.strategies.'
    'case_groups", "dtype": "float32"}}'
)


def test_a_gradient_that_rounding_decides_is_no_discrepancy():
    v = gs.check(gs.Case.from_json(COS_OF_HUGE_PHASE_CASE))
    assert v.status == "agree", str(v)


def test_a_wrong_rule_beside_a_noisy_gradient_is_still_found():
    # the same kind of graph at a phase that float32 still resolves (x2 ** x3 = 8): exact oracles
    # agree to rounding there, and a wrong cos rule (sin where -sin belongs) is found
    bad = gs.Op("t_cos_wrong_sign", forward=np.cos, vjp=lambda g, x, out: (g * np.sin(x),))
    case = gs.Case.build({"x2": np.float32([0.5]), "x3": np.float32(-3.0)},
                         [("v2", "pow", ["x2", "x3"], {}), ("v5", bad.name, ["v2"], {})], ["v5"],
                         [np.float32([1.0])], requires_grad={"x2": False})
    assert gs.check(case).status == "disagree"


# ---------------------------------------------------------------------------------------------
# kinks of user ops, found numerically
# ---------------------------------------------------------------------------------------------

# gs.verify_op(relu with twin clamp(min=0)) cried wolf on 4 seeds of 4 (80 cases each): relu(0) beside
# large values (s = 850).  FD's finest step, h = 1.5e-9, sees the kink's slope jump of 1 against a
# worst-case rounding bound of 1.04 and calls the element "no usable step" (beside 5000 it accepts a
# noise-dominated estimate); the jacobian refuses too; the kink check ran only when FD or the jacobian
# disagreed, so the exact oracles were compared at the kink, each with its own convention (0 vs 1).
KINKS_BESIDE_LARGE_VALUES = {
    "relu-at-0-beside-850": {"x0": np.array([0.0, 850.0])},
    "relu-at-0-beside-5000": {"x0": np.array([1.0, 0.0, -3.0, 5000.0])},
}


@pytest.mark.parametrize("leaves", KINKS_BESIDE_LARGE_VALUES.values(), ids=list(KINKS_BESIDE_LARGE_VALUES))
def test_a_kink_beside_large_values_is_found_and_skipped(leaves):
    n = leaves["x0"].size
    case = gs.Case.build(leaves, [("v0", C.relu_clamp_twin.name, ["x0"], {})], ["v0"], [np.ones(n)])
    v = gs.check(case)
    assert v.status == "inconclusive" and "kink" in v.reason, str(v)


def test_a_wrong_vjp_off_the_kink_is_still_found():
    # the same points, a vjp wrong off the kink (the slope of x > 0 is 1, not 2): reported
    bad = gs.Op("t_relu_twice", forward=lambda x: np.maximum(x, 0.0), vjp=lambda g, x, out: (2 * g * (x > 0),),
                torch=lambda x: x.clamp(min=0))
    case = gs.Case.build({"x0": np.array([0.5, 850.0])}, [("v0", bad.name, ["x0"], {})], ["v0"], [np.ones(2)])
    assert gs.check(case).status == "disagree"


# ---------------------------------------------------------------------------------------------
# ill-conditioned code gradspec cannot see inside
# ---------------------------------------------------------------------------------------------

# A torch Function solving with a fixed matrix of condition 1e6 was reported on 3 of 6 seeds of 60 cases
# (rel err 9.5e-12, 1.8e-11 against the jacobian's FD-JVP, tolerance 9.1e-13): the user's backward is
# the exact adjoint of another nearby matrix than the forward's (two LU factorizations), which a
# correct implementation cannot avoid (exact value 3124677.659948, backward 3124677.659922, FD-JVP
# 3124677.659952).  gradspec.tolerances.OPAQUE_RTOL says why that much is allowed for opaque code.
@pytest.mark.parametrize("seed", [0, 1])
def test_a_solve_of_condition_1e6_is_no_discrepancy(seed):
    r = gs.verify_torch_function(C.Solve1e6.apply, signature="(n)->(n)", max_examples=60, seed=seed)
    assert r.ok, str(r)


def test_a_bug_of_1e6_relative_in_the_same_solve_is_found(monkeypatch):
    from gradspec import search

    monkeypatch.setattr(search, "SHRINK_CALLS", 25)  # CI speed; still deterministic
    r = gs.verify_torch_function(C.Solve1e6Scaled.apply, signature="(n)->(n)", max_examples=10, seed=0)
    assert not r.ok and "value" in r.kinds, str(r)
    assert "for code gradspec cannot see inside" in r.discrepancies[0].tolerance_why  # the allowance is named


# ---------------------------------------------------------------------------------------------
# two estimates of the same forward, one of them shaky
# ---------------------------------------------------------------------------------------------

# gradspec fuzz --ops (user ops without jvp: lse of 50 x + 1000, clamp), seed 1, float64: the jacobian's
# finite-difference JVP of the clamp beside values of 5e4 gave 5674 with an error estimate of 4640, where the
# vjp and finite differences both gave 66999.  Its pair with the vjp was a note ("too shaky to witness
# alone"); its pair with finite differences, two estimates, stayed a discrepancy on a correct gradient.
SHAKY_JVP_X0 = [0.0, -1.0, 1.0, 0.7933001413345343]
SHAKY_JVP_SEED = [-0.9951968260976654, 0.6189577606874794, 0.9157367885000326, 0.7392098187137767,
                  -1.3157047689136163, 0.5395491936033696, -1.269382447532937, -1.0247309315659427,
                  1.491341982613391, 0.8702589318039431, 0.5470410290204235, 0.6665734476221715,
                  0.9672217768212136, 0.7449246607754206, -0.5583013433188903, 0.9092671095839552]


def test_a_shaky_estimate_is_no_witness_against_another_estimate():
    nodes = [("v0", "tanh", ["x0"], {}), ("v1", C.lse_big.name, ["v0"], {}), ("v2", C.lse_big.name, ["v1"], {}),
             ("v3", "mul", ["v2", "v0"], {}), ("v4", C.clamp.name, ["v3"], {})]
    case = gs.Case.build({"x0": np.reshape(SHAKY_JVP_X0, (4, 1, 1))}, nodes, ["v4"],
                         [np.reshape(SHAKY_JVP_SEED, (4, 1, 4))])
    v = gs.check(case)
    assert v.status == "agree", str(v)
    assert any("jacobian disagreed with finite-differences" in str(n) and "too shaky" in str(n) for n in v.notes), v.notes
    assert any(set(c.oracles) == {"reference", "finite-differences"} and c.agreed for c in v.comparisons)
