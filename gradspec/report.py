"""HTML discrepancy reports (Jinja2 with autoescaping: nothing from a case can inject markup).

Self-contained pages: inline CSS and SVG, no network.  Files are written atomically (temp file
+ rename), so concurrent workers never leave a half-written report.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

import numpy as np

__all__ = ["write_run_report", "write_discrepancy_report", "discrepancy_id", "atomic_write", "repro_script"]

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;font-variant-numeric:tabular-nums}
th{background:#f3f3f3}td.l,th.l{text-align:left}.bad{background:#fdd}.ok{background:#dfd}
pre{background:#f6f6f6;padding:.8em;overflow:auto}code{background:#f3f3f3;padding:0 3px}
.grid{display:flex;flex-wrap:wrap;gap:1.5em}.small{color:#666;font-size:.9em}
"""

_env = None


def _jinja():
    global _env
    if _env is None:
        import jinja2

        _env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        _env.filters["num"] = lambda v: "" if v is None else (f"{v:.6g}" if isinstance(v, (float, np.floating)) else str(v))
    return _env


_INDEX = """<!doctype html><html><head><meta charset="utf-8"><title>gradspec report</title><style>{{ css }}</style></head><body>
<h1>gradspec fuzz report</h1>
<p>{{ s.cases }} cases in {{ '%.1f' % s.seconds }} s against engine <code>{{ s.engine }}</code>{% if s.seed is not none %}, seed {{ s.seed }}{% endif %}.
<b class="{{ 'ok' if s.discrepancies == 0 else 'bad' }}">{{ s.discrepancies }} discrepanc{{ 'y' if s.discrepancies == 1 else 'ies' }}</b>{% if s.interrupted %} (interrupted){% endif %}.</p>
<h2>Discrepancies</h2>
{% if items %}<table><tr><th class="l">id</th><th class="l">kind</th><th class="l">oracles</th><th class="l">ops</th><th class="l">message</th></tr>
{% for it in items %}<tr class="bad"><td class="l"><a href="{{ it.id }}/index.html">{{ it.id }}</a></td><td class="l">{{ it.kind }}</td><td class="l">{{ it.oracles }}</td><td class="l">{{ it.ops }}</td><td class="l">{{ it.message[:200] }}</td></tr>
{% endfor %}</table>{% else %}<p>None.</p>{% endif %}
<h2>Agreement per oracle pair</h2>
<table><tr><th class="l">pair</th><th>comparisons</th><th>agreed</th></tr>
{% for pair, n in s.oracles.items() %}<tr><td class="l">{{ pair }}</td><td>{{ n }}</td><td class="{{ 'ok' if s.agreement[pair] == n else 'bad' }}">{{ s.agreement[pair] }}</td></tr>{% endfor %}</table>
<h2>Coverage per op</h2>
<table><tr><th class="l">op</th><th>cases</th></tr>
{% for op, n in s.ops.items() %}<tr><td class="l">{{ op }}</td><td>{{ n }}</td></tr>{% endfor %}</table>
{% if s.skipped %}<h2>Oracles skipped</h2><table><tr><th class="l">reason</th><th>cases</th></tr>
{% for why, n in s.skipped.items() %}<tr><td class="l">{{ why }}</td><td>{{ n }}</td></tr>{% endfor %}</table>{% endif %}
</body></html>"""

_DISC = """<!doctype html><html><head><meta charset="utf-8"><title>gradspec discrepancy {{ id }}</title><style>{{ css }}</style></head><body>
<p><a href="../index.html">&larr; run summary</a></p>
<h1>Discrepancy {{ id }}: {{ d.kind }} ({{ d.oracles|join(' vs ') }})</h1>
<pre>{{ d.message }}</pre>
{% if d.tolerance_why %}<p class="small">Tolerance: {{ d.tolerance_why }}</p>{% endif %}
<p>Replay: <code>gradspec replay {{ id }}/case.json</code> &middot; standalone torch script: <a href="repro.py">repro.py</a> &middot; <a href="case.json">case.json</a></p>
<h2>The graph</h2>
{{ svg|safe }}
<pre>{{ case_text }}</pre>
<h2>Gradients per oracle</h2>
{% for leaf in leaves %}<h3>leaf <code>{{ leaf.name }}</code> {{ leaf.shape }}</h3>
<table><tr><th class="l">element</th><th>input</th>{% for o in leaf.oracles %}<th>{{ o }}</th>{% endfor %}<th>|difference|</th></tr>
{% for row in leaf.rows %}<tr class="{{ 'bad' if row.bad else '' }}"><td class="l">{{ row.index }}</td><td>{{ row.x|num }}</td>{% for v in row.vals %}<td>{{ v|num }}</td>{% endfor %}<td style="background:{{ row.heat }}">{{ row.diff|num }}</td></tr>{% endfor %}
</table>{% endfor %}
{% if jac %}<h2>The explicit Jacobian J and J<sup>T</sup>&middot;seed</h2>
<p class="small">Rows: root elements; columns: input elements. <code>backward(seed)</code> computes J<sup>T</sup>&middot;seed: each input element's gradient is the dot product of its column with the seed.</p>
<table><tr><th class="l">row \\ col</th>{% for c in jac.cols %}<th>{{ c }}</th>{% endfor %}<th>seed</th></tr>
{% for r in jac.rows %}<tr><td class="l">{{ r.label }}</td>{% for v in r.vals %}<td>{{ v|num }}</td>{% endfor %}<td>{{ r.seed|num }}</td></tr>{% endfor %}
<tr><th class="l">J<sup>T</sup>&middot;seed</th>{% for v in jac.result %}<th>{{ v|num }}</th>{% endfor %}<th></th></tr></table>{% endif %}
{% if skipped %}<h2>Oracles not used</h2><ul>{% for n, why in skipped.items() %}<li><b>{{ n }}</b>: {{ why }}</li>{% endfor %}</ul>{% endif %}
{% if d.traceback %}<h2>Traceback</h2><pre>{{ d.traceback }}</pre>{% endif %}
</body></html>"""


def discrepancy_id(signature) -> str:
    return "d-" + hashlib.sha1(repr(signature).encode()).hexdigest()[:10]


def atomic_write(path: str, text: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_run_report(directory: str, summary: dict, discrepancies: list[dict]) -> str:
    """Write ``directory/index.html`` for a run; returns its path."""
    html = _jinja().from_string(_INDEX).render(css=_CSS, s=summary, items=discrepancies)
    path = os.path.join(directory, "index.html")
    atomic_write(path, html)
    return path


def _heat(ratio: float) -> str:
    if not np.isfinite(ratio):
        return "#f88"
    t = max(0.0, min(1.0, ratio))
    return f"rgb(255,{int(255 - 120 * t)},{int(255 - 120 * t)})"


def graph_svg(case) -> str:
    """The case's DAG as inline SVG: leaves on the left, one column per depth."""
    depth = {l.name: 0 for l in case.leaves}
    for n in case.nodes:
        depth[n.name] = 1 + max(depth[i] for i in n.inputs)
    cols: dict[int, list[str]] = {}
    for name, d in depth.items():
        cols.setdefault(d, []).append(name)
    pos = {}
    for d, names in cols.items():
        for k, name in enumerate(names):
            pos[name] = (30 + d * 170, 30 + k * 60)
    width = 60 + 170 * (max(cols) + 1)
    height = 60 + 60 * max(len(v) for v in cols.values())
    ops = {n.name: n for n in case.nodes}
    from markupsafe import escape

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-size="12" font-family="monospace">']
    parts.append('<defs><marker id="a" markerWidth="8" markerHeight="8" refX="8" refY="4" orient="auto"><path d="M0,0 L8,4 L0,8 z"/></marker></defs>')
    for n in case.nodes:
        x2, y2 = pos[n.name]
        for i in n.inputs:
            x1, y1 = pos[i]
            parts.append(f'<line x1="{x1 + 120}" y1="{y1 + 15}" x2="{x2}" y2="{y2 + 15}" stroke="#888" marker-end="url(#a)"/>')
    roots = set(case.roots)
    for name, (x, y) in pos.items():
        fill = "#e8f0ff" if name not in ops else ("#ffe8c8" if name in roots else "#f4f4f4")
        label = name if name not in ops else f"{name} = {ops[name].op}"
        parts.append(f'<rect x="{x}" y="{y}" width="120" height="30" rx="5" fill="{fill}" stroke="#555"/>')
        parts.append(f'<text x="{x + 6}" y="{y + 19}">{escape(label[:17])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def write_discrepancy_report(directory: str, d, verdict=None) -> str:
    """Write ``directory/<id>/{index.html, case.json, repro.py}``; returns the folder."""
    from .check import check

    case = d.case
    did = discrepancy_id(d.signature)
    folder = os.path.join(directory, did)
    os.makedirs(folder, exist_ok=True)
    atomic_write(os.path.join(folder, "case.json"), case.to_json())
    atomic_write(os.path.join(folder, "repro.py"), repro_script(case, d.oracles))
    if verdict is None:
        try:
            verdict = check(case)
        except Exception:  # the report must still be written; the page says what is missing
            verdict = None
    leaves = []
    if verdict is not None:
        names = [o for o in d.oracles if o in verdict.results] or list(verdict.results)
        others = [o for o in verdict.results if o not in names]
        order = names + others
        for leaf in case.grad_leaves():
            rows = []
            vals = [verdict.results[o].get(leaf.name) for o in order]
            vals = [np.zeros(leaf.shape) if v is None else np.asarray(v, dtype=np.float64) for v in vals]
            diff = np.abs(vals[0] - vals[1]) if len(vals) > 1 else np.zeros(leaf.shape)
            scale = float(np.max(diff, initial=0.0)) or 1.0
            for k, idx in enumerate(np.ndindex(*leaf.shape) if leaf.shape else [()]):
                if k >= 200:
                    break
                dv = float(diff[idx])
                rows.append(
                    {
                        "index": str(idx),
                        "x": float(np.asarray(leaf.value, dtype=np.float64)[idx]),
                        "vals": [float(v[idx]) for v in vals],
                        "diff": dv,
                        "heat": _heat(dv / scale),
                        "bad": d.leaf == leaf.name and d.index == tuple(idx),
                    }
                )
            leaves.append({"name": leaf.name, "shape": leaf.shape, "oracles": order, "rows": rows})
    jac = None
    if verdict is not None and verdict.jacobian is not None and verdict.jacobian.matrix.size <= 400:
        J = verdict.jacobian
        g = J.matrix.T @ J.seed_vector
        jac = {
            "cols": [f"{n}{list(i)}" for n, i in J.col_labels],
            "rows": [
                {"label": f"{r}{list(i)}", "vals": list(J.matrix[k]), "seed": float(J.seed_vector[k])}
                for k, (r, i) in enumerate(J.row_labels)
            ],
            "result": list(g),
        }
    html = _jinja().from_string(_DISC).render(
        css=_CSS,
        id=did,
        d=d,
        svg=graph_svg(case),
        case_text=case.to_text(),
        leaves=leaves,
        jac=jac,
        skipped=(verdict.skipped if verdict is not None else {}),
    )
    atomic_write(os.path.join(folder, "index.html"), html)
    return folder


def repro_script(case, oracles=("reference", "torch-cpu")) -> str:
    """A script that rebuilds the case in torch (float64), runs ``torch.autograd.backward(roots, seeds)``
    and prints torch's gradient beside a central finite-difference estimate computed with torch
    itself, plus the reference engine's gradient recorded at report time.  It uses gradspec only
    to map op names to their torch calls (``gs.ops.get(op).torch``)."""
    payload = case.to_json(indent=None)
    return f'''"""Reproduce a gradspec discrepancy ({" vs ".join(oracles)}): python repro.py"""
import json

import numpy as np
import torch

import gradspec as gs  # only for the op name -> torch call mapping

CASE = gs.Case.from_json({payload!r})
RECORDED_REFERENCE = json.loads({json.dumps(json.dumps(_recorded(case)))})


def run(values):
    env = {{}}
    for leaf in CASE.leaves:
        t = torch.from_numpy(np.array(values[leaf.name]))
        env[leaf.name] = t.requires_grad_(True) if leaf.differentiable else t
    for n in CASE.nodes:
        env[n.name] = gs.ops.get(n.op).torch(*[env[i] for i in n.inputs], **n.params)
    return env


values = {{l.name: l.value.astype(np.float64) if l.value.dtype.kind == "f" else l.value for l in CASE.leaves}}
env = run(values)
roots = [env[r] for r in CASE.roots]
seeds = [None if s is None else torch.from_numpy(np.array(s)) for s in CASE.seeds]
torch.autograd.backward(roots, seeds)
seed_arrays = [torch.ones_like(r) if s is None else s.to(r.dtype) for r, s in zip(roots, seeds)]


def s_of(vals):
    with torch.no_grad():
        e = run(vals)
        return sum(float((e[r].double() * g.double()).sum()) for r, g in zip(CASE.roots, seed_arrays))


worst = 0.0
for leaf in CASE.grad_leaves():
    x = values[leaf.name]
    fd = np.zeros(x.shape)
    for idx in np.ndindex(*x.shape):
        h = 1e-6 * max(1.0, abs(x[idx]))
        plus = {{**values, leaf.name: x.copy()}}; plus[leaf.name][idx] += h
        minus = {{**values, leaf.name: x.copy()}}; minus[leaf.name][idx] -= h
        fd[idx] = (s_of(plus) - s_of(minus)) / (2 * h)
    g = env[leaf.name].grad
    tg = np.zeros(x.shape) if g is None else g.numpy()
    ref = RECORDED_REFERENCE.get(leaf.name)
    print(f"leaf {{leaf.name}} {{x.shape}}")
    print("  torch backward     :", np.array2string(tg.ravel(), precision=8))
    print("  finite differences :", np.array2string(fd.ravel(), precision=8))
    if ref is not None:
        print("  gradspec reference :", np.array2string(np.asarray(ref).ravel(), precision=8))
        worst = max(worst, float(np.max(np.abs(np.asarray(ref) - tg), initial=0.0)))
print(f"max |reference - torch| = {{worst:.3g}}")
'''


def _recorded(case):
    try:
        from .oracles import get

        out = get("reference").vjp(case)
        return {k: (None if v is None else np.asarray(v, dtype=np.float64).tolist()) for k, v in out.items()}
    except Exception as e:  # pragma: no cover
        return {"error": f"{type(e).__name__}: {e}"}
