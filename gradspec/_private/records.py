"""Report folders as data: stable ids, atomic writes and the per-discrepancy records.

The bottom of the report machinery: campaigns (``gradspec.fuzz``) read and update records and
name folders here without importing the HTML layer (``gradspec.report``), which re-exports them.

Example::

    >>> from gradspec._private.records import discrepancy_id
    >>> discrepancy_id(("value", ("reference", "torch-cpu"), ("exp",)))[:2]
    'd-'
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

import numpy as np

__all__ = ["RECORD", "discrepancy_id", "atomic_write", "read_records", "update_record"]

RECORD = "discrepancy.json"


def discrepancy_id(signature, scope: str | None = None) -> str:
    """A stable folder name for a discrepancy signature (kind, oracle pair, ops); ``scope`` (a test
    id) keeps the findings of two tests on the same op in two folders."""
    kind, pair, ops = signature
    canon = repr((kind, tuple(sorted(pair)), tuple(sorted(ops))))
    if scope:
        canon += "\0" + str(scope)
    return "d-" + hashlib.sha1(canon.encode()).hexdigest()[:10]


def atomic_write(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file in the same folder and a rename."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix="-" + os.path.basename(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    # mkstemp creates files 0600; reports are meant to be shared like any file the user writes.
    global _UMASK
    if _UMASK is None:
        _UMASK = os.umask(0o022)
        os.umask(_UMASK)
    return _UMASK


_UMASK = None


def read_records(directory: str) -> list[dict]:
    """Every discrepancy record under ``directory`` (one per ``<id>/discrepancy.json``), oldest first."""
    out = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return out
    for name in names:
        if not name.startswith("d-"):
            continue
        try:
            with open(os.path.join(directory, name, RECORD), encoding="utf-8") as f:
                rec = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict):
            rec["id"] = name  # the folder, whatever the file says: a record must not point elsewhere
            out.append(rec)
    out.sort(key=lambda r: (r.get("first_found") or r.get("found_at") or 0, r["id"]))
    return out


def update_record(directory: str, rid: str, updates: dict) -> None:
    path = os.path.join(directory, rid, RECORD)
    with open(path, encoding="utf-8") as f:
        rec = json.load(f)
    rec.update(updates)
    atomic_write(path, json.dumps(rec, indent=1, default=_jdefault))


def _jdefault(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)
