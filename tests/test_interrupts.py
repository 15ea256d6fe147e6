"""Interruptions never lose what was computed (chaos review H1, H2, M2, M7, L1; CONTRACT §6 exit codes).

Each signal comes from the process itself at a chosen moment (tests/_interrupt_ops.py), so the moment is
deterministic; every subprocess is bounded by a timeout.  Exit codes: a run that found something exits 1 even when
interrupted (README: "130: interrupted with nothing found"); an interrupted run without findings exits 130 for
Ctrl-C and 128 + N for signal N (143 SIGTERM, 129 SIGHUP), as shells and CI runners expect.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ORACLES = "reference,jacobian"  # no torch import: each subprocess starts in ~1 s
OPS = "tests._interrupt_ops"


def _env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    for k in ("GRADSPEC_REPORT_DIR", "PYTEST_XDIST_WORKER", "CI"):
        env.pop(k, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _run(args, tmp_path, timeout=120, module="gradspec.cli", **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=tmp_path, env=_env(**env),
                          capture_output=True, text=True, timeout=timeout)


def _summary(d: Path) -> dict:
    return json.loads((d / "summary.json").read_text())


def _folders(d: Path) -> list:
    return sorted(p for p in d.iterdir() if p.is_dir() and p.name.startswith("d-"))


SHRINK_CASES = [
    pytest.param("INT", id="ctrl-c-while-shrinking"),
    pytest.param("TERM", id="sigterm-while-shrinking"),
]


@pytest.mark.parametrize("sig", SHRINK_CASES)
def test_a_finding_being_shrunk_is_kept_unshrunk(tmp_path, sig):
    """H1: the discrepancy being shrunk when the signal came is reported (one report, its note says it was not
    shrunk), and the run exits 1: it found something."""
    out = tmp_path / "r"
    run = _run(["fuzz", "--ops", f"{OPS}:int_bad", "--oracles", ORACLES, "--max-examples", 50, "--seed", 1,
                "--report-dir", out, "--junitxml", tmp_path / "j.xml"], tmp_path, GS_TEST_SIGNAL=sig)
    assert run.returncode == 1, run.stdout + run.stderr
    s = _summary(out)
    assert s["state"] != "running" and s["interrupted"] is True
    assert s["discrepancies"] == 1 and s["status"] == "disagree", s
    (folder,) = _folders(out)
    assert {"case.json", "repro.py", "index.html"} <= {p.name for p in folder.iterdir()}
    rec = json.loads((folder / "discrepancy.json").read_text())
    assert rec["note"].startswith("shrinking interrupted"), rec["note"]
    assert "what ran agreed" not in run.stdout and f"{folder.name}  " in run.stdout
    assert "(shrinking interrupted: not shrunk)" in run.stdout
    assert (tmp_path / "j.xml").exists()
    # The unshrunk case file is whole: a new process replays it (the user op imported only as allowed) and it
    # still disagrees (exit 1), as a shrunk one would.
    replay = _run(["replay", folder / "case.json", "--allow-import", OPS], tmp_path)
    assert replay.returncode == 1, replay.stdout + replay.stderr


STOP_CASES = [
    pytest.param("INT", 130, id="ctrl-c"),
    pytest.param("TERM", 143, id="sigterm"),
    pytest.param("HUP", 129, id="sighup"),
]


@pytest.mark.parametrize("sig, code", STOP_CASES)
def test_a_signal_mid_campaign_writes_everything(tmp_path, sig, code):
    """H2: SIGTERM / SIGHUP (a cancelled CI job, docker stop, timeout(1)) stop the run as Ctrl-C does: the
    summary, the index, the JUnit file and the console say what ran; the exit status is the signal's."""
    out = tmp_path / "r"
    run = _run(["fuzz", "--ops", f"{OPS}:good", "--oracles", ORACLES, "--max-examples", 200, "--seed", 1,
                "--report-dir", out, "--junitxml", tmp_path / "j.xml", "--summary-md", tmp_path / "s.md"],
               tmp_path, GS_TEST_SIGNAL=sig, GS_TEST_SKIP=5)
    assert run.returncode == code, run.stdout + run.stderr
    s = _summary(out)
    assert s["state"] != "running" and s["interrupted"] is True and s["status"] == "inconclusive"
    assert 1 <= s["cases"] < 200, s["cases"]  # (cases counted when their check ends: the one cut is not)
    assert s["reason"].startswith("interrupted") and (sig == "INT" or f"SIG{sig}" in s["reason"]), s["reason"]
    assert "no discrepancy" not in (out / "index.html").read_text()
    assert (tmp_path / "j.xml").exists() and (tmp_path / "s.md").exists()
    assert f"INTERRUPTED (exit {code})" in run.stdout
    again = _run(["fuzz", "--ops", f"{OPS}:good", "--oracles", ORACLES, "--max-examples", 5, "--seed", 2,
                  "--report-dir", out], tmp_path)
    assert "did not finish" not in again.stderr  # the interrupted run finished its bookkeeping


def test_a_case_cut_by_the_signal_is_no_finding(tmp_path):
    """Code under test that swallows the KeyboardInterrupt returns what it had when the signal cut it: that
    case's verdict is not trusted (never cry wolf); the run is interrupted with nothing found."""
    out = tmp_path / "r"
    # (40 cases: one value set per graph, so no prefetch: the signal cuts the check itself)
    run = _run(["fuzz", "--ops", f"{OPS}:swallow", "--oracles", ORACLES, "--max-examples", 40, "--seed", 1,
                "--report-dir", out], tmp_path, GS_TEST_SKIP=5)
    assert run.returncode == 130, run.stdout + run.stderr
    s = _summary(out)
    assert s["interrupted"] is True and s["discrepancies"] == 0 and not _folders(out), s


def test_a_signal_while_a_report_is_written_keeps_the_folder(tmp_path):
    """M2: Ctrl-C right after a finding's repro.py was staged: the folder the summary lists exists, whole."""
    out = tmp_path / "r"
    run = _run(["fuzz", "--ops", f"{OPS}:int_bad", "--oracles", ORACLES, "--max-examples", 30, "--seed", 1,
                "--report-dir", out], tmp_path, module=OPS, GS_TEST_MODE="none")
    assert run.returncode == 1, run.stdout + run.stderr
    s = _summary(out)
    listed = {r["id"] for r in s["reports"]}
    assert listed and listed == {p.name for p in _folders(out)}
    for rid in listed:
        assert {"case.json", "repro.py", "index.html", "discrepancy.json"} <= {p.name for p in (out / rid).iterdir()}


def test_a_signal_during_the_campaigns_set_up_ends_the_running_state(tmp_path):
    """L1: Ctrl-C after the header (summary "running") and before the campaign's loop: the summary is final."""
    out = tmp_path / "r"
    run = _run(["fuzz", "--engine", f"{OPS}:engine", "--ops", "add,exp", "--oracles", ORACLES, "--max-examples", 20,
                "--report-dir", out], tmp_path, GS_TEST_ENGINE_CALL=2, GS_TEST_MODE="none")
    assert run.returncode == 130, run.stdout + run.stderr
    s = _summary(out)
    assert s["state"] != "running" and s["interrupted"] is True and s["status"] == "inconclusive"


def _sleepy_case(tmp_path: Path) -> Path:
    import numpy as np

    import gradspec as gs
    from tests import _interrupt_ops

    case = gs.Case.build({"x": np.ones(3)}, [("y", _interrupt_ops.sleepy.name, ["x"], {})], ["y"], [np.ones(3)])
    case.user_ops = {_interrupt_ops.sleepy.name: f"{OPS}:sleepy"}
    path = tmp_path / "case.json"
    path.write_text(case.to_json())
    return path


REPLAY_CASES = [
    pytest.param(signal.SIGINT, 130, id="kill-int-of-replay"),
    pytest.param(signal.SIGTERM, 143, id="sigterm-of-replay"),
]


@pytest.mark.parametrize("sig, code", REPLAY_CASES)
def test_replay_interrupted_exits_with_the_signals_code(tmp_path, sig, code):
    """M7: a signal to `gradspec replay` (its own pid: the checking child is told) is an interruption, not an
    "internal error" (exit 2), and it ends promptly though the case hangs."""
    path, mark = _sleepy_case(tmp_path), tmp_path / "sleeping"
    proc = subprocess.Popen([sys.executable, "-m", "gradspec.cli", "replay", str(path), "--allow-import", OPS,
                             "--oracles", ORACLES], cwd=tmp_path, env=_env(GS_TEST_SLEEP=60, GS_TEST_MARK=mark),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):  # until the child sleeps in the op's forward (bounded: 60 s)
            if mark.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert proc.poll() is None and mark.exists()
        proc.send_signal(sig)
        t0 = time.time()
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert time.time() - t0 < 20
    assert proc.returncode == code, stdout + stderr
    assert "internal error" not in stderr and "interrupted" in stderr
    assert "still crashes" not in stdout


def test_a_second_sigterm_is_a_hard_stop(tmp_path):
    """The sender insists: the second SIGTERM ends the process by that signal, whatever it was doing."""
    code = ("import os, signal, time\n"
            "from gradspec._private import interrupts\n"
            "with interrupts.deferred():\n"
            "    os.kill(os.getpid(), signal.SIGTERM); time.sleep(0.2)\n"
            "    print('held', flush=True)\n"
            "    os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)\n"
            "print('not reached')\n")
    run = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60)
    assert run.returncode == -signal.SIGTERM and run.stdout == "held\n", (run.returncode, run.stdout, run.stderr)


def test_workers_interrupted_hand_in_their_cases_and_findings(tmp_path):
    """H3: --workers 2, a worker is shrinking a finding, the controller alone gets SIGINT: the workers are told,
    the finding (unshrunk) and the cases they checked are kept; exit 1; the controller ends promptly."""
    pytest.importorskip("xdist")
    out, mark = tmp_path / "r", tmp_path / "shrinking"
    # (a wrong engine, not a user op: --workers with --ops module:attr is chaos H4, another fix)
    proc = subprocess.Popen([sys.executable, "-m", "gradspec.cli", "fuzz", "--engine", f"{OPS}:engine", "--ops",
                             "add,mul,sum", "--oracles", ORACLES, "--max-examples", "4000", "--workers", "2",
                             "--seed", "3", "--report-dir", str(out)], cwd=tmp_path,
                            env=_env(GS_TEST_MODE="none", GS_TEST_MARK=mark, GS_TEST_SLOW=0.2,
                                     GS_TEST_ENGINE="broadcast_mean"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):  # until a worker shrinks (bounded: 120 s)
            if mark.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert proc.poll() is None and mark.exists()
        proc.send_signal(signal.SIGINT)
        t0 = time.time()
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 1, stdout + stderr
    assert time.time() - t0 < 45  # (measured 5-8 s at load 20 on 2 cores; xdist's teardown is most of it)
    s = _summary(out)
    assert s["interrupted"] is True and s["discrepancies"] >= 1 and s["cases"] >= 1, s
    notes = [json.loads((f / "discrepancy.json").read_text())["note"] for f in _folders(out)]
    assert any(n.startswith("shrinking interrupted") for n in notes), notes


def test_a_signal_to_one_worker_alone_is_no_interrupted_run(tmp_path):
    """L7: SIGINT to one worker (not the controller): the run is not "interrupted" (130); the share of the
    budget that worker did not run is lost, said, and the run inconclusive (exit 3), never a silent OK."""
    pytest.importorskip("xdist")
    out = tmp_path / "r"
    run = _run(["fuzz", "--engine", f"{OPS}:engine", "--ops", "add,exp", "--oracles", ORACLES, "--max-examples", 40,
                "--workers", 2, "--seed", 1, "--report-dir", out], tmp_path, GS_TEST_SKIP=3,
               GS_TEST_ONCE=tmp_path / "once")
    assert run.returncode == 3, run.stdout + run.stderr
    s = _summary(out)
    assert s["interrupted"] is False and s["status"] == "inconclusive" and s["lost"], s
    assert any("signal sent to it alone" in e for e in s["errors"]), s["errors"]


@pytest.mark.parametrize("lost, said", [
    pytest.param({"chunk": 3, "cases": 25, "seconds": None}, "25 cases", id="cases-budget"),
    pytest.param({"chunk": 3, "cases": None, "seconds": 7.5}, "7.5 s", id="seconds-budget"),
])
def test_a_lost_chunk_of_either_budget_is_said(lost, said):
    """A --seconds chunk lost (its worker interrupted alone, or dead) has no case count: the summary said
    'internal error: TypeError' (chaos repro 06 with KSIG=INT) instead of what was lost."""
    from gradspec import fuzz

    stats = fuzz.Stats(shards=2)
    stats.cases, stats.lost = 10, [{**lost, "why": "its worker was interrupted by a signal sent to it alone"}]
    stats.pair_counts["reference vs jacobian"] = stats.pair_agree["reference vs jacobian"] = 10  # (all agreed)
    s = fuzz.summary_json(fuzz.Config(max_examples=10), stats)
    assert s["status"] == "inconclusive" and said in s["reason"], s["reason"]
