"""Hypothesis example databases named on the command line (``--database``, repeatable).

A spec is one of

- a directory: ``DirectoryBasedExampleDatabase`` (the default, ``DIR/.hypothesis``);
- ``redis://[:password@]host:port/db`` (or ``rediss://``, ``unix://``): Hypothesis'
  ``RedisExampleDatabase``, so that machines without shared storage share saved failures;
- either of them behind ``ro:`` (``ro:redis://ci-cache:6379/0``): ``ReadOnlyDatabase``, for a CI job
  that replays what the team found but must not write to the shared store.

Several specs make one ``MultiplexedDatabase``: saved failures are read from all and written to the
writable ones (``--database reports/.hypothesis --database ro:redis://cache:6379/0`` is the usual CI
set-up: local writes, shared reads).  Specs are plain strings so that a campaign's configuration
still travels as JSON to xdist workers; every process opens its own connections.

Example::

    >>> import tempfile
    >>> from gradspec._private.database import normalise, open_database
    >>> d = tempfile.mkdtemp()
    >>> normalise(["ro:" + d])[0].startswith("ro:/")
    True
    >>> type(open_database(["ro:" + d])).__name__
    'ReadOnlyDatabase'
"""

from __future__ import annotations

import os

__all__ = ["DatabaseSpecError", "normalise", "open_database", "describe", "is_url", "unwritable", "REDIS_SCHEMES"]

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
READ_ONLY = "ro:"
# A shared server that does not answer within this time is down or unreachable: say so at start-up
# instead of letting the first saved failure hang the campaign.
CONNECT_TIMEOUT = 5.0


class DatabaseSpecError(ValueError):
    """A ``--database`` spec that cannot be used (the message names the spec and the fix)."""


def is_url(spec: str) -> bool:
    return spec.startswith(REDIS_SCHEMES)


def _split(spec: str) -> tuple[bool, str]:
    return (True, spec[len(READ_ONLY):]) if spec.startswith(READ_ONLY) else (False, spec)


def normalise(specs) -> list[str]:
    """Absolute paths for directories (workers may run elsewhere), URLs as given; ``None`` -> ``[]``."""
    if specs is None:
        return []
    if isinstance(specs, str):
        specs = [specs]
    out = []
    for spec in specs:
        if not isinstance(spec, str) or not spec.strip():
            raise DatabaseSpecError(f"--database {spec!r}: expected a directory or a redis:// URL")
        ro, target = _split(spec.strip())
        if not is_url(target):
            target = os.path.abspath(target)
        out.append((READ_ONLY if ro else "") + target)
    return out


def _redis(url: str, check: bool):
    try:
        import redis  # noqa: F401
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise DatabaseSpecError(f"--database {url}: a Redis example database needs the redis client: "
                                "pip install 'gradspec[redis]'") from None
    import redis as _r

    try:
        client = _r.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=CONNECT_TIMEOUT)
    except ValueError as e:
        raise DatabaseSpecError(f"--database {url}: not a valid Redis URL ({e}); "
                                "expected redis://host:port/db") from None
    if check:
        try:
            client.ping()
        except _r.RedisError as e:
            raise DatabaseSpecError(f"--database {url}: the Redis server does not answer ({e}); "
                                    "start it or drop the option") from None
    return RedisExampleDatabase(client, key_prefix=b"gradspec-example:")


def _one(spec: str, check: bool):
    from hypothesis.database import DirectoryBasedExampleDatabase, ReadOnlyDatabase

    ro, target = _split(spec)
    if is_url(target):
        db = _redis(target, check)
    else:
        if os.path.exists(target) and not os.path.isdir(target):
            raise DatabaseSpecError(f"--database {target!r} exists and is not a directory")
        if not ro:
            try:
                os.makedirs(target, exist_ok=True)
            except OSError as e:
                raise DatabaseSpecError(f"--database {target!r}: {e.strerror or e}") from None
        db = DirectoryBasedExampleDatabase(target)
    return ReadOnlyDatabase(db) if ro else db


def open_database(specs, default: str | None = None, check: bool = False):
    """One Hypothesis database for ``specs`` (see the module docstring); ``default`` when there are none.

    ``check=True`` pings every Redis server once (the command line does, so that a wrong URL is a
    usage error at start-up, not a hang in the middle of a campaign).
    """
    from hypothesis.database import MultiplexedDatabase

    specs = normalise(specs) or ([os.path.abspath(default)] if default else [])
    if not specs:
        raise DatabaseSpecError("no example database: give --database DIR or a redis:// URL")
    dbs = [_one(s, check) for s in specs]
    return dbs[0] if len(dbs) == 1 else MultiplexedDatabase(*dbs)


def unwritable(specs) -> list[str]:
    """The writable-by-spec directories (no ``ro:``) this process cannot write, each with why: Hypothesis saves
    into such a folder nothing, silently (its ``save`` swallows the OSError), so the command line says so."""
    import tempfile

    out = []
    for spec in normalise(specs):
        ro, target = _split(spec)
        if ro or is_url(target):
            continue
        try:
            fd, probe = tempfile.mkstemp(dir=target, prefix=".write-test-")  # a new file: never one planted there
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            out.append(f"{target} ({e.strerror or e})")
    return out


def describe(specs, default: str | None = None) -> str:
    """The databases as reports show them (passwords in URLs hidden)."""
    specs = normalise(specs) or ([os.path.abspath(default)] if default else [])
    shown = []
    for s in specs:
        ro, target = _split(s)
        if is_url(target) and "@" in target:
            scheme, rest = target.split("://", 1)
            target = f"{scheme}://***@{rest.split('@', 1)[1]}"
        shown.append(target + (" (read-only)" if ro else ""))
    return " + ".join(shown)
