"""gradspec.strategies: generated cases are valid, respect their bounds, cover the op table,
exercise the backward() corner cases (implicit seeds, fan-out, x*x, constants), shrink well, and
bad arguments fail up front with InvalidArgument naming the argument.

The soundness checks here are independent of the generator's own repair logic: they re-evaluate
each case and ask the op declarations (``Domain.contains``, ``OpSpec.singular_distance``).
"""

from __future__ import annotations

import doctest
import math
import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import gradspec as gs
from gradspec import domains as D
from gradspec import strategies as gst
from gradspec._private import values as values_module
from gradspec.case import Case
from gradspec.ops import OpSpec, register

MARGIN = 1e-3  # relative distance from kinks/ties/domain edges the strategies promise


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def _is_float(a) -> bool:
    return np.issubdtype(np.asarray(a).dtype, np.floating)


def _requires_grad(case: Case) -> dict[str, bool]:
    rg = {l.name: l.differentiable for l in case.leaves}
    for n in case.nodes:
        spec = case.spec(n.op)
        rg[n.name] = any(rg[i] for j, i in enumerate(n.inputs) if spec.input_differentiable(j))
    return rg


def assert_sound(case: Case) -> dict:
    """The promises of ``cases()``, checked from scratch; returns the evaluated values."""
    case.validate()
    env = case.evaluate()
    for name, v in env.items():
        if _is_float(v):
            assert np.all(np.isfinite(v)), f"{name} has non-finite values\n{case.to_text()}"
    planted = {h["node"] for h in case.meta.get("hard", [])}
    assert len(planted) <= 1
    for n in case.nodes:
        spec = case.spec(n.op)
        args = [env[i] for i in n.inputs]
        d = spec.singular_distance(args, n.params)
        if n.name in planted:  # a tie/kink on purpose: exactly on it, never merely near it
            assert d == 0, f"planted {n.name}={n.op}(...) is {d:g} from its kink, not on it\n{case.to_text()}"
            continue
        for i, (a, dom) in enumerate(zip(args, spec.domains_for(len(args)), strict=False)):
            if _is_float(a):
                bad = [float(v) for v in np.ravel(a) if not dom.contains(float(v))]
                assert not bad, f"input {i} of {n.name}={n.op}(...) leaves {dom.describe()}: {bad}\n{case.to_text()}"
        assert d >= MARGIN, f"{n.name}={n.op}(...) is {d:g} from a kink/tie/edge\n{case.to_text()}"
    rg = _requires_grad(case)
    shapes = case.shapes()
    for r, s in zip(case.roots, case.seeds, strict=True):
        assert rg[r], f"root {r} does not require grad: backward would raise\n{case.to_text()}"
        if s is None:
            assert int(np.prod(shapes[r])) == 1
        else:
            assert s.shape == shapes[r] and np.all(np.isfinite(s))
    assert case.n_inputs <= 1000
    assert Case.from_json(case.to_json()) == case
    return env


def _features(case: Case) -> set[str]:
    f = set()
    uses = Counter(i for n in case.nodes for i in n.inputs)
    shapes = case.shapes()
    if any(u > 1 for u in uses.values()):
        f.add("fan-out")
    if any(len(n.inputs) != len(set(n.inputs)) for n in case.nodes):
        f.add("x*x")
    if any(not l.requires_grad and _is_float(l.value) for l in case.leaves):
        f.add("constant leaf")
    if any(l.value.dtype == np.bool_ for l in case.leaves):
        f.add("bool leaf")
    if any(s is None for s in case.seeds):
        f.add("implicit seed")
    if any(s is not None and int(np.prod(shapes[r])) == 1 for r, s in zip(case.roots, case.seeds, strict=True)):
        f.add("explicit seed on numel-1 root")
    for r in case.roots:
        if int(np.prod(shapes[r])) == 1:
            f.add(f"numel-1 root of rank {len(shapes[r])}")
    if len(case.roots) > 1:
        f.add("several roots")
    leaf_names = {l.name for l in case.leaves}
    if any(r in leaf_names for r in case.roots):
        f.add("leaf root")
    if any(s is not None and s.dtype != case.evaluate()[r].dtype for r, s in zip(case.roots, case.seeds, strict=True)):
        f.add("seed of another dtype")
    if any(0 in l.shape for l in case.leaves):
        f.add("empty leaf")
    if any(1 in l.shape for l in case.leaves):
        f.add("size-1 axis")
    f.add(case.meta["dtype"])
    if case.meta.get("hard"):
        f.add("tie/kink")
    return f


# ---------------------------------------------------------------------------------------------
# whole cases
# ---------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(gst.cases())
def test_every_case_is_valid_finite_and_away_from_kinks(case):
    assert 1 <= len(case.nodes) <= 10 and 1 <= len(case.leaves) <= 4 and 1 <= len(case.roots) <= 3
    assert_sound(case)


@settings(max_examples=25, deadline=None)
@given(gst.cases(dtype="float32", ops=["mul", "exp", "sum", "matmul", "where", "log"]))
def test_float32_cases_have_float32_leaves(case):
    assert all(l.value.dtype in (np.float32, np.bool_) for l in case.leaves)
    assert all(n.op in ("mul", "exp", "sum", "matmul", "where", "log") for n in case.nodes)
    assert_sound(case)


MIXED_OPS = ["add", "mul", "maximum", "exp", "sum", "matmul", "cat", "linear"]


@settings(max_examples=30, deadline=None)
@given(gst.cases(dtype="mixed", ops=MIXED_OPS))
def test_mixed_cases_mix_dtypes_only_where_torch_promotes(case):
    env = assert_sound(case)
    floats = {l.value.dtype for l in case.leaves if _is_float(l.value)}
    assert case.meta["dtype"] in ("mixed", "float64")
    assert (floats == {np.dtype("float32"), np.dtype("float64")}) == (case.meta["dtype"] == "mixed")
    for n in case.nodes:
        ins = {env[i].dtype for i in n.inputs if _is_float(env[i])}
        if n.op not in ("add", "mul", "maximum"):  # matmul, cat, linear...: one dtype
            assert len(ins) <= 1, f"{n.name}={n.op} mixes {ins}\n{case.to_text()}"


def test_hard_cases_put_one_node_exactly_on_its_tie_or_kink():
    seen = Counter()

    @settings(max_examples=80, deadline=None, derandomize=True, database=None)
    @given(gst.cases(ops=["relu", "abs", "maximum", "amax", "clamp", "add"], max_nodes=3))
    def collect(case):
        assert_sound(case)  # the planted node sits at distance 0, every other node clear of kinks
        for h in case.meta.get("hard", []):
            seen[h["op"]] += 1

    collect()
    assert sum(seen.values()) >= 4 and len(seen) >= 2, seen


BOUNDS = dict(min_leaves=2, max_leaves=3, min_nodes=2, max_nodes=5, min_roots=2, max_roots=2, min_dims=1,
              max_dims=2, min_side=2, max_side=3)


BOUNDED_OPS = ["add", "mul", "exp", "log", "sum", "amax", "matmul", "linear", "where", "cat", "stack", "softmax"]


@settings(max_examples=30, deadline=None)
@given(gst.cases(ops=BOUNDED_OPS, **BOUNDS))
def test_cases_respect_their_bounds(case):
    assert 2 <= len(case.leaves) <= 3 and 2 <= len(case.nodes) <= 5 and len(case.roots) == 2
    for l in case.leaves:
        assert 1 <= len(l.shape) <= 2 and all(2 <= s <= 3 for s in l.shape), l.shape
    assert_sound(case)


@settings(max_examples=20, deadline=None)
@given(gst.cases(ops=["conv1d"], min_dims=2, max_nodes=2))
def test_the_shape_rule_wins_over_dims_bounds_it_cannot_meet(case):
    # conv1d's bias is 1-D: min_dims bounds the shapes the op leaves free, not the bias
    assert_sound(case)
    for n in case.nodes:
        x = case.shapes()[n.inputs[0]]
        assert len(x) >= 2


@settings(max_examples=30, deadline=None)
@given(gst.graphs(ops=["add", "sum", "log", "where", "cat", "linear"], max_nodes=6))
def test_graphs_are_shape_valid_structures(g):
    assert isinstance(g, gst.Graph) and 1 <= len(g.nodes) <= 6
    assert all(n.op in ("add", "sum", "log", "where", "cat", "linear") for n in g.nodes)
    assert all(g.requires_grad[r] for r in g.roots)
    # values of the right shapes (ones are inside every domain used here) make a valid case
    vals = {l.name: (np.ones(l.shape) if l.is_float else np.ones(l.shape, dtype=bool)) for l in g.leaves}
    seeds = [np.ones(g.shapes[r]) for r in g.roots]
    case = g.case(vals, seeds)
    assert case.shapes() == {k: tuple(v) for k, v in g.shapes.items()}


@settings(max_examples=30, deadline=None)
@given(gst.cases(ops=["log", "sqrt", "pow", "tan", "log1p", "div", "mul", "exp"], max_nodes=6))
def test_restricted_domains_hold_at_the_actual_inputs(case):
    env = assert_sound(case)
    for n in case.nodes:
        if n.op in ("log", "sqrt"):
            assert np.all(env[n.inputs[0]] > 0)
        if n.op == "div":
            assert np.all(np.abs(env[n.inputs[1]]) >= 0.1)


# ---------------------------------------------------------------------------------------------
# census: coverage of ops and of the backward() corner cases over many cases
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def census():
    """Features of 480 cases from the default op list.

    Drawn 8 per example with ``st.data()``: within one example Hypothesis draws independently,
    whereas across examples it mutates earlier ones (copying node spans), which clusters ops.
    Derandomized, so the coverage assertions below see a fixed sample and cannot flake.
    """
    ops, feats, n_inputs, nodes = Counter(), Counter(), [], []

    @settings(max_examples=60, deadline=None, derandomize=True, database=None)
    @given(st.data())
    def collect(data):
        for _ in range(8):
            case = data.draw(gst.cases())
            ops.update(set(case.ops))
            feats.update(_features(case))
            n_inputs.append(case.n_inputs)
            nodes.append(len(case.nodes))

    collect()
    return {"ops": ops, "features": feats, "n_inputs": n_inputs, "nodes": nodes, "n": len(nodes)}


def test_every_table_op_is_generated(census):
    assert gst.unusable_ops() == {}, "ops the strategies cannot build from their declaration"
    missing = set(gs.ops.names()) - set(census["ops"])
    assert not missing, f"never generated in {census['n']} cases: {sorted(missing)}"


@pytest.mark.parametrize(
    "feature",
    ["fan-out", "x*x", "constant leaf", "bool leaf", "implicit seed", "explicit seed on numel-1 root",
     "numel-1 root of rank 0", "numel-1 root of rank 1", "numel-1 root of rank 2", "several roots", "leaf root",
     "seed of another dtype", "empty leaf", "size-1 axis"],
)
def test_backward_corner_cases_are_generated(census, feature):
    assert census["features"][feature] > 0, f"{feature!r} never appears in {census['n']} cases"


def test_common_features_are_common(census):
    n = census["n"]
    assert census["features"]["implicit seed"] >= 0.15 * n
    assert census["features"]["fan-out"] >= 0.15 * n
    assert census["features"]["size-1 axis"] >= 0.3 * n


def test_hard_regions_are_in_the_default_mix(census):
    # float32 and mixed graphs, and exact ties/kinks, are part of what cases() draws by default
    n, f = census["n"], census["features"]
    assert f["float64"] >= 0.4 * n and f["float32"] >= 0.1 * n and f["mixed"] >= 0.02 * n
    assert f["tie/kink"] >= 0.01 * n


def test_sizes_stay_small(census):
    ins = np.array(census["n_inputs"])
    assert ins.max() <= 1000
    assert np.median(ins) <= 100 and np.mean(ins <= 100) >= 0.9
    assert np.mean(census["nodes"]) >= 2.5  # not all trivial graphs


# ---------------------------------------------------------------------------------------------
# shrinking
# ---------------------------------------------------------------------------------------------

def _find(strategy, condition):
    """``hypothesis.find`` with a fixed random source: the same minimal example every run."""
    return find(strategy, condition, settings=settings(database=None, max_examples=1000), random=random.Random(0))


def test_shrinks_to_a_chain_of_the_simplest_op():
    case = _find(gst.cases(), lambda c: len(c.nodes) >= 3)
    simplest = gst.op_order()[0]
    assert len(case.nodes) == 3 and case.ops == [simplest] * 3
    assert len(case.leaves) == 1 and case.leaves[0].shape == ()
    assert case.seeds == [None] and float(case.leaves[0].value) == 1.0


def test_shrinks_to_small_shapes():
    case = _find(gst.cases(ops=["neg", "add"]), lambda c: any(l.value.size >= 4 for l in c.leaves))
    assert max(l.value.size for l in case.leaves) == 4 and len(case.nodes) == 1 and case.ops == ["neg"]


def test_shrinks_seeds_to_ones():
    case = _find(gst.cases(ops=["neg", "add", "sum"]), lambda c: any(s is not None and s.size >= 2 for s in c.seeds))
    explicit = [s for s in case.seeds if s is not None]
    assert explicit and all(np.all(s == 1) for s in explicit)


# ---------------------------------------------------------------------------------------------
# shapes, values, seeds
# ---------------------------------------------------------------------------------------------


def test_shapes_and_values_shrink_to_simple_ones():
    assert _find(gst.shapes(), lambda s: int(np.prod(s)) >= 4) == (4,)
    assert _find(gst.values((3,), D.positive()), lambda a: a.max() >= 1.5).tolist() == [1.0, 1.0, 2.0]


@settings(max_examples=50)
@given(gst.shapes(min_dims=1, max_dims=3, min_side=2, max_side=4))
def test_shapes_respect_bounds(shape):
    assert 1 <= len(shape) <= 3 and all(2 <= s <= 4 for s in shape)


def test_shapes_have_size_one_and_zero_sides():
    seen = Counter()

    @settings(max_examples=200, derandomize=True, database=None)
    @given(gst.shapes())
    def collect(shape):
        assert len(shape) <= 4 and all(0 <= s <= 5 for s in shape)
        seen.update(shape)

    collect()
    assert seen[1] >= 0.2 * sum(seen.values()) and seen[0] > 0


@settings(max_examples=50)
@given(gst.broadcastable_shapes((2, 1, 3), num_shapes=3))
def test_broadcastable_shapes_broadcast(bs):
    assert np.broadcast_shapes((2, 1, 3), *bs.input_shapes) == bs.result_shape


@settings(max_examples=50)
@given(gst.broadcastable_shapes(signature="(m,n),(n,p)->(m,p)"))
def test_broadcastable_shapes_with_a_signature(bs):
    a, b = bs.input_shapes
    assert a[-1] == b[-2]
    assert np.matmul(np.ones(a), np.ones(b)).shape == bs.result_shape


DOMAINS = {
    "real": D.real(),
    "positive": D.positive(),
    "tan": D.interval(-1.4, 1.4),
    "log1p": D.Domain(lo=-1.0, points=(-1.0,), name="greater than -1"),
    "away0": D.away_from(0.0, 0.1),
    "kinks": D.away_from([-1.0, 0.0, 2.0], 0.01),
    "narrow": D.interval(5.0, 6.0),
    "pow": [D.positive(), D.interval(-3.0, 3.0)],
}


@pytest.mark.parametrize("domain", list(DOMAINS.values()), ids=list(DOMAINS))
def test_values_lie_in_their_domain_away_from_edges(domain):
    doms = domain if isinstance(domain, list) else [domain]

    @settings(max_examples=40, database=None)
    @given(gst.values((3, 2), domain, min_magnitude=1e-3, max_magnitude=100.0))
    def check(a):
        assert a.shape == (3, 2) and a.dtype == np.float64 and np.all(np.isfinite(a))
        mags = np.abs(a)
        assert np.all((mags == 0) | ((mags >= 1e-3) & (mags <= 100.0)))
        for d in doms:
            assert all(d.contains(float(v)) for v in a.ravel())
            for p in list(d.points) + [e for e in (d.lo, d.hi) if math.isfinite(e)]:
                assert np.all(np.abs(a - p) >= MARGIN * np.maximum(1.0, np.abs(a)))

    check()


# Every kind of element (simple, moderate, log-uniform, wide, repeat) and short byte strings (missing bytes
# count as zero), in every DOMAINS entry: the per-element decoding of small leaves must be the array
# decoding bit for bit, or a saved example would replay as another case.
@pytest.mark.parametrize("domain", list(DOMAINS.values()), ids=list(DOMAINS))
def test_small_leaves_decode_exactly_as_large_ones(domain, monkeypatch):
    dec = values_module.decoder(tuple(domain if isinstance(domain, list) else [domain]), 1e-3, 1e3)
    rng = random.Random(0)
    kinds = [0, 76, 77, 178, 179, 228, 229, 249, 250, 255]
    for _ in range(200):
        n = rng.randint(1, values_module._SMALL)
        raw = bytes(rng.choice(kinds) if k % 4 == 0 and rng.random() < 0.5 else rng.getrandbits(8)
                    for k in range(rng.randint(0, 4 * n)))
        small = dec(raw, n)
        with monkeypatch.context() as m:
            m.setattr(values_module, "_SMALL", 0)
            large = dec(raw, n)
        assert small.dtype == large.dtype == np.float64
        assert small.view(np.int64).tolist() == large.view(np.int64).tolist(), raw.hex()


# The domain check at the drawn values, element by element for small arrays and vectorised for large
# ones: the same answer on values inside, on the margins, at singular points, non-finite, float32.
@pytest.mark.parametrize("domain", list(DOMAINS.values()), ids=list(DOMAINS))
def test_small_arrays_pass_the_margin_check_exactly_as_large_ones(domain, monkeypatch):
    rng = random.Random(1)
    special = [0.0, -0.0, 1.0, -1.0, 1e-3, -1e-3, 1.5e-3, 2.0, 5.0, 6.0, 5.0075, -0.999, math.inf, -math.inf, math.nan]
    for d in domain if isinstance(domain, list) else [domain]:
        for _ in range(300):
            n = rng.randint(1, values_module._SMALL)
            a = np.array([rng.choice(special) if rng.random() < 0.3 else rng.uniform(-3, 8) for _ in range(n)],
                         dtype=rng.choice([np.float64, np.float32]))
            small = values_module.element_margin_ok(d, a)
            with monkeypatch.context() as m:
                m.setattr(values_module, "_SMALL", 0)
                assert values_module.element_margin_ok(d, a) == small, (d, a)


def test_values_mix_interesting_values():
    seen = set()

    @settings(max_examples=150, derandomize=True, database=None)
    @given(gst.values((8,), D.real()))
    def collect(a):
        if np.any(a == 0):
            seen.add("zero")
        if len(set(a.tolist())) < a.size:
            seen.add("repeat")
        if np.any(a < 0):
            seen.add("negative")
        if np.any((np.abs(a) > 0) & (np.abs(a) <= 2e-3)):
            seen.add("tiny")
        if np.any(np.abs(a) >= 500):
            seen.add("large")
        if np.any((np.abs(a) > 1e-2) & (np.abs(a) < 100) & (a != np.round(a * 4) / 4)):
            seen.add("generic")

    collect()
    assert seen == {"zero", "repeat", "negative", "tiny", "large", "generic"}


@settings(max_examples=30)
@given(gst.values((2, 2), D.real(), dtype="float32"))
def test_values_in_float32(a):
    assert a.dtype == np.float32 and np.all(np.isfinite(a))


def test_seeds_cover_every_kind():
    seen = set()

    @settings(max_examples=150, derandomize=True, database=None)
    @given(st.sampled_from([(), (1,), (1, 1), (2, 3), (4,)]).flatmap(lambda s: st.tuples(st.just(s), gst.seeds(s))))
    def collect(shape_seed):
        shape, s = shape_seed
        if s is None:
            assert int(np.prod(shape)) == 1
            seen.add("implicit")
            return
        assert s.shape == shape and np.all(np.isfinite(s))
        assert s.dtype in (np.float64, np.float32)
        if s.dtype == np.float32:
            seen.add("other dtype")
        if s.size > 1:
            if np.all(s == 1):
                seen.add("ones")
            elif np.all(s == 0):
                seen.add("zeros")
            elif np.sum(s == 1) == 1 and np.sum(s == 0) == s.size - 1:
                seen.add("one-hot")
            elif np.all(s == np.round(s)):
                seen.add("integers")
            else:
                seen.add("random")

    collect()
    assert seen == {"implicit", "ones", "zeros", "one-hot", "integers", "random", "other dtype"}


# ---------------------------------------------------------------------------------------------
# user ops: the strategies read only the declaration
# ---------------------------------------------------------------------------------------------


def _noop_vjp(g, *inputs, out, **params):
    return tuple(None for _ in inputs)


def _concat_shape(*shapes, dim):
    if not shapes or any(len(s) != len(shapes[0]) or len(s) == 0 for s in shapes):
        return None
    if any(s[:-1] != shapes[0][:-1] for s in shapes):
        return None
    return shapes[0][:-1] + (sum(s[-1] for s in shapes),)


def _affine_shape(x, w, b):
    if len(x) != 1 or len(w) != 2 or w[1] != x[0] or tuple(b) != (w[0],):
        return None
    return (w[0],)


USER_OPS = [
    register(OpSpec(name="_gst_bmm", forward=np.matmul, vjp=_noop_vjp, arity=2,
                    signature="(m,n),(n,p)->(m,p)", user=True)),
    register(OpSpec(name="_gst_concat", forward=lambda *xs, dim: np.concatenate(xs, axis=dim), vjp=_noop_vjp,
                    arity=None, shape_fn=_concat_shape, param_strategy=lambda shapes: st.just({"dim": -1}),
                    user=True)),
    register(OpSpec(name="_gst_affine", forward=lambda x, w, b: w @ x + b, vjp=_noop_vjp, arity=3,
                    shape_fn=_affine_shape, user=True)),
    register(OpSpec(name="_gst_sqrt_sum", forward=lambda x, y: np.sqrt(x) + y, vjp=_noop_vjp, arity=2,
                    signature="(),()->()", domain=[D.positive(), D.real()], user=True)),
]


@pytest.mark.parametrize("spec", USER_OPS, ids=[s.name for s in USER_OPS])
def test_user_ops_are_generated_from_their_declaration(spec):
    seen = Counter()

    @settings(max_examples=25, deadline=None, database=None)
    @given(gst.cases(ops=[spec, "neg"], max_nodes=4))
    def check(case):
        assert_sound(case)
        seen.update(case.ops)

    check()
    assert seen[spec.name] > 0


def test_core_dims_of_a_signature_match():
    @settings(max_examples=25, deadline=None, database=None)
    @given(gst.cases(ops=["_gst_bmm"], max_nodes=3))
    def check(case):
        env = case.evaluate()
        for n in case.nodes:
            a, b = (env[i] for i in n.inputs)
            assert a.ndim >= 2 and b.ndim >= 2 and a.shape[-1] == b.shape[-2]

    check()


# ---------------------------------------------------------------------------------------------
# argument validation: InvalidArgument at call time, naming the argument
# ---------------------------------------------------------------------------------------------

BAD = [
    ("shapes min>max", lambda: gst.shapes(min_dims=3, max_dims=2), "min_dims=3"),
    ("shapes negative side", lambda: gst.shapes(min_side=-1), "min_side=-1"),
    ("shapes side min>max", lambda: gst.shapes(min_side=4, max_side=2), "min_side=4"),
    ("shapes non-int", lambda: gst.shapes(max_dims=2.5), "max_dims=2.5"),
    ("broadcastable negative", lambda: gst.broadcastable_shapes((2, -1)), "shape=(2, -1)"),
    ("broadcastable num_shapes", lambda: gst.broadcastable_shapes((2,), num_shapes=0), "num_shapes=0"),
    ("broadcastable both", lambda: gst.broadcastable_shapes((2,), num_shapes=2, signature="(n)->()"), "signature="),
    ("broadcastable bad signature", lambda: gst.broadcastable_shapes(signature="(n)"), "signature='(n)'"),
    ("values negative shape", lambda: gst.values((2, -3)), "shape=(2, -3)"),
    ("values dtype", lambda: gst.values((2,), dtype="int32"), "dtype='int32'"),
    ("values min_magnitude", lambda: gst.values((2,), min_magnitude=0), "min_magnitude=0"),
    ("values magnitudes order", lambda: gst.values((2,), min_magnitude=2.0, max_magnitude=1.0), "min_magnitude=2.0"),
    ("values huge", lambda: gst.values((2,), max_magnitude=1e12), "max_magnitude=1000000000000.0"),
    ("values empty domain", lambda: gst.values((2,), D.interval(5, 6), max_magnitude=1.0), "domain="),
    ("values not a domain", lambda: gst.values((2,), "positive"), "domain='positive'"),
    ("seeds shape", lambda: gst.seeds((-1,)), "shape=(-1,)"),
    ("seeds dtype", lambda: gst.seeds((2,), dtype="int8"), "dtype='int8'"),
    ("graphs empty ops", lambda: gst.graphs(ops=[]), "ops=[]"),
    ("graphs unknown op", lambda: gst.graphs(ops=["mul", "no_such_op"]), "no_such_op"),
    ("graphs bad op type", lambda: gst.graphs(ops=[3]), "ops="),
    ("graphs leaves order", lambda: gst.graphs(min_leaves=3, max_leaves=2), "min_leaves=3"),
    ("graphs zero leaves", lambda: gst.graphs(max_leaves=0), "max_leaves=0"),
    ("graphs negative nodes", lambda: gst.graphs(min_nodes=-1), "min_nodes=-1"),
    ("cases nodes order", lambda: gst.cases(min_nodes=5, max_nodes=2), "min_nodes=5"),
    ("cases zero roots", lambda: gst.cases(min_roots=0), "min_roots=0"),
    ("cases roots order", lambda: gst.cases(min_roots=3, max_roots=1), "min_roots=3"),
    ("cases dtype", lambda: gst.cases(dtype="float16"), "dtype='float16'"),
    ("cases dtype names the mixes", lambda: gst.cases(dtype="half"), "'mixed'"),
    ("cases dims order", lambda: gst.cases(min_dims=3, max_dims=1), "min_dims=3"),
    ("cases max_elements", lambda: gst.cases(max_elements=0), "max_elements=0"),
    ("cases unregistered spec", lambda: gst.cases(ops=[OpSpec(name="_gst_nowhere", forward=np.negative,
                                                              vjp=_noop_vjp, arity=1)]), "ops="),
]


@pytest.mark.parametrize("make, fragment", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_arguments_raise_invalid_argument_up_front(make, fragment):
    with pytest.raises(InvalidArgument) as info:
        make()  # no draw: the error comes when the strategy is created
    assert fragment in str(info.value)


def test_unknown_op_message_suggests_a_name():
    with pytest.raises(InvalidArgument, match="Did you mean 'mul'"):
        gst.cases(ops=["mull"])


def test_op_order_is_simple_first():
    order = gst.op_order()
    assert sorted(order) == sorted(gs.ops.names())
    assert order[0] == "neg" and order.index("add") < order.index("matmul")
    assert gst.op_order(["matmul", "mul", "neg"]) == ["neg", "mul", "matmul"]


@pytest.mark.parametrize("module", [gst, values_module], ids=["strategies", "_private.values"])
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 1 and result.failed == 0


def test_tame_array_draws_what_allowed_sample_draws_bit_for_bit():
    """``values.tame_array`` (the value repair's redraw) keeps its intervals and numpy's ``choice``
    arithmetic per domain set; it must give the very values, and leave the generator in the very state,
    of ``Allowed.sample`` on the tame set (Generator.choice with p, then the uniforms)."""
    from gradspec import domains as D
    from gradspec._private import values as V

    doms = [None, D.positive(), D.interval(-1, 1), D.interval(5, 6), D.interval(-3, 0.1), [D.positive(), D.interval(0, 2)],
            D.Domain(points=(0.0, 1.0), margin=0.1)]
    for d in doms:
        for seed in range(40):
            for shape in [(), (1,), (3,), (2, 4), (0,), (5, 1, 2)]:
                for dt in ("float64", "float32"):
                    r1, r2 = np.random.default_rng(seed), np.random.default_rng(seed)
                    a = V.tame_array(r1, shape, d, dtype=dt)
                    n = int(np.prod(shape, dtype=np.int64))
                    b = V._tame_set(d, 1e-3, 1e3).sample(r2, n).reshape(shape).astype(dt)
                    assert (a.dtype, a.shape, a.tobytes()) == (b.dtype, b.shape, b.tobytes()), (d, seed, shape)
                    assert r1.random() == r2.random()
