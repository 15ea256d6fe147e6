"""Hypothesis profiles used by gradspec's tests, the pytest plugin and ``gradspec fuzz``.

* ``ci``: derandomized (same examples every run), no deadline, prints the ``@reproduce_failure``
  blob and the seed of any failure, modest example counts so the suite fits CI's budget.
* ``dev``: random, quick, no deadline.
* ``fuzz``: many examples, for long local runs.
"""

from __future__ import annotations

__all__ = ["register_profiles", "PROFILES"]

PROFILES = ("ci", "dev", "fuzz")
_done = False


def register_profiles() -> None:
    global _done
    if _done:
        return
    from hypothesis import Verbosity, settings

    settings.register_profile(
        "ci",
        derandomize=True,
        deadline=None,
        max_examples=60,
        print_blob=True,
        database=None,
        verbosity=Verbosity.normal,
    )
    settings.register_profile("dev", deadline=None, max_examples=30, print_blob=True)
    settings.register_profile("fuzz", deadline=None, max_examples=5000, print_blob=True)
    _done = True
