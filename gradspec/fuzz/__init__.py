"""The fuzzing campaign behind ``gradspec fuzz``: random cases through every oracle, for as long as asked.

How a campaign keeps going after a discrepancy
----------------------------------------------
The campaign is a :class:`gradspec.search.Driver` (the one round driver of ``verify_*`` too):
Hypothesis rounds, each ending at a new failure, shrunk within a bounded number of calls
(``--shrink-seconds`` in time), then localised (:mod:`gradspec.findings`: dead nodes dropped, the
smallest failing node found by cutting the graph, the culprit alone on its real inputs).  A
finding's signature is its cause (``Discrepancy.cause``) when the diagnosis named one, else kind +
oracle pair + culprit op: the report is written at once and the signatures it covers join the
known set (a case of the same kind and pair that contains the culprit op is not hunted again; it
counts as one more case showing that finding).  One bug, one report, which says how many cases
showed it; a second bug, in another op, gets its own.  Discrepancies seen while shrinking another
one are localised and kept at the end, so nothing is lost.

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
``--workers K`` (K > 1) runs the campaign as a pytest session with pytest-xdist, and ``--tx`` specs
spread it over machines that have gradspec (and the engine) installed and share *nothing* with the
controller but the xdist channel: the campaign goes out in xdist's ``workerinput``, each chunk's
counts and findings come back in its test report, and the controller alone writes the report
folders, the index and ``summary.json`` (see :mod:`gradspec.fuzz.workers`).  Failures are shared
through the example database (``--database redis://...`` between machines).  A worker that dies
is reported with the case it was on; the budget it did not run is run again once, and what is
still lost is in the summary and makes the run exit non-zero.

Faults
------
An oracle or engine that raises, returns NaN, wrong shapes or wrong types is a discrepancy with its
traceback (``gradspec.check`` compares the results); one that hangs is cut by the per-case timeout
(``signal.setitimer`` in the main thread, a watchdog thread elsewhere: only Python code can be
interrupted, a C loop is cut when it returns to Python) and recorded as a ``timeout`` discrepancy.
"""

from __future__ import annotations

from ..guard import CaseTimeout, guarded_check
from ..oracles.engine_oracle import EngineOracle
from .campaign import _Campaign, resolve, run_campaign, run_shard  # noqa: F401  (re-exported: cli, tests)
from .distributed import cleanup_stale_runs, replay_previous, report_crashes, stale_inflight
from .state import (  # noqa: F401  (re-exported: cli, tests, benchmarks)
    BUILTIN_ENGINES,
    DEFAULT_EXAMPLES,
    STATE,
    Config,
    ReportDirError,
    Stats,
    _sig_key,
    covered,
    progress_printer,
    summary_json,
    supersede,
    write_summary,
)
from .workers import run_distributed

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
