"""backward() semantics as properties of a random case, run against a backend.

A backend builds the case's graph and runs backward/grad: ``REF`` is gradspec's reference
engine, ``TORCH_CPU``/``TORCH_CUDA`` are torch.  Each property takes ``(backend, case, data)``
and asserts; the same functions drive the property suite (tests/test_properties.py) and the
mutation check (tests/test_mutations.py), which corrupts the reference engine and expects
some property to fail.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st

import gradspec as gs
from gradspec import engine as E
from gradspec.oracles.reference import build_engine_graph
from gradspec.oracles.torch_oracle import build_torch_graph
from gradspec.tolerances import EXACT_RTOL


class Backend:
    name = "?"

    def build(self, case):
        raise NotImplementedError

    def seed(self, arr, like):
        raise NotImplementedError

    def backward(self, roots, seeds, **kw):
        raise NotImplementedError

    def grad(self, outputs, inputs, seeds, **kw):
        raise NotImplementedError

    def np(self, t):
        raise NotImplementedError

    def leaf_grad(self, t):
        raise NotImplementedError

    def set_grad_none(self, t):
        t.grad = None


class Ref(Backend):
    name = "reference"

    def build(self, case):
        return build_engine_graph(case)

    def seed(self, arr, like):
        return None if arr is None else E.Tensor(np.array(arr, copy=True))

    def backward(self, roots, seeds, **kw):
        E.backward(roots, seeds, **kw)

    def grad(self, outputs, inputs, seeds, **kw):
        return E.grad(outputs, inputs, seeds, **kw)

    def np(self, t):
        return None if t is None else np.asarray(t.numpy(), dtype=np.float64)

    def leaf_grad(self, t):
        return self.np(t._grad) if not t.is_leaf else self.np(t.grad)

    def nonleaf_grad_raw(self, t):
        return t._grad


class Torch(Backend):
    def __init__(self, device):
        self.device = device
        self.name = f"torch-{device}"

    def build(self, case):
        return build_torch_graph(case, self.device)

    def seed(self, arr, like):
        import torch

        return None if arr is None else torch.from_numpy(np.array(arr, copy=True)).to(self.device)

    def backward(self, roots, seeds, **kw):
        import torch

        torch.autograd.backward(roots, seeds, **kw)

    def grad(self, outputs, inputs, seeds, **kw):
        import torch

        return torch.autograd.grad(outputs, inputs, seeds, **kw)

    def np(self, t):
        return None if t is None else t.detach().cpu().double().numpy(force=True)

    def leaf_grad(self, t):
        return self.np(t.grad)

    def nonleaf_grad_raw(self, t):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return t.grad


REF = Ref()
TORCH_CPU = Torch("cpu")
TORCH_CUDA = Torch("cuda")


def backends():
    import torch

    out = [pytest.param(REF, id="reference"), pytest.param(TORCH_CPU, id="torch-cpu")]
    out.append(
        pytest.param(
            TORCH_CUDA,
            id="torch-cuda",
            marks=[
                pytest.mark.cuda,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: torch.cuda.is_available() is False"),
            ],
        )
    )
    return out


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def magnitude(case, seeds=None):
    """|J|^T |seed| per leaf: the scale any evaluation order's rounding error is measured against."""
    J = gs.oracles.get("jacobian").jacobian(case)
    v = J.seed_vector if seeds is None else np.concatenate([np.abs(np.asarray(s, dtype=np.float64)).ravel() for s in seeds])
    m = np.abs(J.matrix).T @ np.abs(v) if J.matrix.size else np.zeros(J.matrix.shape[1])
    out, off = {}, 0
    for l in case.grad_leaves():
        out[l.name] = m[off : off + l.value.size].reshape(l.shape)
        off += l.value.size
    return out


def rtol_for(case, rtol=1e-9):
    """``rtol`` for a float64 case; for a case with float32 leaves (part of the default mix of
    ``gst.cases()``) both sides round at float32's eps, a few ulps per op relative to the same
    magnitudes: gradspec's own float32 exact-pair tolerance (2**9 eps32, gradspec/tolerances.py)."""
    if any(l.value.dtype == np.float32 for l in case.leaves):
        return max(rtol, EXACT_RTOL["float32"])
    return rtol


def assert_close(a, b, scale, what, rtol=1e-9):
    """|a - b| <= rtol * (scale + |b|) elementwise, NaN/Inf patterns equal."""
    a = np.zeros_like(b) if a is None and b is not None else a
    b = np.zeros_like(a) if b is None and a is not None else b
    if a is None:
        return
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, f"{what}: shape {a.shape} vs {b.shape}"
    assert np.array_equal(np.isnan(a), np.isnan(b)), f"{what}: NaN pattern\n{a}\n{b}"
    fin = np.isfinite(a) & np.isfinite(b)
    tol = rtol * (np.asarray(scale) + np.abs(b) + np.max(np.abs(b), initial=0.0)) + 1e-300
    tol = np.broadcast_to(tol, a.shape)
    bad = fin & (np.abs(a - b) > tol)
    assert not bad.any(), f"{what}: max |diff| {np.max(np.abs(a - b)[fin]):.3g}\n a={a}\n b={b}"


def explicit_seeds(case):
    env = case.evaluate()
    return case.seed_arrays(env)


def run_backward(B, case, seeds=None, repeat=1, **kw):
    env, roots = B.build(case)
    seeds = explicit_seeds(case) if seeds is None else seeds
    for _ in range(repeat):
        B.backward(roots, [B.seed(s, r) for s, r in zip(seeds, roots)], retain_graph=True, **kw)
    return env, {l.name: B.leaf_grad(env[l.name]) for l in case.grad_leaves()}


def _raises(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the property compares what was raised
        return e
    return None


# ---------------------------------------------------------------------------------------------
# the properties
# ---------------------------------------------------------------------------------------------


def prop_implicit_seed(B, case, data):
    """backward() without a gradient works exactly when numel == 1 (any shape) and equals a seed of ones."""
    for i, r in enumerate(case.roots):
        env, roots = B.build(case)
        root = roots[i]
        numel = int(np.prod(tuple(root.shape)))
        if not root.requires_grad:
            continue
        err = _raises(lambda: B.backward([root], None))
        if numel == 1:
            assert err is None, f"{B.name}: implicit seed on a numel-1 root of shape {tuple(root.shape)} raised {err!r}"
            got = {l.name: B.leaf_grad(env[l.name]) for l in case.grad_leaves()}
            env2, roots2 = B.build(case)
            ones = np.ones(tuple(root.shape), dtype=np.asarray(case.evaluate()[r]).dtype)
            B.backward([roots2[i]], [B.seed(ones, roots2[i])])
            for l in case.grad_leaves():
                a, b = got[l.name], B.leaf_grad(env2[l.name])
                assert (a is None) == (b is None), f"{B.name}: implicit vs ones seed: None-ness differs for {l.name}"
                if a is not None:
                    assert np.array_equal(a, b, equal_nan=True), f"{B.name}: implicit seed != ones for {l.name}"
        else:
            assert isinstance(err, RuntimeError) and str(err) == E.MSG_IMPLICIT, (
                f"{B.name}: implicit seed on root {r!r} of shape {tuple(root.shape)} (numel {numel}) gave {err!r}"
            )


def _wrong_shapes(shape):
    shape = tuple(shape)
    out = [shape + (1,), (1,) + shape]
    if shape:
        out.append(shape[1:])
        out.append(tuple(s + 1 for s in shape))
        if len(shape) >= 2:
            out.append(shape[::-1] if shape[::-1] != shape else shape[:-1])
    else:
        out.append((1,))
    return [s for s in out if s != shape]


def prop_seed_shape_exact(B, case, data):
    """An explicit seed must have exactly the root's shape: no broadcasting, () != (1,)."""
    i = data.draw(st.integers(0, len(case.roots) - 1), label="root")
    env, roots = B.build(case)
    root = roots[i]
    wrong = data.draw(st.sampled_from(_wrong_shapes(tuple(root.shape))), label="wrong seed shape")
    err = _raises(lambda: B.backward([root], [B.seed(np.ones(wrong), root)]))
    assert isinstance(err, RuntimeError) and str(err).startswith("Mismatch in shape: grad_output[0] has a shape of"), (
        f"{B.name}: seed of shape {wrong} for root of shape {tuple(root.shape)} gave {err!r}"
    )


def prop_linear_in_seed(B, case, data):
    """J^T (a s1 + b s2) == a J^T s1 + b J^T s2."""
    shapes = case.shapes()
    s1 = [np.random.default_rng(1).standard_normal(shapes[r]) for r in case.roots]
    s2 = [np.random.default_rng(2).standard_normal(shapes[r]) for r in case.roots]
    a = data.draw(st.sampled_from([2.0, -1.5, 0.25, 3.0]), label="a")
    b = data.draw(st.sampled_from([1.0, -0.5, 4.0]), label="b")
    _, g1 = run_backward(B, case, s1)
    _, g2 = run_backward(B, case, s2)
    _, g = run_backward(B, case, [a * x + b * y for x, y in zip(s1, s2)])
    m1, m2 = magnitude(case, s1), magnitude(case, s2)
    for l in case.grad_leaves():
        if g[l.name] is None:
            assert g1[l.name] is None and g2[l.name] is None
            continue
        combo = a * np.nan_to_num(g1[l.name]) + b * np.nan_to_num(g2[l.name]) if g1[l.name] is not None else None
        assert_close(g[l.name], combo, abs(a) * m1[l.name] + abs(b) * m2[l.name], f"{B.name}: linearity, leaf {l.name}", rtol=rtol_for(case))


def prop_accumulates_over_calls(B, case, data):
    """k backward calls (retain_graph=True) accumulate to k times one call."""
    k = data.draw(st.integers(2, 4), label="k")
    _, once = run_backward(B, case)
    _, many = run_backward(B, case, repeat=k)
    m = magnitude(case)
    for l in case.grad_leaves():
        if once[l.name] is None:
            assert many[l.name] is None, f"{B.name}: leaf {l.name} got a gradient only after repeated calls"
            continue
        assert_close(many[l.name], k * once[l.name], k * m[l.name], f"{B.name}: {k} calls, leaf {l.name}", rtol=rtol_for(case))


def prop_multi_root_is_sum(B, case, data):
    """backward([r1, r2, ...], [s1, s2, ...]) == sum of the single-root backward calls."""
    seeds = explicit_seeds(case)
    _, together = run_backward(B, case, seeds)
    total = {l.name: None for l in case.grad_leaves()}
    for i in range(len(case.roots)):
        env, roots = B.build(case)
        B.backward([roots[i]], [B.seed(seeds[i], roots[i])])
        for l in case.grad_leaves():
            g = B.leaf_grad(env[l.name])
            if g is not None:
                total[l.name] = g if total[l.name] is None else total[l.name] + g
    m = magnitude(case)
    for l in case.grad_leaves():
        assert (together[l.name] is None) == (total[l.name] is None), f"{B.name}: multi-root None-ness, leaf {l.name}"
        if total[l.name] is not None:
            assert_close(together[l.name], total[l.name], m[l.name], f"{B.name}: multi-root sum, leaf {l.name}", rtol=rtol_for(case))


def _split_first_shared_leaf(case):
    """A copy of the case where one use of a leaf used twice reads a new, equal leaf instead."""
    uses = {}
    for n in case.nodes:
        for k, i in enumerate(n.inputs):
            uses.setdefault(i, []).append((n.name, k))
    for l in case.grad_leaves():
        if len(uses.get(l.name, [])) >= 2:
            other = gs.Case.from_json(case.to_json())
            node_name, k = uses[l.name][-1]
            new = l.name + "_copy"
            other.leaves.append(gs.case.Leaf(new, np.array(l.value, copy=True), True))
            node = next(n for n in other.nodes if n.name == node_name)
            node.inputs[k] = new
            return l.name, new, other
    return None


def prop_every_use_contributes(B, case, data):
    """A leaf used twice gets the sum of both uses' contributions (split one use into its own leaf)."""
    split = _split_first_shared_leaf(case)
    if split is None or any(r == split[0] for r in case.roots):
        return
    name, copy, other = split
    _, whole = run_backward(B, case)
    _, parts = run_backward(B, other)
    m = magnitude(case)
    a, b = parts[name], parts[copy]
    want = None if a is None and b is None else (0 if a is None else a) + (0 if b is None else b)
    assert (whole[name] is None) == (want is None), f"{B.name}: leaf {name} used twice: None-ness differs"
    if want is not None:
        assert_close(whole[name], want, m[name], f"{B.name}: leaf {name} used twice", rtol=rtol_for(case))


def prop_reset(B, case, data):
    """After grad = None (zero_grad), the next backward starts from scratch."""
    env, roots = B.build(case)
    seeds = explicit_seeds(case)
    B.backward(roots, [B.seed(s, r) for s, r in zip(seeds, roots)], retain_graph=True)
    first = {l.name: B.leaf_grad(env[l.name]) for l in case.grad_leaves()}
    for l in case.grad_leaves():
        B.set_grad_none(env[l.name])
        assert B.leaf_grad(env[l.name]) is None
    B.backward(roots, [B.seed(s, r) for s, r in zip(seeds, roots)])
    for l in case.grad_leaves():
        a, b = B.leaf_grad(env[l.name]), first[l.name]
        assert (a is None) == (b is None)
        if a is not None:
            assert np.array_equal(a, b, equal_nan=True), f"{B.name}: reset then backward != first backward, leaf {l.name}"


def prop_freeing_matches_torch(B, case, data):
    """A second backward without retain_graph raises exactly where torch raises, with its message."""
    def second(backend):
        env, roots = backend.build(case)
        seeds = explicit_seeds(case)
        backend.backward(roots, [backend.seed(s, r) for s, r in zip(seeds, roots)])
        return _raises(lambda: backend.backward(roots, [backend.seed(s, r) for s, r in zip(seeds, roots)]))

    mine, theirs = second(B), second(TORCH_CPU)
    assert (mine is None) == (theirs is None), f"{B.name} raised {mine!r} but torch raised {theirs!r}"
    if theirs is not None:
        assert type(mine) is type(theirs) and str(mine) == str(theirs), f"{B.name}: {mine!r} vs torch {theirs!r}"


def prop_inputs_restrict(B, case, data):
    """backward(inputs=S) accumulates into S only, with the same values as a full backward."""
    leaves = case.grad_leaves()
    subset = data.draw(st.lists(st.sampled_from([l.name for l in leaves]), min_size=1, unique=True), label="inputs")
    _, full = run_backward(B, case)
    env, roots = B.build(case)
    seeds = explicit_seeds(case)
    B.backward(roots, [B.seed(s, r) for s, r in zip(seeds, roots)], inputs=[env[n] for n in subset])
    for l in leaves:
        g = B.leaf_grad(env[l.name])
        if l.name in subset:
            assert (g is None) == (full[l.name] is None), f"{B.name}: inputs= None-ness, leaf {l.name}"
            if g is not None:
                assert_close(g, full[l.name], magnitude(case)[l.name], f"{B.name}: inputs=, leaf {l.name}", rtol=rtol_for(case))
        else:
            assert g is None, f"{B.name}: leaf {l.name} not in inputs={subset} got a gradient"


def prop_grad_does_not_touch_dot_grad(B, case, data):
    """autograd.grad returns J^T seed and leaves every .grad as it was (None)."""
    env, roots = B.build(case)
    seeds = explicit_seeds(case)
    leaves = [env[l.name] for l in case.grad_leaves()]
    if not leaves:
        return
    got = B.grad(roots, leaves, [B.seed(s, r) for s, r in zip(seeds, roots)], allow_unused=True)
    for l in case.grad_leaves():
        assert B.leaf_grad(env[l.name]) is None, f"{B.name}: grad() wrote .grad of leaf {l.name}"
    _, full = run_backward(B, case)
    for l, g in zip(case.grad_leaves(), got):
        a = B.np(g)
        assert (a is None) == (full[l.name] is None), f"{B.name}: grad() vs backward None-ness, leaf {l.name}"
        if a is not None:
            assert np.array_equal(a, full[l.name], equal_nan=True), f"{B.name}: grad() != backward, leaf {l.name}"


def prop_nonleaf_grad(B, case, data):
    """A non-leaf's .grad is None after backward unless retain_grad(); then it is d(sum <seed, root>)/d node."""
    import warnings

    inner = [n.name for n in case.nodes]
    if not inner:
        return
    name = data.draw(st.sampled_from(inner), label="non-leaf")
    retain = data.draw(st.booleans(), label="retain_grad")
    env, roots = B.build(case)
    t = env[name]
    if not t.requires_grad or t.is_leaf:  # (torch's flatten over nothing returns its input: the leaf itself)
        return
    if retain:
        t.retain_grad()
    seeds = explicit_seeds(case)
    B.backward(roots, [B.seed(s, r) for s, r in zip(seeds, roots)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = t.grad
    if not retain:
        assert g is None, f"{B.name}: non-leaf {name} has .grad without retain_grad()"
        return
    env2, roots2 = B.build(case)
    (want,) = B.grad(roots2, [env2[name]], [B.seed(s, r) for s, r in zip(seeds, roots2)], allow_unused=True)
    a, b = B.np(g), B.np(want)
    assert (a is None) == (b is None), f"{B.name}: retained grad of {name}: {a} vs grad() {b}"
    if a is not None:
        assert_close(a, b, np.abs(b), f"{B.name}: retained grad of {name}", rtol=rtol_for(case))


def prop_double_backward_matches_torch(B, case, data):
    """create_graph=True: d/dx <w, J^T seed> equals torch's."""
    def second(backend):
        env, roots = backend.build(case)
        seeds = explicit_seeds(case)
        leaves = [env[l.name] for l in case.grad_leaves()]
        gs1 = backend.grad(roots, leaves, [backend.seed(s, r) for s, r in zip(seeds, roots)], create_graph=True,
                           allow_unused=True)
        total = None
        for k, g in enumerate(gs1):
            if g is None or not g.requires_grad:
                continue
            # One weight per leaf, independent of which gradients happen to carry a graph (torch's
            # abs backward does, gradspec's constant-sign one does not): both sides use the same w.
            w = backend.seed(np.random.default_rng(3 + k).standard_normal(tuple(g.shape)), g)
            term = (g * w).sum()
            total = term if total is None else total + term
        if total is None:
            return [None] * len(leaves)
        return [backend.np(x) for x in backend.grad([total], leaves, None, allow_unused=True)]

    mine, theirs = second(B), second(TORCH_CPU)
    # Scale: the magnitudes in play (values of the graph), so a second derivative that is
    # mathematically 0 but comes out as rounding residue (div(v, v): 3e-16 vs torch's 0) passes,
    # while a structurally wrong double backward (O(1) differences) does not.  rtol 1e-7: two
    # chained backward passes of rounding, far below any structural error.
    values = [np.abs(np.asarray(v, dtype=np.float64)) for v in case.evaluate().values()
              if np.issubdtype(np.asarray(v).dtype, np.floating) and np.size(v)]
    vmax = max([float(np.max(v[np.isfinite(v)], initial=0.0)) for v in values] + [0.0])
    for l, a, b in zip(case.grad_leaves(), mine, theirs):
        a = np.zeros(l.shape) if a is None else a
        b = np.zeros(l.shape) if b is None else b
        scale = max(float(np.max(np.abs(b), initial=0.0)), vmax)
        assert_close(a, b, scale, f"{B.name} vs torch: double backward, leaf {l.name}", rtol=rtol_for(case, 1e-7))


PROPERTIES = {
    "implicit-seed": prop_implicit_seed,
    "seed-shape-exact": prop_seed_shape_exact,
    "linear-in-seed": prop_linear_in_seed,
    "accumulates-over-calls": prop_accumulates_over_calls,
    "multi-root-is-sum": prop_multi_root_is_sum,
    "every-use-contributes": prop_every_use_contributes,
    "reset": prop_reset,
    "freeing-matches-torch": prop_freeing_matches_torch,
    "inputs-restrict": prop_inputs_restrict,
    "grad-does-not-touch-dot-grad": prop_grad_does_not_touch_dot_grad,
    "nonleaf-grad": prop_nonleaf_grad,
    "double-backward-matches-torch": prop_double_backward_matches_torch,
}
