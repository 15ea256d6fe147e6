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
from gradspec import diagnose
from tests import _planted as P

try:  # the engine oracle's home moves with the pipeline layout
    from gradspec.oracles.engine_oracle import EngineOracle
except ImportError:  # pragma: no cover
    from gradspec.verify import EngineOracle

RNG = np.random.default_rng(7)


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
    "op-wrong-torch-twin": (P.pl_sin_badtorch, P.pl_sin_ok, {"x": M23}, None, ("twin-mismatch", "y", None), None),
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


@pytest.mark.parametrize("bug", list(OP_CASES), ids=list(OP_CASES))
def test_correct_twin_agrees(bug):
    _, twin, inputs, params, _, _ = OP_CASES[bug]
    v = _run(twin, inputs, params)
    assert v.ok, str(v)
