"""The in-flight file of a campaign process: which case it is checking, for the crash report of a process
that dies on it (``gradspec.fuzz.distributed.report_crashes`` reads the files of dead processes).

A campaign checks the value sets of one graph (a ``CaseGroup``) one after the other.  The file holds
the whole group, written once when the group starts, and the index of the set being checked, rewritten
in place (a few bytes at a fixed offset) as each set starts and set to -1 when its check ends: a
process that dies while drawing (no case in flight) leaves -1 and no crash is reported.  Creating,
writing and removing a file for every case cost about as much as drawing its values.  The index is
written through a shared memory map of the file's first bytes: a store into the page cache, which
other processes read at once and which outlives a crash of this one (a ``pwrite`` per mark, six a
case with the prefetch's four, cost ~45 us a case); where the file cannot be mapped, ``pwrite``.

The group is stored compactly: the graph (leaf names, nodes, roots) once for the sets that share it,
and each set's arrays as their raw bytes in hex (``dtype.str``, shape, bytes: bit-exact, NaN payloads
and signed zeros included).  Encoding every set as a case file (``Case.to_json``: a ``float.hex`` per
element, the nodes again for every set) cost ~40 us a case, a few percent of a checked case; the reader
(:func:`case_json`) rebuilds the in-flight set's case file text, the same text ``Case.to_json`` gives.

Example::

    >>> import os, tempfile, numpy as np, gradspec as gs
    >>> from gradspec.fuzz.inflight import Inflight, case_json
    >>> case = gs.Case.build({"x": np.ones(2)}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    >>> path = os.path.join(tempfile.mkdtemp(), "inflight-1.json")
    >>> f = Inflight(path)
    >>> f.group([case, case])
    >>> f.start(case)
    >>> case_json(open(path).read()) == case.to_json(indent=None)
    True
    >>> f.end(); case_json(open(path).read()) is None
    True
    >>> f.close(); os.path.exists(path)
    False
"""

from __future__ import annotations

import json
import mmap
import os

import numpy as np

from .._private.safefs import open_private
from .._private.structure import same_value
from ..case import FORMAT, _jsonable, encode_array

__all__ = ["Inflight", "case_json"]

_HEAD = '{"gradspec_inflight": 1, "current": '
_WIDTH = 8  # characters of the index, right-aligned: a valid JSON number with leading spaces
_MAPPED = len(_HEAD) + _WIDTH  # the head and the index: what the memory map covers
_MARKS = {i: f"{i:>{_WIDTH}}".encode() for i in range(-1, 64)}


class Inflight:
    """Writer of one process's in-flight file (never raises: a failed write only loses the crash report)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None
        self.map: mmap.mmap | None = None  # the file's first _MAPPED bytes (None: pwrite)
        self.cases: list = []
        self.index: dict = {}  # id(case) -> its set's index in the group

    def group(self, cases) -> None:
        """The value sets about to be checked (none is in flight yet)."""
        self.cases = list(cases)
        self.index = {id(c): k for k, c in reversed(list(enumerate(self.cases)))}  # (the first of repeated ones)
        text = f'{_HEAD}{-1:>{_WIDTH}}, {_encode_group(self.cases)}}}'.encode()
        try:
            if self.fd is None:
                self.fd = open_private(self.path)  # (never through a symlink planted at the name)
            # Written, then cut to its length: the file never gets shorter than the mapped head (a store into a
            # mapped page past the end of the file is a SIGBUS).
            os.pwrite(self.fd, text, 0)
            os.ftruncate(self.fd, len(text))
        except OSError:
            self._unmap()  # (a failed write may leave the file short: marks go through pwrite, which cannot crash)
            return
        if self.map is None:
            try:
                self.map = mmap.mmap(self.fd, _MAPPED, access=mmap.ACCESS_WRITE)
            except (OSError, ValueError):
                self.map = None

    def start(self, case) -> None:
        """``case`` is being checked from now on (a case outside the group becomes a group of its own)."""
        i = self.index.get(id(case))
        if i is None or self.cases[i] is not case:
            self.group([case])
            i = 0
        self._mark(i)

    def end(self) -> None:
        self._mark(-1)

    def _mark(self, i: int) -> None:
        text = _MARKS.get(i) or f"{i:>{_WIDTH}}".encode()
        if self.map is not None:
            self.map[len(_HEAD):_MAPPED] = text
            return
        if self.fd is None:
            return
        try:
            os.pwrite(self.fd, text, len(_HEAD))
        except OSError:
            pass

    def _unmap(self) -> None:
        if self.map is not None:
            try:
                self.map.close()
            except (OSError, BufferError):
                pass
            self.map = None

    def close(self) -> None:
        """Remove the file (the process ends normally)."""
        self._unmap()
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


def _encode_group(cases) -> str:
    """``"graphs": [...], "sets": [...]`` of the in-flight file (JSON members, without braces)."""
    reps: list = []  # a case per distinct graph
    graphs: list = []
    sets = []
    for c in cases:
        g = next((k for k, r in enumerate(reps) if _same_graph(c, r)), None)
        if g is None:
            g = len(reps)
            reps.append(c)
            graphs.append({"engine": c.engine, "user_ops": dict(c.user_ops),
                           "leaves": [[l.name, l.requires_grad] for l in c.leaves],
                           "nodes": [{"name": n.name, "op": n.op, "inputs": n.inputs, "params": _jsonable(n.params)}
                                     for n in c.nodes],
                           "roots": list(c.roots)})
        sets.append({"graph": g, "values": [_raw(l.value) for l in c.leaves],
                     "seeds": [None if s is None else _raw(s) for s in c.seeds],
                     "meta": _jsonable(c.meta) if c.meta else {}})
    return f'"graphs": {json.dumps(graphs, allow_nan=False)}, "sets": {json.dumps(sets, allow_nan=False)}'


_MISSING = object()


def _same_graph(a, b) -> bool:
    """Whether ``Case.to_json`` writes the same engine, user ops, leaf names and flags, nodes and roots for
    both (the value sets of a group: each has its own node objects, holding the same param values).  Param
    values are compared with their types, so 1, 1.0 and True, or 0.0 and -0.0, are never taken for each other (a
    param that is not a plain value only costs a second copy of the graph in the file)."""
    if (a.engine != b.engine or a.roots != b.roots or a.user_ops != b.user_ops or len(a.leaves) != len(b.leaves)
            or len(a.nodes) != len(b.nodes)):
        return False
    for x, y in zip(a.leaves, b.leaves):
        if x.name != y.name or x.requires_grad is not y.requires_grad:
            return False
    for n, m in zip(a.nodes, b.nodes):
        if n.name != m.name or n.op != m.op or n.inputs != m.inputs or len(n.params) != len(m.params):
            return False
        p = m.params
        for k, v in n.params.items():
            w = p.get(k, _MISSING)
            if w is not v and not same_value(v, w):
                return False
    return True


_RAW_KINDS = frozenset("fbiu")  # what Case.to_json stores (anything else raises there, as it did here)


def _raw(a) -> list:
    """[dtype.str, shape, bytes in hex] of an array: bit-exact, ~1 us (a float.hex per element cost more)."""
    a = np.asarray(a)
    if a.dtype.kind not in _RAW_KINDS:
        encode_array(a)  # raises the CaseError Case.to_json would
    return [a.dtype.str, list(a.shape), a.tobytes().hex()]


def _array(raw) -> np.ndarray:
    dt, shape, data = raw
    return np.frombuffer(bytes.fromhex(data), dtype=np.dtype(dt)).reshape(shape)


def _set_case(d: dict, i: int) -> dict:
    """The case file dict (``Case.to_json``'s) of set ``i`` of an in-flight file's group."""
    s = d["sets"][i]
    g = d["graphs"][s["graph"]]
    return {
        "format": FORMAT,
        "engine": g["engine"],
        "user_ops": g["user_ops"],
        "leaves": [{"name": name, "requires_grad": rg, "value": encode_array(_array(v))}
                   for (name, rg), v in zip(g["leaves"], s["values"])],
        "nodes": g["nodes"],
        "roots": g["roots"],
        "seeds": [None if v is None else encode_array(_array(v)) for v in s["seeds"]],
        "meta": s["meta"],
    }


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
        if "cases" in d:  # (a group of case files: gradspec before the compact form)
            return json.dumps(d["cases"][i])
        return json.dumps(_set_case(d, i), allow_nan=False)
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        return text  # unreadable: the reader reports it as a case that cannot be read back
