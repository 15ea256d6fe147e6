"""The in-flight file of a campaign process: which case it is checking, for the crash report of a process
that dies on it (``gradspec.fuzz.distributed.report_crashes`` reads the files of dead processes).

A campaign checks the value sets of one graph (a ``CaseGroup``) one after the other.  The file holds
the whole group, written once when the group starts, and the index of the set being checked, rewritten
in place (a few bytes at a fixed offset) as each set starts and set to -1 when its check ends: a
process that dies while drawing (no case in flight) leaves -1 and no crash is reported.  Creating,
writing and removing a file for every case cost about as much as drawing its values.

Example::

    >>> import os, tempfile, numpy as np, gradspec as gs
    >>> from gradspec.fuzz.inflight import Inflight, case_json
    >>> case = gs.Case.build({"x": np.ones(2)}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    >>> path = os.path.join(tempfile.mkdtemp(), "inflight-1.json")
    >>> f = Inflight(path)
    >>> f.group([case, case])
    >>> f.start(case)
    >>> gs.Case.from_json(case_json(open(path).read())).ops
    ['exp']
    >>> f.end(); case_json(open(path).read()) is None
    True
    >>> f.close(); os.path.exists(path)
    False
"""

from __future__ import annotations

import json
import os

__all__ = ["Inflight", "case_json"]

_HEAD = '{"gradspec_inflight": 1, "current": '
_WIDTH = 8  # characters of the index, right-aligned: a valid JSON number with leading spaces


class Inflight:
    """Writer of one process's in-flight file (never raises: a failed write only loses the crash report)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None
        self.cases: list = []

    def group(self, cases) -> None:
        """The value sets about to be checked (none is in flight yet)."""
        self.cases = list(cases)
        body = ",".join(c.to_json(indent=None) for c in self.cases)
        text = f'{_HEAD}{-1:>{_WIDTH}}, "cases": [{body}]}}'.encode()
        try:
            if self.fd is None:
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, text, 0)
        except OSError:
            pass

    def start(self, case) -> None:
        """``case`` is being checked from now on (a case outside the group becomes a group of its own)."""
        i = next((k for k, c in enumerate(self.cases) if c is case), None)
        if i is None:
            self.group([case])
            i = 0
        self._mark(i)

    def end(self) -> None:
        self._mark(-1)

    def _mark(self, i: int) -> None:
        if self.fd is None:
            return
        try:
            os.pwrite(self.fd, f"{i:>{_WIDTH}}".encode(), len(_HEAD))
        except OSError:
            pass

    def close(self) -> None:
        """Remove the file (the process ends normally)."""
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None
        try:
            os.unlink(self.path)
        except OSError:
            pass


def case_json(text: str) -> str | None:
    """The JSON of the case that was in flight, from an in-flight file's text; None if none was (the
    process died between two checks).  A file holding one case's JSON (older gradspec) is that case."""
    if not text.startswith(_HEAD):
        return text
    try:
        d = json.loads(text)
        i = int(d["current"])
        if i < 0:
            return None
        return json.dumps(d["cases"][i])
    except (ValueError, KeyError, IndexError, TypeError):
        return text  # unreadable: the reader reports it as a case that cannot be read back
