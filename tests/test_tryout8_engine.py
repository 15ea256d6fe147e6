"""tryout8: what a new engine author found in the engine rules and their causes (F3, F1, F6, F5, F2).

Each engine here is planted (tests/_planted_engines.py: a numpy engine written from scratch, one switch per
bug); the expected cause ids come from how it was planted, never from running gradspec.
"""

from __future__ import annotations

import numpy as np

import gradspec as gs
from gradspec.oracles.engine_oracle import EngineOracle
from tests import _planted_engines as M


def _mixed_case():
    # y = x * c with c a constant leaf (requires_grad=False): torch leaves grad(c) None
    return gs.Case.build({"x": np.array([1.0, -2.0]), "c": np.array([3.0, 0.5])}, [("y", "mul", ["x", "c"], {})],
                         ["y"], [np.array([1.0, 2.0])], requires_grad={"c": False})


def test_value_oracle_reads_the_constant_leaves_too():
    # F3: the engine oracle read grad() of the leaves that require grad only, so a gradient written into a
    # constant leaf was never seen by a value check
    v = gs.check(_mixed_case(), oracles=[EngineOracle(M.grad_on_constant(), name="mini"), "reference"])
    assert not v.ok, v
    d = v.discrepancies[0]
    assert d.kind == "raised" and "requires_grad=False" in d.message, d.message
    from gradspec.rules import explain_engine_finding
    explain_engine_finding(M.grad_on_constant(), d)
    assert d.cause.id == "grad-on-constant", d.cause
    assert gs.check(_mixed_case(), oracles=[EngineOracle(M.correct(), name="mini"), "reference"]).ok


def test_a_raised_value_report_with_a_rule_cause_is_listed_under_the_rule_report():
    # F3/F1: the engine oracle raises on the same bug a §5 rule finds (a gradient on a constant leaf, a graph
    # freed although retain_graph=True): one bug, one report; a raise of its own (error-type) keeps its report
    from gradspec.fuzz.state import supersede

    rule = {"id": "d-1", "kind": "semantics:grad-on-constant", "oracles": ["mini", "§5 backward() rules"],
            "ops": ["mul"], "rule": "constant-leaves", "cause": {"id": "grad-on-constant"}}
    raised = {"id": "d-2", "kind": "raised", "oracles": ["mini", "reference"], "ops": ["add"],
              "cause": {"id": "grad-on-constant"}}
    own = {"id": "d-3", "kind": "raised", "oracles": ["mini", "reference"], "ops": ["exp"],
           "cause": {"id": "error-type"}}
    active, gone = supersede({r["id"]: r for r in (rule, raised, own)})
    assert [r["id"] for r in active] == ["d-1", "d-3"]
    assert [(r["id"], r["superseded_by"]) for r in gone] == [("d-2", "d-1")]
    # F5: one op's crash found by a rule search and by the value campaign is one report; another op's is not
    crash = {"id": "d-4", "kind": "semantics:error-type", "oracles": ["mini", "§5 backward() rules"], "ops": ["exp"],
             "rule": "seed-values", "cause": {"id": "error-type", "op": "exp"}}
    exp = {"id": "d-5", "kind": "raised", "oracles": ["mini", "reference"], "ops": ["exp"],
           "cause": {"id": "error-type", "op": "exp"}}
    log = {"id": "d-6", "kind": "raised", "oracles": ["mini", "reference"], "ops": ["log"],
           "cause": {"id": "error-type", "op": "log"}}
    active, gone = supersede({r["id"]: r for r in (crash, exp, log)})
    assert [r["id"] for r in active] == ["d-4", "d-6"]
    assert [(r["id"], r["superseded_by"]) for r in gone] == [("d-5", "d-4")]


def _rule_ids(engine, **kw):
    from gradspec import rules as R

    res = R.check_rules(engine, max_examples=15, seed=0, **kw)
    return res, [f.cause.id for f in res.findings]


def test_retain_graph_ignored_is_named_not_the_implicit_seed():
    # F1: an engine freeing its graph although retain_graph=True got 'error-type' and 'implicit-seed-refused'
    # (the explicit seed raised just the same: the second call met freed buffers)
    res, ids = _rule_ids(M.retain_ignored())
    assert ids == ["retain-graph-ignored"], [(f.rule, f.cause.id, f.cause.summary) for f in res.findings]
    assert "retain_graph=True" in res.findings[0].cause.summary


def test_a_backward_that_always_raises_is_one_engine_finding():
    # F6: every rule (implicit-seed-refused, error-type) and every op (wrong-vjp per op) blamed for a backward()
    # that raises whatever it is given
    res, ids = _rule_ids(M.backward_raises())
    assert ids == ["backward-raises"], [(f.rule, f.cause.id, f.cause.summary) for f in res.findings]
    r = gs.verify_engine(M.backward_raises(), max_examples=60, seed=3)
    causes = [d.cause for d in r.discrepancies]
    assert not r.ok and causes and {c.id for c in causes} == {"backward-raises"}, [str(c) for c in causes]


def test_an_op_whose_backward_raises_alone_is_still_that_op():
    # the other side of F6: tanh's backward raising on 0-d inputs only is tanh's (wrong-vjp), not the engine's
    res, ids = _rule_ids(M.tanh_raises_0d())
    assert "backward-raises" not in ids and "implicit-seed-refused" not in ids, ids


class _RaiseTwo(M.Mini):
    """two unrelated forward crashes (tryout8 F5): exp of a 0-d tensor raises ValueError, sin of a 2-d one KeyError"""

    def apply(self, op, *args, **params):
        if op == "exp" and args[0].value.ndim == 0:
            raise ValueError("exp: 0-d input not handled")
        if op == "sin" and args[0].value.ndim == 2:
            raise KeyError("sin: 2-d input not handled")
        return super().apply(op, *args, **params)


def test_two_engine_crashes_in_two_ops_are_two_findings():
    # F5: the dedup key of 'the engine raised while building the graph' held neither the op nor the exception,
    # so the second crash was merged into the first and never shown
    from gradspec.rules import diagnose_case

    def case(op, shape):
        return gs.Case.build({"x": np.full(shape, 0.5)}, [("y", op, ["x"], {})], ["y"], [np.ones(shape)])

    eng = _RaiseTwo()
    sigs = []
    for op, shape in (("exp", ()), ("sin", (2, 2)), ("exp", ())):
        v = gs.check(case(op, shape), oracles=[EngineOracle(eng, name="mini"), "reference"])
        d = v.discrepancies[0]
        d.cause = diagnose_case(eng, d.case)
        assert d.cause.id == "error-type" and d.cause.op == op, d.cause
        sigs.append(d.signature)
    assert sigs[0] != sigs[1] and sigs[0] == sigs[2], sigs
    res, ids = _rule_ids(eng)
    assert sorted(f.cause.op for f in res.findings if f.cause.id == "error-type") == ["exp", "sin"], \
        [(f.cause.id, f.cause.op, f.cause.summary) for f in res.findings]


def test_an_add_writing_into_a_saved_buffer_is_one_finding_naming_the_node_and_the_op():
    # F2: an add reusing its first operand's buffer (exp's saved output) gave 7 'unexplained' rule findings, or
    # 'backward-order'; the engine's node values after the forward show it directly
    res, ids = _rule_ids(M.inplace_add())
    assert ids == ["forward-mutates-input"], [(f.rule, f.cause.id, f.cause.summary[:120]) for f in res.findings]
    c = res.findings[0].cause
    assert c.op == "add" and "changed" in c.summary, c
    from gradspec.rules import diagnose_case

    case = gs.Case.build({"x": np.array([0.5, -1.0])}, [("h", "exp", ["x"], {}), ("y", "add", ["h", "x"], {})],
                         ["y"], [np.array([1.0, 2.0])])
    c = diagnose_case(M.inplace_add(), case)
    assert c is not None and c.id == "forward-mutates-input" and c.node == "y" and "h" in c.summary, c
    assert diagnose_case(M.correct(), case) is None


class _NaNGrads(M.Mini):
    """grad() reads NaN for a leaf holding |x| > 5 (tryout8 F6's edge:nans): the engine's shared code, every op"""

    def grad(self, leaf):
        g = super().grad(leaf)
        if g is not None and g.size and np.abs(leaf.value).max() > 5:
            g = np.full(g.shape, np.nan)
        return g


class _SinNaN(M.Mini):
    """sin's own backward gives NaN where |x| > 5: one op's rule, not the engine's"""

    def apply(self, op, *args, **params):
        out = super().apply(op, *args, **params)
        if op == "sin":
            out.parents = tuple((a, (lambda g, f=f, a=a: np.where(np.abs(a.value) > 5, np.nan, f(g))))
                                for a, f in out.parents)
        return out


def _nan_finding(eng, op):
    case = gs.Case.build({"x": np.array([7.0, 0.5])}, [("y", op, ["x"], {})], ["y"], [np.array([1.0, -2.0])])
    v = gs.check(case, oracles=[EngineOracle(eng, name="mini"), "reference"])
    assert not v.ok and v.discrepancies, v
    return v.discrepancies[0]


def test_nan_gradients_on_every_op_are_one_engine_finding():
    # F6: an engine whose grad() reads NaN for large leaves got one wrong-vjp per op (13 findings), each with a
    # per-op guess ("a 0/0", "exp overflows") that was false
    found = [_nan_finding(_NaNGrads(), op) for op in ("exp", "tanh", "square")]
    assert {d.cause.id for d in found} == {"shared-non-finite"}, [str(d.cause) for d in found]
    assert len({d.signature for d in found}) == 1
    leaf_root = gs.Case.build({"x": np.array([7.0, 0.5])}, [], ["x"], [np.array([1.0, -2.0])])  # no node to blame
    v = gs.check(leaf_root, oracles=[EngineOracle(_NaNGrads(), name="mini"), "reference"])
    assert [d.cause.id for d in v.discrepancies] == ["shared-non-finite"], [str(d.cause) for d in v.discrepancies]
    assert v.discrepancies[0].signature == found[0].signature
    d = _nan_finding(_SinNaN(), "sin")  # one op's own NaN stays that op's
    assert d.cause.id == "wrong-vjp" and d.cause.op == "sin", d.cause


def test_a_backward_writing_into_a_forward_buffer_is_named():
    # F2's other half: the node values compared after each backward too (exp's VJP computed into its saved
    # output: the first backward is right, the next one through the kept graph is not)
    res, ids = _rule_ids(M.backward_inplace())
    assert ids == ["backward-mutates-values"], [(f.rule, f.cause.id, f.cause.summary[:120]) for f in res.findings]
    assert "exp" in res.findings[0].cause.summary, res.findings[0].cause


class _ExpRaisesTwo(M.Mini):
    """one op, two unrelated crashes: exp of a 0-d tensor raises ValueError, of a 2-d one TypeError"""

    def apply(self, op, *args, **params):
        if op == "exp" and args[0].value.ndim == 0:
            raise ValueError("exp: 0-d input not handled")
        if op == "exp" and args[0].value.ndim == 2:
            raise TypeError("exp: 2-d input not handled")
        return super().apply(op, *args, **params)


def test_two_exception_types_from_one_op_are_two_findings():
    # the dedup key of an engine crash held the op but not the exception type: a ValueError and a TypeError of
    # exp (two bugs, two fixes) collapsed into one report.  The type, not the message: messages hold values
    from gradspec.fuzz.state import supersede
    from gradspec.rules import diagnose_case

    def case(shape, value=0.5):
        return gs.Case.build({"x": np.full(shape, value)}, [("y", "exp", ["x"], {})], ["y"], [np.ones(shape)])

    eng = _ExpRaisesTwo()
    sigs = []
    for shape, value in (((), 0.5), ((2, 2), 0.5), ((), 0.25)):
        v = gs.check(case(shape, value), oracles=[EngineOracle(eng, name="mini"), "reference"])
        d = v.discrepancies[0]
        d.cause = diagnose_case(eng, d.case)
        assert d.cause.id == "error-type" and d.cause.op == "exp", d.cause
        sigs.append(d.signature)
    assert sigs[0] != sigs[1] and sigs[0] == sigs[2], sigs
    res, _ids = _rule_ids(eng)
    keys = sorted(f.key for f in res.findings if f.cause.id == "error-type")
    assert len(keys) == 2 and len({k[1] for k in keys}) == 1, [(f.key, f.cause.summary) for f in res.findings]
    # a rule report per type; the value campaign's crash of each type is listed under its own rule report
    recs = [{"id": f"d-{i}", "kind": "semantics:error-type", "oracles": ["mini", "§5 backward() rules"],
             "ops": ["exp"], "rule": f.rule, "cause": f.cause.to_json()}
            for i, f in enumerate(f for f in res.findings if f.cause.id == "error-type")]
    recs += [{**r, "id": r["id"] + "v", "kind": "raised", "oracles": ["mini", "reference"], "rule": None} for r in recs]
    active, gone = supersede({r["id"]: r for r in recs})
    assert sorted(r["id"] for r in active) == ["d-0", "d-1"], active
    assert sorted((r["id"], r["superseded_by"]) for r in gone) == [("d-0v", "d-0"), ("d-1v", "d-1")], gone


def test_a_float32_backward_writing_into_a_forward_buffer_is_named():
    # session 14: the node values of a float32 engine were not watched (compared with the float64 forward at
    # float64's tolerance, no node counted as right when made), so the same planted bug in a float32 engine was
    # reported as rule findings with other causes; leaves were watched, nodes were not
    res, ids = _rule_ids(M.float32_backward_inplace())
    assert ids == ["backward-mutates-values"], [(f.rule, f.cause.id, f.cause.summary[:120]) for f in res.findings]
    assert "exp" in res.findings[0].cause.summary, res.findings[0].cause
    res, ids = _rule_ids(M.Mini("float32", "inplace-add"))  # the forward half: "unexplained" before
    assert ids == ["forward-mutates-input"], [(f.rule, f.cause.id, f.cause.summary[:120]) for f in res.findings]
    res, ids = _rule_ids(M.Mini("float32"))  # the correct float32 twin: nothing
    assert ids == [], [(f.rule, f.cause.id, f.cause.summary[:120]) for f in res.findings]
