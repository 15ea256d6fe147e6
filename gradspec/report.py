"""HTML reports of fuzz campaigns and failing gradient checks (Jinja2 with autoescaping).

Pages are self-contained: inline CSS and inline SVG, no script, no network.  Nothing that comes
from a case (op names, values, exception text) can inject markup: every template variable is
escaped, and the SVG is built with escaped text.

Layout of a report dir::

    DIR/index.html            the run: configuration, cases, coverage per op, agreement per oracle pair,
                              every discrepancy (this run's and earlier runs')
    DIR/summary.json          the same numbers for machines (written by gradspec.fuzz)
    DIR/<id>/index.html       one discrepancy: graph, inputs, seeds, gradients side by side with an error
                              heatmap, the worst elements, the tolerance and its derivation, J and J^T.seed
    DIR/<id>/case.json        the exact case (``gradspec replay DIR/<id>/case.json``)
    DIR/<id>/repro.py         a standalone torch script that shows the disagreement
    DIR/<id>/discrepancy.json the discrepancy record (what the run index is built from)

Concurrency: every file is written atomically (temp file + rename), and a discrepancy folder is
written whole in a staging folder and renamed into place, so concurrent workers never leave a
half-written or mixed folder.  Within one run the first writer of a signature wins; a folder left
by an earlier run is replaced by the newer one (keeping when it was first found).
"""

# ruff: noqa: E501  (the HTML templates below are data: their lines stay whole)
from __future__ import annotations

import errno
import json
import math
import os
import shutil
import sys
import time
import uuid

import numpy as np

from . import report_cause as _cause
from ._private import skips as _skips
from ._private.records import RECORD, _jdefault, atomic_write, discrepancy_id, make_record_folder, read_record, read_records, update_record
from ._private.safefs import gradspec_dir, real_dir
from ._private.version import __version__
from .caseio import allow_flags
from .guard import case_listing
from .report_repro import repro_script
from .report_views import _grads_view, _jacobian_view, _text_array, _tol_parts, graph_svg

__all__ = [
    "write_run_report",
    "not_counted_lines",
    "untested_ops",
    "drawing_cut_lines",
    "write_discrepancy_report",
    "discrepancy_id",
    "atomic_write",
    "repro_script",
    "graph_svg",
    "read_records",
    "update_record",
    "RECORD",
    "campaign_writer",
]

_STATE = ".gradspec"

_CSS = """
:root{--bad:#fbd5d5;--ok:#d8f3dc;--mut:#666}
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:1.5em auto;max-width:1250px;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.45em;margin-bottom:.3em}h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}
h3{font-size:1em;margin:1.2em 0 .3em}
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #d0d0d0;padding:2px 7px;text-align:right;font-variant-numeric:tabular-nums;vertical-align:top}
th{background:#f3f3f3}td.l,th.l{text-align:left}td.id{white-space:nowrap}tr.bad td{background:var(--bad)}td.bad,b.bad{background:var(--bad)}td.ok,b.ok{background:var(--ok)}
pre.wrap{white-space:pre-wrap;word-break:break-word}details{margin:.5em 0}summary{cursor:pointer;color:#357}
pre{background:#f6f6f6;padding:.7em;overflow:auto;max-height:34em;font-size:.88em}code{background:#f0f0f0;padding:0 3px}
.small{color:var(--mut);font-size:.88em}.grid{display:flex;flex-wrap:wrap;gap:1.2em;align-items:flex-start}
.card{border:1px solid #ddd;border-radius:6px;padding:.5em .9em;background:#fcfcfc}
.bar{display:inline-block;height:.8em;background:#7aa6e0;vertical-align:middle}.bar.z{background:#e05050;width:3px}
.kind{display:inline-block;padding:0 .4em;border-radius:4px;background:#eee;font-size:.9em}
.status-fixed{color:#1b7f3b}.status-present{color:#b00020}
.headline{border:2px solid #c03030;border-radius:8px;background:#fff4f2;padding:.6em 1em;margin:.8em 0}.htitle{font-size:1.2em;font-weight:600;color:#a01818}
.headline p{margin:.35em 0}.yours{display:inline-block;background:#ffe08a;border-radius:3px;padding:0 .3em;font-size:.8em;font-weight:600}
"""

_env = None


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.8g}"
    return str(v)


def _jinja():
    global _env
    if _env is None:
        import jinja2

        _env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                                  lstrip_blocks=True)
        _env.filters["num"] = _fmt
        _env.filters["untol"] = _cause.strip_tolerance
    return _env


_TEMPLATES: dict = {}


def _template(source: str):
    """The compiled template of ``source``, once per process: compiling the run index and the finding
    page cost ~13 and ~17 ms each time (jinja2 parses and generates Python code), 6% of a 400-case
    campaign's CPU when it was done on every write (benchmarks/README.md, "Fuzz throughput, fourth
    pass")."""
    t = _TEMPLATES.get(source)
    if t is None:
        t = _TEMPLATES[source] = _jinja().from_string(source)
    return t


# ---------------------------------------------------------------------------------------------
# files (the record store is gradspec._private.records; re-exported here)
# ---------------------------------------------------------------------------------------------


def _swap_in(staging: str, folder: str, rec: dict, trash_root: str) -> bool:
    """Move the staged folder into place; returns False if a writer of the same run got there first."""
    for _ in range(50):
        try:
            os.rename(staging, folder)
            return True
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                raise
        if os.path.lexists(folder) and not real_dir(folder):  # a link (or file) planted at the predictable id
            make_record_folder(os.path.dirname(folder), os.path.basename(folder))  # removes it (never its target)
        try:
            old = read_record(os.path.dirname(folder), os.path.basename(folder))
        except (OSError, ValueError, RecursionError):
            old = {}
        if old.get("run_id") and old.get("run_id") == rec.get("run_id"):
            shutil.rmtree(staging, ignore_errors=True)
            return False
        if old.get("first_found"):
            # Keep when the discrepancy was first seen across runs.
            rec["first_found"] = min(old["first_found"], rec.get("first_found") or old["first_found"])
            atomic_write(os.path.join(staging, RECORD), json.dumps(rec, indent=1, default=_jdefault))
        gradspec_dir(os.path.dirname(trash_root), os.path.basename(trash_root))  # (never a symlink)
        trash = os.path.join(trash_root, os.path.basename(folder) + "-" + uuid.uuid4().hex[:8])
        try:
            os.rename(folder, trash)
        except FileNotFoundError:
            continue
        shutil.rmtree(trash, ignore_errors=True)
    raise OSError(errno.EBUSY, f"could not move the report into {folder} (too many concurrent writers)")


# ---------------------------------------------------------------------------------------------
# the run index
# ---------------------------------------------------------------------------------------------

_INDEX = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>gradspec {% if s.source == "tests" %}{{ title }}{% else %}report: {{ headline }}{% endif %}</title>
<style>{{ css }}</style></head><body>
<h1>gradspec {{ title }}</h1>
{% if s.source == "tests" %}<p>{{ this_run|length }} failing gradient check{{ '' if this_run|length == 1 else 's' }} in this test session (session {{ s.run_id }}){% if s.tests %}, in {{ s.tests|join(', ') }}{% endif %}.
Only a failing check writes a report: the checks that passed are not listed here (pytest's own summary counts them).</p>{% else %}
<p>{{ s.cases }} cases{% if s.seconds %} in {{ '%.1f'|format(s.seconds) }} s ({{ s.cases_per_second }} cases/s){% endif %} {{ under.how }} <code>{{ under.name }}</code>{{ under.what }}.
<b class="{{ 'ok' if not this_run else 'bad' }}">{{ this_run|length }} discrepanc{{ 'y' if this_run|length == 1 else 'ies' }}</b>
{% if s.interrupted %}<b class="bad">interrupted</b> (results of what ran){% endif %}
{% if s.stop_reason %}<span class="small">stopped: {{ s.stop_reason }}</span>{% endif %}</p>{% endif %}
{% if s.get("state") == "running" %}<div class="card" id="running"><b class="bad">RUNNING</b>: {{ s.reason }}</div>{% endif %}
{% if s.get("last_run") %}<div class="card" id="last-run"><b class="bad">The previous run did not finish</b>: {{ s.last_run.message }}</div>{% endif %}
{% if s.status == "inconclusive" %}<div class="card"><b class="bad">INCONCLUSIVE</b> (exit 3): {{ s.reason }}</div>{% endif %}
{% if untested %}<div class="card" id="untested"><b class="bad">WARNING: {{ untested }}</b></div>{% endif %}
{% if cuts %}<div class="card" id="drawing-cuts"><b>User ops cut while cases were drawn</b> (those draws took the node as planned, with placeholder values; a forward that hangs for good is a timeout finding of its case)<ul>{% for c in cuts %}<li>{{ c }}</li>{% endfor %}</ul></div>{% endif %}
{% if s.errors %}<div class="card"><b>Problems during the run</b><ul>{% for e in s.errors %}<li>{{ e }}</li>{% endfor %}</ul></div>{% endif %}

<h2>Discrepancies</h2>
{% if this_run %}<table><tr><th class="l">report</th><th class="l">kind</th><th class="l">oracles</th><th class="l">ops</th><th class="l">message</th></tr>
{% for r in this_run %}<tr class="bad"><td class="l id"><a href="{{ r.id }}/index.html">{{ r.id }}</a></td><td class="l">{{ r.kind }}</td><td class="l">{{ r.oracles|join(' vs ') }}</td><td class="l">{{ r.ops|join(', ') }}</td><td class="l">{% if r.cause %}<b class="cause">{{ r.cause|truncate(300) }}</b><br>{% endif %}{{ r.message|untol|truncate(220) }}{% if r.note %} <span class="small">({{ r.note }})</span>{% endif %}</td></tr>
{% endfor %}</table>{% else %}<p>None in this run.</p>{% endif %}
{% if superseded %}<h3>Superseded</h3><p class="small">The same disagreement (kind and oracle pair) on a case with more ops than the one listed above; kept for reference.</p>
<table><tr><th class="l">report</th><th class="l">kind</th><th class="l">oracles</th><th class="l">ops</th><th class="l">superseded by</th></tr>
{% for r in superseded %}<tr><td class="l id"><a href="{{ r.id }}/index.html">{{ r.id }}</a></td><td class="l">{{ r.kind }}</td><td class="l">{{ r.oracles|join(' vs ') }}</td><td class="l">{{ r.ops|join(', ') }}</td><td class="l"><a href="{{ r.superseded_by }}/index.html">{{ r.superseded_by }}</a></td></tr>
{% endfor %}</table>{% endif %}
{% if earlier %}<h3>From earlier runs in this folder</h3>
<table><tr><th class="l">report</th><th class="l">status</th><th class="l">kind</th><th class="l">oracles</th><th class="l">ops</th><th class="l">engine</th><th class="l">first found</th></tr>
{% for r in earlier %}<tr><td class="l id"><a href="{{ r.id }}/index.html">{{ r.id }}</a></td><td class="l {{ 'status-fixed' if r.status == 'no longer reproduces' else 'status-present' if r.status == 'still present' else '' }}">{{ r.status }}</td><td class="l">{{ r.kind }}</td><td class="l">{{ r.oracles|join(' vs ') }}</td><td class="l">{{ r.ops|join(', ') }}</td><td class="l">{{ r.engine }}</td><td class="l">{{ r.when }}</td></tr>
{% endfor %}</table>{% endif %}

<h2>Run configuration</h2>
<table>{% for k, v in config %}<tr><th class="l">{{ k }}</th><td class="l">{{ v }}</td></tr>{% endfor %}</table>

{% if s.source != "tests" %}<div class="grid"><div>
<h2>Agreement per oracle pair</h2>
{% if pairs %}<table><tr><th class="l">pair</th><th>comparisons</th><th>agreed</th><th>disagreed</th><th class="l"></th></tr>
{% for p in pairs %}<tr><td class="l">{{ p.label }}</td><td>{{ p.n }}</td><td class="{{ 'ok' if p.bad == 0 else '' }}">{{ p.ok }}</td><td class="{{ 'bad' if p.bad else '' }}">{{ p.bad }}</td><td class="l" title="{{ p.ok }} agreed, {{ p.bad }} disagreed"><span class="bar" style="width:{{ p.wok }}px;background:#5cb85c"></span><span class="bar" style="width:{{ p.wbad }}px;background:#d9534f"></span></td></tr>
{% endfor %}</table>{% if mine %}<p class="small">your code: the oracle runs {{ mine }}.</p>{% endif %}{% else %}<p>No comparisons.</p>{% endif %}
{% if skipped %}<h3>Oracles not used, and why</h3><table><tr><th class="l">reason</th><th>cases</th><th class="l">example</th></tr>
{% for why, n, ex in skipped %}<tr><td class="l">{{ why }}</td><td>{{ n }}</td><td class="l">{{ ex }}</td></tr>{% endfor %}</table>{% endif %}
{% if not_counted %}<h3>Cases not counted, and why</h3><ul>{% for line in not_counted %}<li>{{ line }}</li>{% endfor %}</ul>{% endif %}
{% if inconclusive %}<h3>Cases that compared nothing ({{ s.inconclusive - (s.get("not_counted") or {}).values()|sum }}), and why</h3><table><tr><th class="l">reason</th><th>cases</th><th class="l">example</th></tr>
{% for why, n, ex in inconclusive %}<tr><td class="l">{{ why }}</td><td>{{ n }}</td><td class="l">{{ ex }}</td></tr>{% endfor %}</table>{% endif %}
</div><div>
<h2>Coverage per op</h2>
<p class="small">{{ covered }} of {{ ops|length }} ops {% if s.get("ops_drawn") %}counted in at least one case (their gradient exercised); red: never counted{% else %}appeared in at least one case; red: never generated{% endif %}.</p>
<table><tr><th class="l">op</th><th>cases</th><th class="l"></th></tr>
{% for o in ops %}<tr><td class="l">{{ o.name }}</td><td class="{{ 'bad' if o.n == 0 else '' }}">{{ o.n }}</td><td class="l">{% if o.n %}<span class="bar" style="width:{{ o.w }}px"></span>{% else %}<span class="bar z"></span>{% endif %}</td></tr>
{% endfor %}</table>
</div></div>{% endif %}
<p class="small">Generated by gradspec {{ version }} at {{ now }}. Machine-readable: {% if s.source == "tests" %}each finding's discrepancy.json (in its folder){% else %}<a href="summary.json">summary.json</a>{% endif %}.</p>
</body></html>"""


def write_run_report(directory: str, summary: dict, discrepancies=None, title: str | None = None) -> str:
    """Write ``directory/index.html`` from a run summary and every discrepancy folder in ``directory``.

    Folders written by earlier runs (or other sessions) are listed too, with their status.
    ``discrepancies``: extra items of this run (dicts with ``id``, ``kind``, ``oracles``, ``ops``,
    ``message``), for pages written without a discrepancy record.
    """
    s = dict(summary)
    s.setdefault("cases", 0)
    s.setdefault("seconds", 0.0)
    s.setdefault("cases_per_second", round(s["cases"] / max(s["seconds"] or 0, 1e-9), 2) if s["seconds"] else 0)
    s.setdefault("engine", "reference")
    s.setdefault("interrupted", False)
    s.setdefault("stop_reason", "")
    s.setdefault("errors", [])
    s.setdefault("source", "fuzz")
    for k, v in (("status", ""), ("reason", ""), ("inconclusive", 0), ("inconclusive_reasons", {})):
        s.setdefault(k, v)  # (summaries of older versions lack them)
    s.setdefault("run_id", None)
    run_id = s.get("run_id")
    status = {p["id"]: p["status"] for p in s.get("previous", []) or []}
    reported = list(s.get("reports", []) or [])
    # Older callers pass this run's items as ``discrepancies`` (dicts with at least an "id").
    reported += [dict(it) for it in discrepancies or [] if isinstance(it, dict) and it.get("id")]
    this_ids = {r["id"] for r in reported}
    gone = {r["id"]: r for r in s.get("superseded", []) or []}
    records = read_records(directory)
    by_id = {r["id"]: r for r in records}
    this_run, earlier = [], []
    superseded = [_norm_record({**(by_id.get(rid) or {}), **r}) for rid, r in sorted(gone.items())]
    for rid in sorted(this_ids):
        r = dict(by_id.get(rid) or next(x for x in reported if x["id"] == rid))
        r.setdefault("note", "")
        this_run.append(_norm_record(r))
    for r in records:
        if r["id"] in gone:
            continue
        if r["id"] in this_ids or (run_id and r.get("run_id") == run_id):
            if r["id"] not in this_ids:
                this_run.append(_norm_record(r))
            continue
        r = _norm_record(dict(r))
        r["status"] = status.get(r["id"]) or r.get("status") or "from an earlier run"
        earlier.append(r)
    pairs = []
    oracles = s.get("oracles", {}) or {}
    under, mine, mine_text = _under_test(s, oracles)
    agreement = s.get("agreement", {}) or {}
    top = max(oracles.values(), default=1) or 1
    for name, n in oracles.items():
        ok = int(agreement.get(name, n))
        w = 160 * n / top
        label = " vs ".join(o + (" (your code)" if o in mine else "") for o in name.split(" vs "))
        pairs.append({"name": name, "label": label, "n": n, "ok": ok, "bad": n - ok, "wok": int(w * ok / max(n, 1)),
                      "wbad": int(round(w * (n - ok) / max(n, 1)))})
    opc = s.get("ops", {}) or {}
    otop = max(opc.values(), default=1) or 1
    ops = [{"name": k, "n": v, "w": max(2, int(160 * v / otop))} for k, v in sorted(opc.items())]
    cfg = s.get("config") or {"engine": s["engine"], "seed": s.get("seed")}
    html = _template(_INDEX).render(
        css=_CSS,
        title=title or f"fuzz: engine {s['engine']}",
        headline=(f"{len(this_run)} discrepanc{'y' if len(this_run) == 1 else 'ies'}" if this_run
                  else "inconclusive" if s.get("status") == "inconclusive" else "no discrepancy"),
        under=under,
        mine=mine_text,
        s=s,
        this_run=this_run,
        superseded=superseded,
        earlier=earlier,
        config=list(cfg.items()),
        pairs=pairs,
        skipped=_skips.group(s.get("skipped") or {})[:30],  # one row per kind, with an example node
        not_counted=not_counted_lines(s),
        inconclusive=_skips.group({w: k for w, k in (s.get("inconclusive_reasons") or {}).items()
                                   if w not in (s.get("not_counted") or {})}),
        ops=ops,
        covered=sum(1 for o in ops if o["n"]),
        untested=untested_ops(s),
        cuts=drawing_cut_lines(s.get("drawing_cuts") or []),
        version=__version__,
        now=time.strftime("%Y-%m-%d %H:%M:%S"),
    )
    path = os.path.join(directory, "index.html")
    atomic_write(path, html)
    return path


def _under_test(s: dict, oracles: dict) -> tuple[dict, set, str]:
    """What a run page checked ({"how", "name", "what"} for "N cases <how> <name><what>"), the oracles
    that run the user's own backward (their columns say "your code") and what that means, in words."""
    from . import oracles as _oracles

    run, target = s.get("run"), s.get("target") or s.get("engine")
    names = {o for pair in oracles for o in pair.split(" vs ")}
    builtin = set(_oracles.names())
    if run == "torch function":
        return ({"how": "of torch function", "name": target, "what": " (its backward)"},
                {n for n in names if n == "reference" or n.startswith("torch")},
                "the Function's backward (reference: inside gradspec's engine; torch: inside torch graphs)")
    if run == "op":
        return ({"how": "of user op", "name": target, "what": " (its vjp)"}, {"reference"} & names,
                "the op's vjp (reference: gradspec's engine)")
    engines = {n for n in names if n not in builtin}  # an engine under test (fuzz --engine, verify_engine)
    return ({"how": "against engine", "name": target, "what": ""}, engines,
            "the engine's backward" if engines else "")


def drawing_cut_lines(cuts: list) -> list[str]:
    """One line per user op whose forward was cut while cases were drawn (``summary.json["drawing_cuts"]``,
    review F6): the timeout, the input shapes, how many draws took a placeholder, whether it came back in time.

    >>> drawing_cut_lines([{"op": "f", "shapes": [[3]], "seconds": 1.0, "draws_cut": 2, "cleared": False}])
    ['user op f: forward slower than 1 s while drawing at shapes (3,); 2 draws cut']
    """
    by_op: dict = {}
    for c in cuts:
        by_op.setdefault(str(c.get("op")), []).append(c)
    lines = []
    for op, cs in sorted(by_op.items()):
        shapes = "; ".join(", ".join(str(tuple(s)) for s in c.get("shapes") or []) or "()" for c in cs[:6])
        shapes += f"; ... {len(cs) - 6} more" if len(cs) > 6 else ""
        k = sum(int(c.get("draws_cut") or 0) for c in cs)
        cleared = sum(bool(c.get("cleared")) for c in cs)
        how = (" (it later returned in time at those shapes: a stall, not a hang)" if cleared == len(cs)
               else f" (it later returned in time at {cleared} of those {len(cs)})" if cleared else "")
        lines.append(f"user op {op}: forward slower than {max(c.get('seconds') or 0 for c in cs):g} s while drawing "
                     f"at shapes {shapes}; {k} draw{'' if k == 1 else 's'} cut{how}")
    return lines


def not_counted_lines(s: dict) -> list[str]:
    """``K of N cases not counted: why`` per reason (a run summary's ``not_counted``), as verify_*'s
    ``Result.summary`` says it; then the ops no counted case exercised although cases held them.

    >>> not_counted_lines({"cases": 9, "not_counted": {"zeros": 2}, "ops": {"exp": 7, "sin": 0}, "ops_drawn": {"sin": 2}})
    ['2 of 9 cases not counted: zeros', 'generated but never counted (no case exercised their gradient): sin (2 cases)']
    """
    cases = int(s.get("cases") or 0)
    lines = [f"{k} of {cases} cases not counted: {why}" for why, k in (s.get("not_counted") or {}).items()]
    drawn = s.get("ops_drawn") or {}
    dead = [o for o, n in sorted((s.get("ops") or {}).items()) if not n and drawn.get(o)]
    if dead:
        lines.append("generated but never counted (no case exercised their gradient): "
                     + ", ".join(f"{o} ({drawn[o]} case{'s' if drawn[o] != 1 else ''})" for o in dead))
    return lines


def untested_ops(s: dict) -> str:
    """The warning for ops a run never generated (they are untested), with the fix; "" when every op
    ran, or when the ops are only companions of the code under test (verify_op, verify_torch_function).

    >>> untested_ops({"cases": 200, "seconds": 3.4, "ops": {"exp": 9, "index": 0, "mean": 0}})
    '2 of 3 ops were never generated, so they are untested: index, mean; run longer (--max-examples 800 or --seconds 14) or focus on them (--ops index,mean)'
    """
    ops = s.get("ops") or {}
    never = sorted(o for o, n in ops.items() if not n)
    if not never or s.get("run") in ("op", "torch function"):
        return ""
    drawn = s.get("ops_drawn") or {}
    dead = [o for o in never if drawn.get(o)]  # generated, but no counted case exercised the op's gradient
    cases, seconds = int(s.get("cases") or 0), float(s.get("seconds") or 0.0)
    more = max(4 * cases, 100)  # the uncovered share is gone with about 4x the budget in the default mix
    fix = (f"raise verify_engine's budget (max_examples={more} or seconds={max(10, math.ceil(4 * seconds))})"
           if s.get("run") == "engine" else
           f"run longer (--max-examples {more} or --seconds {max(10, math.ceil(4 * seconds))}) or focus on them "
           f"(--ops {','.join(never)})")
    return (f"{len(never)} of {len(ops)} ops were never {'counted' if dead else 'generated'}, so they are untested: "
            f"{', '.join(never)}; {fix}")


def _norm_record(r: dict) -> dict:
    r.setdefault("kind", "?")
    oracles, ops = r.get("oracles") or [], r.get("ops") or []
    r["oracles"] = oracles.split(" vs ") if isinstance(oracles, str) else list(oracles)
    r["ops"] = [o.strip() for o in ops.split(",") if o.strip()] if isinstance(ops, str) else list(ops)
    r.setdefault("message", "")
    r.setdefault("note", "")
    cause = r.get("cause") or (r.get("discrepancy") or {}).get("cause")
    r["cause"] = cause.get("summary", "") if isinstance(cause, dict) else str(cause or "")
    r.setdefault("engine", "reference")
    t = r.get("first_found") or r.get("found_at")
    r["when"] = time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else ""
    return r


# ---------------------------------------------------------------------------------------------
# one discrepancy
# ---------------------------------------------------------------------------------------------

_DISC = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{{ run_title }} — {{ head.title if head else d.kind }} ({{ id }})</title>
<style>{{ css }}</style></head><body>
<p class="small"><a href="../index.html">&larr; run summary</a></p>
<p id="run-title" class="small"><b>{{ run_title }}</b></p>
<h1>{{ id }}: <span class="kind">{{ d.kind }}</span> {{ d.oracles|join(' vs ') }} <span class="small">ops {{ ops|join(', ') }}</span></h1>
{% if head %}<div id="headline" class="headline"><div class="htitle">{{ head.title }}</div>
<p id="cause-summary">{{ head.summary }}</p>
{% if head.fix %}<p id="cause-fix"><b>Fix:</b> {{ head.fix }}</p>{% endif %}
{% if head.evidence %}<details><summary>The numbers that decided it</summary><pre class="wrap small">{{ head.evidence }}</pre></details>{% endif %}
<p class="small">cause <code>{{ head.id }}</code>{% if head.meaning %}: {{ head.meaning }}{% endif %}{% if head.pattern %}; pattern: {{ head.pattern }}{% endif %} (CONTRACT §8)</p></div>{% endif %}
<pre id="message" class="wrap">{{ message }}</pre>
{% if info.note %}<p class="small">{{ info.note }}</p>{% endif %}
<div class="card"><b>Reproduce</b>
<ul><li id="under-test">{{ repro.under_test }}</li>
<li>{{ repro.how }}: <pre id="replay-cmd" class="wrap small">{{ repro.replay }}</pre>{% if repro.note %}<span class="small">{{ repro.note }}</span>{% endif %}</li>
<li>standalone torch script: <code>python {{ repro_path }}</code> (<a href="repro.py">repro.py</a>) &middot; exact case: <a href="case.json">case.json</a></li>
<li class="small"><span id="written-at">Run these in this page's folder (the paths are relative to it, so a copied folder works the same); written at {{ written_at }}{% for m, root in roots_of %}; {{ m }} was imported from {{ root }} (where it is not importable, put that folder on PYTHONPATH){% endfor %}.</span></li>
{% if info.seed is not none or info.run_id or info.test %}<li>{% if info.seed is not none %}campaign seed {{ info.seed }}{% endif %}{% if info.shard is not none %}, shard {{ info.shard }}{% endif %}{% if info.run_id %}, run {{ info.run_id }}{% endif %}{% if info.test %}; test <code>{{ info.test }}</code>{% endif %}</li>{% endif %}</ul></div>

<h2>The graph</h2>
<div id="graph">{{ svg|safe }}</div>
<p class="small">Roots have an orange border and say <b>root</b>{% if head and head.title and d.cause and d.cause.node %}; the node the cause blames is red{% endif %}; blue leaves require grad.</p>
<h3>The shrunk case</h3>
<pre id="case-text">{{ case_text }}</pre>
{% if rule %}<p id="rule-note">A backward() rule finding: what is wrong is the sequence of calls under <i>The numbers that decided it</i> above (each call's gradients against torch's). One backward of this graph alone may agree, so the per-oracle gradient tables of a value finding are not shown.</p>{% endif %}

<h2>Inputs and seeds</h2>
<div class="grid">
{% for l in leaves_in %}<div class="card"><b>leaf <code>{{ l.name }}</code></b> <span class="small">{{ l.shape }} {{ l.dtype }} {{ 'requires_grad' if l.rg else 'constant' }}</span><pre>{{ l.text }}</pre></div>
{% endfor %}
{% for r in roots %}<div class="card"><b>seed of root <code>{{ r.name }}</code></b> <span class="small">{{ r.shape }}</span><pre>{{ r.text }}</pre></div>
{% endfor %}</div>

{% if grads %}<h2>Gradients per oracle</h2>
<p class="small">Columns in order: the two oracles that disagree ({{ pair|join(' and ') }}), then the others. |difference| is between the first two; the heatmap colours each element by |difference| relative to the largest one.</p>
<table id="gradients"><tr><th class="l">leaf[element]</th><th>input</th>{% for o in order %}<th>{{ o }}{% if o in mine %}<br><span class="yours">your code</span>{% endif %}</th>{% endfor %}<th>|difference|</th></tr>
{% for g in grads %}{% for row in g.rows %}<tr class="{{ 'bad' if row.bad else '' }}"><td class="l">{{ g.name }}[{{ row.index }}]</td><td>{{ row.x|num }}</td>{% for v in row.vals %}<td>{{ v|num }}</td>{% endfor %}<td style="background:{{ row.heat }}">{{ row.diff|num }}</td></tr>
{% endfor %}{% if g.more %}<tr><td class="l small" colspan="{{ order|length + 3 }}">&hellip; {{ g.more }} more elements of {{ g.name }}</td></tr>{% endif %}{% endfor %}
</table>
<h3>Error heatmaps</h3>
{% if ratios %}<p class="small">Each element coloured by |{{ pair|join(' \u2212 ') }}| / tolerance: white 0, green up to the tolerance (1), red above it and darker with every factor of 10 (the rounding-noise allowance of gs.check is left out here, so a ratio can be slightly higher than gs.check's).</p>
<div class="grid" id="ratio-maps">{% for g in ratios %}<div class="card"><b>{{ g.name }}</b> <span class="small">{{ g.shape }}: max |difference| / tolerance {{ g.max|num }}, {{ g.outside }} of {{ g.size }} element(s) above 1</span><br>{{ g.svg|safe }}</div>{% endfor %}</div>
{% else %}<div class="grid">{% for g in grads %}<div class="card"><b>{{ g.name }}</b> <span class="small">{{ g.shape }}: |{% for p in pair %}{{ p }}{{ ' \u2212 ' if not loop.last }}{% endfor %}|, max {{ g.maxdiff|num }}</span><br>{{ g.svg|safe }}</div>{% endfor %}</div>{% endif %}
{% endif %}
{% if worst %}<h2>The worst elements</h2>
<table id="worst"><tr><th class="l">leaf[element]</th><th>{{ pair[0] }}</th><th>{{ pair[1] }}</th><th>|difference|</th><th>relative</th></tr>
{% for w in worst %}<tr><td class="l">{{ w.label }}</td><td>{{ w.a|num }}</td><td>{{ w.b|num }}</td><td>{{ w.diff|num }}</td><td>{{ w.rel|num }}</td></tr>{% endfor %}</table>{% endif %}

{% if d.kind in ("value", "nan-inf-pattern", "none-vs-zeros", "shape") %}<h2>Tolerance</h2>
{% if tol %}<p>At {{ tol.label }}: |a &minus; b| = {{ tol.err|num }} against an allowance of <b>{{ tol.allowed|num }}</b>{% if d.tolerance is not none %} (gs.check: {{ d.tolerance|num }}){% endif %}.</p>
<table id="tolerance"><tr><th class="l">term</th><th>value</th><th class="l">why</th></tr>
{% for t in tol.terms %}<tr><td class="l">{{ t.name }}</td><td>{{ t.value|num }}</td><td class="l">{{ t.why }}</td></tr>{% endfor %}</table>{% endif %}
<p class="small">{{ d.tolerance_why or tol_formula }}</p>
<details><summary>How gradspec derives its tolerances</summary><pre class="small">{{ tol_doc }}</pre></details>{% endif %}

{% if jac %}<h2>The explicit Jacobian J and J<sup>T</sup>&middot;seed</h2>
<p class="small">J from the ops' forward-mode rules (the jacobian oracle); rows: root elements, columns: input elements. <code>backward(seed)</code> computes J<sup>T</sup>&middot;seed: each input element's gradient is its column dotted with the seed.</p>
<table id="jacobian"><tr><th class="l">row \\ column</th>{% for c in jac.cols %}<th class="{{ 'bad' if loop.index0 == jac.bad else '' }}">{{ c }}</th>{% endfor %}<th>seed</th></tr>
{% for r in jac.rows %}<tr><td class="l">{{ r.label }}</td>{% for v in r.vals %}<td>{{ v|num }}</td>{% endfor %}<td>{{ r.seed|num }}</td></tr>{% endfor %}
<tr><th class="l">J<sup>T</sup>&middot;seed</th>{% for v in jac.result %}<th>{{ v|num }}</th>{% endfor %}<th></th></tr></table>
{% if jac.worked %}<p>Worked out for {{ jac.worked.label }}: {{ jac.worked.expr }} = <b>{{ jac.worked.value|num }}</b>{% for o, v in jac.worked.claims %}; {{ o }} says {{ v|num }}{% endfor %}.</p>{% endif %}
{% endif %}

{% if all_d|length > 1 %}<h2>Every discrepancy of this case</h2><ul>{% for x in all_d %}<li><span class="kind">{{ x.kind }}</span> {{ x.oracles|join(' vs ') }}: <span class="small">{{ x.message|untol|truncate(400) }}</span></li>{% endfor %}</ul>{% endif %}
{% if skipped %}<h2>Oracles not used</h2><ul>{% for n, why in skipped %}<li><b>{{ n }}</b>: {{ why }}</li>{% endfor %}</ul>{% endif %}
{% for name, tb in tracebacks %}<h2>Traceback: {{ name }}</h2><pre>{{ tb }}</pre>{% endfor %}
<p class="small">gradspec {{ version }}, numpy {{ np_version }}, Python {{ py_version }}; written {{ now }}.</p>
</body></html>"""


def _case_for_file(case, engine: str | None):
    """A copy of ``case`` whose user ops are recorded by import path (inline ones listed as such)."""
    from .case import Case
    from .ops import _registry

    # (a copy of a case that exists already: nothing re-checked, so a report on any case gets written)
    c = Case._unchecked(list(case.leaves), list(case.nodes), list(case.roots), list(case.seeds), case.engine,
                        dict(case.user_ops), dict(case.meta))
    if engine:
        c.engine = engine
    inline, modules = [], []
    for op in sorted({n.op for n in c.nodes}):
        try:
            spec = _registry.lookup(op)
        except KeyError:
            continue
        if not getattr(spec, "user", False) or op in c.user_ops:
            continue
        path = getattr(spec, "import_path", None)
        if not path:
            from .ops.user import import_path_of

            path = import_path_of(spec)
        module = getattr(spec, "module_of", None)
        if module is not None:  # (gs.verify_module: no import path rebuilds an instance; the file says so)
            modules.append(op)
            inline.append(op)
        elif path:
            c.user_ops[op] = path
        else:
            inline.append(op)
    if inline:
        c.meta = dict(c.meta)
        c.meta["inline_ops"] = inline
    if modules:
        c.meta["module_ops"] = modules
    return c


def write_discrepancy_report(directory: str, d, verdict=None, info: dict | None = None) -> str:
    """Write ``directory/<id>/{index.html, case.json, repro.py, discrepancy.json}``; returns the folder.

    ``verdict`` is the :class:`gradspec.Verdict` of the case (recomputed when missing); ``info``
    carries the campaign's context (``run_id``, ``seed``, ``shard``, ``engine``, ``note``, ``covers``,
    ``test``) that goes into the page and the record.
    """
    from .check import check

    info = dict(info or {})
    case = d.case
    engine = info.get("engine") or getattr(case, "engine", None) or "reference"
    rid = discrepancy_id(d.signature, info.get("test"))
    directory = os.path.abspath(directory)
    folder = os.path.join(directory, rid)
    if verdict is None:
        try:
            verdict = check(case)
        except Exception:  # the report must still be written; the page says what is missing
            verdict = None
    saved = _case_for_file(case, engine)
    staging = gradspec_dir(directory, _STATE, "staging", f"{rid}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        atomic_write(os.path.join(staging, "case.json"), saved.to_json())
        atomic_write(os.path.join(staging, "repro.py"), repro_script(saved, d.oracles, verdict, d, rid))
        ops = sorted({n.op for n in case.nodes})
        now = time.time()
        rec = {
            "id": rid,
            "kind": d.kind,
            "oracles": list(d.oracles),
            "ops": ops,
            "signature": [d.signature[0], list(d.signature[1]), list(d.signature[2])],
            "message": d.message,
            "engine": engine,
            "run_id": info.get("run_id"),
            "shard": info.get("shard"),
            "seed": info.get("seed"),
            "note": info.get("note", ""),
            "test": info.get("test"),
            "covers": list(info.get("covers") or []),
            "found_at": info.get("found_at", now),
            "first_found": info.get("found_at", now),
            "status": "found",
            "discrepancy": d.to_json(),
        }
        atomic_write(os.path.join(staging, RECORD), json.dumps(rec, indent=1, default=_jdefault))
        grads, worst, order, pair = _grads_view(case, verdict, d)
        # A backward() rule finding is about its sequence of calls (the numbers that decided it, shown once, in
        # the cause): the per-oracle tables below describe one backward of the graph, which may well agree --
        # a new user read "myengine 16.808004 vs 16.808004" beside "engine 8.404, torch 16.808" as a contradiction.
        rule = bool((case.meta or {}).get("scenario_steps"))
        message = _cause.strip_tolerance(d.message)
        if rule:
            grads = worst = None
            message = message.split("\n\nthe calls:", 1)[0]
        try:
            case_text = case_listing(case)  # (its forward cut after the per-case timeout: it may be what hangs)
        except Exception as e:  # a case that cannot be evaluated (the very thing that failed)
            case_text = f"(cannot evaluate the case: {type(e).__name__}: {e})"
        leaves_in = [{"name": l.name, "shape": l.shape, "dtype": l.dtype, "rg": l.requires_grad,
                      "text": _text_array(l.value)} for l in case.leaves]
        try:
            root_shapes = case.shapes()
        except Exception:
            root_shapes = {}
        roots = [{"name": r, "shape": root_shapes.get(r, ""),
                  "text": "implicit: ones (numel 1), as backward() with no gradient" if s is None else _text_array(s)}
                 for r, s in zip(case.roots, case.seeds, strict=True)]
        tracebacks = []
        if d.traceback:
            tracebacks.append((" vs ".join(d.oracles), d.traceback))
        if verdict is not None:
            for name, (t, _m, tb) in (verdict.errors or {}).items():
                if tb and tb != d.traceback:
                    tracebacks.append((f"{name} ({t})", tb))
        from . import tolerances as _tol

        html = _template(_DISC).render(
            css=_CSS,
            id=rid,
            d=d,
            ops=ops,
            info={"note": info.get("note", ""), "seed": info.get("seed"), "shard": info.get("shard"),
                  "run_id": info.get("run_id"), "test": info.get("test")},
            engine=engine,
            # paths relative to the page's folder (tryout6 #11: a copied folder showed the writer's absolute paths)
            repro=_cause.reproduce(info, saved.engine, "case.json", saved.user_ops,
                                   (case.meta or {}).get("scenario"), getattr(d, "replay", None)),
            repro_path="repro.py" + allow_flags(saved.engine, saved.user_ops),
            written_at=folder,
            roots_of=_import_roots([saved.engine] + list((saved.user_ops or {}).values())),
            svg=graph_svg(case, getattr(d.cause, "node", None)),
            head=_cause.headline(d.cause),
            run_title=_cause.run_title(info, d),
            message=message,
            rule=rule,
            mine=_cause.your_code(case, order, getattr(verdict, "oracles", None)),
            ratios=[] if rule else _safe(_ratio_views, case, verdict, d) or [],
            case_text=case_text,
            leaves_in=leaves_in,
            roots=roots,
            grads=grads,
            worst=worst,
            order=order,
            pair=pair if len(pair) == 2 else list(d.oracles),
            tol=None if rule else _safe(_tol_parts, case, verdict, d),
            tol_formula="|a - b| <= rtol x scale + rounding noise allowance (+ FD error estimate for finite differences)",
            tol_doc=(_tol.__doc__ or "").strip(),
            jac=None if rule else _safe(_jacobian_view, verdict, d),
            all_d=(verdict.discrepancies if verdict is not None else [d]),
            skipped=list((verdict.skipped if verdict is not None else {}).items()),
            tracebacks=tracebacks,
            version=__version__,
            np_version=np.__version__,
            py_version=sys.version.split()[0],
            now=time.strftime("%Y-%m-%d %H:%M:%S"),
        )
        atomic_write(os.path.join(staging, "index.html"), html)
        _swap_in(staging, folder, rec, os.path.join(directory, _STATE, "trash"))
    finally:
        if os.path.isdir(staging):
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def _import_roots(paths) -> list:
    """[(module, the folder it was imported from)] for the modules of import paths ``module:attr`` that a replay
    imports and that are not installed packages (a user's module found through the cwd or PYTHONPATH)."""
    import sysconfig

    installed = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
    out = []
    for m in sorted({p.partition(":")[0] for p in paths if isinstance(p, str) and ":" in p}):
        file = getattr(sys.modules.get(m), "__file__", None)
        if not file or m.split(".")[0] == "gradspec":
            continue
        root = os.path.dirname(os.path.realpath(file))
        for _ in range(m.count(".") + (os.path.basename(file) == "__init__.py")):
            root = os.path.dirname(root)
        if not any(root == i or root.startswith(i + os.sep) for i in installed):
            out.append((m, root))
    return out


def _ratio_views(case, verdict, d) -> list:
    from . import oracles as _oracles
    from . import tolerances as _tol

    def kind(n):
        o = (getattr(verdict, "oracles", None) or {}).get(n)
        if o is None:
            try:
                o = _oracles.get(n)
            except KeyError:
                return "exact"
        return o.kind

    dts = {l.value.dtype for l in case.leaves if np.issubdtype(l.value.dtype, np.floating)}
    tol = _tol.lookup("float32" if np.dtype(np.float32) in dts else "float64", kind(d.oracles[0]), kind(d.oracles[1]))
    out = []
    for name, r in _cause.ratio_maps(case, verdict, d, tol).items():
        fin = r[np.isfinite(r)]
        out.append({"name": name, "shape": tuple(r.shape), "svg": _cause.ratio_heatmap_svg(r, tuple(r.shape)),
                    "max": float(fin.max()) if fin.size == r.size and r.size else float("inf") if r.size else 0.0,
                    "outside": int(np.sum(~(r <= 1))), "size": int(r.size)})
    return out


def _safe(fn, *args):
    try:
        return fn(*args)
    except Exception:  # a view that cannot be computed is left out, never the whole report
        return None


def campaign_writer(cfg):
    """The ``on_found`` callback of a campaign (``gradspec fuzz``): each finding's report folder
    in ``cfg.report_dir``, at once; a report dir that cannot be written raises ``ReportDirError``."""
    from .fuzz.state import ReportDirError

    def write(d, verdict, info):
        try:
            write_discrepancy_report(cfg.report_dir, d, verdict, info=info)
        except OSError as e:
            err = ReportDirError(f"cannot write the report of a discrepancy into {cfg.report_dir}: {e.strerror or e}")
            # the case as case.json would have held it (user ops by import path), for the run to print: the
            # finding stays replayable without its folder (M3: the bare case had "user_ops": {})
            err.case_json = _safe(lambda: _case_for_file(d.case, info.get("engine")).to_json(indent=None))
            raise err from e

    return write
