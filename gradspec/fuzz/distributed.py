"""Crash bookkeeping (the case each process was on, reported when it died) and earlier runs' reports.

The campaign over xdist workers itself is in :mod:`gradspec.fuzz.workers`.

Example::

    >>> from gradspec.fuzz.distributed import stale_inflight
    >>> stale_inflight("/nonexistent-gradspec-dir")
    []
"""

from __future__ import annotations

import os
import re
import time
from typing import Callable

from .. import caseio
from .._private import jsondata
from .._private.records import discrepancy_id, read_records, update_record
from .._private.safefs import gradspec_dir, read_regular, real_dir
from ..case import Case, CaseError
from ..causes import process_died
from ..check import Discrepancy, Verdict
from ..guard import guarded_check
from .inflight import case_json as inflight_case
from .state import STATE, Config, ReportDirError, Stats, _sig_key

__all__ = ["stale_inflight", "report_crashes", "cleanup_stale_runs", "run_folders",
           "replay_previous"]


# ---------------------------------------------------------------------------------------------
# crashes: cases a dead process was checking
# ---------------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped by its parent: a worker of this very controller) is dead
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


_RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{6}")  # Config.run_id: the folders this tool creates
_STATE_FILE_LIMIT = 256 << 20  # an in-flight group of 32 large value sets; a fault log is a few kB


def run_folders(state_root: str) -> list[str]:
    """The run folders ``<state_root>/runs/<id>`` (``state_root``: a ``.gradspec`` folder), real folders only.

    ``state_root`` and its ``runs`` must be folders themselves (:class:`UnsafePath` if one is a symlink: a
    report dir handed over by somebody else must not point gradspec's clean-up at other folders); a run
    entry that is a symlink or a file is not gradspec's and is skipped.
    """
    runs = os.path.join(state_root, "runs")
    for p in (state_root, runs):
        if os.path.lexists(p) and not real_dir(p):
            gradspec_dir(os.path.dirname(p), os.path.basename(p))  # raises UnsafePath naming it
    try:
        names = sorted(os.listdir(runs))
    except OSError:
        return []
    return [os.path.join(runs, n) for n in names if real_dir(os.path.join(runs, n))]


def stale_inflight(state_root: str) -> list[dict]:
    """Cases left in flight by processes that are gone, in the run folders under ``state_root`` (a ``.gradspec``).

    Each: ``{"path", "pid", "case_json", "fault"}`` (``fault``: the faulthandler dump, may be empty).  Only
    ``runs/<id>/inflight-<pid>.json`` files are read (no walk: a folder is never searched for them), and
    only regular files (a symlink or a FIFO planted at that name is skipped).
    """
    out = []
    for dirpath in run_folders(state_root):
        try:
            files = sorted(os.listdir(dirpath))
        except OSError:
            continue
        for name in files:
            if not (name.startswith("inflight-") and name.endswith(".json")):
                continue
            try:
                pid = int(name[len("inflight-"):-len(".json")])
            except ValueError:
                continue
            if pid == os.getpid() or _alive(pid):
                continue
            path = os.path.join(dirpath, name)
            try:
                text = read_regular(path, _STATE_FILE_LIMIT)
            except OSError:
                continue
            text = inflight_case(text)  # the value set being checked, of the group in the file
            if text is None:  # it died between two checks: nothing was in flight
                _forget({"path": path, "dir": dirpath, "pid": pid})
                continue
            try:
                fault = read_regular(os.path.join(dirpath, f"fault-{pid}.log"), _STATE_FILE_LIMIT)
            except OSError:
                fault = ""
            out.append({"path": path, "pid": pid, "case_json": text, "fault": fault, "dir": dirpath})
    return out


def report_crashes(cfg: Config, stats: Stats, state_root: str | None = None,
                   write: Callable | None = None) -> list[dict]:
    """Turn every stale inflight case into a ``crash`` discrepancy report (and forget the marker).

    A case left by this run's workers counts as found in this run; one left by an earlier run's
    process (one that died without a summary) is written as that run's report and returned with
    ``"earlier": True`` so the caller can list it.  Returns ``[{"id", "earlier", "pid"}]``.
    ``write(discrepancy, verdict, info)`` writes the report folder (the report layer's
    ``write_discrepancy_report`` into ``cfg.report_dir`` by the command line).
    """

    out = []
    for item in stale_inflight(state_root or cfg.state_dir):
        try:
            case = Case.from_json(item["case_json"])
        except Exception as e:
            stats.errors.append(f"process {item['pid']} died while checking a case that cannot be read back: {e}")
            _forget(item)
            continue
        earlier = os.path.abspath(item["dir"]) != os.path.abspath(cfg.state_dir)
        who = f"a gradspec process of run {os.path.basename(item['dir'])}" if earlier else "a campaign worker"
        msg = (f"{who} (pid {item['pid']}) died while checking this case: the engine or an oracle crashed the "
               "process (segmentation fault, abort, os._exit, out of memory or a kill)")
        if item["fault"].strip():
            msg += "; the Python traceback at the fatal signal is below"
        d = Discrepancy(kind="crash", oracles=("process", case.engine or cfg.engine), message=msg, case=case,
                        traceback=item["fault"] or None, cause=process_died(msg, item["fault"]))
        verdict = Verdict(case, {}, [], [d], {}, {})
        rid = discrepancy_id(d.signature)
        info = {"run_id": os.path.basename(item["dir"]) if earlier else cfg.run_id, "engine": case.engine,
                "note": "the process died on this case", "covers": [_sig_key(d.signature)], "found_at": time.time()}
        flags = caseio.allow_flags(case.engine, case.user_ops)
        if earlier and flags:  # a file in the report dir is data from whoever could write there (redteam #5)
            info["note"] += (f"; its case was read from a file left in {item['dir']}: the commands below import the "
                             f"module(s) it names ({flags.replace(' --allow-import ', ' ').strip()}) only because "
                             "they pass --allow-import: run them only if you trust those modules")
        try:
            if write is not None:
                write(d, verdict, info)
        except ReportDirError:
            raise
        except OSError as e:
            raise ReportDirError(f"cannot write the crash report into {cfg.report_dir}: {e.strerror or e}") from e
        if not earlier:
            stats.found.setdefault(rid, {"id": rid, "kind": "crash", "oracles": list(d.oracles),
                                         "ops": sorted({n.op for n in case.nodes}), "message": msg,
                                         "covers": info["covers"], "note": info["note"], "shard": None})
            stats.crashed.append({"pid": item["pid"], "report": rid})
        out.append({"id": rid, "earlier": earlier, "pid": item["pid"]})
        _forget(item)
        if earlier:
            _remove_if_over(item["dir"], old=True)  # that run is over; its crash is reported
    return out


def cleanup_stale_runs(report_dir: str, keep: str | None = None, max_age: float = 86400.0) -> None:
    """Remove bookkeeping folders of runs that are over: every process gone and no case left in flight.

    Only folders gradspec made are removed: real folders named like a run id, under a ``.gradspec/runs``
    that is no symlink (:func:`run_folders`), holding nothing but gradspec's bookkeeping files.
    """
    for path in run_folders(os.path.join(report_dir, STATE)):
        if os.path.basename(path) != keep:
            try:
                old = time.time() - os.lstat(path).st_mtime > max_age
            except OSError:
                continue
            _remove_if_over(path, old)


_OURS = re.compile(r"(inflight-[0-9]+\.json|fault-[0-9]+\.log|shard-[0-9]+\.json|campaign\.json|\.tmp-.*)")


def _remove_if_over(path: str, old: bool) -> None:
    """rmtree a run folder whose processes are all gone (or ``old``), if it is one gradspec made."""
    import shutil

    try:
        files = os.listdir(path)
    except OSError:
        return
    if not _RUN_ID.fullmatch(os.path.basename(path)) or not all(_OURS.fullmatch(f) for f in files):
        return  # not a folder this tool created (or something else was put in it): left alone
    if any(f.startswith("inflight-") for f in files):
        return  # a live process, or a crash not reported yet
    pids = []
    for f in files:
        if f.startswith("shard-") and f.endswith(".json"):
            try:
                pids.append(int(jsondata.read(os.path.join(path, f), _STATE_FILE_LIMIT).get("pid")))
            except (OSError, ValueError, TypeError, AttributeError, RecursionError):
                continue
    if (pids and not any(_alive(p) for p in pids)) or old:
        shutil.rmtree(path, ignore_errors=True)  # (rmtree never follows a symlink inside)


def _forget(item) -> None:
    for p in (item["path"], os.path.join(item["dir"], f"fault-{item['pid']}.log")):
        try:
            os.unlink(p)
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------
# earlier runs
# ---------------------------------------------------------------------------------------------


def replay_previous(cfg: Config, oracles, stats: Stats, limit: int = 50) -> list[dict]:
    """Re-check the saved cases of earlier runs' reports (same engine); mark them still present or fixed.

    Returns one ``{"id", "status"}`` per earlier report (with ``"code": "import-not-allowed"`` when the import
    gate refused its case: the command line's exit 2 reads the code).  A report still disagreeing counts as
    found in this run too (its signatures are known from the start).
    """

    out = []
    skipped: list = []
    records = read_records(cfg.report_dir, skipped)
    stats.errors += [e for e in skipped if e not in stats.errors]  # (a link, a FIFO, not JSON: left out, said so)
    for rec in records:
        if rec.get("run_id") == cfg.run_id:
            continue
        rid = rec.get("id")
        status, code = "from an earlier run", None
        if rec.get("engine", "reference") == cfg.engine and rec.get("kind") not in ("crash",) and len(out) < limit:
            try:
                case = caseio.load(os.path.join(cfg.report_dir, rid, "case.json"))
                case.engine = cfg.engine
                verdict = guarded_check(case, oracles, cfg.case_timeout, under_test=cfg.engine, isolate=cfg.isolate)
                same = [d for d in verdict.discrepancies if discrepancy_id(d.signature) == rid]
                if same or verdict.discrepancies:
                    status = "still present"
                    note = "found in an earlier run, still present"
                    stats.found.setdefault(rid, {**{k: rec.get(k) for k in ("id", "kind", "oracles", "ops", "message")},
                                                 "covers": rec.get("covers", []), "note": note, "shard": None})
                    # Adopted by this run: its signatures are known to every shard from the start.
                    try:
                        update_record(cfg.report_dir, rid, {"run_id": cfg.run_id, "note": note})
                    except OSError:
                        pass
                else:
                    status = "no longer reproduces"
            except CaseError as e:  # a case file is data: one naming a module nobody allowed is not run
                status, code = f"not re-checked: {e}", e.reason  # (the gate's refusal: "import-not-allowed")
            except Exception as e:  # noqa: BLE001 - a report we cannot replay is still listed
                status = f"cannot be replayed: {type(e).__name__}: {str(e)[:120]}"
        try:
            update_record(cfg.report_dir, rid, {"status": status, "status_checked": time.time()})
        except OSError:
            pass
        out.append({"id": rid, "status": status, **({"code": code} if code else {})})
    return out
