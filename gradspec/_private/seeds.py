"""The seed of a ``verify_*`` call made without ``seed=``: fixed under a derandomized profile.

Hypothesis' ``derandomize=True`` (gradspec's ``ci`` profile) derives a test's seed from the
test itself, so a CI run draws the same examples every time.  ``gs.verify_*`` /
``gs.assert_*`` run their own search with their own seed; without ``seed=`` it used to come
from the system's entropy even under ``ci``, so each CI run checked other cases (and one run
could pass a bug the next one finds).  :func:`resolve_seed` follows Hypothesis: under a
derandomized profile the seed is a hash of the running pytest test's id (``PYTEST_CURRENT_TEST``),
or :data:`FIXED_SEED` outside a test; otherwise it is random.  The result's ``seed`` and its
replay line name the seed either way.

Example::

    >>> from gradspec._private.seeds import resolve_seed, seed_for_test
    >>> resolve_seed(7)
    7
    >>> seed_for_test("tests/test_x.py::test_a") == seed_for_test("tests/test_x.py::test_a")
    True
"""

from __future__ import annotations

import hashlib
import os
import random

__all__ = ["resolve_seed", "seed_for_test", "current_test", "derandomized", "FIXED_SEED"]

FIXED_SEED = 0  # a derandomized run outside any pytest test


def current_test() -> str | None:
    """The running pytest test's node id (from ``PYTEST_CURRENT_TEST``), or None outside pytest."""
    cur = os.environ.get("PYTEST_CURRENT_TEST")
    if not cur:
        return None
    for phase in (" (setup)", " (call)", " (teardown)"):
        if cur.endswith(phase):
            return cur[: -len(phase)]
    return cur


def seed_for_test(test: str) -> int:
    """A seed in [0, 2**31) that depends only on the test id (the same on every run and machine)."""
    return int.from_bytes(hashlib.blake2b(test.encode("utf-8"), digest_size=8).digest(), "little") % 2**31


def derandomized() -> bool:
    """Whether the active Hypothesis profile is derandomized (``--gradspec-profile ci``, Hypothesis' own ``ci``)."""
    try:
        from hypothesis import settings
    except ImportError:  # pragma: no cover - Hypothesis is a dependency
        return False
    return bool(settings.default.derandomize)


def resolve_seed(seed) -> int:
    """``seed`` checked; for None a fixed seed under a derandomized profile, else a random one."""
    if seed is None:
        if derandomized():
            test = current_test()
            return FIXED_SEED if test is None else seed_for_test(test)
        return random.SystemRandom().randrange(2**31)
    import numpy as np

    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int or None, got {seed!r}")
    return int(seed)
