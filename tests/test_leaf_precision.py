"""Each differentiated leaf's gradient is compared at the precision it is computed at, not the case's lowest.

x64 * c32 is float64 in torch and in the engine: x's gradient is float64 arithmetic even though c's is cast to
float32.  Held to float32 precision because c is float32, a 3e-6 error in x's VJP read ``agree``.  A float32
node on x's path (or feeding it, computed from a perturbed leaf) does round x's gradient: there float32
precision stays, or finite differences (which evaluate perturbed leaves in float64) would cry wolf.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import gradspec as gs

C = importlib.import_module("gradspec.check")  # (gs.check is the function)


def _mul_vjp(err_x=0.0, err_c=0.0):
    return lambda g, x, c, out: (g * c * (1 + err_x), g * x * (1 + err_c))


for _name, _ex, _ec in [("lp_mul_ok", 0.0, 0.0), ("lp_mul_x3e6", 3e-6, 0.0), ("lp_mul_c1e3", 0.0, 1e-3)]:
    gs.Op(_name, forward=lambda x, c: x * c, vjp=_mul_vjp(_ex, _ec), torch=lambda x, c: x * c)


def _mixed(op, seed, cdtype=np.float32, c_grad=True):
    rng = np.random.default_rng(seed)
    x, c = rng.normal(size=(3,)), rng.normal(size=(3,)).astype(cdtype)
    return gs.Case.build({"x": x, "c": c}, [("y", op, ["x", "c"], {})], ["y"], [rng.normal(size=(3,))],
                         requires_grad={"x": True, "c": c_grad})


VERDICTS = [
    pytest.param("lp_mul_ok", "agree", id="correct-x64-beside-c32"),
    pytest.param("lp_mul_x3e6", "disagree", id="x64-vjp-off-3e-6-beside-c32"),  # read agree before
    pytest.param("lp_mul_c1e3", "disagree", id="c32-vjp-off-1e-3"),
]


@pytest.mark.parametrize("op, status", VERDICTS)
@pytest.mark.parametrize("seed", range(5))
def test_a_float64_leaf_is_not_judged_at_a_float32_neighbours_precision(op, status, seed):
    v = gs.check(_mixed(op, seed))
    assert v.status == status, v.summary()
    if status == "disagree":
        wrong = "x" if op == "lp_mul_x3e6" else "c"
        assert {d.leaf for d in v.discrepancies if d.kind == "value"} == {wrong}


# Which leaves' gradients are rounded in float32, by torch's promotion (a 0-dim tensor does not win over a
# dimensioned one), worked out by hand for each graph.
PRECISIONS = [
    pytest.param({"x": (3,), "c": ("f32", 3)}, [("y", "mul", ["x", "c"])], {"x": "float64", "c": "float32"},
                 id="x64*c32-is-float64"),
    pytest.param({"x": (3,), "c": ("f32", 3)}, [("z", "mul", ["c", "c"]), ("y", "mul", ["x", "z"])],
                 {"x": "float32", "c": "float32"}, id="float32-node-from-c-feeds-x's-path"),
    pytest.param({"x": (), "c": ("f32", 3)}, [("y", "mul", ["x", "c"])], {"x": "float32", "c": "float32"},
                 id="0-dim-x64*c32-is-float32"),
    pytest.param({"x": (3,), "k": ("f32const", 3)}, [("z", "mul", ["k", "k"]), ("y", "mul", ["x", "z"])],
                 {"x": "float64"}, id="float32-constant-only-node-rounds-what-fd-rounds"),
    pytest.param({"x": (3,), "w": (3,), "c": ("f32", 3)}, [("z", "exp", ["c"]), ("u", "mul", ["w", "z"]),
                                                           ("y", "add", ["x", "x"])],
                 {"x": "float64", "w": "float32", "c": "float32"}, id="separate-branches"),
]


@pytest.mark.parametrize("leaves, nodes, want", PRECISIONS)
def test_leaf_precisions(leaves, nodes, want):
    rng = np.random.default_rng(0)
    vals, rg = {}, {}
    for name, spec in leaves.items():
        kind = spec[0] if spec and isinstance(spec[0], str) else "f64"
        shape = tuple(spec[1:]) if kind != "f64" else tuple(spec)
        vals[name] = rng.normal(size=shape).astype(np.float64 if kind == "f64" else np.float32)
        rg[name] = kind != "f32const"
    roots = [n[0] for n in nodes if all(n[0] not in m[2] for m in nodes)]
    seeds = [np.ones(3)] * len(roots)  # (every root of these elementwise graphs has shape (3,))
    case = gs.Case.build(vals, [(n, op, ins, {}) for n, op, ins in nodes], roots, seeds, requires_grad=rg)
    assert C._leaf_precisions(case) == want
