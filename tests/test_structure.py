"""The value sets of one graph share what depends on its structure alone (``gradspec._private.structure``),
computed once per group by the campaign's prefetch.  Sharing must change no verdict, and must never reach a
case of another structure, however alike their shapes."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import gradspec as gs
from gradspec import oracles
from gradspec._private import percase, structure
from gradspec.fuzz.prefetch import Prefetch
from tests.test_percase import _summary

CPU = ["reference", "finite-differences", "jacobian", "torch-cpu"]
_SQ = gs.Op("structure_sq", forward=lambda x: x * x, vjp=lambda g, x, out: (2 * g * x,), torch=lambda x: x * x)


def _case(x=(0.5, -1.5, 2.0, 0.25), w=(1.5, 0.5), op="mul", dim=0, lo=0.0, x_dtype=np.float64, w_grad=True,
          seed_dtype=np.float64, wiring=("x", "w"), clamp="clamp", roots=("z",)):
    """z = sum(op(x, w) [2, 2], dim) [2], then a clamp at ``lo``: every variant below keeps these shapes."""
    x = np.array(x, dtype=x_dtype).reshape(2, 2)
    nodes = [("y", op, list(wiring), {}), ("s", "sum", ["y"], {"dim": dim}), ("z", clamp, ["s"], {"min": lo})]
    seeds = [np.array([1.0, -2.0], dtype=seed_dtype) if r == "z" else np.ones((2, 2)) for r in roots]
    return gs.Case.build({"x": x, "w": np.array(w)}, nodes, list(roots), seeds, requires_grad={"w": w_grad})


VARIANTS = {  # one structural difference each from _case(): never the same structure
    "another op, same shapes": dict(op="add"),
    "another param value (sum over dim 1), same shapes": dict(dim=1),
    "a param of another sign (clamp at -0.0)": dict(lo=-0.0),
    "a param of another type (clamp at int 0)": dict(lo=0),
    "a leaf of another dtype": dict(x_dtype=np.float32),
    "a leaf that requires no grad": dict(w_grad=False),
    "a seed of another dtype": dict(seed_dtype=np.float32),
    "inputs wired the other way": dict(wiring=("w", "x")),
    "another root": dict(roots=("z", "y")),
}


@pytest.mark.parametrize("change", list(VARIANTS), ids=list(VARIANTS))
def test_a_structural_difference_is_never_the_same_structure(change):
    base, other = _case(), _case(**VARIANTS[change])
    assert base.leaves[0].value.shape == other.leaves[0].value.shape
    assert not structure.same(base, other) and not structure.same(other, base)


def test_other_values_and_seed_values_are_the_same_structure():
    a, b = _case(), _case(x=(3.0, 1.0, -2.0, 0.0), w=(-1.0, 4.0))
    b.seeds[0] = np.array([5.0, 6.0])
    assert structure.same(a, b)


def test_a_case_with_a_user_op_shares_with_nothing_not_even_itself():
    case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", _SQ.name, ["x"], {})], ["y"], [np.ones(2)])
    assert not structure.same(case, case)
    twin = copy.deepcopy(case)
    with percase.scope(case), percase.scope(twin):
        assert structure.share([case, twin]) == 0
        calls = []
        for c in (case, twin, case):
            structure.once(c, "k", lambda: calls.append(1))
        assert len(calls) == 2  # once per case (its own memo for its scope), never across the two


def test_share_gives_one_memo_per_structure_and_once_computes_once_per_memo():
    group = [_case(), _case(op="add"), _case(x=(1.0, 2.0, 3.0, 4.0)), _case(op="add", w=(2.0, 2.0)), _case(dim=1)]
    scopes = [percase.scope(c) for c in group]
    for s in scopes:
        s.__enter__()
    try:
        assert structure.share(group) == 3
        calls = []
        got = [structure.once(c, "ops", lambda c=c: calls.append(c) or tuple(c.ops)) for c in group]
        assert [c.ops[0] for c in calls] == ["mul", "add", "mul"]  # the 1st, 2nd and 5th sets computed it
        assert got[0] == got[2] and got[1] == got[3] and got[0] != got[1]
    finally:
        for s in reversed(scopes):
            s.__exit__(None, None, None)
    calls = []
    structure.once(group[0], "ops", lambda: calls.append(1))
    structure.once(group[0], "ops", lambda: calls.append(1))
    assert len(calls) == 2  # outside a scope: nothing kept


def _mixed_group():
    """Sets of four structures with equal shapes, interleaved: a kink that FD watches (clamp) or not (an
    add after the sum: no watch plan), a float32 leaf (its precision flow), another op, another dim."""
    rng = np.random.default_rng(5)
    out = []
    for _ in range(3):
        x, w = tuple(rng.uniform(-3, 3, 4)), tuple(rng.uniform(-3, 3, 2))
        out += [_case(x=x, w=w), _case(x=x, w=w, op="add", dim=1), _case(x=x, w=w, x_dtype=np.float32),
                _case(x=x, w=w, lo=-5.0, clamp="clamp")]
    return out


def test_a_prefetched_group_of_several_structures_gets_the_verdicts_of_each_set_checked_alone():
    group = _mixed_group()
    alone = [_summary(gs.check(copy.deepcopy(c), oracles=CPU)) for c in group]
    p = Prefetch([oracles.get(n) for n in CPU], timeout=None)
    assert p.run(group) == len(group)
    memos = [percase.active(c)[structure._KEY] for c in group]
    assert len({id(m) for m in memos}) == 4  # four structures (the clamp at -5.0 is its own: another param)
    assert memos[0] is memos[4] and memos[0] is not memos[1]
    fetched = []
    for c in group:
        fetched.append(_summary(gs.check(c, oracles=p.oracles)))
        p.release(c)
        assert percase.active(c) is None  # its memo closed with its check
    assert fetched == alone
    assert {"agree"} <= {s["status"] for s in fetched}


def test_the_prefetch_keeps_each_memo_open_until_its_check_and_clear_closes_the_rest():
    group = _mixed_group()[:4]
    p = Prefetch([oracles.get(n) for n in CPU], timeout=None)
    p.run(group)
    assert all(percase.active(c) is not None and "forward" in percase.active(c) for c in group)
    p.release(group[0])
    assert percase.active(group[0]) is None and percase.active(group[1]) is not None
    p.clear()
    assert all(percase.active(c) is None for c in group)


def test_checks_of_one_structure_keep_its_lasting_facts_and_only_those(monkeypatch):
    """``gs.check`` alone (no group): a fact in ``structure.LASTING`` (here which ops lack a JVP rule) is computed
    on the first check of a structure and kept for the next checks of that structure (other values), never for
    another structure, and gives the same verdicts; a fact outside it (the leaves' float32 flow, which runs a VJP
    rule on the values) is computed again on every check."""
    from gradspec import _check_precision
    from gradspec.oracles import _plan, jacobian

    monkeypatch.setattr(_plan, "_PLANS", {})  # (no plan kept from another test)
    no_jvp, flows = [], []
    real_no_jvp, real_flow = jacobian._no_jvp, _check_precision._precision_flow
    monkeypatch.setattr(jacobian, "_no_jvp", lambda case: no_jvp.append(case) or real_no_jvp(case))
    monkeypatch.setattr(_check_precision, "_precision_flow", lambda *a: flows.append(a) or real_flow(*a))
    # (a float64 leaf w beside a float32 x: the precision flow runs on every check)
    cases = [_case(x=x, x_dtype=np.float32) for x in ((0.5, -1.5, 2.0, 0.25), (1.0, 2.0, 3.0, 4.0))]
    cases += [_case(x=(1.0, 2.0, 3.0, 4.0), op="add", x_dtype=np.float32)]
    before = []
    for c in cases:
        with monkeypatch.context() as m:
            m.setattr(structure, "adopt", lambda case, facts: None)  # (nothing kept: the code before)
            before.append(_summary(gs.check(c, oracles=CPU)))
    no_jvp.clear()
    flows.clear()
    after = [_summary(gs.check(c, oracles=CPU)) for c in cases + cases]
    assert after == before + before
    assert [c.ops[0] for c in no_jvp] == ["mul", "add"]  # once per structure, over six checks
    assert len(flows) == 6
