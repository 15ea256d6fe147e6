"""The same seed, the same cases: Hypothesis draws without the constants of whatever code is loaded.

Since 6.13x Hypothesis draws about 5% of its numbers from constants found in the source of every
"local" module loaded in the process (anything outside site-packages: the user's tests, an
editable install of gradspec, pytest plugins).  So ``gs.verify_op(op, seed=5)`` drew other
cases under pytest (where the plugin had imported ``gradspec.fuzz``, and the test modules are
loaded) than in a script, and other cases again after any edit of the project's source.
:func:`fixed_constants` makes a search see Hypothesis' built-in constants only, for the length
of a ``with`` block; it restores the pool (and clears the cache that memoises it) afterwards.

It patches a private Hypothesis function; on a Hypothesis without it this is a no-op (and a run
is then deterministic only for the same loaded code, as before).

Example::

    >>> from gradspec._private.hypothesis_env import fixed_constants
    >>> with fixed_constants():
    ...     pass
"""

from __future__ import annotations

import contextlib
import threading

__all__ = ["fixed_constants"]

_lock = threading.RLock()
_depth = 0
_saved = None


def _providers():
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - very old Hypothesis
        return None
    if not hasattr(providers, "_get_local_constants") or not hasattr(providers, "Constants"):
        return None  # pragma: no cover - a Hypothesis without local constants
    return providers


def _clear_cache(providers) -> None:
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    try:
        cache.cache.clear()
    except AttributeError:  # pragma: no cover - another cache layout
        try:
            cache.clear()
        except AttributeError:
            pass


@contextlib.contextmanager
def fixed_constants():
    """Within the block, Hypothesis draws no constants from loaded local modules (re-entrant)."""
    global _depth, _saved
    providers = _providers()
    if providers is None:  # pragma: no cover
        yield
        return
    with _lock:
        if _depth == 0:
            _saved = providers._get_local_constants
            empty = providers.Constants()
            providers._get_local_constants = lambda: empty
            _clear_cache(providers)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                providers._get_local_constants = _saved
                _saved = None
                _clear_cache(providers)
