"""A campaign's configuration, its running counts, signatures, summary and progress line.

Example::

    >>> from gradspec.fuzz.state import Config
    >>> Config(max_examples=10).budget
    10
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import uuid
from collections import Counter

import numpy as np

from .. import outcome as _outcome
from .._private import database as _db
from .._private import determinism as _determinism
from .._private import draw_tally as _draw_tally
from .._private import interrupts as _interrupts
from .._private.records import atomic_write
from .._private.skips import fold_numbers
from ..causes import ENGINE_IDS, crash_type
from ..findings import covered  # noqa: F401  (re-exported: gradspec.fuzz.covered)

__all__ = ["Config", "Stats", "ReportDirError", "covered", "summary_json", "write_summary", "supersede",
           "progress_printer", "BUILTIN_ENGINES", "STATE", "DEFAULT_EXAMPLES", "cuts_since"]

BUILTIN_ENGINES = ("reference", "torch-cpu", "torch-cuda")
STATE = ".gradspec"  # campaign bookkeeping under the report dir (run configs, shard snapshots)
DEFAULT_EXAMPLES = 200
SNAPSHOT_EVERY = 1.0  # seconds between shard snapshots (what the controller's progress line reads)


class ReportDirError(OSError):
    """The report dir cannot be written (full disk, no permission, a file in the way)."""


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
    rtol: float | None = None  # the accuracy user ops claim (--rtol/--atol): case.meta["accuracy"]
    atol: float | None = None
    workers: int = 1
    tx: list[str] | None = None
    run_id: str = ""
    started: float = 0.0
    argv: list[str] | None = None
    replay_saved: bool = True  # start with a replay round of the example database's saved failures
    dtype: str = "any"  # gradspec.strategies.cases(dtype=...): float64, float32, mixed or any (the mix)
    isolate: bool = False  # check each case in a child process a watchdog kills (gradspec.guard)

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
            "precision": self.dtype if self.dtype != "any" else "any (float64, float32 and mixed)",
            "case timeout": "none" if not self.case_timeout else (
                f"{self.case_timeout:g} s per oracle call, "
                + ("watchdog process (--isolate)" if self.isolate else "alarm signal")),
            "claimed accuracy of user ops": (f"rtol={self.rtol or 0:g}, atol={self.atol or 0:g}"
                                             if self.rtol or self.atol else "none (gradspec's own tolerances)"),
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


_COUNTERS = ("op_counts", "op_drawn", "pair_counts", "pair_agree", "skipped", "hard", "inconclusive")


@dataclasses.dataclass
class Stats:
    """What a campaign (or one shard of it) did; shards merge by adding up."""

    cases: int = 0
    replayed: int = 0
    shrink_runs: int = 0
    localise_runs: int = 0  # checks of the reduction after shrinking (gradspec.findings.localise)
    seconds: float = 0.0
    counted: int = 0  # generated cases a run counts (gradspec.outcome.run_count: some op's gradient exercised)
    op_counts: Counter = dataclasses.field(default_factory=Counter)  # op -> counted cases that exercised its gradient
    op_drawn: Counter = dataclasses.field(default_factory=Counter)  # op -> generated cases holding a node of it
    pair_counts: Counter = dataclasses.field(default_factory=Counter)
    pair_agree: Counter = dataclasses.field(default_factory=Counter)
    skipped: Counter = dataclasses.field(default_factory=Counter)
    hard: Counter = dataclasses.field(default_factory=Counter)  # gradspec._private.kinks.tally keys
    inconclusive: Counter = dataclasses.field(default_factory=Counter)  # why a case compared nothing -> cases
    timeouts: int = 0
    found: dict = dataclasses.field(default_factory=dict)  # report id -> record (see _record)
    interrupted: bool = False
    stop_reason: str = ""
    errors: list = dataclasses.field(default_factory=list)  # campaign-level problems, in words
    crashed: list = dataclasses.field(default_factory=list)  # {"shard", "pid", "report"}
    processes: list = dataclasses.field(default_factory=list)  # {"shard", "pid", "cases", "seconds"}
    lost: list = dataclasses.field(default_factory=list)  # budget a dead worker did not run: {"chunk", "cases", "why"}
    stopped: list = dataclasses.field(default_factory=list)  # errors that stopped a search (the rest never ran)
    drawing_cuts: list = dataclasses.field(default_factory=list)  # a user forward cut while drawing (strategies._bounded)
    draws: dict = dataclasses.field(default_factory=dict)  # user op -> its draw tally (_private.draw_tally.to_json)
    shards: int = 1

    def not_counted(self) -> dict:
        """Why generated cases were not counted (one of ``gradspec.outcome.UNCOUNTED``) -> cases."""
        return {why: k for why, k in self.inconclusive.most_common() if why in _outcome.UNCOUNTED}

    def known(self) -> set:
        return {_sig_from_key(k) for rec in self.found.values() for k in rec.get("covers", [])}

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        for k in _COUNTERS:
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
        self.localise_runs += other.localise_runs
        self.seconds = max(self.seconds, other.seconds)
        self.counted += other.counted
        for k in _COUNTERS:
            getattr(self, k).update(getattr(other, k))
        self.timeouts += other.timeouts
        for rid, rec in other.found.items():
            self.found.setdefault(rid, rec)
        self.interrupted |= other.interrupted
        self.errors += [e for e in other.errors if e not in self.errors]
        self.crashed += other.crashed
        self.processes += other.processes
        self.lost += other.lost
        self.stopped += [e for e in other.stopped if e not in self.stopped]
        self.drawing_cuts = merge_cuts(self.drawing_cuts, other.drawing_cuts)
        self.draws = {n: dict(t, domain=(self.draws.get(n) or other.draws[n]).get("domain"))
                      for n, t in _draw_tally.merged(self.draws, other.draws).items()}


def merge_cuts(a: list, b: list) -> list:
    """Drawing cuts of two shards (or chunks) as one list: per op and input shapes, the draws cut added up."""
    out: dict = {}
    for c in list(a) + list(b):
        key = (c.get("op"), repr(c.get("shapes")))
        if key in out:
            o = out[key]
            out[key] = {**o, "draws_cut": o["draws_cut"] + c.get("draws_cut", 0),
                        "cleared": bool(o.get("cleared")) or bool(c.get("cleared")),
                        "seconds": max(o.get("seconds") or 0, c.get("seconds") or 0)}
        else:
            out[key] = dict(c)
    return [out[k] for k in sorted(out, key=repr)]


def cuts_since(before: list, after: list) -> list:
    """The drawing cuts made between two readings of one run's marks (``Marks.cuts()``): what a worker's chunk
    sends back when the worker carries its marks from chunk to chunk (the controller adds the chunks' up)."""
    was = {(c.get("op"), repr(c.get("shapes"))): c.get("draws_cut", 0) for c in before}
    out = []
    for c in after:
        k = c.get("draws_cut", 0) - was.get((c.get("op"), repr(c.get("shapes"))), 0)
        if k > 0:
            out.append({**c, "draws_cut": k})
    return out


def _atomic_json(path: str, obj) -> None:
    atomic_write(path, json.dumps(obj, indent=1, default=_json_default))


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


# ---------------------------------------------------------------------------------------------
# summary and progress
# ---------------------------------------------------------------------------------------------


_OWN_RAISE = {"error-type", "unexplained"}  # a raised report with these causes is a bug of its own
# causes a §5 rule report can stand for: the engine-level ones, and an op writing into a buffer another tensor owns
_RULE_CAUSES = set(ENGINE_IDS) | {"forward-mutates-input"}


def _cause_key(rec: dict) -> tuple:
    """What makes a report's cause one bug: its id, and for a crash while building the graph the op that raised
    and the exception's type."""
    c = rec.get("cause") or {}
    return (c.get("id"), c.get("op") if c.get("id") == "error-type" else None, crash_type(c))


def _same_engine(rule_rec: dict, rec: dict) -> bool:
    """Whether the engine a §5 rule report blames is one of ``rec``'s oracles (a raise of another oracle, say a
    witness that crashed on the same op, is a bug of its own and keeps its report)."""
    engines = {o for o in rule_rec.get("oracles") or [] if not str(o).startswith("§5")}
    return bool(engines) and engines <= set(rec.get("oracles") or [])


def _shape_key(rec: dict) -> tuple | None:
    """A report's cause as a wrongly shaped gradient (a broadcast reduction: the engine's shared helper, or one
    op's), keyed by id and op; None for any other cause."""
    c = rec.get("cause") or {}
    if c.get("id") == "shared-broadcast-reduction" or c.get("pattern") == "broadcast-reduction":
        return (c.get("id"), c.get("op"))
    return None


def _under_shape(r: dict, by_shape: dict) -> dict | None:
    """The shape report a raise is listed under (review F7): a gradient of the wrong shape, passed on, made a later
    backward raise.  Only the side that returned the wrong shape (a witness oracle's raise is a bug of its own)."""
    key = _shape_key(r) if r.get("kind") == "raised" else None
    by = by_shape.get(key) if key is not None else None
    return by if by is not None and (r.get("oracles") or [None])[0] in (by.get("oracles") or []) else None


def supersede(found: dict) -> tuple[list, list]:
    """Split report records into (distinct, superseded).

    A report is superseded when another one of the same kind and oracle pair was found on a case
    with strictly fewer ops (say ``exp`` alone against ``add, exp``): the smaller case shows the
    same disagreement, so the bigger one is listed apart and not counted again; a value report
    whose engine-level cause a §5 rule report names is listed under that rule report; and a raise whose
    cause is a shape report's (a wrongly shaped gradient passed on) is listed under that shape report.
    """
    recs = sorted(found.values(), key=lambda r: r["id"])
    # An engine-level cause (CONTRACT §8) found on value cases and by a §5 rule search is one bug: the
    # rule's report (the exact calls) stands for it, the value report is listed under it.
    rule_by_cause = {_cause_key(r): r for r in recs if r.get("rule")}
    # A wrongly shaped gradient and the raise it causes downstream are one bug too: the shape report stands for it.
    by_shape = {_shape_key(r): r for r in recs if r.get("kind") == "shape" and _shape_key(r) is not None}
    active, gone = [], []
    for r in recs:
        key = (r.get("kind"), tuple(sorted(r.get("oracles") or [])))
        ops = set(r.get("ops") or [])
        cause = (r.get("cause") or {}).get("id")
        # (value reports, and raises whose cause is a broken §5 rule: a graph freed although retain_graph=True, a
        # gradient on a constant, one op's crash a rule search met too; a raise of its own (no op named) or a wrong
        # shape keeps its report, with its traceback)
        merges = r.get("kind") == "value" or (r.get("kind") == "raised" and (
            cause not in _OWN_RAISE or _cause_key(r)[1] is not None))
        by = None if r.get("rule") or not merges or cause not in _RULE_CAUSES else rule_by_cause.get(_cause_key(r))
        if by is not None and not _same_engine(by, r):  # a witness oracle's crash is not the engine's bug
            by = None
        by = by or _under_shape(r, by_shape)
        by = by or next((o for o in recs if o is not r and (o.get("kind"), tuple(sorted(o.get("oracles") or []))) == key
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
    status, reason = _outcome.run_status(stats.cases, len(active), sum(stats.pair_counts.values()),
                                         stats.inconclusive.most_common(), stats.errors)
    never, draws_skipped = _draw_lines(stats.draws)
    if never and status != "disagree":  # an op of the run refused every value drawn: nothing of it was checked
        status, reason = "inconclusive", "; ".join(never) + (f"; {reason}" if reason else "")
    unfit = _determinism.not_a_function_among(stats.inconclusive) if status == "agree" else ""
    if unfit:  # a user op whose output changes between calls: what the other cases agreed on is no clean bill
        status, reason = "inconclusive", unfit
    if stats.lost and status == "agree":  # a dead worker's share never ran: no clean bill of health
        n, secs = sum(x.get("cases") or 0 for x in stats.lost), sum(x.get("seconds") or 0 for x in stats.lost)
        what = " and ".join(([f"{n} cases"] if n else []) + ([f"{secs:.1f} s"] if secs else [])) or "a part"
        status, reason = "inconclusive", (f"part of the budget never ran ({what} lost with a worker that died or "
                                          "was interrupted alone: see the problems listed)")
    if stats.stopped and status == "agree":  # the search stopped on an error: no OK from the cases before it
        status, reason = "inconclusive", (f"{stats.stopped[0]} (the search stopped there, after {stats.cases} "
                                          f"case{'' if stats.cases == 1 else 's'}; the rest of the budget never ran)")
    if stats.interrupted and status != "disagree":  # stopped by the user: no clean bill of health either
        by = _interrupts.received()
        by = "" if by is None or by == 2 else f" ({_interrupts.name(by)})"  # (2: SIGINT, Ctrl-C's)
        status, reason = "inconclusive", (f"interrupted{by} after {stats.cases} case{'' if stats.cases == 1 else 's'}"
                                          + (f" ({reason})" if reason else ": what ran agreed"))
    return {
        "status": status,
        "reason": reason,
        "inconclusive": sum(stats.inconclusive.values()),
        "inconclusive_reasons": dict(list(fold_numbers(stats.inconclusive).items())[:10]),
        "cases": stats.cases,
        # cases counted (some op's gradient exercised and compared), and why the others were not (as verify_* says)
        "counted": stats.counted,
        "not_counted": stats.not_counted(),
        "discrepancies": len(active),
        "seconds": round(stats.seconds, 3),
        "started": round(cfg.started, 3),  # (epoch seconds: JUnit's timestamp)
        "ops": dict(sorted(op_counts.items())),  # counted cases per op (CONTRACT §6: cases per op)
        "ops_drawn": dict(sorted(stats.op_drawn.items())),  # generated cases per op, counted or not
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
        "localise_runs": stats.localise_runs,
        "timeouts": stats.timeouts,
        "skipped": fold_numbers(stats.skipped),  # (reasons differing only in a number: one entry, tryout6 #12)
        "hard_regions": hard_regions(stats.hard, stats.cases),
        "interrupted": stats.interrupted,
        "stop_reason": stats.stop_reason,
        # a user op's forward slower than the per-case timeout while a case was drawn: those draws took its node as
        # planned (placeholder values), and the op was skipped there for a while (review F6)
        "drawing_cuts": list(stats.drawing_cuts),
        # a user op's forward not finite (or raising) at drawn values: the draws redrawn, per op (as verify_* says)
        "draws": dict(stats.draws),
        "draws_skipped": draws_skipped,
        "errors": list(stats.errors),
        "crashed": list(stats.crashed),
        "lost": list(stats.lost),
        "processes": sorted(stats.processes, key=lambda p: p["shard"]),
        "reports": active,
        "superseded": superseded,
        "previous": previous or [],
    }


def _draw_lines(draws: dict) -> tuple[list, list]:
    """``(never finite, skipped shares)``: what a run says of its user ops' draws (``_private.draw_tally.describe``,
    the words verify_* uses: the op and its domain named)."""
    never, lines = [], []
    for name, t in sorted(draws.items()):
        _key, nf, line = _draw_tally.describe(t, f"op {name!r}", t.get("domain") or "its declared domain")
        never += [nf] if nf else []
        lines += [line] if line else []
    return never, lines


def hard_regions(counts: Counter, cases: int) -> dict:
    """Cases per precision, tie/kink cases and the oracles that stepped aside there (summary.json)."""
    from .._private.kinks import summarise

    return summarise(counts, cases)


def write_summary(cfg: Config, summary: dict) -> str:
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
