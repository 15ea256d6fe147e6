"""Localisation (CONTRACT §8, ``gradspec.diagnose``): every planted gradient bug of ``tests/_planted.py``
is blamed on the right node, with the right cause id and error pattern; the correct twins agree.

Ops are checked inside small graphs built here (the buggy node in the middle: a tanh feeds it and a
random weight multiplies its output, so the upstream gradient it receives is neither ones nor
constant); torch Functions through ``gs.verify_torch_function`` (the path that wraps them); engines
through ``gs.check`` with the engine as an oracle (the black-box bisection).
"""

from __future__ import annotations

import numpy as np
import pytest

import gradspec as gs
from gradspec import diagnose, search
from tests import _planted as P

try:  # the engine oracle's home moves with the pipeline layout
    from gradspec.oracles.engine_oracle import EngineOracle
except ImportError:  # pragma: no cover
    from gradspec.verify import EngineOracle

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _short_shrinking(monkeypatch):
    # CI speed: a shorter (still deterministic) shrinking budget than a user's default.
    monkeypatch.setattr(search, "SHRINK_CALLS", 25)


def _graph(op, inputs: dict, params=None, through_tanh=("x",)):
    """leaves -> (tanh of the named ones) -> op -> * w -> sum: the op sits mid-graph."""
    leaves, nodes, names = {}, [], []
    for name, value in inputs.items():
        leaves[name] = np.asarray(value, dtype=np.float64)
        if name in through_tanh:
            nodes.append((f"t_{name}", "tanh", [name], {}))
            names.append(f"t_{name}")
        else:
            names.append(name)
    nodes.append(("y", op.name, names, params or {}))
    shape = _shape(leaves, nodes)
    leaves["w"] = RNG.uniform(0.5, 1.5, shape) * RNG.choice([-1.0, 1.0], shape)
    nodes += [("q", "mul", ["y", "w"], {}), ("s", "sum", ["q"], {})]
    return gs.Case.build(leaves, nodes, ["s"], requires_grad={"w": False})


def _shape(leaves, nodes) -> tuple:
    probe = gs.Case(leaves=[gs.case.Leaf(k, v) for k, v in leaves.items()],
                    nodes=[gs.case.NodeDef(*n) for n in nodes], roots=["y"], seeds=[None])
    probe.canonicalize()
    return probe.shapes()["y"]


M23 = [[0.3, -1.2, 0.8], [1.5, 0.4, -0.7]]
SQ = [[0.3, -1.2, 0.8], [1.5, 0.4, -0.7], [0.9, -0.2, 1.1]]
A3 = np.arange(1.0, 13.0).reshape(2, 2, 3) / 7 - 0.8
B32 = [[0.5, -1.0], [1.5, 0.25], [-0.75, 2.0]]
CUBE = np.arange(1.0, 9.0).reshape(2, 2, 2) / 5 - 0.9

# (bug, correct twin, inputs, params, expected (id, node, pattern), factor or None)
OP_CASES = {
    "op-broadcast-first-slice": (P.pl_mul_slice, P.pl_mul_ok, {"x": M23, "b": [0.5, -2.0, 1.5]}, None,
                                 ("wrong-vjp", "y", "broadcast-reduction"), None),
    "op-matmul-batch-dims": (P.pl_bmm_batch0, P.pl_bmm_ok, {"x": A3, "b": B32}, None,
                             ("wrong-vjp", "y", "broadcast-reduction"), None),
    "op-seed-ignored": (P.pl_sq_noseed, P.pl_sq_ok, {"x": M23}, None, ("wrong-vjp", "y", "seed-ignored"), None),
    "op-seed-mean": (P.pl_sq_seedmean, P.pl_sq_ok, {"x": M23}, None, ("wrong-vjp", "y", "seed-ignored"), None),
    "op-missing-unsqueeze": (P.pl_lse_nounsq, P.pl_lse_ok, {"x": SQ}, None, ("wrong-vjp", "y", "permuted"), None),
    "op-normalisation": (P.pl_mean_norm, P.pl_mean_ok, {"x": M23}, None, ("wrong-vjp", "y", "scale"), 1.5),
    "op-inverse-permutation": (P.pl_perm_inv, P.pl_perm_ok, {"x": CUBE}, {"p": (1, 2, 0)},
                               ("wrong-vjp", "y", "permuted"), None),
    "op-scatter-duplicates": (P.pl_take_assign, P.pl_take_ok, {"x": M23}, {"idx": (0, 2, 0)},
                              ("wrong-vjp", "y", "other"), None),
    "op-prod-zeros": (P.pl_prod_div, P.pl_prod_ok, {"x": [[0.0, 1.5, -0.5], [0.3, 0.2, 0.1]]}, None,
                      ("wrong-vjp", "y", "other"), None),
    "op-sign-negative": (P.pl_xabsx_sign, P.pl_xabsx_ok, {"x": M23}, None, ("wrong-vjp", "y", "sign"), None),
    "op-above-size-4": (P.pl_cumsum_win, P.pl_cumsum_ok, {"x": [[0.1, 0.2, -0.3, 0.4, 0.5, -0.6]]}, None,
                        ("wrong-vjp", "y", "other"), None),
    "op-relative-1e-6": (P.pl_exp_1e6, P.pl_exp_ok, {"x": M23}, None, ("wrong-vjp", "y", "scale"), 1 + 1e-6),
    "op-wrong-jvp": (P.pl_sq_badjvp, P.pl_sq_goodjvp, {"x": M23}, None, ("wrong-jvp", "y", "scale"), 0.5),
    "op-soft-threshold-param": (P.pl_soft_nolam, P.pl_soft_ok, {"x": [[0.3, -1.2, 0.8], [1.5, 0.05, -0.7]]},
                                {"lam": 0.5}, ("wrong-vjp", "y", "other"), None),
}


def _run(op, inputs, params):
    return gs.check(_graph(op, inputs, params))


@pytest.mark.parametrize("bug", list(OP_CASES), ids=list(OP_CASES))
def test_op_bug_is_localised(bug):
    op, _, inputs, params, (cid, node, pattern), factor = OP_CASES[bug]
    v = _run(op, inputs, params)
    assert v.discrepancies, f"{bug}: the planted bug was not even found\n{v}"
    for d in v.discrepancies:
        c = d.cause
        assert c is not None, d.message
        assert (c.id, c.node, c.pattern) == (cid, node, pattern), f"{bug}: {c}\n{c.evidence}"
        assert c.op == op.name
        if factor is not None:
            # the fitted factor is a ratio of sums of exact products (twin: the JVP or FD-JVP, 1e-9)
            assert c.factor == pytest.approx(factor, rel=1e-9), c
        assert c.summary.startswith(f"node {node} = {op.name}(")


def test_wrong_torch_twin_is_a_note_naming_the_node():
    v = _run(P.pl_sin_badtorch, {"x": M23}, None)
    assert v.ok, str(v)  # the vjp is right; torch's gradient does not count where its twin is another function
    (c,) = [n for n in v.notes if getattr(n, "id", None) == "twin-mismatch"]
    assert (c.node, c.op) == ("y", "pl_sin_badtorch")


@pytest.mark.parametrize("bug", list(OP_CASES), ids=list(OP_CASES))
def test_correct_twin_agrees(bug):
    _, twin, inputs, params, _, _ = OP_CASES[bug]
    v = _run(twin, inputs, params)
    assert v.ok, str(v)


# ---------------------------------------------------------------------------------------------
# torch Functions, through verify_torch_function (their backward is the code under test)
# ---------------------------------------------------------------------------------------------

# family -> {finding kind: (cause id, pattern)}; the node is the Function's node, wherever it sits
FN_EXPECTED = {
    "fn-broadcast-first-slice": {"value": ("wrong-vjp", "broadcast-reduction")},
    "fn-seed-ignored": {"value": ("wrong-vjp", "seed-ignored")},
    "fn-seed-mean": {"value": ("wrong-vjp", "seed-ignored")},
    "fn-missing-unsqueeze": {"value": ("wrong-vjp", "permuted"), "vjp-raised": ("wrong-vjp", "other")},
    "fn-normalisation": {"value": ("wrong-vjp", "scale")},
    "fn-inverse-permutation": {"value": ("wrong-vjp", "permuted"), "vjp-raised": ("wrong-vjp", "other")},
    "fn-scatter-duplicates": {"value": ("wrong-vjp", "other")},
    "fn-concat-split": {"vjp-raised": ("wrong-vjp", "other")},
    "fn-prod-zeros": {"nan-inf-pattern": ("wrong-vjp", "other")},
    "fn-sign-negative": {"value": ("wrong-vjp", "sign")},
    "fn-above-size-4": {"value": ("wrong-vjp", "other")},
    "fn-relative-1e-6": {"value": ("wrong-vjp", "scale")},
    "fn-stateful": {"value": ("wrong-vjp", "other")},
    "fn-mutates-ctx": {"accumulation": ("wrong-vjp", "scale")},
    "fn-inplace-grad-output": {"vjp-writes-input": ("wrong-vjp", "other")},
}


@pytest.mark.parametrize("bug", list(FN_EXPECTED), ids=list(FN_EXPECTED))
def test_torch_function_bug_is_localised(bug):
    p = P.BUGS[bug]
    r = gs.verify_torch_function(p.target, **p.kwargs, max_examples=30, seed=0)
    want = FN_EXPECTED[bug]
    seen = [d for d in r.discrepancies if d.kind in want]
    assert seen, f"{bug}: none of {sorted(want)} found\n{r}"
    cls = p.target.__self__.__name__
    for d in seen:
        c = d.cause
        assert c is not None, d.message
        assert (c.id, c.pattern) == want[d.kind], f"{bug} [{d.kind}]: {c}\n{c.evidence}"
        assert c.op == f"torch_{cls}" and c.node in {n.name for n in d.case.nodes if n.op == c.op}, c
        assert f"{cls}.backward" in c.summary, c.summary


def test_scale_factor_of_a_normalisation_bug_is_named():
    c = next(d.cause for d in gs.verify_torch_function(P.MeanNorm.apply, signature="(n)->()", max_examples=30,
                                                      seed=0).discrepancies if d.kind == "value")
    n = round(c.factor / (c.factor - 1))  # factor n/(n-1): divided by n-1 where n was meant
    assert c.factor == pytest.approx(n / (n - 1), rel=1e-12) and f"n/(n-1) with n = {n}" in c.summary


@pytest.mark.parametrize("c, dims, text", [
    (0.75, (4, 3), "(n-1)/n with n = 4"), (0.5, (), "1/2"), (2.0, (5,), "2"), (1 / 3, (3,), "1/3"),
    (1.25, (5,), "n/(n-1) with n = 5"), (1 / 6, (6, 2), "1/6"), (1 + 1e-6, (), "1 + 1e-06"), (0.7391, (4,), ""),
], ids=str)
def test_name_factor(c, dims, text):
    assert diagnose.name_factor(c, dims) == text


# ---------------------------------------------------------------------------------------------
# engines: a black box, bisected node by node
# ---------------------------------------------------------------------------------------------

ENGINE_CASE = dict(
    leaves={"x": np.array([0.5, -1.0, 2.0]), "w": np.array([1.0, 2.0, 3.0])},
    nodes=[("h", "mul", ["x", "w"], {}), ("k", "add", ["h", "h"], {}), ("t", "tanh", ["k"], {}),
           ("y", "sum", ["t"], {})],
    roots=["y", "t"],
    seeds=[None, np.array([1.0, -2.0, 0.5])],
)
# engine -> (cause id, node, pattern, factor)
ENGINE_EXPECTED = {
    "engine-seed-ignored": ("seed-ignored", None, None, None),
    "engine-repeated-arguments": ("repeated-input-dropped", "k", None, None),
    "engine-sum-relative-1e-6": ("wrong-vjp", "y", "scale", 1 + 1e-6),
}


@pytest.mark.parametrize("bug", list(ENGINE_EXPECTED), ids=list(ENGINE_EXPECTED))
def test_engine_value_bug_is_diagnosed(bug):
    eo = EngineOracle(P.BUGS[bug].target())
    v = gs.check(gs.Case.build(**ENGINE_CASE), oracles=[eo, "reference", "jacobian"])
    mine = [d for d in v.discrepancies if eo.name in d.oracles]
    assert mine, str(v)
    cid, node, pattern, factor = ENGINE_EXPECTED[bug]
    for d in mine:
        c = d.cause
        assert (c.id, c.node, c.pattern) == (cid, node, pattern), f"{c}\n{c.evidence}"
        if factor is not None:
            # the engine adds 1e-6 * (out - out.detach()): exact up to the rounding of 1 + 1e-6
            assert c.factor == pytest.approx(factor, rel=1e-12)


def test_correct_engine_agrees():
    v = gs.check(gs.Case.build(**ENGINE_CASE), oracles=[EngineOracle(P.Small()), "reference", "jacobian"])
    assert v.ok, str(v)


def test_diagnosis_runs_only_on_a_disagreement(monkeypatch):
    calls = []
    monkeypatch.setattr(diagnose, "localise", lambda *a, **k: calls.append(a))
    assert gs.check(_graph(P.pl_sq_ok, {"x": M23}, None)).ok and not calls


def test_verify_engine_findings_carry_causes():
    r = gs.verify_engine(P.SumScaled(), max_examples=20, seed=0)
    values = [d for d in r.discrepancies if d.kind == "value" and d.case is not None]
    assert values, str(r)
    for d in values:
        assert (d.cause.id, d.cause.op, d.cause.pattern) == ("wrong-vjp", "sum", "scale"), d.cause
        assert d.cause.factor == pytest.approx(1 + 1e-6, rel=1e-9)
    assert all(d.cause is not None for d in r.discrepancies)


def test_verify_op_contract_breaches_carry_causes():
    r = gs.verify_op(P.pl_add_unreduced, max_examples=20, seed=0)
    d = next(d for d in r.discrepancies if d.kind == "vjp-shape")
    assert (d.cause.id, d.cause.op, d.cause.pattern) == ("wrong-vjp", "pl_add_unreduced", "broadcast-reduction")
    assert d.cause.node in {n.name for n in d.case.nodes if n.op == "pl_add_unreduced"}
