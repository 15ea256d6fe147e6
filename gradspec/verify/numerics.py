"""What ``verify_*`` adds for numerical code: a claimed accuracy, non-differentiable points, threads.

* ``rtol`` / ``atol`` (``verify_op``, ``verify_torch_function``, ``gradspec fuzz --rtol/--atol``):
  the accuracy the code under test claims.  Recorded in each case (``case.meta["accuracy"]``,
  so ``gradspec replay`` and ``gs.check`` judge a saved case the same way) and applied by
  ``gradspec.check`` (``gradspec.tolerances.claimed_allowance``).
* Cases at a non-differentiable point (``Verdict.nondifferentiable``: a kink or jump detected
  numerically, or a declared kink within reach) are counted in ``Result.nondifferentiable``,
  never reported: their estimate-based comparisons were dropped, and no finite-difference JVP
  is composed through them.

Example::

    >>> from gradspec.verify.numerics import accuracy
    >>> accuracy(1e-6, None, "verify_op")
    {'rtol': 1e-06, 'atol': 0.0}
    >>> accuracy(None, None, "verify_op") is None
    True
"""

from __future__ import annotations

import math

from .._private import draw_tally as _draw_tally
from .._private.skips import word_cut

__all__ = ["accuracy", "claim_text", "DEFAULT_DTYPES", "dtypes_of", "dtypes_text", "tag", "count_nondifferentiable",
           "torch_kinks", "fold_draws", "with_deadline", "CASE_TIMEOUT", "run_within_budget", "budget_grace",
           "cut_by_budget", "check_drawable", "started_late", "LATE_FACTOR"]


def accuracy(rtol, atol, where: str) -> dict | None:
    """The claim as recorded in a case (``{"rtol": r, "atol": a}``), or None; a clear error for bad values."""
    if rtol is None and atol is None:
        return None
    out = {}
    for name, v in (("rtol", rtol), ("atol", atol)):
        if v is None:
            out[name] = 0.0
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{where}: {name} must be a finite number >= 0 (the accuracy your code claims, e.g. "
                             f"{name}=1e-6), got {v!r}")
        out[name] = float(v)
    return out if out["rtol"] or out["atol"] else None


def check_drawable(domain, n: int, where: str) -> None:
    """A clear ValueError, up front, when no value can be drawn from the domain of some input (``domain``: one
    Domain for all ``n`` inputs, a list with one per input, or None)."""
    from .._private.values import undrawable

    for d in domain if isinstance(domain, (list, tuple)) else [domain] * max(1, n):
        why = undrawable(d)
        if why:
            raise ValueError(f"{where}: {why}")


# The precisions verify_torch_function runs fn in when not told (see dtypes_of).
DEFAULT_DTYPES = ("float64", "float32")


def dtypes_of(dtypes, where: str) -> tuple:
    """``dtypes=`` as a tuple of names (``"float64"``, ``"float32"``; torch or numpy dtypes accepted), in
    the order given, or DEFAULT_DTYPES for None; a clear error for anything else."""
    if dtypes is None:
        return DEFAULT_DTYPES
    items = [dtypes] if isinstance(dtypes, str) or not isinstance(dtypes, (tuple, list, set, frozenset)) else dtypes
    out = []
    for d in items:
        name = str(d).replace("torch.", "")
        if name not in ("float64", "float32"):
            name = {"double": "float64", "float": "float32", "<class 'numpy.float64'>": "float64",
                    "<class 'numpy.float32'>": "float32"}.get(name, name)
        if name not in ("float64", "float32"):
            raise ValueError(f"{where}: dtypes must name float64 and/or float32 (e.g. dtypes=('float64', 'float32') "
                             f"or dtypes=('float64',)), got {d!r}")
        if name not in out:
            out.append(name)
    if not out:
        raise ValueError(f"{where}: dtypes is empty; pass dtypes=('float64',), ('float32',) or both")
    return tuple(out)


def dtypes_text(dtypes: tuple) -> str:
    """``", dtypes=(...)"`` for a replay line ("" for the default)."""
    return "" if tuple(dtypes) == DEFAULT_DTYPES else f", dtypes={tuple(dtypes)!r}"


def claim_text(claim: dict | None) -> str:
    """``", rtol=..., atol=..."`` for a replay line ("" without a claim)."""
    if not claim:
        return ""
    return "".join(f", {k}={claim[k]!r}" for k in ("rtol", "atol") if claim[k])


def tag(case, claim: dict | None) -> None:
    if claim:
        case.meta["accuracy"] = dict(claim)


def count_nondifferentiable(result, verdicts) -> bool:
    """Count a case whose verdict found a non-differentiable point; True if it did."""
    why = next((v.nondifferentiable for v in verdicts if getattr(v, "nondifferentiable", "")), "")
    if why:
        result.nondifferentiable += 1
        result.nondifferentiable_reasons[word_cut(why.split(":")[0], 60)] += 1
    return bool(why)


def fold_draws(result, tally: dict, spec, who: str) -> None:
    """What the run's draws of values showed of the code under test's forward (``_private.draw_tally``, tryout9 #1):
    the draws it was not finite at (or raised on) are counted in ``result.skipped`` and said in the summary
    (``result.draws_skipped``); a forward finite at no drawn value leaves the run inconclusive (``result.unfinite``:
    the domain named, as the user declared it).  ``who``: how the run names the code ("op 'f'", "fn Log1mexp")."""
    t = tally.get(spec.name)
    if t is None:
        return
    key, never, line = _draw_tally.describe(t, who, spec.domain)
    if key:
        result.skipped[key] += t.skipped
    if never:
        result.unfinite = never
    elif line:
        result.draws_skipped.append(line)


def torch_kinks(kink_distance):
    """A torch user's ``kink_distance`` (torch tensors in) as the op table's (numpy arrays in)."""
    if kink_distance is None:
        return None
    import numpy as np
    import torch

    def kinks(*arrays, **params):
        xs = [torch.from_numpy(np.array(a, dtype=np.float64)) for a in arrays]
        d = kink_distance(*xs, **params)
        return float(d.item() if isinstance(d, torch.Tensor) else d)

    return kinks


# A case that runs longer than this is cut and reported as a ``timeout`` finding (CONTRACT §8: no
# cause needed); the same default as ``gradspec fuzz --case-timeout``.
CASE_TIMEOUT = 60.0


def budget_grace(seconds: float) -> float:
    """How long past the ``seconds`` budget a case that started in time may run before it is cut: the search
    stops between cases at the budget, so a case still running at ``seconds`` + this ran a while past it (a
    hang, or very slow code), and cutting it leaves the run inconclusive (:func:`cut_by_budget`)."""
    return min(max(0.5, 0.1 * float(seconds)), 5.0)


def cut_by_budget(result, seconds, took: float | None, where: str = "", slowest: float = 0.0) -> None:
    """A case cut by the time budget was not judged: the run is inconclusive unless it has findings.  ``slowest``:
    the longest a finished case took (0: none finished)."""
    ran = f" after {took:.2f} s" if took is not None else ""
    if took is not None and slowest > 0:
        ran += f", {took / slowest:.0f} times as long as the slowest finished case ({slowest:.2g} s)"
    result.cut = (f"the time budget of {seconds:g} s ran out inside a case{where}; it was cut{ran}, not judged (a hang "
                  f"or very slow code: a case is a timeout finding after {CASE_TIMEOUT:g} s; give more seconds= to judge it; "
                  "a time budget reaches another number of cases from run to run, max_examples= the same ones)")
    result.note(result.cut)


# A case the budget cut after running at most this many times as long as the slowest finished case merely started
# late (tryout7 #11: whether the budget's end fell inside a 1 s float32 case decided "agree" or "inconclusive" from
# one run to the next); one cut after running longer is no ordinary case (a hang, most likely) and is judged by
# cut_by_budget.
LATE_FACTOR = 3.0
_LATE = " that started late"


def started_late(result, seconds, took: float, slowest: float) -> None:
    """A case the budget reached while it ran, no slower so far than the finished cases: not judged, as a case the
    budget never reached; the cases judged before decide the run."""
    result.note(f"the time budget of {seconds:g} s ran out inside a case{_LATE}: it was cut after "
                f"{took:.2f} s (the slowest finished case took {slowest:.2f} s) and not judged, as a case the budget did "
                "not reach; the cases judged before decide the run")


def with_deadline(evaluate, result, seconds, target: str, replay: str):
    """``evaluate(case)`` under a per-case deadline (``gradspec.guard.Alarm``, the mechanism of
    ``gradspec fuzz --case-timeout``): a case is cut after CASE_TIMEOUT seconds (a ``timeout``
    finding) or when the run's ``seconds`` budget (plus :func:`budget_grace`) runs out (a case that merely
    started late is no finding, but the run is no "agree" either: :func:`cut_by_budget`).  Outside the
    main thread (no SIGALRM) cases are not cut."""
    import time

    from ..guard import Alarm, CaseTimeout, _main_thread
    from ..result import VerifyDiscrepancy

    end = None if seconds is None else time.perf_counter() + float(seconds) + budget_grace(seconds)
    slowest = [0.0]  # the longest a finished case took

    def run(case):
        if not _main_thread():
            return evaluate(case)
        start = time.perf_counter()
        left = CASE_TIMEOUT if end is None else min(CASE_TIMEOUT, max(end - start, 1e-3))
        by_budget = end is not None and end - start < CASE_TIMEOUT
        alarm = Alarm(left, f"{target}: the case exceeded its deadline of {left:.3g} s", rearm=0.05)
        found = []
        try:
            with alarm:
                found = evaluate(case)
        except CaseTimeout:
            pass
        took = time.perf_counter() - start
        if not alarm.fired:
            slowest[0] = max(slowest[0], took)
            return found
        if by_budget and took <= LATE_FACTOR * slowest[0]:
            started_late(result, seconds, took, slowest[0])
            return []
        if by_budget:
            dtypes = {str(l.value.dtype) for l in getattr(case, "leaves", ()) if l.value.dtype.kind == "f"}
            cut_by_budget(result, seconds, took, f" (a {dtypes.pop()} case)" if len(dtypes) == 1 else "", slowest[0])
            return []
        return [VerifyDiscrepancy("timeout", ("reference", "case-timeout"),
                                  f"{target}: checking one case took longer than {CASE_TIMEOUT:g} s; it was cut "
                                  "(a hang, or code far too slow to check)", case, replay=replay)]

    return run


def run_within_budget(runner, strategy, evaluate, seconds) -> None:
    """``runner.run(strategy, evaluate)``, cut when the ``seconds`` budget runs out wherever the time
    goes -- also while Hypothesis generates a case (value repair runs the user's forward): the
    search's own stop signal (``gradspec.search.Stop("time")``, a BaseException that Hypothesis lets
    through) is raised by an alarm (``gradspec.guard.Alarm``) at the budget's end."""
    from .._private.case_budget import case_timeout
    from ..guard import Alarm, _main_thread
    from ..search import Stop
    from ..strategies._bounded import marking

    # (the diagnosis of a finding is bounded by the timeout too; a drawing cut's marks end with the run)
    with case_timeout(CASE_TIMEOUT), marking():
        if seconds is None or not _main_thread():
            runner.run(strategy, evaluate)
            return
        alarm = Alarm(float(seconds) + budget_grace(seconds), "time budget spent", rearm=0.05,
                      exc=lambda _msg: Stop("time"))
        try:
            with alarm:
                runner.run(strategy, evaluate)
        except Stop:  # the alarm went off outside a Hypothesis round (between rounds, in bookkeeping)
            pass
    late = any(_LATE in n for n in runner.result.notes)  # (its own alarm went off first: the case is settled)
    if alarm.fired and not runner.result.cut and not late:
        cut_by_budget(runner.result, seconds, None, " (while it was generated or checked)")
