"""The draw of reductions (tryout8 F4): a mean, sum or softmax over *some* axes of a tensor whose other axes
are > 1 is where their VJP bugs show (a mean divided by every element, a softmax's sum(g*s) over the wrong
axis); reducing everything, a 1-D tensor or size-1 axes gives the right answer by accident.  Such cases must be
common in the default draw, not 1 in 12."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings

from gradspec import strategies as gst

OPS = ["add", "mul", "exp", "sum", "mean", "softmax", "log_softmax", "matmul"]


def _partial(case) -> bool:
    """A reduction node that reduces an axis > 1 and keeps one, both of its input."""
    shapes = case.shapes()
    for n in case.nodes:
        if n.op not in ("sum", "mean", "softmax", "log_softmax"):
            continue
        shape = shapes[n.inputs[0]]
        dims = n.params["dim"]
        if dims is None or not shape:
            continue
        red = {d % len(shape) for d in ((dims,) if isinstance(dims, int) else dims)}
        if any(shape[i] > 1 for i in red) and any(s > 1 for i, s in enumerate(shape) if i not in red):
            return True
    return False


def _reduces(case) -> bool:
    return any(n.op in ("sum", "mean", "softmax", "log_softmax") for n in case.nodes)


def test_partial_reductions_over_wide_tensors_are_common():
    seen = {"reduces": 0, "partial": 0}

    @settings(max_examples=400, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(gst.cases(ops=OPS))
    def draw(case):
        if _reduces(case):
            seen["reduces"] += 1
            seen["partial"] += _partial(case)

    draw()
    # before the fix 56 of 316 cases with a reduction (18%) had one; after 160 of 297 (54%); the bound sits
    # between, far enough from both that the derandomized draw moving with an unrelated change keeps it
    assert seen["partial"] >= math.ceil(0.35 * seen["reduces"]), seen
