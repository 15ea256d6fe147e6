"""JSON that gradspec wrote earlier, read back as data from anywhere: records, summaries, state files.

A report folder or state directory handed over by somebody else may hold a ``discrepancy.json`` nested
10,000 levels deep (``json.loads`` raised a bare RecursionError: ``gradspec explain`` printed a traceback,
``gradspec fuzz`` ended "internal error" without naming the file) or a record whose fields have other
types than gradspec writes (``{"oracles": 5}``: every later run in that folder ended "internal error:
TypeError" and its results were lost).  :func:`loads` turns both into a :class:`BadJSON` (a ValueError,
which every reader already treats as "not a file of ours") naming the file; :func:`record_problem` says
what is wrong with a record's fields, so the record is skipped with a note instead of crashing a run.

Example::

    >>> from gradspec._private.jsondata import BadJSON, loads, record_problem
    >>> loads('{"kind": "value"}', "d-1/discrepancy.json")
    {'kind': 'value'}
    >>> try:
    ...     loads("[" * 100 + "]" * 100, "d-1/discrepancy.json")
    ... except BadJSON as e:
    ...     print(e)
    d-1/discrepancy.json: nests deeper than 32 levels; gradspec writes no such file: remove it
    >>> record_problem({"kind": "value", "oracles": 5})
    'field oracles: must be a list of strings or a string, got 5'
    >>> record_problem({"kind": "value", "oracles": ["reference", "torch-cpu"], "first_found": 1.7e9})
    ''
"""

from __future__ import annotations

import json
import math

from .inert import short_repr
from .safefs import read_regular

__all__ = ["BadJSON", "MAX_DEPTH", "read", "loads", "record_problem"]

# gradspec's records and summaries nest at most 4 levels deep (measured on 1,538 of them): 32 leaves room for
# growth and stays far below Python's recursion limit (1000 frames) for every reader that recurses per level.
MAX_DEPTH = 32


class BadJSON(ValueError):
    """A file that is not JSON gradspec wrote; the message names the file and what to do."""


def read(path: str, limit: int | None, *, follow: bool = False, max_depth: int | None = MAX_DEPTH):
    """The JSON value in the regular file at ``path`` (``safefs.read_regular``: no FIFO, no final symlink unless
    ``follow``, at most ``limit`` bytes); ``OSError`` if it cannot be read, :class:`BadJSON` if it is not JSON
    gradspec wrote.  ``max_depth=None`` leaves out the depth walk (a case file: its parser checks each field)."""
    return loads(read_regular(path, limit, follow=follow), path, max_depth)


def loads(text: str, where: str, max_depth: int | None = MAX_DEPTH):
    """The JSON value of ``text`` (read from ``where``); :class:`BadJSON` if it is not JSON or nests too deep."""
    deep = f"{where}: nests deeper than {max_depth or 'Python can parse'} levels; gradspec writes no such file: remove it"
    try:
        value = json.loads(text)
    except RecursionError:
        raise BadJSON(deep) from None
    except ValueError as e:
        raise BadJSON(f"{where}: not valid JSON ({str(e)[:120]}); gradspec writes no such file: remove it") from None
    if max_depth is None:
        return value
    stack = [(value, 0)]
    while stack:  # (without recursion: the check must not fail the way it guards against)
        v, depth = stack.pop()
        if depth > max_depth:
            raise BadJSON(deep)
        if isinstance(v, dict):
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)
    return value


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _strs(v) -> bool:
    return isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))


def _cause(v) -> bool:
    return v is None or isinstance(v, str) or (
        isinstance(v, dict) and all(v.get(k) is None or isinstance(v.get(k), str) for k in ("id", "op", "summary")))


# What gradspec's readers do with each field of a record (report index, fuzz's earlier-run replay and
# in-run dedup, the plugin's index, the CI outputs): a field of another type crashed them.  None is accepted
# everywhere (older records lack fields, and gradspec writes null for run_id, test, shard, seed).
_RECORD_FIELDS = {
    "kind": ("a string", lambda v: isinstance(v, str)),
    "message": ("a string", lambda v: isinstance(v, str)),
    "note": ("a string", lambda v: isinstance(v, str)),
    "engine": ("a string", lambda v: isinstance(v, str)),
    "status": ("a string", lambda v: isinstance(v, str)),
    "run_id": ("a string", lambda v: isinstance(v, str)),
    "test": ("a string", lambda v: isinstance(v, str)),
    "oracles": ("a list of strings or a string", _strs),
    "ops": ("a list of strings or a string", _strs),
    "covers": ("a list of 'kind|oracle vs oracle|ops' strings",
               lambda v: isinstance(v, list) and all(isinstance(k, str) and k.count("|") == 2 for k in v)),
    "found_at": ("a time in seconds (a number)", _is_num),
    "first_found": ("a time in seconds (a number)", _is_num),
    "status_checked": ("a time in seconds (a number)", _is_num),
    "cause": ("an object with string id, op and summary, or a string", _cause),
    "discrepancy": ("an object whose cause is an object with string id, op and summary",
                    lambda v: isinstance(v, dict) and _cause(v.get("cause"))),
}


def record_problem(rec) -> str:
    """What makes ``rec`` (a parsed ``discrepancy.json``) unusable, naming the field; "" when nothing is."""
    if not isinstance(rec, dict):
        return f"holds {type(rec).__name__}, not a record object"
    for field, (what, ok) in _RECORD_FIELDS.items():
        v = rec.get(field)
        if v is not None and not ok(v):
            return f"field {field}: must be {what}, got {short_repr(v)}"
    return ""
