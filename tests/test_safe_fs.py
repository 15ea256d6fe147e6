"""Report dirs, state dirs and worker folders handed over by somebody else are data (redteam session 11).

Each test builds a hostile folder in tmp_path (symlinks, FIFOs, planted in-flight files) and checks that
gradspec neither reads, writes, walks nor deletes through it, and never blocks on it.
"""

import json
import os
import threading
import time

import numpy as np
import pytest

import gradspec as gs
from gradspec import caseio, cli, report
from gradspec._private import records, safefs
from gradspec.check import Discrepancy, Verdict
from gradspec.fuzz import Config, Stats, cleanup_stale_runs, distributed, liveness, report_crashes, stale_inflight
from gradspec.fuzz.campaign import _disable_faulthandler, _enable_faulthandler
from gradspec.fuzz.inflight import Inflight

OLD = time.time() - 3 * 86400  # past cleanup_stale_runs' 24 h
RUN = "20261101-000000-abcdef"  # a run id as Config makes them


def _case():
    return gs.Case.build({"x": np.array([0.5, -1.0])}, [("y", "exp", ["x"], {})], ["y"], [np.array([1.0, 2.0])])


def _victim(tmp_path, name="victim"):
    v = tmp_path / name
    (v / "deep").mkdir(parents=True)
    (v / "deep" / "precious.txt").write_text("precious")
    (v / "discrepancy.json").write_text('{"mine": true}')
    return v


def _untouched(victim):
    return (victim / "deep" / "precious.txt").read_text() == "precious" and \
        json.loads((victim / "discrepancy.json").read_text()) == {"mine": True}


def _crash():
    case = _case()
    d = Discrepancy(kind="crash", oracles=("process", "reference"), message="died", case=case)
    return d, Verdict(case, {}, [], [d], {}, {})


def _dead_inflight(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "inflight-999999.json").write_text(_case().to_json())  # pid 999999: above any pid_max default


# ---------------------------------------------------------------------------------------------
# findings 1 and 2: a .gradspec (or its runs) that is a symlink is refused; nothing is walked
# ---------------------------------------------------------------------------------------------

def _link_state(rep, victim):
    os.symlink(victim, rep / ".gradspec")


def _link_runs(rep, victim):
    (rep / ".gradspec").mkdir()
    os.symlink(victim, rep / ".gradspec" / "runs")


@pytest.mark.parametrize("plant", [_link_state, _link_runs], ids=["gradspec-is-link", "runs-is-link"])
@pytest.mark.parametrize("call", [
    lambda rep: cleanup_stale_runs(str(rep)),
    lambda rep: stale_inflight(str(rep / ".gradspec")),
    lambda rep: report_crashes(Config(report_dir=str(rep)), Stats(), state_root=str(rep / ".gradspec")),
], ids=["cleanup", "stale_inflight", "report_crashes"])
def test_symlinked_state_is_refused_and_nothing_outside_changes(tmp_path, plant, call):
    victim = _victim(tmp_path)
    for name in ("Nov20_exp1", RUN):  # a TensorBoard log folder, and one named like a run
        (victim / name).mkdir()
        os.utime(victim / name, (OLD, OLD))
    _dead_inflight(victim / "deep" / "folder")
    _dead_inflight(victim / RUN)
    rep = tmp_path / "reports"
    rep.mkdir()
    plant(rep, victim)
    with pytest.raises(safefs.UnsafePath, match="symbolic link"):
        call(rep)
    assert _untouched(victim)
    assert (victim / "Nov20_exp1").is_dir() and (victim / RUN / "inflight-999999.json").exists()
    assert (victim / "deep" / "folder" / "inflight-999999.json").exists()


def test_a_report_is_never_staged_through_a_symlinked_gradspec(tmp_path):
    victim = _victim(tmp_path)
    os.symlink(victim, tmp_path / ".gradspec")  # staging and trash folders live in .gradspec
    with pytest.raises(safefs.UnsafePath, match="symbolic link"):
        report.write_discrepancy_report(str(tmp_path), *_crash())
    assert _untouched(victim) and sorted(os.listdir(victim)) == ["deep", "discrepancy.json"]


@pytest.mark.parametrize("name", [".gradspec", ".hypothesis"])
def test_cli_refuses_a_symlinked_state_folder_before_any_case(tmp_path, capsys, name):
    victim = _victim(tmp_path)
    (victim / "runs" / "Nov20_exp1").mkdir(parents=True)
    os.utime(victim / "runs" / "Nov20_exp1", (OLD, OLD))
    rep = tmp_path / "reports"
    rep.mkdir()
    os.symlink(victim, rep / name)
    code = cli.main(["fuzz", "--max-examples", "1", "-q", "--report-dir", str(rep)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{name} is a symbolic link" in err and "remove it" in err, err
    assert _untouched(victim) and sorted(os.listdir(victim)) == ["deep", "discrepancy.json", "runs"]


def test_in_flight_files_are_looked_for_only_in_run_folders(tmp_path):
    state = tmp_path / "reports" / ".gradspec"
    _dead_inflight(state / "runs" / RUN)  # where a campaign writes it: found
    _dead_inflight(state / "runs" / RUN / "deeper")  # anywhere else: never walked into
    _dead_inflight(state / "elsewhere")
    os.symlink(_victim(tmp_path), state / "runs" / "20261101-000000-000000")  # a run folder that is a link
    _dead_inflight(tmp_path / "victim" / "x")
    found = stale_inflight(str(state))
    assert [os.path.relpath(f["path"], state) for f in found] == [f"runs/{RUN}/inflight-999999.json"]


@pytest.mark.parametrize("name, extra, removed", [
    (RUN, None, True),  # gradspec's own: over and old
    ("Nov20_exp1", None, False),  # not a run id: not ours
    (RUN, "events.out.tfevents", False),  # something else was put in it
], ids=["own-run", "foreign-name", "foreign-file"])
def test_cleanup_removes_only_folders_gradspec_made(tmp_path, name, extra, removed):
    run = tmp_path / ".gradspec" / "runs" / name
    run.mkdir(parents=True)
    (run / "shard-0.json").write_text(json.dumps({"pid": 999999}))
    if extra:
        (run / extra).write_text("logs")
    os.utime(run, (OLD, OLD))
    cleanup_stale_runs(str(tmp_path))
    assert run.exists() != removed


def test_an_earlier_runs_crash_is_reported_and_its_folder_removed(tmp_path):
    rep = tmp_path / "reports"
    _dead_inflight(rep / ".gradspec" / "runs" / RUN)
    written = []
    out = report_crashes(Config(report_dir=str(rep)), Stats(), state_root=str(rep / ".gradspec"),
                         write=lambda d, v, info: written.append(info["run_id"]))
    assert [o["earlier"] for o in out] == [True] and written == [RUN]
    assert not (rep / ".gradspec" / "runs" / RUN).exists()


# ---------------------------------------------------------------------------------------------
# finding 3: the write probe never opens a planted name
# ---------------------------------------------------------------------------------------------

def test_write_probe_never_writes_through_a_planted_link(tmp_path):
    victim = _victim(tmp_path)
    rep = tmp_path / "reports"
    rep.mkdir()
    os.symlink(victim / "discrepancy.json", rep / f".write-test-{os.getpid()}")  # this process's pid
    cli._check_report_dir(str(rep))
    assert _untouched(victim)


# ---------------------------------------------------------------------------------------------
# findings 4 and 17: report folders d-* that are symlinks are neither read, rewritten nor blocking
# ---------------------------------------------------------------------------------------------

def test_records_skip_a_linked_report_folder_with_a_note(tmp_path):
    victim = _victim(tmp_path)
    os.symlink(victim, tmp_path / "d-0000000000")
    skipped = []
    assert records.read_records(str(tmp_path), skipped) == []
    assert len(skipped) == 1 and "d-0000000000" in skipped[0] and "symbolic link" in skipped[0]
    with pytest.raises(safefs.UnsafePath, match="symbolic link"):
        records.update_record(str(tmp_path), "d-0000000000", {"status": "x"})
    stats = Stats()
    assert distributed.replay_previous(Config(report_dir=str(tmp_path)), [], stats) == []
    assert stats.errors == skipped  # the run says what it left out ("problem: ..."), and goes on
    assert _untouched(victim)


def test_a_link_planted_at_a_new_findings_id_does_not_block_or_leak_the_report(tmp_path):
    victim = _victim(tmp_path)
    d, verdict = _crash()
    rid = records.discrepancy_id(d.signature)
    rep = tmp_path / "reports"
    rep.mkdir()
    os.symlink(victim, rep / rid)
    folder = report.write_discrepancy_report(str(rep), d, verdict)
    assert safefs.real_dir(folder) and os.path.isfile(os.path.join(folder, "case.json"))
    assert _untouched(victim) and sorted(os.listdir(victim)) == ["deep", "discrepancy.json"]


def test_plain_report_pages_never_write_through_a_planted_link(tmp_path):
    victim = _victim(tmp_path)
    os.symlink(victim, tmp_path / "d-0000000001")
    folder = records.make_record_folder(str(tmp_path), "d-0000000001")
    assert safefs.real_dir(folder) and os.listdir(folder) == []
    assert _untouched(victim)


# ---------------------------------------------------------------------------------------------
# finding 11: a FIFO where a record, summary or case file is expected never blocks
# ---------------------------------------------------------------------------------------------

def _fifo_record(tmp_path):
    (tmp_path / "d-0000000002").mkdir()
    os.mkfifo(tmp_path / "d-0000000002" / "discrepancy.json")
    return tmp_path / "d-0000000002" / "discrepancy.json", lambda: records.read_records(str(tmp_path)) == []


def _fifo_summary(tmp_path):
    os.mkfifo(tmp_path / "summary.json")
    return tmp_path / "summary.json", lambda: liveness.last_run(str(tmp_path)) is None


def _fifo_case(tmp_path):
    os.mkfifo(tmp_path / "case.json")

    def load():
        with pytest.raises(caseio.CaseError, match="named pipe"):
            caseio.load(str(tmp_path / "case.json"))
        return True
    return tmp_path / "case.json", load


@pytest.mark.parametrize("plant", [_fifo_record, _fifo_summary, _fifo_case], ids=["record", "summary", "case"])
def test_a_fifo_is_refused_without_blocking(tmp_path, plant):
    fifo, call = plant(tmp_path)
    result = []
    t = threading.Thread(target=lambda: result.append(call()), daemon=True)
    t.start()
    t.join(10)  # it returns at once; a blocked open() would wait forever for a writer
    if t.is_alive():  # release the blocked reader so the thread ends, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(5)
        pytest.fail(f"blocked on the FIFO {fifo}")
    assert result == [True]


# ---------------------------------------------------------------------------------------------
# finding 18: the worker temp folder is private; state files are never opened through a link
# ---------------------------------------------------------------------------------------------

def test_private_dir_refuses_a_link_and_closes_an_open_folder(tmp_path):
    os.symlink(tmp_path, tmp_path / "link")
    with pytest.raises(safefs.UnsafePath, match="symbolic link"):
        safefs.private_dir(str(tmp_path / "link"))
    (tmp_path / "open").mkdir(mode=0o777)
    os.chmod(tmp_path / "open", 0o777)
    safefs.private_dir(str(tmp_path / "open"))
    assert os.stat(tmp_path / "open").st_mode & 0o777 == 0o700
    assert os.stat(safefs.private_dir(str(tmp_path / "new"))).st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder of another user needs root (chown)")
def test_private_dir_refuses_another_users_folder(tmp_path):
    (tmp_path / "theirs").mkdir()
    os.chown(tmp_path / "theirs", 65534, 65534)
    with pytest.raises(safefs.UnsafePath, match="belongs to user id 65534"):
        safefs.private_dir(str(tmp_path / "theirs"))


def test_default_worker_folder_is_private(tmp_path, monkeypatch):
    from gradspec.fuzz import workers

    monkeypatch.delenv("GRADSPEC_WORKER_DIR", raising=False)
    monkeypatch.setattr(workers.tempfile, "gettempdir", lambda: str(tmp_path))
    base = os.path.dirname(workers.worker_local_root("r"))
    assert os.stat(base).st_mode & 0o777 == 0o700 and os.stat(base).st_uid == os.getuid()


def test_workers_refuse_a_worker_folder_that_is_a_link(tmp_path, monkeypatch, capsys):
    pytest.importorskip("xdist", reason="--workers needs pytest-xdist")
    from gradspec.fuzz import workers

    monkeypatch.delenv("GRADSPEC_WORKER_DIR", raising=False)
    monkeypatch.setattr(workers.tempfile, "gettempdir", lambda: str(tmp_path))
    victim = _victim(tmp_path)
    os.symlink(victim, tmp_path / f"gradspec-worker-{os.getuid()}")  # made first by somebody else
    code = cli.main(["fuzz", "--workers", "2", "--max-examples", "2", "-q", "--report-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "is a symbolic link" in err and "GRADSPEC_WORKER_DIR" in err, err
    assert _untouched(victim) and sorted(os.listdir(victim)) == ["deep", "discrepancy.json"]


def test_state_files_are_never_opened_through_a_planted_link(tmp_path):
    victim = _victim(tmp_path)
    os.symlink(victim / "discrepancy.json", tmp_path / "inflight-1.json")
    f = Inflight(str(tmp_path / "inflight-1.json"))
    f.group([_case()])  # never raises: a failed write only loses the crash report
    os.symlink(victim / "discrepancy.json", tmp_path / f"fault-{os.getpid()}.log")
    _disable_faulthandler(_enable_faulthandler(str(tmp_path)))
    assert _untouched(victim)
