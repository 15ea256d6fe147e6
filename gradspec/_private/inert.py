"""Strings from user code written into generated Python (``repro.py``) as data, never as code.

Engine names, op names, leaf names, messages and param values come from the code under test or
from a case file; ``repro.py`` is a script the user is told to run.  :func:`literal` writes a value
as a Python literal that evaluates back to it (JSON-like values, numpy scalars and arrays), and
:func:`docstring` makes text safe inside a triple-quoted docstring (an engine whose name held three
double quotes used to close the docstring and put its own code into the script).
"""

from __future__ import annotations

import math
import re

import numpy as np

__all__ = ["literal", "docstring", "short_repr", "printable", "OneLinePrints", "UNPRINTED"]


def literal(v) -> str:
    """A Python expression for ``v`` made of literals only (``float('inf')`` aside); anything
    else becomes the string of its ``str()``, which is inert."""
    if v is None or isinstance(v, (bool, int, str)):
        return repr(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else f"float({repr(repr(v))})"
    if isinstance(v, np.ndarray):
        return f"np.array({literal(v.tolist())}, dtype={v.dtype.name!r})"
    if isinstance(v, np.generic):
        return literal(v.item())
    if isinstance(v, tuple):
        return "(" + "".join(literal(x) + ", " for x in v) + ")"
    if isinstance(v, list):
        return "[" + ", ".join(literal(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(x)}" for k, x in v.items()) + "}"
    return repr(str(v))


def docstring(text: str, limit: int = 300) -> str:
    r"""``text`` (clipped) escaped for the inside of a non-raw triple-quoted docstring: one line,
    ASCII, backslashes and quotes escaped, so nothing in it can end the string.

    >>> text = 'x' + '"' * 3 + ' + __import__("os").system("id")'
    >>> print(docstring(text))
    x\"\"\" + __import__(\"os\").system(\"id\")
    >>> '"' * 3 in docstring(text + "\n")
    False
    """
    s = str(text)[:limit].encode("unicode_escape").decode("ascii")
    return s.replace('"', '\\"')


def short_repr(v, n: int = 60) -> str:
    """``repr(v)`` in at most ``n`` characters: how a case-file error quotes the offending value (as
    text, never evaluated), whatever its size."""
    s = repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


# control, format (bidi overrides), surrogate, private-use, unassigned; line and paragraph separators
UNPRINTED = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))


def printable(text: str, keep: str = "") -> str:
    """``text`` from a file gradspec did not write (a report folder's name and discrepancy.json, summary.json, a
    case file's strings and an op's error quoting them) made safe to print on a terminal: each control or format
    character shown as its escape (ESC as backslash-x1b), so no newline forges a line and no escape sequence
    drives the terminal (tryout5 #8, redteam #6-#8).  ``keep``: characters left as they are (a newline in a
    multi-line text gradspec composed, whose lines are its own).

    >>> ESC, NL = chr(27), chr(10)
    >>> printable("d-1" + ESC + "[2J" + NL + "forged") == "d-1" + chr(92) + "x1b[2J" + chr(92) + "nforged"
    True
    >>> printable("line 1" + NL + "line 2", keep=NL).splitlines()
    ['line 1', 'line 2']
    """
    import unicodedata

    text = str(text)
    if text.isprintable():
        return text
    return _ESCAPED_BYTES.sub(_bytes_run, "".join(
        c if c == " " or c in keep or unicodedata.category(c) not in UNPRINTED or "\udc80" <= c <= "\udcff"
        else repr(c)[1:-1] for c in text))


_ESCAPED_BYTES = re.compile("[\udc80-\udcff]+")


def _bytes_run(m) -> str:
    """A run of surrogateescape'd bytes (a file name the locale could not decode: a non-ASCII report dir in a C
    locale) kept as it is when its bytes are UTF-8 for printable text, so the path prints as the user typed it
    (the command line's streams write those bytes back); any other run is shown escaped."""
    run = m.group()
    try:
        ok = run.encode("utf-8", "surrogateescape").decode("utf-8").isprintable()
    except UnicodeDecodeError:
        ok = False
    return run if ok else "".join(repr(c)[1:-1] for c in run)


class OneLinePrints:
    """A stream for ``print(..., file=OneLinePrints(sys.stdout))`` where each print is one line of text read
    from disk: what a print writes goes through :func:`printable` (a newline in a field included), print's own
    line end is kept.  The one way a summary made of report records reaches the terminal."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, s: str) -> int:
        return self.stream.write(s if s == "\n" else printable(s))

    def flush(self) -> None:
        self.stream.flush()
