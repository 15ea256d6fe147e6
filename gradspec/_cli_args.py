"""The command line's shared parts: exit codes, argument types and checks, the data flags, loading a case file.

Private to :mod:`gradspec.cli` and its subcommands (``_cli_explain``); nothing here is public API.
"""

from __future__ import annotations

import argparse
import codecs
import os
import sys
import tempfile

__all__: list[str] = []

EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_LOST = EXIT_INCONCLUSIVE  # inconclusive (CONTRACT §6): budget lost with a dead worker


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits 2 on usage errors, as the contract wants
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"gradspec: error: {message}{_did_you_mean(self, message)}\n")


def _did_you_mean(parser: argparse.ArgumentParser, message: str) -> str:
    """"; did you mean --max-examples?" for a misspelt flag in argparse's "unrecognized arguments" (Python 3.11's
    argparse has no suggestions).  The flags of every subcommand are candidates: the top-level parser reports
    a subcommand's unknown flag, and a flag of another subcommand is a hint too."""
    import difflib

    if not message.startswith("unrecognized arguments:"):
        return ""
    known, todo = set(), [parser]
    while todo:
        p = todo.pop()
        for action in p._actions:
            known.update(o for o in action.option_strings if o.startswith("--"))
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
    hints = []
    for word in message.split(":", 1)[1].split():
        flag = word.split("=", 1)[0]
        if flag.startswith("-") and flag not in known:
            close = difflib.get_close_matches("--" + flag.lstrip("-").replace("_", "-"), sorted(known), n=1, cutoff=0.75)
            hints += [f"{flag}: did you mean {close[0]}?"] if close else []
    return "; " + "; ".join(hints) if hints else ""


def _int_at_least(lo: int):
    """An argparse type: an integer >= lo, with a message naming the text and the bound."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"{text!r} must be >= {lo}")
        return v

    return parse


_positive_int = _int_at_least(1)
_seed = _int_at_least(0)


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return v


def _nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0 (e.g. 1e-6)")
    return v


WORKERS_PER_CPU = 4  # workers spend time in Hypothesis and numpy, not waiting: more per CPU only thrashes


def _max_local_workers() -> int:
    """The --workers bound on this machine (without --tx): WORKERS_PER_CPU per CPU this process may run on."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(WORKERS_PER_CPU, WORKERS_PER_CPU * cpus)


def _isolate_flag(p) -> None:
    p.add_argument("--isolate", action="store_true",
                   help="check each case in a child process that a watchdog kills when an oracle overruns "
                        "--case-timeout (cuts hangs in C code, which the default alarm signal cannot; costs a fork "
                        "per case)")


def _data_flags(p) -> None:
    """Case files are data (CONTRACT §6): what they may import, how big they may be."""
    p.add_argument("--allow-import", action="append", default=[], metavar="MODULE",
                   help="a module a case file may import (its engine, user ops, torch Functions; repeatable); "
                        "without it nothing named in a case file is imported")
    p.add_argument("--max-elements", type=_positive_int, default=None, metavar="N",
                   help="refuse a case file whose tensors need more array elements than this "
                        "(default: 2**27, less on a machine with under 8 GiB)")


def _escape(err: UnicodeEncodeError):
    """The codec error handler of gradspec's output streams: a character the stream cannot encode is written
    as an escape (``\\xb7``) instead of crashing the command (an ASCII-only stdout: ``PYTHONIOENCODING=ascii``,
    a C locale); a lone surrogate, i.e. a byte of a file name the locale could not decode (surrogateescape),
    is written as that byte, so a non-ASCII path prints as the user typed it."""
    bad = err.object[err.start:err.end]
    if all("\udc80" <= c <= "\udcff" for c in bad):
        return bytes(ord(c) - 0xDC00 for c in bad), err.end
    return codecs.backslashreplace_errors(err)


codecs.register_error("gradspec.escape", _escape)


def _safe_streams() -> None:
    """stdout and stderr never raise UnicodeEncodeError: what they cannot encode is escaped (``_escape``)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="gradspec.escape")
        except (AttributeError, ValueError, OSError):  # (not a TextIOWrapper: pytest's capture, a StringIO)
            pass


def _check_lists(args) -> None:
    """An empty --ops / --oracles (``--ops ""``: a variable that expanded to nothing) is a usage error, never
    "every op": a CI job meant to check three ops must not silently check the whole table instead."""
    for flag, text in (("--ops", args.ops), ("--oracles", args.oracles)):
        if text is not None and not _split(text):
            raise _UsageError(f"{flag} is empty ({text!r}): give comma-separated names (see `gradspec ops`), or "
                              f"leave {flag} out for every one")


def _check_output_paths(args) -> None:
    """The files written at the end of the run (summary.json and index.html in the report dir, --junitxml,
    --summary-md), checked before it starts: a folder in the way or a parent that cannot be written was found
    only after the whole run (and left a .tmp-PID file)."""
    for name in ("summary.json", "index.html"):
        p = os.path.join(args.report_dir, name)
        if os.path.isdir(p):
            raise _UsageError(f"report dir {args.report_dir!r}: {name} is a folder; gradspec writes the run's {name} "
                              "there: remove it, or use another --report-dir")
    for flag, path in (("--junitxml", args.junitxml), ("--summary-md", args.summary_md)):
        if not path:
            continue
        if os.path.isdir(path):
            raise _UsageError(f"{flag} {path!r} is a folder: give a file name (e.g. {os.path.join(path, 'x')})")
        parent = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(parent, exist_ok=True)
            fd, probe = tempfile.mkstemp(dir=parent, prefix=".write-test-")  # a new file: never one planted there
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise _UsageError(f"{flag} {path!r}: cannot write into {parent!r}: {e.strerror or e}") from None


def _err(msg: str) -> int:
    from ._private.inert import printable

    # an error may quote what a file said (a case's field, a record): never a terminal escape sequence
    print(f"gradspec: error: {printable(msg, keep=chr(10))}", file=sys.stderr)
    return EXIT_USAGE


def _split(text: str | None) -> list[str] | None:
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    return items or None


def _load_case(path: str):
    from . import caseio
    from .check import refuse_unpromoted

    try:
        case = caseio.load(path)
        refuse_unpromoted(case)  # a program torch refuses is the file's fault, not a bug in torch
        return case
    except caseio.CaseError as e:
        raise _UsageError(f"{path}: {e}" if not str(e).startswith(path) else str(e)) from None
