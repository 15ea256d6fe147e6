"""When a shaky finite-difference estimate is still a witness, and runs that judged too few cases (tryout4 #1, #11).

An estimate whose own error estimate e exceeds FD_SHAKY of the values cannot witness alone -- unless the gap d
it disagrees by is more than FD_WITNESS_GAP x e: no error estimate measured on correct code was off by that much
(gradspec.tolerances), so such a gap is the code's, and the pair stays a discrepancy.
"""

from types import SimpleNamespace as NS

import numpy as np
import pytest

import gradspec as gs
from gradspec import tolerances as tol
from gradspec._check_rules import _discount_shaky_estimates
from tests import _tryout4_verdicts as T

_KINDS = {"reference": NS(kind="reference"), "finite-differences": NS(kind="fd"), "jacobian": NS(kind="fd")}

# (reference or the other estimate, the estimate, its error estimate, a witness still?)
ROWS = {
    # tryout4's solve at condition 1e6, gA transposed: FD matches torch's own solve gradient to 4e-5
    "cond-1e6-solve-bug-596e": (1317.7937794035408, -5915.90223917999, 12.2, True),
    "cond-1e6-solve-bug-278e": (13810.51788589984, -39662.67474531357, 192.0, True),
    # the false alarm the rule was made for: the FD-JVP of a clamp beside values of 5e4 (13 x its estimate)
    "clamp-fd-jvp-13e": (66999.0, 5674.0, 4640.0, False),
    "gap-just-below-the-factor": (1000.0, 1000.0 - 0.99 * tol.FD_WITNESS_GAP * 2.0, 2.0, False),
    "gap-just-above-the-factor": (1000.0, 1000.0 - 1.01 * tol.FD_WITNESS_GAP * 2.0, 2.0, True),
}


@pytest.mark.parametrize("ref,est,err,witness", ROWS.values(), ids=ROWS.keys())
def test_a_gap_far_beyond_the_estimates_own_error_is_a_discrepancy(ref, est, err, witness):
    d = NS(kind="value", leaf="x0", index=(0,), values=(ref, est), oracles=("reference", "jacobian"))
    discrepancies, comparisons, notes = [d], [NS(oracles=("reference", "jacobian"))], []
    _discount_shaky_estimates(_KINDS, {"jacobian": {"x0": np.array([err])}}, comparisons, discrepancies, notes)
    assert (discrepancies == [d]) is witness, notes
    assert bool(notes) is not witness  # a shaky pair that is no witness says so


def test_the_judged_part_decides_shaky_the_whole_estimate_bounds_the_gap():
    # a float32 estimate's shaky test judges only its truncation part (tolerances.FD_SHAKY); the gap must stand
    # above the whole error estimate (rounding included) to witness
    d = NS(kind="value", leaf="x0", index=(0,), values=(1.0, 1.5), oracles=("reference", "jacobian"))
    discrepancies, notes = [d], []
    _discount_shaky_estimates(_KINDS, {"jacobian": {"x0": np.array([0.002])}}, [], discrepancies, notes,
                              {"jacobian": {"x0": np.array([0.1])}})
    assert discrepancies == [] and "too shaky" in notes[0]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_transposed_outer_product_in_a_solve_of_condition_1e6_is_found(seed):
    # tryout4 repro_illcond_missed.py: "agree" on torch seeds 1 and 2 before (FD's gap 300-600 x its own
    # error estimate taken for shakiness, and the solve's rounding noise taken for a jump)
    r = gs.verify_torch_function(T.solve_fn(T.SolveOuterTransposed, 6), example_inputs=T.example(seed),
                                 max_examples=40, seed=seed, dtypes=("float64",))
    assert r.status == "disagree", str(r)


def test_the_correct_solve_of_condition_1e6_still_agrees():
    r = gs.verify_torch_function(T.solve_fn(T.Solve, 6), example_inputs=T.example(1), max_examples=40, seed=1,
                                 dtypes=("float64",))
    assert r.status == "agree", str(r)


def test_a_run_that_judged_few_of_its_cases_is_inconclusive_with_the_counts():
    # tryout4 repro_nothing_compared.py: 23 of 30 cases at floor's jumps, 3 compared: "agree" before.  The 4 cases
    # counted until review14 #4 were cases where fn's output reaches no root (its gradient never ran), and the run
    # was inconclusive.  Since verify_* draws cases that exercise fn (fixrun #4), a case off floor's jumps compares
    # the straight-through backward (1) with floor's derivative (0): found, as verify.torch_surrogate documents
    # for a backward that is not the derivative on purpose (surrogate= checks it as intended).  Never "agree".
    r = gs.verify_torch_function(T.StraightThroughFloor.apply, arity=1, max_examples=30, seed=0)
    assert r.status == "disagree" and r.discrepancies[0].kind == "value", str(r)
    assert "finite-differences" in r.discrepancies[0].oracles, str(r)
    # a run that judged a few: the counts, and what to do (the same Result, 4 of 30 counted)
    from gradspec.result import Result

    few = Result(target="t", what="torch function", seed=0, cases_run=30, judged=4, nondifferentiable=23)
    few.pair_counts[("reference", "finite-differences")] = 4
    assert few.status == "inconclusive", few.summary()
    assert "only 4 of 30 cases compared" in few.reason and "max_examples" in few.reason, few.reason


def test_a_small_run_that_judged_every_case_says_what_it_was_asked():
    r = gs.verify_torch_function(T.Solve.apply, signature="(n,n),(n)->(n)", max_examples=5, seed=0)
    assert r.judged == r.cases_run and r.status == "agree", str(r)
