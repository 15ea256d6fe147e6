"""``gradspec fuzz --workers K / --tx``: workers that share no disk with the controller, and dead workers.

Workers here are xdist ``popen`` processes chdir'd into folders of their own; the campaign reaches
them through xdist (``workerinput``) and their findings come back in test reports, so the
controller alone writes report folders.  A worker that dies is reported with the case it was on,
and the budget it did not run is run again or reported lost (the run never exits 0 smaller).
"""

from __future__ import annotations

import json

import pytest

from gradspec.fuzz.workers import CHUNKS_PER_WORKER, chunk_plan
from tests.test_cli import FAST_ORACLES, folders, gradspec, plant, summary

DIE_ONCE = '''
import os
from gsplant import Planted


class DieOnce(Planted):
    """Kills its worker process the first time it applies exp (a marker file remembers), else correct."""

    def apply(self, op, *args, **params):
        marker = os.environ["GS_DIE_MARKER"]
        if op == "exp" and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(7)
        return super().apply(op, *args, **params)


engine = DieOnce("dieonce", bug_op="none")
'''


@pytest.mark.parametrize("workers, budget", [(1, 1), (2, 16), (2, 18), (3, 5), (4, 1000)])
def test_chunks_split_the_budget_exactly(workers, budget):
    plan = chunk_plan(workers, budget)
    assert sum(c["budget"] for c in plan) == budget
    assert len(plan) == min(workers * CHUNKS_PER_WORKER, budget)
    assert max(c["budget"] for c in plan) - min(c["budget"] for c in plan) <= 1


def test_time_budget_is_sliced_per_chunk():
    plan = chunk_plan(2, 10**12, seconds=60.0)
    assert len(plan) == 2 * CHUNKS_PER_WORKER and all(c["seconds"] == 60.0 / CHUNKS_PER_WORKER for c in plan)


def _fuzz(tmp_path, env, engine, *extra, examples=16, seed=4):
    return gradspec("fuzz", "--engine", engine, "--ops", "exp,mul", "--oracles", FAST_ORACLES,
                    "--max-examples", examples, "--seed", seed, "--shrink-seconds", 3, "--report-dir",
                    tmp_path / "reports", "-q", *extra, cwd=tmp_path, env=env, timeout=300)


def test_workers_in_separate_dirs_each_find_the_bug_and_only_the_controller_writes(tmp_path):
    env = plant(tmp_path)
    a, b = tmp_path / "worker-a", tmp_path / "worker-b"
    a.mkdir()
    b.mkdir()
    r = _fuzz(tmp_path, env, "gsplant:bug", "--tx", f"popen//chdir={a}", "--tx", f"popen//chdir={b}")
    assert r.returncode == 1, r.stdout + r.stderr
    s = summary(tmp_path / "reports")
    assert s["cases"] == 16 and s["lost"] == [] and s["errors"] == []
    finders = {p["worker"] for p in s["processes"] if p["found"]}
    assert finders == {"gw0", "gw1"}, s["processes"]  # each worker found the planted bug itself
    written = {p.name for p in folders(tmp_path / "reports")}
    assert written == {rec["id"] for rec in s["reports"] + s["superseded"]}
    for w in (a, b):  # nothing of the campaign's output was written where the workers live
        assert not [p for p in w.rglob("*") if p.name.startswith("d-") or p.name in ("summary.json", "index.html",
                                                                                  "case.json")]


def test_a_worker_that_dies_once_is_reported_with_its_case_and_its_budget_rerun(tmp_path):
    env = plant(tmp_path)
    (tmp_path / "gsdieonce.py").write_text(DIE_ONCE)
    env["GS_DIE_MARKER"] = str(tmp_path / "died")
    r = _fuzz(tmp_path, env, "gsdieonce:engine", "--workers", 2)
    assert r.returncode == 1, r.stdout + r.stderr  # the crash is a finding
    s = summary(tmp_path / "reports")
    crash = next(rec for rec in s["reports"] if rec["kind"] == "crash")
    case = json.loads((tmp_path / "reports" / crash["id"] / "case.json").read_text())
    assert "exp" in [n["op"] for n in case["nodes"]]  # the case the worker was on
    assert "died while checking this case" in crash["message"]
    assert crash["cause"]["id"] == "process-died"  # CONTRACT §8: a crash names its cause too (tryout4 #6: None)
    assert s["lost"] == [] and s["cases"] == 16, (s["lost"], s["cases"])  # the lost chunk ran again
    dead = {c["pid"] for c in s["crashed"]}
    assert len(dead) == 1, s["crashed"]
    assert not dead & {p["pid"] for p in s["processes"]}


def test_budget_a_dead_worker_never_ran_is_reported_never_silently_dropped(tmp_path):
    env = plant(tmp_path)
    # Every worker dies on every case with exp, in the first and in the retry session alike (an engine
    # armed on one worker id only is not enough: xdist may hand the retried chunk to the other one).
    # Only in workers: the controller runs the engine too (the §5 rules of --engine, re-checks).
    (tmp_path / "gsdieall.py").write_text(
        "import os\nfrom gsplant import Planted\n\n\nclass InWorkers(Planted):\n"
        "    def _armed(self):\n        return bool(os.environ.get('PYTEST_XDIST_WORKER'))\n\n\n"
        "engine = InWorkers('dieall', bug_op='mul', faults={'exp': 'die'})\n")
    r = _fuzz(tmp_path, env, "gsdieall:engine", "--workers", 2)
    assert r.returncode != 0, r.stdout + r.stderr
    s = summary(tmp_path / "reports")
    assert s["lost"], s
    lost = sum(c["cases"] for c in s["lost"])
    assert s["cases"] + lost == 16  # what ran plus what is reported lost is the whole budget
    assert any("lost" in e for e in s["errors"]) and "lost" in r.stdout
    assert any(rec["kind"] == "crash" for rec in s["reports"])


def test_every_finding_of_a_distributed_campaign_has_its_report_folder(tmp_path):
    """tryout4 #2: a worker's finding is diagnosed there (the reduction's culprit, the engine's cause); the
    controller's plain re-check of its case gave every not-localised finding of the diamond-order engine
    one and the same id, so one folder was written and the other ids were listed (summary, index,
    printed replay commands) without one."""
    import os
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k not in ("GRADSPEC_REPORT_DIR", "PYTEST_XDIST_WORKER")}
    out = tmp_path / "reports"
    r = gradspec("fuzz", "--engine", "tests._planted_engines:dfs_preorder", "--allow-import", "tests",
                 "--oracles", FAST_ORACLES, "--workers", 2, "--max-examples", 400, "--seed", 5, "--shrink-seconds", 3,
                 "--report-dir", out, "-q", cwd=root, env=env, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    s = summary(out)
    listed = [rec["id"] for rec in s["reports"] + s["superseded"]]
    # the planted bug was found on value cases by the workers (listed, or superseded by the §5 rule's report)
    assert any(rec["kind"] == "value" for rec in s["reports"] + s["superseded"]), s
    assert len(listed) == len(set(listed))
    missing = [rid for rid in listed if not (out / rid / "case.json").is_file()]
    assert not missing, (missing, [p.name for p in folders(out)])
    for line in r.stdout.splitlines():  # every printed replay command names a case that is there
        if "gradspec replay" in line:
            assert os.path.isfile(line.split("gradspec replay ", 1)[1].split()[0]), line
    for rec in s["reports"] + s["superseded"]:  # and each folder is the finding listed under its id
        saved = json.loads((out / rec["id"] / "discrepancy.json").read_text())
        assert (saved["id"], saved["kind"], sorted(saved["ops"])) == (rec["id"], rec["kind"], sorted(rec["ops"]))


def test_sigint_to_the_controller_alone_is_an_interruption_not_a_crash(tmp_path):
    """tryout4 #6: `kill -INT <controller>` (not the process group): the workers it stops in the middle of a
    case are no crash of the engine; the run ends as interrupted (exit 130) and says so, not 'exit 3'."""
    import signal
    import time

    from tests.test_cli import start

    env = plant(tmp_path)
    env["GRADSPEC_WORKER_DIR"] = str(tmp_path / "local")
    # Every case takes >= 0.3 s in a worker (a slow correct engine): a worker is mid-case when the signal comes.
    (tmp_path / "gsslowok.py").write_text(
        "import os\nfrom gsplant import Planted\n\n\nclass InWorkers(Planted):\n"
        "    def _armed(self):\n        return bool(os.environ.get('PYTEST_XDIST_WORKER'))\n\n\n"
        "engine = InWorkers('slowok', bug_op='none', faults={'exp': 'slow', 'mul': 'slow'})\n")
    out = tmp_path / "reports"
    proc = start("fuzz", "--engine", "gsslowok:engine", "--ops", "exp,mul", "--oracles", FAST_ORACLES,
                 "--workers", 2, "--seconds", 120, "--seed", 3, "--report-dir", out, cwd=tmp_path, env=env)
    try:
        deadline = time.time() + 90
        while time.time() < deadline and proc.poll() is None and not list((tmp_path / "local").rglob("inflight-*")):
            time.sleep(0.2)
        assert proc.poll() is None and list((tmp_path / "local").rglob("inflight-*")), "no worker started a case"
        time.sleep(2.0)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stdout + stderr
    s = summary(out)
    assert s["interrupted"] is True and s["reports"] == [] and s["crashed"] == [], s["reports"]
    assert not folders(out)
    assert "exit 130" in stdout and "exit 3" not in stdout, stdout


def test_user_ops_given_by_import_path_reach_the_workers(tmp_path):
    """chaos H4: `--workers 2 --ops module:attr` sent the op's name, which the workers' op table never had
    (every chunk: "no op named 'soft_threshold'", exit 3); the workers import the module as one process does."""
    import shutil
    from pathlib import Path

    shutil.copy(Path(__file__).resolve().parent.parent / "examples" / "user_op.py", tmp_path / "user_op.py")
    r = gradspec("fuzz", "--ops", "user_op:soft_threshold,add", "--oracles", FAST_ORACLES, "--max-examples", 8,
                 "--seed", 1, "--workers", 2, "--report-dir", tmp_path / "reports", "-q", cwd=tmp_path, timeout=300)
    s = summary(tmp_path / "reports")
    assert s["errors"] == [] and s["cases"] == 8, r.stdout + r.stderr
    assert r.returncode == 0, r.stdout + r.stderr
