"""Every finding of ``gradspec fuzz --engine`` replays (CONTRACT §6): the case file a report folder holds is
enough, in a new process, to show the engine still disagrees (``gradspec replay`` exits 1).

One row per cause id added since the replay tests were written (tryout8 and the review after it).  Each row is
a planted engine of tests/_planted_engines.py (its bug written there, not derived from running gradspec) fuzzed
the way the last session checked them by hand (``--ops exp,add,mul,sum --seed 1``) on a small budget; the fuzz
and the replay run in this process (``cli.main``: torch is imported once), and one row's replay runs in a real
subprocess, the round trip a user makes.

Budgets: the rule causes (the first five rows) are found by the §5 rule searches, each ``min(budget, 40)``
scenarios; every planted broken rule is found within ~10 (tests/test_engine_rules.py), and 20 gives them room
when the draws change.  The broadcast rows need a case whose broadcast input's gradient is reduced (a
smaller input added to a bigger one): 60 cases (at 30, seed 1 found both).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gradspec import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (cause id, or the pattern of a wrong VJP; planted engine; budget)
ROWS = [
    ("grad-on-constant", "grad_on_constant", 20),
    ("retain-graph-ignored", "retain_ignored", 20),
    ("backward-raises", "backward_raises", 20),
    ("forward-mutates-input", "inplace_add", 20),
    ("backward-mutates-values", "backward_inplace", 20),
    ("broadcast-reduction", "add_broadcast_mean", 60),  # a wrong VJP of add alone: its pattern
    ("shared-broadcast-reduction", "broadcast_mean", 60),
]
SUBPROCESS = "retain-graph-ignored"  # the row whose replay runs in a new process


def _cause_of(rec: dict) -> str:
    c = rec.get("cause") or {}
    return c.get("pattern") if c.get("id") == "wrong-vjp" else c.get("id")


@pytest.mark.parametrize("cause, engine, budget", ROWS, ids=[r[0] for r in ROWS])
def test_a_finding_of_each_new_cause_replays_as_still_disagreeing(tmp_path, monkeypatch, capsys, cause, engine,
                                                                  budget):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRADSPEC_REPORT_DIR", raising=False)
    rc = cli.main(["fuzz", "--engine", f"tests._planted_engines:{engine}", "--ops", "exp,add,mul,sum",
                   "--max-examples", str(budget), "--seed", "1", "--report-dir", "rep"])
    out = capsys.readouterr().out
    assert rc == 1, out
    reports = json.loads((tmp_path / "rep" / "summary.json").read_text())["reports"]
    rec = next((r for r in reports if _cause_of(r) == cause), None)
    assert rec is not None, [(r["kind"], _cause_of(r)) for r in reports]
    case = str(tmp_path / "rep" / rec["id"] / "case.json")
    args = ["replay", case, "--allow-import", "tests._planted_engines"]
    if cause == SUBPROCESS:
        env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run([sys.executable, "-m", "gradspec.cli", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        rc, out = proc.returncode, proc.stdout + proc.stderr
    else:
        rc = cli.main(args)
        out = capsys.readouterr().out
    assert rc == 1, out  # still disagrees
