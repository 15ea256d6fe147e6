"""What a new engine author found in gradspec's reports (tryout8: F4, F7, F8): each finding must say what is
actually wrong.  The engines are the planted ones of tests/_planted.py (their bugs are written there, not
derived from running gradspec)."""

from __future__ import annotations

import numpy as np

import gradspec as gs
from gradspec.oracles.engine_oracle import EngineOracle
from tests import _planted as P

# a forward that is constant (x - x) with a backward that passes g on: J = 0, J^T·g = 0 for every g
t8_flat_ste = gs.Op("t8_flat_ste", forward=lambda x: x - x, vjp=lambda g, x, out: (g,))


def _cause(case, engine):
    v = gs.check(case, [gs.oracles.get("reference"), EngineOracle(engine, name=engine.name)])
    assert v.status == "disagree", v.status
    c = v.discrepancies[0].cause
    assert c is not None
    return c


def test_softmax_with_a_seed_in_its_null_space_is_not_called_a_flat_forward():
    # tryout8 F8: softmax over dim -2 of a (2, 1) input with a seed of ones: J^T·1 = 0 because softmax's
    # outputs sum to 1 along dim, not because the forward is constant; the engine sums g*s over the last axis
    case = gs.Case.build({"x0": np.array([[0.5], [-1.0]])}, [("v0", "softmax", ["x0"], {"dim": -2})], ["v0"],
                         seeds=[np.ones((2, 1))])
    c = _cause(case, P.SoftmaxLastAxis())
    assert c.id == "wrong-vjp", (c.id, c.summary)
    assert "forward does not change" not in c.summary and "straight-through" not in c.summary, c.summary
    assert "J^T·g is 0 for this upstream gradient" in c.summary, c.summary


def test_a_flat_forward_still_gets_the_flat_forward_words():
    # the other side: a forward that really is constant (x - x) with a backward that passes g on
    case = gs.Case.build({"x0": np.array([0.5, -1.0])}, [("v0", "t8_flat_ste", ["x0"], {})], ["v0"],
                         seeds=[np.array([1.0, 2.0])])
    c = gs.check(case).discrepancies[0].cause
    assert "forward does not change" in c.summary, c.summary


def test_a_gradient_summed_over_some_broadcast_axes_is_named_broadcast_reduction():
    # tryout8 F7: the engine's unbroadcast looks size-1 axes up from the left of the un-reduced gradient: x1 (1,)
    # broadcast against (3, 2) gets a (2,) gradient, a partial reduction of the broadcast
    from tests import _planted_engines as PE

    case = gs.Case.build({"x0": np.arange(6.0).reshape(3, 2), "x1": np.array([0.5])},
                         [("v0", "add", ["x1", "x0"], {})], ["v0"], seeds=[np.arange(6.0).reshape(3, 2) + 1])
    c = _cause(case, PE.broadcast_left())
    assert c.pattern == "broadcast-reduction", (c.pattern, c.summary)
    # (the engine's helper does it on mul too: the cause is then the shared helper's, the node's words its evidence)
    words = f"{c.summary} {c.evidence}"
    assert "node v0 = add(x1, x0)" in words and "in shape (2,)" in words, words
    assert "some of the broadcast axes, axis -1 (size 2, where x1 has size 1) kept" in words, words


def test_a_wrong_shaped_broadcast_gradient_on_two_ops_is_one_engine_finding():
    # tryout8 F7: one unbroadcast helper, used by add and mul, gave one finding per op; the cause names the helper
    from tests import _planted_engines as PE

    case = gs.Case.build({"x0": np.arange(6.0).reshape(3, 2), "x1": np.array([0.5])},
                         [("v0", "mul", ["x1", "x0"], {})], ["v0"], seeds=[np.arange(6.0).reshape(3, 2) + 1])
    c = _cause(case, PE.broadcast_left())
    assert c.id == "shared-broadcast-reduction", (c.id, c.summary)
    assert "mul and on add" in c.summary and "(3,)" in c.evidence, (c.summary, c.evidence)



def test_rating_a_wrong_vjp_prints_no_numpy_warning():
    # tryout8 F11: 'RuntimeWarning: overflow encountered in divide' (_private/vjp_patterns.py) on the user's stderr,
    # rating a gradient whose error over |J^T·g| is beyond float64 (1e100 where J^T·g is 1e-300)
    import warnings

    from gradspec._private.vjp_patterns import classify
    from gradspec.oracles import jacobian

    case = gs.Case.build({"x0": np.array([0.5, -1.0, 2.0])}, [("v0", "exp", ["x0"], {})], ["v0"],
                         seeds=[np.array([1.0, 2.0, -1.0])])
    t, u = {"x0": np.array([1e-300, 2.0, 3.0])}, {"x0": np.array([1e100, 7.0, -3.0])}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pattern = classify(case, case.nodes[0], case.spec("exp"), case.grad_leaves(), u, t, jacobian.jacobian(case),
                           case.seeds[0])[0]
    assert pattern == "other"
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]


def test_oracles_naming_the_engine_under_test_says_it_is_always_compared(tmp_path):
    # tryout8 F11: `--oracles minigrad` (the engine's own name) said only "no oracle named 'minigrad'"
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", "import sys; from gradspec.cli import main; sys.exit(main())", "fuzz",
                        "--engine", "tests._planted:Wider", "--oracles", "wider", "--max-examples", "5",
                        "--report-dir", str(tmp_path / "r")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "engine under test" in r.stderr and "always" in r.stderr and "reference" in r.stderr, r.stderr


def test_a_case_at_the_floor_is_not_called_perhaps_not_minimal():
    # tryout8 F11: "the case may not be minimal" on two 2-element vectors of one matmul, and on one (0, 1) leaf
    from gradspec.search import at_floor

    mm = gs.Case.build({"a": np.ones(2), "b": np.ones(2)}, [("v0", "matmul", ["a", "b"], {})], ["v0"])
    empty = gs.Case.build({"x": np.ones((0, 1))}, [("v0", "softmax", ["x"], {"dim": -1})], ["v0"],
                          seeds=[np.ones((0, 1))])
    bigger = gs.Case.build({"a": np.ones(3)}, [("v0", "exp", ["a"], {}), ("v1", "sum", ["v0"], {})], ["v1"])
    assert at_floor(mm) and at_floor(empty) and not at_floor(bigger)


def test_junit_counts_the_cases_that_raised_beside_the_comparisons():
    # tryout8 F9: a pair blamed by a finding where the engine raised said "0 of 211816 comparisons disagreed"
    import xml.etree.ElementTree as ET

    from gradspec.ci_outputs import junit_xml

    raised = {"id": "d-raise1", "kind": "raised", "oracles": ["minigrad", "reference"], "ops": ["softmax"], "cases": 1201,
              "message": "minigrad raised ValueError", "cause": {"id": "error-type", "summary": "the engine raised"}}
    s = {"cases": 211816, "seconds": 9.0, "engine": "minigrad", "seed": 7, "discrepancies": 1, "reports": [raised],
         "ops": {"softmax": 10}, "oracles": {"minigrad vs reference": 211816},
         "agreement": {"minigrad vs reference": 211816}}
    suite = ET.fromstring(junit_xml(s)).find("testsuite")
    pair = next(tc for tc in suite.iter("testcase") if tc.get("name") == "minigrad vs reference")
    msg = pair.find("failure").get("message")
    assert msg == "1201 cases raised, 0 of 211816 compared disagreed", msg


def test_a_superseded_report_says_by_which_in_its_folder_and_in_the_final_list(tmp_path):
    # tryout8 F11: superseded findings were announced live, their folders kept "status": "found", and the final
    # list named them without the report that replaced them
    import json

    from gradspec._cli_finish import _mark_superseded, _superseded_line

    (tmp_path / "d-old").mkdir()
    (tmp_path / "d-old" / "discrepancy.json").write_text(json.dumps({"id": "d-old", "status": "found"}))
    gone = [{"id": "d-old", "superseded_by": "d-new"}, {"id": "d-gone", "superseded_by": "d-new"}]
    _mark_superseded(str(tmp_path), gone)  # (a folder that is not there is left alone)
    rec = json.loads((tmp_path / "d-old" / "discrepancy.json").read_text())
    assert rec["superseded_by"] == "d-new" and rec["status"] == "found", rec
    line = _superseded_line(gone)
    assert "d-old, d-gone; replaced by d-new)" in line, line


def test_the_progress_line_does_not_promise_the_end_when_the_cases_are_done():
    # tryout8 F11: "about 1 s more for max_examples=300" printed for 90 s more: shrinking and the rules were not counted
    import io
    from types import SimpleNamespace

    from gradspec.search import slow_hint

    out = io.StringIO()
    show = slow_hint("verify engine minigrad", 300, None, stream=out, after=0.0, every=0.0)
    show(SimpleNamespace(cases=300, shrink_runs=40, localise_runs=5))
    show(SimpleNamespace(cases=100, shrink_runs=0, localise_runs=0))
    first, second = out.getvalue().splitlines()
    assert "s more for max_examples" not in first and "shrinking" in first, first
    assert "s more for the 200 cases left" in second and "shrinking" in second, second


def _downstream_raise_case():
    # x1 (1, 1) summed over dim 0 -> a (1,), broadcast against x0 (3, 2) by add: the engine's unbroadcast hands a
    # a (2,) gradient (the shape bug above), and sum's backward then cannot broadcast (2,) to x1's (1, 1): raises
    return gs.Case.build({"x1": np.full((1, 1), 0.5), "x0": np.ones((3, 2))},
                         [("a", "sum", ["x1"], {"dim": 0}), ("b", "add", ["a", "x0"], {}), ("y", "sum", ["b"], {})],
                         ["y"], [np.array(1.0)])


def test_a_downstream_raise_from_a_wrongly_shaped_gradient_names_the_shape_bug():
    # review F7: the raise was 'not-localised' (every node right on its own), then 'error-type' from the engine
    # diagnosis ("backward raised where torch does not"): a separate report for the shape finding's bug
    from gradspec.rules import explain_engine_finding
    from tests import _planted_engines as PE

    v = gs.check(_downstream_raise_case(), [gs.oracles.get("reference"), EngineOracle(PE.broadcast_left(), name="mini")])
    d = next(x for x in v.discrepancies if x.kind == "raised")
    explain_engine_finding(PE.broadcast_left(), d)  # (what gradspec fuzz --engine does next)
    c = d.cause
    assert c.id == "shared-broadcast-reduction" or (c.id == "wrong-vjp" and c.pattern == "broadcast-reduction"), \
        (c.id, c.summary)


def test_a_raise_with_a_shape_findings_cause_is_listed_under_the_shape_report():
    # review F7: merged the way a raise is merged under a §5 rule report; a witness oracle's raise keeps its report
    from gradspec.fuzz.state import supersede

    cause = {"id": "shared-broadcast-reduction"}
    shape = {"id": "d-1", "kind": "shape", "oracles": ["reference", "mini"], "ops": ["add"], "cause": cause}
    raised = {"id": "d-2", "kind": "raised", "oracles": ["mini", "reference"], "ops": ["add", "sum"], "cause": cause}
    witness = {"id": "d-3", "kind": "raised", "oracles": ["torch-cpu", "reference"], "ops": ["add", "sum"],
               "cause": cause}
    node = {"id": "wrong-vjp", "op": "add", "pattern": "broadcast-reduction"}
    shape_vjp = {"id": "d-4", "kind": "shape", "oracles": ["reference", "mini"], "ops": ["add"], "cause": node}
    raised_vjp = {"id": "d-5", "kind": "raised", "oracles": ["mini", "reference"], "ops": ["add", "sum"],
                  "cause": node}
    other = {"id": "d-6", "kind": "raised", "oracles": ["mini", "reference"], "ops": ["exp"],
             "cause": {"id": "wrong-vjp", "op": "exp", "pattern": "other"}}
    active, gone = supersede({r["id"]: r for r in (shape, raised, witness, shape_vjp, raised_vjp, other)})
    assert [r["id"] for r in active] == ["d-1", "d-3", "d-4", "d-6"], active
    assert [(r["id"], r["superseded_by"]) for r in gone] == [("d-2", "d-1"), ("d-5", "d-4")]


def test_a_gradient_summed_over_an_axis_the_input_keeps_is_a_broadcast_reduction():
    # the same engine helper on another case (fuzz --ops add,sum,exp --seed 3): v4 (2, 1) broadcast against
    # (2, 1, 1) to (2, 2, 1) gets a (1, 1) gradient (the input's own size-2 axis summed away, then broadcast on
    # by sum's backward to wrong values): read 'wrong-vjp / other' on add, a second report for the helper's bug
    from tests import _planted_engines as PE

    case = gs.Case.build({"x0": np.ones((2, 1, 1)), "x1": np.ones((2, 1, 1))},
                         [("v4", "sum", ["x1"], {"dim": (-1,)}), ("v5", "add", ["x0", "v4"], {})], ["v5"],
                         seeds=[np.ones((2, 2, 1))])
    c = _cause(case, PE.broadcast_left())
    assert c.id == "shared-broadcast-reduction" or (c.id == "wrong-vjp" and c.pattern == "broadcast-reduction"), \
        (c.id, c.pattern, c.summary)
    words = f"{c.summary} {c.evidence}"
    assert "in shape (1, 1)" in words and "axis -2 (size 2, which v4 keeps)" in words, words
