"""The command line's small reliability defects (session 13's review): each rebuilt here first.

Exit codes follow what happened, never the wording of a message; output that cannot be encoded is
escaped, never a crash; a finding whose report cannot be written is printed whole and still exits 1;
usage mistakes (an empty --ops, a misspelt flag, --workers 10000, an unwritable summary) are found
before the run starts.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import gradspec as gs
from tests.test_cli import FAST_ORACLES, gradspec, plant, summary


def _good() -> dict:
    case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("h", "exp", ["x"], {}), ("y", "sum", ["h"], {})], ["y"])
    return json.loads(case.to_json())


def _plant_report(out, case: dict, rid="d-0123456789") -> None:
    (out / rid).mkdir(parents=True)
    (out / rid / "case.json").write_text(json.dumps(case))
    (out / rid / "discrepancy.json").write_text(json.dumps(
        {"id": rid, "kind": "value", "oracles": ["reference", "jacobian"], "ops": ["frob"], "engine": "reference",
         "run_id": "old", "message": "planted"}))


def _with_op(case: dict, path: str) -> dict:
    d = json.loads(json.dumps(case))
    d["nodes"][0]["op"] = "frob"
    d["user_ops"] = {"frob": path}
    return d


BUGGY_OP_SRC = '''
import gradspec as gs

# d(3x)/dx is 3: this vjp says 2
triple = gs.Op("clilows_triple", forward=lambda x: 3.0 * x, vjp=lambda g, x, out: (2.0 * g,))
'''


FUZZ = ("fuzz", "--ops", "exp,mul", "--max-examples", 3, "--oracles", FAST_ORACLES, "--seed", 1, "-q")


# ---------------------------------------------------------------------------------------------
# exit 2 for an earlier report the import gate blocked: decided by a reason code, not by its text
# ---------------------------------------------------------------------------------------------


def test_an_unreadable_earlier_report_quoting_the_flag_is_not_an_import_refusal(tmp_path):
    """A case file whose (unknown) op name happens to read "--allow-import" is unreadable, not blocked by
    the gate: the run's exit is 0, as for any unreadable earlier report (the old text match said 2)."""
    out = tmp_path / "reports"
    bad = _good()
    bad["nodes"][0]["op"] = "--allow-import x"
    _plant_report(out, bad)
    p = gradspec(*FUZZ, "--report-dir", out, cwd=tmp_path, env=plant(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    (prev,) = [x for x in summary(out)["previous"] if x["id"] == "d-0123456789"]
    assert "--allow-import" in prev["status"] and prev.get("code") != "import-not-allowed", prev


def test_the_import_gate_refusal_exits_2_whatever_its_message_says(tmp_path, monkeypatch, capsys):
    from gradspec import cli
    from gradspec._private import imports

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(imports.ImportNotAllowed, "__str__", lambda self: "refused (wording changed)")
    out = tmp_path / "reports"
    _plant_report(out, _with_op(_good(), "nosuchmod_clilows:frob"))
    assert cli.main([str(a) for a in FUZZ] + ["--report-dir", str(out)]) == 2
    (prev,) = [x for x in summary(out)["previous"] if x["id"] == "d-0123456789"]
    assert prev["code"] == "import-not-allowed", prev
    assert "could not be re-checked" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# M4: an ASCII-only stdout, a non-ASCII report dir
# ---------------------------------------------------------------------------------------------

ASCII_ENVS = {
    "ascii-stdout": {"PYTHONIOENCODING": "ascii"},
    # a C locale without PEP 538/540 (no coercion, no UTF-8 mode): file names decode with surrogateescape
    "c-locale": {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"},
}


@pytest.mark.parametrize("which", sorted(ASCII_ENVS))
def test_explain_ops_and_replay_print_on_an_ascii_stdout(tmp_path, which):
    env = {**plant(tmp_path), **ASCII_ENVS[which]}
    ex = gradspec("explain", "mm(x, a)", "--x", "ones:2,3", "--a", "ones:3,4", "--seed", "[[1,2,3,4],[5,6,7,8]]",
                  cwd=tmp_path, env=env, timeout=120)
    assert ex.returncode == 0 and "Traceback" not in ex.stderr, ex.stderr[-2000:]
    assert "J^T" in ex.stdout and "\\xb7" in ex.stdout, ex.stdout[-500:]  # the middle dot, escaped
    ops = gradspec("ops", cwd=tmp_path, env=env, timeout=120)
    assert ops.returncode == 0 and "internal error" not in ops.stderr, ops.stderr[-2000:]
    assert "\\u2026" in ops.stdout  # a cut column's ellipsis, escaped
    (tmp_path / "case.json").write_text(json.dumps(_good()))
    rp = gradspec("replay", "case.json", "--oracles", FAST_ORACLES, cwd=tmp_path, env=env, timeout=120)
    assert rp.returncode == 0 and "Traceback" not in rp.stderr and "internal error" not in rp.stderr, rp.stderr


@pytest.mark.parametrize("which", sorted(ASCII_ENVS))
def test_a_non_ascii_report_dir_works_on_an_ascii_locale(tmp_path, which):
    env = {**plant(tmp_path), **ASCII_ENVS[which]}
    (tmp_path / "clilows_ops.py").write_text(BUGGY_OP_SRC)
    out = tmp_path / "r\u00e9p\u00f6rts"
    p = gradspec("fuzz", "--ops", "clilows_ops:triple,sum", "--max-examples", 10, "--oracles", FAST_ORACLES,
                 "--seed", 1, "--report-dir", out.name, "--shrink-seconds", 5, "-q", cwd=tmp_path, env=env)
    assert p.returncode == 1 and "internal error" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-2000:]
    s = summary(out)
    assert s["discrepancies"] >= 1 and (out / "index.html").is_file(), s
    rid = s["reports"][0]["id"]
    assert (out / rid / "case.json").is_file() and (out / rid / "index.html").is_file()
    # the path printed: escaped on an ASCII stdout, as its own bytes where the locale could not decode them
    assert out.name.encode("ascii", "backslashreplace").decode() in p.stdout or out.name in p.stdout, p.stdout


# ---------------------------------------------------------------------------------------------
# M3: a report dir that fills up mid-run
# ---------------------------------------------------------------------------------------------

def test_a_finding_whose_report_cannot_be_written_is_printed_whole_and_exits_1(tmp_path, monkeypatch, capsys):
    """Disk full while the report is written (simulated: ENOSPC from every write of a case.json): the printed
    case records the user op's import path (it had ``"user_ops": {}`` and could not be replayed), the run says
    what failed and exits 1, a discrepancy was found (it exited 2, a usage error)."""
    import errno

    from gradspec import cli, report

    (tmp_path / "clilows_ops.py").write_text(BUGGY_OP_SRC)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    real = report.atomic_write

    def full(path, text):
        if path.endswith("case.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, text)

    monkeypatch.setattr(report, "atomic_write", full)
    rc = cli.main(["fuzz", "--ops", "clilows_ops:triple,sum", "--max-examples", "20", "--oracles", FAST_ORACLES,
                   "--seed", "1", "--report-dir", str(tmp_path / "reports"), "-q", "--shrink-seconds", "5"])
    out, err = capsys.readouterr()
    assert rc == 1, (out, err)
    assert "No space left on device" in err, err
    line = next(ln for ln in out.splitlines() if ln.startswith("{"))
    case = json.loads(line)
    assert case["user_ops"] == {"clilows_triple": "clilows_ops:triple"}, case
    (tmp_path / "saved.json").write_text(line)
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main(["replay", str(tmp_path / "saved.json"), "--allow-import", "clilows_ops", "--oracles",
                     FAST_ORACLES]) == 1, capsys.readouterr()


# ---------------------------------------------------------------------------------------------
# usage mistakes found before the run: --workers 10000, --ops "", a misspelt flag
# ---------------------------------------------------------------------------------------------


def test_workers_beyond_what_the_machine_can_run_is_a_usage_error(tmp_path, monkeypatch, capsys):
    from gradspec import cli

    monkeypatch.chdir(tmp_path)
    assert cli.main(["fuzz", "--workers", "10000", "--max-examples", "2", "--report-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "--workers 10000" in err and "--tx" in err, err
    assert not (tmp_path / "r").exists()  # refused before anything was made


@pytest.mark.parametrize("flag", ["--ops", "--oracles"])
def test_an_empty_list_is_a_usage_error_naming_the_flag(tmp_path, monkeypatch, capsys, flag):
    from gradspec import cli

    monkeypatch.chdir(tmp_path)
    assert cli.main(["fuzz", flag, " , ", "--max-examples", "2", "--report-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert f"{flag} is empty" in err, err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("argv, hint", [
    (["fuzz", "--max-exampels", "5"], "--max-examples"),
    (["fuzz", "--report_dir", "x"], "--report-dir"),
    (["replay", "case.json", "--jsn"], "--json"),
])
def test_a_misspelt_flag_gets_a_did_you_mean(capsys, argv, hint):
    from gradspec import cli

    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"did you mean {hint}?" in err, err


# ---------------------------------------------------------------------------------------------
# JUnit: an inconclusive run
# ---------------------------------------------------------------------------------------------


def test_junit_of_an_inconclusive_run_has_time_and_host_and_says_inconclusive():
    """pytest's junitxml fills timestamp (ISO 8601, local time with its offset) and hostname on <testsuite>; an
    inconclusive run was written with both empty and as an ordinary skip, which a CI page shows as green."""
    import datetime
    import platform
    import xml.etree.ElementTree as ET

    from gradspec.ci_outputs import junit_xml

    s = {"status": "inconclusive", "reason": "no case ran", "cases": 0, "discrepancies": 0, "seconds": 1.0,
         "ops": {"exp": 0}, "oracles": {}, "reports": [], "engine": "reference", "seed": 1, "started": 1.7e9}
    suite = ET.fromstring(junit_xml(s)).find("testsuite")
    assert suite.get("hostname") == platform.node()
    assert datetime.datetime.fromisoformat(suite.get("timestamp")).timestamp() == 1.7e9
    verdict = next(tc for tc in suite.iter("testcase") if tc.get("name") == "verdict")
    # an error, not a skip (tryout8 F9): a CI that reads only JUnit (Jenkins, GitLab) showed a skip yellow or green,
    # where the exit code (3, 130) fails the job
    error = verdict.find("error")
    assert verdict.find("skipped") is None and int(suite.get("errors")) >= 1
    assert error.get("type") == "gradspec.inconclusive" and "no case ran" in error.get("message")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["status"] == "inconclusive" and props["reason"] == "no case ran", props
    agree = ET.fromstring(junit_xml({**s, "status": "agree", "reason": "", "started": None})).find("testsuite")
    assert agree.get("timestamp")  # (a summary without "started": the time the file is written)


# ---------------------------------------------------------------------------------------------
# a --database directory the process cannot write
# ---------------------------------------------------------------------------------------------


def _unprivileged() -> list:
    """A command prefix under which file modes bind (root ignores a 0555 folder): none for a normal user,
    setpriv without the DAC-override capabilities for root."""
    import os
    import shutil
    import subprocess

    if os.geteuid() != 0:
        return []
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    if shutil.which("setpriv") is None or subprocess.run([*prefix, "true"], capture_output=True).returncode:
        pytest.skip("running as root without setpriv: a folder's mode does not bind, so none is unwritable")
    return prefix


def test_an_unwritable_database_dir_is_said_once(tmp_path):
    import subprocess
    import sys

    prefix = _unprivileged()
    db = tmp_path / "db"
    db.mkdir()
    db.chmod(0o555)
    try:
        p = subprocess.run([*prefix, sys.executable, "-m", "gradspec.cli", "fuzz", "--engine", "gsplant:bug", "--ops",
                            "exp,mul", "--max-examples", "10", "--oracles", FAST_ORACLES, "--seed", "1",
                            "--shrink-seconds", "5", "--database", str(db), "--report-dir", str(tmp_path / "r"),
                            "-q"], cwd=tmp_path, env=plant(tmp_path), capture_output=True, text=True, timeout=300)
    finally:
        db.chmod(0o755)
    assert p.returncode == 1, p.stderr[-2000:]  # the finding is still reported
    assert not any(db.iterdir())  # nothing could be saved ...
    assert p.stderr.count("is not writable") == 1 and str(db) in p.stderr, p.stderr  # ... and it says so, once


# ---------------------------------------------------------------------------------------------
# output paths that cannot be written: found before the run, no temp file left
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["summary-md-is-a-folder", "junitxml-under-a-file", "summary-json-is-a-folder"])
def test_an_output_path_that_cannot_be_written_is_a_usage_error_before_the_run(tmp_path, monkeypatch, capsys, where):
    from gradspec import cli

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "r"
    (tmp_path / "afile").write_text("x")
    flags, named = {
        "summary-md-is-a-folder": (["--summary-md", str(tmp_path)], "--summary-md"),
        "junitxml-under-a-file": (["--junitxml", str(tmp_path / "afile" / "junit.xml")], "--junitxml"),
        "summary-json-is-a-folder": ([], "summary.json"),
    }[where]
    if where == "summary-json-is-a-folder":
        (out / "summary.json").mkdir(parents=True)
    rc = cli.main([str(a) for a in FUZZ] + ["--report-dir", str(out), *flags])
    err = capsys.readouterr().err
    assert rc == 2 and named in err, err
    assert "cases in" not in err and not (out / "index.html").exists()  # refused before the run
    assert not list(tmp_path.rglob("*.tmp-*")), list(tmp_path.rglob("*.tmp-*"))


def test_a_ci_output_that_fails_leaves_no_temp_file(tmp_path):
    from gradspec import ci_outputs

    (tmp_path / "junit.xml").mkdir()  # (os.replace of a file onto a folder fails after the temp file is written)
    s = {"cases": 1, "discrepancies": 0, "seconds": 0.1, "ops": {}, "oracles": {}, "reports": []}
    with pytest.raises(OSError):
        ci_outputs.write_junit(str(tmp_path / "junit.xml"), s)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junit.xml"]


# ---------------------------------------------------------------------------------------------
# two runs on one report dir
# ---------------------------------------------------------------------------------------------

HOLDER = """
import sys
from gradspec._private.safefs import report_dir_lock
fd = report_dir_lock(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()  # held until the test closes our stdin
"""


def test_a_second_run_on_a_report_dir_in_use_is_refused_naming_the_first(tmp_path):
    """Two campaigns writing one report dir replace each other's summary and index and clean each other's state:
    the second is refused (exit 2) naming the first's pid; once the first is gone (its lock goes with its
    process, however it ended) the dir is free again."""
    import subprocess
    import sys

    out = tmp_path / "r"
    env = plant(tmp_path)
    first = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=env)
    try:
        assert first.stdout.readline().strip() == "locked"
        p = gradspec(*FUZZ, "--report-dir", out, cwd=tmp_path, env=env)
        assert p.returncode == 2, p.stdout + p.stderr
        assert f"pid {first.pid}" in p.stderr and "--report-dir" in p.stderr, p.stderr
        assert not (out / "summary.json").exists()  # refused before it wrote anything
    finally:
        first.stdin.close()
        first.wait(timeout=60)
    p = gradspec(*FUZZ, "--report-dir", out, cwd=tmp_path, env=env)  # (the lock file is still there: no matter)
    assert p.returncode == 0, p.stdout + p.stderr


# ---------------------------------------------------------------------------------------------
# Ctrl-C while `import gradspec` runs
# ---------------------------------------------------------------------------------------------

CTRL_C_IN_IMPORT = """
import sys


class CtrlC:
    '''Ctrl-C at the moment gradspec's import reaches gradspec.engine (deterministic: no timing).'''

    def find_spec(self, name, path=None, target=None):
        if name == "gradspec.engine":
            raise KeyboardInterrupt
        return None


sys.meta_path.insert(0, CtrlC())
"""


@pytest.mark.parametrize("how", ["python -m gradspec.cli", "console script"])
def test_ctrl_c_while_gradspec_imports_exits_130_quietly(tmp_path, how):
    import subprocess
    import sys

    (tmp_path / "sitecustomize.py").write_text(CTRL_C_IN_IMPORT)
    env = plant(tmp_path)  # (tmp_path first on PYTHONPATH: its sitecustomize runs at start-up)
    cmd = {"python -m gradspec.cli": [sys.executable, "-m", "gradspec.cli", "ops"],
           # what the installed `gradspec` script does, under its name
           "console script": [sys.executable, "-c", "import sys; sys.argv[0] = 'gradspec'; from gradspec.cli import "
                              "main; sys.exit(main())", "ops"]}[how]
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 130, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and "interrupted" in p.stderr, p.stderr
    # a library user's `import gradspec` is no command line: its Ctrl-C stays a KeyboardInterrupt
    lib = subprocess.run([sys.executable, "-c", "import gradspec"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert "KeyboardInterrupt" in lib.stderr and lib.returncode == -2, (lib.returncode, lib.stderr[-500:])


def test_a_report_dir_path_too_long_for_a_report_folder_prints_the_finding_whole(tmp_path):
    """A real write failure, not a simulated one: a report dir whose path is so long (4040 of Linux's 4096) that
    its own files fit but a report folder's staging path (about 70 characters more) does not: ENAMETOOLONG."""
    import os

    out = str(tmp_path)
    while len(out) < 4040 - 201:
        out = os.path.join(out, "a" * 200)
    out = os.path.join(out, "b" * (4040 - len(out) - 1))
    os.makedirs(os.path.dirname(out))
    (tmp_path / "clilows_ops.py").write_text(BUGGY_OP_SRC)
    env = plant(tmp_path)
    p = gradspec("fuzz", "--ops", "clilows_ops:triple,sum", "--max-examples", 10, "--oracles", FAST_ORACLES, "--seed",
                 1, "--report-dir", out, "-q", "--shrink-seconds", 5, cwd=tmp_path, env=env)
    assert p.returncode == 1 and "File name too long" in p.stderr, (p.stdout, p.stderr[-1000:])
    (tmp_path / "saved.json").write_text(next(ln for ln in p.stdout.splitlines() if ln.startswith("{")))
    replay = gradspec("replay", "saved.json", "--allow-import", "clilows_ops", "--oracles", FAST_ORACLES, cwd=tmp_path,
                      env=env)
    assert replay.returncode == 1, replay.stdout + replay.stderr  # the printed case still shows the bug


FULL_DISK_SRC = BUGGY_OP_SRC + '''
import errno
import os

if not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller, which writes the reports: its disk is full
    from gradspec import report

    _real = report.atomic_write

    def _full(path, text):
        if path.endswith("case.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return _real(path, text)

    report.atomic_write = _full
'''


def test_with_workers_a_finding_whose_report_cannot_be_written_is_printed_whole_and_exits_1(tmp_path):
    """As above, with the findings coming back from xdist workers (the controller writes them): the write error
    escaped into the xdist hook, and the summary listed a finding with no folder and no case printed anywhere."""
    pytest.importorskip("xdist")
    (tmp_path / "clilows_ops.py").write_text(FULL_DISK_SRC)
    p = gradspec("fuzz", "--ops", "clilows_ops:triple,sum", "--max-examples", 20, "--oracles", FAST_ORACLES, "--seed",
                 1, "--report-dir", tmp_path / "reports", "-q", "--shrink-seconds", 5, "--workers", 2, cwd=tmp_path,
                 env=plant(tmp_path), timeout=600)
    assert p.returncode == 1 and "No space left on device" in p.stderr, (p.stdout, p.stderr)
    case = json.loads(next(ln for ln in p.stdout.splitlines() if ln.startswith("{")))
    assert case["user_ops"] == {"clilows_triple": "clilows_ops:triple"}, case


def test_a_clean_run_whose_summary_cannot_be_written_is_inconclusive_not_a_usage_error(tmp_path, monkeypatch, capsys):
    """Review F8: the disk fills up while a run that found nothing writes its summary: exit 3 (inconclusive: the
    run's verdict was not delivered), not 2, which CONTRACT §6 keeps for a usage error or a corrupt input."""
    import errno

    from gradspec import cli, fuzz

    real = fuzz.write_summary

    def full(cfg, summary):  # (the "running" summary of the run's start is written; the disk fills up after it)
        if summary.get("state") == "running":
            return real(cfg, summary)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fuzz, "write_summary", full)
    rc = cli.main(["fuzz", "--ops", "add,mul", "--max-examples", "5", "--oracles", FAST_ORACLES, "--seed", "1",
                   "--report-dir", str(tmp_path / "r"), "-q"])
    err = capsys.readouterr().err
    assert rc == 3, err
    assert "No space left on device" in err
