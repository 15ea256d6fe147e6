"""The exact oracles' per-structure plans (``gradspec.oracles._plan``): kept per graph structure, never per
case or value.  Every answer must be the one the oracle gives without its plan, bit for bit (errors
included), on every case -- a case of a structure met before with other values, other params, other flags
answered afresh -- and a plan must never reach a case of another structure."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import gradspec as gs
from gradspec import engine as E
from gradspec._private.sampling import sample
from gradspec.oracles import _plan
from tests.test_structure import VARIANTS, _case

EXACT = ["reference", "jacobian", "torch-cpu"]


@contextlib.contextmanager
def _no_plans():
    """The oracles' general path (what they did before plans existed)."""
    original = _plan.plan
    _plan.plan = lambda case: None
    try:
        yield
    finally:
        _plan.plan = original


def _bits(a):
    return None if a is None else (a.dtype.str, a.shape, a.tobytes())


def _answer(oracle, case):
    """The oracle's answer as bytes (dtype, shape, bits) per leaf, or its exception's type and message; the
    jacobian's J, seed vector and blocks too."""
    try:
        if oracle.name == "jacobian":
            j = oracle.jacobian(case)
            got, extra = j.vjp, (_bits(j.matrix), _bits(j.seed_vector), j.row_blocks, j.col_blocks)
        else:
            got, extra = oracle.vjp(case), None
    except Exception as e:  # noqa: BLE001 - the error is part of the answer
        return ("raised", type(e).__name__, str(e))
    return extra, {k: _bits(v) for k, v in got.items()}


def _same_answers(case, names=EXACT):
    for name in names:
        o = gs.oracles.get(name)
        with _no_plans():
            want = _answer(o, case)
        first, again = _answer(o, case), _answer(o, case)  # (the second call replays the plan the first built)
        assert first == want, (name, case.to_text())
        assert again == want, (name, case.to_text())


_DRAWS = [({}, 60, 11), ({"dtype": "float32"}, 25, 12), ({"dtype": "mixed"}, 25, 13), ({"max_nodes": 3}, 30, 14)]


@pytest.mark.parametrize(("kw", "n", "seed"), _DRAWS, ids=[str(d[0]) for d in _DRAWS])
def test_every_oracle_answers_with_its_plan_exactly_as_without(kw, n, seed):
    cases = sample(gs.strategies.cases(**kw), n, seed)
    assert sum(_plan.plan(c) is not None for c in cases) > n // 2  # (the plans are used, not bypassed)
    for case in cases:
        _same_answers(case)


def test_a_structure_met_before_is_answered_afresh_for_other_values_and_seeds():
    base = _case()
    other = _case(x=(2.0, 0.5, -3.0, 1.25), w=(-0.5, 4.0))
    other.seeds = [np.array([3.0, 0.25])]
    assert _plan.plan(base) is _plan.plan(other)
    for name in EXACT:
        o = gs.oracles.get(name)
        a, b = _answer(o, base), _answer(o, other)
        assert a != b
        with _no_plans():
            assert (_answer(o, base), _answer(o, other)) == (a, b)


@pytest.mark.parametrize("change", list(VARIANTS))
def test_a_structural_difference_gets_another_plan_and_its_own_answer(change):
    base, other = _case(), _case(**VARIANTS[change])
    assert _plan.structure_key(base) != _plan.structure_key(other)
    assert _plan.plan(base) is not _plan.plan(other)
    _same_answers(base)
    _same_answers(other)


def test_params_of_another_type_or_sign_are_other_structures():
    keys = {_plan.structure_key(_case(lo=lo)) for lo in (0.0, -0.0, 0, False)}
    assert len(keys) == 4


def test_cases_with_a_user_op_or_an_array_param_have_no_plan():
    sq = gs.Op("plans_sq", forward=lambda x: x * x, vjp=lambda g, x, out: (2 * g * x,), torch=lambda x: x * x)
    user = gs.Case.build({"x": np.array([1.0, 2.0])}, [("y", sq.name, ["x"], {})], ["y"], [np.ones(2)])
    assert _plan.plan(user) is None
    nan = _case(lo=float("nan"))
    assert _plan.structure_key(nan) is None


def test_an_edited_case_is_answered_from_its_new_structure():
    case = _case()
    before = _answer(gs.oracles.get("reference"), case)
    case.nodes[1].params = dict(_case(dim=1).nodes[1].params)  # (sum over the other dim: another structure)
    assert _plan.plan(case) is _plan.plan(_case(dim=1))
    after = _answer(gs.oracles.get("reference"), case)
    assert after != before
    assert after == _answer(gs.oracles.get("reference"), _case(dim=1))


def test_a_corrupted_engine_reaches_the_reference_oracle():
    """Tests corrupt the engine on purpose (tests/test_mutations.py): the plan's replay must not hide them."""
    case = gs.Case.build({"x": np.array([[1.0, 2.0]]), "w": np.array([[1.0], [3.0]])},
                         [("y", "mul", ["x", "w"], {})], ["y"], [np.ones((2, 2))])
    ref = gs.oracles.get("reference")
    good = ref.vjp(case)["x"]
    original = E._reduce_to

    def mean_instead(g, inp, node, index):  # (a broadcast gradient averaged, not summed)
        out = original(g, inp, node, index)
        return out * (1.0 / 2) if g.shape != inp.shape else out

    E._reduce_to = mean_instead
    try:
        bad = ref.vjp(case)["x"]
    finally:
        E._reduce_to = original
    np.testing.assert_array_equal(bad, good / 2)


def test_a_planted_vjp_rule_reaches_the_reference_oracle():
    case = gs.Case.build({"x": np.array([1.0, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    ref = gs.oracles.get("reference")
    good = ref.vjp(case)["x"]
    spec = gs.ops.get("exp")
    original = spec.vjp
    spec.vjp = lambda g, x, *, out: (g * out * 2,)
    try:
        bad = ref.vjp(case)["x"]
    finally:
        spec.vjp = original
    np.testing.assert_array_equal(bad, 2 * good)


def test_errors_are_the_engines_own():
    """A seed of the wrong shape, a root without grad: the engine's error, whatever the plan holds."""
    case = _case()
    ref = gs.oracles.get("reference")
    _answer(ref, case)  # (the structure's plan exists)
    wrong = _case()
    wrong.seeds = [np.ones(3)]
    with _no_plans():
        want = _answer(ref, wrong)
    assert want[0] == "raised" and _answer(ref, wrong) == want
    nograd = gs.Case.build({"x": np.array([1.0, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)],
                           requires_grad={"x": False})
    with _no_plans():
        want = _answer(ref, nograd)
    assert _answer(ref, nograd) == want


@pytest.mark.parametrize("flags", [(np.False_, np.True_), (0, 1), (1, 0)], ids=["np.bool_", "int 0 then 1", "int 1 then 0"])
def test_requires_grad_given_as_another_truthy_type_is_its_own_structure(flags):
    """requires_grad=np.False_ / 0 then np.True_ / 1 on one structure (review F1: the key folded every non-bool
    flag to one value, and the second case was answered with the first's leaves to differentiate: x's gradient
    missing, gs.check raising in its comparison)."""
    def mk(rg):
        return gs.Case.build({"x": np.array([0.5, 2.0]), "w": np.array([1.5, -1.0])},
                             [("y", "mul", ["x", "w"], {}), ("z", "sum", ["y"], {})], ["z"],
                             requires_grad={"x": rg, "w": True})
    for rg in flags:
        _same_answers(mk(rg))
    assert gs.check(mk(flags[-1]), oracles=["reference", "jacobian", "finite-differences"]).status == "agree"
