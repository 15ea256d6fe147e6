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
