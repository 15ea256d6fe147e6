"""A torch Function's backward that returns a gradient in another shape than its input's, which torch sums
down without a word: a note of ``verify_torch_function`` (the values then agree, so no check would say it).

torch's autograd accepts a gradient whose shape the input broadcasts to (``b`` of shape ``(4,)`` given a
gradient of shape ``(3, 4)``) and sums it down to the input's shape; a backward that forgot the reduction
is right only because of that (a direct call of the backward, ``torch.func``, or code that reads the
returned gradient gets the unreduced one).  Once per run, the backward is called at a case's node with its
unchecked return values read (:func:`gradspec._diagnose_raw._torch_raw`); a gradient of another shape gets
the note.  A finding's cause says the same where the values disagree (gradspec.diagnose).

Example::

    >>> from gradspec.verify.torch_grad_shapes import note_text
    >>> note_text([(1, (3, 4), (4,))])[:72]
    "fn's backward returns the gradient of its tensor input 1 in shape (3, 4)"
"""

from __future__ import annotations

import numpy as np

from .._diagnose_raw import _torch_raw
from ..case import Case

__all__ = ["SummedDownCheck", "note_text"]


def note_text(wrong: list) -> str:
    """``wrong``: (tensor input position, returned shape, input shape) per gradient of another shape."""
    parts = [f"the gradient of its tensor input {k} in shape {got} for an input of shape {want}"
             for k, got, want in wrong]
    return (f"fn's backward returns {'; '.join(parts)}: torch sums it down to the input's shape without a word "
            "(autograd does so when the input's shape broadcasts to the gradient's), so the values compared agree; "
            "return each gradient in its input's shape (e.g. g.sum(0), or .sum_to_size(input.shape)): a direct "
            "call of the backward, torch.func or code reading what it returns gets the unreduced one")


# Cases checked per run (one forward and one backward call of fn each), among those where an input has
# another shape than fn's output (only there can torch have summed a gradient down).
CHECKS = 5


class SummedDownCheck:
    """Per run: the backward's raw gradients read at up to CHECKS cases whose fn node broadcasts an input,
    until one gradient of another shape is found."""

    def __init__(self, spec, result) -> None:
        self.spec, self.result, self.left = spec, result, CHECKS

    def __call__(self, case: Case) -> None:
        if self.left <= 0:
            return
        node = next((n for n in case.nodes if n.op == self.spec.name), None)
        if node is None:
            return
        try:
            env = case.evaluate()
            if all(np.shape(env[i]) == np.shape(env[node.name]) for i in node.inputs):
                return
            self.left -= 1
            ins = [np.array(env[i], dtype=np.float64) for i in node.inputs]
            got = _torch_raw(self.spec, ins, np.ones(np.shape(env[node.name])), node.params)
        except Exception:  # noqa: BLE001 - the backward's own errors are the checks' to report
            return
        if got is None:
            return
        wrong = [(k, tuple(np.shape(r)), tuple(np.shape(x))) for k, (r, x) in enumerate(zip(got[0], ins))
                 if r is not None and np.shape(r) != np.shape(x)]
        if wrong:
            self.left = 0
            self.result.note(note_text(wrong))
