"""Gradient elements every oracle gives as NaN or infinite are not compared, and that is said, never a silent OK
(session 15's open item: MaskedMeanNoClamp at a drawn all-False mask row, 0/0 in the forward, agreed without a word).

NaN agreeing with NaN says nothing about a gradient rule: ``gs.check`` notes which elements were left out and why
(a non-finite input there, a 0/0 made by a node of the forward, or a derivative that is itself infinite), a case
whose every element is so is inconclusive (``outcome.nothing_finite``), and a ``verify_*`` run counts the cases.
Finite cases carry no such note (the soak's correct cases are not flooded).
"""

from __future__ import annotations

import numpy as np
import torch

import gradspec as gs
from gradspec import _check_nonfinite as NF
from tests import _tryout10_torchfn as T


def _nonfinite_notes(notes) -> list:
    return [str(n) for n in notes if NF.CASE_KEY in str(n) or NF.RUN_KEY in str(n)]


def test_a_nan_input_element_is_said_not_compared():
    case = gs.Case.build({"x": np.array([np.nan, 1.0])}, [("y", "tanh", ["x"], {})], ["y"], [np.ones(2)])
    v = gs.check(case)
    assert v.status == "agree", v.summary()  # x[1] was compared
    (note,) = _nonfinite_notes(v.notes)
    assert "x[0]" in note and "1 of 2" in note and "x holds NaN there" in note, note


def test_a_0_over_0_in_the_forward_names_the_node():
    case = gs.Case.build({"x": np.array([0.0, 1.0]), "z": np.array([0.0, 2.0])}, [("d", "div", ["x", "z"], {})],
                         ["d"], [np.ones(2)])
    v = gs.check(case)
    assert v.status == "agree", v.summary()
    (note,) = _nonfinite_notes(v.notes)
    assert "x[0]" in note and "z[0]" in note, note
    assert "d = div(x, z)" in note and "0/0" in note, note


def test_every_element_non_finite_is_inconclusive_not_agree():
    case = gs.Case.build({"x": np.array([np.nan, np.nan])}, [("y", "tanh", ["x"], {})], ["y"], [np.ones(2)])
    v = gs.check(case)
    assert v.status == "inconclusive", v.summary()


def test_a_finite_case_has_no_such_note():
    case = gs.Case.build({"x": np.array([0.25, 1.0]), "z": np.array([0.5, 2.0])}, [("d", "div", ["x", "z"], {})],
                         ["d"], [np.ones(2)])
    v = gs.check(case)
    assert v.status == "agree" and not _nonfinite_notes(v.notes), v.summary()


MASK = torch.ones(3, 4, dtype=torch.bool)
X34 = torch.linspace(-1.5, 1.3, 12, dtype=torch.float64).reshape(3, 4)


def _masked_mean_run(fn):
    return gs.verify_torch_function(fn, example_inputs=(X34, MASK), args={1: gs.strategies.indices(MASK)},
                                    max_examples=30, seed=0)


def test_a_masked_mean_nan_at_all_false_rows_is_counted_and_said():
    """MaskedMeanNoClamp: a drawn all-False row is 0/0 in the forward, NaN at the tame float values the draw is
    repaired with too, so the draw is rejected (finite differences could not witness its other rows either).  Before,
    that was silent (the run's note even said all-False masks were drawn); now the run counts and says it, naming the
    output element, the mask and the 0/0.  The run still agrees: the rule is right wherever the forward is finite."""
    r = _masked_mean_run(T.MaskedMeanNoClamp.apply)
    assert r.status == "agree", (r.status, r.reason)
    (note,) = [n for n in r.notes if "draw(s) skipped, not checked" in n]
    k = int(note.split()[0])
    assert k >= 1, note
    assert "NaN" in note and "0/0" in note and "position 1 = [[" in note and "False, False, False, False]" in note, note


def test_the_clamped_masked_mean_has_no_such_note():
    r = _masked_mean_run(T.MaskedMean.apply)
    assert r.status == "agree", (r.status, r.reason)
    assert not _nonfinite_notes(r.notes) and not any("draw(s) skipped" in n for n in r.notes), r.notes


def test_a_run_counts_the_cases_in_one_note():
    """verify_* carries a case's note into the run's notes once, counting the cases (outcome.run_notes)."""
    from gradspec import outcome

    case = gs.Case.build({"x": np.array([np.nan, 1.0])}, [("y", "tanh", ["x"], {})], ["y"], [np.ones(2)])
    v = gs.check(case)
    notes: list = []
    for _ in range(3):
        outcome.run_notes(notes, v)
    (note,) = _nonfinite_notes(notes)
    assert note.startswith(f"{NF.RUN_KEY} 3 case(s) (first: (x[0]: 1 of 2 elements)"), note
