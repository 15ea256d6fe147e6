"""Seconds each oracle's calls took in this process, for the slow-run hint of ``verify_*`` (tryout4 #12: a
12 ms forward made each case ~9 s and a 40-case run silent for 6 minutes).

The guard's timed calls add their own time here (one addition per oracle call); the hint reads the
difference between two moments.

Example::

    >>> from gradspec._private import activity
    >>> before = activity.snapshot()
    >>> activity.add("finite-differences", 0.5)
    >>> activity.since(before)
    {'finite-differences': 0.5}
"""

from __future__ import annotations

from collections import Counter

__all__ = ["add", "snapshot", "since"]

_SECONDS: Counter = Counter()


def add(oracle: str, seconds: float) -> None:
    _SECONDS[oracle] += seconds


def snapshot() -> dict:
    return dict(_SECONDS)


def since(before: dict) -> dict:
    """Seconds per oracle spent since ``before`` (a :func:`snapshot`), largest first, zeros left out."""
    spent = {k: v - before.get(k, 0.0) for k, v in _SECONDS.items()}
    return {k: v for k, v in sorted(spent.items(), key=lambda kv: -kv[1]) if v > 0}
