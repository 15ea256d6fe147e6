"""The fuzzing campaign behind ``gradspec fuzz``: random cases through every oracle, for as long as asked.

How a campaign keeps going after a discrepancy
----------------------------------------------
Hypothesis stops at the first failure of a test (after shrinking it).  A campaign therefore runs
Hypothesis in *rounds*.  In each round a case is a failure only when it shows a discrepancy that
no earlier round already covers; the first such discrepancy fixes the round's *target* (its kind
and oracle pair), and while Hypothesis shrinks, a smaller case is a failure only if it still shows
an uncovered discrepancy of that target.  The shrunk discrepancy is written as a report at once,
and its signature (kind + oracle pair + ops) joins the known set.  A known signature covers every
case of the same kind and oracle pair whose ops include its ops: once ``exp`` alone is known to be
wrong against torch, a case with ``exp`` and ``mul`` disagreeing the same way is not hunted again.
Discrepancies seen while shrinking another one are kept (unshrunk) so nothing is lost if the
campaign ends before they are hunted.

Replaying saved failures
------------------------
Every failure Hypothesis shrinks is saved in its example database (``DIR/.hypothesis`` by default,
``--database`` for one shared between machines), under a key made of the engine and the op set.
A campaign starts with a replay round (Hypothesis' *reuse* phase alone) in which every saved case
that still disagrees counts as found; Hypothesis deletes the saved cases that now agree.  Later
rounds skip the reuse phase, so they never delete what the replay round kept.  The report folders
of earlier runs are also replayed (``replay_previous``): the run index marks each one still present
or no longer reproducing.

Scale-out
---------
``--workers K`` (K > 1) runs the campaign as a pytest session with pytest-xdist: the campaign is a
small JSON file collected by gradspec's pytest plugin as K items (shards), each a Hypothesis run
with its own seed; ``--tx`` specs (passed on to xdist) spread them over machines that have gradspec
installed and see the report dir at the same path (shared storage: the shards read the campaign
file from it).  Workers write their reports into the report dir as they find them, share failures
through the example database, and send their counts back in the pytest report (``user_properties``),
which the controller merges into one summary.  A worker that dies is reported with the case it was
on: each process writes the case it is checking to ``DIR/.gradspec/runs/<run>/inflight-<pid>.json``
(and the Python traceback of a fatal signal to ``fault-<pid>.log``) before every case.

Faults
------
An oracle or engine that raises, returns NaN, wrong shapes or wrong types is a discrepancy with its
traceback (``gradspec.check`` compares the results); one that hangs is cut by the per-case timeout
(``signal.setitimer`` in the main thread, a watchdog thread elsewhere: only Python code can be
interrupted, a C loop is cut when it returns to Python) and recorded as a ``timeout`` discrepancy.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import hashlib
import json
import os
import signal
import sys
import threading
import time
import traceback
import uuid
import warnings
from collections import Counter
from typing import Any, Callable

import numpy as np

from ._private import database as _db
from .case import Case
from .check import Discrepancy, Verdict, check
from .oracles import Oracle

__all__ = [
    "Config",
    "Stats",
    "EngineOracle",
    "CaseTimeout",
    "ReportDirError",
    "guarded_check",
    "run_campaign",
    "run_shard",
    "run_distributed",
    "resolve",
    "replay_previous",
    "stale_inflight",
    "report_crashes",
    "cleanup_stale_runs",
    "write_summary",
    "progress_printer",
    "covered",
    "BUILTIN_ENGINES",
]

BUILTIN_ENGINES = ("reference", "torch-cpu", "torch-cuda")
STATE = ".gradspec"  # campaign bookkeeping under the report dir (run configs, shard snapshots)
CAMPAIGN_SUFFIX = ".gradspec-campaign.json"  # what gradspec's pytest plugin collects as shards
DEFAULT_EXAMPLES = 200
SNAPSHOT_EVERY = 1.0  # seconds between shard snapshots (what the controller's progress line reads)


class CaseTimeout(Exception):
    """A case exceeded the per-case timeout (raised inside whatever was running)."""


class ReportDirError(OSError):
    """The report dir cannot be written (full disk, no permission, a file in the way)."""


class _Found(Exception):
    """Raised in the Hypothesis test body: this case shows a discrepancy worth shrinking."""


class _Stop(BaseException):
    """Ends a round at once (not a test failure: Hypothesis lets BaseException through)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------------------------------------
# configuration and results
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Config:
    """One campaign, as the command line describes it (JSON-serializable: shards read it)."""

    engine: str = "reference"
    ops: list[str] | None = None
    oracles: list[str] | None = None
    max_examples: int | None = None
    seconds: float | None = None
    seed: int | None = None
    report_dir: str = "reports"
    database: list[str] | str | None = None  # --database specs (gradspec/_private/database.py)
    case_timeout: float | None = 60.0
    shrink_seconds: float = 60.0
    workers: int = 1
    tx: list[str] | None = None
    run_id: str = ""
    started: float = 0.0
    argv: list[str] | None = None

    def __post_init__(self) -> None:
        if not self.run_id:
            self.run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        if not self.started:
            self.started = time.time()
        if self.seed is None:
            self.seed = int.from_bytes(os.urandom(4), "little")
        self.report_dir = os.path.abspath(self.report_dir)
        self.database = _db.normalise(self.database) or None

    @property
    def budget(self) -> int:
        """Generated cases this campaign may check (all shards together)."""
        if self.max_examples is not None:
            return self.max_examples
        return 10**12 if self.seconds is not None else DEFAULT_EXAMPLES

    @property
    def state_dir(self) -> str:
        return os.path.join(self.report_dir, STATE, "runs", self.run_id)

    @property
    def db_dir(self) -> str:
        """The example database(s) as shown in reports (the default is DIR/.hypothesis)."""
        return _db.describe(self.database, os.path.join(self.report_dir, ".hypothesis"))

    def open_database(self, check: bool = False):
        return _db.open_database(self.database, os.path.join(self.report_dir, ".hypothesis"), check=check)

    @property
    def deadline(self) -> float | None:
        return None if self.seconds is None else self.started + self.seconds

    def shard_budget(self, shard: int) -> int:
        b, k = self.budget, max(1, self.workers)
        return b // k + (1 if shard < b % k else 0)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Config":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def describe(self) -> dict:
        """The run configuration as shown in reports."""
        budget = (f"{self.max_examples} cases" if self.max_examples is not None
                  else f"{self.seconds:g} s" if self.seconds is not None else f"{DEFAULT_EXAMPLES} cases (default)")
        return {
            "engine": self.engine,
            "ops": "all" if not self.ops else ", ".join(self.ops),
            "oracles": "all available" if not self.oracles else ", ".join(self.oracles),
            "budget": budget,
            "workers": self.workers if not self.tx else f"{self.workers} shards over --tx {' '.join(self.tx)}",
            "seed": self.seed,
            "case timeout": "none" if not self.case_timeout else f"{self.case_timeout:g} s",
            "shrink time per discrepancy": f"{self.shrink_seconds:g} s",
            "example database": self.db_dir,
            "run id": self.run_id,
            "command": " ".join(self.argv) if self.argv else "",
        }


def _sig_key(sig) -> str:
    kind, pair, ops = sig
    return f"{kind}|{' vs '.join(pair)}|{','.join(ops)}"


def _sig_from_key(key: str) -> tuple:
    kind, pair, ops = key.split("|")
    return (kind, tuple(pair.split(" vs ")), tuple(o for o in ops.split(",") if o))


def covered(sig, known) -> bool:
    """Is ``sig`` covered by a known signature: same kind and oracle pair, ops a subset?"""
    kind, pair, ops = sig
    ops = set(ops)
    return any(k == kind and p == pair and set(o) <= ops for k, p, o in known)


@dataclasses.dataclass
class Stats:
    """What a campaign (or one shard of it) did; shards merge by adding up."""

    cases: int = 0
    replayed: int = 0
    shrink_runs: int = 0
    seconds: float = 0.0
    op_counts: Counter = dataclasses.field(default_factory=Counter)
    pair_counts: Counter = dataclasses.field(default_factory=Counter)
    pair_agree: Counter = dataclasses.field(default_factory=Counter)
    skipped: Counter = dataclasses.field(default_factory=Counter)
    timeouts: int = 0
    found: dict = dataclasses.field(default_factory=dict)  # report id -> record (see _record)
    interrupted: bool = False
    stop_reason: str = ""
    errors: list = dataclasses.field(default_factory=list)  # campaign-level problems, in words
    crashed: list = dataclasses.field(default_factory=list)  # {"shard", "pid", "report"}
    processes: list = dataclasses.field(default_factory=list)  # {"shard", "pid", "cases", "seconds"}
    shards: int = 1

    def known(self) -> set:
        return {_sig_from_key(k) for rec in self.found.values() for k in rec.get("covers", [])}

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        for k in ("op_counts", "pair_counts", "pair_agree", "skipped"):
            d[k] = dict(getattr(self, k))
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Stats":
        s = cls()
        for f in dataclasses.fields(cls):
            if f.name in d:
                v = d[f.name]
                setattr(s, f.name, Counter(v) if isinstance(getattr(s, f.name), Counter) else v)
        return s

    def merge(self, other: "Stats") -> None:
        self.cases += other.cases
        self.replayed += other.replayed
        self.shrink_runs += other.shrink_runs
        self.seconds = max(self.seconds, other.seconds)
        for k in ("op_counts", "pair_counts", "pair_agree", "skipped"):
            getattr(self, k).update(getattr(other, k))
        self.timeouts += other.timeouts
        for rid, rec in other.found.items():
            self.found.setdefault(rid, rec)
        self.interrupted |= other.interrupted
        self.errors += [e for e in other.errors if e not in self.errors]
        self.crashed += other.crashed
        self.processes += other.processes


# ---------------------------------------------------------------------------------------------
# the engine under test as an oracle
# ---------------------------------------------------------------------------------------------


class EngineOracle(Oracle):
    """A third-party engine (the CONTRACT §4 protocol) driven like an oracle.

    Each case is built in the engine with ``leaf`` and ``apply(op, *args, **params)`` (canonical
    params), each root is back-propagated with its seed (``retain_graph=True`` except for the last
    root, so shared subgraphs survive), and ``grad(leaf)`` is read for every leaf that requires
    grad.  What comes back is validated: anything that is not a numeric array (or None) raises a
    ``TypeError`` naming the leaf, which ``gs.check`` records as a ``raised`` discrepancy.
    """

    kind = "exact"
    reports_none = False  # an engine may legitimately report zeros where torch has None

    def __init__(self, engine, name: str | None = None, spec: str | None = None) -> None:
        self.engine = engine
        self.name = name or getattr(engine, "name", "engine")
        self.spec = spec or self.name

    def _supports(self, op: str) -> bool:
        try:
            return bool(self.engine.supports(op))
        except Exception:
            return False

    def applies(self, case):
        missing = sorted({n.op for n in case.nodes if not self._supports(n.op)})
        if missing:
            return False, f"{self.name}: engine does not support op(s) {', '.join(missing)}"
        return True, ""

    def vjp(self, case):
        eng = self.engine
        try:
            env: dict[str, Any] = {}
            for leaf in case.leaves:
                env[leaf.name] = eng.leaf(np.array(leaf.value, copy=True), requires_grad=leaf.differentiable)
            for n in case.nodes:
                env[n.name] = eng.apply(n.op, *[env[i] for i in n.inputs], **n.params)
            k = len(case.roots)
            for j, (r, s) in enumerate(zip(case.roots, case.seeds, strict=True)):
                eng.backward(env[r], None if s is None else np.array(s, copy=True), retain_graph=j < k - 1)
            out = {}
            for leaf in case.grad_leaves():
                g = eng.grad(env[leaf.name])
                out[leaf.name] = None if g is None else _as_gradient(g, self.name, leaf.name)
            return out
        except (SystemExit, GeneratorExit) as e:  # an engine must not end the campaign
            raise RuntimeError(f"engine {self.name!r} raised {type(e).__name__}({e})") from e


def _as_gradient(g, engine: str, leaf: str) -> np.ndarray:
    try:
        if hasattr(g, "detach") and hasattr(g, "cpu"):  # a torch tensor slipped through
            g = g.detach().cpu().numpy()
        arr = np.asarray(g)
    except Exception as e:
        raise TypeError(f"engine {engine!r}: grad({leaf}) returned {type(g).__name__}, not an array: {e}") from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(
            f"engine {engine!r}: grad({leaf}) returned a {type(g).__name__} of dtype {arr.dtype}; "
            "the Engine protocol wants a numeric numpy array (or None)"
        )
    if np.iscomplexobj(arr):
        raise TypeError(f"engine {engine!r}: grad({leaf}) returned complex values ({arr.dtype})")
    return arr


def resolve(cfg: Config) -> tuple[list, list[str], Any]:
    """(oracle objects, op names, engine object or None) for a campaign; ValueError explains a bad choice.

    Built-in engines are oracles already (``reference``, ``torch-cpu``, ``torch-cuda``); any other
    engine is loaded through ``gs.engines.get`` and added as an :class:`EngineOracle`.
    """
    from . import engines as _engines
    from . import oracles as _oracles
    from . import strategies
    from ._private.imports import ImportSpecError, import_object

    engine_obj = None
    if cfg.engine in BUILTIN_ENGINES:
        ok, why = _oracles.get(cfg.engine).available()
        if not ok:
            raise ValueError(f"--engine {cfg.engine}: {why}")
        engine_obj = _engines.get(cfg.engine)
    else:
        try:
            engine_obj = _engines.get(cfg.engine)
        except _engines.EngineError as e:
            raise ValueError(f"--engine {cfg.engine}: {e}") from None
    chosen: list = []
    for name in cfg.oracles or _oracles.names():
        if ":" in name:
            try:
                obj = import_object(name)
            except ImportSpecError as e:
                raise ValueError(f"--oracles: {e}") from None
            obj = obj() if isinstance(obj, type) else obj
            if not isinstance(obj, Oracle):
                raise ValueError(f"--oracles: {name} is not a gradspec.oracles.Oracle")
            chosen.append(obj)
            continue
        try:
            chosen.append(_oracles.get(name))
        except KeyError as e:
            raise ValueError(f"--oracles: {e.args[0]}") from None
    if cfg.engine in BUILTIN_ENGINES:
        if cfg.engine not in [o.name for o in chosen]:
            chosen.append(_oracles.get(cfg.engine))
    else:
        taken = {o.name for o in chosen}
        name = getattr(engine_obj, "name", "engine")
        if name in taken:
            name = f"{name} (engine)"
        chosen.append(EngineOracle(engine_obj, name, cfg.engine))
    if len(chosen) < 2:
        raise ValueError("--oracles: a campaign needs at least two oracles to compare")

    def supported(op: str) -> bool:
        if cfg.engine in BUILTIN_ENGINES:
            # Built-in engines run every registered op, user ops included (torch: those with a torch twin).
            from .ops import _registry

            try:
                spec = _registry.lookup(op)
            except KeyError:
                return False
            return cfg.engine == "reference" or spec.torch is not None
        try:
            return bool(engine_obj.supports(op))
        except Exception:
            return False

    if cfg.ops:
        names = []
        for o in cfg.ops:
            if ":" in o:  # a user op by import path: importing it registers it in the table
                try:
                    spec = import_object(o)
                except ImportSpecError as e:
                    raise ValueError(f"--ops: {e}") from None
                o = getattr(spec, "name", None)
                if o is None:
                    raise ValueError(f"--ops: {o!r} is not a gradspec op (gs.Op(...))")
            names.append(o)
        unsupported = [o for o in names if not supported(o)]
        if unsupported:
            raise ValueError(f"--ops: engine {cfg.engine!r} does not support {', '.join(unsupported)}")
        try:
            ops = strategies.op_order(names)
        except Exception as e:
            raise ValueError(f"--ops: {e}") from None
    else:
        ops = [o for o in strategies.op_order() if supported(o)]
        if not ops:
            raise ValueError(f"engine {cfg.engine!r} supports none of the table's ops")
    return chosen, ops, engine_obj


# ---------------------------------------------------------------------------------------------
# one case, with faults contained
# ---------------------------------------------------------------------------------------------


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


def guarded_check(case: Case, oracles, timeout: float | None = None) -> Verdict:
    """``gs.check(case, oracles)`` that never raises (except KeyboardInterrupt) and never hangs.

    An oracle that raises is recorded by ``check`` itself; one that exceeds ``timeout`` seconds
    gets :class:`CaseTimeout` raised inside it (so its traceback shows where it hung) and becomes
    a ``timeout`` discrepancy; a failure of ``check`` itself becomes a ``check-error`` discrepancy.
    """
    if timeout and _main_thread():
        verdict = _check_with_alarm(case, oracles, timeout)
    elif timeout:
        verdict = _check_with_watchdog(case, oracles, timeout)
    else:
        verdict = _check_safely(case, oracles)
    _retag_timeouts(verdict, timeout)
    return verdict


def _synthetic(case, kind, pair, message, tb=None) -> Verdict:
    d = Discrepancy(kind=kind, oracles=pair, message=message, case=case, traceback=tb)
    return Verdict(case, {}, [], [d], {}, {})


def _check_safely(case, oracles) -> Verdict:
    try:
        return check(case, oracles=oracles)
    except CaseTimeout:
        raise
    except Exception as e:
        return _synthetic(case, "check-error", ("gradspec.check", "case"),
                          f"gs.check itself raised {type(e).__name__}: {e}", traceback.format_exc())


def _check_with_alarm(case, oracles, timeout) -> Verdict:
    def on_alarm(signum, frame):
        # Re-armed so that whatever runs next (the next oracle) is cut as well.
        signal.setitimer(signal.ITIMER_REAL, timeout)
        raise CaseTimeout(f"exceeded the per-case timeout of {timeout:g} s (--case-timeout)")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout)
            return _check_safely(case, oracles)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    except CaseTimeout:
        return _synthetic(case, "timeout", ("gradspec.check", "case-timeout"),
                          f"checking the case exceeded the per-case timeout of {timeout:g} s outside any oracle",
                          traceback.format_exc())


def _check_with_watchdog(case, oracles, timeout) -> Verdict:
    box: list = []
    t = threading.Thread(target=lambda: box.append(_check_safely(case, oracles)), daemon=True)
    t.start()
    t.join(timeout)
    if box:
        return box[0]
    # The thread cannot be killed; it is abandoned (a daemon thread) and the campaign moves on.
    return _synthetic(case, "timeout", ("gradspec.check", "case-timeout"),
                      f"checking the case exceeded the per-case timeout of {timeout:g} s (watchdog thread: "
                      "the hung oracle keeps running in the background)")


def _retag_timeouts(verdict: Verdict, timeout) -> None:
    for name, (etype, _msg, tb) in verdict.errors.items():
        if etype != CaseTimeout.__name__:
            continue
        mine = [d for d in verdict.discrepancies if d.kind == "raised" and d.oracles[0] == name]
        text = f"{name} exceeded the per-case timeout of {timeout:g} s (--case-timeout); it was cut here"
        for d in mine:
            d.kind, d.message, d.traceback = "timeout", text, tb
        if not mine:
            verdict.discrepancies.append(Discrepancy(kind="timeout", oracles=(name, "case-timeout"), message=text,
                                                     case=verdict.case, traceback=tb))


# ---------------------------------------------------------------------------------------------
# the campaign
# ---------------------------------------------------------------------------------------------


def _round_seed(seed: int, shard: int, rnd: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{shard}/{rnd}".encode()).digest()[:4], "little")


def _db_key(cfg: Config, ops: list[str]) -> bytes:
    # Saved failures only replay meaningfully with the same strategy (op set) and engine.
    return hashlib.sha256(f"gradspec-fuzz|{cfg.engine}|{','.join(sorted(ops))}".encode()).digest()[:16]


class _Campaign:
    def __init__(self, cfg: Config, shard: int, progress=None, on_found=None, oracles=None, found=None) -> None:
        self.cfg = cfg
        self.shard = shard
        self.progress = progress
        self.on_found = on_found
        resolved, self.ops, self.engine = resolve(cfg)
        self.oracles = oracles if oracles is not None else resolved
        self.stats = Stats(shards=1)
        self.stats.found.update(found or {})  # already reported (e.g. earlier runs' cases still failing)
        self.mode = "generate"
        self.target = None
        self.last: tuple | None = None
        self.pending: dict = {}  # signature -> (discrepancy, verdict): seen while shrinking something else
        self.shrink_deadline = None
        self.report_failed = False
        self.interrupt_requested = False
        self.t0 = time.time()
        self.budget = cfg.shard_budget(shard)
        self._last_snapshot = 0.0
        os.makedirs(cfg.state_dir, exist_ok=True)
        self.inflight = os.path.join(cfg.state_dir, f"inflight-{os.getpid()}.json")
        self.snapshot_path = os.path.join(cfg.state_dir, f"shard-{shard}.json")

    # -- bookkeeping -----------------------------------------------------------------------
    def known(self) -> set:
        k = self.stats.known()
        k |= _known_in_run(self.cfg)  # what other shards of this run already found
        return k

    def snapshot(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self._last_snapshot < SNAPSHOT_EVERY:
            return
        self._last_snapshot = now
        self.stats.seconds = now - self.t0
        try:
            _atomic_json(self.snapshot_path, {"shard": self.shard, "pid": os.getpid(), "stats": self.stats.to_json()})
        except OSError:
            pass  # a snapshot is a convenience; report writing failures are what get reported

    def count(self, case: Case, verdict: Verdict) -> None:
        s = self.stats
        for op in {n.op for n in case.nodes}:
            s.op_counts[op] += 1
        for comp in verdict.comparisons:
            key = " vs ".join(comp.oracles)
            s.pair_counts[key] += 1
            s.pair_agree[key] += int(comp.agreed)
        for name, why in verdict.skipped.items():
            s.skipped[f"{name}: {why.split(':', 1)[1].strip() if ':' in why else why}"[:100]] += 1
        s.timeouts += sum(d.kind == "timeout" for d in verdict.discrepancies)

    def record(self, d: Discrepancy, verdict: Verdict, note: str = "") -> None:
        from . import report

        covers = _covers(d, verdict)
        rid = report.discrepancy_id(d.signature)
        if rid in self.stats.found:
            return
        info = {"run_id": self.cfg.run_id, "shard": self.shard, "seed": self.cfg.seed, "engine": self.cfg.engine,
                "note": note, "covers": covers, "found_at": time.time()}
        rec = {
            "id": rid,
            "kind": d.kind,
            "oracles": list(d.oracles),
            "ops": sorted({n.op for n in d.case.nodes}) if d.case is not None else [],
            "message": d.message,
            "covers": covers,
            "note": note,
            "shard": self.shard,
        }
        self.stats.found[rid] = rec
        if self.on_found is not None and not self.report_failed:
            try:
                self.on_found(d, verdict, info)
            except ReportDirError as e:
                # Nothing found may be lost: keep the case in the results, printed at the end.
                self.report_failed = True
                self.stats.errors.append(str(e))
                rec["report_error"] = str(e)
        if self.report_failed:
            rec["case"] = d.case.to_json(indent=None) if d.case is not None else None
        self.snapshot(force=True)

    # -- the Hypothesis test body ------------------------------------------------------------
    def one(self, case: Case) -> None:
        if self.interrupt_requested:
            # The KeyboardInterrupt itself may have been swallowed (raised in a gc callback or a
            # __del__, or caught by an engine): the flag is what makes Ctrl-C reliable.
            raise KeyboardInterrupt
        now = time.time()
        deadline = self.cfg.deadline
        if deadline is not None and now > deadline:
            raise _Stop("time")
        if self.mode == "shrink" and now > self.shrink_deadline:
            raise _Stop("shrink-time")
        case.engine = self.cfg.engine
        try:
            with open(self.inflight, "w", encoding="utf-8") as f:
                f.write(case.to_json(indent=None))
        except OSError:
            pass
        verdict = guarded_check(case, self.oracles, self.cfg.case_timeout)
        try:
            os.unlink(self.inflight)  # only a case being checked is "in flight" (see report_crashes)
        except OSError:
            pass
        s = self.stats
        if self.mode == "generate":
            s.cases += 1
            self.count(case, verdict)
        elif self.mode == "replay":
            s.replayed += 1
        else:
            s.shrink_runs += 1
        if self.progress is not None:
            self.progress(self)
        self.snapshot()
        if self.mode == "replay":
            if not verdict.discrepancies:
                return
            self.record(verdict.discrepancies[0], verdict, "replayed from the example database")
            if self.report_failed:
                raise _Stop("report-dir")
            hit = verdict.discrepancies[:1]  # a failure: Hypothesis keeps the saved case in its database
        else:
            new = [d for d in verdict.discrepancies if not covered(d.signature, self._frozen_known)]
            if not new:
                return
            if self.mode == "generate":
                self.target = (new[0].kind, tuple(sorted(new[0].oracles)))
                self.mode = "shrink"
                self.shrink_deadline = now + self.cfg.shrink_seconds
            hit = [d for d in new if (d.kind, tuple(sorted(d.oracles))) == self.target]
            for d in new:
                if d not in hit:
                    self.pending.setdefault(d.signature, (d, verdict))
            if not hit:
                return
            self.last = (hit[0], verdict)
        # One raise site: Hypothesis tells failures apart by where they were raised.
        raise _Found()

    # -- rounds ------------------------------------------------------------------------------
    def _database(self):
        # One connection per campaign process, opened on first use (workers open their own).
        if getattr(self, "_db", None) is None:
            self._db = self.cfg.open_database()
        return self._db

    def _prop(self, phases, max_examples, rnd: int, multiple: bool):
        from hypothesis import HealthCheck, Verbosity, given, settings
        from . import strategies

        @settings(
            max_examples=max(1, max_examples),
            deadline=None,
            database=self._database(),
            phases=phases,
            suppress_health_check=list(HealthCheck),
            verbosity=Verbosity.quiet,
            report_multiple_bugs=multiple,
            print_blob=False,
            derandomize=False,
        )
        @given(strategies.cases(ops=self.ops))
        def gradspec_campaign(case):
            self.one(case)

        prop = gradspec_campaign
        # What @seed does, minus its side effect of switching the example database off (the
        # database is how saved failures replay and how shards share them).  Both attributes are
        # the ones hypothesis.find() and @seed set.
        prop._hypothesis_internal_use_seed = _round_seed(self.cfg.seed, self.shard, rnd)
        prop._hypothesis_internal_database_key = _db_key(self.cfg, self.ops)
        return prop

    def _run_round(self, prop) -> str | None:
        """Run one Hypothesis round; returns a stop reason, or None to go on."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. Hypothesis' "overly large repr" of big cases
            try:
                prop()
                return "done"
            except _Found:
                return None
            except _Stop as e:
                return e.reason
            except KeyboardInterrupt:
                self.stats.interrupted = True
                return "interrupted"
            except Exception as e:  # Flaky (a nondeterministic engine or a timeout), health checks...
                if self.last is None and self.mode != "replay":
                    self.stats.errors.append(f"Hypothesis stopped a round: {type(e).__name__}: {str(e)[:300]}")
                    return "error"
                return None

    def run(self) -> Stats:
        from hypothesis import Phase

        fh = _enable_faulthandler(self.cfg.state_dir)
        previous_sigint = None
        if _main_thread():
            def on_sigint(signum, frame):
                self.interrupt_requested = True
                raise KeyboardInterrupt

            previous_sigint = signal.signal(signal.SIGINT, on_sigint)
        try:
            self.snapshot(force=True)  # records this process's pid from the start
            self._frozen_known = self.known()
            self.mode = "replay"
            reason = self._run_round(self._prop([Phase.reuse], 1000, 0, True))
            rnd = 0
            while reason not in ("time", "interrupted", "error", "report-dir"):
                remaining = self.budget - self.stats.cases
                if remaining <= 0:
                    reason = "budget"
                    break
                rnd += 1
                self.mode, self.target, self.last = "generate", None, None
                self._frozen_known = self.known()
                before = self.stats.cases
                reason = self._run_round(self._prop([Phase.generate, Phase.shrink], remaining, rnd, False))
                if self.last is not None:
                    self.record(*self.last, note="" if reason is None else f"shrinking stopped early ({reason})")
                    if self.report_failed:
                        reason = "report-dir"
                        break
                    if reason == "shrink-time":
                        reason = None
                if reason == "done":
                    # Hypothesis ended the round by itself: the budget is spent, or the strategy
                    # rejected too much; another round (another seed) only helps in the second case.
                    reason = None if before < self.stats.cases < self.budget else "budget"
            self.stats.stop_reason = reason or "budget"
            # Discrepancies met while shrinking another one, never hunted down on their own: keep them.
            for sig, (d, verdict) in self.pending.items():
                if not covered(sig, self.stats.known()):
                    self.record(d, verdict, note="not shrunk: seen while shrinking another discrepancy")
        except KeyboardInterrupt:
            self.stats.interrupted = True
            self.stats.stop_reason = "interrupted"
        finally:
            if previous_sigint is not None:
                signal.signal(signal.SIGINT, previous_sigint)
            if self.interrupt_requested:
                self.stats.interrupted = True
                self.stats.stop_reason = "interrupted"
            self.stats.seconds = time.time() - self.t0
            self.stats.processes = [{"shard": self.shard, "pid": os.getpid(), "cases": self.stats.cases,
                                     "seconds": round(self.stats.seconds, 3)}]
            for p in (self.inflight,):
                try:
                    os.unlink(p)
                except OSError:
                    pass
            _disable_faulthandler(fh)
            self.snapshot(force=True)
        return self.stats


_ONE_SIDED = ("raised", "timeout", "crash", "check-error")  # the first oracle of the pair is the one that failed


def _covers(d: Discrepancy, verdict: Verdict) -> list[str]:
    """Signatures one report stands for: the discrepancies of its case that share its culprit.

    A wrong engine disagrees with every oracle at once (engine vs reference, vs jacobian, vs
    torch...): one report, not four.  The culprit is the oracle that failed (raised, timed out)
    or, for a disagreement, the side of the pair involved in most of the case's disagreements.
    """
    if d.kind in _ONE_SIDED:
        culprit = d.oracles[0]
    else:
        count = Counter(o for x in verdict.discrepancies if x.kind not in _ONE_SIDED for o in x.oracles)
        culprit = max(d.oracles, key=lambda o: count[o])
    keys = {_sig_key(d.signature)}
    for x in verdict.discrepancies:
        involved = x.oracles[:1] if x.kind in _ONE_SIDED else x.oracles
        if culprit in involved:
            keys.add(_sig_key(x.signature))
    return sorted(keys)


def _enable_faulthandler(state_dir: str):
    """Dump the Python traceback of a fatal signal (segfault, abort) next to the inflight case."""
    try:
        f = open(os.path.join(state_dir, f"fault-{os.getpid()}.log"), "w")
    except OSError:
        return None
    was = faulthandler.is_enabled()
    faulthandler.enable(file=f, all_threads=True)
    return (f, was)


def _disable_faulthandler(fh) -> None:
    if fh is None:
        return
    f, was = fh
    faulthandler.disable()
    if was:
        for target in (sys.stderr, sys.__stderr__):
            try:
                faulthandler.enable(file=target)
                break
            except (AttributeError, ValueError, OSError):  # e.g. a captured stderr without a file descriptor
                continue
    empty = f.tell() == 0
    f.close()
    if empty:
        try:
            os.unlink(f.name)
        except OSError:
            pass


def _atomic_json(path: str, obj) -> None:
    from .report import atomic_write

    atomic_write(path, json.dumps(obj, indent=1, default=_json_default))


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


def _known_in_run(cfg: Config) -> set:
    """Signatures already reported in this run (by any shard), from the report folders."""
    from .report import read_records

    out = set()
    for rec in read_records(cfg.report_dir):
        if rec.get("run_id") == cfg.run_id:
            out |= {_sig_from_key(k) for k in rec.get("covers", [])}
    return out


def run_campaign(cfg: Config, shard: int = 0, progress: Callable | None = None, on_found: Callable | None = None,
                 oracles=None) -> Stats:
    """Run one campaign (or shard ``shard`` of it) in this process; returns its :class:`Stats`.

    ``on_found(discrepancy, verdict, info)`` is called at once for every new discrepancy (after
    shrinking); by default it writes the report folder.  ``progress(campaign)`` after every case.
    """
    if on_found is None:
        on_found = _report_writer(cfg)
    return _Campaign(cfg, shard, progress=progress, on_found=on_found, oracles=oracles).run()


def _report_writer(cfg: Config):
    from . import report

    def write(d, verdict, info):
        try:
            report.write_discrepancy_report(cfg.report_dir, d, verdict, info=info)
        except OSError as e:
            raise ReportDirError(f"cannot write the report of a discrepancy into {cfg.report_dir}: "
                                 f"{e.strerror or e}") from e

    return write


# ---------------------------------------------------------------------------------------------
# shards: a campaign as a pytest session (pytest-xdist does the process / machine management)
# ---------------------------------------------------------------------------------------------


def run_shard(cfg: Config, shard: int) -> Stats:
    """What one pytest item of a distributed campaign runs (in an xdist worker)."""
    return run_campaign(cfg, shard)


def campaign_items(parent, path):
    """The pytest collector for a ``*.gradspec-campaign.json`` file (used by gradspec's pytest plugin)."""
    import pytest

    class ShardItem(pytest.Item):
        def __init__(self, *, shard: int, cfg: Config, **kw):
            super().__init__(**kw)
            self.shard = shard
            self.cfg = cfg
            self.stats = None

        def runtest(self):
            self.stats = run_shard(self.cfg, self.shard)
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
    from .report import atomic_write

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


def report_crashes(cfg: Config, stats: Stats, state_root: str | None = None) -> list[dict]:
    """Turn every stale inflight case into a ``crash`` discrepancy report (and forget the marker).

    A case left by this run's workers counts as found in this run; one left by an earlier run's
    process (one that died without a summary) is written as that run's report and returned with
    ``"earlier": True`` so the caller can list it.  Returns ``[{"id", "earlier", "pid"}]``.
    """
    from . import report

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
        rid = report.discrepancy_id(d.signature)
        info = {"run_id": os.path.basename(item["dir"]) if earlier else cfg.run_id, "engine": case.engine,
                "note": "the process died on this case", "covers": [_sig_key(d.signature)], "found_at": time.time()}
        try:
            report.write_discrepancy_report(cfg.report_dir, d, verdict, info=info)
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
    from . import report

    out = []
    for rec in report.read_records(cfg.report_dir):
        if rec.get("run_id") == cfg.run_id:
            continue
        rid = rec.get("id")
        status = "from an earlier run"
        if rec.get("engine", "reference") == cfg.engine and rec.get("kind") not in ("crash",) and len(out) < limit:
            try:
                with open(os.path.join(cfg.report_dir, rid, "case.json"), encoding="utf-8") as f:
                    case = Case.from_json(f.read())
                case.engine = cfg.engine
                verdict = guarded_check(case, oracles, cfg.case_timeout)
                same = [d for d in verdict.discrepancies if report.discrepancy_id(d.signature) == rid]
                if same or verdict.discrepancies:
                    status = "still present"
                    note = "found in an earlier run, still present"
                    stats.found.setdefault(rid, {**{k: rec.get(k) for k in ("id", "kind", "oracles", "ops", "message")},
                                                 "covers": rec.get("covers", []), "note": note, "shard": None})
                    # Adopted by this run: its signatures are known to every shard from the start.
                    try:
                        report.update_record(cfg.report_dir, rid, {"run_id": cfg.run_id, "note": note})
                    except OSError:
                        pass
                else:
                    status = "no longer reproduces"
            except Exception as e:  # noqa: BLE001 - a report we cannot replay is still listed
                status = f"cannot be replayed: {type(e).__name__}: {str(e)[:120]}"
        try:
            report.update_record(cfg.report_dir, rid, {"status": status, "status_checked": time.time()})
        except OSError:
            pass
        out.append({"id": rid, "status": status})
    return out


# ---------------------------------------------------------------------------------------------
# summary and progress
# ---------------------------------------------------------------------------------------------


def supersede(found: dict) -> tuple[list, list]:
    """Split report records into (distinct, superseded).

    A report is superseded when another one of the same kind and oracle pair was found on a case
    with strictly fewer ops (say ``exp`` alone against ``add, exp``): the smaller case shows the
    same disagreement, so the bigger one is listed apart and not counted again.
    """
    recs = sorted(found.values(), key=lambda r: r["id"])
    active, gone = [], []
    for r in recs:
        key = (r.get("kind"), tuple(sorted(r.get("oracles") or [])))
        ops = set(r.get("ops") or [])
        by = next((o for o in recs if o is not r and (o.get("kind"), tuple(sorted(o.get("oracles") or []))) == key
                   and set(o.get("ops") or []) < ops and r.get("kind") not in ("crash",)), None)
        if by is None:
            active.append(r)
        else:
            gone.append({**r, "superseded_by": by["id"]})
    return active, gone


def summary_json(cfg: Config, stats: Stats, previous: list | None = None, ops: list | None = None) -> dict:
    """``DIR/summary.json``: the contract's keys (cases, discrepancies, seconds, ops, oracles) and more."""
    seconds = max(stats.seconds, 1e-9)
    active, superseded = supersede(stats.found)
    op_counts = {o: 0 for o in (ops or [])}
    op_counts.update(stats.op_counts)
    return {
        "cases": stats.cases,
        "discrepancies": len(active),
        "seconds": round(stats.seconds, 3),
        "ops": dict(sorted(op_counts.items())),
        "oracles": dict(sorted(stats.pair_counts.items())),
        "agreement": {k: stats.pair_agree.get(k, 0) for k in sorted(stats.pair_counts)},
        "cases_per_second": round(stats.cases / seconds, 2),
        "engine": cfg.engine,
        "seed": cfg.seed,
        "workers": cfg.workers,
        "run_id": cfg.run_id,
        "config": cfg.describe(),
        "replayed": stats.replayed,
        "shrink_runs": stats.shrink_runs,
        "timeouts": stats.timeouts,
        "skipped": dict(stats.skipped.most_common()),
        "interrupted": stats.interrupted,
        "stop_reason": stats.stop_reason,
        "errors": list(stats.errors),
        "crashed": list(stats.crashed),
        "processes": sorted(stats.processes, key=lambda p: p["shard"]),
        "reports": active,
        "superseded": superseded,
        "previous": previous or [],
    }


def write_summary(cfg: Config, summary: dict) -> str:
    from .report import atomic_write

    path = os.path.join(cfg.report_dir, "summary.json")
    atomic_write(path, json.dumps(summary, indent=2, default=_json_default))
    return path


def progress_printer(stream=None, every: float | None = None, total_ops: int | None = None):
    """A live progress line on a terminal (rewritten in place), plain periodic lines otherwise (CI)."""
    stream = stream or sys.stderr
    tty = hasattr(stream, "isatty") and stream.isatty()
    every = every if every is not None else (0.25 if tty else 10.0)
    state = {"last": 0.0, "t0": time.time(), "width": 0}

    def show(obj, final: bool = False) -> None:
        now = time.time()
        if not final and now - state["last"] < every:
            return
        state["last"] = now
        st = obj.stats if hasattr(obj, "stats") else obj
        elapsed = max(now - state["t0"], 1e-9)
        ops = f"{len(st.op_counts)}/{total_ops}" if total_ops else str(len(st.op_counts))
        line = (f"gradspec fuzz: {st.cases} cases, {st.cases / elapsed:.1f}/s, {ops} ops covered, "
                f"{len(st.found)} discrepanc{'y' if len(st.found) == 1 else 'ies'}, {elapsed:.0f} s")
        if getattr(obj, "mode", "") == "shrink":
            line += " (shrinking)"
        try:
            if tty:
                pad = max(0, state["width"] - len(line))
                stream.write("\r" + line + " " * pad + ("\n" if final else ""))
                state["width"] = len(line)
            else:
                stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass

    show.tty = tty
    return show
