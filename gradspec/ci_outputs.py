"""CI-native outputs of a fuzz run: JUnit XML and a Markdown job summary, both made from ``summary.json``.

CI systems read JUnit XML to show failing tests and Markdown for a job's summary page; an exit
code and an HTML folder alone make a person dig.  Both files are derived from the run's summary
dict (the one written as ``DIR/summary.json``), so they say exactly what the HTML index says.

JUnit layout: one ``<testsuite name="gradspec fuzz">`` with test cases

- ``gradspec.run / verdict``: the run's verdict (failure on findings, an error of type
  ``gradspec.inconclusive`` with the reason when the run was inconclusive or interrupted);
- ``gradspec.findings / <report id>``: one per finding, failing with its cause and the replay command;
- ``gradspec.oracles / A vs B``: one per oracle pair compared, failing when a finding blames the pair;
- ``gradspec.ops / <op>``: one per op of the campaign, skipped when no case used it;
- ``gradspec.rules / <rule>``: one per backward() rule checked (``--engine``), with its outcome.

Example::

    >>> import io, xml.etree.ElementTree as ET
    >>> from gradspec.ci_outputs import junit_xml, summary_markdown
    >>> s = {"cases": 3, "discrepancies": 0, "seconds": 0.5, "ops": {"exp": 3}, "oracles": {"reference vs jacobian": 3},
    ...      "agreement": {"reference vs jacobian": 3}, "reports": [], "engine": "reference", "seed": 1}
    >>> ET.fromstring(junit_xml(s)).find("testsuite").get("failures")
    '0'
    >>> summary_markdown(s).splitlines()[0]
    '## gradspec fuzz: agree'
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import time
import xml.etree.ElementTree as ET
from urllib.parse import quote

__all__ = ["junit_xml", "summary_markdown", "write_junit", "write_summary_md", "run_status"]


def run_status(s: dict) -> tuple[str, str]:
    """(status, reason) of a run summary: ``agree`` / ``disagree`` / ``inconclusive`` (CONTRACT §3)."""
    if s.get("status") in ("agree", "disagree", "inconclusive"):
        return s["status"], s.get("reason") or ""
    if s.get("discrepancies"):
        return "disagree", ""
    if not s.get("cases") or not s.get("oracles"):
        return "inconclusive", s.get("reason") or ("no case ran" if not s.get("cases") else "nothing was compared")
    return "agree", ""


_NOT_COMPARED = ("raised", "timeout", "crash")  # finding kinds whose cases compared no gradients


def _cause(rec: dict) -> str:
    c = rec.get("cause") or {}
    if c.get("summary"):
        where = f" [node {c['node']} = {c.get('op')}]" if c.get("node") else ""
        return f"{c.get('id', '?')}{where}: {c['summary']}"
    return f"{rec.get('kind', '?')}: {(rec.get('message') or '').splitlines()[0] if rec.get('message') else ''}"


def _replay(rec: dict, report_dir: str, engine: str | None = None) -> str:
    from .caseio import replay_command  # with the --allow-import a user engine's case needs

    return replay_command(os.path.join(report_dir, rec["id"], "case.json"), rec.get("engine") or engine)


def _case(suite, classname: str, name: str, seconds: float = 0.0):
    return ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{seconds:.3f}")


def _fail(tc, message: str, text: str = "", tag: str = "failure") -> None:
    el = ET.SubElement(tc, tag, message=message[:1000])
    el.text = text


def junit_xml(s: dict, report_dir: str = "reports") -> str:
    """The JUnit XML text for run summary ``s`` (see the module docstring for the layout)."""
    status, reason = run_status(s)
    reports = list(s.get("reports") or [])
    # timestamp and hostname as pytest's junitxml fills them: the run's start in local time with its offset, the
    # machine that ran it (CI pages sort and group by them; empty, they showed no time)
    started = s.get("started") or time.time()
    suite = ET.Element("testsuite", name="gradspec fuzz", hostname=platform.node(),
                       timestamp=datetime.datetime.fromtimestamp(started).astimezone().isoformat(timespec="seconds"))
    props = ET.SubElement(suite, "properties")
    for k in ("status", "reason", "engine", "seed", "cases", "run_id", "workers"):
        if s.get(k) is not None:
            ET.SubElement(props, "property", name=k, value=str(s[k]))

    tc = _case(suite, "gradspec.run", "verdict", float(s.get("seconds") or 0.0))
    if status == "disagree":
        _fail(tc, f"{len(reports)} finding(s)", "\n".join(_cause(r) for r in reports))
    elif status == "inconclusive":
        # an error of its own type (exit 3, 130/143/129): the run gave no verdict.  A skip (what it was) shows yellow
        # or green on a CI that reads only JUnit (Jenkins, GitLab test reports), where the exit code fails the job
        ET.SubElement(tc, "error", type="gradspec.inconclusive", message=f"inconclusive: {reason}"[:1000])
    errors = list(s.get("errors") or []) + [f"a worker died: {c}" for c in (s.get("crashed") or []) if isinstance(c, str)]
    if errors:
        tc = _case(suite, "gradspec.run", "problems")
        _fail(tc, errors[0], "\n".join(map(str, errors)), tag="error")

    for rec in reports:
        tc = _case(suite, "gradspec.findings", rec["id"])
        text = "\n".join([_cause(rec), (rec.get("message") or ""), "", "replay: " + _replay(rec, report_dir, s.get("engine")),
                          "report: " + os.path.join(report_dir, rec["id"], "index.html")])
        _fail(tc, _cause(rec), text)

    for pair, n in sorted((s.get("oracles") or {}).items()):
        tc = _case(suite, "gradspec.oracles", pair)
        agreed = (s.get("agreement") or {}).get(pair, n)
        blamed = [r for r in reports if " vs ".join(r.get("oracles") or []) == pair
                  or " vs ".join(reversed(r.get("oracles") or [])) == pair]
        if blamed or agreed < n:
            # cases where an oracle raised (or hung, or died) are no comparisons: counted apart (tryout8 F9: "0 of
            # 211816 comparisons disagreed" on a pair failed by 1201 raising cases)
            raised = sum(int(r.get("cases") or 1) for r in blamed if r.get("kind") in _NOT_COMPARED)
            _fail(tc, f"{raised} cases raised, {n - agreed} of {n} compared disagreed" if raised else
                  f"{n - agreed} of {n} comparisons disagreed", "\n".join(_cause(r) for r in blamed))

    for op, n in sorted((s.get("ops") or {}).items()):
        tc = _case(suite, "gradspec.ops", op)
        blamed = [r for r in reports if op in (r.get("ops") or []) or (r.get("cause") or {}).get("op") == op]
        if not n:
            ET.SubElement(tc, "skipped", message="no generated case used this op")
        elif any((r.get("cause") or {}).get("op") == op for r in blamed) or \
                (blamed and not any((r.get("cause") or {}).get("op") for r in blamed)):
            _fail(tc, f"{len(blamed)} finding(s) involve {op}", "\n".join(_cause(r) for r in blamed))

    for rule, outcome in sorted((s.get("rules") or {}).items()):
        tc = _case(suite, "gradspec.rules", rule)
        text = _rule_text(outcome)
        if text.startswith("failed"):
            _fail(tc, f"backward() rule {rule} failed", text)
        elif text.startswith("skipped"):
            ET.SubElement(tc, "skipped", message=text)

    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(c.find("failure") is not None for c in cases)))
    suite.set("errors", str(sum(c.find("error") is not None for c in cases)))
    suite.set("skipped", str(sum(c.find("skipped") is not None for c in cases)))
    suite.set("time", f"{float(s.get('seconds') or 0.0):.3f}")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    from ._private.inert import printable

    # a control character from a record (a planted folder name) is not even valid XML 1.0: a CI that could not
    # parse the file showed nothing of the run; shown escaped instead, as on the terminal
    return printable(ET.tostring(root, encoding="unicode", xml_declaration=True), keep="\n\t") + "\n"


def _rule_text(outcome) -> str:
    """``passed`` / ``failed: cause, ...`` / ``skipped: why`` from a rule outcome (a string, or the dict
    ``{"status", "causes", "reason"}`` that gradspec.fuzz.rules writes)."""
    from .semantics import rule_text

    return rule_text(outcome)


_ID = re.compile(r"d-[0-9a-f]{10}")  # the folder names gradspec writes (records.discrepancy_id)


def _md(text) -> str:
    """Plain text for a Markdown table cell: no markup, no HTML, no line breaks from user strings."""
    text = " ".join(str(text).split())
    for ch in "\\`*_{}[]<>|#!":
        text = text.replace(ch, "\\" + ch)
    return text


def summary_markdown(s: dict, report_dir: str = "reports", link_base: str | None = None) -> str:
    """Markdown for a CI job summary page: the verdict, counts, each finding's cause and a link to its report.

    Links are relative to ``link_base`` (default: the report dir as given), so they work where the
    report folder is published next to the summary (e.g. an uploaded artifact).
    """
    status, reason = run_status(s)
    base = report_dir if link_base is None else link_base
    reports = list(s.get("reports") or [])
    out = [f"## gradspec fuzz: {status}", ""]
    if reason:
        out += [f"**Inconclusive:** {_md(reason)}", ""]
    out += ["| cases | findings | seconds | engine | seed |", "| ---: | ---: | ---: | --- | --- |",
            f"| {s.get('cases', 0)} | {len(reports)} | {s.get('seconds', 0)} | {_md(s.get('engine', ''))} "
            f"| {s.get('seed', '')} |", ""]
    if reports:
        out += ["| finding | cause | ops | report |", "| --- | --- | --- | --- |"]
        for r in reports:
            # r['id'] is a folder name read from the report dir: a backtick in it closed the code span
            # and put a link and raw HTML into the summary (redteam #9), so it is code only when it is an id
            # gradspec makes, and the link target is percent-encoded (no ')', '<', space or '`' left).
            rid = str(r.get("id", ""))
            shown = f"`{rid}`" if _ID.fullmatch(rid) else _md(rid)
            link = quote(f"{base.rstrip('/')}/{rid}/index.html", safe="/-._~")
            out.append(f"| {shown} | {_md(_cause(r))} | {_md(', '.join(r.get('ops') or []))} | [report]({link}) |")
        from .caseio import allow_flags, saved_user_ops

        user_ops: dict = {}  # the modules the findings' user ops live in: the line runs as shown (chaos M1)
        for r in reports:
            user_ops.update(saved_user_ops(os.path.join(report_dir, str(r.get("id", "")), "case.json")))
        flags = allow_flags(s.get("engine"), user_ops)
        out += ["", "Replay a finding: `gradspec replay " + f"{base.rstrip('/')}/<id>/case.json{flags}`", ""]
    pairs = s.get("oracles") or {}
    if pairs:
        out += ["| oracle pair | agreed / compared |", "| --- | ---: |"]
        out += [f"| {_md(p)} | {(s.get('agreement') or {}).get(p, n)} / {n} |" for p, n in sorted(pairs.items())]
        out.append("")
    rules = s.get("rules") or {}
    if rules:
        out += ["| backward() rule | outcome |", "| --- | --- |"]
        out += [f"| {_md(name)} | {_md(_rule_text(outcome))} |" for name, outcome in sorted(rules.items())]
        out.append("")
    from .report import drawing_cut_lines, not_counted_lines, untested_ops

    untested = untested_ops(s)
    if untested:
        out += [f"**Warning:** {_md(untested)}", ""]
    counted = not_counted_lines(s)  # (as verify_* and the terminal say it)
    if counted:
        out += [f"- {_md(line)}" for line in counted] + [""]
    skipped = s.get("skipped") or {}
    if skipped:
        out += ["Skipped oracle runs (why: count):", ""]
        from ._private.skips import group

        out += [f"- {_md(k)}: {v}" + (f" (e.g. {_md(ex)})" if ex else "") for k, v, ex in group(skipped)[:20]] + [""]
    for e in list(s.get("errors") or [])[:10]:
        out.append(f"- problem: {_md(e)}")
    out += [f"- {_md(line)}" for line in drawing_cut_lines(s.get("drawing_cuts") or []) + list(s.get("draws_skipped") or [])]
    return "\n".join(out).rstrip() + "\n"


def _write(path: str, text: str) -> str:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:  # (a full disk, a folder at ``path``: no stray .tmp-PID file beside it)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def write_junit(path: str, s: dict, report_dir: str = "reports") -> str:
    return _write(path, junit_xml(s, report_dir))


def write_summary_md(path: str, s: dict, report_dir: str = "reports") -> str:
    # Links relative to where the Markdown file lives, so the pair (file, report dir) can move together.
    base = os.path.relpath(os.path.abspath(report_dir), os.path.dirname(os.path.abspath(path)))
    return _write(path, summary_markdown(s, report_dir, link_base=base))
