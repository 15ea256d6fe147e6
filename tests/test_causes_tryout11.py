"""tryout11 (a scientific-ML researcher): the findings fixed in session 16 by helper fixsci3, each with the
user's code trimmed into tests/_tryout11_code.py."""

from __future__ import annotations

import pytest

import gradspec as gs
from gradspec.ops.user import UserOpError

from ._tryout11_code import Eigh, EighNoSym

# (a few cases: eigh's two-output shape rule is what is tested, and EighNoSym is found on the first case)
_FEW = dict(max_examples=6, seed=3, dtypes=("float64",))


# --- #5: a tuple-output Function with a multi-output signature (was: "use gs.verify_torch_function", raised by it)

def test_a_two_output_signature_is_taken_by_verify_torch_function():
    r = gs.verify_torch_function(Eigh.apply, signature="(n,n)->(n),(n,n)", **_FEW)
    assert r.status == "agree", r.summary()
    assert r.cases_run > 0


def test_a_two_output_signature_finds_the_unsymmetrised_backward():
    r = gs.verify_torch_function(EighNoSym.apply, signature="(n,n)->(n),(n,n)", **_FEW)
    assert r.status == "disagree", r.summary()


def test_a_signature_with_the_wrong_number_of_outputs_says_so_and_how():
    with pytest.raises(UserOpError) as e:
        gs.verify_torch_function(Eigh.apply, signature="(n,n)->(n)", **_FEW)
    text = str(e.value)
    assert "declares 1 output(s) but fn returns 2" in text and "example_inputs=" in text
    assert "use gs.verify_torch_function" not in text  # (the circle: raised by verify_torch_function itself)


# --- #9: a recognised mistake's structured pattern (the HTML heading, "Fix:", a CI reading cause.pattern) is the one
# its sentence names, not "other" / "no simple pattern" beside a precise sentence

def test_an_unsymmetrised_backward_has_its_own_pattern_and_fix():
    from gradspec.report_cause import headline

    r = gs.verify_torch_function(EighNoSym.apply, signature="(n,n)->(n),(n,n)", **_FEW)
    c = r.discrepancies[0].cause
    assert "not symmetrised" in c.summary
    assert (c.pattern, c.subpattern) == ("other", "not-symmetrised")
    h = headline(c)
    assert h["title"].startswith("wrong VJP (not-symmetrised)")
    assert "no simple pattern" not in h["pattern"] and "symmetri" in h["fix"]


def test_a_transposed_solve_has_its_own_pattern_and_fix():
    from gradspec.report_cause import headline

    from ._tryout11_code import SolveAdjA

    r = gs.verify_torch_function(SolveAdjA.apply, signature="(n,n),(n)->(n)", **_FEW)
    c = r.discrepancies[0].cause
    assert "uses A where A^T" in c.summary, c.summary
    assert (c.pattern, c.subpattern) == ("other", "transposed")
    assert "transpose" in headline(c)["fix"]


# --- #4: a discrepancy seen while another was being shrunk, on a case of the op that finding blames, was finished as
# a second finding ("not-localised: every node's rule agrees") instead of counted as a case of the first

def test_a_pending_discrepancy_of_an_op_already_blamed_is_a_case_of_that_finding():
    import numpy as np

    from gradspec.causes import Cause
    from gradspec.check import Discrepancy
    from gradspec.search import Driver, Finding

    def case():
        return gs.Case.build({"x0": np.array([0.5, -1.0])}, [("v0", "exp", ["x0"], {}), ("v1", "exp", ["v0"], {})],
                             ["v1"], seeds=[np.array([1.0, 2.0])])

    first = Discrepancy("value", ("reference", "finite-differences"), "first", case=case(),
                        cause=Cause("wrong-vjp", "your backward is wrong", node="v0", op="exp", pattern="other"))
    seen = Discrepancy("value", ("reference", "jacobian"), "seen while shrinking the first", case=case())
    finished = []
    drv = Driver(None, lambda c, mode: ([], None), max_examples=1)
    drv._finish = lambda *a, **k: finished.append(a)  # (a second finding: localised and diagnosed on its own)
    drv.findings[first.signature] = f = Finding(first, None, [first.signature])
    drv.known |= set(f.covers)
    drv._pending[("value", ("jacobian", "reference"), ("exp",))] = (seen, [seen], None)
    drv._finish_pending()
    assert not finished and f.cases == 2


def test_a_pending_discrepancy_of_another_op_is_still_a_finding():
    import numpy as np

    from gradspec.causes import Cause
    from gradspec.check import Discrepancy
    from gradspec.search import Driver, Finding

    first = Discrepancy("value", ("reference", "finite-differences"), "first",
                        case=gs.Case.build({"x0": np.array([0.5])}, [("v0", "sin", ["x0"], {})], ["v0"]),
                        cause=Cause("wrong-vjp", "your backward is wrong", node="v0", op="sin", pattern="other"))
    seen = Discrepancy("value", ("reference", "jacobian"), "another op's",
                       case=gs.Case.build({"x0": np.array([0.5])}, [("v0", "exp", ["x0"], {})], ["v0"]))
    finished = []
    drv = Driver(None, lambda c, mode: ([], None), max_examples=1)
    drv._finish = lambda *a, **k: finished.append(a)
    drv.findings[first.signature] = f = Finding(first, None, [first.signature])
    drv.known |= set(f.covers)
    drv._pending[("value", ("jacobian", "reference"), ("exp",))] = (seen, [seen], None)
    drv._finish_pending()
    assert len(finished) == 1 and f.cases == 1


# --- #6: the rtol= advised for a solver stopped at a tolerance is a lower bound ("at least", widened to the largest
# error the run saw), and under a declared rtol the iteration words stay, with the error's ratio to the claim

_FP = dict(signature="(n,n),(n)->(n)", dtypes=("float64",), seed=0,
           domain=[gs.domains.interval(-0.4, 0.4), gs.domains.real()])


def test_the_accuracy_advised_for_a_tolerance_stopped_solver_is_a_lower_bound():
    from ._tryout11_code import FixedPointLoose

    r = gs.verify_torch_function(FixedPointLoose.apply, max_examples=8, **_FP)
    c = r.discrepancies[0].cause
    assert "tolerance of an iteration" in c.summary, c.summary
    assert "declare an accuracy of at least rtol=" in c.summary and "other cases may need more" in c.summary


def test_under_a_claim_the_iteration_words_stay_with_the_ratio_to_the_claim():
    # (classify on a one-element user op off by 0.17%: above the 1e-3 where the words stopped before, 17x a claimed
    # rtol of 1e-4 -- tryout11 #6's second run)
    import numpy as np

    from gradspec._private.iteration_words import CLAIM
    from gradspec._private.vjp_patterns import classify

    class _UserSpec:
        user = True

    case = gs.Case.build({"x0": np.array([0.5, -1.0, 2.0])}, [("v0", "exp", ["x0"], {})], ["v0"],
                         seeds=[np.array([1.0, 2.0, -1.0])])
    t = {"x0": np.array([1.0, -2.0, 0.5])}
    u = {"x0": t["x0"] * np.array([1.0017, 1.0, 0.999])}  # (no simple pattern: two elements off, differently)
    token = CLAIM.set((1e-4, 0.0))
    try:
        detail = classify(case, case.nodes[0], _UserSpec(), case.grad_leaves(), u, t, None, case.seeds[0])[2]
    finally:
        CLAIM.reset(token)
    assert "tolerance of an iteration" in detail, detail
    assert "17.0 times the accuracy it claims (rtol=0.0001)" in detail and "at least rtol=5e-03" in detail, detail


def test_the_run_widens_the_advice_to_the_largest_error_its_cases_showed():
    from gradspec._private.iteration_words import iterated, widen
    from gradspec.causes import Cause

    c = Cause("wrong-vjp", "it differs" + iterated(3.1e-5))
    widen(c, 1.7e-3, 19)
    assert "at least rtol=5e-03 (the largest relative error over the 19 cases that showed it is 0.0017" in c.summary


# --- #11: "no simple pattern" says what was ruled out (a missing (I - J_f)^-1 in an implicit backward had the bare
# words; no exact test names that term from the op's Jacobian alone: f's own Jacobian is not known)

def test_no_simple_pattern_says_which_patterns_were_tried():
    import numpy as np

    from gradspec._private.vjp_patterns import classify
    from gradspec.oracles import jacobian

    case = gs.Case.build({"x0": np.array([0.5, -1.0, 2.0])}, [("v0", "exp", ["x0"], {})], ["v0"],
                         seeds=[np.array([1.0, 2.0, -1.0])])
    t = {"x0": np.exp(case.leaves[0].value) * case.seeds[0]}
    u = {"x0": t["x0"] * np.array([1.3, 1.0, 0.4])}  # (two elements off by unrelated amounts)
    pattern, _, detail = classify(case, case.nodes[0], case.spec("exp"), case.grad_leaves(), u, t,
                                  jacobian.jacobian(case), case.seeds[0])
    assert pattern == "other" and "no simple pattern" in detail
    assert "none of these fits: a wrong sign, one factor, g ignored or averaged" in detail, detail
    assert "A where A^T belongs" in detail and "a missing symmetrisation" in detail, detail
