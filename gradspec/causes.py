"""What a finding blames: the cause model of CONTRACT §8, shared by every layer that reports.

A :class:`Cause` says *what is wrong and where*, not merely which leaf element is off: an
engine-level cause names a broken ``backward()`` rule (CONTRACT §5), a node-level cause names the
first graph node whose VJP is wrong and the pattern of the error.  This module is the bottom of
the package (it imports nothing of gradspec), so the engine checks, the comparison, the search and
the reports all speak the same ids.

Example::

    >>> from gradspec.causes import Cause
    >>> c = Cause("wrong-vjp", "node v3 = var(x0): its VJP is off by a factor 0.75 = (n-1)/n",
    ...           node="v3", op="var", evidence="grad 0.75 vs 1.0", pattern="scale", factor=0.75)
    >>> c.id, c.pattern, c.is_engine_level
    ('wrong-vjp', 'scale', False)
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["Cause", "ENGINE_IDS", "NODE_IDS", "NOTE_IDS", "OTHER_IDS", "PATTERNS", "CONTRACT_PATTERNS", "ALL_IDS",
           "process_died", "crash_type"]

# Engine-level ids: a backward() rule of CONTRACT §5 that the engine breaks.  The text is the
# meaning each id keeps (CONTRACT §8); reports and docs quote it.
ENGINE_IDS = {
    "implicit-seed-non-scalar": "an implicit seed was accepted where numel != 1",
    "implicit-seed-refused": "an implicit seed was refused where numel == 1 (any shape)",
    "seed-shape-accepted": "a seed of another shape than the output's was accepted",
    "seed-ignored": "the result is what a seed of ones gives: the seed is ignored",
    "seed-misapplied": "the seed is used, but not as J^T . seed",
    "accumulation-overwrite": "a later backward replaced .grad instead of adding to it",
    "stale-intermediate-grads": "gradients of intermediate nodes are carried over from an earlier backward",
    "uses-overwrite": "within one backward, the gradients of several uses of a leaf replace each other instead of "
                      "adding (.grad still adds across calls)",
    "root-grad-assigned": "a root that is also used elsewhere had its gradient set, not added",
    "backward-order": "backward visits the nodes out of reverse topological order (e.g. depth-first pre-order): a "
                      "tensor used several times passes its gradient on before every use has added to it",
    "grad-not-updated": ".grad reads back unchanged after a backward",
    "reset-ignored": "zero_grad / grad = None does not reset the accumulated gradient",
    "repeated-input-dropped": "one use of a leaf passed twice to an op is lost",
    "no-freeing": "a second backward through freed buffers does not raise",
    "none-vs-zeros": "a gradient is zeros where torch has None (or the other way round)",
    "error-type": "the engine raises where torch does not, or not where torch does",
    "shared-broadcast-reduction": "the engine's shared code that reduces a broadcast input's gradient to the input's "
                                  "shape is wrong (a mean or a slice where the sum belongs), on every broadcasting op",
    "retain-graph-ignored": "a backward raised after an earlier one kept the graph (retain_graph=True): the engine "
                            "freed its buffers anyway",
    "backward-raises": "backward() raises on every call, even on a one-node graph with an explicit seed (the engine's "
                       "backward itself, not one op's rule)",
    "backward-mutates-values": "a backward() call changed the value of a tensor of the graph (a gradient computed "
                               "in place into a saved forward array): later backwards read other numbers",
    "grad-on-constant": "a leaf created with requires_grad=False got a gradient (torch leaves its grad None)",
    "shared-non-finite": "the engine's gradients are non-finite where torch's are finite on every op tried at the "
                         "same inputs, also on ops whose VJP cannot overflow (neg, add): its shared backward code",
    "unexplained": "a backward() rule is broken and no known wrong semantics reproduces the engine's numbers",
}

# Node-level ids: a gradient-value discrepancy localised to the first node whose VJP is wrong.
NODE_IDS = {
    "wrong-vjp": "the first node whose VJP is wrong, checked locally at its real inputs and upstream gradient",
    "wrong-jvp": "a user op's declared jvp is wrong at the node (its vjp agrees with finite differences)",
    "wrong-double-backward": "a torch Function's second-order gradient (autograd through its backward) disagrees "
                             "with finite differences of its first-order backward",
    "forward-mutates-input": "a torch Function's forward modifies an input in place without ctx.mark_dirty",
    "layout-dependent": "a torch Function's backward raises or returns other numbers when its upstream gradient "
                        "is non-contiguous (the same values in another memory layout)",
}

# Findings that no single node or backward() rule explains.
OTHER_IDS = {
    "not-localised": "every node's rule agrees with its twin on its own: the error comes from how the graph "
                     "combines them, or from an oracle",
    "forward-raised": "the forward of the code under test raised",
    "process-died": "the process checking the case died (a fatal signal, os._exit, out of memory or a kill) while "
                    "the engine or an oracle ran",
}

# Notes, never failures.
NOTE_IDS = {
    "twin-mismatch": "a user op's torch= twin is a different function at the failing point",
}

PATTERNS = {
    "sign": "the VJP has the wrong sign",
    "scale": "the VJP is off by a constant factor",
    "seed-ignored": "the VJP ignores the upstream gradient (uses ones)",
    "broadcast-reduction": "not summed over broadcast dimensions (or averaged instead of summed)",
    "permuted": "the right numbers in the wrong places",
    "unselected-branch": "a non-finite gradient from a select (torch.where, masked_fill) whose unselected branch is "
                         "NaN or inf there: the zero gradient it sends that branch times the branch's non-finite "
                         "values (0 · nan) is NaN; compute the branch on a safe input (the double-where)",
    # Recognised mistakes of no CONTRACT §8 pattern: a Cause carries them as pattern 'other' with the finer name in
    # .subpattern (the contract's list of .pattern values is closed; a CI reading it sees only those six).
    "transposed": "the backward applies a square Jacobian block where its transpose belongs (A where A^T is needed)",
    "not-symmetrised": "a symmetric-matrix input's gradient returned as X where sym(X) = (X + X^T)/2 belongs",
    "not-accumulated": "elements fed by several output elements get one contribution, not the sum of all",
    "masked": "right except where the backward zeroes (or keeps) elements J^T·g does not",
    "other": "no simple pattern",
}

# CONTRACT §8's values of a wrong-vjp cause's .pattern (a closed list).
CONTRACT_PATTERNS = ("sign", "scale", "seed-ignored", "broadcast-reduction", "permuted", "other")

ALL_IDS = {**ENGINE_IDS, **NODE_IDS, **NOTE_IDS, **OTHER_IDS}


@dataclasses.dataclass
class Cause:
    """The cause of one finding (CONTRACT §8).

    ``id`` is one of :data:`ALL_IDS` (more may be added); ``summary`` is one sentence a user can act
    on; ``node`` / ``op`` name the blamed graph node (None for engine-level causes); ``evidence``
    holds the numbers that decided it; ``pattern`` / ``factor`` describe a wrong VJP (``pattern`` one of
    :data:`CONTRACT_PATTERNS`; a finer mistake gradspec recognises, such as ``transposed``, is ``'other'`` with
    the finer name in ``subpattern``: given as ``pattern=`` it is moved there); ``fix`` is the change
    to make where the cause knows it better than its pattern does ("" otherwise: reports then say the
    pattern's own fix direction).
    """

    id: str
    summary: str
    node: str | None = None
    op: str | None = None
    evidence: str = ""
    pattern: str | None = None
    factor: float | None = None
    fix: str = ""
    subpattern: str | None = None

    def __post_init__(self) -> None:
        if self.pattern is not None and self.pattern not in CONTRACT_PATTERNS and self.pattern in PATTERNS:
            self.subpattern, self.pattern = self.pattern, "other"

    @property
    def named_pattern(self) -> str | None:
        """The finest pattern known: ``subpattern`` where there is one, else ``pattern``."""
        return self.subpattern or self.pattern

    @property
    def is_engine_level(self) -> bool:
        return self.id in ENGINE_IDS

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict | None) -> "Cause | None":
        if not d:
            return None
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})

    def __str__(self) -> str:
        where = f" [node {self.node} = {self.op}]" if self.node and not self.summary.startswith(f"node {self.node} ") else ""
        return f"{self.id}{where}: {self.summary}"

    def describe(self) -> str:
        """The cause as every assertion and summary says it (``gs.assert_gradients``, the ``gradspec_check``
        fixture, ``gs.assert_*``, ``Verdict.summary``): id, node, summary and the evidence that decided it."""
        return str(self) + (f" (evidence: {self.evidence})" if self.evidence else "")


def crash_type(cause) -> str:
    """The exception type of an engine crash while building the graph (an ``error-type`` cause naming an op;
    a :class:`Cause` or its JSON), "" for any other cause.  Part of such a finding's dedup key: a ValueError
    and a TypeError of one op are two bugs.  The type, never the message (messages hold values).  Read from
    the evidence, which starts ``"<type>: <message>"`` (``gradspec.rules.diagnosis.diagnose``)."""
    get = cause.get if isinstance(cause, dict) else lambda k: getattr(cause, k, None)
    if get("id") != "error-type" or not get("op"):
        return ""
    m = re.match(r"([A-Za-z_][\w.]*):", str(get("evidence") or ""))
    return m.group(1) if m else ""


def process_died(message: str, fault: str | None = None) -> Cause:
    """The cause of a ``crash`` finding (CONTRACT §8: every finding names one): the process died on the case.

    ``fault``: the faulthandler traceback of the dead process, whose last frames say where it died.
    """
    tail = "\n".join((fault or "").strip().splitlines()[-12:])
    return Cause("process-died", message, evidence=tail or "no traceback: the process got no fatal signal "
                 "gradspec can catch (os._exit, SIGKILL, the out-of-memory killer)",
                 fix="replay the case (gradspec replay DIR/ID/case.json): it runs in a child process, and the "
                     "traceback (if any) names the call that ended it")
