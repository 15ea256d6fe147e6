"""What a report page says first: the finding's cause, where, and which way the fix goes (CONTRACT §8).

The discrepancy pages of :mod:`gradspec.report` open with a headline built here from
``Discrepancy.cause``: the cause's sentence, the blamed node and op, the direction of the fix and
the numbers that decided it.  This module also names the run (``verify_op`` of which op, which
engine...), marks the oracle that runs the user's own code ("your code"), and computes the
|difference| / tolerance heatmap of every leaf.  Every string here is plain text: the templates
escape it (Jinja autoescape), nothing is marked safe.

Example::

    >>> from gradspec.causes import Cause
    >>> from gradspec.report_cause import headline
    >>> h = headline(Cause("wrong-vjp", "node y = half(x): your vjp is wrong — it is 0.5 times J^T·g",
    ...                    node="y", op="half", pattern="scale", factor=0.5))
    >>> h["title"], h["fix"]
    ('wrong VJP (scale) at node y = half', 'multiply the rule by 1/0.5 = 2 (find where the factor 0.5 comes from)')
"""

from __future__ import annotations

import math

import numpy as np

from ._private.skips import word_cut
from .causes import ALL_IDS, ENGINE_IDS, PATTERNS

__all__ = ["headline", "fix_direction", "run_title", "reproduce", "your_code", "ratio_maps", "ratio_heatmap_svg", "strip_tolerance",
           "shorten"]

# Which way the fix goes, per pattern of a wrong VJP and per engine-level cause.
_FIX_PATTERN = {
    "sign": "negate the rule where the sign is wrong",
    "seed-ignored": "multiply by the upstream gradient g element-wise (never by ones or by a constant)",
    "broadcast-reduction": "sum the gradient over every axis the input was broadcast along (sum_to the input's shape)",
    "permuted": "put each value where it belongs: the cause names the mapping that is off (a permutation to invert, a "
                "reduced axis to insert before broadcasting, the index where g is split)",
    "unselected-branch": "compute the branch the select does not take on a safe input (the double-where: "
                         "safe = torch.where(cond, x, 1.0); torch.where(cond, f(safe), 0.0))",
    "transposed": "transpose the matrix the backward applies: solve(A.mT, g) for the adjoint of solve(A, b), "
                  "inv(A).mT / A.mT @ g where inv(A) / A @ g stand",
    "not-symmetrised": "symmetrise the backward's result, (X + X^T)/2, as the input is read as a symmetric matrix",
    "not-accumulated": "add every output element's contribution into the input element it came from (index_add / "
                       "scatter_add, never an assignment that keeps the last)",
    "masked": "make the backward's mask or branch condition match where the derivative is zero and where it is "
              "not (the cause says which way it is off)",
    "other": "compare the rule with J^T·g term by term at the inputs shown below",
}
_FIX_ID = {
    "twin-mismatch": "make the torch= twin compute the same function as forward (a note: the vjp itself agrees)",
    "wrong-jvp": "fix the declared jvp (the vjp agrees with finite differences)",
    "not-localised": "look at how the graph combines the nodes: uses of one tensor, state between calls",
    "forward-raised": "make forward run on the inputs shown",
    "process-died": "replay the case: the traceback of the fatal signal (if any) names the call that ended the process",
    "forward-mutates-input": "call ctx.mark_dirty(x) on every input forward modifies in place, or compute out of place",
    "implicit-seed-non-scalar": "refuse backward() without a gradient unless the output has exactly one element",
    "implicit-seed-refused": "accept backward() without a gradient for every one-element output, whatever its shape",
    "seed-shape-accepted": "raise when the gradient's shape differs from the output's (no broadcasting)",
    "seed-ignored": "start backward from the gradient passed in, not from ones",
    "seed-misapplied": "start backward from the gradient passed in, element by element (J^T·seed)",
    "accumulation-overwrite": "add into .grad (grad = grad + new), never assign",
    "uses-overwrite": "add the gradient of every use of a leaf within one backward (grad = grad + new), never assign",
    "stale-intermediate-grads": "reset the gradients of intermediate nodes at the start of every backward",
    "root-grad-assigned": "add the seed to the root's gradient instead of assigning it",
    "backward-order": "sort the nodes topologically (each after every node that uses it) before back-propagating",
    "grad-not-updated": "write the accumulated gradient back to .grad after backward",
    "reset-ignored": "make zero_grad set .grad back to None (or zeros)",
    "repeated-input-dropped": "accumulate the gradient of every argument, also when two arguments are one tensor",
    "no-freeing": "free saved tensors after backward unless retain_graph=True, and raise on a second backward",
    "none-vs-zeros": "leave .grad None where no gradient reached the leaf (torch's convention)",
    "error-type": "raise where torch raises and only there",
    "shared-broadcast-reduction": "sum a broadcast input's gradient over the broadcast axes in the engine's shared "
                                  "unbroadcast helper (never a mean or a slice)",
}


def headline(cause) -> dict | None:
    """The page's first block for ``cause`` (None when there is no cause): title, sentence, fix, evidence."""
    if cause is None:
        return None
    if cause.id == "wrong-vjp":
        what = f"wrong VJP ({_named(cause) or 'other'})"
    else:
        what = cause.id.replace("-", " ")
    where = f" at node {cause.node} = {cause.op}" if cause.node else (" (engine-level: a backward() rule)"
                                                                       if cause.id in ENGINE_IDS else "")
    return {"title": what + where, "id": cause.id, "summary": cause.summary, "fix": fix_direction(cause),
            "evidence": cause.evidence or "", "meaning": ALL_IDS.get(cause.id, ""),
            "pattern": PATTERNS.get(_named(cause) or "", "")}


def _named(cause) -> str | None:
    # (a cause read back from an older report's JSON may lack subpattern)
    return getattr(cause, "subpattern", None) or cause.pattern


def fix_direction(cause) -> str:
    if getattr(cause, "fix", ""):
        return cause.fix
    if cause.id == "wrong-vjp" and cause.pattern == "scale" and cause.factor:
        f = float(cause.factor)
        inv = 1 / f
        return (f"multiply the rule by 1/{f:.6g} = {inv:.6g} (find where the factor {f:.6g} comes from)"
                if abs(f - 1) >= 1e-3 else f"find the small relative error ({f - 1:+.2g}) in the formula" + _iterating(cause))
    if cause.id == "wrong-vjp":
        return _FIX_PATTERN.get(_named(cause) or "other", _FIX_PATTERN["other"]) + _iterating(cause)
    return _FIX_ID.get(cause.id, "")


def _iterating(cause) -> str:
    """The fix for user code that may iterate, where the cause's words say so (vjp_patterns._iterated)."""
    return ("; or, if the code iterates to a tolerance, declare its accuracy (the rtol= above) or tighten that "
            "tolerance" if "declare an accuracy of at least rtol=" in cause.summary else "")


def run_title(info: dict | None, d=None) -> str:
    """What was under test, for the page title: ``verify_op: op 'cube'``, ``gradspec fuzz``, ``pytest: test_x``..."""
    info = info or {}
    run, target = info.get("run"), info.get("target")
    if run == "op":
        return f"verify_op: user op {target}"
    if run == "torch function":
        return f"verify_torch_function: {target}"
    if run == "engine":
        return f"verify_engine: engine {target}"
    if info.get("test"):
        return f"pytest: {info['test']}"
    engine = info.get("engine") or getattr(getattr(d, "case", None), "engine", None) or "reference"
    return f"gradspec fuzz: engine {engine}"


_BUILTIN_ENGINES = ("reference", "torch-cpu", "torch-cuda")


def reproduce(info: dict | None, engine: str | None, case_path: str, user_ops=None, calls: str | None = None,
              run_replay: str | None = None) -> dict:
    """The Reproduce card of a discrepancy page: ``under_test`` (what ran the code that disagreed: the
    engine under test by its name and how it is loaded, the user op, the torch Function), ``replay`` (a
    command that re-runs the saved case with that code) and ``note`` (why ``gradspec replay`` cannot,
    when it cannot: an engine with no import path).  ``calls``: the sequence of backward() calls of a
    finding of a §5 rule (``case.meta["scenario"]``), which replaying case.json (gradient values of one
    backward) does not repeat: the replay is then ``run_replay``, the verification that found it.

    >>> r = reproduce({"run": "engine", "target": "mini"}, "mypkg.eng:make", "d-1/case.json")
    >>> r["under_test"], r["replay"]
    ("engine under test 'mini' (loaded as mypkg.eng:make)", 'gradspec replay d-1/case.json --allow-import mypkg.eng')
    """
    from .caseio import replay_command

    info = info or {}
    run, target = info.get("run"), info.get("target")
    engine = engine or "reference"
    importable = engine in _BUILTIN_ENGINES or (":" in engine and "<" not in engine)
    if run == "engine" or engine not in ("reference",):
        name = target if run == "engine" and target else engine
        under = (f"engine under test {name!r}" + (f" (loaded as {engine})" if importable and engine != name else "")
                 if importable else f"engine under test {name!r} (your engine object: it has no import path)")
    elif run == "op":
        under = f"user op {target} (its vjp, run by gradspec's reference engine)"
    elif run == "torch function":
        under = f"torch function {target} (its backward, run by torch and by gradspec's reference engine)"
    else:
        under = "gradspec's reference engine and its op table"
    steps = [ln for ln in (calls or "").splitlines() if ln.startswith(("eng.backward(", "eng.zero_grad("))]
    if len(steps) > 1 and run_replay:  # a sequence of calls: one backward of case.json does not show it
        code = run_replay.replace("'<your engine object>'", "engine")
        return {"under_test": under, "how": "re-run the verification that found it" + (
            "" if importable else ", in your own Python session, where engine is your engine object"),
                "replay": code if importable else "import gradspec as gs\n" + code,
                "note": "this finding is a sequence of backward() calls on one graph (shown below, under What "
                        "happened); `gradspec replay` of case.json checks the gradient values of one backward only, "
                        "which are right on this graph"}
    if importable:
        return {"under_test": under, "how": "replay with every oracle",
                "replay": replay_command(case_path, engine, user_ops), "note": ""}
    label = target or "your engine"
    code = ("import gradspec as gs; from gradspec.oracles.engine_oracle import EngineOracle\n"
            f"gs.check(gs.Case.from_json(open({case_path!r}).read()), "
            "oracles=[EngineOracle(engine), 'reference', 'jacobian'])")
    return {"under_test": under, "how": "replay in your own Python session, where engine is your engine object",
            "replay": code,
            "note": (f"the engine {label!r} was given as an object that cannot be rebuilt from an import path "
                     "(defined in __main__ or inside a function, or its class builds another engine without "
                     "arguments), so `gradspec replay` cannot run it; pass gs.verify_engine('module:attr') of a "
                     "function that returns it and its reports replay with `gradspec replay`")}


def your_code(case, names, oracles: dict | None = None) -> set:
    """The oracles among ``names`` that run the user's own backward (their column says "your code");
    ``oracles`` (name -> Oracle, from the verdict) tells engines under test apart."""
    try:
        specs = [case.spec(n.op) for n in case.nodes]
    except Exception:  # noqa: BLE001
        specs = []
    user = [s for s in specs if getattr(s, "user", False)]
    out = set()
    for n in names:
        if n == "reference" and user:
            out.add(n)  # the engine runs the user op's vjp (or the Function's backward)
        elif n.startswith("torch") and any(s.name.startswith("torch_") for s in user):
            out.add(n)  # a torch Function under test: torch runs its backward
        elif type((oracles or {}).get(n)).__name__ == "EngineOracle" or n.startswith("engine:"):
            out.add(n)  # an engine under test
    return out


def ratio_maps(case, verdict, d, tolerance) -> dict:
    """Per leaf: |a - b| / allowed, element-wise, for the pair of ``d`` (allowed as gs.check's model:
    rtol x max(|a|, |b|, leaf max, sum of |path terms|), plus FD's error estimate for estimates).

    The rounding-noise term is left out (it costs three more backward passes per page), so a ratio
    here can exceed gs.check's by that term: the page says so.
    """
    if verdict is None or d.kind not in ("value", "nan-inf-pattern") or tolerance is None:
        return {}
    a, b = d.oracles
    ra, rb = verdict.results.get(a), verdict.results.get(b)
    if ra is None or rb is None:
        return {}
    M = None
    J = verdict.jacobian
    if J is not None and J.matrix.size:
        with np.errstate(all="ignore"):
            M = np.abs(J.matrix).T @ np.abs(J.seed_vector)
    out, off = {}, 0
    for leaf in case.grad_leaves():
        size = leaf.value.size
        ga, gb = ra.get(leaf.name), rb.get(leaf.name)
        if ga is None or gb is None or np.shape(ga) != leaf.shape or np.shape(gb) != leaf.shape:
            off += size
            continue
        fa, fb = np.asarray(ga, dtype=np.float64), np.asarray(gb, dtype=np.float64)
        with np.errstate(all="ignore"):
            fin = np.isfinite(fa) & np.isfinite(fb)
            scale = np.maximum(np.abs(fa), np.abs(fb))
            scale = np.maximum(scale, float(np.max(scale, where=fin, initial=0.0)))
            if M is not None and M.size >= off + size:
                scale = np.maximum(scale, M[off: off + size].reshape(leaf.shape))
            allowed = tolerance.rtol * scale + 1e-300
            fe = verdict.fd_error or {}
            if tolerance.fd_factor and leaf.name in fe:
                allowed = allowed + tolerance.fd_factor * np.asarray(fe[leaf.name], dtype=np.float64)
            ratio = np.where(fin, np.abs(fa - fb) / allowed, np.inf)
        out[leaf.name] = ratio
        off += size
    return out


def strip_tolerance(message: str) -> str:
    """A discrepancy message without its trailing tolerance derivation (the page shows it once)."""
    if not message:
        return message
    head, sep, _ = message.partition(" — tolerance: ")
    return head if sep else message


def shorten(text: str, width: int = 160) -> str:
    """``text``'s first line in at most ``width`` characters, cut at a word boundary (never mid-word)."""
    return word_cut((text or "").splitlines()[0] if text else "", width)


def heatmap_grid(values, cap: int = 1024) -> np.ndarray:
    """A leaf's values as the 2-D grid a heatmap draws (last axis across, the rest stacked), cut to at
    most ``cap`` cells so a huge leaf still gives a readable page."""
    a = np.asarray(values, dtype=np.float64)
    # the row count spelt out: reshape(-1, 0) of an empty leaf (shape (2, 0)) is ambiguous and raises
    flat = a.reshape(1, -1) if a.ndim <= 1 else a.reshape(math.prod(a.shape[:-1]), a.shape[-1])
    rows, cols = flat.shape
    if rows * cols > cap:
        rows = max(1, cap // max(cols, 1))
        flat = flat[:rows, :cap] if cols > cap else flat[:rows]
    return flat


def ratio_heatmap_svg(ratio: np.ndarray, shape: tuple, cell: int = 16, cap: int = 1024) -> str:
    """|difference| / tolerance of one leaf as an SVG grid: white at 0, green up to the tolerance (1),
    red above it, darker with each factor of 10; every cell's tooltip gives its index and ratio."""
    flat = heatmap_grid(ratio, cap)
    rows, cols = flat.shape
    idx = list(np.ndindex(*shape)) if shape else [()]
    w, h = cols * cell + 2, rows * cell + 2
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="ratiomap" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}">']
    for r in range(rows):
        for c in range(cols):
            v = float(flat[r, c])
            k = r * cols + c
            label = ", ".join(str(i) for i in idx[k]) if k < len(idx) else ""
            parts.append(f'<rect x="{1 + c * cell}" y="{1 + r * cell}" width="{cell - 1}" height="{cell - 1}" '
                         f'fill="{_ratio_colour(v)}" stroke="#ccc" stroke-width="0.5"><title>[{label}] '
                         f'|difference| / tolerance = {v:.3g}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


def _ratio_colour(v: float) -> str:
    if not np.isfinite(v):
        return "#8b0000"
    if v <= 1:
        t = max(0.0, v)
        return f"rgb({int(255 - 80 * t)},{int(255 - 20 * t)},{int(255 - 80 * t)})"
    t = min(1.0, np.log10(v) / 8)  # 1 .. 1e8 times the tolerance
    return f"rgb({int(250 - 60 * t)},{int(170 - 150 * t)},{int(170 - 150 * t)})"
