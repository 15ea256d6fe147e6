"""Hypothesis profiles used by gradspec's tests, the pytest plugin and users' own gradient tests.

* ``ci``: derandomized (the same examples on every run and every machine), no deadline, no
  example database (nothing carried between CI runs), prints the ``@reproduce_failure`` blob of
  any failure, modest example counts so the suite fits CI's budget.
* ``dev``: random, quick (30 examples), no deadline, the default local example database, so a
  failure found once is replayed first next time (``verify_*`` / ``assert_*`` searches too:
  :mod:`gradspec._private.saved_failures`).
* ``fuzz``: many examples (5000), for long local runs.

Gradient checks are slow by Hypothesis' standards (a case runs several oracles), so no profile
has a deadline and the ``too_slow`` health check is off.

Example::

    >>> from gradspec.profiles import register_profiles, PROFILES
    >>> register_profiles()
    >>> from hypothesis import settings
    >>> settings.get_profile("ci").derandomize
    True
"""

from __future__ import annotations

__all__ = ["register_profiles", "PROFILES"]

PROFILES = ("ci", "dev", "fuzz")
_done = False


def register_profiles() -> None:
    """Register the ``ci``, ``dev`` and ``fuzz`` profiles with Hypothesis (idempotent)."""
    global _done
    if _done:
        return
    from hypothesis import HealthCheck, Verbosity, settings

    slow = [HealthCheck.too_slow]
    settings.register_profile(
        "ci",
        derandomize=True,
        deadline=None,
        max_examples=60,
        print_blob=True,
        database=None,
        verbosity=Verbosity.normal,
        suppress_health_check=slow,
    )
    # Parent "default", not the active profile: under CI=true Hypothesis activates its own
    # derandomized "ci" profile, and dev/fuzz must stay random (and keep an example database).
    default = settings.get_profile("default")
    settings.register_profile("dev", parent=default, deadline=None, max_examples=30, print_blob=True,
                              suppress_health_check=slow)
    settings.register_profile("fuzz", parent=default, deadline=None, max_examples=5000, print_blob=True,
                              suppress_health_check=slow)
    _done = True
