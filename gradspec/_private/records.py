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
import stat
import tempfile

import numpy as np

from . import jsondata
from .inert import printable
from .safefs import UnsafePath, real_dir

__all__ = ["RECORD", "discrepancy_id", "atomic_write", "read_records", "read_record", "record_folder",
           "make_record_folder",
           "update_record"]

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
        # surrogateescape: a file name the locale could not decode (a non-ASCII report dir in a C locale) is
        # written back as its own bytes, never a UnicodeEncodeError that loses the report (M4)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
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


RECORD_LIMIT = 16 << 20  # a record is a few kB; more is not one gradspec wrote (and costs the parse)


def record_folder(directory: str, rid: str) -> str:
    """``directory/rid`` if it is a report folder itself: :class:`UnsafePath` if it is a symlink or a file.

    A report dir handed over by somebody else may hold ``d-*`` links to folders elsewhere: gradspec
    neither reads nor rewrites through them.
    """
    path = os.path.join(directory, rid)
    if not real_dir(path):
        st = os.lstat(path)  # (FileNotFoundError when missing)
        raise UnsafePath(path, "is a symbolic link" if stat.S_ISLNK(st.st_mode) else "is not a folder",
                         "a report folder is a real folder made by gradspec: remove it (a link's target is "
                         "not touched)")
    return path


def make_record_folder(directory: str, rid: str) -> str:
    """``directory/rid`` as a real folder to write a report into (created when missing).

    The ids are predictable: a symlink or file planted at one is removed (a link's target is not
    touched), never written through, and never a reason to lose the finding.
    """
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, rid)
    try:
        os.mkdir(path)
    except FileExistsError:
        if not real_dir(path):
            os.unlink(path)
            os.mkdir(path)
    return path


def read_record(directory: str, rid: str) -> dict:
    """The record of report folder ``rid`` (``OSError``, :class:`UnsafePath` included, or ``ValueError``)."""
    path = os.path.join(record_folder(directory, rid), RECORD)
    rec = jsondata.read(path, RECORD_LIMIT)
    why = jsondata.record_problem(rec)  # (a field of another type crashed every reader after this one)
    if why:
        raise jsondata.BadJSON(f"{path}: {why}; gradspec writes no such record: remove the folder")
    return rec


def read_records(directory: str, skipped: list | None = None) -> list[dict]:
    """Every discrepancy record under ``directory`` (one per ``<id>/discrepancy.json``), oldest first.

    A folder that is a symlink, a record that is no regular file (a FIFO would block) or no JSON object is
    left out; ``skipped`` (a list) gets a note naming each.
    """
    out = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return out
    for name in names:
        if not name.startswith("d-"):
            continue
        try:
            rec = read_record(directory, name)
        except (OSError, ValueError, RecursionError) as e:
            if skipped is not None and not isinstance(e, FileNotFoundError):
                why = str(e) if isinstance(e, (UnsafePath, jsondata.BadJSON)) else f"{os.path.join(directory, name)}: {e}"
                skipped.append(printable(f"earlier report skipped: {why}"))
            continue
        rec["id"] = name  # the folder, whatever the file says: a record must not point elsewhere
        out.append(rec)
    out.sort(key=lambda r: (r.get("first_found") or r.get("found_at") or 0, r["id"]))
    return out


def update_record(directory: str, rid: str, updates: dict) -> None:
    """Merge ``updates`` into the record of ``rid`` (never through a symlinked folder or record)."""
    rec = read_record(directory, rid)
    rec.update(updates)
    atomic_write(os.path.join(directory, rid, RECORD), json.dumps(rec, indent=1, default=_jdefault))


def _jdefault(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)
