"""Draws skipped because the code under test's forward was not finite at them (tryout9 #1).

While a case is drawn, every node runs at the drawn values and a value set where a node's output is NaN, inf, huge
or raises is redrawn (``strategies._cases``: the values are repaired, the case rejected after a few tries).  For
gradspec's own ops that is the generator keeping away from overflow.  For a user op it is the code under test
refusing values of its own domain: a log1mexp written for x > 0 but declared on interval(-5, -1) is NaN at every
value drawn, every non-empty case was redrawn away, and the 0-element cases left made the run look checked.

A ``verify_*`` run opens :func:`tallying` around its search; the generator calls :func:`seen` for each user-op
node it evaluates (nothing is counted outside a run: the check is one list test).  The run then says how many
draws were skipped and why (``gradspec.verify.numerics.fold_draws``), and a forward that was never finite makes
the run inconclusive, naming the domain.

Example::

    >>> import numpy as np
    >>> with tallying() as t:
    ...     seen("f", [np.array([-2.0])], np.array([np.nan]))
    ...     seen("f", [np.array([3.0])], np.array([1.0]))
    >>> t["f"].skipped, t["f"].finite, t["f"].kinds
    (1, 1, ['NaN'])
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses

import numpy as np

from ..domains import text as _domain_text
from .skips import word_cut

__all__ = ["Tally", "tallying", "active", "seen", "describe", "to_json", "merged"]

# The tallies of the verify runs in progress in this thread / context, innermost last (review14 #5: one list for the
# process put thread A's draws in thread B's run).  A tuple, never mutated: a context that inherits a copy of the
# variable (a thread started from it, in Pythons that do so) shares no list with its parent.
_RUNS: contextvars.ContextVar = contextvars.ContextVar("gradspec_draw_tallies", default=())


@dataclasses.dataclass
class Tally:
    """One op's draws: ``finite`` (a finite, non-empty output), ``skipped`` (NaN / inf / huge / raised: the
    values were redrawn), the kinds seen, the first skipped draw's input range and error."""

    finite: int = 0
    skipped: int = 0
    kinds: list = dataclasses.field(default_factory=list)  # "NaN", "inf", "beyond 1e+08", "raised"
    first: tuple | None = None  # (lo, hi) of the float inputs of the first skipped draw
    error: str = ""  # the first exception, "Type: message"


@contextlib.contextmanager
def tallying():
    """A dict op name -> :class:`Tally`, filled while the block runs."""
    t: dict = {}
    token = _RUNS.set(_RUNS.get() + (t,))
    try:
        yield t
    finally:
        _RUNS.reset(token)


def active() -> bool:
    return bool(_RUNS.get())


def seen(name: str, args, out=None, error: BaseException | None = None, bound: float = 1e8) -> None:
    """Count one evaluation of user op ``name`` at drawn values ``args``: its output ``out`` (an empty output
    counts for nothing: it says nothing about the values) or the exception it raised."""
    runs = _RUNS.get()
    if not runs:
        return
    t = runs[-1].setdefault(name, Tally())
    if error is None:
        out = np.asarray(out)
        if out.dtype.kind != "f" or not out.size:
            return
        with np.errstate(all="ignore"):
            top = float(np.max(np.abs(out)))  # NaN when any element is NaN, inf when any is infinite
        if top <= bound:
            t.finite += 1
            return
        kind = "NaN" if np.isnan(top) else "inf" if np.isinf(top) else f"beyond {bound:g}"
    else:
        kind = "raised"
        t.error = t.error or f"{type(error).__name__}: {error}"
    t.skipped += 1
    if kind not in t.kinds:
        t.kinds.append(kind)
    if t.first is None:
        t.first = _range(args)


def _range(args) -> tuple | None:
    vals = [np.asarray(a, dtype=np.float64).ravel() for a in args if np.asarray(a).dtype.kind == "f" and np.size(a)]
    if not vals:
        return None
    v = np.concatenate(vals)
    return float(v.min()), float(v.max())


def to_json(tally: dict) -> dict:
    """A run's tallies as JSON (a fuzz worker sends them to its parent with its stats)."""
    return {name: dataclasses.asdict(t) for name, t in tally.items()}


def merged(a: dict, b: dict) -> dict:
    """Two runs' (workers', chunks') tallies in :func:`to_json` form as one: counts added up, kinds united, the
    first skipped draw and error of ``a`` where it has one."""
    out = {name: dict(t, kinds=list(t.get("kinds") or [])) for name, t in a.items()}
    for name, t in b.items():
        o = out.setdefault(name, {"finite": 0, "skipped": 0, "kinds": [], "first": None, "error": ""})
        o["finite"] += t.get("finite", 0)
        o["skipped"] += t.get("skipped", 0)
        o["kinds"] += [k for k in t.get("kinds") or [] if k not in o["kinds"]]
        o["first"] = o.get("first") or t.get("first")
        o["error"] = o.get("error") or t.get("error") or ""
    return out


def describe(t, who: str, domain) -> tuple[str, str, str]:
    """What a run says of one op's draws (``t``: a :class:`Tally`, or its :func:`to_json` form; ``who``: how the run
    names the code, "op 'f'"; ``domain``: as declared, or its text): ``(skip reason, never finite, skipped share)``.  The skip
    reason counts the skipped draws in the run's skipped oracles; "never finite" (a run that checked nothing of the
    op, naming its domain: ``gradspec.domains.text``) when no draw was finite, else the line saying how many draws
    were skipped.  ``("", "", "")`` when none was."""
    get = t.get if isinstance(t, dict) else lambda k: getattr(t, k)
    skipped, finite, error, first = get("skipped"), get("finite"), get("error"), get("first")
    if not skipped:
        return "", "", ""
    kinds = [k for k in get("kinds") if k != "raised"]
    what = " or ".join(([f"was not finite ({', '.join(kinds)})"] if kinds else []) + (["raised"] if error else []))
    at = f"the first with inputs in [{first[0]:.4g}, {first[1]:.4g}]" if first else "the first"
    err = f"; its first error: {word_cut(error, 200)}" if error else ""
    dom = domain if isinstance(domain, str) else _domain_text(domain)  # (a str: rendered where the op was known)
    key = f"draws: the forward of {who} {what} at values drawn from its domain (redrawn, not checked)"
    if not finite:
        return key, (f"the forward of {who} {what} at every value drawn from its domain {dom} ({skipped} draws, "
                     f"{at}{err}), so no gradient value was checked: check the domain (domain=) and the forward"), ""
    share = "; that is most of them: check the domain (domain=)" if skipped > finite else ""
    return key, "", (f"{who}: the forward {what} on {skipped} of {skipped + finite} draws of values from its domain "
                     f"{dom} ({at}{err}): those draws were skipped (redrawn), their values not checked{share}")
