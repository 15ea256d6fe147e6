"""One ``np.errstate(all="ignore")`` around a whole oracle call."""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["quiet"]


def quiet(fn):
    """Run ``fn`` under ``np.errstate(all="ignore")``: one context for the whole oracle call instead
    of one per helper (each costs about a microsecond, a sizeable part of a small graph's work).

    Overflow, 0/0 and invalid values are expected at perturbed points and inside derivative
    formulas; the oracles detect them explicitly (non-finite checks), never through warnings.
    Helpers that rely on it say so.
    """

    @functools.wraps(fn)
    def quiet_call(*args, **kwargs):
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    return quiet_call
