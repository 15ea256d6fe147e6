"""The prologue of every array-heavy oracle computation (finite differences, the jacobian)."""

from __future__ import annotations

import functools

import numpy as np

from .memory import tune_malloc_once

__all__ = ["oracle_call"]


def oracle_call(fn):
    """Run ``fn`` under one ``np.errstate(all="ignore")``, with glibc's allocator tuned (once per
    process, ``gradspec._private.memory``).

    One errstate context for the whole call instead of one per helper (each costs about a
    microsecond, a sizeable part of a small graph's work): overflow, 0/0 and invalid values are
    expected at perturbed points and inside derivative formulas, and the oracles detect them
    explicitly (non-finite checks), never through warnings.  Helpers that rely on it say so.
    """

    @functools.wraps(fn)
    def call(*args, **kwargs):
        tune_malloc_once()
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    return call
