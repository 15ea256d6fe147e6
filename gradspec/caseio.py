"""Opening case files as data: ``load`` a ``case.json`` and pick the engine to replay it with.

A case file travels as a CI artifact or a bug attachment, so opening one must be as safe as
opening any JSON file (CONTRACT §6): nothing it names is imported unless the user allowed the
module (``--allow-import MODULE``, or the ``--engine`` / ``--ops`` given on the command line;
``allow_import=`` here), and its sizes are checked against ``--max-elements`` before anything is
allocated.  Every problem is a :class:`gradspec.CaseError` whose message names the file, the
field and the fix (``gradspec replay`` exits 2 with it).

Example::

    >>> import json, os, tempfile, numpy as np, gradspec as gs
    >>> from gradspec import caseio
    >>> case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    >>> path = os.path.join(tempfile.mkdtemp(), "case.json")
    >>> _ = open(path, "w").write(json.dumps({**json.loads(case.to_json()), "engine": "os:abort"}))
    >>> caseio.load(path).ops
    ['exp']
    >>> caseio.engine_for(caseio.load(path))
    Traceback (most recent call last):
    ...
    gradspec.case.CaseError: case.json: the case file names engine 'os:abort', which would import module 'os'...
    >>> caseio.engine_for(caseio.load(path), "reference")   # an engine chosen by the user wins
    'reference'
"""

from __future__ import annotations

import json
import os

from ._private import limits
from ._private.casefile import module_not_replayed
from ._private.imports import ImportSpecError, allowing, load_from_case
from ._private.safefs import read_regular
from ._private.skips import word_cut
from .case import Case, CaseError

__all__ = ["load", "engine_for", "replay_command", "allow_flags", "saved_user_ops", "BUILTIN_ENGINES"]

BUILTIN_ENGINES = ("reference", "torch-cpu", "torch-cuda")
# A file may have at most max_elements bytes (128 MiB by default): JSON text takes at least 2
# bytes per array element ("0,"), and parsing holds a Python object of ~30-70 bytes per element,
# so the parse stays within the order of the largest check the limit admits (8 bytes x 4 copies).
_BYTES_PER_ELEMENT = 1


def load(path: str, *, allow_import=(), max_elements: int | None = None) -> Case:
    """The case in the file at ``path``; :class:`CaseError` (message starting with the path) if it cannot be."""
    with limits.limiting(max_elements):
        limit = limits.current()
        try:
            size = os.path.getsize(path)
            if os.path.isdir(path):
                raise IsADirectoryError
            if size > limit * _BYTES_PER_ELEMENT:
                raise CaseError(f"{path}: the file has {size:,} bytes, more than a case within --max-elements "
                                f"{limit:,} can need; raise --max-elements if you trust it")
            raw = read_regular(path, limit * _BYTES_PER_ELEMENT, follow=True, encoding=None)  # (a FIFO: refused)
        except IsADirectoryError:
            raise CaseError(f"{path} is a directory; give the case.json inside a report folder") from None
        except OSError as e:
            raise CaseError(f"cannot read case file {path!r}: {e.strerror or e}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise CaseError(f"{path}: not a gradspec case file (not UTF-8 text)") from None
        try:
            d = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise CaseError(f"{path}: not a gradspec case file: invalid JSON ({word_cut(str(e), 200)})") from None
        if not isinstance(d, dict):  # json.loads succeeded: the text is JSON, only not a case
            kind = {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(type(d), "a number")
            raise CaseError(f"{path}: not a gradspec case file: the file is valid JSON, but {kind}, not a case object "
                            '(a JSON object with "format": "gradspec-case/1", as case.json in a report folder)')
        _check_ops(path, d)
        try:
            with allowing(allow_import):
                return Case.from_json(d)
        except CaseError as e:
            raise CaseError(f"{path}: {e}", reason=e.reason) from None
        except RecursionError:
            raise CaseError(f"{path}: the case nests too deeply to be a gradspec case") from None
        except Exception as e:  # noqa: BLE001 - a user op whose own code fails while the case is built
            raise CaseError(f"{path}: cannot load the case: {type(e).__name__}: {word_cut(str(e), 300)}") from None


def _check_ops(path: str, d) -> None:
    """An op that is neither in the table nor given an import path: say which, and why (inline ops)."""
    from .spec import registry as _registry

    if not (isinstance(d, dict) and d.get("format") == "gradspec-case/1"):
        return  # from_json names what the file is instead
    meta = d.get("meta")
    inline = meta.get("inline_ops") if isinstance(meta, dict) else None
    inline = set(x for x in inline if isinstance(x, str)) if isinstance(inline, list) else set()
    modules = meta.get("module_ops") if isinstance(meta, dict) else None
    modules = set(x for x in modules if isinstance(x, str)) if isinstance(modules, list) else set()
    user_ops = d.get("user_ops") if isinstance(d.get("user_ops"), dict) else {}
    for op, where in user_ops.items():
        spec = _registry.all_specs().get(op) if isinstance(op, str) else None
        if spec is not None and not spec.user:  # (gradspec never writes one: the entry was ignored, silently)
            raise CaseError(f"{path}: user_ops maps {op[:100]!r}, an op of gradspec's table, to {str(where)[:100]!r}: "
                            "a case file cannot replace a table op (nothing was imported); remove the entry") from None
    nodes = d.get("nodes") if isinstance(d.get("nodes"), list) else []
    for n in nodes:
        op = n.get("op") if isinstance(n, dict) else None
        if not isinstance(op, str) or op in user_ops:
            continue
        try:
            _registry.lookup(op)
        except KeyError:
            if op in modules:
                raise CaseError(f"{path}: op {op!r}: {module_not_replayed(op.removeprefix('torch_'))}") from None
            if op in inline:
                raise CaseError(
                    f"{path}: op {op!r} was defined inline (in __main__ or inside a function) when this case was "
                    "saved, so it has no import path and replay cannot rebuild it; define it at module level in "
                    "an importable module and save the case again") from None
            raise CaseError(f"{path}: unknown op {op[:100]!r}: not in the op table and no import path recorded "
                            "(a user op must be importable; see `gradspec ops`)") from None


def engine_for(case: Case, engine: str | None = None, *, allow_import=(), source: str = "case.json") -> str:
    """The engine to check ``case`` with: ``engine`` if the user gave one, else the one the case records.

    A recorded ``module:attr`` engine is imported here, through the gate: only when its module is
    allowed (CaseError otherwise, naming the module and ``--allow-import``).
    """
    if engine:
        return engine
    name = case.engine or "reference"
    if name in BUILTIN_ENGINES:
        return name
    if ":" not in name:
        raise CaseError(f"{source}: the case was saved from engine {name[:80]!r}, defined inline (no import path), "
                        "so replay cannot rebuild it: give --engine package.module:attr")
    try:
        with allowing(allow_import):
            load_from_case(name, "engine")
    except ImportSpecError as e:
        raise CaseError(f"{source}: {e}", reason=getattr(e, "reason", None)) from None
    return name


def replay_command(path: str, engine: str | None = None, user_ops=None) -> str:
    """The ``gradspec replay`` command line for a saved case, with the ``--allow-import`` it needs.

    >>> replay_command("reports/d-1/case.json", "mypkg.engine:make", {"frob": "mypkg.ops:frob"})
    'gradspec replay reports/d-1/case.json --allow-import mypkg.engine --allow-import mypkg.ops'
    """
    import shlex

    if user_ops is None:  # a saved case names its user ops' modules (chaos M1: the printed line lacked them)
        user_ops = saved_user_ops(path)
    return " ".join(["gradspec replay", shlex.quote(path)]) + allow_flags(engine, user_ops)


def saved_user_ops(path: str) -> dict:
    """The ``user_ops`` (op name -> ``module:attr``) a case file records, read as JSON (no code runs); ``{}``
    when the file is missing or unreadable (the replay then says what is wrong)."""
    try:  # (a FIFO planted as case.json must not block the printing of a run's end)
        ops = json.loads(read_regular(path)).get("user_ops")
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): v for k, v in ops.items() if isinstance(v, str)} if isinstance(ops, dict) else {}


def allow_flags(engine: str | None = None, user_ops=None) -> str:
    """The ``--allow-import`` flags (with a leading space) a case of ``engine`` and ``user_ops`` needs to run,
    for ``gradspec replay`` and a report's ``repro.py`` alike.

    >>> allow_flags("mypkg.engine:make", {"frob": "mypkg.ops:frob"})
    ' --allow-import mypkg.engine --allow-import mypkg.ops'
    """
    import shlex

    paths = [engine or ""] + list((user_ops or {}).values())
    mods = sorted({p.partition(":")[0] for p in paths if isinstance(p, str) and ":" in p})
    return "".join(f" --allow-import {shlex.quote(m)}" for m in mods)
