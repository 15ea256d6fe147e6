"""A campaign as a pytest session (pytest-xdist does the process / machine management), and the
crash bookkeeping: the case each worker was on, reported when the worker died.

Example::

    >>> from gradspec.fuzz.distributed import stale_inflight
    >>> stale_inflight("/nonexistent-gradspec-dir")
    []
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Callable

from .._private.records import atomic_write, discrepancy_id, read_records, update_record
from .. import caseio
from ..case import Case, CaseError
from ..check import Discrepancy, Verdict
from ..guard import guarded_check
from .campaign import run_shard
from .state import CAMPAIGN_SUFFIX, STATE, Config, ReportDirError, Stats, _atomic_json, _sig_key

__all__ = ["campaign_items", "run_distributed", "stale_inflight", "report_crashes", "cleanup_stale_runs",
           "replay_previous"]


def campaign_items(parent, path, writer: Callable | None = None):
    """The pytest collector for a ``*.gradspec-campaign.json`` file (used by gradspec's pytest plugin).

    ``writer(cfg)`` returns the ``on_found`` callback of each shard (the report layer's writer)."""
    import pytest

    class ShardItem(pytest.Item):
        def __init__(self, *, shard: int, cfg: Config, **kw):
            super().__init__(**kw)
            self.shard = shard
            self.cfg = cfg
            self.stats = None

        def runtest(self):
            self.stats = run_shard(self.cfg, self.shard, None if writer is None else writer(self.cfg))
            self.user_properties.append(("gradspec-shard", json.dumps({"shard": self.shard, "pid": os.getpid(),
                                                                        "stats": self.stats.to_json()})))
            if self.stats.found:
                raise _ShardFound(self.stats)

        def repr_failure(self, excinfo):
            if isinstance(excinfo.value, _ShardFound):
                st = excinfo.value.stats
                lines = [f"shard {self.shard}: {len(st.found)} discrepanc{'y' if len(st.found) == 1 else 'ies'} "
                         f"in {st.cases} cases (reports in {self.cfg.report_dir})"]
                lines += [f"  {r['id']}: {r['kind']} ({' vs '.join(r['oracles'])}) ops {', '.join(r['ops'])}"
                          for r in st.found.values()]
                return "\n".join(lines)
            return super().repr_failure(excinfo)

        def reportinfo(self):
            return self.path, None, f"gradspec campaign shard {self.shard}"

    class CampaignFile(pytest.File):
        def collect(self):
            with open(self.path, encoding="utf-8") as f:
                cfg = Config.from_json(json.load(f))
            for k in range(max(1, cfg.workers)):
                yield ShardItem.from_parent(self, name=f"shard-{k}", shard=k, cfg=cfg)

    return CampaignFile.from_parent(parent, path=path)


class _ShardFound(Exception):
    def __init__(self, stats: Stats):
        super().__init__(f"{len(stats.found)} discrepancies")
        self.stats = stats


class _Collector:
    """Controller-side pytest plugin: shard results arrive in the reports' user_properties."""

    def __init__(self) -> None:
        self.shards: dict[int, dict] = {}
        self.crashes: list[str] = []
        self.failures: list[str] = []

    def pytest_runtest_logreport(self, report):
        for name, value in getattr(report, "user_properties", ()):
            if name == "gradspec-shard":
                d = json.loads(value)
                self.shards[int(d["shard"])] = d
        if report.failed:
            text = str(report.longrepr)
            if "crashed while running" in text:
                self.crashes.append(text.strip().splitlines()[-1])
            elif "discrepanc" not in text:
                self.failures.append(text[-2000:])


def run_distributed(cfg: Config, progress: Callable | None = None) -> Stats:
    """Run the campaign as ``cfg.workers`` shards under pytest-xdist; merge the shards' results."""
    import pytest

    os.makedirs(cfg.state_dir, exist_ok=True)
    path = os.path.join(cfg.state_dir, "campaign" + CAMPAIGN_SUFFIX)
    _atomic_json(path, cfg.to_json())
    ini = os.path.join(cfg.state_dir, "pytest.ini")
    atomic_write(ini, "[pytest]\n# a gradspec fuzz campaign, collected by gradspec's pytest plugin\n")
    args = [path, "-c", ini, "--rootdir", cfg.state_dir, "--confcutdir", cfg.state_dir,
            "-p", "xdist.plugin", "-p", "gradspec.pytest_plugin", "-p", "no:cacheprovider",
            "-p", "no:terminal", "-p", "no:warnings", "-W", "ignore"]
    if cfg.tx:
        for spec in cfg.tx:
            args += ["--tx", spec]
        args += ["--dist", "load"]
    else:
        args += ["-n", str(cfg.workers), "--dist", "load"]
    collector = _Collector()
    env_saved = {k: os.environ.get(k) for k in ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_ADDOPTS", "PYTHONPATH")}
    # Only the plugins a campaign needs: the user's own pytest plugins and conftests stay out of it.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.environ.pop("PYTEST_ADDOPTS", None)
    os.environ["PYTHONPATH"] = os.pathsep.join([p for p in [os.getcwd(), env_saved["PYTHONPATH"]] if p])
    stop = threading.Event()
    poller = None
    if progress is not None:
        def poll():
            while not stop.wait(0.5):
                progress(_merge_snapshots(cfg, {}))
        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
    interrupted = False
    try:
        rc = pytest.main(args, plugins=[collector])
        interrupted = rc == pytest.ExitCode.INTERRUPTED
    except KeyboardInterrupt:
        interrupted = True
    finally:
        stop.set()
        if poller is not None:
            poller.join(2)
        for k, v in env_saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    merged = _merge_snapshots(cfg, collector.shards)
    merged.interrupted |= interrupted
    for text in collector.failures:
        merged.errors.append("a shard failed: " + text.strip().splitlines()[-1][:300])
    if collector.crashes and not stale_inflight(cfg.state_dir):
        for c in collector.crashes:
            merged.errors.append(c + " (no case was in flight)")
    return merged


def _merge_snapshots(cfg: Config, reported: dict) -> Stats:
    """Per-shard results: from the pytest reports where they arrived, else each shard's last snapshot."""
    merged = Stats(shards=max(1, cfg.workers))
    merged.shards = max(1, cfg.workers)
    seen = set()
    for k, d in reported.items():
        merged.merge(Stats.from_json(d["stats"]))
        seen.add(k)
    try:
        names = os.listdir(cfg.state_dir)
    except OSError:
        names = []
    for name in names:
        if name.startswith("shard-") and name.endswith(".json"):
            try:
                with open(os.path.join(cfg.state_dir, name), encoding="utf-8") as f:
                    d = json.load(f)
            except (OSError, ValueError):
                continue
            if int(d.get("shard", -1)) not in seen:
                merged.merge(Stats.from_json(d["stats"]))
    merged.seconds = time.time() - cfg.started
    return merged


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
    return True


def stale_inflight(state_root: str) -> list[dict]:
    """Cases left in flight by processes that are gone (under ``state_root``, recursively).

    Each: ``{"path", "pid", "case_json", "fault"}`` (``fault``: the faulthandler dump, may be empty).
    """
    out = []
    for dirpath, _dirs, files in os.walk(state_root):
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
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue
            fault = ""
            try:
                with open(os.path.join(dirpath, f"fault-{pid}.log"), encoding="utf-8", errors="replace") as f:
                    fault = f.read()
            except OSError:
                pass
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
                        traceback=item["fault"] or None)
        verdict = Verdict(case, {}, [], [d], {}, {})
        rid = discrepancy_id(d.signature)
        info = {"run_id": os.path.basename(item["dir"]) if earlier else cfg.run_id, "engine": case.engine,
                "note": "the process died on this case", "covers": [_sig_key(d.signature)], "found_at": time.time()}
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
        if earlier and not any(f.startswith("inflight-") for f in os.listdir(item["dir"])):
            import shutil

            shutil.rmtree(item["dir"], ignore_errors=True)  # that run is over; its crash is reported
    return out


def cleanup_stale_runs(report_dir: str, keep: str | None = None, max_age: float = 86400.0) -> None:
    """Remove bookkeeping folders of runs that are over: every process gone and no case left in flight."""
    import shutil

    root = os.path.join(report_dir, STATE, "runs")
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        if name == keep or not os.path.isdir(path):
            continue
        try:
            files = os.listdir(path)
            old = time.time() - os.path.getmtime(path) > max_age
        except OSError:
            continue
        if any(f.startswith("inflight-") for f in files):
            continue  # a live process, or a crash not reported yet
        pids = []
        for f in files:
            if f.startswith("shard-") and f.endswith(".json"):
                try:
                    with open(os.path.join(path, f), encoding="utf-8") as fh:
                        pids.append(int(json.load(fh).get("pid")))
                except (OSError, ValueError, TypeError):
                    continue
        if (pids and not any(_alive(p) for p in pids)) or old:
            shutil.rmtree(path, ignore_errors=True)


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

    Returns one ``{"id", "status"}`` per earlier report.  A report still disagreeing counts as
    found in this run too (its signatures are known from the start).
    """

    out = []
    for rec in read_records(cfg.report_dir):
        if rec.get("run_id") == cfg.run_id:
            continue
        rid = rec.get("id")
        status = "from an earlier run"
        if rec.get("engine", "reference") == cfg.engine and rec.get("kind") not in ("crash",) and len(out) < limit:
            try:
                case = caseio.load(os.path.join(cfg.report_dir, rid, "case.json"))
                case.engine = cfg.engine
                verdict = guarded_check(case, oracles, cfg.case_timeout)
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
                status = f"not re-checked: {e}"
            except Exception as e:  # noqa: BLE001 - a report we cannot replay is still listed
                status = f"cannot be replayed: {type(e).__name__}: {str(e)[:120]}"
        try:
            update_record(cfg.report_dir, rid, {"status": status, "status_checked": time.time()})
        except OSError:
            pass
        out.append({"id": rid, "status": status})
    return out
