"""Writing a ``verify_*`` :class:`gradspec.result.Result` as HTML (the report layer).

Importing this module installs :func:`write_result_html` as ``Result.write_html``'s writer.

Example::

    >>> import tempfile, os, gradspec as gs
    >>> cube = gs.Op("cube_html", forward=lambda x: x ** 3, vjp=lambda g, x, out: (3 * x ** 2 * g,))
    >>> path = gs.verify_op(cube, max_examples=3, seed=0).write_html(tempfile.mkdtemp())
    >>> os.path.basename(path)
    'index.html'
"""

from __future__ import annotations

import hashlib
import html as _html
import json
import os

from . import outcome as _outcome
from . import report, report_cause
from ._private.records import atomic_write, make_record_folder
from .result import VerifyDiscrepancy, set_html_writer

__all__ = ["write_result_html"]


def write_result_html(self, directory: str) -> str:
    """``Result.write_html``: the run's index.html, summary.json and one folder per discrepancy."""
    os.makedirs(directory, exist_ok=True)
    items = []
    for d in self.discrepancies:
        if d.case is not None:
            try:
                folder = report.write_discrepancy_report(directory, d, d.verdict,
                                                         info={"run": self.what, "target": self.target})
            except Exception as e:  # noqa: BLE001 - fall back to a plain page rather than no page
                folder = _write_plain_page(directory, d, f"(the full report failed: {type(e).__name__}: {e})")
            _append_html(os.path.join(folder, "index.html"), _replay_html(d))
            ops = ", ".join(sorted({n.op for n in d.case.nodes}))
        else:
            folder = _write_plain_page(directory, d, run=report_cause.run_title({"run": self.what, "target": self.target}))
            ops = d.check_name or ""
        items.append({"id": os.path.basename(folder), "kind": d.kind, "oracles": " vs ".join(d.oracles),
                      "ops": ops, "message": d.message, "cause": d.cause.summary if d.cause is not None else ""})
    s = self.to_json()
    summary = {
        "run": self.what,  # "op" | "torch function" | "engine": what the page is about
        "target": self.target,
        "engine": self.target if self.what == "engine" else "reference",
        "cases": self.cases_run,
        "seconds": self.seconds,
        "seed": self.seed,
        "discrepancies": len(self.discrepancies),
        "interrupted": False,
        "oracles": s["oracles"],
        "agreement": s["agreement"],
        "ops": s["ops"],
        "skipped": s["skipped"],
        "status": s["status"],
        "reason": s["reason"],
        "inconclusive": sum(self.inconclusive.values()),
        "inconclusive_reasons": s["inconclusive"],
        "not_counted": {why: k for why, k in self.inconclusive.items() if why in _outcome.UNCOUNTED},
    }
    index = report.write_run_report(directory, summary, items,
                                    title=report_cause.run_title({"run": self.what, "target": self.target}))
    extra = [f"<h2>gradspec verify {_html.escape(self.what)} <code>{_html.escape(self.target)}</code>: "
             f"{ {'agree': 'OK', 'disagree': 'FAILED'}.get(self.status, 'INCONCLUSIVE')}</h2>"]
    if self.checks:
        extra.append("<h2>backward() rules</h2><table><tr><th class='l'>rule</th><th class='l'>outcome</th></tr>")
        for k, v in self.checks.items():
            cls = "ok" if v == "passed" else "bad" if v == "failed" else ""
            extra.append(f"<tr><td class='l'>{_html.escape(k)}</td><td class='l {cls}'>{_html.escape(v)}</td></tr>")
        extra.append("</table>")
    if self.notes:
        extra.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_html.escape(n)}</li>" for n in self.notes) + "</ul>")
    if self.replay:
        extra.append(f"<h2>Replay</h2><pre>{_html.escape(self.replay)}</pre>")
    _append_html(index, "\n".join(extra))
    atomic_write(os.path.join(directory, "summary.json"), json.dumps(s, indent=2, default=str))
    return index


def _headline_html(head: dict | None) -> str:
    """The cause block of a page without a case (an engine's backward() rule): every string escaped."""
    if not head:
        return ""
    e = _html.escape
    parts = [f"<div id='headline' class='headline'><div class='htitle'>{e(head['title'])}</div>",
             f"<p id='cause-summary'>{e(head['summary'])}</p>"]
    if head["fix"]:
        parts.append(f"<p id='cause-fix'><b>Fix:</b> {e(head['fix'])}</p>")
    if head["evidence"]:
        parts.append(f"<details><summary>The numbers that decided it</summary><pre class='wrap small'>"
                     f"{e(head['evidence'])}</pre></details>")
    parts.append(f"<p class='small'>cause <code>{e(head['id'])}</code>: {e(head['meaning'])} (CONTRACT §8)</p></div>")
    return "".join(parts)


def _append_html(path: str, fragment: str) -> None:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = text.replace("</body>", fragment + "\n</body>", 1) if "</body>" in text else text + fragment
    atomic_write(path, text)


def _replay_html(d: VerifyDiscrepancy) -> str:
    parts = []
    if d.snippet:
        parts.append(f"<h2>What happened</h2><pre>{_html.escape(d.snippet)}</pre>")
    if d.replay:
        parts.append(f"<h2>Replay</h2><pre>{_html.escape(d.replay)}</pre>")
    return "\n".join(parts)


def _write_plain_page(directory: str, d: VerifyDiscrepancy, extra: str = "", run: str = "gradspec") -> str:
    did = "d-" + hashlib.sha1(repr((d.kind, d.check_name, d.message)).encode()).hexdigest()[:10]
    folder = make_record_folder(directory, did)  # (a link planted at the predictable id is never written through)
    head = report_cause.headline(d.cause)
    body = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_html.escape(run)} — "
        f"{_html.escape(head['title'] if head else d.kind)}</title><style>{report._CSS}</style></head><body>"
        "<p><a href='../index.html'>&larr; run summary</a></p>"
        f"<p id='run-title' class='small'><b>{_html.escape(run)}</b></p>"
        f"<h1>{_html.escape(d.kind)}{' (' + _html.escape(d.check_name) + ')' if d.check_name else ''}</h1>"
        f"{_headline_html(head)}"
        f"<pre id='message' class='wrap'>{_html.escape(d.message)}</pre>{_html.escape(extra)}{_replay_html(d)}</body></html>"
    )
    atomic_write(os.path.join(folder, "index.html"), body)
    return folder


set_html_writer(write_result_html)
