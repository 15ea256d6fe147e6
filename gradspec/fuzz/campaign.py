"""One campaign (or one shard of it) in this process: Hypothesis rounds over random cases.

Example::

    >>> from gradspec.fuzz.campaign import _round_seed
    >>> _round_seed(0, 0, 1) == _round_seed(0, 0, 1)
    True
"""

from __future__ import annotations

import faulthandler
import hashlib
import os
import sys
import time
from collections import Counter
from typing import Any, Callable

from .. import outcome as _outcome
from .._private import draw_tally as _draw_tally
from .._private import interrupts
from .._private.case_budget import case_timeout
from .._private.kinks import tally
from .._private.records import discrepancy_id, read_records, update_record
from .._private.safefs import gradspec_dir, open_private
from .._private.skips import FOLD_AT, fold_numbers, word_cut
from .._private.skips import key as skip_key
from ..case import Case
from ..check import Discrepancy, Verdict
from ..guard import guarded_check, warm_up
from ..oracles import Oracle
from ..oracles.engine_oracle import EngineOracle
from ..search import Driver, Finding, Stop
from ..strategies import _bounded
from ..strategies._groups import mean_sets
from .inflight import Inflight
from .prefetch import Prefetch
from .state import BUILTIN_ENGINES, SNAPSHOT_EVERY, STATE, Config, ReportDirError, Stats, _atomic_json, _sig_from_key, _sig_key, cuts_since

__all__ = ["SALVAGE_NOTE", "resolve", "run_campaign", "run_shard"]

SALVAGE_NOTE = ("shrinking interrupted: the run was interrupted while this discrepancy was being shrunk; the case is "
                "the smallest seen so far, not shrunk further nor diagnosed (replay it, or run again: the example "
                "database replays it first)")


def resolve(cfg: Config) -> tuple[list, list[str], Any]:
    """(oracle objects, op names, engine object or None) for a campaign; ValueError explains a bad choice.

    Built-in engines are oracles already (``reference``, ``torch-cpu``, ``torch-cuda``); any other
    engine is loaded through ``gs.engines.get`` and added as an :class:`EngineOracle`.
    """
    from .. import engines as _engines
    from .. import oracles as _oracles
    from .. import strategies
    from .._private.imports import ImportSpecError, import_object, not_an_op
    from ..spec import registry as _registry
    from ..spec.opspec import OpSpec

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
            if name in (cfg.engine, getattr(engine_obj, "name", None)):  # (tryout8: the engine's own name)
                raise ValueError(f"--oracles: {name!r} is the engine under test, which every campaign compares "
                                 "always; --oracles names the witnesses it is compared with (known oracles: "
                                 f"{', '.join(_oracles.names())})") from None
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
            from ..ops import _registry

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
                if not isinstance(spec, OpSpec):
                    raise ValueError(f"--ops: {not_an_op(o, spec)}")
                o = spec.name
            names.append(o)
        for o in names:  # a name that is no op at all: say so, with the closest ones (not "engine does not support")
            try:
                _registry.lookup(o)
            except KeyError as e:
                raise ValueError(f"--ops: {e.args[0]}") from None
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
# the campaign
# ---------------------------------------------------------------------------------------------


def _round_seed(seed: int, shard: int, rnd: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{shard}/{rnd}".encode()).digest()[:4], "little")


def _db_key(cfg: Config, ops: list[str]) -> bytes:
    # Saved failures only replay meaningfully with the same strategy (op set) and engine.
    return hashlib.sha256(f"gradspec-fuzz|{cfg.engine}|{','.join(sorted(ops))}".encode()).digest()[:16]


class _Campaign:
    def __init__(self, cfg: Config, shard: int, progress=None, on_found=None, oracles=None, found=None,
                 marks=None) -> None:
        self.cfg = cfg
        # the run's drawing-cut marks (strategies._bounded): new, or a worker's, carried from chunk to chunk
        self.marks = marks if marks is not None else _bounded.Marks()
        self.shard = shard
        self._warm = not cfg.case_timeout  # untimed checks need no warm-up
        self.progress = progress
        self.on_found = on_found
        resolved, self.ops, self.engine = resolve(cfg)
        self.oracles = oracles if oracles is not None else resolved
        # A group's value sets get each oracle's answers back to back first (gradspec.fuzz.prefetch: warm caches)
        self._prefetch = None if cfg.isolate else Prefetch(self.oracles, cfg.case_timeout)
        if self._prefetch is not None and self._prefetch.active:
            self.oracles = self._prefetch.oracles
        else:
            self._prefetch = None
        self.stats = Stats(shards=1)
        self._pair_keys: dict = {}  # oracle pair -> "a vs b" (count)
        self.stats.found.update(found or {})  # already reported (e.g. earlier runs' cases still failing)
        self.driver: Driver | None = None
        self.report_failed = False
        self.interrupt_requested = False
        self.t0 = time.time()
        self.budget = cfg.shard_budget(shard)
        self._last_snapshot = 0.0
        gradspec_dir(cfg.report_dir, STATE, "runs", cfg.run_id)  # (no symlink on the way: _private.safefs)
        self.inflight = os.path.join(cfg.state_dir, f"inflight-{os.getpid()}.json")
        self._inflight = Inflight(self.inflight)
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
        s.op_drawn.update({n.op for n in case.nodes})  # (each op once per case)
        keys = self._pair_keys
        pc, pa = s.pair_counts, s.pair_agree
        # the ops whose gradient this case exercised (as verify_* counts its op under test): a case with 0-element
        # leaves (tryout9 #1), or whose roots are all seeded with zeros, compared no value that judges a gradient
        ops, why = _outcome.run_count(verdict)
        counted = bool(ops)
        s.op_counts.update(o for o in ops if o is not None)
        s.counted += counted
        if why:  # (Stats.not_counted: "K of N cases not counted: why")
            s.inconclusive[why] += 1
        for comp in verdict.comparisons if counted else ():
            key = keys.get(comp.oracles)
            if key is None:
                key = keys[comp.oracles] = " vs ".join(comp.oracles)
            pc[key] += 1
            pa[key] += int(comp.agreed)
        for name, why in verdict.skipped.items():
            s.skipped[skip_key(name, why)] += 1
        if len(s.skipped) > FOLD_AT:  # (reasons that differ only in a number: one kind, not one entry per case)
            s.skipped = Counter(fold_numbers(s.skipped))
        s.hard.update(tally(case, verdict.skipped))
        s.timeouts += sum(d.kind == "timeout" for d in verdict.discrepancies)
        if verdict.status == "inconclusive":
            s.inconclusive[word_cut(verdict.reason)] += 1
            if len(s.inconclusive) > FOLD_AT:
                s.inconclusive = Counter(fold_numbers(s.inconclusive))

    def record(self, d: Discrepancy, verdict: Verdict, note: str = "", covers: list | None = None) -> None:
        covers = [_sig_key(c) for c in (covers or [d.signature])]
        rid = discrepancy_id(d.signature)
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
            "cases": 1,
            "culprit": d.culprit,
            "cause": None if d.cause is None else d.cause.to_json(),
        }
        self.stats.found[rid] = rec
        if self.on_found is not None:
            try:
                # Listed in the stats from here on, so written whole: a Ctrl-C that comes meanwhile acts after
                # (chaos M2: the summary listed a finding whose folder was never moved into place).
                with interrupts.deferred():
                    self.on_found(d, verdict, info)
            except ReportDirError as e:
                # Nothing found may be lost: keep the case in the results, printed at the end, as case.json would
                # have held it (the writer's copy records user ops by import path: replayable).
                self.report_failed = True
                if str(e) not in self.stats.errors:
                    self.stats.errors.append(str(e))
                rec["report_error"] = str(e)
                rec["case"] = getattr(e, "case_json", None) or (d.case.to_json(indent=None) if d.case else None)
        self.snapshot(force=True)

    # -- what the driver calls ---------------------------------------------------------------
    def _before(self, case: Case, mode: str) -> None:
        if self.interrupt_requested:
            # The KeyboardInterrupt itself may have been swallowed (raised in a gc callback or a
            # __del__, or caught by an engine): the flag is what makes Ctrl-C reliable.
            raise KeyboardInterrupt
        if self.report_failed:
            raise Stop("report-dir")

    def _evaluate(self, case: Case, mode: str):
        case.engine = self.cfg.engine
        _claim_accuracy(case, self.cfg)
        self._inflight.start(case)
        if not self._warm:  # imports and first-call costs, before the first timed check (gradspec.guard)
            self._warm = True
            # Bounded, so a first case that really hangs costs seconds, not minutes, before it is cut.
            warm_up(case, self.oracles, cap=min(120.0, max(5.0, 10 * self.cfg.case_timeout)), isolate=self.cfg.isolate)
        verdict = guarded_check(case, self.oracles, self.cfg.case_timeout, under_test=self.cfg.engine,
                                isolate=self.cfg.isolate)
        if self.interrupt_requested:
            # A signal came while this case was checked and something swallowed its KeyboardInterrupt (an engine's
            # except, an oracle's guard): what it computed may be cut short, so it is no finding (never cry wolf).
            raise KeyboardInterrupt
        self._inflight.end()  # only a case being checked is "in flight" (see report_crashes)
        if self._prefetch is not None:
            self._prefetch.release(case)
        s = self.stats
        if mode == "generate":
            s.cases += 1
            self.count(case, verdict)
        elif mode == "replay":
            s.replayed += 1
        elif mode == "localise":
            s.localise_runs += 1
        else:
            s.shrink_runs += 1
        if self.progress is not None:
            self.progress(self)
        self.snapshot()
        return verdict.discrepancies, verdict

    def _group(self, cases, mode: str) -> None:
        """The value sets of one graph are about to be checked: the in-flight file gets them all at once."""
        for case in cases:
            case.engine = self.cfg.engine
            _claim_accuracy(case, self.cfg)
        self._inflight.group(cases)
        if self._prefetch is not None:
            self._prefetch.clear()
            if mode == "generate" and self._warm:  # (not before the first check's warm-up)
                try:
                    if self._prefetch.run(cases, self._inflight.start):
                        self._inflight.end()
                except Exception:  # noqa: BLE001 - only ever a saving: the checks compute what is missing
                    self._prefetch.clear()
                    self._inflight.end()

    def _explain(self, d) -> None:
        """An engine's value finding gets the engine-level cause that reproduces its numbers (CONTRACT
        §8), before the driver deduplicates it by its signature."""
        if self.engine is not None and self.cfg.engine not in BUILTIN_ENGINES:
            from ..rules import explain_engine_finding

            explain_engine_finding(self.engine, d, self.cfg.case_timeout)

    def _on_found(self, f: Finding) -> None:
        self.record(f.discrepancy, f.verdict, f.note, f.covers)

    @property
    def mode(self) -> str:
        return "shrink" if self.driver is not None and self.driver.mode in ("shrink", "localise") else "generate"

    def _database(self):
        # One connection per campaign process, opened on first use (workers open their own).
        if getattr(self, "_db", None) is None:
            self._db = self.cfg.open_database()
        return self._db

    def run(self) -> Stats:
        from .. import strategies

        fh = _enable_faulthandler(self.cfg.state_dir)
        cuts = self.marks  # this run's drawing cuts (the marks end with the run: a worker's, with its last chunk)
        before = cuts.cuts()  # (a worker's marks carry earlier chunks' cuts: this chunk sends back its own)
        drawn: dict = {}
        cfg = self.cfg
        signals = interrupts.graceful(self._on_signal)  # SIGTERM / SIGHUP as Ctrl-C: what ran is kept (chaos H2)
        signals.__enter__()
        try:
            self.snapshot(force=True)  # records this process's pid from the start
            seconds = None if cfg.deadline is None else max(0.0, cfg.deadline - time.time())
            sets = sets_per_graph(self.budget)
            self.driver = Driver(
                strategies.case_groups(ops=self.ops, dtype=cfg.dtype, max_sets=sets), self._evaluate, max_examples=self.budget, seconds=seconds,
                round_seed=lambda rnd: _round_seed(cfg.seed, self.shard, rnd), shrink_seconds=cfg.shrink_seconds,
                database=self._database(), database_key=_db_key(cfg, self.ops), known=self.known(),
                known_source=self.known, on_found=self._on_found, before=self._before, explain=self._explain,
                on_group=self._group,
                cases_per_example=mean_sets(sets))
            # Saved failures replay once per process: later chunks of a worker skip it (gradspec.fuzz.workers).
            # (the diagnosis is bounded by the timeout too; drawn: the draws a user op's forward refused, by op)
            with case_timeout(cfg.case_timeout), _bounded.marking(cuts), _draw_tally.tallying() as drawn:
                self.stats.stop_reason = self.driver.run(replay=bool(cfg.replay_saved))
            self.stats.errors += [e for e in self.driver.errors if e not in self.stats.errors]
            if self.stats.stop_reason == "error":  # (tryout7 #6: an OK from the cases before it)
                self.stats.stopped += self.driver.errors[-1:]
        except KeyboardInterrupt:
            self.stats.interrupted = True
            self.stats.stop_reason = "interrupted"
            self._salvage()
        finally:
            signals.__exit__(None, None, None)
            if self.interrupt_requested:
                self.stats.interrupted = True
                self.stats.stop_reason = "interrupted"
            self._record_counts()
            self.stats.drawing_cuts = cuts_since(before, cuts.cuts())
            self.stats.draws = _draws_json(drawn)
            self.stats.seconds = time.time() - self.t0
            self.stats.processes = [{"shard": self.shard, "pid": os.getpid(), "cases": self.stats.cases,
                                     "seconds": round(self.stats.seconds, 3)}]
            self._inflight.close()
            if self._prefetch is not None:
                self._prefetch.clear()
            _disable_faulthandler(fh)
            self.snapshot(force=True)
        return self.stats

    def _on_signal(self, signum: int, hard: bool) -> None:
        # The KeyboardInterrupt itself may be swallowed (a gc callback, a __del__, an engine's except):
        # the flag is what makes the interruption reliable (see _before).
        self.interrupt_requested = True

    def _salvage(self) -> None:
        """Interrupted: the discrepancy being shrunk (and those waiting for their turn) are findings too,
        kept unshrunk and undiagnosed, with a note that says so (chaos H1; verify_* keeps them the same way).
        Written with signals held back, so a second Ctrl-C does not cut a report folder in half."""
        if self.driver is None:
            return
        try:
            with interrupts.deferred(raise_after=False):
                for d, verdict, covers in self.driver.unfinished_verdicts():
                    self.record(d, verdict, SALVAGE_NOTE, covers)
        except Exception as e:  # noqa: BLE001 - what could not be kept is said, the rest of the summary stands
            self.stats.errors.append(f"a finding in progress when the run was interrupted could not be kept: "
                                     f"{type(e).__name__}: {e}")

    def _record_counts(self) -> None:
        """How many generated cases showed each finding (known only at the end): into the stats and
        the report records."""
        if self.driver is None:
            return
        for f in self.driver.findings.values():
            rid = discrepancy_id(f.signature)
            rec = self.stats.found.get(rid)
            if rec is None or rec.get("shard") != self.shard:
                continue
            rec["cases"] = f.cases
            try:
                update_record(self.cfg.report_dir, rid, {"cases": f.cases})
            except (OSError, ValueError):
                pass  # no report folder (no writer, or the report dir failed): the stats carry it


def _draws_json(drawn: dict) -> dict:
    """A run's draw tallies (``_private.draw_tally``) as JSON, each with its op's domain as declared (rendered here,
    where the op is known: a worker's parent may not hold the user's op)."""
    from ..domains import text as domain_text
    from ..spec import registry as _registry

    out = _draw_tally.to_json(drawn)
    for name, t in out.items():
        try:
            t["domain"] = domain_text(_registry.lookup(name).domain)
        except KeyError:  # (an op of the run is in the table: a name the generator drew from it)
            t["domain"] = "its declared domain"
    return out


def sets_per_graph(budget: int) -> int:
    """How many value sets a campaign of ``budget`` cases draws per graph at most: drawing a graph costs
    about as much as checking a case (~2.5 ms), so long campaigns check up to 32 value sets on each (about
    12 on average); a small budget is spread over more graphs (12 cases: one set per graph; 200, the
    default, 8; 400, 16), where bugs in a graph's *structure* hide.  (Reaching 32 sets already at 400
    cases was measured, session 8: 17% more cases per CPU second but 30% fewer graphs per CPU second and
    6% fewer elements per case, as large graphs cannot hold 32 sets in one Hypothesis example: the issue
    asks for the distribution kept, so it was left.)"""
    return max(1, min(32, int(budget) // 25))


def _enable_faulthandler(state_dir: str):
    """Dump the Python traceback of a fatal signal (segfault, abort) next to the inflight case."""
    try:
        path = os.path.join(state_dir, f"fault-{os.getpid()}.log")
        f = open(path, "w", opener=lambda p, flags: open_private(p, flags))  # (never through a planted link)
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


def _known_in_run(cfg: Config) -> set:
    """Signatures already reported in this run (by any shard), from the report folders."""
    out = set()
    for rec in read_records(cfg.report_dir):
        if rec.get("run_id") == cfg.run_id:
            out |= {_sig_from_key(k) for k in rec.get("covers", [])}
    return out


def run_campaign(cfg: Config, shard: int = 0, progress: Callable | None = None, on_found: Callable | None = None,
                 oracles=None) -> Stats:
    """Run one campaign (or shard ``shard`` of it) in this process; returns its :class:`Stats`.

    ``on_found(discrepancy, verdict, info)`` is called at once for every new discrepancy (after
    shrinking): the command line and the pytest plugin pass the report layer's writer
    (``gradspec.report.campaign_writer``); without it nothing is written, the findings are in the
    returned Stats.  ``progress(campaign)`` after every case.
    """
    return _Campaign(cfg, shard, progress=progress, on_found=on_found, oracles=oracles).run()


def run_shard(cfg: Config, shard: int, on_found: Callable | None = None) -> Stats:
    """What one pytest item of a distributed campaign runs (in an xdist worker)."""
    return run_campaign(cfg, shard, on_found=on_found)



def _claim_accuracy(case, cfg) -> None:
    """``--rtol/--atol``: the accuracy the user ops claim, recorded in cases that contain one (so their
    reports replay with it); table ops are held to gradspec's own tolerances."""
    if (cfg.rtol or cfg.atol) and any(getattr(case.spec(op), "user", False) for op in set(case.ops)):
        case.meta["accuracy"] = {"rtol": float(cfg.rtol or 0.0), "atol": float(cfg.atol or 0.0)}
