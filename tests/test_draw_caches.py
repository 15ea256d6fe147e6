"""The draw's per-graph caches and definitions-once agree with the general path they replace (issue 15):
leaf values from the per-graph leaf plan vs ``draw_array``/``draw_bools``, a graph's builder shapes vs the
case's shape rules (``Graph.case`` validates roots and seeds against them), the tie/kink candidates kept
on a graph vs computed afresh after a detach, and param composites defined once vs the shapes they get."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from gradspec import domains as D
from gradspec import strategies as gst
from gradspec._private.sampling import sample
from gradspec.case import CaseError, NodeDef
from gradspec.spec import registry

_cases = importlib.import_module("gradspec.strategies._cases")
_graph = importlib.import_module("gradspec.strategies._graph")
_hard = importlib.import_module("gradspec.strategies._hard")


def _fake_draw(pattern: int):
    """A draw answering each bytes choice with ``k`` bytes of a fixed pattern (k read off the strategy)."""
    sizes = {id(_cases._raw(k)): k for k in range(0, 400)}

    def draw(strategy):
        k = sizes[id(strategy)]
        return bytes((pattern * (i + 1) * 37) % 256 for i in range(k))

    return draw


LEAVES = {  # id -> GraphLeaf
    "float64-moderate": _graph.GraphLeaf("a", (2, 3), "float64", True, [D.real()]),
    "float32": _graph.GraphLeaf("a", (4,), "float32", True, [D.real()]),
    "positive-domain": _graph.GraphLeaf("a", (3, 1), "float64", True, [D.positive(), D.real()]),
    "two-domains": _graph.GraphLeaf("a", (5,), "float64", True, [D.positive(), D.away_from(1.0)]),
    "scalar": _graph.GraphLeaf("a", (), "float64", True, [D.real()]),
    "empty": _graph.GraphLeaf("a", (0, 2), "float64", True, [D.real()]),
    "large (numpy decoding)": _graph.GraphLeaf("a", (5, 5), "float64", True, [D.real()]),
    "bool": _graph.GraphLeaf("a", (2, 2), "bool", False, []),
    "bool empty": _graph.GraphLeaf("a", (0,), "bool", False, []),
}


@pytest.mark.parametrize("pattern", [0, 1, 7, 255])
@pytest.mark.parametrize("leaf", list(LEAVES.values()), ids=list(LEAVES))
def test_leaf_values_from_the_plan_equal_draw_array_and_draw_bools(leaf, pattern):
    g = _graph.Graph([leaf], [], ["a"], {"a": leaf.shape}, {"a": leaf.requires_grad})
    got = _cases.leaf_values(_fake_draw(pattern), g)["a"]
    if leaf.is_float:
        want = _cases.draw_array(_fake_draw(pattern), leaf.shape, leaf.domains, leaf.dtype)
    else:
        want = _cases.draw_bools(_fake_draw(pattern), leaf.shape)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)


def test_the_leaf_plan_and_the_plant_candidates_follow_a_detach():
    g = next(x for x in sample(gst.graphs(ops=["relu", "add"], min_nodes=2, max_nodes=3, max_leaves=4), 40, 5)
             if any(i.startswith("v") for n in x.nodes for i in n.inputs) and len(x.leaves) < 4)
    assert len(_cases._leaf_plan(g)) == len(g.leaves)
    before = _hard._candidates_of(g)
    assert before == _hard.candidates(g)
    idx = next(k for k, n in enumerate(g.nodes) if any(i.startswith("v") for i in n.inputs))
    vals = {l.name: np.ones(l.shape) for l in g.leaves}
    assert _cases._detach_input(g, idx, [], vals, np.random.default_rng(0), _graph._config(
        ["relu", "add"], 1, 4, 1, 3, 1, 1, "float64", 0, 3, 0, 4, 256))
    assert [p[0] for p in _cases._leaf_plan(g)] == [l.name for l in g.leaves]  # the new leaf is drawn too
    assert _hard._candidates_of(g) == _hard.candidates(g)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_builder_shapes_are_the_case_shape_rules(seed):
    for g in sample(gst.graphs(), 30, seed):
        seeds = [np.ones(g.shapes[r]) for r in g.roots]
        case = g.case({l.name: np.ones(l.shape, dtype=l.dtype) for l in g.leaves}, seeds)
        got = case.shapes()
        assert got == {k: tuple(g.shapes[k]) for k in got}


def test_graph_case_still_rejects_a_seed_of_the_wrong_shape():
    g = sample(gst.graphs(ops=["mul"], min_dims=1), 1, 0)[0]
    bad = [np.ones(tuple(g.shapes[r]) + (2,)) for r in g.roots]
    with pytest.raises(CaseError, match="seed for root"):
        g.case({l.name: np.ones(l.shape) for l in g.leaves}, bad)


def test_graph_case_checks_seeds_against_the_values_shapes_when_they_differ_from_the_plan():
    # relu(x0) planned (3,): values of shape (2,) make the root (2,), and a (3,) seed no longer fits it
    leaf = _graph.GraphLeaf("x0", (3,), "float64", True, [D.real()])
    node = NodeDef("v0", "relu", ["x0"], {})
    g = _graph.Graph([leaf], [node], ["v0"], {"x0": (3,), "v0": (3,)}, {"x0": True, "v0": True})
    assert g.case({"x0": np.ones(3)}, [np.ones(3)]).roots == ["v0"]
    with pytest.raises(CaseError, match="seed for root"):
        g.case({"x0": np.ones(2)}, [np.ones(3)])


def _check_reshape(shape, p):
    assert registry.lookup("reshape").out_shape([shape], registry.lookup("reshape").canonical([shape], p)) is not None


def _check_index_select(shape, p):
    size = shape[p["dim"] % len(shape)]
    assert all(0 <= i < size for i in p["index"])


def _check_gather(shape, p):
    size = shape[p["dim"] % len(shape)]
    assert all(0 <= i < size for i in np.ravel(p["index"]).tolist())
    assert len(p["index_shape"]) == len(shape)


def _check_expand(shape, p):
    assert len(p["size"]) >= len(shape)


def _check_index(shape, p):
    ints = [(k, it["int"]) for k, it in enumerate(p["index"]) if "int" in it]
    assert all(-max(shape) <= v < max(shape) for _, v in ints)


PARAM_OPS = {"reshape": _check_reshape, "index_select": _check_index_select, "gather": _check_gather,
             "expand": _check_expand, "index": _check_index}


@pytest.mark.parametrize("op", list(PARAM_OPS))
def test_param_composites_defined_once_use_the_shapes_they_are_given(op):
    # Alternate two shapes: a composite that kept the first call's shape would draw params for it.
    spec = registry.lookup(op)
    for shape in [(2, 3), (5, 1), (2, 3), (4, 4)]:
        for p in sample(spec.param_strategy((shape,)), 15, 0):
            PARAM_OPS[op](shape, p)
