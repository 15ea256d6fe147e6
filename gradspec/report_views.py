"""The views of one discrepancy's page: the graph drawing (roots and the blamed node marked), the
|difference| heatmap, the tolerance derivation, the gradients side by side and the Jacobian.  Each
returns markup built from escaped values only (the page's template escapes everything else).

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec.report_views import graph_svg
    >>> case = gs.Case.build({"x": np.array([0.5])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(1)])
    >>> graph_svg(case).startswith("<svg")
    True
"""

from __future__ import annotations

import numpy as np

from . import report_cause as _cause

__all__ = ["graph_svg"]

_GRAPH_W, _GRAPH_H, _COL, _ROW = 150, 34, 200, 56


def graph_svg(case, blamed: str | None = None) -> str:
    """The case's DAG as inline SVG: leaves on the left, one column per depth, roots marked "root",
    the node a cause blames (``blamed``) in red."""
    from markupsafe import escape

    try:
        shapes = case.shapes()
    except Exception:  # a case whose shapes cannot be computed still gets its graph drawn
        shapes = {}
    depth = {l.name: 0 for l in case.leaves}
    for n in case.nodes:
        depth[n.name] = 1 + max((depth.get(i, 0) for i in n.inputs), default=0)
    cols: dict[int, list[str]] = {}
    for name, d in depth.items():
        cols.setdefault(d, []).append(name)
    pos = {}
    for d, names in cols.items():
        for k, name in enumerate(names):
            pos[name] = (20 + d * _COL, 20 + k * _ROW)
    width = 40 + _COL * max(cols, default=0) + _GRAPH_W
    height = 40 + _ROW * max((len(v) for v in cols.values()), default=1)
    nodes = {n.name: n for n in case.nodes}
    roots = set(case.roots)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-size="12" font-family="monospace" role="img">',
             '<title>computation graph</title>',
             '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="8" refY="4" orient="auto">'
             '<path d="M0,0 L8,4 L0,8 z" fill="#777"/></marker></defs>']
    for n in case.nodes:
        x2, y2 = pos[n.name]
        for i in n.inputs:
            if i not in pos:
                continue
            x1, y1 = pos[i]
            parts.append(f'<line x1="{x1 + _GRAPH_W}" y1="{y1 + _GRAPH_H / 2}" x2="{x2}" y2="{y2 + _GRAPH_H / 2}" '
                         'stroke="#888" marker-end="url(#arrow)"/>')
    for name, (x, y) in pos.items():
        if name in nodes:
            fill = "#f4a6a6" if name == blamed else "#ffe2b8" if name in roots else "#f1f1f1"
            label = f"{name} = {nodes[name].op}"
        else:
            leaf = next(l for l in case.leaves if l.name == name)
            fill = "#dbe8ff" if leaf.differentiable else "#eeeeee"
            label = f"{name} (leaf)"
        shape = shapes.get(name)
        sub = "" if shape is None else str(tuple(shape))
        stroke = "#b00000" if name == blamed else "#c05000" if name in roots else "#555"
        parts.append(f'<g class="node"><title>{escape(label)} {escape(sub)}</title>'
                     f'<rect x="{x}" y="{y}" width="{_GRAPH_W}" height="{_GRAPH_H}" rx="5" fill="{fill}" '
                     f'stroke="{stroke}"/>')
        parts.append(f'<text x="{x + 6}" y="{y + 14}">{escape(_clip(label, 20))}</text>')
        parts.append(f'<text x="{x + 6}" y="{y + 28}" fill="#666" font-size="10">{escape(_clip(sub, 24))}</text>')
        if name in roots:
            parts.append(f'<text x="{x + _GRAPH_W - 6}" y="{y + 28}" text-anchor="end" fill="#c05000" font-size="10" '
                         'font-weight="bold">root</text>')
        if name == blamed:
            parts.append(f'<text x="{x + _GRAPH_W}" y="{y - 3}" text-anchor="end" fill="#b00000" font-size="10" '
                         'font-weight="bold">cause</text>')
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _heat(ratio: float) -> str:
    if not np.isfinite(ratio):
        return "#d04040"
    t = max(0.0, min(1.0, ratio))
    return f"rgb(255,{int(255 - 150 * t)},{int(255 - 150 * t)})"


def _heatmap_svg(diff: np.ndarray, labels_shape: tuple, cell: int = 14, cap: int = 1024) -> str:
    flat = _cause.heatmap_grid(diff, cap)
    rows, cols = flat.shape
    finite = flat[np.isfinite(flat)]
    top = float(finite.max()) if finite.size else 0.0
    w, h = cols * cell + 2, rows * cell + 2
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="heatmap" width="{w}" height="{h}" viewBox="0 0 {w} {h}">']
    idx = list(np.ndindex(*labels_shape)) if labels_shape else [()]
    for r in range(rows):
        for c in range(cols):
            v = float(flat[r, c])
            k = r * cols + c
            label = ", ".join(str(i) for i in idx[k]) if k < len(idx) else ""
            color = _heat(v / top if top > 0 else 0.0) if np.isfinite(v) else _heat(float("nan"))
            parts.append(f'<rect x="{1 + c * cell}" y="{1 + r * cell}" width="{cell - 1}" height="{cell - 1}" '
                         f'fill="{color}"><title>[{label}] {v:.4g}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


def _text_array(a) -> str:
    a = np.asarray(a)
    with np.printoptions(precision=8, threshold=400, edgeitems=6, linewidth=100):
        return np.array2string(a) if a.ndim else repr(a.item())


def _tol_parts(case, verdict, d) -> dict | None:
    """The tolerance of ``d`` at its element, term by term (as gradspec.check computes it)."""
    from . import oracles as _oracles
    from . import tolerances as _tol
    from .check import rounding_noise

    if d.kind != "value" or d.leaf is None or d.index is None or verdict is None:
        return None
    a, b = d.oracles
    ra, rb = verdict.results.get(a), verdict.results.get(b)
    if ra is None or rb is None:
        return None
    leaf = next((l for l in case.grad_leaves() if l.name == d.leaf), None)
    if leaf is None:
        return None

    def kind(n):
        try:
            return _oracles.get(n).kind
        except KeyError:
            return "exact"

    dts = {l.value.dtype for l in case.leaves if np.issubdtype(l.value.dtype, np.floating)}
    dtype = "float32" if np.dtype(np.float32) in dts else "float64"
    tol = _tol.lookup(dtype, kind(a), kind(b))
    ga = np.zeros(leaf.shape) if ra.get(leaf.name) is None else np.asarray(ra[leaf.name], dtype=np.float64)
    gb = np.zeros(leaf.shape) if rb.get(leaf.name) is None else np.asarray(rb[leaf.name], dtype=np.float64)
    if ga.shape != leaf.shape or gb.shape != leaf.shape:
        return None
    idx = tuple(d.index)
    with np.errstate(all="ignore"):
        fin = np.isfinite(ga) & np.isfinite(gb)
        leaf_scale = float(np.max(np.maximum(np.abs(ga), np.abs(gb)), where=fin, initial=0.0))
    Mj = None
    if verdict.jacobian is not None:
        J = verdict.jacobian
        try:
            col = J.col_labels.index((leaf.name, idx))
            Mj = float(np.abs(J.matrix[:, col]) @ np.abs(J.seed_vector))
        except ValueError:
            Mj = None
    scale = max(abs(ga[idx]), abs(gb[idx]), leaf_scale, Mj or 0.0)
    terms = [
        {"name": "|a|", "value": abs(ga[idx]), "why": f"{a}'s value"},
        {"name": "|b|", "value": abs(gb[idx]), "why": f"{b}'s value"},
        {"name": "leaf max", "value": leaf_scale, "why": "largest |gradient| of the leaf (norm-wise scale)"},
    ]
    if Mj is not None:
        terms.append({"name": "sum of |path terms| M", "value": Mj, "why": "(|J|^T |seed|) at this element: "
                      "bounds the rounding error of any evaluation order"})
    terms.append({"name": "scale", "value": scale, "why": "the largest of the above"})
    terms.append({"name": "rtol", "value": tol.rtol, "why": tol.why})
    allowed = tol.rtol * scale
    terms.append({"name": "rtol x scale", "value": allowed, "why": "rounding allowance"})
    try:
        noise = rounding_noise(case)
    except Exception:
        noise = None
    if noise is not None and leaf.name in noise:
        nj = float(noise[leaf.name][idx])
        allowed += _tol.NOISE_FACTOR * nj
        terms.append({"name": f"{_tol.NOISE_FACTOR:g} x rounding noise", "value": _tol.NOISE_FACTOR * nj,
                      "why": f"spread of the gradient when saved values move by {_tol.NOISE_ULPS:g} ulps"})
    if tol.fd_factor and verdict.fd_error is not None and leaf.name in verdict.fd_error:
        fe = float(np.asarray(verdict.fd_error[leaf.name])[idx])
        allowed += tol.fd_factor * fe
        terms.append({"name": f"{tol.fd_factor:g} x FD error estimate", "value": tol.fd_factor * fe,
                      "why": "finite differences' own error bound (truncation + rounding)"})
    terms.append({"name": "allowance", "value": allowed, "why": "sum of the allowances"})
    return {"label": f"{leaf.name}[{', '.join(map(str, idx))}]", "err": abs(ga[idx] - gb[idx]), "allowed": allowed,
            "terms": terms}


def _grads_view(case, verdict, d, limit: int = 120):
    if verdict is None or not verdict.results:
        return [], [], list(d.oracles), []
    pair = [o for o in d.oracles if o in verdict.results]
    order = pair + [o for o in verdict.results if o not in pair]
    grads, worst = [], []
    for leaf in case.grad_leaves():
        vals = []
        for o in order:
            v = verdict.results[o].get(leaf.name)
            try:
                arr = np.zeros(leaf.shape) if v is None else np.asarray(v, dtype=np.float64)
            except (TypeError, ValueError):
                arr = np.full(leaf.shape, np.nan)
            if arr.shape != leaf.shape:
                arr = np.full(leaf.shape, np.nan)  # shown as NaN; the message states the shape
            vals.append(arr)
        if len(vals) >= 2:
            with np.errstate(all="ignore"):
                diff = np.abs(vals[0] - vals[1])
            diff = np.where(np.isnan(vals[0]) != np.isnan(vals[1]), np.inf, diff)
            diff = np.where(np.isnan(vals[0]) & np.isnan(vals[1]), 0.0, diff)
        else:
            diff = np.zeros(leaf.shape)
        finite = diff[np.isfinite(diff)]
        top = float(finite.max()) if finite.size else 0.0
        x = np.asarray(leaf.value, dtype=np.float64)
        rows = []
        idxs = list(np.ndindex(*leaf.shape)) if leaf.shape else [()]
        for k, idx in enumerate(idxs):
            if k >= limit:
                break
            dv = float(diff[idx])
            rows.append({
                "index": ", ".join(map(str, idx)),
                "x": float(x[idx]),
                "vals": [float(v[idx]) for v in vals],
                "diff": dv,
                "heat": _heat(dv / top if top > 0 else 0.0) if np.isfinite(dv) else _heat(float("nan")),
                "bad": d.leaf == leaf.name and d.index is not None and tuple(d.index) == tuple(idx),
            })
            if len(vals) >= 2 and (dv > 0 or not np.isfinite(dv)):
                a, b = float(vals[0][idx]), float(vals[1][idx])
                denom = max(abs(a), abs(b))
                worst.append({"label": f"{leaf.name}[{', '.join(map(str, idx))}]", "a": a, "b": b, "diff": dv,
                              "rel": dv / denom if denom else float("inf")})
        grads.append({"name": leaf.name, "shape": leaf.shape, "rows": rows, "more": max(0, len(idxs) - limit),
                      "svg": _heatmap_svg(diff, leaf.shape), "maxdiff": top})
    worst.sort(key=lambda w: (-(w["diff"] if np.isfinite(w["diff"]) else np.inf)))
    return grads, worst[:10], order, pair


def _jacobian_view(verdict, d, max_size: int = 600):
    if verdict is None or verdict.jacobian is None:
        return None
    J = verdict.jacobian
    if J.matrix.size == 0 or J.matrix.size > max_size:
        return None
    g = J.matrix.T @ J.seed_vector
    cols = [f"{n}[{', '.join(map(str, i))}]" for n, i in J.col_labels]
    view = {
        "cols": cols,
        "rows": [{"label": f"{r}[{', '.join(map(str, i))}]", "vals": list(J.matrix[k]), "seed": float(J.seed_vector[k])}
                 for k, (r, i) in enumerate(J.row_labels)],
        "result": list(g),
        "bad": -1,
        "worked": None,
    }
    if d.leaf is not None and d.index is not None:
        try:
            c = J.col_labels.index((d.leaf, tuple(d.index)))
        except ValueError:
            c = -1
        if c >= 0:
            view["bad"] = c
            terms = [f"({J.matrix[k, c]:.6g})·({J.seed_vector[k]:.6g})" for k in range(J.matrix.shape[0])
                     if J.matrix[k, c] != 0 and J.seed_vector[k] != 0]
            claims = []
            for o in d.oracles:
                res = verdict.results.get(o, {}) if verdict.results else {}
                v = res.get(d.leaf)
                try:
                    claims.append((o, float(np.asarray(v, dtype=np.float64)[tuple(d.index)])))
                except Exception:
                    pass
            view["worked"] = {"label": f"{d.leaf}[{', '.join(map(str, d.index))}] = Σ_rows J[row, col]·seed[row]",
                              "expr": " + ".join(terms) if terms else "0 (no path from this input to a seeded output)",
                              "value": float(g[c]), "claims": claims}
    return view
