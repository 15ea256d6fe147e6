"""The property suite: every applicable oracle against every other on random cases (every op in
the table), and backward() semantics as Hypothesis properties against the reference engine and
torch (CPU, and CUDA where available).

Examples per test come from the active Hypothesis profile (``--gradspec-profile``; CI uses the
derandomized ``ci`` profile).  A failing case is saved as JSON and the message says how to
replay it with ``gradspec replay``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradspec as gs
from gradspec import strategies as gst
from tests._props import PROPERTIES, backends

ALL_OPS = gs.ops.names()


def save_for_replay(case) -> str:
    folder = os.path.join(tempfile.gettempdir(), "gradspec-failures")
    os.makedirs(folder, exist_ok=True)
    text = case.to_json()
    path = os.path.join(folder, hashlib.sha1(text.encode()).hexdigest()[:12] + ".json")
    with open(path, "w") as f:
        f.write(text)
    return path


def assert_agree(case):
    v = gs.check(case)
    if not v.ok:
        raise AssertionError(
            f"{v.summary()}\n\ncase (shrunk):\n{case.to_text()}\n\nreplay: gradspec replay {save_for_replay(case)}"
        )
    return v


def _examples(n):
    """At most n examples, fewer if the active profile asks for fewer."""
    return min(n, settings().max_examples)


@pytest.mark.parametrize("op", ALL_OPS)
def test_oracles_agree_for_every_op(op):
    seen = []

    @settings(max_examples=_examples(12))
    @given(gst.cases(ops=[op], max_nodes=3))
    def run(case):
        seen.append(op in case.ops)
        assert_agree(case)

    run()
    # The profile really exercised this op (a test that never drew it would prove nothing).
    assert sum(seen) >= min(3, len(seen)) and any(seen), f"{op} appeared in {sum(seen)} of {len(seen)} cases"


def test_the_suite_covers_every_op_in_the_table():
    params = {p for p in ALL_OPS}
    assert params == set(gs.ops.names()) and len(params) >= 45
    assert not gst.unusable_ops(), f"ops the strategies cannot draw: {gst.unusable_ops()}"


@settings(max_examples=_examples(60))
@given(gst.cases())
def test_oracles_agree_on_random_mixed_graphs(case):
    v = assert_agree(case)
    assert v.comparisons, "no oracle pair was compared"


@settings(max_examples=_examples(20))
@given(gst.cases(dtype="float32"))
def test_oracles_agree_on_float32_graphs(case):
    assert_agree(case)


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("prop", sorted(PROPERTIES))
def test_backward_semantics(prop, backend):
    fn = PROPERTIES[prop]

    @settings(max_examples=_examples(25))
    @given(case=gst.cases(max_nodes=5), data=st.data())
    def run(case, data):
        try:
            fn(backend, case, data)
        except AssertionError as e:
            raise AssertionError(
                f"{e}\n\ncase:\n{case.to_text()}\nreplay: gradspec replay {save_for_replay(case)}"
            ) from None

    run()


def test_failure_message_is_readable_on_its_own():
    from tests._mutants import MUTANT_VJPS, planted

    x = np.linspace(0.5, 1.5, 6).reshape(2, 3)
    case = gs.Case.build({"x": x, "w": np.ones((1, 3))}, [("y", "mul", ["x", "w"], {})], ["y"], [np.ones((2, 3))])
    with planted(*MUTANT_VJPS["mul-wrong-sign"]):
        with pytest.raises(AssertionError) as info:
            assert_agree(case)
    msg = str(info.value)
    for piece in ("reference vs", "leaf 'w'[", "tolerance", "y = mul(x, w)", "gradspec replay "):
        assert piece in msg, f"{piece!r} missing from:\n{msg}"
