"""The reductions family (sum, mean, prod, amax, amin, max, min, logsumexp, var, std, norm) vs torch.

Every case goes through ``check_op`` (forward, VJP and double backward equal torch's in float64)
and ``check_batched_and_jvp`` (batched forward and the forward-mode rule); hand-picked inputs
cover dim None / int / negative / tuple, keepdim, 0-d inputs, size-1 and size-0 dims, ties,
zeros in prod, norms at the zero vector, logsumexp with infinities and zero degrees of freedom.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import gradspec as gs
from gradspec.engine import apply

from ._compare import assert_close, check_batched_and_jvp, check_op

INF = float("inf")
NAN = float("nan")
R = np.random.default_rng(1234)
A23 = R.standard_normal((2, 3))
A234 = R.standard_normal((2, 3, 4))
POS23 = R.uniform(0.5, 2.0, (2, 3))
S0 = np.array(0.7)  # 0-d
TIES = np.array([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 0.0]])  # reference 9.1 / 9.2
ZEROS_PROD = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 5.0], [1.0, 2.0, 3.0]])  # reference 9.9b


def case(op, arrays, params=None, *, id):
    return pytest.param(op, [np.asarray(a, dtype=np.float64) for a in arrays], params or {}, id=id)


CASES = [
    # sum / mean
    case("sum", [A234], {"dim": (0, 2)}, id="sum-tuple"),
    case("mean", [A234], {}, id="mean-all"),
    case("mean", [A234], {"dim": 1}, id="mean-dim1"),
    case("mean", [A234], {"dim": -1, "keepdim": True}, id="mean-neg-keepdim"),
    case("mean", [A234], {"dim": (0, 2)}, id="mean-tuple"),
    case("mean", [A234], {"dim": (2, 0), "keepdim": True}, id="mean-tuple-unsorted-keepdim"),
    case("mean", [S0], {}, id="mean-0d"),
    case("mean", [np.ones((3, 1))], {"dim": 1}, id="mean-size1-dim"),
    case("mean", [np.zeros((0, 3))], {}, id="mean-empty-all"),
    case("mean", [np.zeros((0, 3))], {"dim": 0}, id="mean-empty-dim"),
    case("mean", [np.zeros((0, 3))], {"dim": 1}, id="mean-zero-rows"),
    # prod
    case("prod", [POS23], {}, id="prod-all"),
    case("prod", [A234], {"dim": 1}, id="prod-dim1"),
    case("prod", [A234], {"dim": -1, "keepdim": True}, id="prod-neg-keepdim"),
    case("prod", [A234], {}, id="prod-all-3d"),
    case("prod", [S0], {}, id="prod-0d"),
    case("prod", [S0], {"dim": 0, "keepdim": True}, id="prod-0d-dim"),
    case("prod", [np.ones((3, 1)) * 2], {"dim": 1}, id="prod-size1-dim"),
    case("prod", [[2.0, 0.0, 3.0]], {}, id="prod-one-zero"),
    case("prod", [[0.0, 0.0, 3.0]], {}, id="prod-two-zeros"),
    case("prod", [[0.0, 0.0, 0.0, 3.0]], {}, id="prod-three-zeros"),
    case("prod", [ZEROS_PROD], {"dim": 1}, id="prod-zeros-dim"),
    case("prod", [ZEROS_PROD], {"dim": 0, "keepdim": True}, id="prod-zeros-dim0-keepdim"),
    case("prod", [ZEROS_PROD], {}, id="prod-zeros-all"),
    case("prod", [[[0.0, 2.0], [3.0, 4.0]]], {}, id="prod-2d-one-zero-all"),
    case("prod", [np.zeros((0, 3))], {}, id="prod-empty-all"),
    case("prod", [np.zeros((0, 3))], {"dim": 0}, id="prod-empty-dim"),
    # amax / amin
    case("amax", [A234], {}, id="amax-all"),
    case("amax", [A234], {"dim": (0, 2), "keepdim": True}, id="amax-tuple-keepdim"),
    case("amax", [TIES], {}, id="amax-ties-all"),
    case("amax", [TIES], {"dim": 1}, id="amax-ties-dim"),
    case("amax", [TIES], {"dim": -1, "keepdim": True}, id="amax-ties-neg-keepdim"),
    case("amax", [S0], {}, id="amax-0d"),
    case("amax", [np.zeros((0, 3))], {"dim": 1}, id="amax-zero-rows"),
    case("amin", [[[2.0, 1.0, 1.0], [0.0, 0.0, 5.0]]], {}, id="amin-ties-all"),
    case("amin", [[[2.0, 1.0, 1.0], [0.0, 0.0, 5.0]]], {"dim": 1}, id="amin-ties-dim"),
    case("amin", [A234], {"dim": -2}, id="amin-neg"),
    # max / min (graph op: values only)
    case("max", [A234], {}, id="max-all"),
    case("max", [TIES], {}, id="max-ties-all"),
    case("max", [TIES], {"dim": 1}, id="max-ties-dim"),
    case("max", [TIES], {"dim": 0, "keepdim": True}, id="max-dim0-keepdim"),
    case("max", [[[3.0, 1.0], [3.0, 3.0]]], {}, id="max-ties-2d"),
    case("max", [S0], {}, id="max-0d"),
    case("max", [S0], {"dim": 0}, id="max-0d-dim"),
    case("max", [np.zeros((0, 3))], {"dim": 1}, id="max-zero-rows"),
    case("max", [[1.0, NAN, 3.0, NAN]], {}, id="max-nan-all"),
    case("max", [[[1.0, NAN, 3.0, NAN]]], {"dim": 1}, id="max-nan-dim"),
    case("min", [[2.0, 1.0, 1.0, 3.0]], {}, id="min-ties-all"),
    case("min", [[2.0, 1.0, 1.0, 3.0]], {"dim": 0}, id="min-ties-dim"),
    case("min", [A234], {"dim": -1, "keepdim": True}, id="min-neg-keepdim"),
    # logsumexp
    case("logsumexp", [A234], {"dim": 1}, id="lse-dim1"),
    case("logsumexp", [A234 * 50], {"dim": (0, 2)}, id="lse-tuple-large"),
    case("logsumexp", [A234], {"dim": -1, "keepdim": True}, id="lse-neg-keepdim"),
    case("logsumexp", [S0], {"dim": 0}, id="lse-0d"),
    case("logsumexp", [np.zeros((0, 3))], {"dim": 0}, id="lse-empty-dim"),
    case("logsumexp", [[[-INF, 0.0], [-INF, -INF], [INF, 0.0]]], {"dim": 1}, id="lse-infinities"),
    case("logsumexp", [[-INF, 0.0, 1.0]], {"dim": 0}, id="lse-one-neginf"),
    # var / std
    case("var", [A234], {}, id="var-all"),
    case("var", [A234], {"dim": 1}, id="var-dim1"),
    case("var", [A234], {"dim": (0, 2), "keepdim": True, "correction": 0}, id="var-tuple-keepdim-c0"),
    case("var", [A234], {"dim": -1, "correction": 2}, id="var-c2"),
    case("var", [A23], {"dim": 1, "correction": 0.5}, id="var-c-half"),
    case("var", [[3.0]], {}, id="var-single"),
    case("var", [[[3.0], [4.0]]], {"dim": 1}, id="var-single-dim"),
    case("var", [S0], {}, id="var-0d"),
    case("var", [S0], {"correction": 0}, id="var-0d-c0"),
    case("var", [[1.0, 2.0]], {"correction": 2}, id="var-zero-dof"),
    case("var", [np.zeros((0, 3))], {"dim": 1}, id="var-zero-rows"),
    case("std", [A234], {}, id="std-all"),
    case("std", [A234], {"dim": (0, 1)}, id="std-tuple"),
    case("std", [A234], {"dim": -1, "keepdim": True, "correction": 0}, id="std-neg-keepdim-c0"),
    case("std", [[3.0]], {}, id="std-single"),
    case("std", [[[3.0], [4.0]]], {"dim": 1}, id="std-single-dim"),
    case("std", [[[1.0, 1.0, 1.0], [2.0, 3.0, 4.0]]], {}, id="std-const-row"),
    case("std", [[[1.0, 1.0, 1.0], [2.0, 3.0, 4.0]]], {"dim": 1}, id="std-zero-row"),
    case("std", [np.full(3, 2.0)], {}, id="std-constant"),
    # norm
    case("norm", [A234], {}, id="norm-default"),
    case("norm", [A234], {"p": 1, "dim": 1}, id="norm-p1-dim"),
    case("norm", [A234], {"p": 3, "dim": (0, 2), "keepdim": True}, id="norm-p3-tuple-keepdim"),
    case("norm", [A234], {"p": INF, "dim": -1}, id="norm-inf-neg"),
    case("norm", [A234], {"p": -INF, "dim": 0}, id="norm-neginf"),
    case("norm", [A234], {"p": 1.5, "dim": 2}, id="norm-p1.5"),
    case("norm", [A234], {"p": 0.5}, id="norm-p0.5"),
    case("norm", [A234], {"p": 0}, id="norm-p0"),
    case("norm", [A234], {"p": "fro", "dim": (0, 1)}, id="norm-fro-tuple"),
    case("norm", [S0], {}, id="norm-0d"),
    case("norm", [np.zeros((0, 3))], {"dim": 0}, id="norm-empty-dim"),
    case("norm", [[3.0, -3.0, 1.0]], {"p": INF}, id="norm-inf-ties"),
    case("norm", [[[3.0, -3.0, 1.0], [-2.0, 2.0, 2.0]]], {"p": INF, "dim": 1}, id="norm-inf-ties-dim"),
    case("norm", [[[0.0, 0.0, 0.0], [2.0, 3.0, 4.0]]], {"dim": 1}, id="norm-p2-zero-row"),
    case("norm", [[[0.0, 0.0, 0.0], [2.0, 0.0, 4.0]]], {"p": 1.5, "dim": 1}, id="norm-p1.5-zeros"),
    case("norm", [[[0.0, 0.0, 0.0], [2.0, 0.0, 4.0]]], {"p": 0.5, "dim": 1}, id="norm-p0.5-zeros"),
]

ZERO_VECTOR_PS = [1, 2, 3, INF, -INF, 1.5, 0.5, 0, "fro"]
for _p in ZERO_VECTOR_PS:
    CASES.append(case("norm", [np.zeros(3)], {"p": _p}, id=f"norm-zero-vector-p{_p}"))


@pytest.fixture(autouse=True)
def _quiet():
    # torch warns on zero degrees of freedom and on create_graph; the assertions are about values.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("op,arrays,params", CASES)
def test_matches_torch(op, arrays, params):
    check_op(op, arrays, params)


@pytest.mark.parametrize("op,arrays,params", CASES)
def test_batched_and_jvp(op, arrays, params):
    check_batched_and_jvp(op, arrays, params)


# --- hand-checked values from the reference (not only "same as torch") -----------------------


def _grad(fn, value, **kw):
    x = gs.tensor(np.asarray(value, dtype=np.float64), requires_grad=True)
    fn(x, **kw).sum().backward()
    return x.grad.numpy()


@pytest.mark.parametrize(
    "value,expected",
    [
        ([2.0, 0.0, 3.0], [0.0, 6.0, 0.0]),
        ([0.0, 0.0, 3.0], [0.0, 0.0, 0.0]),
        ([2.0, 4.0, 3.0], [12.0, 6.0, 8.0]),
    ],
    ids=["one-zero", "two-zeros", "no-zero"],
)
def test_prod_zeros_reference_values(value, expected):
    np.testing.assert_array_equal(_grad(gs.prod, value), expected)


def test_ties_reference_values():
    np.testing.assert_allclose(_grad(gs.max, [1.0, 3.0, 3.0, 2.0]), [0, 0.5, 0.5, 0])
    np.testing.assert_allclose(_grad(lambda x: gs.max(x, 1).values, TIES), [[0, 1, 0, 0], [1, 0, 0, 0]])
    np.testing.assert_allclose(_grad(gs.amax, TIES, dim=1), [[0, 0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3, 0]])
    np.testing.assert_allclose(_grad(gs.norm, [3.0, -3.0, 1.0], p=INF), [0.5, -0.5, 0])


# --- max/min with dim: the public (values, indices) namedtuple --------------------------------


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize(
    "value,dim,keepdim",
    [
        (TIES, 1, False),
        (TIES, 0, True),
        (TIES, -1, True),
        (np.array([[1.0, NAN, 3.0, NAN], [2.0, 5.0, 5.0, 1.0]]), 1, False),
        (S0, 0, False),
        (np.zeros((0, 3)), 1, False),
    ],
    ids=["ties-dim1", "dim0-keepdim", "neg-keepdim", "nan", "0d", "zero-rows"],
)
def test_max_min_dim_namedtuple(name, value, dim, keepdim):
    x = gs.tensor(value, requires_grad=True)
    res = getattr(gs, name)(x, dim, keepdim=keepdim)
    tres = getattr(torch, name)(torch.tensor(value), dim, keepdim=keepdim)
    values, indices = res
    assert res.values is values and res.indices is indices
    assert_close(values.numpy(), tres.values.numpy(), what=f"{name} values")
    assert indices.dtype == np.int64 and not indices.requires_grad
    np.testing.assert_array_equal(indices.numpy(), tres.indices.numpy())
    meth = getattr(x, name)(dim=dim, keepdim=keepdim)
    np.testing.assert_array_equal(meth.indices.numpy(), tres.indices.numpy())


@pytest.mark.parametrize("name,elementwise", [("max", "maximum"), ("min", "minimum")])
def test_max_min_full_and_other(name, elementwise):
    x = gs.tensor(TIES)
    full = getattr(gs, name)(x)
    assert isinstance(full, gs.Tensor) and full.shape == ()
    assert full.item() == getattr(np, name)(TIES)
    other = gs.tensor(np.full(TIES.shape, 2.5))
    for res in (getattr(gs, name)(x, other), getattr(x, name)(other), getattr(gs, name)(x, other=other)):
        np.testing.assert_array_equal(res.numpy(), getattr(np, elementwise)(TIES, 2.5))


# --- the public functions and methods take torch's arguments ----------------------------------

PUBLIC_CALLS = [
    ("mean", lambda m, x: m.mean(x, dim=(0, 2), keepdim=True)),
    ("mean-method", lambda m, x: x.mean(-1)),
    ("sum-method", lambda m, x: x.sum(dim=1)),
    ("prod", lambda m, x: m.prod(x, 1, keepdim=True)),
    ("prod-method", lambda m, x: x.prod()),
    ("amax", lambda m, x: m.amax(x, dim=(0, 1))),
    ("amin-method", lambda m, x: x.amin(-1, True)),
    ("max-method", lambda m, x: x.max()),
    ("max-values", lambda m, x: m.max(x, dim=2, keepdim=True).values),
    ("min-indices-float", lambda m, x: m.min(x, 0)[1] * 1.0),
    ("logsumexp", lambda m, x: m.logsumexp(x, dim=(1, 2))),
    ("logsumexp-method", lambda m, x: x.logsumexp(0, keepdim=True)),
    ("var", lambda m, x: m.var(x, dim=1, correction=0, keepdim=True)),
    ("var-unbiased-pos", lambda m, x: m.var(x, 2, False)),
    ("std-method", lambda m, x: x.std(unbiased=False)),
    ("std-bool-first", lambda m, x: m.std(x, False)),
    ("norm", lambda m, x: m.norm(x, p=1, dim=(0, 2), keepdim=True)),
    ("norm-method-positional", lambda m, x: x.norm(3, 1)),
    ("norm-fro", lambda m, x: m.norm(x, "fro", dim=(1, 2))),
    ("norm-inf", lambda m, x: x.norm(p=float("inf"))),
]


@pytest.mark.parametrize("call", [c for _, c in PUBLIC_CALLS], ids=[i for i, _ in PUBLIC_CALLS])
def test_public_call_like_torch(call):
    ours = call(gs, gs.tensor(A234))
    theirs = call(torch, torch.tensor(A234))
    assert_close(ours.numpy(), theirs.numpy(), what="public call")


# --- saves: a second backward without retain_graph raises exactly when torch's does -----------

SAVES = [
    ("sum", {"dim": 1}),
    ("mean", {}),
    ("mean", {"dim": (0, 1), "keepdim": True}),
    ("prod", {}),
    ("prod", {"dim": 1}),
    ("amax", {"dim": 1}),
    ("amin", {}),
    ("max", {}),
    ("max", {"dim": 0}),
    ("min", {"dim": 1, "keepdim": True}),
    ("logsumexp", {"dim": 1}),
    ("var", {}),
    ("std", {"dim": 1, "correction": 0}),
    ("norm", {}),
    ("norm", {"p": 1, "dim": 0}),
    ("norm", {"p": INF}),
]


def _second_backward_raises(y) -> bool:
    y.backward()
    try:
        y.backward()
    except RuntimeError as e:
        assert "second time" in str(e)
        return True
    return False


@pytest.mark.parametrize("op,params", SAVES, ids=[f"{o}-{p}" for o, p in SAVES])
def test_saves_matches_torch(op, params):
    spec = gs.ops.get(op)
    value = POS23 + np.arange(6).reshape(2, 3)  # no ties, no zeros
    canon = spec.canonical([value.shape], params)
    torch_raises = _second_backward_raises(spec.torch(torch.tensor(value, requires_grad=True), **canon).sum())
    assert _second_backward_raises(apply(spec, [gs.tensor(value, requires_grad=True)], params).sum()) == torch_raises
    assert spec.saves_tensors(canon) == torch_raises


# --- errors for invalid arguments --------------------------------------------------------------


EMPTY = np.zeros((0, 3))


@pytest.mark.parametrize(
    "call,error",
    [
        pytest.param(lambda m, x: m.prod(x, (0, 1)), TypeError, id="prod-tuple-dim"),
        pytest.param(lambda m, x: m.max(x, (0,)), TypeError, id="max-tuple-dim"),
        pytest.param(lambda m, x: m.logsumexp(x), TypeError, id="logsumexp-no-dim"),
        pytest.param(lambda m, x: m.prod(x, keepdim=True), TypeError, id="prod-keepdim-no-dim"),
        pytest.param(lambda m, x: x.max(keepdim=True), TypeError, id="max-keepdim-no-dim"),
        pytest.param(lambda m, x: m.min(x, 0.5), TypeError, id="min-float-dim"),
        pytest.param(lambda m, x: m.amax(x, 2), IndexError, id="dim-out-of-range"),
        pytest.param(lambda m, x: m.mean(x, (0, 0)), RuntimeError, id="repeated-dim"),
        pytest.param(lambda m, x: m.max(m.tensor(EMPTY)), RuntimeError, id="max-empty"),
        pytest.param(lambda m, x: m.amax(m.tensor(EMPTY), 0), IndexError, id="amax-empty-dim"),
        pytest.param(lambda m, x: m.min(m.tensor(EMPTY), 0), IndexError, id="min-empty-dim"),
        pytest.param(
            lambda m, x: m.norm(m.tensor(EMPTY), p=INF, dim=0), (RuntimeError, ValueError), id="inf-norm-empty"
        ),
    ],
)
def test_invalid_arguments_raise_like_torch(call, error):
    with pytest.raises(error):
        call(torch, torch.tensor(A23))
    with pytest.raises(error):
        call(gs, gs.tensor(A23))


def test_var_unbiased_keyword():
    x = gs.tensor(A23)
    t = torch.tensor(A23)
    assert_close(gs.var(x, unbiased=False).numpy(), torch.var(t, unbiased=False).numpy(), what="var unbiased=False")
    assert_close(x.std(1, False, True).numpy(), t.std(1, False, True).numpy(), what="std(dim, unbiased, keepdim)")
    with pytest.raises(TypeError):
        gs.var(x, 1, True, correction=0)


# --- declarations the oracles rely on ----------------------------------------------------------


@pytest.mark.parametrize(
    "op,value,params,expected",
    [
        pytest.param("amax", TIES, {"dim": 1}, 0.0, id="amax-tie"),
        pytest.param("amax", [[1.0, 4.0, 2.5]], {}, 1.5, id="amax-gap"),
        pytest.param("max", [[1.0, 4.0, 2.5]], {"dim": 1}, 1.5, id="max-gap"),
        pytest.param("min", [[1.0, 4.0, 2.5]], {"dim": 1}, 1.5, id="min-gap"),
        pytest.param("norm", [[3.0, -3.0, 1.0]], {"p": INF}, 0.0, id="inf-norm-tie"),
        pytest.param("norm", [[3.0, -0.5, 0.75]], {"p": -INF}, 0.25, id="neginf-norm-gap"),
        pytest.param("norm", [[0.0, 0.0], [1.0, 2.0]], {"dim": 1}, 0.0, id="norm-zero-row"),
        pytest.param("norm", [[0.5, -2.0], [1.0, 2.0]], {"p": 1, "dim": 1}, 0.5, id="p1-zero-entry"),
        pytest.param("norm", [[0.5, -2.0], [1.0, 2.0]], {"p": 2, "dim": 1}, 2.0, id="p2-only-zero-vector"),
        pytest.param("std", [[1.0, 1.0], [1.0, 2.0]], {"dim": 1}, 0.0, id="std-constant-row"),
        pytest.param("logsumexp", TIES, {"dim": 1}, INF, id="logsumexp-smooth"),
        pytest.param("prod", ZEROS_PROD, {}, INF, id="prod-smooth"),
    ],
)
def test_singular_distance(op, value, params, expected):
    spec = gs.ops.get(op)
    value = np.asarray(value, dtype=np.float64)
    d = spec.singular_distance([value], spec.canonical([value.shape], params))
    assert d == pytest.approx(expected)


@pytest.mark.parametrize("op", ["mean", "prod", "amax", "amin", "max", "min", "logsumexp", "var", "std", "norm"])
def test_param_strategy_gives_valid_params(op):
    from hypothesis import HealthCheck, given, settings

    spec = gs.ops.get(op)
    shapes = [(2, 0, 3), (3, 4), (), (5,)]

    for shape in shapes:

        @settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(params=spec.param_strategy((shape,)))
        def run(params):
            canon = spec.canonical([shape], params)
            out_shape = spec.out_shape([shape], canon)
            assert out_shape is not None, (shape, params)
            value = R.standard_normal(shape) + 3.0
            out = apply(spec, [gs.tensor(value)], params)
            assert out.shape == out_shape
            t = spec.torch(torch.tensor(value), **canon)
            assert tuple(t.shape) == out_shape

        run()
