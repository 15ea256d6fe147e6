"""The backward() rules of CONTRACT §5 as named checks of ``verify_engine``, drawn by Hypothesis.

The rules, their searches and the engine diagnosis live in :mod:`gradspec.rules` (shared with
``gradspec fuzz --engine``); this module turns their findings into
:class:`gradspec.result.VerifyDiscrepancy` entries of a :class:`gradspec.result.Result`, one
``Result.checks`` line per rule (passed / failed / note / skipped: why), each finding with its
CONTRACT §8 cause.

Example::

    >>> import gradspec as gs
    >>> r = gs.verify_engine("reference", max_examples=2, seed=0)
    >>> r.checks["grad = J^T . seed"]
    'passed'
    >>> rule_text({"status": "value-bug", "causes": ["wrong-vjp"], "ops": ["tanh"]})
    'passed apart from the value bug of tanh (wrong-vjp)'
    >>> rule_text({"status": "other-bug", "owners": {"accumulation-overwrite": "accumulate-uses"}})
    "passed apart from the accumulation-overwrite bug (filed under rule 'accumulate-uses')"
"""

from __future__ import annotations

import time

from . import rules as _rules
from .result import Result, VerifyDiscrepancy

__all__ = ["check_engine_rules", "mark_value_bugs", "rule_text", "drop_value_duplicates", "VALUE_BUG"]

VALUE_BUG = "value-bug"  # a rule status: its only failures were a wrong VJP of an op (reported as a value finding)


def check_engine_rules(eng, label: str, result: Result, strict: bool, seed: int, max_examples: int | None = None,
                       seconds: float | None = None, timeout: float | None = None) -> None:
    """Run every §5 rule on ``eng`` (``label``: its name or ``module:attr``, recorded in the cases)
    and record it in ``result`` (checks, discrepancies, notes).

    ``max_examples`` caps each rule's search (default :data:`gradspec.rules.DEFAULT_EXAMPLES`);
    with ``strict=False`` a torch-specific detail (freeing, None vs zeros, error types) becomes
    a note instead of a failure; ``timeout`` (seconds) cuts an engine that hangs on a scenario.
    """
    t0 = time.perf_counter()
    per_rule = _rules.DEFAULT_EXAMPLES if max_examples is None else min(max_examples, _rules.DEFAULT_EXAMPLES)
    first: list = []  # when the first finding was shrunk (Result.time_to_first)
    res = _rules.check_rules(eng, max_examples=per_rule, seconds=None if seconds is None else seconds / 2,
                             seed=seed, strict=True, on_finding=lambda f: first.append(time.perf_counter() - t0),
                             timeout=timeout)
    mark_value_bugs(res)
    noted = set()
    for f in res.findings:
        title = _rules.RULES[f.rule].title
        if not strict and f.cause.id in _rules.STRICT_ONLY:
            noted.add(f.rule)
            result.note(f"{title}: {f.cause.summary} [{f.cause.id}] (torch-specific detail; strict=False)")
            continue
        case = f.scenario.to_case()
        case.engine = label
        d = VerifyDiscrepancy(_rules.KIND.get(f.cause.id, "value"), (f"engine:{eng.name}", "reference"),
                              f.message(eng.name), case, snippet=f.snippet(), replay=result.replay,
                              check_name=title, cause=f.cause)
        result.discrepancies.append(d)
        if result.time_to_first is None and first:
            result.time_to_first = first[0]
            result.cases_to_first = result.cases_run
            result.first_found_by = f"the backward() rule search ({title})"
    if res.hung is not None and res.hung[1] is not None:
        # The engine under test never returned: a finding of its own (CONTRACT §3), not only rules skipped.
        name, sc = res.hung
        case = sc.to_case()
        case.engine = label
        result.discrepancies.append(VerifyDiscrepancy(
            "timeout", (f"engine:{eng.name}", "case-timeout"),
            f"engine {eng.name!r} ran past the per-scenario timeout of {timeout:g} s on a scenario of the §5 rule "
            f"'{_rules.RULES[name].title}' (cut; the rules after it were skipped):\n{sc.code()}",
            case, snippet=sc.code(), replay=result.replay, check_name=_rules.RULES[name].title))
    for name, st in res.status.items():
        title = _rules.RULES[name].title
        if st["status"] == "skipped":
            result.checks[title] = f"skipped: {st['reason']}"
        elif st["status"] in (VALUE_BUG, _rules.OTHER_BUG):
            result.checks[title] = rule_text(st)
        elif st["status"] == "failed":
            real = strict or set(st.get("causes", [])) - _rules.STRICT_ONLY
            result.checks[title] = "failed" if real else "note"
        else:
            result.checks[title] = "passed"
    for name in noted:
        result.checks.setdefault(_rules.RULES[name].title, "note")


def mark_value_bugs(res) -> None:
    """Rules of ``res`` (a :class:`gradspec.rules.RulesResult`) whose only failures are a wrong VJP of
    an op get status :data:`VALUE_BUG` and ``"ops"``: one op's value bug breaks every rule whose
    scenarios use that op, which is no backward() rule broken (it looked like nine semantics bugs)."""
    ops: dict = {}
    for f in res.findings:
        if f.cause.id == "wrong-vjp":
            for name in [f.rule, *getattr(f, "also", [])]:
                ops.setdefault(name, set()).add(f.cause.op or "an op")
    for name, st in res.status.items():
        if st.get("status") == "failed" and set(st.get("causes") or []) == {"wrong-vjp"}:
            st["status"], st["ops"] = VALUE_BUG, sorted(ops.get(name) or {"an op"})


def rule_text(st) -> str:
    """One rule's outcome in words: ``passed``, ``failed: cause, ...``, ``skipped: why`` or ``passed
    apart from the value bug of OP (wrong-vjp)``; ``st`` is a status dict of :mod:`gradspec.rules`
    (``summary.json["rules"]``) or already a string."""
    if not isinstance(st, dict):
        return str(st)
    if st.get("status") == VALUE_BUG:
        return f"passed apart from the value bug of {', '.join(st.get('ops') or ['an op'])} (wrong-vjp)"
    if st.get("status") == _rules.OTHER_BUG:  # another rule's cause (rules.OWNS), filed under that rule
        owners = st.get("owners") or {}
        return "passed apart from " + "; ".join(f"the {c} bug (filed under rule '{r}')" for c, r in sorted(owners.items()))
    extra = ", ".join(st.get("causes") or []) or st.get("reason") or ""
    return f"{st.get('status', '?')}" + (f": {extra}" if extra else "")


def drop_value_duplicates(result: Result) -> bool:
    """A rule finding whose cause is a wrong VJP of an op the values check also blamed (wrong-vjp, same
    op) is the same bug seen twice: the values check's finding stays, the rule's goes (``gradspec fuzz``
    leaves such rule findings to its value campaign in the same way).  True when a wrong VJP is left
    that only a rule's scenario showed (the gradient values are wrong all the same)."""
    def rule_vjp(d):
        return d.check_name != "values" and d.cause is not None and d.cause.id == "wrong-vjp"

    blamed = {d.cause.op for d in result.discrepancies
              if d.check_name == "values" and d.cause is not None and d.cause.id == "wrong-vjp"}
    result.discrepancies[:] = [d for d in result.discrepancies if not (rule_vjp(d) and d.cause.op in blamed)]
    return any(rule_vjp(d) for d in result.discrepancies)
