"""Elementwise ops vs torch: forward, VJP and double backward (float64), batched forward and JVP,
and whether the op saves tensors (second backward without retain_graph), on hand-picked inputs:
broadcasting, size-1 and 0-size dims, 0-d tensors, ties and kinks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gradspec as gs
from tests._compare import check_batched_and_jvp, check_op

R = np.random.default_rng(7)


def pos(*shape):
    return R.uniform(0.5, 2.0, shape)


def real(*shape):
    return R.standard_normal(shape)


UNARY_REAL = ["neg", "exp", "expm1", "sin", "cos", "tanh", "sigmoid", "relu", "leaky_relu", "elu", "softplus",
              "gelu", "abs", "square", "erf", "clamp"]
UNARY_POS = ["log", "log1p", "sqrt", "rsqrt", "reciprocal"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "atan2", "pow"]
SHAPES = [((2, 3),), ((),), ((1, 3),), ((0, 3),), ((2, 1, 3),)]
BINARY_SHAPES = [((2, 3), (3,)), ((2, 1), (1, 4)), ((), (2, 3)), ((1,), ()), ((0, 3), (1, 3)), ((2, 3), (2, 3))]

PARAMS = {
    "leaky_relu": [{"negative_slope": 0.2}, {"negative_slope": -0.5}],
    "elu": [{"alpha": 0.5}],
    "softplus": [{"beta": 2.0, "threshold": 1.0}],
    "gelu": [{"approximate": "none"}, {"approximate": "tanh"}],
    "clamp": [{"min": -0.5, "max": 0.5}, {"min": 0.0, "max": None}, {"min": None, "max": 0.3}],
}


def _unary_cases():
    for op in UNARY_REAL + UNARY_POS:
        for (shape,) in SHAPES:
            for p in PARAMS.get(op, [{}]):
                x = pos(*shape) if op in UNARY_POS else real(*shape)
                if op == "tan":
                    x = R.uniform(-1, 1, shape)
                yield pytest.param(op, [x], p, id=f"{op}-{shape}-{p}")
    yield pytest.param("tan", [R.uniform(-1.2, 1.2, (2, 3))], {}, id="tan")


def _binary_cases():
    for op in BINARY:
        for sa, sb in BINARY_SHAPES:
            a = pos(*sa) if op == "pow" else real(*sa)
            b = R.uniform(-2, 2, sb) if op == "pow" else (pos(*sb) if op in ("div", "atan2") else real(*sb))
            if op == "atan2":
                a, b = pos(*sa), real(*sb)
            yield pytest.param(op, [a, b], {}, id=f"{op}-{sa}-{sb}")


# Ties, kinks and singular points with torch's conventions (reference section 9).
KINKS = [
    pytest.param("abs", [np.array([-1.0, 0.0, 2.0])], {}, id="abs-at-0"),
    pytest.param("relu", [np.array([-1.0, 0.0, 2.0])], {}, id="relu-at-0"),
    pytest.param("leaky_relu", [np.array([-1.0, 0.0, 2.0])], {"negative_slope": 0.1}, id="leaky_relu-at-0"),
    pytest.param("elu", [np.array([-1.0, 0.0, 2.0])], {"alpha": 2.0}, id="elu-at-0"),
    pytest.param("clamp", [np.array([-1.0, -0.5, 0.0, 0.5, 1.0])], {"min": -0.5, "max": 0.5}, id="clamp-at-bounds"),
    pytest.param("maximum", [np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.0])], {}, id="maximum-ties"),
    pytest.param("minimum", [np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.0])], {}, id="minimum-ties"),
    pytest.param("maximum", [np.array([-1.0, 0.0, 1.0]), np.array(0.0)], {}, id="maximum-broadcast-tie"),
    pytest.param("pow", [np.array([0.0, 0.0, 2.0]), np.array([0.0, 2.0, 0.0])], {}, id="pow-0-0"),
    pytest.param("sqrt", [np.array([0.0, 4.0])], {}, id="sqrt-at-0"),
    pytest.param("log", [np.array([0.0, 1.0])], {}, id="log-at-0"),
    pytest.param("sigmoid", [np.array([1000.0, -1000.0, 0.0])], {}, id="sigmoid-saturation"),
    pytest.param("exp", [np.array([1000.0, -1000.0])], {}, id="exp-overflow"),
    *[pytest.param("pow_scalar", [np.array([0.0, 1.5])], {"exponent": p}, id=f"pow_scalar-{p}-at-0")
      for p in (0, 1, 2, 0.5, -1)],
]


@pytest.mark.parametrize("op, arrays, params", [*_unary_cases(), *_binary_cases(), *KINKS])
def test_forward_vjp_and_double_backward_equal_torch(op, arrays, params):
    check_op(op, arrays, params)


@pytest.mark.parametrize("op, arrays, params", [*_unary_cases(), *_binary_cases()])
def test_batched_forward_and_jvp(op, arrays, params):
    check_batched_and_jvp(op, arrays, params)


def test_where_routes_gradients_and_broadcasts():
    cond = np.array([[True], [False]])
    check_op("where", [cond, real(3), real(2, 3)])
    check_batched_and_jvp("where", [cond, real(3), real(2, 3)])


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -1, 1.5, 0, 1])
def test_pow_scalar(exponent):
    check_op("pow_scalar", [pos(2, 3)], {"exponent": exponent})
    check_batched_and_jvp("pow_scalar", [pos(2, 3)], {"exponent": exponent})


def _second_backward_raises(make, x):
    y = make(x).sum()
    y.backward()
    try:
        y.backward()
    except RuntimeError:
        return True
    return False


@pytest.mark.parametrize("op", UNARY_REAL + UNARY_POS + BINARY)
def test_saves_tensors_exactly_where_torch_does(op):
    spec = gs.ops.get(op)
    p = PARAMS.get(op, [{}])[0]
    n_in = spec.arity
    vals = [pos(3) for _ in range(n_in)]
    ours = _second_backward_raises(lambda x: gs.engine.apply(spec, [x] + [gs.tensor(v) for v in vals[1:]], p),
                                   gs.tensor(vals[0], requires_grad=True))
    theirs = _second_backward_raises(lambda x: spec.torch(x, *[torch.tensor(v) for v in vals[1:]], **spec.canonical(
        [v.shape for v in vals], p)), torch.tensor(vals[0], requires_grad=True))
    assert ours == theirs, f"{op}: second backward raises in gradspec={ours}, torch={theirs}"


def test_python_scalars_keep_float32():
    x = gs.tensor(np.float32([1.0, 2.0]), requires_grad=True)
    y = x * 2 + 1
    assert y.dtype == np.float32
    y.sum().backward()
    assert x.grad.dtype == np.float32 and np.array_equal(x.grad.numpy(), np.float32([2, 2]))
