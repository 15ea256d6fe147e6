"""Causes a new user found wrong or vague (tryout4 #5, #7-#10): each finding must name what is actually wrong.

The expected words come from how each piece of code in tests/_tryout4_code.py was written wrong, never
from running gradspec."""

from __future__ import annotations

import pytest

import gradspec as gs
from tests import _tryout4_code as T

CASES = {
    # id: (run, cause id, words the summary must hold, words it must not)
    "backward-mutates-saved-output": (
        lambda: gs.verify_torch_function(T.ExpMutatesSaved.apply, arity=1, max_examples=40, seed=1).discrepancies,
        "wrong-vjp", "modifies a saved tensor in place (ctx.saved_tensors[0]", "no single node"),
}


@pytest.mark.parametrize("run, cause_id, words, not_words", CASES.values(), ids=list(CASES))
def test_the_cause_names_what_is_wrong(run, cause_id, words, not_words):
    found = run()
    assert found, "the wrong code must be found"
    c = found[0].cause
    assert c is not None and c.id == cause_id, (c.id if c else None, c.summary if c else None)
    assert words in c.summary and not_words not in c.summary, c.summary
