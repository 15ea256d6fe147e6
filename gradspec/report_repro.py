"""``repro.py``: the standalone script in every report folder that rebuilds the case in torch, shows
the gradients, and checks the case again (exit 1 while the disagreement is there, 0 once it is gone,
2 when it cannot run here).  Everything taken from a case goes into the script as data (Python
literals, escaped docstrings), never as code.

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec.report_repro import repro_script
    >>> case = gs.Case.build({"x": np.array([0.5])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(1)])
    >>> compile(repro_script(case), "repro.py", "exec") is not None
    True
"""

from __future__ import annotations

import json

import numpy as np

from ._private.casefile import module_not_replayed
from ._private.inert import docstring, literal
from .caseio import allow_flags

__all__ = ["repro_script", "INLINE_ELEMENTS", "RECORDED_ELEMENTS", "LISTING_FD_ELEMENTS"]

# Size limits (tryout6 #6: a 300 x 300 weight made a 6.8 MB repro.py beside a 2.7 MB case.json, the values
# written out three times; its listing would have run 185,000 forwards for finite differences):
# - above INLINE_ELEMENTS leaf and seed elements the script reads the case from case.json beside it (the
#   report folder's) instead of carrying it, and says so;
# - a recorded gradient of more than RECORDED_ELEMENTS elements is not copied in (the re-check computes it
#   again; the listing says it was omitted);
# - the listing's element-by-element finite differences (2 forwards per element) cover leaves of up to
#   LISTING_FD_ELEMENTS elements; larger leaves say they were skipped (the re-check's finite differences
#   compare along random directions there).
INLINE_ELEMENTS = 4096
RECORDED_ELEMENTS = 4096
LISTING_FD_ELEMENTS = 2000




def _recorded(verdict, names) -> dict:
    out = {}
    if verdict is None:
        return out
    for n in names:
        res = (verdict.results or {}).get(n)
        if res is None:
            err = (verdict.errors or {}).get(n)
            if err:
                out[n] = {"error": f"{err[0]}: {err[1]}"}
            continue
        grads = {}
        for leaf, g in res.items():
            try:
                a = None if g is None else np.asarray(g, dtype=np.float64)
                grads[leaf] = None if a is None else _hexlist(a) if a.size <= RECORDED_ELEMENTS else {
                    "omitted": f"{a.size} elements, not copied into repro.py (the re-check below computes them again)"}
            except (TypeError, ValueError):
                grads[leaf] = None
        out[n] = grads
    return out


def _hexlist(a: np.ndarray) -> dict:
    return {"shape": list(a.shape), "hex": [float(v).hex() for v in a.ravel()]}


def repro_script(case, oracles=("reference", "torch-cpu"), verdict=None, d=None, rid: str = "") -> str:
    """A script that rebuilds ``case`` in torch (in its own dtype), runs
    ``torch.autograd.backward(roots, seeds)`` and prints torch's gradient beside a central
    finite-difference estimate (computed with torch in float64) and the gradients the disagreeing
    oracles returned when the report was written; it ends with the disagreement and exits 1 while
    one is shown.  gradspec is used only to map op names to their torch calls."""
    names = list(oracles)
    recorded = _recorded(verdict, names)
    size = sum(np.size(l.value) for l in case.leaves) + sum(np.size(s) for s in case.seeds if s is not None)
    beside = size > INLINE_ELEMENTS
    lines = [] if not beside else [f"# {size:,} values: read from case.json beside this script, not copied in"]
    for leaf in case.leaves if not beside else ():
        v = np.asarray(leaf.value)
        if np.issubdtype(v.dtype, np.floating):
            data = repr([float(x).hex() for x in v.astype(np.float64).ravel()])
            expr = f"_arr({data}, {tuple(v.shape)!r}, {v.dtype.name!r})"
        else:
            expr = f"np.array({v.ravel().tolist()!r}, dtype={v.dtype.name!r}).reshape({tuple(v.shape)!r})"
        lines.append(f"VALUES[{literal(leaf.name)}] = {expr}")
    values_block = "\n".join(lines)
    graph_lines = []
    for n in case.nodes:
        args = ", ".join(f"env[{literal(i)}]" for i in n.inputs)
        params = f", **{literal(dict(n.params))}" if n.params else ""  # keys too are data: never `k=v` source
        graph_lines.append(f"    env[{literal(n.name)}] = T({literal(n.op)})({args}{params})")
    graph_block = "\n".join(graph_lines) or "    pass"
    seeds = []
    for s in case.seeds if not beside else ():
        if s is None:
            seeds.append("None")
        else:
            a = np.asarray(s)
            seeds.append(f"_arr({[float(x).hex() for x in a.astype(np.float64).ravel()]!r}, {tuple(a.shape)!r}, {a.dtype.name!r})")
    grad_leaves = [l.name for l in case.grad_leaves()]
    inline = case.meta.get("inline_ops") if isinstance(case.meta, dict) else None
    modules = case.meta.get("module_ops") if isinstance(case.meta, dict) else None
    why_not = {op: module_not_replayed(op.removeprefix("torch_")) for op in modules or ()}
    title = f"{d.kind} ({' vs '.join(d.oracles)})" if d is not None else " vs ".join(names)
    message = (d.message.splitlines()[0] if d is not None and d.message else "")
    # Both go into the script's docstring: escaped so that nothing in them can end it.
    title, message, rid_text = docstring(title), docstring(message), docstring(rid)
    flags = docstring(allow_flags(case.engine, case.user_ops))
    worst = None
    if d is not None and d.leaf is not None and d.index is not None:
        worst = (d.leaf, list(d.index))
    return f'''"""Reproduce gradspec discrepancy {rid_text}: {title}.

    {message}

Run:  python repro.py{flags}     (needs numpy and gradspec; torch for the torch listing)
Where every op has a torch twin it prints torch's gradient (computed now), a finite-difference
estimate (computed now, with torch) and what the two disagreeing oracles returned when the report
was written.  Then it checks the case again with the same oracles (gs.check, the engine and user
ops imported by their import paths) and says what it finds now:
exit 1: the disagreement is still there; exit 0: it is gone; exit 2: the case cannot run here
(a module that cannot be imported, an op defined inline, nothing to compare), with the reason.
The case is data, as in `gradspec replay`: a module it names (its engine, user ops) is imported
only when you pass --allow-import MODULE (a report folder can come from anybody).
"""
import argparse
import json
import sys

import numpy as np

try:
    import torch
except ImportError:  # the torch listing is skipped; the re-check does not need torch
    torch = None

import gradspec as gs
from gradspec._private.imports import cwd_importable

cwd_importable()  # run from the folder that holds your modules, they import (as in `gradspec replay`)


def _beside(name):
    import os

    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name), encoding="utf-8") as f:
        return f.read()


USER_OPS = {literal(dict(case.user_ops))}
ENGINE = {literal(case.engine)}
CASE_JSON = {"_beside('case.json')" if beside else literal(case.to_json(indent=None))}
INLINE_OPS = {literal(inline)}
ALLOWED = []  # modules the command line allows the case to import (--allow-import), set by main()
MODULE_OPS = {literal(why_not)}  # op -> why a gs.verify_module finding does not run here


def _arr(hexes, shape, dtype):
    return np.array([float.fromhex(h) for h in hexes], dtype=np.float64).astype(dtype).reshape(shape)


def T(op):
    twin = gs.ops.get(op).torch
    if twin is None:
        raise LookupError(f"op {{op!r}} has no torch twin (torch=)")
    return twin


VALUES = {{}} if {not beside!r} else None
{values_block}
ROOTS = {literal(list(case.roots))}
SEEDS = [{", ".join(seeds)}] if {not beside!r} else None
GRAD_LEAVES = {literal(grad_leaves)}
RECORDED = json.loads({json.dumps(json.dumps(recorded))})  # gradients the oracles returned when the report was written
PAIR = {literal(names)}
WORST = {literal(worst)}


def build(values, dtype=None):
    env = {{}}
    for name, v in values.items():
        t = torch.from_numpy(np.array(v, copy=True))
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)
        env[name] = t.requires_grad_(True) if name in GRAD_LEAVES else t
{graph_block}
    return env


def _decode(rec):
    if rec is None or "omitted" in rec:
        return None
    return np.array([float.fromhex(h) for h in rec["hex"]]).reshape(rec["shape"])


def show():
    """The torch listing: torch's gradient, finite differences and the recorded gradients, per leaf."""
    global VALUES, SEEDS
    if VALUES is None:  # a large case: its values are in case.json (its modules only as --allow-import allows)
        case = _case()
        VALUES = {{l.name: np.asarray(l.value) for l in case.leaves}}
        SEEDS = [None if s is None else np.asarray(s) for s in case.seeds]
    env = build(VALUES)
    roots = [env[r] for r in ROOTS]
    seeds = [None if s is None else torch.from_numpy(s) for s in SEEDS]
    try:
        torch.autograd.backward(roots, seeds)
        torch_grads = {{n: (None if env[n].grad is None else env[n].grad.double().numpy()) for n in GRAD_LEAVES}}
        torch_error = None
    except Exception as e:  # torch itself refuses the case: that is part of the story
        torch_grads, torch_error = {{}}, f"{{type(e).__name__}}: {{e}}"
    seed64 = [np.ones(tuple(r.shape)) if s is None else np.asarray(s, dtype=np.float64) for r, s in zip(roots, SEEDS)]

    def s_of(values):
        with torch.no_grad():
            e = build(values, torch.float64)
            return sum(float((e[r] * torch.from_numpy(g)).sum()) for r, g in zip(ROOTS, seed64))

    values64 = {{k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in VALUES.items()}}
    worst_gap, shown = 0.0, None
    for name in GRAD_LEAVES:
        x = values64[name]
        fd = np.zeros(x.shape) if x.size <= {LISTING_FD_ELEMENTS} else None
        for idx in np.ndindex(*x.shape) if fd is not None else ():
            h = 1e-6 * max(1.0, abs(float(x[idx])))
            plus = dict(values64, **{{name: x.copy()}})
            minus = dict(values64, **{{name: x.copy()}})
            plus[name][idx] += h
            minus[name][idx] -= h
            fd[idx] = (s_of(plus) - s_of(minus)) / (2 * h)
        print(f"leaf {{name}} {{x.shape}}")
        rows = [("torch backward (now)", torch_grads.get(name))]
        if fd is None:
            print(f"  {{'finite differences (now)':<42}}: skipped ({{x.size}} elements, 2 forwards each; the re-check "
                  "below compares along random directions)")
        else:
            rows.append(("finite differences (now, torch float64)", fd))
        for oracle in PAIR:
            rec = RECORDED.get(oracle, {{}})
            if "error" in rec:
                print(f"  {{oracle + ' (recorded)':<42}}: raised {{rec['error']}}")
                continue
            if "omitted" in (rec.get(name) or {{}}):
                print(f"  {{oracle + ' (recorded)':<42}}: omitted: {{rec[name]['omitted']}}")
                continue
            rows.append((oracle + " (recorded)", _decode(rec.get(name))))
        for label, g in rows:
            text = "None (no gradient)" if g is None else np.array2string(np.asarray(g).ravel(), precision=10, threshold=50)
            print(f"  {{label:<42}}: {{text}}")
        got = []
        for o in PAIR:
            if o == "torch-cpu" and torch_error is None:
                got.append(torch_grads.get(name))
            else:
                rec = RECORDED.get(o, {{}})
                got.append(None if "error" in rec else _decode(rec.get(name)))
        if len(got) == 2 and got[0] is not None and got[1] is not None and np.shape(got[0]) == np.shape(got[1]):
            with np.errstate(all="ignore"):
                gap = np.abs(got[0] - got[1])
            gap = np.where(np.isnan(got[0]) != np.isnan(got[1]), np.inf, np.nan_to_num(gap, nan=0.0))
            if gap.size and float(gap.max()) > worst_gap:
                worst_gap = float(gap.max())
                k = np.unravel_index(int(np.argmax(gap)), gap.shape)
                shown = (name, tuple(int(i) for i in k), float(got[0][k]), float(got[1][k]))
    if torch_error:
        print(f"torch raised {{torch_error}}")
    if shown is not None and worst_gap > 0:
        name, k, a, b = shown
        # what the two oracles returned then: a record, not the verdict (the re-check below decides)
        print(f"recorded when the report was written: {{PAIR[0]}} vs {{PAIR[1]}} differed at {{name}}{{list(k)}}: "
              f"{{a!r}} vs {{b!r}} (|difference| {{worst_gap:.6g}}); torch now says "
              f"{{'None' if torch_grads.get(name) is None else repr(float(np.asarray(torch_grads[name])[k]))}}")
        return True
    return any("error" in r for r in RECORDED.values())


def _case():
    """The case, its user ops imported only from modules the command line allowed."""
    return gs.Case.from_json(CASE_JSON, allow_import=ALLOWED)


def _engine(case):
    """The case's engine, through the same gate as `gradspec replay` (CaseError naming the flag otherwise)."""
    from gradspec import caseio

    return caseio.engine_for(case, None, allow_import=ALLOWED, source="repro.py")


def recheck():
    """gs.check of the case now, with the oracles of the recorded pair (the engine under test too)."""
    case = _case()
    known = set(gs.oracles.names())
    oracles = [n for n in PAIR if n in known and gs.oracles.get(n).available()[0]]
    if ENGINE in ("reference", "torch-cpu", "torch-cuda") and any(n not in known for n in PAIR):
        return None  # an engine object that was not recorded by import path: it cannot be run again here
    if ENGINE not in ("reference", "torch-cpu", "torch-cuda"):
        from gradspec.oracles.engine_oracle import EngineOracle

        label = next((n for n in PAIR if n not in known), None)
        oracles.append(EngineOracle(gs.engines.get(_engine(case)), name=label))
    if len(oracles) < 2:
        oracles = ["reference", "finite-differences"] + [o for o in oracles if not isinstance(o, str)]
    return gs.check(case, oracles=oracles)


def recheck_rule():
    """A §5 backward() rule finding: its calls (not only its values) run again on the engine."""
    from gradspec.rules import replay_rule_case

    case = _case()
    cause, code = replay_rule_case(_engine(case), case)
    print("the calls of the finding, run again:\\n" + code)
    if cause is not None:
        print(f"DISAGREEMENT: the engine still breaks the rule: {{cause.summary}} [{{cause.id}}] (exit 1)")
        return 1
    print("no disagreement any more: the engine follows torch's backward() rules on these calls (exit 0)")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description="Re-check this gradspec discrepancy (exit 1: still there, 0: gone, "
                                            "2: cannot run here).")
    p.add_argument("--allow-import", action="append", default=[], metavar="MODULE",
                   help="a module the case names (engine, user ops) that you trust to be imported (repeatable)")
    ALLOWED[:] = p.parse_args(argv).allow_import
    if MODULE_OPS:
        print("cannot run (exit 2): " + "; ".join(f"op {{op!r}}: {{why}}" for op, why in MODULE_OPS.items()))
        return 2
    if INLINE_OPS:
        print(f"cannot run (exit 2): op(s) {{INLINE_OPS}} were defined inline when the report was written (no "
              "import path); define them at module level in an importable module and find the case again")
        return 2
    if "scenario_steps" in json.loads(CASE_JSON).get("meta", {{}}):
        if ENGINE in ("reference", "torch-cpu", "torch-cuda") and any(n not in gs.oracles.names() for n in PAIR):
            print("cannot decide (exit 2): the engine of this report was not recorded by import path")
            return 2
        try:
            return recheck_rule()
        except Exception as e:  # an import, an engine or a call list that cannot be rebuilt here: say so
            print(f"cannot run (exit 2): {{type(e).__name__}}: {{e}}")
            return 2
    try:
        verdict = recheck()
    except Exception as e:  # an import, an engine or op that cannot be rebuilt here: say so
        print(f"cannot run (exit 2): {{type(e).__name__}}: {{e}}")
        return 2
    missing = [op for op in set(n["op"] for n in json.loads(CASE_JSON)["nodes"]) if gs.ops.get(op).torch is None]
    recorded = None
    if torch is None or missing:
        why = "torch is not installed" if torch is None else f"no torch twin for {{', '.join(sorted(missing))}}"
        print(f"(the torch listing is skipped: {{why}})")
    else:
        try:
            recorded = show()
        except Exception as e:  # the listing is an aid; the re-check below decides
            print(f"(the torch listing could not run: {{type(e).__name__}}: {{e}})")
    if verdict is None:
        # The engine was passed as an object (no import path): only the recorded gradients can speak.
        print(f"the engine of this report ({{', '.join(n for n in PAIR if n not in gs.oracles.names())}}) was not "
              "recorded by import path, so it is not run again: the verdict is the recorded one")
        if recorded:
            print("DISAGREEMENT (recorded, exit 1)")
            return 1
        print("cannot decide (exit 2): nothing recorded to compare, and the engine cannot be run here")
        return 2
    print("checked again now, with the same oracles (this decides the exit code):")
    if verdict.status == "disagree":
        lines = [d.message.splitlines()[0].partition(" — tolerance: ")[0] for d in verdict.discrepancies[:5]]
        lines += [f"{{name}} raised {{t}}: {{m}}" for name, (t, m, _tb) in list(verdict.errors.items())[:3]]
        for line in lines[1:]:
            print("  also: " + line)
        print("DISAGREEMENT: " + (lines[0] if lines else "the oracles disagree") + " (exit 1)")
        return 1
    if verdict.status == "inconclusive":
        print(f"cannot decide (exit 2): {{verdict.reason}}")
        return 2
    print("no disagreement any more: " + verdict.summary().splitlines()[0] + " (exit 0)")
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except KeyboardInterrupt:
        code = 130
    except SystemExit:  # argparse: --help, or a usage error it has explained
        raise
    except BaseException as e:  # never a bare traceback: the reason, and exit 2
        print(f"cannot run (exit 2): {{type(e).__name__}}: {{e}}")
        code = 2
    sys.exit(code)
'''
