"""The command line's small reliability defects (session 13's review): each rebuilt here first.

Exit codes follow what happened, never the wording of a message; output that cannot be encoded is
escaped, never a crash; a finding whose report cannot be written is printed whole and still exits 1;
usage mistakes (an empty --ops, a misspelt flag, --workers 10000, an unwritable summary) are found
before the run starts.
"""

from __future__ import annotations

import json

import numpy as np

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
