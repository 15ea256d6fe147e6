"""The code under test's warnings during a ``verify_*`` search: recorded, re-emitted once after the run.

Inside a search a warning must never change which values are checked: under ``-W error`` (pytest's
``filterwarnings = error``) a user's ``warnings.warn`` raised inside the search, the draw was taken for a forward
that raises and silently redrawn, so the part of the domain where fn warns was never checked (review16a #1: a 10%
backward bug there read 'agree').  With Python's default filters the same warning was shown ~60 times a run, as
each of gradspec's ``catch_warnings()`` entries resets the once-per-location registry (review16a #2).

So the search runs under :func:`recording` (every warning recorded, ``'always'``: nothing raises, nothing is lost;
gradspec's own inner filters that ignore its known warnings still apply first).  :meth:`Recorder.mark` counts,
once per checked case, each distinct warning (category, message, file, line) seen since the previous case: that
case's draw and check (a rejected draw's warnings go to the next case).  After the run, :func:`note` says how
often fn warned and :func:`reemit` hands each distinct warning to ``warnings.warn_explicit`` once, at the user's
file and line, so *their* filters decide how it is shown.  Under 'error' that raises -- after the verdict is
complete and handed to the report writers; the finished Result rides on the exception as ``gradspec_result`` (and
its summary as an exception note), so nothing computed is lost, and the user's choice (warnings are errors) holds.

Example::

    >>> import warnings
    >>> with recording() as rec:
    ...     warnings.warn("careful", UserWarning)
    ...     rec.mark()
    >>> [(k[0].__name__, k[1], n) for k, n in rec.counts.items()]
    [('UserWarning', 'careful', 1)]
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings

__all__ = ["Recorder", "recording", "note", "reemit", "KEY"]

KEY = "_gs_user_warnings"  # the Result attribute the distinct warnings wait on until reemit
_GRADSPEC = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # gradspec's package dir


class Recorder:
    """The warnings recorded (``log``) and, per distinct (category, message, filename, lineno), the number of
    checked cases it was seen at (``counts``); ``cases``: the cases marked."""

    def __init__(self, log: list) -> None:
        self.log, self.counts, self.cases, self._at = log, {}, 0, 0

    def mark(self, counted: bool = True) -> None:
        """One case ended: count what warned since the last mark (``counted=False``: a shrink or replay re-run,
        its warnings shown but not counted, so a count is of the run's generated cases)."""
        new, self._at = self.log[self._at:], len(self.log)
        self.cases += counted
        for key in {_key(w) for w in new}:
            self.counts[key] = self.counts.get(key, 0) + counted

    def flush(self) -> None:
        """Warnings after the last case (a draw rejected at the end): shown too, counted at no case."""
        for w in self.log[self._at:]:
            self.counts.setdefault(_key(w), 0)
        self._at = len(self.log)


def _key(w) -> tuple:
    return (w.category, str(w.message), w.filename, w.lineno)


@contextlib.contextmanager
def recording():
    """Record every warning raised in the block (see the module doc); yields a :class:`Recorder`."""
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        rec = Recorder(log)
        try:
            yield rec
        finally:
            rec.flush()


def keep(result, rec: Recorder) -> None:
    """Add ``rec``'s distinct warnings to those waiting on ``result`` (a run may search more than once)."""
    waiting = getattr(result, KEY, None)
    if waiting is None:
        waiting = {}
        setattr(result, KEY, waiting)
    for k, n in rec.counts.items():
        waiting[k] = waiting.get(k, 0) + n


def note(result, who: str) -> str:
    """Add the run note (how often ``who``, the code under test and what it called, warned) to ``result`` if it
    warned; returns the note, or ""."""
    waiting = getattr(result, KEY, None) or {}
    if not waiting:
        return ""
    total = max(int(getattr(result, "cases_run", 0) or 0), 1)
    own = [k for k in waiting if k[2].startswith(_GRADSPEC)]  # (none known: a bug of gradspec's, not of who)
    if own:
        who = f"{who} (or gradspec's own code at {', '.join(sorted({k[2].rsplit('/', 1)[-1] for k in own}))})"
    parts = [f"{cat.__name__}: {msg[:160]} ({filename.rsplit('/', 1)[-1]}:{lineno}, at {n} of {total} case(s))"
             for (cat, msg, filename, lineno), n in sorted(waiting.items(), key=lambda kv: -kv[1])[:5]]
    more = f"; and {len(waiting) - 5} other distinct warning(s)" if len(waiting) > 5 else ""
    text = (f"{who} warned during the search: {'; '.join(parts)}{more}. Those values were checked all the same (each "
            "warning recorded, never raised inside the search, whatever the warning filters); each distinct warning "
            "is shown once after the run, as your filters decide (under -W error it raises then, this Result "
            "attached as the exception's .gradspec_result)")
    result.note(text)
    return text


def reemit(result) -> None:
    """Show each distinct warning waiting on ``result`` once, through the caller's filters (see the module doc)."""
    waiting = getattr(result, KEY, None)
    if not waiting:
        return
    setattr(result, KEY, None)
    for cat, msg, filename, lineno in waiting:
        try:
            warnings.warn_explicit(msg, cat, filename, lineno, module=_module_of(filename))
        except Warning as e:  # the caller's filters made it an error: the finished verdict goes with it
            e.gradspec_result = result  # type: ignore[attr-defined]
            summary = getattr(result, "summary", None)
            if callable(summary):
                e.add_note(f"(raised by the warning filters after gradspec's run finished; its Result is this "
                           f"exception's .gradspec_result)\n{summary()}")
            raise


def _module_of(filename: str) -> str | None:
    """The module a file is (the filters' module= field, e.g. DeprecationWarning's default for ``__main__``)."""
    for name, mod in list(sys.modules.items()):
        if getattr(mod, "__file__", None) == filename:
            return name
    return None
