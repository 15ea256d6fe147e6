"""``gs.verify_engine``: an autodiff engine behind the :class:`gradspec.engines.Engine` protocol.

Gradient values on random graphs of the ops the engine supports, against the reference engine
and the jacobian oracle; then every backward() rule of CONTRACT §5 as a named check
(:mod:`gradspec.semantics`, drawn by Hypothesis: :mod:`gradspec.rules`), against the reference
engine, which reproduces torch call by call.

Example::

    >>> import gradspec as gs
    >>> gs.verify_engine("reference", max_examples=3, seed=0).ok
    True
"""

from __future__ import annotations

import dataclasses
import time

from .. import engines as _engines
from .._private import result_sink, user_warnings
from .._private.imports import importable_path
from .._private.skips import word_cut
from ..case import Case
from ..check import Discrepancy, check
from ..diagnose import explain
from ..oracles.engine_oracle import EngineOracle
from ..result import Result, VerifyDiscrepancy
from ..rules import explain_engine_finding
from ..search import DEFAULT_MAX_EXAMPLES, _check_budget, _resolve_seed, _Runner
from ..semantics import check_engine_rules, drop_value_duplicates
from ..spec import registry as _registry
from . import numerics as _num
from .op import _budget_text, _count, _note_verdicts

__all__ = ["verify_engine", "ENGINE_COMPANIONS"]


INLINE_ENGINE = "<your engine object>"  # an engine that has no import path: its findings do not replay


def _engine_label(engine_arg, engine) -> str:
    """How the engine is named in replay commands and case files: the name the user gave, else the
    import path of its class (``module:QualName``, a callable returning an engine), else inline."""
    if isinstance(engine_arg, str):
        return engine_arg
    path = importable_path(type(engine))
    return path if path is not None and _rebuilds(type(engine), engine) else INLINE_ENGINE


def _rebuilds(cls, engine) -> bool:
    """``cls()`` is the engine again (what `gradspec replay` builds from the class path): not so for an
    engine configured by its arguments, e.g. ``Mini("seed-mean")``, whose replay would pass."""
    try:
        other = cls()
    except Exception:  # noqa: BLE001 - needs arguments: the class path alone cannot rebuild it
        return False
    return getattr(other, "name", None) == getattr(engine, "name", None)


def verify_engine(engine, *, max_examples: int | None = None, seconds: float | None = None, seed: int | None = None,
                  strict: bool = True) -> Result:
    """Verify an autodiff engine behind the :class:`gradspec.engines.Engine` protocol.

    Gradient values on random graphs of the ops ``engine.supports``, against the reference
    engine and the jacobian oracle; then every backward() rule of CONTRACT §5 as a named check
    (``Result.checks``), differential against torch wherever torch decides whether a call raises.
    With ``strict=False`` only what decides gradient correctness fails the run (values,
    accumulation, implicit-seed and seed-shape rules, reset, retain_graph); torch-specific
    details (freeing after backward, None before the first backward or for unreached leaves,
    error types, a root that does not require grad) become ``Result.notes``.
    """
    _check_budget(max_examples, seconds)
    label_arg = engine
    eng = _engines.get(engine)
    s = _resolve_seed(seed)
    label = _engine_label(label_arg, eng)
    budget = _budget_text(max_examples, seconds)
    result = Result(target=eng.name, what="engine", seed=s, max_examples=max_examples, budget_seconds=seconds,
                    strict=strict)
    result.replay = f"gs.verify_engine({label!r}, seed={s}, {budget}, strict={strict})"
    started = time.perf_counter()
    from .. import strategies as gst

    unusable = gst.unusable_ops()
    supported = []
    for op in _registry.public_names():
        try:
            ok = bool(eng.supports(op))
        except Exception as e:  # noqa: BLE001
            result.note(f"engine.supports({op!r}) raised {type(e).__name__}: {e}; treated as unsupported")
            ok = False
        if ok and op not in unusable:
            supported.append(op)
    if label == INLINE_ENGINE:
        result.note("the engine cannot be rebuilt from an import path (defined in __main__ or inside a function, or "
                    "its class builds another engine without arguments): its findings' case.json cannot be replayed "
                    "with `gradspec replay` (pass 'module:attr' of a function that returns it); each report shows "
                    "the gs.check that replays it in your session")
    if not supported:
        result.note("the engine supports no op of the table: only the semantics checks that need no op could run")
    # §5, drawn by Hypothesis; an engine that hangs on a scenario is cut (the rules left are skipped, saying so)
    check_engine_rules(eng, label, result, strict, s, max_examples, seconds, timeout=_num.CASE_TIMEOUT)
    if supported:
        eo = EngineOracle(eng, name=f"engine:{eng.name}", spec=label, strict=strict)
        run_replay = result.replay

        def evaluate(case):
            _count(result, case)
            case.engine = label  # what case.json records, so that `gradspec replay` runs this engine
            return _check_engine_case(case, eo, result, run_replay, strict)

        strategy = _engine_cases(supported)
        if max_examples is None and seconds is None:
            max_examples = max(DEFAULT_MAX_EXAMPLES, 2 * len(supported))
        left = None if seconds is None else max(0.1, seconds - (time.perf_counter() - started))
        # As gradspec fuzz --engine does: a value finding gets the engine-level cause that reproduces the
        # engine's numbers (seed ignored, stale intermediate gradients, ...) before it is deduplicated.
        runner = _Runner(result, max_examples, left,
                         explain=lambda d: explain_engine_finding(eng, d, _num.CASE_TIMEOUT))
        # A wrong VJP met by a rule search is the value check's to report (with its localisation): not
        # known in advance; semantics.drop_value_duplicates drops the rule's copy when the values blame the op.
        runner.found.update({d.signature: d for d in result.discrepancies if d.cause is None or d.cause.id != "wrong-vjp"})
        # Each case under the per-case deadline (a hang is a 'timeout' finding, not a run that never ends).
        _num.run_within_budget(runner, strategy, _num.with_deadline(evaluate, result, left, f"engine {eng.name!r}",
                                                                    run_replay), left)
        result.checks["values on random graphs (J^T . seed)"] = (
            "failed" if any(d.check_name == "values" for d in result.discrepancies) else "passed")
    for d in result.discrepancies:  # CONTRACT §8: findings made outside check() get their cause here
        explain(d)
    if drop_value_duplicates(result):  # one op's wrong VJP is reported once; one only a rule showed is a value bug
        result.checks["values on random graphs (J^T . seed)"] = "failed"
    result.seconds = time.perf_counter() - started
    user_warnings.note(result, f"engine {eng.name!r}")  # (it warned: how often; shown once, below)
    result_sink.emit(result)
    user_warnings.reemit(result)  # after the verdict is complete (-W error raises here)
    return result


ENGINE_COMPANIONS = ("add", "mul", "sum", "tanh", "exp", "matmul")


def _engine_cases(supported: list):
    """Each case focuses on one supported op (drawn uniformly, so every op gets its share of a
    small budget), mixed with a few simple supported ops, or all supported ops at random."""
    from hypothesis import strategies as st

    from .. import strategies as gst

    comp = [c for c in ENGINE_COMPANIONS if c in supported]

    def focused(op):
        return gst.cases(ops=[op] + [c for c in comp if c != op], max_nodes=5).filter(lambda c: op in c.ops)

    return st.one_of(st.sampled_from(supported).flatmap(focused), gst.cases(ops=supported, max_nodes=6))


def _check_engine_case(case: Case, eo: EngineOracle, result: Result, run_replay: str, strict: bool) -> list:
    names = [eo, "reference", "jacobian"]
    v = check(case, oracles=names)
    _note_verdicts(result, [v])
    found = []
    if eo.name in v.errors:
        tname, msg, tb = v.errors[eo.name]
        found.append(VerifyDiscrepancy(
            "raised", (eo.name, "reference"),
            f"engine {eo.engine.name!r}: raised {tname}: {msg} on a valid graph where the reference engine and "
            "torch compute gradients", case, traceback=tb, replay=run_replay, check_name="values", verdict=v))
    else:
        ref_vs_jac_bad = any(set(d.oracles) == {"reference", "jacobian"} for d in v.discrepancies)
        for d in v.discrepancies:
            if eo.name not in d.oracles or d.kind == "raised":
                continue
            if ref_vs_jac_bad:
                result.note(f"reference and jacobian oracles disagree on a case ({word_cut(d.message, 120)}): not counted "
                            "against the engine; please report it to gradspec")
                continue
            fields = {f.name: getattr(d, f.name) for f in dataclasses.fields(Discrepancy)}
            fields["message"] = f"engine {eo.engine.name!r}: gradient differs from J^T . seed: {d.message}"
            if d.kind == "none-vs-zeros":
                fields["message"] += (" (torch leaves .grad None for a leaf no gradient reached; strict=False accepts "
                                      "zeros)")
            found.append(VerifyDiscrepancy(**fields, replay=run_replay, check_name="values", verdict=v))
    if not strict and not found:
        ref = v.results.get("reference", {})
        got = v.results.get(eo.name, {})
        for k, g in ref.items():
            if g is None and got.get(k) is not None:
                result.note("the engine reports zeros (not None) for leaves no gradient reached (torch: None)")
                break
    return found
