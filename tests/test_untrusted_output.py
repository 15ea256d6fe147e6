"""What gradspec reads from disk is data: it is printed inert, rendered inert, and imports nothing unasked.

A report folder, a case file or a state folder handed over by somebody else (redteam, session 11):

* #5  a report's ``repro.py`` imported the modules its case names (engine, user ops) with no
      ``--allow-import``; now it refuses like ``gradspec replay``, naming the module and the flag;
* #6, #7  control characters in ``meta.rule`` / ``meta.scenario`` and in a param string reached the
      terminal (an op's own error quotes its param); the case file now refuses them, naming the field;
* #8  report folder names and record fields were printed raw by ``gradspec fuzz``'s summary;
* #9  a folder name broke out of the code span and link of ``--summary-md``.

Hostile folders are built in ``tmp_path``; the payloads clear the screen and forge a green line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import gradspec as gs
from gradspec import cli
from gradspec.ci_outputs import summary_markdown

ESC = "\x1b"
FORGED = f"{ESC}[2J{ESC}[H{ESC}[32mall good (exit 0){ESC}[0m\n{ESC}]0;PWNED\x07"


def _case_dict(op="exp", params=None, meta=None, two_leaves=False) -> dict:
    leaves = {"x": np.array([0.5, 2.0])}
    if two_leaves:
        leaves["t"] = np.array([0.25, 1.0])
    case = gs.Case.build(leaves, [("y", op, list(leaves), dict(params or {}))], ["y"], [None if two_leaves else np.ones(2)])
    d = json.loads(case.to_json())
    d["meta"].update(meta or {})
    return d


# (id, case file, the field its refusal names)
REFUSED = [
    ("param-string", _case_dict("mse_loss", {"reduction": "mean"}, two_leaves=True), "nodes[0].params.reduction"),
    ("meta-rule", _case_dict(meta={"rule": "accumulate"}), "meta.rule"),
    ("meta-scenario", _case_dict(meta={"scenario": "x = eng.leaf([1.0])\nok"}), "meta.scenario"),
]


@pytest.mark.parametrize("d, field", [(d, f) for _, d, f in REFUSED], ids=[i for i, _, _ in REFUSED])
def test_a_control_character_in_a_printed_string_is_refused_naming_the_field(d, field):
    gs.Case.from_json(json.dumps(d))  # the control: the same file with a plain string loads
    if field.startswith("nodes"):
        d["nodes"][0]["params"]["reduction"] = FORGED
    else:
        d["meta"][field.split(".")[1]] += FORGED
    with pytest.raises(gs.CaseError, match=re.escape(f"field {field}: must not contain a control character")):
        gs.Case.from_json(json.dumps(d))


def test_replay_of_a_hostile_case_prints_no_escape_sequence(tmp_path, capsys):
    path = tmp_path / "case.json"
    d = _case_dict("mse_loss", {"reduction": "mean"}, two_leaves=True)
    d["nodes"][0]["params"]["reduction"] = FORGED
    path.write_text(json.dumps(d))
    assert cli.main(["replay", str(path)]) == 2
    out, err = capsys.readouterr()
    assert ESC not in out + err and "\\x1b" in err and "nodes[0].params.reduction" in err, err


def _plant(reports, name, record):
    folder = reports / name
    folder.mkdir(parents=True)
    (folder / "case.json").write_text(json.dumps(_case_dict()))
    (folder / "discrepancy.json").write_text(json.dumps(record))


def test_fuzz_summary_prints_planted_folder_names_and_records_inert(tmp_path, capsys, monkeypatch):
    # an earlier report that "no longer reproduces" is listed by its folder name: no false alarm needed
    reports = tmp_path / "reports"
    record = {"kind": "value", "engine": "reference", "oracles": ["reference", "jacobian"], "ops": ["exp"],
              "message": "m", "run_id": "old"}
    _plant(reports, "d-" + FORGED.replace("\n", ""), record)
    _plant(reports, "d-0123456789", {**record, "kind": FORGED, "oracles": [FORGED, "jacobian"]})
    monkeypatch.chdir(tmp_path)
    cli.main(["fuzz", "--max-examples", "1", "-q", "--ops", "exp", "--report-dir", str(reports)])
    out, err = capsys.readouterr()
    assert "no longer reproduce" in out, out  # the planted folders were read and listed
    assert ESC not in out + err and "\x07" not in out + err, out + err
    assert "\\x1b[2J" in out, out


HOSTILE_IDS = [
    ("backtick-link-html", "d-x` **[URGENT](https:evil.example)** <img src=x onerror=alert(1)> `"),
    ("paren-in-link", "d-x) [phish](https://evil.example"),
]


@pytest.mark.parametrize("rid", [r for _, r in HOSTILE_IDS], ids=[i for i, _ in HOSTILE_IDS])
def test_summary_md_keeps_a_planted_folder_name_as_text(rid):
    s = {"cases": 1, "discrepancies": 2, "ops": {"exp": 1}, "oracles": {"reference vs jacobian": 1},
         "reports": [{"id": "d-0123456789", "kind": "value", "ops": ["exp"]}, {"id": rid, "kind": "value", "ops": ["exp"]}]}
    md = summary_markdown(s, "reports")
    assert "| `d-0123456789` |" in md and "(reports/d-0123456789/index.html)" in md  # gradspec's own ids as before
    row = md.splitlines()[[i for i, l in enumerate(md.splitlines()) if "d-0123456789" in l][0] + 1]
    cell = row.rsplit(" | [report](", 1)[0]
    assert re.search(r"(?<!\\)[`<\[\]]", cell) is None, cell  # no markup character left unescaped
    link = row.rsplit("[report](", 1)[1]
    assert link.endswith(") |") and not any(c in link[:-3] for c in " ()<>`[]"), link


def test_junit_xml_of_a_planted_folder_name_is_valid_xml():
    import xml.etree.ElementTree as ET

    from gradspec.ci_outputs import junit_xml

    s = {"cases": 1, "discrepancies": 1, "ops": {"exp": 1}, "oracles": {"reference vs jacobian": 1},
         "reports": [{"id": "d-" + FORGED, "kind": "value", "ops": ["exp"], "message": FORGED}]}
    names = [tc.get("name") for tc in ET.fromstring(junit_xml(s)).iter("testcase")]  # before: ParseError
    rid = next(n for n in names if n.startswith("d-"))
    assert rid.startswith("d-\\x1b[2J") and ESC not in rid and "\x07" not in rid, rid


PLANT_ENGINE = """
import os
import re
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "IMPORTED"), "w").write("yes")
from gradspec.engines import ReferenceEngine
def make():
    open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "CALLED"), "w").write("yes")
    return ReferenceEngine()
"""


def test_repro_py_imports_the_modules_of_its_case_only_when_allowed(tmp_path):
    from gradspec.report_repro import repro_script

    (tmp_path / "plantedeng.py").write_text(PLANT_ENGINE)
    case = gs.Case.from_json(json.dumps(_case_dict()))
    case.engine = "plantedeng:make"
    (tmp_path / "repro.py").write_text(repro_script(case, ("reference", "plantedeng:make")))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    refused = subprocess.run([sys.executable, "repro.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert not (tmp_path / "IMPORTED").exists() and not (tmp_path / "CALLED").exists()
    assert "'plantedeng'" in refused.stdout and "--allow-import plantedeng" in refused.stdout, refused.stdout
    allowed = subprocess.run([sys.executable, "repro.py", "--allow-import", "plantedeng"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert (tmp_path / "CALLED").exists(), allowed.stdout + allowed.stderr  # the control: allowed, it runs
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "python repro.py --allow-import plantedeng" in (tmp_path / "repro.py").read_text()  # what the script says


def test_a_crash_case_left_in_the_report_dir_is_imported_by_nothing_and_says_so(tmp_path, monkeypatch):
    # a "dead earlier run" planted in the report dir: its crash report is written, nothing it names is imported
    (tmp_path / "plantedeng.py").write_text(PLANT_ENGINE)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that is surely dead
    run = tmp_path / "reports" / ".gradspec" / "runs" / "20260101-000000-abcdef"
    run.mkdir(parents=True)
    d = _case_dict()
    d["engine"] = "plantedeng:make"
    (run / f"inflight-{gone.pid}.json").write_text(json.dumps(d))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    cli.main(["fuzz", "--max-examples", "1", "-q", "--ops", "exp", "--report-dir", "reports"])
    assert not (tmp_path / "IMPORTED").exists()
    page = next((tmp_path / "reports").glob("d-*/index.html")).read_text()
    assert "run them only if you trust those modules" in page, page
    assert "python repro.py --allow-import plantedeng" in page, page


def test_code_gradients_of_a_case_imports_its_engine_only_when_allowed(tmp_path, monkeypatch):
    from gradspec._private.imports import allowing
    from gradspec.explain import code_gradients

    (tmp_path / "plantedeng2.py").write_text(PLANT_ENGINE)
    monkeypatch.syspath_prepend(str(tmp_path))
    case = gs.Case.from_json(json.dumps(_case_dict()))
    case.engine = "plantedeng2:make"
    got, why = code_gradients(case)
    assert got is None and "--allow-import plantedeng2" in why and not (tmp_path / "IMPORTED").exists(), why
    with allowing(["plantedeng2"]):
        got, why = code_gradients(case)
    assert got is not None and (tmp_path / "CALLED").exists(), why  # the control: allowed, it runs
