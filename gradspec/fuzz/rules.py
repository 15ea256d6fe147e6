"""``gradspec fuzz --engine X`` checks every §5 rule as well as gradient values (CONTRACT §6).

After the value campaign, each backward() rule of :mod:`gradspec.rules` runs its own Hypothesis
search on the engine; every distinct failure (one per §8 cause) becomes a finding like the value
campaign's: a report folder (graph, the exact calls, the cause and its evidence) and a record in
``summary.json``'s ``reports``; ``summary.json["rules"]`` says, per rule, passed / failed (with the
causes) / skipped (with the reason).

Example::

    >>> from gradspec.fuzz.rules import RuleDiscrepancy
    >>> RuleDiscrepancy.signature_of("mini", ("stale-intermediate-grads",))
    ('semantics:stale-intermediate-grads', ('mini', '§5 backward() rules'), ('stale-intermediate-grads',))
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

from .. import rules as _rules
from .._private.records import discrepancy_id
from ..causes import crash_type
from ..check import Discrepancy
from ..semantics import mark_value_bugs
from .state import Config, Stats, _sig_key

__all__ = ["RuleDiscrepancy", "run_rules", "SECONDS_SHARE"]

SECONDS_SHARE = 0.25  # of a --seconds budget: what the rule searches may add after the value campaign
RULES_PAIR = "§5 backward() rules"


@dataclasses.dataclass
class RuleDiscrepancy(Discrepancy):
    """A broken backward() rule found by a rule search; one per cause, whatever its graph's ops."""

    rule: str = ""
    snippet: str = ""

    @staticmethod
    def signature_of(engine: str, key: tuple) -> tuple:
        return (f"semantics:{key[0]}", (engine, RULES_PAIR), tuple(str(k) for k in key))

    @property
    def signature(self) -> tuple:
        return self.signature_of(self.oracles[0], _key(self.cause, self.rule))


def _key(cause, rule) -> tuple:
    if cause.id == "error-type" and cause.op:  # one op's crash: that op's finding, one per exception type
        return (cause.id, cause.op, crash_type(cause)) if crash_type(cause) else (cause.id, cause.op)
    if cause.id == "wrong-vjp":
        return (cause.id, cause.op or "")
    if cause.id == "unexplained":
        return (cause.id, rule)
    return (cause.id,)


def run_rules(cfg: Config, engine, stats: Stats, write: Callable | None = None,
              announce: Callable | None = None, ops=None) -> dict:
    """Run the rule searches on ``engine`` (the campaign's engine object, on the campaign's ``ops``);
    every finding is written with ``write(discrepancy, None, info)`` and recorded in
    ``stats.found``.  Returns the per-rule status for ``summary.json["rules"]``."""
    if engine is None or cfg.engine == "reference":
        why = ("the reference engine is the rules' oracle: nothing to compare" if cfg.engine == "reference"
               else "no engine object")
        return {name: {"status": "skipped", "reason": why} for name in _rules.RULES}
    per_rule = None if cfg.max_examples is None else max(1, min(cfg.max_examples, _rules.DEFAULT_EXAMPLES))
    seconds = None if cfg.seconds is None else cfg.seconds * SECONDS_SHARE
    label = getattr(engine, "name", cfg.engine)

    def found(f) -> None:
        if f.cause.id == "wrong-vjp":
            return  # a value bug of one op, not a backward() rule: the value campaign's to report
        d = RuleDiscrepancy(kind=f"semantics:{f.cause.id}", oracles=(label, RULES_PAIR), message=f.message(label),
                            case=f.scenario.to_case(), cause=f.cause, rule=f.rule, snippet=f.snippet())
        d.case.engine = cfg.engine
        d.message += "\n\nthe calls:\n" + f.scenario.code() + "\n\nevidence:\n" + f.cause.evidence
        rid = discrepancy_id(d.signature)
        info = {"run_id": cfg.run_id, "shard": 0, "seed": cfg.seed, "engine": cfg.engine, "covers": [_sig_key(d.signature)],
                "note": f"backward() rule '{_rules.RULES[f.rule].title}'", "found_at": time.time()}
        rec = {"id": rid, "kind": d.kind, "oracles": list(d.oracles),
               "ops": sorted({n.op for n in d.case.nodes}), "message": d.message.split("\n", 1)[0],
               "covers": info["covers"], "note": info["note"], "shard": 0, "rule": f.rule, "cause": f.cause.to_json()}
        stats.found[rid] = rec
        if write is not None:
            try:
                write(d, None, info)
            except Exception as e:  # noqa: BLE001 - the finding stays in the summary, with why it has no folder
                rec["report_error"] = f"{type(e).__name__}: {e}"
                rec["case"] = getattr(e, "case_json", None)  # (printed at the end of the run: still replayable)
                stats.errors.append(f"the report of rule finding {rid} could not be written: {e}")
        if announce is not None:
            announce(rid, d)

    res = _rules.check_rules(engine, max_examples=per_rule, seconds=seconds, seed=cfg.seed, strict=True,
                             on_finding=found, ops=ops, timeout=cfg.case_timeout)
    mark_value_bugs(res)  # a rule hit only by one op's wrong VJP: no broken rule (status value-bug)
    for f in res.findings:
        if f.cause.id == "wrong-vjp":
            res.status[f.rule]["note"] = (f"a wrong VJP of {f.cause.op} (a value bug: the value campaign reports it, "
                                         "with the case that shows it)")
    return res.status
