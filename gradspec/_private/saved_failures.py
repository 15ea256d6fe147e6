"""The example database a ``verify_*`` / ``assert_*`` search uses: the active profile's, under ``dev`` / ``fuzz``.

gradspec's ``dev`` profile promises that "a failure found once is replayed first next time" (tryout5 #7:
a rare bug failed one run in three, because ``verify_*`` ran its own search without any database).  A
search now saves what it finds in the database of the active Hypothesis profile when that profile is
gradspec's ``dev`` or ``fuzz`` (random runs, the default local database ``.hypothesis/``) and starts with
a replay of what was saved under its key.  ``ci`` has no database (nothing carried between CI runs,
derandomized), and a script that never chose a gradspec profile writes nothing.

The key is the running test (pytest's, via the plugin), what is checked and its name: one test's saved
failures are not replayed against another function (a foreign saved example would not draw anyway).

Example::

    >>> from hypothesis import settings
    >>> from gradspec.profiles import register_profiles
    >>> from gradspec._private.saved_failures import database_for
    >>> register_profiles(); previous = settings.get_current_profile_name()
    >>> settings.load_profile("ci")
    >>> database_for("torch function", "MyFn.apply")  # ci carries nothing between runs: no database
    (None, None)
    >>> settings.load_profile(previous)
"""

from __future__ import annotations

import hashlib

from .seeds import ENV_TEST_KEY, current_test

__all__ = ["database_for", "PROFILES_WITH_DATABASE"]

PROFILES_WITH_DATABASE = ("dev", "fuzz")


def database_for(what: str, target: str):
    """``(database, key)`` for a search over ``what`` ``target`` (``"torch function"``, ``"Fn.apply"``), or
    ``(None, None)`` where the active profile keeps no saved failures."""
    import os

    try:
        from hypothesis import settings
    except ImportError:  # pragma: no cover - Hypothesis is a dependency
        return None, None
    if settings.get_current_profile_name() not in PROFILES_WITH_DATABASE:
        return None, None
    db = settings.default.database
    if db is None or settings.default.derandomize:
        return None, None
    test = os.environ.get(ENV_TEST_KEY) or current_test() or ""
    key = hashlib.blake2b(f"gradspec verify|{test}|{what}|{target}".encode(), digest_size=16).digest()
    return db, key
