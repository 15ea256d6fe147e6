"""The fuzzing campaign behind ``gradspec fuzz``: random cases through every oracle.

Hypothesis stops at the first failure it finds (after shrinking it).  To keep going, the
campaign runs Hypothesis repeatedly: each round ignores the discrepancy signatures already
found (kind + oracle pair + ops involved), so the next round hunts for a new one, and every
failure Hypothesis reports is already shrunk.  Failures are saved in Hypothesis' example
database under the report directory, so a rerun replays them first.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import warnings
from collections import Counter
from typing import Callable

from .case import Case
from .check import Discrepancy, check

__all__ = ["Campaign", "run_campaign"]


@dataclasses.dataclass
class Campaign:
    engine: str = "reference"
    ops: list[str] | None = None
    max_examples: int | None = None
    seconds: float | None = None
    seed: int | None = None
    report_dir: str = "reports"
    # results
    cases: int = 0
    op_counts: Counter = dataclasses.field(default_factory=Counter)
    pair_counts: Counter = dataclasses.field(default_factory=Counter)
    pair_agree: Counter = dataclasses.field(default_factory=Counter)
    skipped: Counter = dataclasses.field(default_factory=Counter)
    found: dict = dataclasses.field(default_factory=dict)  # signature -> (Discrepancy, Case)
    started: float = dataclasses.field(default_factory=time.time)
    interrupted: bool = False
    shrink_runs: int = 0

    @property
    def elapsed(self) -> float:
        return time.time() - self.started

    def summary_json(self) -> dict:
        return {
            "engine": self.engine,
            "cases": self.cases,
            "discrepancies": len(self.found),
            "seconds": round(self.elapsed, 3),
            "ops": dict(sorted(self.op_counts.items())),
            "oracles": {f"{a} vs {b}": n for (a, b), n in sorted(self.pair_counts.items())},
            "agreement": {f"{a} vs {b}": self.pair_agree[(a, b)] for (a, b) in sorted(self.pair_counts)},
            "skipped": dict(self.skipped.most_common()),
            "shrink_runs": self.shrink_runs,
            "seed": self.seed,
            "interrupted": self.interrupted,
            "reports": [d_id for d_id in sorted(self._ids())],
        }

    def _ids(self):
        from .report import discrepancy_id

        return [discrepancy_id(sig) for sig in self.found]


def _oracle_names_for(engine: str) -> list[str] | None:
    return None  # every available oracle; the engine's own oracle is among them


def run_campaign(c: Campaign, progress: Callable[[Campaign], None] | None = None, on_found=None) -> Campaign:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hyp_seed
    from hypothesis.errors import HypothesisWarning
    from hypothesis.database import DirectoryBasedExampleDatabase

    from . import strategies

    strategy = strategies.cases(ops=c.ops)
    db = DirectoryBasedExampleDatabase(os.path.join(c.report_dir, ".hypothesis"))
    deadline_at = None if c.seconds is None else c.started + c.seconds
    budget = c.max_examples if c.max_examples is not None else (10**9 if c.seconds else 200)

    class _Found(Exception):
        pass

    shrinking = [False]

    def one(case: Case) -> None:
        if deadline_at is not None and time.time() > deadline_at:
            return
        verdict = check(case)
        if shrinking[0]:
            # After a round's first failure Hypothesis only shrinks: those re-runs are not new cases.
            c.shrink_runs += 1
        else:
            c.cases += 1
        for op in {n.op for n in case.nodes}:
            c.op_counts[op] += 1
        for comp in verdict.comparisons:
            key = tuple(comp.oracles)
            c.pair_counts[key] += 1
            c.pair_agree[key] += int(comp.agreed)
        for name, why in verdict.skipped.items():
            c.skipped[f"{name}: {why.split(':')[0] if ':' in why else why}"[:80]] += 1
        if progress is not None:
            progress(c)
        new = [d for d in verdict.discrepancies if d.signature not in c.found]
        if new:
            raise _Found(new[0])

    rounds = 0
    while True:
        remaining = budget - c.cases
        if remaining <= 0 or (deadline_at is not None and time.time() > deadline_at):
            break
        rounds += 1
        last: list[Discrepancy] = []
        shrinking[0] = False

        @settings(
            max_examples=max(1, remaining),
            deadline=None,
            database=db,
            phases=[Phase.reuse, Phase.generate, Phase.shrink],
            suppress_health_check=[HealthCheck.too_slow],
            print_blob=False,
        )
        @given(strategy)
        def prop(case):
            try:
                one(case)
            except _Found as f:
                if not last:
                    last.append(f.args[0])
                else:
                    last[0] = f.args[0]
                shrinking[0] = True
                raise

        if c.seed is not None:
            prop = hyp_seed(c.seed + rounds)(prop)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", HypothesisWarning)  # e.g. "overly large repr" of big cases
                prop()
            break  # a whole round without a new signature: done
        except _Found:
            d = last[0]
            c.found[d.signature] = d
            if on_found is not None:
                on_found(c, d)
        except KeyboardInterrupt:
            c.interrupted = True
            break
    return c


def write_summary(c: Campaign) -> str:
    path = os.path.join(c.report_dir, "summary.json")
    from .report import atomic_write

    atomic_write(path, json.dumps(c.summary_json(), indent=2))
    return path


def progress_printer(stream=sys.stderr, every: float = 2.0):
    tty = stream.isatty()
    last = [0.0]

    def show(c: Campaign) -> None:
        now = time.time()
        if now - last[0] < (0.2 if tty else every):
            return
        last[0] = now
        rate = c.cases / max(c.elapsed, 1e-9)
        line = f"gradspec fuzz: {c.cases} cases, {rate:.1f}/s, {len(c.op_counts)} ops covered, {len(c.found)} discrepancies"
        if tty:
            stream.write("\r" + line + "   ")
        else:
            stream.write(line + "\n")
        stream.flush()

    return show
