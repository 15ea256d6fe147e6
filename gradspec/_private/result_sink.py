"""Where finished ``verify_*`` results go besides the caller: the report dir of a test session.

``verify_op`` / ``verify_torch_function`` / ``verify_engine`` sit below the report layer, so they
cannot write HTML themselves; they call :func:`emit` with their result, and a writer registered
by a higher layer (``gradspec.testing``, imported by the pytest plugin) decides whether and where
to write it (``--gradspec-report-dir`` / ``GRADSPEC_REPORT_DIR``).  A writer that fails never
changes the result: the error is attached as a note.

Example::

    >>> from gradspec._private import result_sink
    >>> seen = []
    >>> result_sink.register("demo", seen.append)
    >>> result_sink.emit("a result")
    >>> seen
    ['a result']
    >>> result_sink.unregister("demo")
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["register", "unregister", "emit", "suppressed"]

_WRITERS: dict[str, Callable[[Any], None]] = {}
_SUPPRESS = [0]


def register(name: str, writer: Callable[[Any], None]) -> None:
    _WRITERS[name] = writer


def unregister(name: str) -> None:
    _WRITERS.pop(name, None)


class suppressed:
    """``with suppressed():`` results emitted inside are not written (the caller writes them itself)."""

    def __enter__(self):
        _SUPPRESS[0] += 1

    def __exit__(self, *exc):
        _SUPPRESS[0] -= 1


def emit(result: Any) -> None:
    """Hand a finished result to every registered writer (none: nothing happens)."""
    if _SUPPRESS[0]:
        return
    for name, writer in list(_WRITERS.items()):
        try:
            writer(result)
        except Exception as e:  # noqa: BLE001 - writing a report must not change the verdict
            note = getattr(result, "note", None)
            if callable(note):
                note(f"could not write the result through {name}: {type(e).__name__}: {e}")
