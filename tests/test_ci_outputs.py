"""``--junitxml`` and ``--summary-md``: parsed back and checked, on summaries and on real runs."""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gradspec import ci_outputs as ci
from tests.test_cli import FAST_ORACLES, gradspec, plant

FINDING = {"id": "d-abc123", "kind": "value", "oracles": ["planted", "reference"], "ops": ["exp", "add"],
           "message": "planted vs reference: leaf x0[1] 2.0 vs 1.5",
           "cause": {"id": "wrong-vjp", "summary": "its VJP is off by a factor 1.5", "node": "v1", "op": "exp"}}
BASE = {"cases": 10, "seconds": 1.0, "engine": "planted", "seed": 3, "ops": {"exp": 6, "add": 10, "tanh": 0},
        "oracles": {"planted vs reference": 10, "jacobian vs reference": 10},
        "agreement": {"planted vs reference": 4, "jacobian vs reference": 10}}


def cases_of(xml: str) -> dict:
    root = ET.fromstring(xml)
    out = {}
    for tc in root.iter("testcase"):
        state = next((t for t in ("failure", "error", "skipped") if tc.find(t) is not None), "passed")
        out[(tc.get("classname"), tc.get("name"))] = (state, tc)
    return out


TABLE = [
    pytest.param({**BASE, "discrepancies": 1, "reports": [FINDING]},
                 {("gradspec.run", "verdict"): "failure", ("gradspec.findings", "d-abc123"): "failure",
                  ("gradspec.oracles", "planted vs reference"): "failure",
                  ("gradspec.oracles", "jacobian vs reference"): "passed",
                  ("gradspec.ops", "exp"): "failure", ("gradspec.ops", "add"): "passed",
                  ("gradspec.ops", "tanh"): "skipped"}, id="finding-blames-its-node-op-only"),
    pytest.param({**BASE, "discrepancies": 0, "reports": [], "agreement": BASE["oracles"]},
                 {("gradspec.run", "verdict"): "passed", ("gradspec.oracles", "planted vs reference"): "passed",
                  ("gradspec.ops", "exp"): "passed"}, id="clean-run"),
    pytest.param({**BASE, "cases": 0, "oracles": {}, "agreement": {}, "discrepancies": 0, "reports": []},
                 {("gradspec.run", "verdict"): "error"}, id="nothing-ran-is-inconclusive"),
    pytest.param({**BASE, "discrepancies": 0, "reports": [], "rules": {"implicit-seed": "passed",
                  "accumulation": "failed: overwrote .grad", "freeing": "skipped: strict=False"}},
                 {("gradspec.rules", "implicit-seed"): "passed", ("gradspec.rules", "accumulation"): "failure",
                  ("gradspec.rules", "freeing"): "skipped"}, id="backward-rules"),
    pytest.param({**BASE, "discrepancies": 0, "reports": [], "rules": {
                  "seed-shape": {"status": "passed"},
                  "accumulation": {"status": "failed", "causes": ["accumulation-overwrite"]},
                  "freeing": {"status": "skipped", "reason": "strict=False"}}},
                 {("gradspec.rules", "seed-shape"): "passed", ("gradspec.rules", "accumulation"): "failure",
                  ("gradspec.rules", "freeing"): "skipped"}, id="backward-rules-as-fuzz-writes-them"),
    # a rule hit only by a value bug of one op (wrong-vjp) is no broken rule: its finding fails on its own
    pytest.param({**BASE, "discrepancies": 1, "reports": [FINDING], "rules": {
                  "seed-values": {"status": "value-bug", "causes": ["wrong-vjp"], "ops": ["exp"]}}},
                 {("gradspec.rules", "seed-values"): "passed", ("gradspec.findings", "d-abc123"): "failure"},
                 id="rule-hit-by-a-value-bug"),
]


@pytest.mark.parametrize("summary, expected", TABLE)
def test_junit_cases(summary, expected):
    got = cases_of(ci.junit_xml(summary, "reports"))
    assert {k: got[k][0] for k in expected} == expected
    root = ET.fromstring(ci.junit_xml(summary, "reports")).find("testsuite")
    assert int(root.get("failures")) == sum(s == "failure" for s, _ in got.values())
    assert int(root.get("tests")) == len(got)


def test_junit_failure_carries_cause_and_replay():
    got = cases_of(ci.junit_xml({**BASE, "discrepancies": 1, "reports": [FINDING]}, "out/reports"))
    _, tc = got[("gradspec.findings", "d-abc123")]
    f = tc.find("failure")
    assert f.get("message").startswith("wrong-vjp [node v1 = exp]: its VJP is off by a factor 1.5")
    assert "gradspec replay out/reports/d-abc123/case.json" in f.text


def test_rule_failure_names_its_cause():
    s = {**BASE, "discrepancies": 0, "reports": [],
         "rules": {"accumulation": {"status": "failed", "causes": ["accumulation-overwrite"]}}}
    _, tc = cases_of(ci.junit_xml(s))[("gradspec.rules", "accumulation")]
    assert "accumulation-overwrite" in tc.find("failure").text
    assert "| accumulation | failed: accumulation-overwrite |" in ci.summary_markdown(s)


def test_markdown_warns_about_ops_never_generated():
    md = ci.summary_markdown({**BASE, "discrepancies": 0, "reports": []})  # tanh: 0 cases
    assert "**Warning:** 1 of 3 ops were never generated, so they are untested: tanh; run longer" in md
    assert "(--max-examples 100 or --seconds 10) or focus on them (--ops tanh)" in md


def test_markdown_is_inert_and_links_each_report():
    hostile = {**FINDING, "cause": {**FINDING["cause"], "summary": "<script>x</script> | *bold* [l](http://e)"}}
    md = ci.summary_markdown({**BASE, "discrepancies": 1, "reports": [hostile]}, "reports")
    assert md.startswith("## gradspec fuzz: disagree")
    assert "<script>" not in md and "[l](http" not in md
    assert "[report](reports/d-abc123/index.html)" in md
    row = next(line for line in md.splitlines() if "d-abc123" in line and "report]" in line)
    assert len(re.findall(r"(?<!\\)\|", row)) == 5, row  # the hostile '|' did not add a table column


def test_real_run_writes_both(tmp_path):
    env = plant(tmp_path)
    out = tmp_path / "ci"
    r = gradspec("fuzz", "--engine", "gsplant:bug", "--ops", "exp,add", "--oracles", FAST_ORACLES,
                 "--max-examples", 40, "--seed", 2, "--report-dir", out / "reports", "-q",
                 "--junitxml", out / "junit.xml", "--summary-md", out / "summary.md", cwd=tmp_path, env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    got = cases_of((out / "junit.xml").read_text())
    findings = [tc for (cls, _), (state, tc) in got.items() if cls == "gradspec.findings"]
    assert findings and all(tc.find("failure") is not None for tc in findings)
    md = (out / "summary.md").read_text()
    links = re.findall(r"\[report\]\(([^)]+)\)", md)
    assert links and all((out / link).is_file() for link in links), links


def test_the_example_workflow_command_runs(tmp_path):
    """The gradspec command line of examples/ci/gradspec-fuzz.yml, with a small budget, really works."""
    wf = (Path(__file__).parents[1] / "examples" / "ci" / "gradspec-fuzz.yml").read_text()
    line = next(ln.strip() for ln in wf.splitlines() if ln.strip().startswith("gradspec fuzz"))
    line = re.sub(r"\$\{\{[^}]*\}\}", "7", line).replace("--seconds 300", "--max-examples 5")
    argv = shlex.split(line)[1:] + ["--oracles", FAST_ORACLES, "-q"]
    r = gradspec(*argv, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "reports" / "junit.xml").is_file() and (tmp_path / "reports" / "summary.md").is_file()
    assert "steps.fuzz.outputs.code != '0'" in wf  # exit 1, 3 (and 2, 130) fail the job
