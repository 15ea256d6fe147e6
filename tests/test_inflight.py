"""The in-flight file (``gradspec.fuzz.inflight``): whatever set of a group is in flight when the process
dies, the crash reader gets back exactly the text ``Case.to_json`` writes for that case (the file stores
the group compactly: the graph once, each set's arrays as raw bytes)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import gradspec as gs
from gradspec._private.sampling import sample
from gradspec.case import CaseError, Leaf, NodeDef
from gradspec.fuzz.inflight import Inflight, case_json

NAN, INF = float("nan"), float("inf")


def _case(x, w=None, seed=None, params=None, meta=None, op="mul"):
    leaves = {"x": np.asarray(x)} if w is None else {"x": np.asarray(x), "w": np.asarray(w)}
    inputs = ["x", "x"] if w is None else ["x", "w"]
    nodes = [("h", op, inputs, params or {}), ("y", "sum", ["h"], {})]
    ones = np.ones(np.broadcast_shapes(*(np.shape(v) for v in leaves.values())))
    c = gs.Case.build(leaves, nodes, ["h", "y"], [ones if seed is None else seed, None])
    c.meta.update(meta or {})
    return c


def _specials():
    return [
        _case(np.array([0.5, -0.0, 0.0, 5e-324, 1.7976931348623157e308])),  # signed zero, subnormal, max
        _case(np.array([NAN, INF, -INF, 1.0])),  # non-finite leaves
        _case(np.array([1.5, -2.25], np.float32), np.array([3.0, 1e-40], np.float32)),  # float32 (a subnormal)
        _case(np.array([1.5, -2.25], np.float32), np.array(0.3)),  # mixed dtypes
        _case(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1.0, -1.0]), seed=np.array([[NAN, -0.0], [INF, 2.0]])),
        _case(np.array([1.0, 2.0]), meta={"accuracy": {"rtol": 1e-3, "atol": 0.0}, "hard": {"why": [1, 2.5]}}),
        _case(np.array([0.2, 3.0]), np.array([1.0, 1.0])),
    ]


def _odd_params():
    """Graphs that differ only in a param's type or sign of zero (written differently in JSON)."""
    def clamp(lo):
        return gs.Case.build({"x": np.array([-1.0, 0.5, 2.0])}, [("y", "clamp", ["x"], {"min": lo, "max": 1})], ["y"],
                             [np.ones(3)])
    return [clamp(0.0), clamp(-0.0), clamp(0), clamp(-0.5)]


def _with_bool_leaf():
    c = gs.Case.build({"x": np.array([1.0, -2.0, 3.0]), "m": np.array([True, False, True])},
                      [("y", "where", ["m", "x", "x"], {})], ["y"], [np.array([1.0, 2.0, 3.0])])
    return [c, gs.Case._unchecked([Leaf("x", np.array([4.0, 5.0, 6.0])), Leaf("m", np.array([False, False, True]), False)],
                                  [NodeDef(n.name, n.op, list(n.inputs), dict(n.params)) for n in c.nodes],
                                  list(c.roots), [np.array([0.5, 0.5, 0.5])], c.engine, dict(c.user_ops), {})]


GROUPS = {
    "special values, float32, mixed, seeds, meta": _specials,
    "params 0.0 / -0.0 / 0 in one group": _odd_params,
    "bool constant leaf, two sets sharing the graph": _with_bool_leaf,
    "drawn groups (the campaign's strategy)": lambda: [c for g in sample(gs.strategies.case_groups(max_sets=6), 12, 5)
                                                       for c in g],
}


@pytest.mark.parametrize("make", list(GROUPS.values()), ids=list(GROUPS))
def test_the_case_in_flight_reads_back_as_its_case_file(tmp_path, make):
    cases = make()
    path = tmp_path / "inflight-1.json"
    f = Inflight(str(path))
    try:
        f.group(cases)
        assert case_json(path.read_text()) is None  # none in flight yet
        for c in cases:
            f.start(c)
            got = case_json(path.read_text())
            assert got == c.to_json(indent=None)
            assert gs.Case.from_json(got) == c
            f.end()
            assert case_json(path.read_text()) is None
        outside = cases[0]
        f.group(cases[1:])
        f.start(outside)  # not in the group: a group of its own
        assert case_json(path.read_text()) == outside.to_json(indent=None)
    finally:
        f.close()
    assert not path.exists()


def test_a_group_shares_one_graph_in_the_file(tmp_path):
    cases = [c for g in sample(gs.strategies.case_groups(max_sets=6), 3, 2) for c in g[:1]]
    group = sample(gs.strategies.case_groups(max_sets=8), 1, 3)[0]
    path = tmp_path / "inflight-1.json"
    f = Inflight(str(path))
    f.group(list(group))
    d = json.loads(path.read_text())
    f.group(cases)
    d2 = json.loads(path.read_text())
    f.close()
    assert len(d["sets"]) == len(group) and len(d["graphs"]) == 1
    assert len(d2["graphs"]) == len(cases)  # three groups' first cases: three graphs


def test_older_files_still_read(tmp_path):
    c = _case(np.array([1.0, 2.0]))
    older = '{"gradspec_inflight": 1, "current":        0, "cases": [' + c.to_json(indent=None) + "]}"
    assert json.loads(case_json(older)) == json.loads(c.to_json(indent=None))
    assert case_json(c.to_json()) == c.to_json()  # one case's file (older still)


def test_an_array_a_case_file_cannot_hold_raises_as_to_json_does(tmp_path):
    c = _case(np.array([1.0, 2.0]))
    c.leaves[0].value = np.array([1 + 2j, 3j])
    with pytest.raises(CaseError):
        c.to_json()
    with pytest.raises(CaseError):
        Inflight(str(tmp_path / "inflight-1.json")).group([c])


def _die_in_flight(path, k):
    import os
    import signal

    cases = _specials()
    f = Inflight(path)
    f.group(cases)
    assert f.map is not None  # (the mark below goes through the memory map, not a write call)
    f.start(cases[k])
    os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no flush: what a segfault leaves


def test_the_mark_of_a_process_killed_in_flight_is_in_the_file(tmp_path):
    import multiprocessing

    path = str(tmp_path / "inflight-1.json")
    child = multiprocessing.get_context("fork").Process(target=_die_in_flight, args=(path, 3))
    child.start()
    child.join(60)
    assert child.exitcode == -9
    assert case_json(open(path).read()) == _specials()[3].to_json(indent=None)


def test_without_a_memory_map_the_marks_are_written(tmp_path, monkeypatch):
    import mmap

    def refuse(*a, **k):
        raise OSError("no mmap here")

    monkeypatch.setattr(mmap, "mmap", refuse)
    cases = _specials()
    path = tmp_path / "inflight-1.json"
    f = Inflight(str(path))
    f.group(cases)
    assert f.map is None
    f.start(cases[2])
    assert case_json(path.read_text()) == cases[2].to_json(indent=None)
    f.end()
    assert case_json(path.read_text()) is None
    f.close()
