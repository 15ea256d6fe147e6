"""The words for a small relative error of user code that may iterate, and the accuracy they advise declaring.

A forward or backward stopped at a tolerance (a solver, a fixed point) leaves errors of that size, which a
formula's factor cannot be told from at one point (tryout7 #9, #10).  The error of a solver stopped at a tolerance
varies from case to case (an absolute residual most where the output is near 0), so the ``rtol=`` advised is a
lower bound over what was seen, never "the" accuracy: tryout11 #6 declared the one case's 3.1e-5 as rtol=1e-4
and the next run failed at 17 times that, with the iteration hint gone.  So:

* the advice says "at least", with this case's error;
* the run widens it to the largest error over the cases that showed the finding (:func:`widen`);
* under a declared accuracy (``rtol=``, read from the case being diagnosed: :data:`CLAIM`) the words stay up to
  :data:`CLAIM_REACH` times the claim, and say the ratio.
"""

from __future__ import annotations

import contextvars
import math
import re

__all__ = ["CLAIM", "CLAIM_REACH", "suggest_rtol", "iterated", "within_reach", "widen"]

# (rtol, atol) claimed by the code under test on the case being diagnosed (diagnose.localise sets it), or None.
CLAIM: contextvars.ContextVar = contextvars.ContextVar("gradspec_claimed_accuracy", default=None)
# Under a claim, an error up to this many times the claimed rtol keeps the iteration words: the user said the
# code iterates, and a stopping tolerance's error varies by more than 10x across cases (tryout11 #6: 17x).
CLAIM_REACH = 1000.0
_MARK = "declare an accuracy of at least rtol="
# Above this an rtol claims nothing useful: the error seen is an absolute one on a near-zero gradient (atol=).
_RTOL_USEFUL = 0.1


def suggest_rtol(rel: float) -> float:
    """The 1-2-5 value at or above 2 ``rel``."""
    e = int(math.floor(math.log10(2 * rel)))
    return next(m * 10.0**k for k in (e, e + 1) for m in (1, 2, 5) if m * 10.0**k >= 2 * rel)


def within_reach(rel: float, small: float) -> bool:
    """Whether a relative error ``rel`` of user code gets the iteration words: below ``small`` (a formula error is
    rarely smaller), or within :data:`CLAIM_REACH` of a claimed rtol."""
    claim = CLAIM.get()
    return rel < small or bool(claim and claim[0] > 0 and rel <= CLAIM_REACH * claim[0])


def iterated(rel: float) -> str:
    """", or the tolerance of an iteration: ..." with the accuracy to declare (at least) and, under a claim, the
    ratio of this error to it."""
    claim = CLAIM.get()
    over = (f"; its error here is {rel / claim[0]:#.3g} times the accuracy it claims (rtol={claim[0]:g})"
            if claim and claim[0] > 0 else "")
    return (", or the tolerance of an iteration: a forward that stops at a tolerance (a solver, a fixed point) has "
            "the slope of its truncated iteration, not of the exact solution your vjp differentiates (most visibly "
            "where its output is near 0 and the tolerance is absolute), and an iterative vjp stops short likewise"
            f"{over}; if the code iterates, {_MARK}{suggest_rtol(rel):.0e} (this case's error is a relative "
            f"{rel:.2g}; a solver stopped at a tolerance errs differently from case to case, so other cases may need "
            "more) or tighten the forward's tolerance (relative, not absolute)")


_ADVICE = re.compile(re.escape(_MARK) + r"(\S+) \(this case's error is a relative (\S+);")


def widen(cause, worst: float, cases: int) -> None:
    """Raise the advised rtol in ``cause``'s words to cover ``worst``, the largest relative error over the ``cases``
    generated cases that showed the finding, where that is larger than the diagnosed case's own."""
    if cause is None or not math.isfinite(worst) or worst <= 0 or cases < 2:
        return
    m = _ADVICE.search(cause.summary or "")
    if m is None:
        return
    try:
        own = float(m.group(2))
    except ValueError:
        return
    if worst <= own:
        return
    if suggest_rtol(worst) > _RTOL_USEFUL:  # (a relative error this large sits on a gradient near 0: an atol's)
        cause.summary = (cause.summary[:m.end()] + f" the largest relative error over the {cases} cases that showed "
                         f"it is {worst:.2g}, where a gradient is near 0 -- an absolute error there: declare atol= as "
                         "well;" + cause.summary[m.end():])
        return
    cause.summary = (cause.summary[:m.start()] + f"{_MARK}{suggest_rtol(worst):.0e} (the largest relative error over "
                     f"the {cases} cases that showed it is {worst:.2g}, this case's {own:.2g};"
                     + cause.summary[m.end():])
