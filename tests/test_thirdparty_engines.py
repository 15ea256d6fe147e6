"""gradspec diagnoses the real backward() bugs of two engines no one here wrote (CONTRACT §8).

micrograd 0.1.0 never resets the gradients of intermediate nodes, so a second backward flows
the first one's gradients again (stale-intermediate-grads), and its ``backward()`` sets the
root's gradient (``self.grad = 1``) instead of adding to it (root-grad-assigned).  tinygrad
0.14.0 turns a 0-d array into a constant, which never receives a gradient: one finding
(grad-not-updated), not one per seed rule it happens to break.  The adapters are in
tests/_thirdparty.py; both packages are pinned in constraints.txt and installed by ``.[test]``.
What each engine does is written here from reading its source, not from running gradspec.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from gradspec import rules as R
from tests import _thirdparty as T


def _need(module):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -c constraints.txt -e '.[test]' installs it)")


def test_micrograd_stale_intermediate_grads_and_root_grad_assigned():
    _need("micrograd")
    res = R.check_rules(T.MicrogradEngine(), max_examples=15, seed=0)
    by_id = {f.cause.id: f for f in res.findings}
    assert {"stale-intermediate-grads", "root-grad-assigned"} <= set(by_id), list(by_id)
    stale = by_id["stale-intermediate-grads"]
    assert stale.rule == "accumulate-calls"  # shows on the second backward, the first one is right
    assert sum(s.kind == "backward" for s in stale.scenario.steps) >= 2
    first_e, first_t = stale.engine_trace.obs[1].grads, stale.reference_trace.obs[1].grads
    # same formula, same order of two float64 products: equal to a few ulps
    assert all(np.allclose(first_e[n], first_t[n], rtol=1e-12, atol=0) for n in first_t)
    assigned = by_id["root-grad-assigned"]
    assert any(s.kind == "backward" and s.seed is None for s in assigned.scenario.steps)  # root.backward()
    # zero_grad is not blamed: the leaf's gradient is reset, the intermediate ones are the stale ones
    assert "reset-ignored" not in by_id and res.status["reset"]["causes"] != ["reset-ignored"]
    assert "unexplained" not in by_id and "wrong-vjp" not in by_id


def test_micrograd_zero_grad_is_not_blamed_for_stale_intermediates():
    _need("micrograd")
    res = R.check_rules(T.MicrogradEngine(), max_examples=15, seed=0, rules=["reset"])
    assert res.status["reset"]["status"] == "failed"
    assert "reset-ignored" not in res.status["reset"]["causes"]
    assert "stale-intermediate-grads" in res.status["reset"]["causes"]


def test_tinygrad_0d_leaf_is_one_finding():
    _need("tinygrad")
    res = R.check_rules(T.TinygradEngine(), max_examples=5, seed=0)
    ids = [f.cause.id for f in res.findings]
    assert ids.count("grad-not-updated") == 1, ids
    f = next(f for f in res.findings if f.cause.id == "grad-not-updated")
    assert "0-d" in f.cause.summary
    assert all(f.scenario.shapes()[n] == () for n in f.scenario.grad_leaves())
    # the 0-d leaf does not come back as seed-rule findings or as a wrong VJP of an op
    assert "seed-shape-accepted" not in ids and "seed-ignored" not in ids and "wrong-vjp" not in ids
    assert "unexplained" not in ids
