"""A user op's forward cut while a case is drawn (review F6): marked per (op, input shapes), cleared by a later
call that returns in time, and said in the fuzz summary -- never a silent, process-long degradation.

While Hypothesis draws a case, gradspec runs each user op's forward (the shape probe, the value repair) bounded
by the per-case timeout (``gradspec.strategies._bounded``).  One slow call (a one-off stall) used to mark the whole
op hung for the rest of the process: every later drawing call of the op was skipped, and nobody was told.
A forward that hangs for good still reaches the case's own timed check, a ``timeout`` finding (tests/test_hangs.py).

No test here times anything: the slow call sleeps until the alarm cuts it, every other call returns at once
(microseconds against a 1 s bound).
"""

from __future__ import annotations

import signal

import numpy as np
import pytest

from gradspec._private.case_budget import case_timeout
from gradspec.strategies import _bounded
from tests import _hangs_forward as H

pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="per-case timeouts need signal.setitimer")

OP = "my_forward_slow_once"


def _call(shape):
    return _bounded.forward(H.forward_slow_once, [np.full(shape, 0.5)], {}, "a test's draw")


def test_a_cut_marks_the_shapes_not_the_op_and_a_later_return_in_time_clears_it():
    H.SLOW["calls"] = 0
    with _bounded.marking() as run, case_timeout(1.0):
        assert _call((3,)) is None  # the one slow call: cut
        assert _call((2,)) is not None  # other shapes: the op is not marked as a whole (it was, for the process)
        again = [_call((3,)) for _ in range(3)]
    # the cut shapes are skipped once, then tried again: the call returns in time and clears the mark
    assert again[0] is None and again[1] is not None and again[2] is not None, again
    cuts = run.cuts()
    assert [(c["op"], c["shapes"], c["draws_cut"], c["cleared"]) for c in cuts] == [(OP, [[3]], 2, True)], cuts
    assert cuts[0]["seconds"] == 1.0


def test_a_fuzz_run_lists_its_drawing_cuts_in_summary_json_the_index_and_the_terminal(tmp_path, capsys):
    from gradspec import fuzz, report
    from gradspec._cli_finish import _print_summary

    H.SLOW["calls"] = 0
    cfg = fuzz.Config(ops=["tests._hangs_forward:forward_slow_once"], oracles=["reference", "jacobian"],
                      case_timeout=1.0, max_examples=12, seed=1, report_dir=str(tmp_path), replay_saved=False)
    stats = fuzz.run_campaign(cfg)
    s = fuzz.summary_json(cfg, stats, ops=[OP])
    cuts = s["drawing_cuts"]
    assert [c["op"] for c in cuts] == [OP] and cuts[0]["draws_cut"] >= 1 and cuts[0]["seconds"] == 1.0, cuts
    assert s["status"] == "agree" and s["ops"][OP] == s["cases"] > 0, s  # the op itself is right
    with case_timeout(1.0):  # after the run: the op is called while drawing again (it was skipped for good)
        assert _call(tuple(cuts[0]["shapes"][0])) is not None
    words = f"user op {OP}: forward slower than 1 s while drawing at shapes"
    index = report.write_run_report(str(tmp_path), s)
    assert words in open(index).read()
    from gradspec import ci_outputs

    md = open(ci_outputs.write_summary_md(str(tmp_path / "summary.md"), s, str(tmp_path))).read()
    assert "forward slower than 1 s while drawing at shapes" in md, md  # (the op's name Markdown-escaped)
    capsys.readouterr()
    _print_summary(cfg, s, index, [OP])
    out = capsys.readouterr().out
    assert words in out and "draws cut" in out, out


def test_an_op_cut_at_two_shapes_in_a_row_waits_at_every_shapes_until_it_returns_in_time():
    # a forward that never returns cost one timeout per shape drawn (tests/test_hangs.py's fuzz run: 27 s -> 46 s)
    import gradspec as gs

    state = {"hang": True, "calls": 0}

    def forward(x):
        state["calls"] += 1
        while state["hang"]:
            import time
            time.sleep(1e9)
        return np.sin(x)

    op = gs.Op("my_forward_hangs_counted", forward=forward, vjp=lambda g, x, out: (g * np.cos(x),))
    with _bounded.marking() as run, case_timeout(1.0):
        def call(shape):
            return _bounded.forward(op, [np.ones(shape)], {}, "a test's draw")

        assert call((3,)) is None and call((2,)) is None and state["calls"] == 2
        assert call((4,)) is None and state["calls"] == 2  # a third shapes: not called
        state["hang"] = False
        assert call((5,)) is not None and state["calls"] == 3  # (the op-wide wait was one call)
        assert call((4,)) is not None and call((6,)) is not None  # returned in time: no op-wide wait
    assert [(c["shapes"], c["draws_cut"]) for c in run.cuts()] == [([[2]], 1), ([[3]], 1), ([[4]], 1)]


def test_the_cuts_of_several_workers_add_up():
    # (--workers K: each worker's chunks come back as Stats and are merged by the controller)
    from gradspec.fuzz import Stats

    def cut(shapes, k, cleared):
        return {"op": OP, "shapes": shapes, "seconds": 1.0, "where": "w", "draws_cut": k, "cleared": cleared}

    a, b = Stats(drawing_cuts=[cut([[3]], 2, False)]), Stats(drawing_cuts=[cut([[3]], 1, True), cut([[2]], 4, False)])
    merged = Stats()
    for s in (a, Stats.from_json(b.to_json())):
        merged.merge(s)
    assert [(c["shapes"], c["draws_cut"], c["cleared"]) for c in merged.drawing_cuts] == [([[2]], 4, False),
                                                                                         ([[3]], 3, True)]


def test_the_marks_of_a_cut_end_with_its_run():
    """(review14 #6) A cut under one run's timeout skipped the op in a later call with no timeout at all (None, the
    forward not called) and in every later run of the process."""
    H.SLOW["calls"] = 0
    with _bounded.marking() as run:
        with case_timeout(1.0):
            assert _call((3,)) is None and H.SLOW["calls"] == 1  # cut: (3,) is marked for this run
        assert _call((3,)) is not None and H.SLOW["calls"] == 2  # no timeout in force: no mark applies
    assert [c["draws_cut"] for c in run.cuts()] == [1]
    H.SLOW["calls"] = 0
    with _bounded.marking(), case_timeout(1.0):
        assert _call((3,)) is None and H.SLOW["calls"] == 1  # cut again, marked in this run only
    with _bounded.marking() as later, case_timeout(1.0):
        assert _call((3,)) is not None and H.SLOW["calls"] == 2  # a later run: called (it was skipped)
    assert later.cuts() == []
    H.SLOW["calls"] = 0
    with case_timeout(1.0):  # no run: each call is bounded on its own, nothing is marked
        assert _call((3,)) is None and _call((3,)) is not None and H.SLOW["calls"] == 2


def test_a_runs_marks_are_bounded(monkeypatch):
    import gradspec as gs

    state = {"calls": 0}

    def forward(x):
        state["calls"] += 1
        import time
        time.sleep(1e9)

    op = gs.Op("my_forward_hangs_bounded", forward=forward, vjp=lambda g, x, out: (g,))
    monkeypatch.setattr(_bounded, "MAX_MARKS", 2)
    with _bounded.marking() as run, case_timeout(0.2):
        assert _bounded.forward(op, [np.ones(2)], {}, "a test's draw") is None
        assert _bounded.forward(op, [np.ones(3)], {}, "a test's draw") is None  # two in a row: the op waits
        assert all(_bounded.forward(op, [np.ones(k)], {}, "a test's draw") is None for k in range(4, 9))
        assert len(run.marked()) <= 2
    cuts = run.cuts()
    # called at (2,), (3,), then (the op-wide wait: 1 skip, then 2) at (5,) and (8,); every cut still counted
    assert state["calls"] == 4 and sum(c["draws_cut"] for c in cuts) == 7, cuts
    assert not hasattr(_bounded, "hung")  # (exported, used nowhere)


def _chunks_paying(tmp_path, monkeypatch, chunks: int) -> tuple[list, list]:
    """Timeouts paid by the drawing calls of an op whose forward 'hangs' for good, over ``chunks`` chunks of one
    run in one worker: (timeouts per chunk, the drawing cuts each chunk sends back).  guard.bounded is replaced by
    a stand-in that says "hung" for the op without calling it (one call = one timeout a real hang would cost)."""
    from gradspec.fuzz import workers
    from gradspec.fuzz.state import Config
    from gradspec.guard import Hung

    paid = {"n": 0}

    def bounded(fn, what):
        if "my_forward_said_hung" in what:
            paid["n"] += 1
            raise Hung(what, 1.0)
        return fn()

    monkeypatch.setattr(_bounded, "bounded", bounded)
    monkeypatch.setattr(workers, "freeze_heap", lambda: None)  # (a worker's own process only)
    cfg = Config(ops=["tests._hangs_forward:forward_said_hung"], report_dir=str(tmp_path / "r"), max_examples=6,
                 seed=3, case_timeout=1.0, oracles=["reference", "finite-differences"], replay_saved=False)
    per_chunk, sent = [], []
    for k in range(chunks):
        before = paid["n"]
        stats = workers._chunk_stats(cfg, {"chunk": k}, lambda *a: None)
        per_chunk.append(paid["n"] - before)
        sent.append(stats.drawing_cuts)
    return per_chunk, sent


def test_a_worker_carries_its_drawing_marks_from_chunk_to_chunk(tmp_path, monkeypatch):
    """(fixrun #3) Each chunk of a worker was a run of its own, its marks new: a forward that hangs for good cost
    about as many timeouts in every chunk as in the first.  The marks are the worker's run's now (still per run:
    another run_id starts with none); each chunk sends back only the cuts it made (the controller adds them up)."""
    per_chunk, sent = _chunks_paying(tmp_path, monkeypatch, 3)
    assert per_chunk[0] >= 2, per_chunk  # (cut at two shapes in a row: the op waits at every shapes)
    assert per_chunk[1] + per_chunk[2] < per_chunk[0], per_chunk  # the later chunks keep waiting, doubling
    drawn = [sum(c["draws_cut"] for c in s) for s in sent]
    assert all(drawn), sent  # each chunk's cuts (skipped calls count as cut draws), none sent twice:
    assert sum(drawn) == sum(c["draws_cut"] for c in _worker_marks().cuts()), (drawn, _worker_marks().cuts())
    again, _ = _chunks_paying(tmp_path, monkeypatch, 1)  # another run (its own run_id) in the same worker
    assert again == per_chunk[:1], (again, per_chunk)  # starts with no marks: the first chunk's cost again


def _worker_marks():
    from gradspec.fuzz import workers

    marks = [v["_marks"] for v in workers._FOUND_HERE.values() if "_marks" in v]
    return marks[-1]
