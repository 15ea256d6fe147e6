"""Whether a campaign finished: ``summary.json`` and ``index.html`` say "running" until the very end.

A run killed mid-way (SIGKILL, out of memory, a crashed machine) cannot write anything at the end,
so every summary it writes on the way says ``"state": "running"`` (and ``"status": "running"``:
the verdict so far is in ``status_so_far``); only the final write says ``finished`` or
``interrupted``.  The next run in the same report dir reads the summary it is about to replace and,
when it still says running and its process is gone, says so (printed, and ``last_run`` in its own
summary): the earlier run did not finish, its results are partial.

Example::

    >>> from gradspec.fuzz.liveness import mark_running, mark_final
    >>> s = mark_running({"status": "agree", "reason": ""})
    >>> s["state"], s["status"], s["status_so_far"]
    ('running', 'running', 'agree')
    >>> mark_final({"status": "agree", "interrupted": False})["state"]
    'finished'
"""

from __future__ import annotations

import os
import socket
import time

from .._private import jsondata
from .._private.inert import printable

__all__ = ["mark_running", "mark_final", "last_run"]

_SUMMARY_LIMIT = 64 << 20  # a summary of a long run is well under a MB; more is not one gradspec wrote

RUNNING_REASON = ("the run has not finished: these are partial results (if no gradspec process is running on this "
                  "report dir any more, it died before writing its final summary)")


def mark_running(summary: dict) -> dict:
    """``summary`` as written while the run goes on."""
    summary["status_so_far"] = summary.get("status")
    summary["status"] = "running"
    summary["reason"] = RUNNING_REASON
    summary["state"] = "running"
    summary["pid"] = os.getpid()
    summary["host"] = socket.gethostname()
    summary["updated"] = time.time()
    return summary


def mark_final(summary: dict) -> dict:
    """``summary`` as the run's last write: finished, or interrupted (Ctrl-C) with what ran."""
    summary["state"] = "interrupted" if summary.get("interrupted") else "finished"
    summary["pid"] = os.getpid()
    summary["host"] = socket.gethostname()
    summary["updated"] = time.time()
    return summary


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError, TypeError):
        return True  # someone else's process, or a pid we cannot judge: do not call it dead
    return True


def last_run(report_dir: str) -> dict | None:
    """What the summary already in ``report_dir`` says about the run that wrote it, when it did not finish.

    ``{"run_id", "state", "cases", "updated", "message"}`` with state ``"did not finish"`` (its process is
    gone) or ``"still running"`` (another live process on this machine); None when it finished, when
    there is no summary, or when the summary predates this bookkeeping.
    """
    try:
        s = jsondata.read(os.path.join(report_dir, "summary.json"), _SUMMARY_LIMIT)  # (no FIFO, no link, no deep nest)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(s, dict) or s.get("state") != "running":
        return None
    here = s.get("host") == socket.gethostname()
    alive = here and s.get("pid") != os.getpid() and _alive(s.get("pid"))
    when = s.get("updated")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if isinstance(when, (int, float)) else "?"
    run_id = printable(str(s.get("run_id", "?"))[:80])  # (a report dir is data: nothing in it may drive the terminal)
    if not here:  # shared storage: its process is on another machine, where we cannot look
        return {"run_id": run_id, "state": "unknown", "cases": s.get("cases"), "updated": when,
                "message": f"the last run in this report dir ({run_id}, on {printable(str(s.get('host'))[:80])}, last update "
                           f"{stamp}) never wrote a final summary: it is still running there or it died"}
    if alive:
        state = "still running"
        msg = (f"another gradspec run ({run_id}, pid {s.get('pid')}) is still writing to this report dir; "
               "both write summary.json")
    else:
        state = "did not finish"
        msg = (f"the last run in this report dir ({run_id}, last update {stamp}, {s.get('cases', '?')} cases then) "
               "did not finish: it died before its final summary (killed, out of memory, a crash?); its results "
               "are partial")
    return {"run_id": run_id, "state": state, "cases": s.get("cases"), "updated": when, "message": msg}
