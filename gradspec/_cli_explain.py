"""``gradspec explain`` and ``gradspec ops``: the two subcommands that print and check nothing.

Private to :mod:`gradspec.cli`; nothing here is public API.
"""

from __future__ import annotations

import json
import os
import sys

from ._cli_args import EXIT_OK, _data_flags, _err, _load_case, _Parser, _positive_int, _UsageError

__all__: list[str] = []


# ---------------------------------------------------------------------------------------------
# gradspec explain
# ---------------------------------------------------------------------------------------------


def _explain(argv: list) -> int:
    p = _Parser(prog="gradspec explain", allow_abbrev=False, description="What backward(seed) computes: J, the seed, J^T·seed and each "
                "input element's contributions. Inputs of an expression are options named after them: "
                "--NAME SPEC with SPEC ones:2,3 | zeros:4 | arange:2,3 | randn:2,3 | full:0.5:2,3 | a number | "
                "a nested list.", epilog='example: gradspec explain "mm(x, a)" --x ones:2,3 --a ones:3,4 '
                '--seed "[[1,2,3,4],[5,6,7,8]]"')
    p.add_argument("what", help="an expression of table ops (e.g. \"mm(x, a)\", \"sum(x * w, dim=1)\") or a case.json")
    p.add_argument("--seed", default=None, metavar="SPEC", help="the gradient passed to backward (default: none, "
                   "allowed only for one-element outputs)")
    p.add_argument("--const", action="append", default=[], metavar="NAME", help="an input that does not require grad")
    p.add_argument("--limit", type=_positive_int, default=24, metavar="N", help="input elements whose contributions "
                   "are spelled out (default 24)")
    _data_flags(p)
    args, rest = p.parse_known_args(argv)
    from ._private import limits
    from .explain import ExplainError

    try:
        with limits.limiting(args.max_elements):  # as replay: sizes refused before anything is allocated
            ex = _explain_run(args, rest)
    except (ExplainError, _UsageError, limits.SizeError) as e:
        return _err(str(e))
    try:
        print(ex.text(limit=args.limit))
    except BrokenPipeError:  # `gradspec explain ... | head`
        sys.stdout = open(os.devnull, "w")
    return EXIT_OK


def _explain_run(args, rest: list):
    from .explain import ExplainError, explain, parse_array

    inputs = _explain_inputs(rest)
    if args.what.endswith(".json") or os.path.isfile(args.what):
        if inputs or args.seed is not None:
            raise ExplainError("a case file carries its own values and seeds: give no --NAME / --seed with it")
        from ._private import imports

        with imports.allowing(list(args.allow_import)):
            return _explain_case_file(args.what, list(args.allow_import))
    for mod in args.allow_import:  # the user's modules named on this command line: importing them registers their ops
        _import_ops_module(mod)
    seed = None if args.seed is None else parse_array(args.seed, f"--seed {args.seed}")
    return explain(args.what, seed=seed, requires_grad={c: False for c in args.const}, **inputs)


def _import_ops_module(mod: str) -> None:
    """Import ``mod`` (or the module of ``mod:attr``) so that the gs.Op objects it defines are known to an
    expression: before, `gradspec explain "t7_lse(x)" --allow-import np_ops` said "unknown op" (tryout7 #13e)."""
    import importlib

    from .explain import ExplainError

    name = mod.partition(":")[0]
    try:
        importlib.import_module(name)
    except ImportError as e:
        raise ExplainError(f"--allow-import {mod}: cannot import module {name!r}: {e}. Run from the folder that holds "
                           "it, or put it on PYTHONPATH") from None


def _explain_case_file(path: str, allow: list):
    """explain of a saved case, with what the code under test returns beside J^T·seed (and the finding
    recorded next to it, when the case comes from a report folder)."""

    from . import caseio
    from ._private import jsondata
    from ._private.inert import printable
    from ._private.records import RECORD_LIMIT
    from .explain import code_gradients, explain

    try:
        case = _load_case(path)
    except _UsageError as e:
        if "--allow-import" not in str(e):
            raise
        # (J itself comes from the ops' forward: for a user op or torch Function that is the module's code)
        raise _UsageError(f"{e}. explain computes J by running each op's forward, and this op's forward is code in "
                          "that module, so without it nothing of the case can be shown") from None
    ex = explain(case)
    try:
        caseio.engine_for(case, None, allow_import=allow, source=path)
        ex.code, ex.code_label = code_gradients(case)
    except caseio.CaseError as e:
        ex.code_label = f"not run: {e}"
    try:
        rec = jsondata.read(os.path.join(os.path.dirname(os.path.abspath(path)), "discrepancy.json"),
                            RECORD_LIMIT).get("discrepancy") or {}  # (a FIFO, a link, a deep nest: left out)
        cause = rec.get("cause") or {}
        finding = f"{rec.get('kind')} ({' vs '.join(map(str, rec.get('oracles') or []))}): {cause.get('summary') or rec.get('message')}"
        ex.finding = printable(finding)  # (a report folder is data from anywhere, as its case.json)
    except (OSError, ValueError, AttributeError, TypeError, RecursionError):
        pass  # a case file on its own
    return ex


def _explain_inputs(rest: list) -> dict:
    from .explain import ExplainError, parse_array

    inputs, k = {}, 0
    while k < len(rest):
        opt = rest[k]
        if not opt.startswith("--") or len(opt) < 3:
            raise ExplainError(f"unexpected argument {opt!r}: inputs are given as --NAME SPEC (e.g. --x ones:2,3)")
        name, eq, value = opt[2:].partition("=")
        if not eq:
            if k + 1 >= len(rest):
                raise ExplainError(f"--{name} needs a value (e.g. --{name} ones:2,3)")
            value, k = rest[k + 1], k + 1
        if not name.isidentifier():
            raise ExplainError(f"--{name}: an input name must be a Python identifier")
        inputs[name] = parse_array(value, f"--{name} {value}")
        k += 1
    return inputs


# ---------------------------------------------------------------------------------------------
# gradspec ops
# ---------------------------------------------------------------------------------------------


def _ops(args) -> int:
    import gradspec as gs

    rows = []
    for spec in gs.ops.specs():
        oracles = ["reference", "finite-differences"]
        if spec.jvp is not None:
            oracles.append("jacobian")
        if spec.torch is not None:
            oracles += ["torch-cpu", "torch-cuda"]
        doms = spec.domains_for(spec.arity or 1)
        rows.append({
            "name": spec.name,
            "family": spec.family,
            "signature": spec.public_signature,
            "shapes": spec.signature or ("shape rule" if spec.shape_fn is not None else "elementwise"),
            "torch": spec.torch_name,
            "domain": "; ".join(d.describe() for d in doms),
            "saves": spec.saves if isinstance(spec.saves, bool) else "depends on params",
            "oracles": oracles,
            "notes": spec.notes,
        })
    if args.json:
        print(json.dumps(rows, indent=1))
        return EXIT_OK
    w_sig = min(44, max((len(r["signature"]) for r in rows), default=10))
    print(f"{'op':<16} {'signature':<{w_sig}} {'domain':<28} oracles")
    for r in rows:
        sig = r["signature"] if len(r["signature"]) <= w_sig else r["signature"][: w_sig - 1] + "…"
        dom = r["domain"] if len(r["domain"]) <= 28 else r["domain"][:27] + "…"
        print(f"{r['name']:<16} {sig:<{w_sig}} {dom:<28} {', '.join(r['oracles'])}")
    print(f"\n{len(rows)} ops (torch-cuda needs a CUDA device). `gradspec ops --json` adds shapes, torch names, "
          "saved tensors and tie/kink notes.")
    return EXIT_OK
