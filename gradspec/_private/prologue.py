"""The prologue of every oracle computation (reference, finite differences, the jacobian)."""

from __future__ import annotations

import functools

from .. import engine
from .memory import tune_malloc_once

__all__ = ["oracle_call"]


def oracle_call(fn):
    """Run ``fn`` under one ``np.errstate(all="ignore")`` (the engine's ``_quiet_fp``, which engine ops
    inside honour too), with glibc's allocator tuned (once per process, ``gradspec._private.memory``).

    One errstate context for the whole call instead of one per helper (each costs about a
    microsecond, a sizeable part of a small graph's work): overflow, 0/0 and invalid values are
    expected at perturbed points and inside derivative formulas, and the oracles detect them
    explicitly (non-finite checks), never through warnings.  Helpers that rely on it say so.
    """

    @functools.wraps(fn)
    def call(*args, **kwargs):
        tune_malloc_once()
        with engine._quiet_fp():
            return fn(*args, **kwargs)

    return call
