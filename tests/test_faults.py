"""Fault injection: engines and oracles that raise, hang, return garbage, kill their process; Ctrl-C; a full disk.

Every campaign here plants a plain wrong derivative (on ``mul``) next to the fault (on ``exp``), and
every test checks that what was found is still reported at the end: the campaign keeps going and
loses nothing.  The planted engines live in tests/test_cli.py (``PLANT_SRC``).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import time

import pytest

from tests.test_cli import FAST_ORACLES, folders, gradspec, plant, start, summary


def kinds(report_dir) -> dict:
    return {(r["kind"], tuple(r["ops"])): r for r in summary(report_dir)["reports"]}


def page(report_dir, rid) -> str:
    return (report_dir / rid / "index.html").read_text()


def test_engine_and_oracle_that_raise_are_discrepancies_with_tracebacks(tmp_path):
    env = plant(tmp_path)
    out = tmp_path / "r"
    proc = gradspec("fuzz", "--engine", "gsplant:raising", "--ops", "exp,mul", "--max-examples", 20,
                    "--oracles", FAST_ORACLES + ",gsplant:flaky_oracle", "--seed", 2, "--report-dir", out,
                    cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr
    s = summary(out)
    assert s["cases"] == 20  # the campaign went on after each failure
    found = {(r["kind"], tuple(sorted(r["oracles"]))) for r in s["reports"]}
    # The engine's crash on exp is one bug however it was met: the §5 rule search's report (the exact calls)
    # stands for it and the value campaign's raised report is listed under it, its folder kept with the traceback
    # (tryout8 F5); the witness oracle's crash on the same op is a bug of its own and keeps its report.
    rule = next(r for r in s["reports"] if r["kind"] == "semantics:error-type" and r["ops"] == ["exp"])
    assert ("raised", ("flaky-oracle", "reference")) in found
    assert ("value", ("raising", "reference")) in found  # the planted mul bug
    raised = next(r for r in s["superseded"] if r["kind"] == "raised" and "raising" in r["oracles"])
    assert raised["superseded_by"] == rule["id"]
    html = page(out, raised["id"])
    assert "Traceback" in html and "ValueError" in html and "in apply" in html
    assert "planted &lt;script&gt;" in html and "<script>" not in html


def test_engine_that_hangs_is_cut_by_the_case_timeout(tmp_path):
    env = plant(tmp_path)
    out = tmp_path / "r"
    t0 = time.time()
    proc = gradspec("fuzz", "--engine", "gsplant:hanging", "--ops", "exp,mul", "--max-examples", 10,
                    "--oracles", FAST_ORACLES, "--seed", 2, "--case-timeout", "0.4", "--shrink-seconds", "1",
                    "--report-dir", out, cwd=tmp_path, env=env)
    assert time.time() - t0 < 100
    assert proc.returncode == 1, proc.stderr
    s = summary(out)
    assert s["cases"] == 10 and s["timeouts"] >= 1
    timeout = next(r for r in s["reports"] if r["kind"] == "timeout")
    assert "exp" in timeout["ops"] and "hanging" in timeout["oracles"]
    html = page(out, timeout["id"])
    assert "CaseTimeout" in html and "time.sleep" in html  # the traceback shows where it hung
    assert any(r["kind"] == "value" for r in s["reports"])  # the mul bug, found as well


@pytest.mark.parametrize("engine, kind, text", [("nan", "nan-inf-pattern", "nan"),
                                                 ("shape", "shape", "gradient shape () vs (2,)"),
                                                 ("wrongtype", "raised", "numeric numpy array")])
def test_engine_returning_nan_wrong_shapes_or_wrong_types(tmp_path, engine, kind, text):
    env = plant(tmp_path)
    out = tmp_path / "r"
    proc = gradspec("fuzz", "--engine", f"gsplant:{engine}", "--ops", "exp,mul", "--max-examples", 12,
                    "--oracles", FAST_ORACLES, "--seed", 1, "--report-dir", out, cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr
    s = summary(out)
    assert s["cases"] == 12
    bad = next(r for r in s["reports"] if r["kind"] == kind)
    assert "exp" in bad["ops"] and text in bad["message"]
    assert any(r["kind"] == "value" and r["ops"] == ["mul"] for r in s["reports"])  # the planted bug as well
    assert len(folders(out)) == len(s["reports"])


def test_segfault_in_process_is_reported_by_the_next_run(tmp_path):
    env = plant(tmp_path)
    out = tmp_path / "r"
    dead = gradspec("fuzz", "--engine", "gsplant:segv", "--ops", "exp,mul", "--max-examples", 20,
                    "--oracles", FAST_ORACLES, "--seed", 4, "--report-dir", out, cwd=tmp_path, env=env)
    assert dead.returncode == -signal.SIGSEGV, dead.stderr
    before = folders(out)
    after = gradspec("fuzz", "--ops", "mul", "--max-examples", 3, "--oracles", FAST_ORACLES, "--report-dir", out,
                     cwd=tmp_path, env=env)
    assert after.returncode == 0, after.stderr  # the earlier run's crash is listed, not this run's failure
    assert "died while checking a case" in after.stderr
    crash = [f for f in folders(out) if json.loads((f / "discrepancy.json").read_text())["kind"] == "crash"]
    assert len(crash) == 1
    html = (crash[0] / "index.html").read_text()
    assert "Segmentation fault" in html and "in apply" in html  # faulthandler's traceback of the dead process
    assert set(before) <= set(folders(out))  # reports written before the crash are still there
    index = (out / "index.html").read_text()
    assert crash[0].name in index and "From earlier runs" in index
    assert not list((out / ".gradspec" / "runs").iterdir())  # the dead run's bookkeeping is cleaned up
    # Replaying the crash case crashes a child process, not replay itself.
    replay = gradspec("replay", crash[0] / "case.json", "--allow-import", "gsplant", "--oracles", FAST_ORACLES,
                      cwd=tmp_path, env=env)
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert "died (SIGSEGV)" in replay.stdout and "still crashes" in replay.stdout


def test_sigint_writes_the_summary_and_reports_of_what_ran(tmp_path):
    env = plant(tmp_path)
    out = tmp_path / "r"
    proc = start("fuzz", "--engine", "gsplant:bug", "--ops", "mul,exp", "--seconds", 120,
                 "--oracles", FAST_ORACLES, "--seed", 5, "--report-dir", out, cwd=tmp_path, env=env)
    try:
        deadline = time.time() + 90
        while time.time() < deadline and not list(out.glob("d-*/index.html")) and proc.poll() is None:
            time.sleep(0.2)
        assert list(out.glob("d-*/index.html")), "no discrepancy reported before the interrupt"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stdout + stderr
    s = summary(out)
    assert s["interrupted"] is True and s["cases"] >= 1
    ids = {r["id"] for r in s["reports"]}
    assert ids and ids == {f.name for f in folders(out)}
    assert "INTERRUPTED" in stdout
    index = (out / "index.html").read_text()
    assert "interrupted" in index and all(i in index for i in ids)


def test_full_disk_is_a_clear_error_that_keeps_what_was_found(tmp_path, monkeypatch, capsys):
    from gradspec import cli, report

    plant(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "r"
    real = report._swap_in
    calls = []

    def full_after_first(staging, folder, rec, trash):
        calls.append(folder)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), folder)
        return real(staging, folder, rec, trash)

    monkeypatch.setattr(report, "_swap_in", full_after_first)
    rc = cli.main(["fuzz", "--engine", "gsplant:raising", "--ops", "exp,mul", "--max-examples", "20", "--oracles",
                   FAST_ORACLES, "--seed", "2", "--report-dir", str(out), "-q"])
    captured = capsys.readouterr()
    assert rc == 1  # discrepancies were found (printed below when unwritten): a finding, not a usage error
    assert "No space left on device" in captured.err and "gradspec: error:" in captured.err
    s = summary(out)
    assert s["discrepancies"] == 2  # both findings are in the summary ...
    unwritten = [r for r in s["reports"] if r.get("report_error")]
    assert len(unwritten) == 1 and unwritten[0]["case"]  # ... the unwritten one with its case
    assert "unwritten discrepancy" in captured.out and '"format": "gradspec-case/1"' in captured.out
    assert len(folders(out)) == 1  # the report written before the disk filled up is intact
    assert (folders(out)[0] / "index.html").stat().st_size > 0
    assert not list((out / ".gradspec" / "staging").iterdir())  # no half-written folder left behind


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="per-case timeouts need signal.setitimer")
def test_guarded_check_never_raises_or_hangs():
    import numpy as np

    import gradspec as gs
    from gradspec import fuzz
    from gradspec.oracles import Oracle, get

    class Hangs(Oracle):
        name = "hangs"

        def vjp(self, case):
            time.sleep(30)

    class BadApplies(Oracle):
        name = "bad-applies"

        def applies(self, case):
            raise KeyError("<oops>")

    case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    t0 = time.time()
    v = fuzz.guarded_check(case, [get("reference"), Hangs(), BadApplies()], timeout=0.3)
    assert time.time() - t0 < 5
    (d,) = v.discrepancies
    assert d.kind == "timeout" and d.oracles[0] == "hangs" and "time.sleep" in d.traceback
    assert "bad-applies" in v.skipped
    # In a thread (no SIGALRM there) a watchdog does the same.
    box = []
    import threading

    th = threading.Thread(target=lambda: box.append(fuzz.guarded_check(case, [get("reference"), Hangs()], 0.3)))
    th.start()
    th.join(10)
    assert box and box[0].discrepancies[0].kind == "timeout"
