"""How ``gradspec fuzz`` ends: the run's stats merged, the summary, index, JUnit XML and Markdown summary
written, the summary printed and the exit code chosen (CONTRACT §6), an interrupted run included.

Private to :mod:`gradspec.cli`; nothing here is public API.
"""

from __future__ import annotations

import collections
import os
import shutil
import sys
import time

from ._cli_args import EXIT_FOUND, EXIT_INCONCLUSIVE, EXIT_LOST, EXIT_OK, _err

__all__: list[str] = []


def interrupted_run(hooks, cfg):
    """The run's stats and rule status after a Ctrl-C outside the campaign's own loop (its set-up: the engine,
    the strategies; or after it): the summary says "interrupted", never "running" for good (chaos L1)."""
    from . import fuzz

    run = hooks.run or fuzz.Stats(shards=cfg.workers)
    run.interrupted, run.stop_reason = True, "interrupted"
    if hooks.run is None:
        run.seconds = time.time() - cfg.started
    return run, {"*": {"status": "skipped", "reason": "interrupted"}}


def _superseded_line(gone: list) -> str:
    """The final list's line for reports superseded by a smaller case, each with the report that replaced it
    (the count and the ids listed agree: tryout4 #14; tryout8 F11: which one replaced it)."""
    ids = [r["id"] for r in gone]
    by = sorted({r["superseded_by"] for r in gone if r.get("superseded_by")})
    return (f"  ({len(ids)} more report(s) superseded by a smaller case with the same disagreement: "
            f"{', '.join(ids[:5])}{f' and {len(ids) - 5} more in summary.json' if len(ids) > 5 else ''}"
            f"{'; replaced by ' + ', '.join(by) if by else ''})")


def _mark_superseded(report_dir: str, gone: list) -> None:
    """``superseded_by`` in the folder of each superseded report (its discrepancy.json), so the folder a live line
    announced says it was replaced; its status stays what re-checks read.  A folder that cannot be updated (gone,
    a symlink) keeps what it says: the summary lists it anyway."""
    from ._private.records import update_record

    for r in gone:
        try:
            update_record(report_dir, r["id"], {"superseded_by": r.get("superseded_by")})
        except (OSError, ValueError, KeyError):
            continue


def _module_not_allowed(rec) -> bool:
    """An earlier report not re-checked because its case names a module nobody allowed (the import gate's
    reason code, carried from ImportNotAllowed by CaseError.reason), not one whose case file is unreadable: only
    the first can be re-checked by the user's flag, so only it ends the run with exit 2 (CONTRACT §6).  A code,
    not the message's text: rewording the gate's message must not change an exit code."""
    return rec.get("code") == "import-not-allowed"


def _fuzz_finish(args, cfg, run, stats, previous, ops, last, rule_status) -> int:
    """Merge, write the summary and the index (a second Ctrl-C cannot lose them), print, and pick the exit code."""
    from . import fuzz, report
    from .fuzz import liveness

    run.found = {**stats.found, **run.found}
    run.crashed = stats.crashed + run.crashed
    run.errors = stats.errors + run.errors
    run.seconds = max(run.seconds, 1e-9)
    summary = liveness.mark_final(fuzz.summary_json(cfg, run, previous, ops))
    summary["rules"] = rule_status
    _rules_not_run(summary, rule_status)
    summary["last_run"] = last
    from ._private import interrupts

    with interrupts.deferred(raise_after=False):  # a second Ctrl-C (or a first SIGTERM) must not lose the summary
        try:
            fuzz.write_summary(cfg, summary)
            _mark_superseded(cfg.report_dir, summary.get("superseded") or [])
            index = report.write_run_report(cfg.report_dir, summary)
            _write_ci_outputs(args, cfg, summary)
            write_error = None
        except OSError as e:
            index, write_error = None, f"cannot write the summary into {cfg.report_dir}: {e.strerror or e}"
        _print_summary(cfg, summary, index, ops)
    if not os.environ.get("GRADSPEC_KEEP_STATE"):
        # The run's bookkeeping (campaign file, shard snapshots) has served its purpose.
        shutil.rmtree(cfg.state_dir, ignore_errors=True)
    report_failed = write_error or any(r.get("report_error") for r in run.found.values()) or \
        run.stop_reason == "report-dir"
    if report_failed:
        for r in run.found.values():
            if r.get("case"):
                print(f"\nunwritten discrepancy {r['id']} ({r['kind']}, {' vs '.join(r['oracles'])}); its case:\n"
                      f"{r['case']}", file=sys.stdout)
        _err(write_error or next((e for e in run.errors if "report" in e), "the report dir could not be written"))
        # a finding is a finding: its case is printed above, so the exit says so (1), not a usage error (M3); a run
        # that found nothing but could not deliver its summary is no clean bill either: inconclusive (review F8)
        return EXIT_FOUND if summary["discrepancies"] or run.found else EXIT_INCONCLUSIVE
    if summary["discrepancies"]:
        return EXIT_FOUND
    if run.interrupted:
        return interrupts.exit_code()  # 130 for Ctrl-C; 128 + N for signal N (143: SIGTERM)
    blocked = [p for p in previous or [] if _module_not_allowed(p)]
    if blocked:  # never read as fixed (chaos M6): CONTRACT §6, exit 2 naming the module and the flag
        return _err(f"{len(blocked)} report(s) from earlier runs in {cfg.report_dir} could not be re-checked "
                    f"({blocked[0]['id']}: {blocked[0]['status']}); allow the module with --allow-import, or use "
                    "another --report-dir")
    if run.lost:
        # Part of the budget never ran (a worker died twice on it): not a clean bill of health.
        print("gradspec fuzz: INCONCLUSIVE: part of the campaign did not run (see 'problem' above)", file=sys.stderr)
        return EXIT_LOST
    if summary["status"] == "inconclusive":
        return EXIT_INCONCLUSIVE  # the reason is in the summary printed above
    return EXIT_OK


def _rules_not_run(summary: dict, rule_status: dict) -> None:
    """With --engine, a run whose value cases agreed but whose §5 rules did not all run (the time budget was
    spent first, the engine hung on one) is inconclusive, naming them: never a green run that checked no rules."""
    from .fuzz.rules import SECONDS_SHARE
    from .result import RULE_SKIPS_BY_DESIGN

    unrun = [f"{n} ({r.get('reason', '')})" for n, r in rule_status.items() if n != "*" and r.get("status") == "skipped"
             and not str(r.get("reason", "")).startswith(RULE_SKIPS_BY_DESIGN)]
    if unrun and summary.get("status") == "agree":
        summary["status"] = "inconclusive"
        summary["reason"] = (f"{len(unrun)} backward() rule(s) (§5) were not checked: {'; '.join(unrun)}; the value "
                             "cases agreed, the rules say nothing yet (give more --seconds: the rules get "
                             f"{int(100 * SECONDS_SHARE)}% on top of it, or use --max-examples)")


def _write_ci_outputs(args, cfg, summary: dict) -> None:
    from . import ci_outputs

    if getattr(args, "junitxml", None):
        ci_outputs.write_junit(args.junitxml, summary, cfg.report_dir)
    if getattr(args, "summary_md", None):
        ci_outputs.write_summary_md(args.summary_md, summary, cfg.report_dir)


def _print_skipped(s: dict, out) -> None:
    """What was not compared, and why (oracles skipped, cases that compared nothing)."""
    from ._private.inert import OneLinePrints
    from ._private.skips import group

    out = OneLinePrints(out)
    from . import report

    for line in report.not_counted_lines(s):  # (as verify_*'s Result.summary says it)
        print(f"  {line}", file=out)
    apart = s.get("not_counted") or {}
    rest = {w: k for w, k in (s.get("inconclusive_reasons") or {}).items() if w not in apart}
    if rest:
        print(f"  {s['inconclusive'] - sum(apart.values())} of {s['cases']} case(s) compared nothing:", file=out)
        for why, k, ex in group(rest)[:3]:
            print(f"    {k} x {why}" + (f" (e.g. {ex})" if ex else ""), file=out)
    skipped = group(s.get("skipped", {}))  # by kind: one entry per reason, not per node it names
    if skipped:
        print("  skipped oracles: " + "; ".join(f"{why} ({k} case{'' if k == 1 else 's'}" + (f", e.g. {ex})" if ex else ")")
                                                for why, k, ex in skipped[:4])
              + (f"; ... {len(skipped) - 4} more kinds in summary.json" if len(skipped) > 4 else ""), file=out)


def _print_summary(cfg, s: dict, index: str | None, ops: list[str]) -> None:
    from . import caseio, report
    from ._private.inert import OneLinePrints

    out = OneLinePrints(sys.stdout)  # report ids, kinds, ops, errors: read from folders anybody could have made
    n = s["discrepancies"]
    head = (f"gradspec fuzz: {s['cases']} cases in {s['seconds']:.1f} s ({s['cases_per_second']:.1f} cases/s), "
            f"engine {s['engine']}, seed {s['seed']}, {s['workers']} worker{'s' if s['workers'] > 1 else ''}")
    if s["interrupted"]:
        head += " - INTERRUPTED (results of what ran)"
    print(head, file=out)
    covered = [o for o, k in s["ops"].items() if k]
    drawn = s.get("ops_drawn")
    never = [o for o, k in s["ops"].items() if not k and not (drawn or {}).get(o)]
    line = f"  ops: {len(covered)} of {len(s['ops'])} covered" + (" (counted: their gradient exercised)" if drawn else "")
    if never:
        line += f"; never generated: {', '.join(never[:8])}{' ...' if len(never) > 8 else ''}"
    print(line, file=out)
    if s["oracles"]:
        pairs = [f"{p} {s['agreement'].get(p, 0)}/{k}" for p, k in s["oracles"].items()]
        print("  agreement: " + "; ".join(pairs), file=out)
    if s["replayed"] or s["shrink_runs"]:
        print(f"  replayed {s['replayed']} saved case(s); {s['shrink_runs']} shrink runs", file=out)
    rules = s.get("rules") or {}
    if rules and any(r["status"] != "skipped" for r in rules.values()):
        from .semantics import VALUE_BUG, rule_text

        failed = [f"{n} ({', '.join(r.get('causes', []))})" for n, r in rules.items() if r["status"] == "failed"]
        skipped = [f"{n} ({r.get('reason', '')})" for n, r in rules.items() if r["status"] == "skipped"]
        # a rule hit only by one op's wrong VJP is no broken rule: that bug is a value discrepancy below
        apart = collections.Counter(rule_text(r) for r in rules.values() if r["status"] in (VALUE_BUG, "other-bug"))
        line = f"  backward() rules (§5): {sum(r['status'] == 'passed' for r in rules.values())} passed"
        line += "".join(f"; {k} {v}" for v, k in apart.items())
        line += f"; failed: {'; '.join(failed)}" if failed else ""
        line += f"; skipped: {'; '.join(skipped)}" if skipped else ""
        print(line, file=out)
    for e in s["errors"][:5]:
        print(f"  problem: {e}", file=out)
    for line in report.drawing_cut_lines(s.get("drawing_cuts") or []) + list(s.get("draws_skipped") or []):
        print(f"  {line}", file=out)
    if n:
        print(f"  {n} discrepanc{'y' if n == 1 else 'ies'}:", file=out)
        for r in s["reports"][:10]:
            where = f"culprit {r['culprit']}" if r.get("culprit") else f"ops {', '.join(r['ops'])}"
            seen = f" ({r['cases']} cases)" if r.get("cases", 1) > 1 else ""
            seen += " (shrinking interrupted: not shrunk)" if str(r.get("note", "")).startswith("shrinking interr") else ""
            print(f"    {r['id']}  {r['kind']:<16} {' vs '.join(r['oracles']):<36} {where}{seen}", file=out)
            print(f"      {caseio.replay_command(os.path.join(cfg.report_dir, r['id'], 'case.json'), s['engine'])}",
                  file=out)
        if n > 10:
            print(f"    ... and {n - 10} more in the report", file=out)
    elif s["interrupted"]:  # (the exit code of an interrupted run without findings: _fuzz_finish)
        from ._private import interrupts

        print(f"  INTERRUPTED (exit {interrupts.exit_code()}): {s.get('reason')}", file=out)
    elif s.get("status") == "inconclusive":
        print(f"  INCONCLUSIVE (exit 3): {s.get('reason')}", file=out)
    else:
        print("  no discrepancy", file=out)
    untested = report.untested_ops(s)
    if untested:  # "no discrepancy" is not "every op tested": said next to the verdict, with the fix
        print(f"  WARNING: {untested}", file=out)
    _print_skipped(s, out)
    if s.get("superseded"):
        print(_superseded_line(s["superseded"]), file=out)
    fixed = [p for p in s["previous"] if p["status"] == "no longer reproduces"]
    if fixed:
        print(f"  {len(fixed)} report(s) of earlier runs no longer reproduce: {', '.join(p['id'] for p in fixed[:5])}",
              file=out)
    if index:
        print(f"  report: {index}   summary: {os.path.join(cfg.report_dir, 'summary.json')}", file=out)

