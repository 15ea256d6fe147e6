"""Every finding replays: case.json names the engine, user ops and torch Functions by import path;
`gradspec replay` reproduces findings of verify_*; repro.py exits 1 / 0 / 2 and never shows a bare
traceback; what was defined inline is refused with the reason (exit 2)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import gradspec as gs
from tests._pipeline_engines import ExpDoubled

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run(args, cwd, extra_path=()):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *map(str, extra_path)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.pop("GRADSPEC_REPORT_DIR", None)
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def replay(case_json, cwd, *allow, extra_path=()):
    flags = [a for m in allow for a in ("--allow-import", m)]
    return run(["-m", "gradspec.cli", "replay", case_json, *flags], cwd, extra_path)


def first_case(result, tmp_path) -> pathlib.Path:
    index = pathlib.Path(result.write_html(str(tmp_path / "rep")))
    cases = sorted(index.parent.glob("d-*/case.json"))
    assert cases, "no case.json written"
    return cases[0]


def test_verify_engine_findings_record_and_replay_the_engine(tmp_path):
    r = gs.verify_engine(ExpDoubled(), max_examples=20, seed=0)
    assert any(d.case is not None for d in r.discrepancies), r.summary()
    case = first_case(r, tmp_path)
    assert json.loads(case.read_text())["engine"] == "tests._pipeline_engines:ExpDoubled"  # was "reference"
    p = replay(case, tmp_path, "tests._pipeline_engines")
    assert p.returncode == 1, p.stdout + p.stderr
    # the cause is said on replay too, not only when the finding was made (CONTRACT §8)
    assert "cause: wrong-vjp: node " in p.stdout and "'exp'" in p.stdout, p.stdout
    text = (case.parent / "repro.py").read_text()
    assert "exit 1" in text and "exit 0" in text and "exit 2" in text  # what repro.py's status means


def test_an_inline_engine_is_refused_on_replay_with_the_reason(tmp_path):
    class Inline(ExpDoubled):
        name = "inline"

    r = gs.verify_engine(Inline(), max_examples=20, seed=0)
    assert any("defined in __main__ or inside a function" in n for n in r.notes)
    p = replay(first_case(r, tmp_path), tmp_path)
    assert p.returncode == 2 and "inline" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_verify_torch_function_findings_replay_by_import_path(tmp_path):
    from tests._planted import SquareNoSeed

    r = gs.verify_torch_function(SquareNoSeed.apply, max_examples=20, seed=0)
    assert not r.ok
    case = first_case(r, tmp_path)
    assert "tests._planted:SquareNoSeed" in json.loads(case.read_text())["user_ops"].values()
    p = replay(case, tmp_path, "tests._planted")
    assert p.returncode == 1, p.stdout + p.stderr


BUGGY = """
import gradspec as gs
plop = gs.Op("plop", forward=lambda x: x ** 3, vjp=lambda g, x, out: ({factor} * x ** 2 * g,))
"""


def test_repro_of_a_user_op_without_torch_twin_exits_1_then_0_then_2(tmp_path, monkeypatch):
    mod = tmp_path / "plmod.py"
    mod.write_text(BUGGY.format(factor=2))
    monkeypatch.syspath_prepend(str(tmp_path))
    import plmod

    r = gs.verify_op(plmod.plop, max_examples=20, seed=0)
    assert not r.ok
    repro = first_case(r, tmp_path).parent / "repro.py"
    p = run([repro, "--allow-import", "plmod"], tmp_path, [tmp_path])
    assert p.returncode == 1 and "Traceback" not in p.stdout + p.stderr, p.stdout + p.stderr
    mod.write_text(BUGGY.format(factor=3))  # fixed
    p = run([repro, "--allow-import", "plmod"], tmp_path, [tmp_path])
    assert p.returncode == 0 and "Traceback" not in p.stdout + p.stderr, p.stdout + p.stderr
    mod.unlink()  # cannot run any more: says why
    p = run([repro, "--allow-import", "plmod"], tmp_path, [tmp_path])
    assert p.returncode == 2 and "plmod" in p.stdout + p.stderr and "Traceback" not in p.stdout + p.stderr
    del sys.modules["plmod"]


def _rule_case(tmp_path) -> pathlib.Path:
    from tests._planted import NoReset

    r = gs.verify_engine(NoReset(), max_examples=20, seed=0)
    index = pathlib.Path(r.write_html(str(tmp_path / "rep")))
    for case in sorted(index.parent.glob("d-*/case.json")):
        if "scenario_steps" in json.loads(case.read_text())["meta"]:
            return case
    raise AssertionError(f"no §5 rule finding written: {r.summary()}")


def test_a_rule_finding_replays_its_calls_not_only_its_values(tmp_path):
    # Its values alone agree (zero_grad is not part of a value check): replaying the values only
    # said "agree" (exit 0) for an engine that still ignores zero_grad.
    case = _rule_case(tmp_path)
    p = replay(case, tmp_path, "tests._planted")
    assert p.returncode == 1 and "[reset-ignored]" in p.stdout and "eng.zero_grad(" in p.stdout, p.stdout + p.stderr
    fixed = run(["-m", "gradspec.cli", "replay", case, "--engine", "reference"], tmp_path)
    assert fixed.returncode == 0 and "now follows torch's backward() rules" in fixed.stdout, fixed.stdout + fixed.stderr
    rp = run([case.parent / "repro.py", "--allow-import", "tests._planted"], tmp_path)
    assert rp.returncode == 1 and "[reset-ignored]" in rp.stdout, rp.stdout + rp.stderr


def test_a_tampered_rule_call_list_is_refused_before_anything_runs(tmp_path):
    case = _rule_case(tmp_path)
    d = json.loads(case.read_text())
    d["meta"]["scenario_steps"][0]["target"] = "__import__('os').system('echo pwned')"
    case.write_text(json.dumps(d))
    p = replay(case, tmp_path, "tests._planted")
    assert p.returncode == 2 and "is not a node or leaf of the case" in p.stderr, p.stdout + p.stderr
    # named in the message (repr), never run: no line of output is the command's own "pwned"
    assert "pwned" not in (p.stdout + p.stderr).split() and "Traceback" not in p.stderr
