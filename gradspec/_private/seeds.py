"""The seed of a ``verify_*`` call made without ``seed=``: fixed under a derandomized profile.

Hypothesis' ``derandomize=True`` (gradspec's ``ci`` profile) derives a test's seed from the
test itself, so a CI run draws the same examples every time.  ``gs.verify_*`` /
``gs.assert_*`` run their own search with their own seed; without ``seed=`` it used to come
from the system's entropy even under ``ci``, so each CI run checked other cases (and one run
could pass a bug the next one finds).  :func:`resolve_seed` follows Hypothesis: under a
derandomized profile the seed is a hash of the running pytest test's key, or :data:`FIXED_SEED`
outside a test; otherwise it is random.  The key is :func:`stable_test_key`: the test's module named by its
package (not its path relative to pytest's rootdir, which changes with the command line — an existing
directory given as ``--gradspec-report-dir DIR`` takes part in pytest's rootdir computation — and with the
cwd), set by the plugin in ``GRADSPEC_TEST_KEY`` around each test; the node id in
``PYTEST_CURRENT_TEST`` only where the plugin is not loaded.  The result's ``seed`` and its
replay line name the seed either way.

Example::

    >>> from gradspec._private.seeds import resolve_seed, seed_for_test
    >>> resolve_seed(7)
    7
    >>> seed_for_test("tests/test_x.py::test_a") == seed_for_test("tests/test_x.py::test_a")
    True
    >>> stable_test_key("/nowhere/test_x.py", "TestA.test_b[1-2]")
    'test_x::TestA.test_b[1-2]'
"""

from __future__ import annotations

import hashlib
import os
import random

__all__ = ["resolve_seed", "seed_for_test", "current_test", "derandomized", "stable_test_key", "FIXED_SEED",
           "ENV_TEST_KEY"]

FIXED_SEED = 0  # a derandomized run outside any pytest test
ENV_TEST_KEY = "GRADSPEC_TEST_KEY"  # set by the pytest plugin around each test (see stable_test_key)


def stable_test_key(path, modpath: str) -> str:
    """A rootdir- and cwd-independent key of a test: its module's dotted name, found as Python's
    ``prepend`` import finds it (the enclosing directories that are packages), ``::``, and the
    test's path inside its module (``Class.test[params]``)."""
    path = os.path.abspath(os.fspath(path))
    parts = [os.path.splitext(os.path.basename(path))[0]]
    d = os.path.dirname(path)
    while os.path.isfile(os.path.join(d, "__init__.py")) and os.path.dirname(d) != d:
        parts.append(os.path.basename(d))
        d = os.path.dirname(d)
    return ".".join(reversed(parts)) + "::" + modpath


def _seed_key() -> str | None:
    return os.environ.get(ENV_TEST_KEY) or current_test()


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
            test = _seed_key()
            return FIXED_SEED if test is None else seed_for_test(test)
        return random.SystemRandom().randrange(2**31)
    import numpy as np

    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int or None, got {seed!r}")
    return int(seed)
