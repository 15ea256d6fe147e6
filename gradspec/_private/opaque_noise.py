"""Whether ``gradspec.check.rounding_noise`` is re-running a backward with every value jittered by a few
ulps: code gradspec cannot see inside (a torch Function's float32 backward) reads this to jitter its own
float32 operations too (``gradspec.verify.torch_call.JitterFloat32``).  Without it, a correct float32
backward whose formula cancels (``1 - y*y`` of tanh at x = 10: 0 in float32, 8.2e-9 exactly) was held to
float32 rounding relative to a derivative far below float32's resolution, and reported.

Example::

    >>> import numpy as np
    >>> from gradspec._private.opaque_noise import active, jittering
    >>> with jittering(np.random.default_rng(0), 4.0):
    ...     active() is not None
    True
    >>> active() is None
    True
"""

from __future__ import annotations

import contextlib
import contextvars

__all__ = ["active", "jittering"]

_JITTER: contextvars.ContextVar = contextvars.ContextVar("gradspec_opaque_jitter", default=None)


def active():
    """``(rng, ulps)`` while a jittered re-run is under way, else None."""
    return _JITTER.get()


@contextlib.contextmanager
def jittering(rng, ulps: float):
    token = _JITTER.set((rng, float(ulps)))
    try:
        yield
    finally:
        _JITTER.reset(token)
