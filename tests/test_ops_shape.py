"""Shape family (views, joins, indexing) against torch: forward, VJP, double backward, batching, JVP,
saved tensors and error messages."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradspec as gs
from gradspec.engine import apply

from ._compare import assert_close, check_batched_and_jvp, check_op

RNG = np.random.default_rng(1234)


def arr(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


S = slice
E = Ellipsis

# (op, arrays, params, id)
CASES = [
    # reshape
    ("reshape", [arr(2, 3)], {"shape": (3, 2)}, "reshape"),
    ("reshape", [arr(2, 3)], {"shape": (-1,)}, "reshape-infer"),
    ("reshape", [arr(2, 3, 2)], {"shape": (2, -1, 3)}, "reshape-infer-middle"),
    ("reshape", [arr()], {"shape": (1, 1)}, "reshape-0d-up"),
    ("reshape", [arr(1, 1)], {"shape": ()}, "reshape-to-0d"),
    ("reshape", [arr(0, 3)], {"shape": (3, 0, 5)}, "reshape-0size"),
    ("reshape", [arr(0, 3)], {"shape": (-1, 2)}, "reshape-0size-infer"),
    # expand
    ("expand", [arr(3, 1)], {"size": (3, 4)}, "expand"),
    ("expand", [arr(3, 1)], {"size": (2, -1, 4)}, "expand-new-lead-and-minus1"),
    ("expand", [arr()], {"size": (2, 3)}, "expand-0d"),
    ("expand", [arr(1, 2)], {"size": (0, 2)}, "expand-to-0"),
    ("expand", [arr(1, 2)], {"size": (3, 0, 2)}, "expand-new-0-lead"),
    # transpose / permute
    ("transpose", [arr(2, 3, 4)], {"dim0": 0, "dim1": -1}, "transpose-neg"),
    ("transpose", [arr(2, 3)], {"dim0": 1, "dim1": 1}, "transpose-same"),
    ("transpose", [arr()], {"dim0": 0, "dim1": -1}, "transpose-0d"),
    ("transpose", [arr(2, 0, 3)], {"dim0": 1, "dim1": 2}, "transpose-0size"),
    ("permute", [arr(2, 3, 4)], {"dims": (2, 0, 1)}, "permute"),
    ("permute", [arr(2, 3, 4)], {"dims": (-1, -3, 1)}, "permute-neg"),
    ("permute", [arr()], {"dims": ()}, "permute-0d"),
    ("permute", [arr(1, 0, 2)], {"dims": (2, 1, 0)}, "permute-0size"),
    # squeeze / unsqueeze / flatten
    ("squeeze", [arr(1, 3, 1)], {}, "squeeze-all"),
    ("squeeze", [arr(1, 3, 1)], {"dim": -1}, "squeeze-neg"),
    ("squeeze", [arr(1, 3, 1)], {"dim": 1}, "squeeze-non1-noop"),
    ("squeeze", [arr(1, 3, 1)], {"dim": (0, 1, 2)}, "squeeze-tuple"),
    ("squeeze", [arr(1, 3, 1)], {"dim": ()}, "squeeze-empty-tuple"),
    ("squeeze", [arr()], {"dim": 0}, "squeeze-0d"),
    ("squeeze", [arr(1, 0)], {}, "squeeze-0size"),
    ("unsqueeze", [arr(2, 3)], {"dim": 2}, "unsqueeze-last"),
    ("unsqueeze", [arr(2, 3)], {"dim": -3}, "unsqueeze-neg-first"),
    ("unsqueeze", [arr()], {"dim": -1}, "unsqueeze-0d"),
    ("flatten", [arr(2, 3, 4)], {}, "flatten-all"),
    ("flatten", [arr(2, 3, 4, 2)], {"start_dim": 1, "end_dim": -2}, "flatten-middle"),
    ("flatten", [arr(2, 3)], {"start_dim": 1, "end_dim": 1}, "flatten-one-dim"),
    ("flatten", [arr()], {}, "flatten-0d"),
    ("flatten", [arr(2, 0, 3)], {"start_dim": 0, "end_dim": 1}, "flatten-0size"),
    # cat / stack
    ("cat", [arr(2, 3), arr(4, 3)], {}, "cat"),
    ("cat", [arr(2, 1), arr(2, 0), arr(2, 3)], {"dim": -1}, "cat-3-pieces-with-0size"),
    ("cat", [arr(0), arr(2, 3)], {"dim": 1}, "cat-legacy-1d-empty"),
    ("cat", [arr(2, 3)], {"dim": 1}, "cat-1-piece"),
    ("cat", [arr(3).astype(np.float32), arr(2)], {}, "cat-promote"),
    ("stack", [arr(2, 3), arr(2, 3), arr(2, 3)], {"dim": 1}, "stack-3"),
    ("stack", [arr(2, 3)], {"dim": -1}, "stack-1-tensor"),
    ("stack", [arr(), arr()], {"dim": -1}, "stack-0d"),
    ("stack", [arr(0, 2), arr(0, 2)], {}, "stack-0size"),
    # index: basic
    ("index", [arr(4, 3)], {"index": 1}, "index-int"),
    ("index", [arr(4, 3)], {"index": (-1, -2)}, "index-neg-ints"),
    ("index", [arr(5, 3)], {"index": S(None, None, 2)}, "index-step"),
    ("index", [arr(5, 3)], {"index": (S(-4, -1, 2), S(1, None))}, "index-neg-bounds-step"),
    ("index", [arr(5, 3)], {"index": S(7, 9)}, "index-empty-slice"),
    ("index", [arr(2, 3, 4)], {"index": (E, 1)}, "index-ellipsis"),
    ("index", [arr(2, 3, 4)], {"index": (0, E, None, S(1, 3))}, "index-int-ellipsis-none"),
    ("index", [arr()], {"index": None}, "index-0d-none"),
    ("index", [arr()], {"index": ()}, "index-0d-empty"),
    ("index", [arr(2, 0, 3)], {"index": (1, S(None), 2)}, "index-0size"),
    # index: advanced (duplicates accumulate)
    ("index", [arr(4, 3)], {"index": [0, 0, 2, 0]}, "adv-duplicates"),
    ("index", [arr(4, 3)], {"index": [-1, 3, -1]}, "adv-neg-duplicates"),
    ("index", [arr(4, 3)], {"index": ([[0, 1], [1, 1]], [2, 2])}, "adv-two-broadcast"),
    ("index", [arr(2, 3, 4)], {"index": (S(None), [0, 2, 0], S(1, None, 2))}, "adv-between-slices"),
    ("index", [arr(2, 3, 4)], {"index": ([0, 1, 1], S(None), [3, 0, 3])}, "adv-separated-front"),
    ("index", [arr(2, 3, 4)], {"index": (0, S(None), [1, 2, 2])}, "adv-int-separated-torch-rule"),
    ("index", [arr(2, 3, 4)], {"index": ([1, 0], None, [0, 0])}, "adv-separated-by-none"),
    ("index", [arr(2, 3, 4)], {"index": (E, np.array([[3, 3], [0, 3]]))}, "adv-ellipsis-2d"),
    ("index", [arr(3, 2)], {"index": np.array([], dtype=np.int64)}, "adv-empty"),
    ("index", [arr(3, 2)], {"index": (np.array(2), [1, 1])}, "adv-0d-array-is-int"),
    ("index", [arr(3, 2, dtype=np.float32)], {"index": [2, 2]}, "adv-float32"),
    # gather / index_select
    ("gather", [arr(3, 4)], {"dim": 1, "index": [[0, 0, 3], [1, 1, 1], [2, 0, 2]]}, "gather-dup"),
    ("gather", [arr(3, 4)], {"dim": -2, "index": [[2, 2, 2, 0], [0, 0, 0, 0]]}, "gather-neg-dim"),
    ("gather", [arr(3, 4)], {"dim": 0, "index": np.zeros((5, 2), dtype=np.int64)}, "gather-longer-than-input"),
    ("gather", [arr(2, 3)], {"dim": 1, "index": np.zeros((2, 0), dtype=np.int64)}, "gather-0size-index"),
    ("gather", [arr()], {"dim": 0, "index": [0, 0]}, "gather-0d-input"),
    ("gather", [arr(3)], {"dim": 0, "index": np.array(2)}, "gather-0d-index"),
    ("index_select", [arr(3, 4)], {"dim": 1, "index": [3, 0, 3, 3]}, "index_select-dup"),
    ("index_select", [arr(3, 4)], {"dim": -2, "index": []}, "index_select-empty"),
    ("index_select", [arr(3, 4)], {"dim": 0, "index": np.array(1)}, "index_select-0d-index"),
    ("index_select", [arr()], {"dim": 0, "index": [0]}, "index_select-0d-input"),
]


def _ids(cases):
    return [c[-1] for c in cases]


@pytest.mark.parametrize("name,arrays,params,cid", CASES, ids=_ids(CASES))
def test_matches_torch(name, arrays, params, cid):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        check_op(name, arrays, params)
        check_batched_and_jvp(name, arrays, params)


# The scatter-add adjoints are ops too: their forward and VJP (= the take again) against
# torch's index_put_(accumulate=True), so double backward with a seed that requires grad
# goes through a correct graph.
BACKWARD_CASES = [
    ("_index_backward", "index", [arr(4, 3)], {"index": [0, 0, 2, 0]}, "index-dup"),
    ("_index_backward", "index", [arr(2, 3, 4)], {"index": (0, S(None), [1, 2, 2])}, "index-torch-rule"),
    ("_index_backward", "index", [arr(5, 3)], {"index": (S(1, None, 2), -1)}, "index-basic"),
    ("_gather_backward", "gather", [arr(3, 4)], {"dim": 1, "index": [[0, 0, 3], [1, 1, 1], [2, 0, 2]]}, "gather"),
    ("_index_select_backward", "index_select", [arr(3, 4)], {"dim": 1, "index": [3, 0, 3]}, "index_select"),
]


@pytest.mark.parametrize("back,name,arrays,params,cid", BACKWARD_CASES, ids=_ids(BACKWARD_CASES))
def test_scatter_adjoints_match_torch(back, name, arrays, params, cid):
    spec = gs.ops.get(name)
    x = arrays[0]
    canon = spec.canonical([x.shape], params)
    g = RNG.standard_normal(spec.out_shape([x.shape], canon))
    bparams = {**canon, "shape": x.shape}
    check_op(back, [g], bparams)
    check_batched_and_jvp(back, [g], bparams)


SEED_DOUBLE = [
    ("index", [arr(4, 3)], {"index": ([0, 0, 3], S(1, None))}, "index"),
    ("gather", [arr(3, 4)], {"dim": 0, "index": [[2, 2, 0, 1]]}, "gather"),
    ("index_select", [arr(3, 4)], {"dim": 1, "index": [1, 1]}, "index_select"),
    ("cat", [arr(2, 3), arr(1, 3)], {"dim": 0}, "cat"),
    ("stack", [arr(2, 3), arr(2, 3)], {"dim": -1}, "stack"),
    ("permute", [arr(2, 3, 4)], {"dims": (1, 2, 0)}, "permute"),
    ("flatten", [arr(2, 3, 4)], {"start_dim": 1}, "flatten"),
]


@pytest.mark.parametrize("name,arrays,params,cid", SEED_DOUBLE, ids=_ids(SEED_DOUBLE))
def test_double_backward_wrt_seed(name, arrays, params, cid):
    """d/dv <J^T v, w>: differentiates the VJP graph itself (for a linear op check_op cannot)."""
    spec = gs.ops.get(name)
    canon = spec.canonical([a.shape for a in arrays], params)
    xs = [gs.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = apply(spec, xs, params)
    tout = spec.torch(*ts, **canon)
    v = RNG.standard_normal(out.shape)
    ws = [RNG.standard_normal(a.shape) for a in arrays]
    gv, tv = gs.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
    gx = gs.grad(out, xs, gv, create_graph=True)
    tx = torch.autograd.grad(tout, ts, tv, create_graph=True)
    s = sum(((g * gs.tensor(w)).sum() for g, w in zip(gx, ws, strict=True)), gs.tensor(0.0))
    ts_ = sum((g * torch.tensor(w)).sum() for g, w in zip(tx, ws, strict=True))
    (ours,) = gs.grad(s, gv)
    (theirs,) = torch.autograd.grad(ts_, tv)
    assert_close(ours.numpy(), theirs.numpy(), what=f"{name} d/dseed of the VJP")


def test_duplicate_indices_accumulate():
    x = gs.tensor(np.arange(4.0), requires_grad=True)
    x[[1, 1, 1, 3]].sum().backward()
    tx = torch.arange(4.0, dtype=torch.float64, requires_grad=True)
    tx[[1, 1, 1, 3]].sum().backward()
    assert_close(x.grad.numpy(), tx.grad.numpy(), what="grad of x[[1, 1, 1, 3]]")
    assert x.grad.numpy()[1] == 3.0


def test_torch_placement_rule_differs_from_numpy():
    a = arr(2, 3, 4)
    x = gs.tensor(a)
    want = torch.tensor(a)[0, :, [1, 2]]
    assert x[0, :, [1, 2]].shape == tuple(want.shape) == (3, 2) != a[0, :, [1, 2]].shape
    assert_close(x[0, :, [1, 2]].numpy(), want.numpy(), what="x[0, :, [1, 2]]")


def test_nested_list_is_a_tuple_like_torch():
    a = arr(2, 3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        want = torch.tensor(a)[[[0, 1], [1, 0]]]
        got = gs.tensor(a)[[[0, 1], [1, 0]]]
    assert_close(got.numpy(), want.numpy(), what="x[[[0, 1], [1, 0]]]")


# -- saved tensors: does a second backward without retain_graph fail? --------------------

SAVES = [
    ("index", [arr(4, 3)], {"index": (S(1, None), 0)}, "index-basic"),
    ("index", [arr(4, 3)], {"index": (None, E, -1)}, "index-none-ellipsis"),
    ("index", [arr(4, 3)], {"index": [0, 0]}, "index-advanced"),
    ("index", [arr(4, 3)], {"index": (1, [0, 2])}, "index-int-and-array"),
    ("gather", [arr(3, 4)], {"dim": 1, "index": [[0], [1], [2]]}, "gather"),
    ("index_select", [arr(3, 4)], {"dim": 0, "index": [2]}, "index_select"),
    ("transpose", [arr(2, 3)], {"dim0": 0, "dim1": 1}, "transpose"),
    ("permute", [arr(2, 3)], {"dims": (1, 0)}, "permute"),
    ("squeeze", [arr(1, 3)], {}, "squeeze"),
    ("unsqueeze", [arr(3)], {"dim": 0}, "unsqueeze"),
    ("flatten", [arr(2, 3)], {}, "flatten"),
    ("reshape", [arr(2, 3)], {"shape": (6,)}, "reshape"),
    ("expand", [arr(1, 3)], {"size": (2, 3)}, "expand"),
    ("cat", [arr(2), arr(3)], {}, "cat"),
    ("stack", [arr(2), arr(2)], {}, "stack"),
]


def _second_backward_fails(backward) -> bool:
    backward()
    try:
        backward()
    except RuntimeError as e:
        assert "backward through the graph a second time" in str(e)
        return True
    return False


@pytest.mark.parametrize("name,arrays,params,cid", SAVES, ids=_ids(SAVES))
def test_saves_like_torch(name, arrays, params, cid):
    spec = gs.ops.get(name)
    canon = spec.canonical([a.shape for a in arrays], params)
    xs = [gs.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = apply(spec, xs, params).sum()
    ty = spec.torch(*ts, **canon).sum()
    assert _second_backward_fails(y.backward) == _second_backward_fails(ty.backward)


# -- Tensor helpers ------------------------------------------------------------------------


def _helper_marks(attr, shape):
    return ()


HELPERS = [
    pytest.param(attr, shape, id=f"{attr}-{len(shape)}d", marks=_helper_marks(attr, shape))
    for attr in ("T", "mT", "t")
    for shape in [(2, 3), (2, 3, 4), (3,), ()]
]


@pytest.mark.parametrize("attr,shape", HELPERS)
def test_transpose_helpers(attr, shape):
    a = arr(*shape)
    x, tx = gs.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)

    def run(t):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                return getattr(t, attr)() if attr == "t" else getattr(t, attr)
        except Exception as e:  # noqa: BLE001 - compared with torch's below
            return e

    got, want = run(x), run(tx)
    if isinstance(want, Exception):
        assert isinstance(got, Exception), f"torch raises {want!r}"
        return
    assert not isinstance(got, Exception), f"torch does not raise, gradspec raises {got!r}"
    assert got.is_leaf == want.is_leaf, f"x.{attr}: is_leaf {got.is_leaf}, torch {want.is_leaf}"
    assert_close(got.numpy(), want.detach().numpy(), what=f"x.{attr}")
    v = RNG.standard_normal(want.shape)
    (g,) = gs.grad(got, x, v)
    (tg,) = torch.autograd.grad(want, tx, torch.tensor(v))
    assert_close(g.numpy(), tg.numpy(), what=f"grad of x.{attr}")


def test_mT_error_like_torch():
    with pytest.raises(RuntimeError, match="tensor.mT is only supported on matrices or batches of matrices. Got 1-D"):
        _ = gs.tensor(arr(3)).mT


def test_public_functions_and_methods():
    a = arr(2, 3, 4)
    x, tx = gs.tensor(a), torch.tensor(a)
    pairs = [
        (x.permute(2, 0, 1), tx.permute(2, 0, 1)),
        (x.permute((2, 0, 1)), tx.permute((2, 0, 1))),
        (gs.permute(x, dims=(1, 0, 2)), torch.permute(tx, dims=(1, 0, 2))),
        (x.reshape(4, -1), tx.reshape(4, -1)),
        (gs.reshape(x, (4, 6)), torch.reshape(tx, (4, 6))),
        (x[:1].expand(3, -1, -1), tx[:1].expand(3, -1, -1)),
        (x.flatten(1), tx.flatten(1)),
        (gs.cat([x, x], 1), torch.cat([tx, tx], 1)),
        (gs.stack((x, x), dim=2), torch.stack((tx, tx), dim=2)),
        (x.gather(2, gs.tensor(np.array([[[1]], [[3]]]))), tx.gather(2, torch.tensor([[[1]], [[3]]]))),
        (x.index_select(0, gs.tensor(np.array([1, 1]))), tx.index_select(0, torch.tensor([1, 1]))),
        (x[gs.tensor(np.array([1, 0]))], tx[torch.tensor([1, 0])]),
    ]
    for k, (got, want) in enumerate(pairs):
        assert_close(got.numpy(), want.numpy(), what=f"pair {k}")


# -- errors: same exception class and message as torch -------------------------------------

ERRORS = [
    ("transpose-dim", lambda m, x: m.transpose(x, 0, 3)),
    ("permute-len", lambda m, x: x.permute(0, 1)),
    ("permute-dup", lambda m, x: x.permute(0, 1, 1)),
    ("permute-range", lambda m, x: x.permute(0, 1, 5)),
    ("squeeze-range", lambda m, x: m.squeeze(x, 3)),
    ("squeeze-dup", lambda m, x: m.squeeze(x, (0, 0))),
    ("unsqueeze-range", lambda m, x: m.unsqueeze(x, 4)),
    ("flatten-order", lambda m, x: m.flatten(x, 2, 1)),
    ("cat-empty", lambda m, x: m.cat([])),
    ("cat-sizes", lambda m, x: m.cat([x, x[:, :2]], dim=0)),
    ("cat-rank", lambda m, x: m.cat([x, x[0]])),
    ("cat-0d", lambda m, x: m.cat([x[0, 0, 0], x[0, 0, 0]])),
    ("cat-dim", lambda m, x: m.cat([x, x], dim=3)),
    ("stack-sizes", lambda m, x: m.stack([x, x[:1]])),
    ("stack-empty", lambda m, x: m.stack([])),
    ("stack-dim", lambda m, x: m.stack([x, x], 4)),
    ("index-int-range", lambda m, x: x[5]),
    ("index-int-range-neg", lambda m, x: x[:, -4]),
    ("index-too-many", lambda m, x: x[0, 0, 0, 0]),
    ("index-neg-step", lambda m, x: x[::-1]),
    ("index-zero-step", lambda m, x: x[::0]),
    ("index-array-range", lambda m, x: x[[0, 5]]),
    ("index-broadcast", lambda m, x: x[[0, 1], [0, 1, 2]]),
    ("index-0d-int", lambda m, x: x[0, 0, 0][0]),
    ("index-0d-slice", lambda m, x: x[0, 0, 0][:]),
    ("gather-rank", lambda m, x: m.gather(x, 1, _ix(m, np.zeros((2, 5))))),
    ("gather-size", lambda m, x: m.gather(x, 1, _ix(m, np.zeros((2, 5, 5))))),
    ("gather-range", lambda m, x: m.gather(x, 1, _ix(m, np.full((2, 1, 4), 3)))),
    ("gather-neg", lambda m, x: m.gather(x, 1, _ix(m, np.full((2, 1, 4), -1)))),
    ("index_select-2d", lambda m, x: m.index_select(x, 1, _ix(m, np.zeros((1, 1))))),
    ("index_select-range", lambda m, x: m.index_select(x, 1, _ix(m, np.array([3])))),
    ("reshape-invalid", lambda m, x: x.reshape(5, -1)),
    ("reshape-two-minus1", lambda m, x: x.reshape(-1, -1)),
    ("reshape-negative", lambda m, x: x.reshape(-2, -12)),
    ("reshape-0-ambiguous", lambda m, x: x[:, :0].reshape(0, -1)),
    ("expand-mismatch", lambda m, x: x.expand(2, 4, 4)),
    ("expand-lead-minus1", lambda m, x: x.expand(-1, 2, 3, 4)),
]


def _ix(m, a):
    a = np.asarray(a, dtype=np.int64)
    return torch.tensor(a) if m is torch else gs.tensor(a)


@pytest.mark.parametrize("cid,fn", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_like_torch(cid, fn):
    a = arr(2, 3, 4)
    with pytest.raises(Exception) as theirs:
        fn(torch, torch.tensor(a))
    with pytest.raises(Exception) as ours:
        fn(gs, gs.tensor(a))
    assert type(ours.value) is type(theirs.value), f"{ours.value!r} vs torch {theirs.value!r}"
    assert str(ours.value) == str(theirs.value).splitlines()[0]


def test_bool_mask_is_a_clear_error():
    x = gs.tensor(arr(3))
    with pytest.raises(IndexError, match="boolean"):
        x[np.array([True, False, True])]
    with pytest.raises(IndexError, match="boolean"):
        x[True]


# -- the param strategies draw valid params (checked against torch) -------------------------

_shape = st.lists(st.integers(0, 3), min_size=0, max_size=3).map(tuple)


@pytest.mark.parametrize(
    "name",
    ["reshape", "expand", "transpose", "permute", "squeeze", "unsqueeze", "flatten", "index", "gather", "index_select"],
)
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), shape=_shape)
def test_param_strategy_draws_valid_params(name, data, shape):
    spec = gs.ops.get(name)
    params = data.draw(spec.param_strategy((shape,)))
    a = RNG.standard_normal(shape)
    canon = spec.canonical([shape], params)
    # Canonical params survive a JSON round trip and are a fixed point of normalize.
    assert spec.canonical([shape], json.loads(json.dumps(canon))) == canon
    assert spec.out_shape([shape], canon) == np.shape(spec.forward(a, **canon))
    check_op(name, [a], params, double=False)
    check_batched_and_jvp(name, [a], params, nbatch=2)


@pytest.mark.parametrize("name", ["cat", "stack"])
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), shape=_shape.filter(len), n=st.integers(1, 3))
def test_join_param_strategy(name, data, shape, n):
    shapes = [shape] * n
    if name == "cat":
        d = data.draw(st.integers(0, len(shape) - 1))
        shapes = [shape[:d] + (data.draw(st.integers(0, 3)),) + shape[d + 1 :] for _ in range(n)]
    spec = gs.ops.get(name)
    params = data.draw(spec.param_strategy(tuple(shapes)))
    arrays = [RNG.standard_normal(s) for s in shapes]
    assert spec.out_shape(shapes, spec.canonical(shapes, params)) == np.shape(
        spec.forward(*arrays, **spec.canonical(shapes, params))
    )
    check_op(name, arrays, params, double=False)
    check_batched_and_jvp(name, arrays, params, nbatch=2)
