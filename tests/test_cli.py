"""The ``gradspec`` command line, through real subprocesses: exit codes, summary.json, report files, replay.

A planted bug comes from a user engine module on PYTHONPATH (``--engine gsplant:bug``): the
reference engine with a wrong derivative for one op, the honest way to get a discrepancy out of a
subprocess.  The same module (``PLANT_SRC``) serves tests/test_faults.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

PLANT_SRC = textwrap.dedent(
    '''
    """Engines with planted bugs and faults for gradspec's command-line tests."""
    import os
    import time

    import numpy as np

    from gradspec import engine as E
    from gradspec.engines import ReferenceEngine


    class Planted(ReferenceEngine):
        """The reference engine with d(bug_op)/dx off by +0.5, and faults keyed by op.

        faults: op -> "raise" | "hang" | "die" | "segv" | "slow" (when the op is applied) or
        "nan" | "shape" | "type" (what grad() returns for cases that contain the op).
        only_worker: arm the faults only in this xdist worker (e.g. "gw0").
        """

        def __init__(self, name, bug_op="exp", faults=None, only_worker=None):
            self.name = name
            self.bug_op = bug_op
            self.faults = dict(faults or {})
            self.only_worker = only_worker
            self._ops = set()
            self._phase = "build"

        def _armed(self):
            return self.only_worker is None or os.environ.get("PYTEST_XDIST_WORKER") == self.only_worker

        def leaf(self, value, requires_grad=True):
            if self._phase == "grad":
                self._ops, self._phase = set(), "build"
            return super().leaf(value, requires_grad)

        def apply(self, op, *args, **params):
            self._ops.add(op)
            fault = self.faults.get(op) if self._armed() else None
            if fault == "raise":
                raise ValueError("planted <script>alert('x')</script> failure")
            if fault == "hang":
                time.sleep(600)
            if fault == "die":
                os._exit(7)
            if fault == "segv":
                import ctypes
                ctypes.string_at(0)
            if fault == "slow":
                time.sleep(0.3)
            y = E.call(op, *args, **params)
            if op == self.bug_op:
                x = args[0]
                y = y + (x - x.detach()) * 0.5
            return y

        def grad(self, leaf):
            self._phase = "grad"
            g = super().grad(leaf)
            if g is None or not self._armed():
                return g
            for op, fault in self.faults.items():
                if op in self._ops:
                    if fault == "nan":
                        return g * np.nan
                    if fault == "shape":
                        return np.zeros(g.shape + (2,))
                    if fault == "type":
                        return "not an array"
            return g


    bug = Planted("planted", bug_op="exp")
    raising = Planted("raising", bug_op="mul", faults={"exp": "raise"})
    hanging = Planted("hanging", bug_op="mul", faults={"exp": "hang"})
    nan = Planted("nan", bug_op="mul", faults={"exp": "nan"})
    shape = Planted("shape", bug_op="mul", faults={"exp": "shape"})
    wrongtype = Planted("wrongtype", bug_op="mul", faults={"exp": "type"})
    dying = Planted("dying", bug_op="mul", faults={"exp": "die"}, only_worker="gw0")
    segv = Planted("segv", bug_op="mul", faults={"exp": "segv"})
    slow = Planted("slow", bug_op="mul", faults={"exp": "slow", "add": "slow"})


    def _oracle():
        from gradspec.oracles import Oracle, get

        class Flaky(Oracle):
            """An oracle that raises on every case with exp, else agrees with the reference."""
            name = "flaky-oracle"

            def vjp(self, case):
                if "exp" in case.ops:
                    raise RuntimeError("flaky oracle <b>failed</b>")
                return get("reference").vjp(case)

        return Flaky()


    flaky_oracle = _oracle()
    '''
)

FAST_ORACLES = "reference,jacobian"  # no torch import: subprocesses start in ~1 s


def plant(directory) -> dict:
    """Write the planted-engine module into ``directory``; returns the environment to run gradspec with."""
    (directory / "gsplant.py").write_text(PLANT_SRC)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(directory)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.pop("GRADSPEC_REPORT_DIR", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def gradspec(*args, cwd, env=None, timeout=180, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradspec.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, **kw)


def start(*args, cwd, env=None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gradspec.cli", *map(str, args)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def summary(report_dir) -> dict:
    return json.loads((report_dir / "summary.json").read_text())


def folders(report_dir) -> list:
    return sorted(p for p in report_dir.iterdir() if p.is_dir() and p.name.startswith("d-"))


# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """One campaign against the planted exp bug, shared by the tests below."""
    root = tmp_path_factory.mktemp("planted")
    env = plant(root)
    out = root / "reports"
    proc = gradspec("fuzz", "--engine", "gsplant:bug", "--ops", "exp,mul,add", "--max-examples", 25,
                    "--oracles", FAST_ORACLES, "--seed", 7, "--report-dir", out, cwd=root, env=env)
    return root, env, out, proc


def test_planted_bug_exits_1_with_one_report(planted):
    root, env, out, proc = planted
    assert proc.returncode == 1, proc.stderr
    s = summary(out)
    assert s["discrepancies"] == 1 and s["cases"] == 25
    assert set(s["ops"]) == {"exp", "mul", "add"} and sum(s["ops"].values()) > 0
    # every case counted but those that exercised no gradient (roots seeded with zeros, say)
    assert s["counted"] + sum(s["not_counted"].values()) == 25 and s["counted"] >= 20, s["not_counted"]
    assert s["oracles"]["reference vs planted"] == s["counted"]
    assert s["agreement"]["reference vs jacobian"] == s["counted"]
    assert s["agreement"]["reference vs planted"] < 25
    # Every report is the planted exp bug, deduplicated: one per op set, shrunk (the first is exp alone).
    assert s["reports"] and all(r["kind"] == "value" and "exp" in r["ops"] and sorted(r["oracles"]) ==
                                ["planted", "reference"] for r in s["reports"]), s["reports"]
    rep = _smallest(s)
    assert rep["ops"] == ["exp"], rep
    # A report found on a bigger case (say add + exp) before exp alone showed up is listed as superseded.
    assert all(r["superseded_by"] == rep["id"] and "exp" in r["ops"] for r in s["superseded"])
    folder = out / rep["id"]
    assert {f.name for f in folders(out)} == {r["id"] for r in s["reports"] + s["superseded"]}
    for name in ("index.html", "case.json", "repro.py", "discrepancy.json"):
        assert (folder / name).stat().st_size > 0
    assert (out / "index.html").exists()
    # The one-screen summary names the report and how to replay it.
    assert f"gradspec replay {folder / 'case.json'} --allow-import gsplant" in proc.stdout
    assert f"{len(s['reports'])} discrepanc" in proc.stdout
    # Plain progress lines on a non-terminal, and the report announced as soon as it was written.
    assert "cases, " in proc.stderr and "/s, " in proc.stderr
    assert f"discrepancy {folder.name}" in proc.stderr


def _smallest(s):
    return min(s["reports"], key=lambda r: (len(r["ops"]), r["id"]))


def _reported(out):
    return out / _smallest(summary(out))["id"]


def test_replay_exits_1_while_it_disagrees_and_0_with_a_correct_engine(planted):
    root, env, out, proc = planted
    folder = _reported(out)
    case = folder / "case.json"
    assert json.loads(case.read_text())["engine"] == "gsplant:bug"
    # A case file is data: the engine it names is imported only when the command line allows it.
    refused = start("replay", case, "--oracles", FAST_ORACLES, cwd=root, env=env)
    bad = start("replay", case, "--allow-import", "gsplant", "--oracles", FAST_ORACLES, cwd=root, env=env)
    good = start("replay", case, "--engine", "reference", "--oracles", FAST_ORACLES, cwd=root, env=env)
    as_json = start("replay", case, "--json", "--engine", "gsplant:bug", "--oracles", FAST_ORACLES, cwd=root, env=env)
    r_out, r_err = refused.communicate(timeout=120)
    b_out, b_err = bad.communicate(timeout=120)
    g_out, g_err = good.communicate(timeout=120)
    j_out, j_err = as_json.communicate(timeout=120)
    assert refused.returncode == 2 and "'gsplant'" in r_err and "--allow-import gsplant" in r_err, r_err
    assert "Traceback" not in r_err
    assert bad.returncode == 1, b_err
    assert "still disagrees" in b_out and "reference vs planted" in b_out
    assert good.returncode == 0, g_out + g_err
    assert as_json.returncode == 1
    verdict = json.loads(j_out)
    assert verdict["ok"] is False and verdict["discrepancies"][0]["kind"] == "value"


def test_repro_script_shows_the_disagreement(planted):
    root, env, out, proc = planted
    folder = _reported(out)
    run = subprocess.run([sys.executable, str(folder / "repro.py"), "--allow-import", "gsplant"], cwd=folder, env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    # The planted engine is off by exactly 0.5; torch (run live) sides with the reference.
    line = next(l for l in run.stdout.splitlines() if l.startswith("recorded when the report was written"))
    assert "reference vs planted" in line and "|difference| 0.5" in line and "torch now says" in line
    # the verdict of the re-check comes last, and decides
    assert run.stdout.splitlines()[-1].startswith("DISAGREEMENT: reference vs planted"), run.stdout


def test_repro_script_after_the_fix_labels_the_recording_and_says_it_is_gone(planted, tmp_path):
    """After the fix, repro.py shows what was recorded as recorded (no "DISAGREEMENT" line before
    "no disagreement any more"): the re-check's verdict is the one line that counts."""
    root, env, out, proc = planted
    folder = _reported(out)
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    (fixed / "gsplant.py").write_text(PLANT_SRC.replace('bug = Planted("planted", bug_op="exp")',
                                                        'bug = Planted("planted", bug_op="no-such-op")'))
    path = [str(fixed)] + [p for p in env["PYTHONPATH"].split(os.pathsep) if p != str(root)]
    run = subprocess.run([sys.executable, str(folder / "repro.py"), "--allow-import", "gsplant"], cwd=fixed,
                         env=dict(env, PYTHONPATH=os.pathsep.join(path)), capture_output=True, text=True, timeout=120)
    lines = run.stdout.splitlines()
    assert run.returncode == 0 and "DISAGREEMENT" not in run.stdout, run.stdout + run.stderr
    assert any(l.startswith("recorded when the report was written") and "|difference| 0.5" in l for l in lines)
    assert lines[-1].startswith("no disagreement any more") and lines[-1].endswith("(exit 0)"), run.stdout


def test_repro_script_imports_modules_of_the_working_directory(planted):
    """`python <report>/repro.py` run from the folder that holds the user's module finds it, as
    `gradspec replay` does (before: "cannot import module 'gsplant' ... on PYTHONPATH?", exit 2)."""
    root, env, out, proc = planted
    folder = _reported(out)
    bare = dict(env, PYTHONPATH=os.pathsep.join(p for p in env["PYTHONPATH"].split(os.pathsep) if p != str(root)))
    run = subprocess.run([sys.executable, str(folder / "repro.py"), "--allow-import", "gsplant"], cwd=root, env=bare, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 1 and "cannot import" not in run.stdout, run.stdout + run.stderr
    elsewhere = subprocess.run([sys.executable, str(folder / "repro.py"), "--allow-import", "gsplant"], cwd=folder, env=bare, capture_output=True,
                               text=True, timeout=120)
    assert elsewhere.returncode == 2 and "cannot import module 'gsplant'" in elsewhere.stdout, elsewhere.stdout


def test_explain_imports_modules_of_the_working_directory(tmp_path, monkeypatch, capsys):
    """`gradspec explain case.json --allow-import MOD` finds MOD in the current directory, as replay does."""
    import numpy as np

    import gradspec as gs
    from gradspec import cli

    (tmp_path / "gscwdop.py").write_text("import gradspec as gs\ncwd_triple = gs.Op('cwd_triple', "
                                         "forward=lambda x: 3 * x, vjp=lambda g, x, out: (3 * g,))\n")
    d = json.loads(gs.Case.build({"x": np.array([1.0, 2.0])}, [("y", "exp", ["x"], {})], ["y"],
                                 [np.array([1.0, 0.5])]).to_json())
    d["nodes"][0]["op"] = "cwd_triple"
    d["user_ops"] = {"cwd_triple": "gscwdop:cwd_triple"}
    (tmp_path / "case.json").write_text(json.dumps(d))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "gscwdop", raising=False)
    rc = cli.main(["explain", "case.json", "--allow-import", "gscwdop"])
    cap = capsys.readouterr()
    assert rc == 0 and "x.grad = [3. , 1.5]" in cap.out, cap.out + cap.err
    monkeypatch.delitem(sys.modules, "gscwdop", raising=False)


def test_rerun_replays_saved_failures_first_and_keeps_the_report(planted):
    root, env, out, proc = planted
    folder = _reported(out)
    before = folders(out)
    ids = sorted(r["id"] for r in summary(out)["reports"])
    first_found = json.loads((folder / "discrepancy.json").read_text())["first_found"]
    again = gradspec("fuzz", "--engine", "gsplant:bug", "--ops", "exp,mul,add", "--max-examples", 5,
                     "--oracles", FAST_ORACLES, "--seed", 8, "--report-dir", out, cwd=root, env=env)
    assert again.returncode == 1, again.stderr
    s = summary(out)
    assert {"id": folder.name, "status": "still present"} in s["previous"]
    assert s["replayed"] >= 1  # Hypothesis' database reuse phase ran the saved failure first
    assert s["shrink_runs"] == 0  # nothing new to shrink: the known bug is not hunted again
    assert sorted(r["id"] for r in s["reports"]) == ids
    assert folders(out) == before  # merged into the same folders, nothing lost, nothing new
    assert json.loads((folder / "discrepancy.json").read_text())["first_found"] == first_found
    assert folder.name in (out / "index.html").read_text()


def test_clean_campaign_exits_0_with_summary_and_index(tmp_path):
    out = tmp_path / "r"
    proc = gradspec("fuzz", "--ops", "exp,mul,sum", "--max-examples", 12, "--oracles",
                    "reference,jacobian,finite-differences", "--seed", 3, "--report-dir", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = summary(out)
    for key in ("cases", "discrepancies", "seconds", "ops", "oracles"):
        assert key in s
    assert s["cases"] == 12 and s["discrepancies"] == 0 and s["seconds"] > 0
    assert set(s["ops"]) == {"exp", "mul", "sum"}
    assert set(s["oracles"]) == {"reference vs jacobian", "reference vs finite-differences",
                                 "finite-differences vs jacobian"} or len(s["oracles"]) == 3
    assert s["seed"] == 3 and s["engine"] == "reference"
    assert folders(out) == []
    html = (out / "index.html").read_text()
    assert "Coverage per op" in html and "Agreement per oracle pair" in html and "None in this run" in html
    assert "no discrepancy" in proc.stdout


TIE_KINK = "exact tie/kink at a node: no derivative exists there (only the exact oracles compare, on torch's convention)"


def test_skip_reasons_are_whole_and_counted_by_kind(tmp_path):
    """Skipped oracles at ties and kinks: summary.json keeps each reason whole (it was cut mid-word:
    "... (only the exac"), and the terminal counts them by kind with an example node (it had one
    entry per node name: v0 = abs(x0), v1 = abs(x1), ...)."""
    out = tmp_path / "r"
    # (reductions: at the kinks of gradspec's own elementwise ops finite differences no longer step aside whole)
    proc = gradspec("fuzz", "--ops", "amax,amin,max,exp", "--max-examples", 60, "--oracles",
                    "reference,finite-differences,jacobian", "--seed", 2, "--report-dir", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    skipped = summary(out)["skipped"]
    fd = {k: n for k, n in skipped.items() if k.startswith("finite-differences: exact tie/kink at ")}
    assert len(fd) > 1 and all(k.endswith("on torch's convention)") for k in skipped), skipped
    line = next(l for l in proc.stdout.splitlines() if "skipped oracles" in l)
    top = max(fd, key=fd.get).split(" at ", 1)[1].split(":", 1)[0]  # the most frequent reason's node
    assert f"finite-differences: {TIE_KINK} ({sum(fd.values())} cases, e.g. {top})" in line, line
    assert line.count("finite-differences:") == 1, line


def test_ops_never_generated_are_a_warning_with_the_fix_and_keep_exit_0(tmp_path):
    # 1 case over 8 ops: most ops are never drawn, and the run must not read as "all tested"
    out = tmp_path / "r"
    proc = gradspec("fuzz", "--ops", "exp,mul,sum,tanh,sin,cos,neg,sub", "--max-examples", 1, "--oracles",
                    FAST_ORACLES, "--seed", 1, "--report-dir", out, cwd=tmp_path)
    never = sorted(o for o, n in summary(out)["ops"].items() if not n)
    assert proc.returncode == 0 and never, proc.stdout + proc.stderr
    warning = next(l for l in proc.stdout.splitlines() if l.strip().startswith("WARNING:"))
    assert f"{len(never)} of 8 ops were never generated" in warning and ", ".join(never) in warning
    assert "--max-examples 100" in warning and "--seconds" in warning and f"--ops {','.join(never)}" in warning


@pytest.mark.parametrize("dtype, want", [("float32", {"float32"}), ("mixed", {"mixed", "float64"})])
def test_fuzz_dtype_picks_the_precision_and_summary_counts_it(tmp_path, dtype, want):
    # --dtype reaches the strategies; summary.json counts cases per precision and the tie/kink exclusions
    # ("mixed" falls back to float64 for a graph whose ops all need one dtype, e.g. a single leaf)
    from gradspec import cli

    out = tmp_path / "r"
    rc = cli.main(["fuzz", "--ops", "add,mul,maximum,relu,sum", "--max-examples", "40", "--dtype", dtype,
                   "--oracles", "reference,jacobian,finite-differences,torch-cpu", "--seed", "1",
                   "--report-dir", str(out), "-q"])
    hard = summary(out)["hard_regions"]
    assert rc == 0 and hard["cases"] == 40 and sum(hard["dtypes"].values()) == 40
    assert set(hard["dtypes"]) <= want and dtype in hard["dtypes"], hard
    assert set(hard["excluded_at_ties_kinks"].values()) <= {hard["tie_kink_cases"]}, hard


USAGE_ERRORS = {
    "unknown-op": (["fuzz", "--ops", "exp,nosuchop"], "no op named 'nosuchop'"),
    # a misspelt op is not "unsupported by the engine": it names the op and the closest ones
    # (no closing '?': user ops other tests registered in this process may be suggested too)
    "misspelt-op": (["fuzz", "--ops", "exp,sofplus"], "no op named 'sofplus' in the gradspec op table. Did you mean 'softplus'"),
    "unknown-engine": (["fuzz", "--engine", "nosuchengine"], "unknown engine"),
    "engine-attr": (["fuzz", "--engine", "gsplant:missing"], "no attribute"),
    "cuda-without-gpu": (["fuzz", "--engine", "torch-cuda"], "torch-cuda"),
    "zero-examples": (["fuzz", "--max-examples", "0"], "must be >= 1"),
    "zero-workers": (["fuzz", "--workers", "0"], "must be >= 1"),
    "negative-seconds": (["fuzz", "--seconds", "-3"], "positive"),
    "both-budgets": (["fuzz", "--max-examples", "5", "--seconds", "5"], "not allowed with"),
    "unknown-oracle": (["fuzz", "--oracles", "reference,nosuch"], "nosuch"),
    "report-dir-under-file": (["fuzz", "--report-dir", "afile/sub"], "not writable"),
    "report-dir-is-file": (["fuzz", "--report-dir", "afile"], "not a directory"),
    "no-command": ([], "required"),
    "unknown-dtype": (["fuzz", "--dtype", "float16"], "invalid choice: 'float16'"),
}
# These go through a real `python -m gradspec.cli` (all at once: two cores); the others through
# gradspec.cli.main in this process, which is the same code without an interpreter start each.
USAGE_IN_SUBPROCESS = ("unknown-op", "cuda-without-gpu", "report-dir-under-file", "both-budgets")


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_usage_errors_exit_2_with_a_clear_message(tmp_path, monkeypatch, capsys):
    from gradspec import cli

    (tmp_path / "afile").write_text("not a directory")
    env = plant(tmp_path)
    cases = dict(USAGE_ERRORS)
    if _cuda():
        cases.pop("cuda-without-gpu")
    procs = {k: start(*cases[k][0], cwd=tmp_path, env=env) for k in USAGE_IN_SUBPROCESS if k in cases}
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for k, (args, message) in cases.items():
        if k in procs:
            continue
        try:
            rc = cli.main(args)
        except SystemExit as e:  # argparse's own usage errors
            rc = e.code
        err = capsys.readouterr().err
        assert rc == 2, (k, err)
        assert message in err and "Traceback" not in err, (k, err)
    for k, p in procs.items():
        out, err = p.communicate(timeout=120)
        assert p.returncode == 2, (k, out, err)
        assert cases[k][1] in err, (k, err)
        assert "Traceback" not in err, (k, err)
    assert not (tmp_path / "reports").exists()  # nothing written by a refused campaign


def test_replay_of_bad_case_files_exits_2_without_traceback(tmp_path, monkeypatch, capsys):
    import numpy as np

    import gradspec as gs
    from gradspec import cli

    good = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    d = json.loads(good.to_json())
    files = {
        "corrupt.json": '{"format": "gradspec-case/1", "leaves": [',
        "foreign.json": json.dumps({"format": "something-else/3", "x": 1}),
        "list.json": "[1, 2, 3]",
        "badshape.json": json.dumps({**d, "seeds": [{"dtype": "float64", "shape": [5], "data": ["0x1p+0"] * 5}]}),
        "inline.json": json.dumps({**d, "nodes": [{**d["nodes"][0], "op": "my_inline_op"}],
                                   "meta": {"inline_ops": ["my_inline_op"]}}),
        "unknownop.json": json.dumps({**d, "nodes": [{**d["nodes"][0], "op": "frobnicate"}]}),
        "badimport.json": json.dumps({**d, "nodes": [{**d["nodes"][0], "op": "frob"}],
                                      "user_ops": {"frob": "no_such_module_xyz:frob"}}),
        "badengine.json": json.dumps({**d, "engine": "no_such_module_xyz:engine"}),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00 not text")
    expect = {
        "corrupt.json": "invalid JSON",
        "foreign.json": "not a gradspec case file",
        "list.json": "not a gradspec case file: the file is valid JSON, but a list, not a case object",
        "binary.json": "not a gradspec case file",
        "badshape.json": "seed",
        "inline.json": "defined inline",
        "unknownop.json": "unknown op 'frobnicate'",
        "badimport.json": "no_such_module_xyz",
        "badengine.json": "cannot replay with engine",
        "missing.json": "cannot read",
        ".": "is a directory",
    }
    in_subprocess = ("corrupt.json", "inline.json", "badimport.json")
    procs = {name: start("replay", name, cwd=tmp_path) for name in in_subprocess}
    monkeypatch.chdir(tmp_path)
    for name, message in expect.items():
        if name in procs:
            continue
        rc = cli.main(["replay", name])
        err = capsys.readouterr().err
        assert rc == 2 and "gradspec: error:" in err and message in err, (name, err)
    for name, p in procs.items():
        out, err = p.communicate(timeout=120)
        assert p.returncode == 2, (name, out, err)
        assert "gradspec: error:" in err and expect[name] in err, (name, err)
        assert "Traceback" not in err + out, name


def test_ops_lists_the_table(tmp_path):
    import gradspec as gs

    text = start("ops", cwd=tmp_path)
    js = start("ops", "--json", cwd=tmp_path)
    t_out, _ = text.communicate(timeout=60)
    j_out, _ = js.communicate(timeout=60)
    assert text.returncode == 0 and js.returncode == 0
    rows = json.loads(j_out)
    assert [r["name"] for r in rows] == gs.ops.names()
    by = {r["name"]: r for r in rows}
    assert by["mul"]["signature"] == "mul(input, other)"
    assert by["log"]["domain"].startswith("positive") or "0" in by["log"]["domain"]
    assert {"reference", "finite-differences", "jacobian", "torch-cpu"} <= set(by["exp"]["oracles"])
    lines = t_out.splitlines()
    assert lines[0].split()[:4] == ["op", "signature", "domain", "oracles"]
    assert any(l.startswith("matmul ") for l in lines) and f"{len(rows)} ops" in t_out
