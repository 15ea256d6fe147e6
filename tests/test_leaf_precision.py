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


# The rounding-noise floor measured inside table ops: a new user's fuzz run (tryout4) found reference vs torch-cpu
# disagreeing at 1.85e-12 relative on tanh at x = -6.16 (1 - tanh^2 = 1.8e-5 cancels: one ulp of tanh is 1.2e-11 of
# it), with a noise floor of 6e-21 because only each op's output was jittered, not what its own code computes.
TANH_CASE = """{"format": "gradspec-case/1", "engine": "reference", "user_ops": {}, "leaves": [
 {"name": "x0", "requires_grad": true, "value": {"dtype": "float64", "shape": [], "data": ["0x1.37a0f63a9fbe9p+2"]}},
 {"name": "x1", "requires_grad": true, "value": {"dtype": "float64", "shape": [], "data": ["0x1.1ff14a3c3d0f5p-4"]}},
 {"name": "x2", "requires_grad": true, "value": {"dtype": "float64", "shape": [1, 3],
  "data": ["-0x1.231ad1e3020c5p+3", "0x1.0000000000000p-1", "-0x1.0b48e9ded9168p+2"]}},
 {"name": "x3", "requires_grad": true, "value": {"dtype": "float64", "shape": [2],
  "data": ["-0x1.4000000000000p+3", "-0x1.8a7ca627ced91p+2"]}}],
 "nodes": [{"name": "v0", "op": "add", "inputs": ["x0", "x1"], "params": {}},
  {"name": "v1", "op": "sum", "inputs": ["v0"], "params": {"dim": [], "keepdim": false}},
  {"name": "v2", "op": "add", "inputs": ["x2", "x1"], "params": {}},
  {"name": "v3", "op": "neg", "inputs": ["x3"], "params": {}},
  {"name": "v4", "op": "add", "inputs": ["v1", "x1"], "params": {}},
  {"name": "v5", "op": "sum", "inputs": ["v0"], "params": {"dim": [], "keepdim": false}},
  {"name": "v6", "op": "tanh", "inputs": ["x3"], "params": {}},
  {"name": "v7", "op": "sub", "inputs": ["v1", "x1"], "params": {}},
  {"name": "v8", "op": "mul", "inputs": ["v3", "v5"], "params": {}},
  {"name": "v9", "op": "exp", "inputs": ["v3"], "params": {}}],
 "roots": ["v6"], "seeds": [{"dtype": "float64", "shape": [2], "data": ["0x1.0000000000000p-1", "-0x1.97d345afd3f4bp-2"]}]}"""


def test_rounding_noise_inside_a_table_op_covers_its_cancellation():
    from gradspec._check_noise import rounding_noise

    case = gs.Case.from_json(TANH_CASE)
    v = gs.check(case)
    assert v.status == "agree", v.summary()
    # the floor is what one ulp of tanh does to 1 - tanh^2 there (~1e-16 absolute on a 7e-6 gradient), not 6e-21;
    # and it stays far below a real error of 1e-6 relative (7e-12 absolute)
    noise = rounding_noise(case)["x3"][1]
    assert 1e-17 < noise < 1e-13


# A float32 node computed from constants only (norm of a float32 constant) is a factor of a float64 leaf's gradient:
# d(v0 / x1)/dx1 = -v0 / x1^2 holds v0's float32 rounding.  FD's batched float32 sum gave v0 one ulp away from the
# reference's (2.2e-7 of the gradient, above a float64 tolerance: a false alarm in drawrate's soak), and the rounding
# noise left it exact because norm is a kinked op (whose VJP compares outputs with inputs) -- but no gradient flows
# through a constant node, so it is jittered like any other now.
_X0 = np.array([62.79, -1.353, -179.7, 3.069, -9.567, -3.0, 1000.0, 2.0], dtype=np.float32).reshape(4, 2)
gs.Op("lp_div_b1e4", forward=lambda a, b: a / b, vjp=lambda g, a, b, out: (g / b, -g * a / (b * b) * (1 + 1e-4)),
      torch=lambda a, b: a / b)


@pytest.mark.parametrize("op, status", [pytest.param("div", "agree", id="correct-div"),
                                        pytest.param("lp_div_b1e4", "disagree", id="div-vjp-off-1e-4")])
def test_a_float32_constant_node_as_a_factor_of_a_float64_gradient(op, status):
    x1 = np.array(-3.1927919126316313)
    case = gs.Case.build({"x0": _X0, "x1": x1}, [("v0", "norm", ["x0"], {"p": 3.0, "dim": [-2, -1], "keepdim": False}),
                                               ("v2", op, ["v0", "x1"], {})], ["v2"], [None],
                         requires_grad={"x0": False})
    v = gs.check(case)
    assert v.status == status, v.summary()
