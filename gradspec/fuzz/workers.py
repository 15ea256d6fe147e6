"""A campaign over pytest-xdist workers that share nothing with the controller but the xdist channel.

How it travels
--------------
The controller (``gradspec fuzz --workers K [--tx SPEC ...]``) starts a pytest session with no
collection argument at all: it hands the campaign to every worker in ``workerinput`` (xdist's
``pytest_configure_node``), and each worker builds the campaign's items from it in
``pytest_collection`` — no campaign file, no report dir, nothing a worker must see on disk.  The
campaign is cut into ``CHUNKS_PER_WORKER`` x K *chunks* (items): each chunk is a Hypothesis run
with its own seed and a slice of the budget.  When a chunk ends, its counts and findings (the
shrunk case as JSON, the discrepancy, its cause) travel back in the item's test report
(``user_properties``); the controller alone re-checks each finding's case, writes the report
folders, the index and ``summary.json``.

Workers keep their own bookkeeping (the case in flight, fault logs) in a worker-local folder.
A worker that dies loses only the chunk it was on: xdist starts a replacement and hands the
pending chunks to the live workers; the next chunk (or the replacement's session end) on that
machine finds the dead process's in-flight case and sends it back, and the controller writes it
as a ``crash`` report.  The lost chunks are run once more in a second session; what is still lost
after that is in the summary (``lost``) and the run exits non-zero, never 0 with a silently smaller
campaign.

Example::

    >>> from gradspec.fuzz.workers import chunk_plan
    >>> [c["budget"] for c in chunk_plan(workers=2, budget=18)]
    [3, 3, 2, 2, 2, 2, 2, 2]
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from typing import Callable

from .._private import interrupts
from .._private.memory import freeze_heap
from .._private.records import atomic_write, discrepancy_id
from .._private.safefs import gradspec_dir, private_dir, read_regular
from ..case import Case
from ..causes import Cause, process_died
from ..check import Discrepancy, Verdict
from ..guard import guarded_check
from ..strategies import _bounded
from . import heartbeat
from .campaign import _Campaign
from .distributed import _forget, stale_inflight
from .state import STATE, Config, ReportDirError, Stats, _sig_key

__all__ = ["CHUNKS_PER_WORKER", "chunk_plan", "run_distributed", "worker_local_root", "WORKERINPUT_KEY"]

CHUNKS_PER_WORKER = 4  # a dying worker loses a quarter of its share, and progress arrives 4x per worker
WORKERINPUT_KEY = "gradspec_campaign"
PROPERTY = "gradspec-chunk"
# What this worker process already found in this run (run id -> report id -> record): a later chunk
# does not hunt a known bug again, as the chunks of one process form one campaign.
_FOUND_HERE: dict = {}
CRASHES_KEY = "gradspec_crashes"


def chunk_plan(workers: int, budget: int, seconds: float | None = None) -> list[dict]:
    """The chunks of a campaign: ``{"chunk", "budget", "seconds"}`` each (budget split as evenly as possible).

    A time budget is split the same way: each worker runs its chunks one after another, so a chunk
    gets ``seconds / CHUNKS_PER_WORKER`` (and no chunk runs past the campaign's deadline).
    """
    n = max(1, workers) * CHUNKS_PER_WORKER
    if seconds is not None:
        return [{"chunk": k, "budget": budget, "seconds": seconds / CHUNKS_PER_WORKER} for k in range(n)]
    n = max(1, min(n, budget))
    return [{"chunk": k, "budget": budget // n + (1 if k < budget % n else 0), "seconds": None} for k in range(n)]


def worker_local_root(run_id: str) -> str:
    """Where a worker keeps the case in flight and fault logs: on its own machine, never the report dir.

    The default is a fixed name in the shared temp dir (the workers of a run find each other's in-flight
    files there): it must be this user's own folder, closed to others (``_private.safefs.private_dir``).
    """
    base = os.environ.get("GRADSPEC_WORKER_DIR")
    if not base:
        base = private_dir(os.path.join(tempfile.gettempdir(), f"gradspec-worker-{os.getuid()}"))
    return os.path.join(base, run_id)


# ---------------------------------------------------------------------------------------------
# worker side (hooks called from gradspec's pytest plugin)
# ---------------------------------------------------------------------------------------------


def _campaign_of(config) -> dict | None:
    return (getattr(config, "workerinput", None) or {}).get(WORKERINPUT_KEY)


def worker_collection(session) -> bool | None:
    """``pytest_collection`` in a worker: the chunks of the campaign in ``workerinput`` (else None)."""
    import pytest

    payload = _campaign_of(session.config)
    if payload is None:
        return None
    campaign = json.loads(payload)

    class ChunkItem(pytest.Item):
        def runtest(self):
            run_chunk(self, campaign, self.chunk)

        def reportinfo(self):
            return self.path, None, f"gradspec campaign chunk {self.chunk['chunk']}"

    items = []
    for chunk in campaign["chunks"]:
        it = ChunkItem.from_parent(session, name=f"chunk-{chunk['chunk']}",
                                   nodeid=f"gradspec-campaign::chunk-{chunk['chunk']}")
        it.chunk = chunk
        items.append(it)
    session.items = items
    session.testscollected = len(items)
    session.config.hook.pytest_collection_modifyitems(session=session, config=session.config, items=items)
    session.config.hook.pytest_collection_finish(session=session)
    return True


def _local_config(campaign: dict, chunk: dict) -> Config:
    cfg = Config.from_json(campaign["config"])
    # The controller's report dir is none of the worker's business: bookkeeping stays local.
    cfg.report_dir = worker_local_root(cfg.run_id)
    cfg.workers = 1  # this chunk is a whole campaign of its own budget (its index only picks the seeds)
    if cfg.seconds is None:
        cfg.max_examples = chunk["budget"]
    if not cfg.database and cfg.tx:
        cfg.database = [os.path.join(cfg.report_dir, ".hypothesis")]  # no shared disk: a local store
    if chunk["seconds"] is not None:
        now = time.time()
        end = min(now + chunk["seconds"], campaign["deadline"])
        cfg.started, cfg.seconds = now, max(0.0, end - now)
    return cfg


def _crash_records(cfg: Config) -> list[dict]:
    """In-flight cases of dead processes of this run on this machine (each sent back once)."""
    return _records_in(worker_local_root(cfg.run_id))


def _records_in(root: str) -> list[dict]:
    out = []
    for item in stale_inflight(os.path.join(root, STATE)):
        out.append({"pid": item["pid"], "case_json": item["case_json"], "fault": item["fault"],
                    "host": socket.gethostname()})
        _forget(item)
    return out


def run_chunk(item, campaign: dict, chunk: dict) -> None:
    top = sys.modules.get(__name__.split(".")[0])
    if top is not None and getattr(top, "__file__", None) is None:  # a namespace package: its __init__ never ran
        raise RuntimeError(f"this worker's 'import gradspec' found the folder(s) {list(top.__path__)} (a folder "
                           f"named 'gradspec' with no __init__.py, e.g. a clone of the repository, in the working "
                           f"directory {os.getcwd()}) instead of the installed package: run gradspec fuzz --workers "
                           "from another directory, or rename that folder")
    cfg = _local_config(campaign, chunk)
    findings = []

    def on_found(d, verdict, info):
        findings.append({"case": d.case.to_json(indent=None) if d.case is not None else None,
                         "discrepancy": d.to_json(), "info": info})

    _register_worker(cfg.run_id)
    if interrupts.received() is not None and not os.path.exists(_stopped_mark(cfg.run_id)):
        # A signal this worker got alone (kill -INT of its pid) cut the chunk it was on (sent back: lost), not the
        # run.  The process is not reused: the signal may have cut an import half-way (a torch import cut so
        # made every later case of the worker a check-error).  It ends here, before this chunk: xdist's
        # replacement worker and the controller's retry run it, as for a worker that died.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(interrupts.exit_code())
    # One signal stops this chunk (the terminal's Ctrl-C and the controller's word both come): a second
    # SIGINT must not cut the chunk's results on their way out (interrupts.graceful once=True).
    with interrupts.graceful(once=True):
        stats = _chunk_stats(cfg, chunk, on_found)
        with interrupts.deferred(raise_after=False):
            _send_chunk(item, cfg, chunk, stats, findings)


def _chunk_stats(cfg: Config, chunk: dict, on_found: Callable) -> Stats:
    if interrupts.received() is not None:
        # The run was interrupted (the controller said so): this chunk does not start.
        stats = Stats(shards=1)
        stats.interrupted, stats.stop_reason = True, "interrupted"
    elif cfg.seconds is not None and cfg.seconds <= 0:
        stats = Stats(shards=1)
        stats.stop_reason = "time"
    else:
        known = _FOUND_HERE.setdefault(cfg.run_id, {})
        cfg.replay_saved = not known.get("_replayed")
        freeze_heap()  # a worker gradspec fuzz started runs nothing but its chunks (_private.memory)
        # The run's drawing-cut marks (strategies._bounded) go on from chunk to chunk in this worker: a forward
        # that hangs for good cost ~2 timeouts per chunk when each chunk started with none (fixrun #3)
        marks = known.setdefault("_marks", _bounded.Marks())
        stats = _Campaign(cfg, chunk["chunk"], on_found=on_found, found=dict(known.get("found", {})),
                          marks=marks).run()
        known["_replayed"] = True
        known.setdefault("found", {}).update(stats.found)
        stats.found = {rid: rec for rid, rec in stats.found.items() if rid not in known.get("sent", set())}
        known.setdefault("sent", set()).update(stats.found)
    return stats


def _send_chunk(item, cfg: Config, chunk: dict, stats: Stats, findings: list) -> None:
    for rec in stats.found.values():
        rec.pop("case", None)
    # Taken (and forgotten) only now, as the report that carries them leaves: a dead sibling's in-flight case
    # it had taken at its start is not lost with a chunk that never reports (the controller reads what is left
    # on this machine).
    interrupted = interrupts.received() is not None
    crashes = [] if interrupted else _crash_records(cfg)  # (an interrupted controller reads them itself)
    text = json.dumps({
        "chunk": chunk["chunk"], "pid": os.getpid(), "host": socket.gethostname(),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", ""), "stats": stats.to_json(),
        "findings": findings, "crashes": crashes}, default=str)
    if interrupted:
        # An interrupted controller no longer reads the xdist channel (chaos H3: the cases and the finding of
        # every chunk in flight were lost): the chunk's results also go to a file it reads afterwards.
        try:
            folder = gradspec_dir(worker_local_root(cfg.run_id), STATE, _FLUSHED)
            atomic_write(os.path.join(folder, f"chunk-{chunk['chunk']}-{os.getpid()}.json"), text)
        except OSError:
            pass  # (the channel may still carry it)
    item.user_properties.append((PROPERTY, text))


_FLUSHED = "chunks"  # worker-local folder of the results of interrupted chunks
_WORKERS = "workers"  # worker-local folder: a file per worker process (its pid), for the controller's signal


def _stopped_mark(run_id: str) -> str:
    """The file an interrupted controller makes on this machine before it tells the workers."""
    return os.path.join(worker_local_root(run_id), STATE, _WORKERS, "interrupted")


def _register_worker(run_id: str) -> None:
    if _FOUND_HERE.get(("pid", run_id)) == os.getpid():
        return
    try:
        folder = gradspec_dir(worker_local_root(run_id), STATE, _WORKERS)
        atomic_write(os.path.join(folder, str(os.getpid())), socket.gethostname())
        _FOUND_HERE[("pid", run_id)] = os.getpid()
    except OSError:
        return
    heartbeat.start_beating(os.path.join(folder, str(os.getpid())))  # (the controller's Watchdog reads it)


def _signal_workers(root: str) -> list:
    """Ctrl-C or SIGTERM of the controller alone: the workers on this machine are told as if the terminal had
    told them (SIGINT), so each stops and hands in what its chunk has; their pids."""
    told = []
    try:
        folder = gradspec_dir(root, STATE, _WORKERS)
        atomic_write(os.path.join(folder, "interrupted"), "")  # (first: a chunk starting now does not run)
        names = os.listdir(folder)
    except OSError:
        return told
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            os.kill(int(name), signal.SIGINT)
            told.append(int(name))
        except OSError:
            pass  # gone already
    return told


def _flushed_chunks(root: str, done: set) -> list[dict]:
    """The results interrupted chunks wrote on this machine, for chunks whose report never came."""
    out = []
    folder = os.path.join(root, STATE, _FLUSHED)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return out
    for name in names:
        try:
            d = json.loads(read_regular(os.path.join(folder, name), 1 << 28))
        except (OSError, ValueError):
            continue
        if f"gradspec-campaign::chunk-{d.get('chunk')}" not in done:
            out.append(d)
    return out


def worker_sessionfinish(session) -> None:
    """A worker's last word: crashes of this run found on its machine (a replacement worker's job)."""
    payload = _campaign_of(session.config)
    if payload is None:
        return
    cfg = Config.from_json(json.loads(payload)["config"])
    session.config.workeroutput[CRASHES_KEY] = json.dumps(_crash_records(cfg))
    try:  # this worker's beats end here: no stale beat of an exited worker for the controller's Watchdog
        os.unlink(os.path.join(worker_local_root(cfg.run_id), STATE, _WORKERS, str(os.getpid())))
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------
# controller side
# ---------------------------------------------------------------------------------------------


class _Controller:
    """Controller-side pytest plugin: hands out the campaign, gathers chunks, crashes and losses."""

    def __init__(self, payload: str, chunks: list[dict], on_chunk: Callable, root: str = "") -> None:
        self.payload = payload
        self.root = root  # this machine's worker-local folder of the run (in-flight files)
        # pids of processes already dead when an interruption came (their in-flight cases left behind): crashes of
        # their own, not workers the interruption stopped (pytest_keyboard_interrupt runs before xdist's teardown)
        self.dead_at_interrupt: set = set()
        self.chunks = {f"gradspec-campaign::chunk-{c['chunk']}": c for c in chunks}
        self.on_chunk = on_chunk
        self.done: set = set()
        self.crashes: list[dict] = []
        self.lost: list[dict] = []
        self.failures: list[str] = []
        self.why: dict = {}  # nodeid -> the error a chunk failed with in its worker
        self.down: list[str] = []  # what a worker that went down said (xdist's error text)
        self.first_report: float | None = None  # when the first chunk reported (time.time())
        self.silenced: dict = {}  # pid -> seconds without a beat, of the workers the Watchdog killed (heartbeat)

    def pytest_configure_node(self, node):
        node.workerinput[WORKERINPUT_KEY] = self.payload

    def pytest_runtest_logreport(self, report):
        for name, value in getattr(report, "user_properties", ()):
            if name == PROPERTY and report.when == "call":
                d = json.loads(value)
                self.done.add(report.nodeid)
                # (reported by a chunk that finished: while the session ran, before any interruption)
                self.crashes += [{**c, "before_interrupt": True} for c in d.get("crashes") or []]
                self.on_chunk(d)
        if report.when == "call" and self.first_report is None:
            self.first_report = time.time()
        if report.failed and report.nodeid not in self.done:
            text = str(report.longrepr)
            crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
            self.why[report.nodeid] = (getattr(crash, "message", "") or text.strip().splitlines()[-1])[:400]
            chunk = self.chunks.get(report.nodeid)
            if "crashed while running" in text and chunk is not None:
                self.lost.append({**chunk, "why": text.strip().splitlines()[-1][:300]})
            else:
                self.failures.append(text[-2000:])

    def pytest_keyboard_interrupt(self, excinfo):
        if self.root:  # taken now: a worker's teardown would take them (and die with them) next
            dead = _records_in(self.root)
            self.dead_at_interrupt = {r["pid"] for r in dead}
            self.crashes += [{**r, "before_interrupt": True} for r in dead]
            # A signal to the controller alone: xdist would let every worker run its chunk to its end (7-30 s)
            # and drop what it sends afterwards; told, each stops now and leaves its results in a file (H3).
            _signal_workers(self.root)

    def pytest_testnodedown(self, node, error):
        if error:
            self.down.append(str(error).strip()[-400:])
        out = getattr(node, "workeroutput", None) or {}
        try:
            self.crashes += json.loads(out.get(CRASHES_KEY) or "[]")
        except ValueError:
            pass


def _session_args(cfg: Config) -> list[str]:
    # No path anywhere: workers on other machines (or chdir'd) resolve nothing of the controller's disk.
    args = ["-p", "xdist.plugin", "-p", "gradspec.pytest_plugin", "-p", "no:cacheprovider", "-p", "no:terminal",
            "-p", "no:warnings", "-p", "no:junitxml", "--noconftest",
            # One argument, not "-c PATH": xdist relocates existing paths for chdir'd workers and refuses
            # those outside its rsync roots; every POSIX machine has /dev/null (an empty configuration,
            # so the ini files around the user's cwd stay out of the campaign).
            f"--config-file={os.devnull}", "-W", "ignore",
            "--dist", "load"]
    if cfg.tx:
        for spec in cfg.tx:
            args += ["--tx", spec]
    else:
        args += ["-n", str(cfg.workers)]
    return args


def _session(cfg: Config, chunks: list[dict], on_chunk: Callable) -> tuple[_Controller, bool]:
    import pytest

    payload = json.dumps({"config": cfg.to_json(), "chunks": chunks,
                          "deadline": cfg.deadline if cfg.deadline is not None else float("inf")})
    ctl = _Controller(payload, chunks, on_chunk, worker_local_root(cfg.run_id))
    saved = {k: os.environ.get(k) for k in ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_ADDOPTS", "PYTHONPATH")}
    # Only the plugins a campaign needs: the user's own pytest plugins and conftests stay out of it.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.environ.pop("PYTEST_ADDOPTS", None)
    # The cwd first (the user's engine and ops modules), and the folder this gradspec was imported from last: a
    # folder named 'gradspec' in the cwd (a clone of the repository) is then no namespace package shadowing the
    # installed one (a regular package later on sys.path wins over a namespace portion; the editable install's
    # import hook came after it: the workers ran with an empty op table).
    # xdist gives a local worker the cwd and then this process's sys.path (not PYTHONPATH): both get it, last.
    home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ["PYTHONPATH"] = os.pathsep.join([p for p in [os.getcwd(), saved["PYTHONPATH"], home] if p])
    try:  # the copy of sys.path xdist froze when it was imported is what a local worker gets
        from xdist.plugin import _sys_path as frozen
    except ImportError:
        frozen = []
    paths = [p for p in (sys.path, frozen) if home not in p]
    for p in paths:
        p.append(home)
    interrupted = False
    rc = None
    # A worker of this machine that stops beating is killed (review H5c: a SIGSTOPped one was waited for for ever)
    watch = heartbeat.Watchdog(os.path.join(ctl.root, STATE, _WORKERS), heartbeat.silence_bound(cfg.case_timeout))
    try:
        with watch:
            rc = pytest.main(_session_args(cfg), plugins=[ctl])
        interrupted = rc == pytest.ExitCode.INTERRUPTED
    except KeyboardInterrupt:
        interrupted = True
    finally:
        ctl.silenced = dict(watch.killed)
        for p in paths:
            if home in p:
                p.remove(home)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if not interrupted:
        # A chunk that reported nothing and was not seen crashing did not run (an xdist setup error,
        # a worker that never started): it is lost too, never silently dropped.
        for nodeid, chunk in ctl.chunks.items():
            if nodeid not in ctl.done and not any(c["chunk"] == chunk["chunk"] for c in ctl.lost):
                why = (f"it failed in its worker: {ctl.why[nodeid]}" if nodeid in ctl.why else
                       f"it never reported (a worker went down: {ctl.down[-1]})" if ctl.down else
                       f"it never reported (the worker session ended with {rc!s})")
                ctl.lost.append({**chunk, "why": why})
    if ctl.silenced:  # xdist saw a crash; say why (its text names no pid: every chunk lost so is told)
        pids = ", ".join(f"{pid} ({sec:.0f} s)" for pid, sec in ctl.silenced.items())
        for c in ctl.lost:
            if "crashed while running" in c.get("why", ""):
                c["why"] += (f"; gradspec killed worker(s) that sent no heartbeat (pid, seconds silent: {pids}): stopped "
                             "by a signal such as SIGSTOP, or wedged")
    return ctl, interrupted


def _rebuild(finding: dict, oracles, cfg: Config) -> tuple[Discrepancy, Verdict] | None:
    """The finding as the controller sees it: its case re-checked here, so the report has every oracle's numbers."""
    if not finding.get("case"):
        return None
    case = Case.from_json(finding["case"])
    dj = finding["discrepancy"]
    verdict = guarded_check(case, oracles, cfg.case_timeout, under_test=cfg.engine, isolate=cfg.isolate)
    for d in verdict.discrepancies:
        if d.kind == dj["kind"] and sorted(d.oracles) == sorted(dj["oracles"]):
            # The worker's diagnosis stands (its culprit comes from the reduction and its cause from the
            # engine's explanation, neither of which a plain re-check repeats): the signature, hence
            # the report id, is the one the worker counted.  A re-check's own cause gave every
            # not-localised finding of a run one id: one folder, the others listed without one.
            d.cause, d.culprit = Cause.from_json(dj.get("cause")), dj.get("culprit")
            return d, verdict
    # Not reproduced here (a nondeterministic engine, another machine): report what the worker saw.
    d = Discrepancy(kind=dj["kind"], oracles=tuple(dj["oracles"]), message=dj["message"] + (
        "\n(reported by a worker; the controller's re-check of this case did not show it)"), case=case,
        traceback=dj.get("traceback"), cause=Cause.from_json(dj.get("cause")), culprit=dj.get("culprit"))
    return d, Verdict(case, {}, [], [d], {}, {})


def _crash_finding(rec: dict, cfg: Config, silenced: dict | None = None):
    case = Case.from_json(rec["case_json"])
    msg = (f"a campaign worker (pid {rec['pid']} on {rec.get('host', '?')}) died while checking this case: the "
           "engine or an oracle crashed the process (segmentation fault, abort, os._exit, out of memory or a kill)")
    if rec["pid"] in (silenced or {}):
        msg = (f"a campaign worker (pid {rec['pid']} on {rec.get('host', '?')}) stopped answering while checking this "
               f"case: no heartbeat for {silenced[rec['pid']]:.0f} s (stopped by a signal such as SIGSTOP, or wedged "
               "in code that holds the GIL, which the per-case timeout cannot cut), so the controller killed it "
               "(gradspec/fuzz/heartbeat.py)")
    if (rec.get("fault") or "").strip():
        msg += "; the Python traceback at the fatal signal is below"
    d = Discrepancy(kind="crash", oracles=("process", case.engine or cfg.engine), message=msg, case=case,
                    traceback=rec.get("fault") or None, cause=process_died(msg, rec.get("fault")))
    return d, Verdict(case, {}, [], [d], {}, {})


def run_distributed(cfg: Config, progress: Callable | None = None, on_found: Callable | None = None,
                    oracles=None) -> Stats:
    """Run the campaign on ``cfg.workers`` xdist workers (or ``cfg.tx`` specs); merge what comes back.

    ``on_found(discrepancy, verdict, info)`` is called in this process for every finding and crash
    (the command line writes the report folder); ``progress(stats)`` whenever a chunk ends.
    """
    from .campaign import resolve

    if oracles is None:
        oracles = resolve(cfg)[0]
    merged = Stats(shards=max(1, cfg.workers))
    written: set = set()
    cut: list = []  # chunks an interruption stopped in their worker

    def emit(d, verdict, info):
        rid = discrepancy_id(d.signature)
        if rid in written:
            return
        written.add(rid)
        info = {**info, "run_id": cfg.run_id, "seed": cfg.seed, "engine": cfg.engine,
                "covers": info.get("covers") or [_sig_key(d.signature)]}
        merged.found.setdefault(rid, {"id": rid, "kind": d.kind, "oracles": list(d.oracles),
                                      "ops": sorted({n.op for n in d.case.nodes}) if d.case is not None else [],
                                      "message": d.message, "covers": info["covers"], "note": info.get("note", ""),
                                      "shard": info.get("shard"),
                                      "cause": None if d.cause is None else d.cause.to_json()})
        if on_found is not None:
            try:
                with interrupts.deferred():  # listed in merged.found: written whole (chaos M2)
                    on_found(d, verdict, info)
            except ReportDirError as e:  # (as a campaign in one process: the case printed at the end, exit 1)
                rec = merged.found[rid]
                rec["report_error"] = str(e)
                rec["case"] = getattr(e, "case_json", None) or (d.case.to_json(indent=None) if d.case else None)
                if str(e) not in merged.errors:
                    merged.errors.append(str(e))

    def on_chunk(d):
        st = Stats.from_json(d["stats"])
        if st.interrupted:  # (whether the run was interrupted is the controller's to say: below)
            cut.append({"chunk": d["chunk"], "pid": d.get("pid")})
            st.interrupted = False
        found, st.found = st.found, {}
        merged.merge(st)
        merged.processes = [p for p in merged.processes if p.get("shard") != d["chunk"]]
        merged.processes.append({"shard": d["chunk"], "pid": d["pid"], "host": d.get("host"),
                                 "worker": d.get("worker"), "cases": st.cases, "seconds": round(st.seconds, 3),
                                 "found": len(d.get("findings") or [])})
        for f in d.get("findings") or []:
            got = _rebuild(f, oracles, cfg)
            if got is not None:
                emit(*got, {**(f.get("info") or {}), "shard": d["chunk"]})
        for rid, rec in found.items():  # a finding whose report could not be rebuilt is still counted
            have = merged.found.setdefault(rid, {})
            have.update({k: v for k, v in rec.items() if k not in have})  # (the worker's counts, culprit)
        merged.seconds = time.time() - cfg.started
        if progress is not None:
            progress(merged)

    chunks = chunk_plan(cfg.workers, cfg.budget, cfg.seconds)
    ctl, interrupted = _session(cfg, chunks, on_chunk)
    crashes, lost, failures = list(ctl.crashes), list(ctl.lost), list(ctl.failures)
    dead = set(ctl.dead_at_interrupt)
    silenced = dict(ctl.silenced)
    if lost and not interrupted and (cfg.deadline is None or time.time() < cfg.deadline):
        # One more try for what a dead worker did not run, on fresh workers, with other seeds.
        retry = [{**c, "chunk": c["chunk"] + len(chunks) * 1000} for c in lost]
        ctl2, interrupted = _session(cfg, retry, on_chunk)
        crashes += ctl2.crashes
        silenced.update(ctl2.silenced)
        dead |= ctl2.dead_at_interrupt
        failures += ctl2.failures
        lost = [{**c, "why": c["why"] + "; lost again on the retry"} for c in ctl2.lost]
    if interrupted:
        with interrupts.deferred(raise_after=False):  # (a second Ctrl-C does not cut this short)
            for d in _flushed_chunks(ctl.root, ctl.done):
                ctl.done.add(f"gradspec-campaign::chunk-{d['chunk']}")
                on_chunk(d)
    # Workers on this machine whose crash no replacement picked up (xdist starts none when nothing is
    # pending): their in-flight cases are in the worker-local folder here.
    crashes += _crash_records(cfg)
    shutil.rmtree(worker_local_root(cfg.run_id), ignore_errors=True)
    if interrupted:
        # The interrupted session stopped its workers wherever they were (xdist tears them down): a case
        # left in flight is then the interruption's, not a crash of the engine; only a fatal signal's
        # traceback (faulthandler: segfault, abort) still shows a process that died of its own, and so does one
        # that was dead before the interruption came (a kill, os._exit: no traceback), or whose crash a finished
        # chunk reported.
        crashes = [r for r in crashes if (r.get("fault") or "").strip() or r.get("before_interrupt") or r["pid"] in dead]
    for rec in {r["pid"]: r for r in crashes}.values():
        try:
            d, verdict = _crash_finding(rec, cfg, silenced)
        except Exception as e:  # noqa: BLE001 - an unreadable in-flight case is still a crash
            merged.errors.append(f"worker pid {rec['pid']} died on a case that cannot be read back: {e}")
            continue
        emit(d, verdict, {"note": "the worker process died on this case", "shard": None})
        merged.crashed.append({"pid": rec["pid"], "report": discrepancy_id_of(d)})
    merged.interrupted |= interrupted
    if not interrupted:
        # A worker alone was interrupted (a signal sent to its pid): the run was not, but that worker's share of
        # the budget did not all run -- not a clean bill of health, and no "interrupted" run either (chaos L7).
        plan = {c["chunk"]: c for c in chunks}
        for c in cut:
            lost.append({**plan.get(c["chunk"], {"chunk": c["chunk"], "budget": 0, "seconds": None}),
                         "why": f"its worker (pid {c['pid']}) was interrupted by a signal sent to it alone"})
    merged.lost = [{"chunk": c["chunk"], "cases": c["budget"] if c["seconds"] is None else None,
                    "seconds": c["seconds"], "why": c["why"]} for c in lost]
    for c in merged.lost:
        what = f"{c['cases']} case(s)" if c["cases"] is not None else f"{c['seconds']:.1f} s"
        merged.errors.append(f"lost {what} of the budget: chunk {c['chunk']} did not finish ({c['why']})")
    for text in failures:
        merged.errors.append("a chunk failed: " + text.strip().splitlines()[-1][:300])
    if not merged.cases and not lost and not failures and cfg.seconds is not None and not interrupted:
        took = (ctl.first_report or time.time()) - cfg.started
        merged.errors.append(f"the --seconds budget of {cfg.seconds:g} s ran out before any chunk could check a case: "
                             f"the {cfg.workers} workers were still starting (Python, gradspec and torch imports, the "
                             f"campaign's set-up; the first chunk reported {took:.1f} s after the start); give more "
                             "--seconds, or fewer --workers")
    merged.seconds = time.time() - cfg.started
    return merged


def discrepancy_id_of(d: Discrepancy) -> str:
    return discrepancy_id(d.signature)

