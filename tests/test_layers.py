"""The package's layers: every module imports only its own layer and the ones below; no cycles.

Each module's imports (module level and inside functions; ``if TYPE_CHECKING:`` blocks aside)
are read with ``ast``, so a lazy ``from . import report`` inside a function counts like any other.
The table is the layout documented in the README ("Layout"), lowest layer first:

====  ============  ================================================================================
 0    base          gradspec._private.* (except prologue), causes, tolerances, domains, profiles
 1    spec          gradspec.spec.* (OpSpec, the op table), case (a graph + values as data), caseio
                    (case files opened as data: the import gate, the size limit)
 2    engine        gradspec.engine (the numpy reverse-mode engine; its Tensor and Node in _engine_tensor)
 3    ops           gradspec.ops.* (the op families fill the table), functional, engines (adapters)
 4    oracles       gradspec.oracles.* (reference, FD, jacobian, FD-jacobian, torch, engine oracle),
                    _private.prologue
 5    comparison    check (one case through oracles: a Verdict; its private parts _check_rules, _check_noise,
                    _check_lazy, _check_precision, _check_claim,
                    _check_nonfinite), guard (check with timeouts),
                    diagnose (the cause of a finding; its private parts _diagnose_*), explain (J, the seed
                    and J^T·seed spelled out), outcome (the verdict rules: what is a discrepancy, what is
                    excused, why inconclusive)
 6    strategies    strategies (Hypothesis strategies for cases)
 7    search        result (Result, VerifyDiscrepancy), search (the Hypothesis round driver),
                    semantics (backward() rules as checks)
 8    entry points  gradspec.verify.* (verify_op/_torch_function/_engine), gradspec.fuzz.* (campaigns)
 9    report        report (HTML), report_views, report_repro (repro.py), result_html (Result.write_html's writer), ci_outputs,
                    report_cause (a page's headline: the cause, the fix, |difference| / tolerance maps)
10    front ends    cli (+ _cli_args, _cli_explain), pytest_plugin, testing (assert_gradients), gradspec (the package facade)
====  ============  ================================================================================

A new module gets a row here (or falls under a package prefix); the test names what to do.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import gradspec

ROOT = pathlib.Path(gradspec.__file__).parent

BASE, SPEC, ENGINE, OPS, ORACLES, COMPARISON, STRATEGIES, SEARCH, ENTRY, REPORT, FRONT = range(11)
LAYER_NAMES = ["base", "spec", "engine", "ops", "oracles", "comparison", "strategies", "search", "entry points",
               "report", "front ends"]

# Exact module names first, then package prefixes (the longest matching prefix wins).
MODULES = {
    "gradspec": FRONT,
    "gradspec.causes": BASE,
    "gradspec.tolerances": BASE,
    "gradspec.domains": BASE,
    "gradspec.profiles": BASE,
    "gradspec._private.prologue": ORACLES,  # the oracles' quiet-FP region (wraps the engine's)
    "gradspec.case": SPEC,
    "gradspec.caseio": SPEC,
    "gradspec.engine": ENGINE,
    "gradspec._engine_tensor": ENGINE,  # the engine's Tensor and Node (the engine binds its entry points there)
    "gradspec.functional": OPS,
    "gradspec.engines": OPS,
    "gradspec.check": COMPARISON,
    "gradspec._check_rules": COMPARISON,  # check's private parts: the verdict rules that discount a comparison,
    "gradspec._check_noise": COMPARISON,  # the rounding-noise floor measured on a failing comparison
    "gradspec._check_lazy": COMPARISON,  # the pairs compared before an estimate's deferred error bound is computed
    "gradspec._check_precision": COMPARISON,  # each leaf gradient's precision; what a mixed-precision rule rounds
    "gradspec._check_claim": COMPARISON,  # a claimed accuracy's scale: |path terms| through the code under test
    "gradspec._check_nonfinite": COMPARISON,  # gradient elements NaN/inf in every oracle: not compared, said
    "gradspec.guard": COMPARISON,
    "gradspec.diagnose": COMPARISON,
    "gradspec._diagnose_text": COMPARISON,  # diagnose's private parts: wording, engine hypotheses,
    "gradspec._diagnose_engine": COMPARISON,  # findings outside check(), raw gradients of the code under test
    "gradspec._diagnose_findings": COMPARISON,
    "gradspec._diagnose_raw": COMPARISON,
    "gradspec._diagnose_points": COMPARISON,  # other input points: a factor's constancy, float32-only rules
    "gradspec.explain": COMPARISON,
    "gradspec.outcome": COMPARISON,
    "gradspec.result": SEARCH,
    "gradspec.search": SEARCH,
    "gradspec.semantics": SEARCH,
    "gradspec.findings": SEARCH,
    "gradspec.report": REPORT,
    "gradspec.result_html": REPORT,
    "gradspec.report_cause": REPORT,
    "gradspec.report_repro": REPORT,
    "gradspec.report_views": REPORT,
    "gradspec.ci_outputs": REPORT,
    "gradspec.cli": FRONT,
    "gradspec._cli_args": FRONT,  # the command line's shared parts (exit codes, argument types, loading a case)
    "gradspec._cli_explain": FRONT,  # gradspec explain and gradspec ops
    "gradspec._cli_finish": FRONT,  # how gradspec fuzz ends: summary, CI outputs, printing, the exit code
    "gradspec._cli_entry": FRONT,  # Ctrl-C while `import gradspec` runs, in the gradspec command: exit 130
    "gradspec.__main__": FRONT,
    "gradspec.pytest_plugin": FRONT,
    "gradspec.testing": FRONT,
}
PACKAGES = {
    "gradspec._private": BASE,
    "gradspec.spec": SPEC,
    "gradspec.ops": OPS,
    "gradspec.oracles": ORACLES,
    "gradspec.strategies": STRATEGIES,  # a package: public API in __init__, builder/values/hard regions
    "gradspec.verify": ENTRY,
    "gradspec.fuzz": ENTRY,
    "gradspec.rules": SEARCH,  # the §5 rules as Hypothesis searches, and the engine diagnosis
}


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULE_FILES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def layer_of(mod: str) -> int | None:
    if mod in MODULES:
        return MODULES[mod]
    best = None
    for prefix, layer in PACKAGES.items():
        if (mod == prefix or mod.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, layer)
    return None if best is None else best[1]


def _type_checking_blocks(tree) -> set:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for n in ast.walk(node)}
    return skip


def imports_of(mod: str) -> list[tuple[str, int]]:
    """(imported gradspec module, line) for every import statement of ``mod``."""
    path = MODULE_FILES[mod]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_blocks(tree)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "gradspec"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "gradspec":
                continue
            # `from pkg import sub` imports the submodule `pkg.sub` when there is one.
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULE_FILES]
            out += [(s, node.lineno) for s in subs] or [(target, node.lineno)]
    return out


def test_every_module_has_a_layer():
    missing = [m for m in MODULE_FILES if layer_of(m) is None]
    assert not missing, (f"modules without a layer: {missing}; add each to MODULES (or PACKAGES) in "
                         "tests/test_layers.py and to the README's Layout table")


@pytest.mark.parametrize("mod", sorted(MODULE_FILES))
def test_imports_only_lower_layers(mod):
    mine = layer_of(mod)
    if mine is None:
        pytest.fail(f"{mod} has no layer (see test_every_module_has_a_layer)")
    bad = []
    for target, line in imports_of(mod):
        theirs = layer_of(target)
        if theirs is not None and theirs > mine:
            bad.append(f"line {line}: {target} ({LAYER_NAMES[theirs]}) from {mod} ({LAYER_NAMES[mine]})")
    assert not bad, "imports of a higher layer:\n" + "\n".join(bad)


def _cycles(graph: dict) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                found.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    return found


def test_no_import_cycles():
    graph = {m: {t for t, _ in imports_of(m) if t in MODULE_FILES and t != m} for m in MODULE_FILES}
    # A package's __init__ importing its own submodules is how packages work, not a cycle
    # unless a submodule imports the package back; both edges stay in the graph.
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_checker_sees_lazy_and_relative_imports(tmp_path, monkeypatch):
    # The checker itself: function-level relative imports, `from . import sub` and absolute ones.
    p = tmp_path / "probe.py"
    p.write_text("import gradspec.check\n\ndef f():\n    from . import report\n    from .verify import op\n")
    monkeypatch.setitem(MODULE_FILES, "gradspec.probe", p)
    got = {t for t, _ in imports_of("gradspec.probe")}
    assert got == {"gradspec.check", "gradspec.report", "gradspec.verify.op"}
