"""Why oracles were skipped, counted by kind: reasons cut at a word boundary, node-specific parts
taken out into an example.

A campaign counts every skipped oracle under its reason (``summary.json["skipped"]``).  Those
reasons name the node, the element or the step where it happened ("exact tie/kink at v3 =
leaky_relu(x3): no derivative exists there ..."), so a long run had one row per node name for
what is one kind of skip.  :func:`group` folds them into one row per kind, with a count and an
example; :func:`word_cut` shortens a text without cutting a word in two (every count key and
every line of a report goes through it).

Example::

    >>> from gradspec._private.skips import group, word_cut
    >>> group({"jacobian: exact tie/kink at v3 = relu(x3): no derivative exists there": 6,
    ...        "jacobian: exact tie/kink at v1 = abs(x0): no derivative exists there": 2})
    [('jacobian: exact tie/kink at a node: no derivative exists there', 8, 'v3 = relu(x3)')]
    >>> fold_numbers({"jacobian: flat within 0.0148, changes by 0.5": 3, "jacobian: flat within 0.011, changes by 0.375": 1})
    {'jacobian: flat within 0.0148, changes by 0.5': 4}
    >>> word_cut("no derivative exists there (only the exact oracles compare)", 40)
    'no derivative exists there (only the…'
"""

from __future__ import annotations

import re

__all__ = ["word_cut", "kind_of", "group", "fold_numbers", "key", "KEY_WIDTH", "FOLD_AT"]

# Longest count key kept (summary.json["skipped"], inconclusive reasons): the reason of a case that
# compared nothing joins every oracle's (a few sentences each), so keys stay whole up to this; only an
# oracle's long error text is cut (its start says what it was), and then the kinds may not merge.
KEY_WIDTH = 1000

_NODE = r"[A-Za-z_][\w.]* = [A-Za-z_][\w.]*\([^()]*\)"  # "v3 = leaky_relu(x3)", as check.py names a node
_PARTS = [
    (re.compile(rf"{_NODE}(?:; {_NODE})*(?: \.\.\.)?"), "a node"),
    (re.compile(r"node '[^']*' \([\w.]+\)"), "a node"),  # "node 'v2' (abs)", as finite differences name one
    (re.compile(r"(?<![\w'])'?[A-Za-z_]\w*'?\[[\d, ]*\]"), "an element"),  # x0[1, 2] / 'x0'[1]
    (re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*(?:e[-+]?\d+)?|\d+e[-+]?\d+)(?![\w.])"), "…"),  # 1.81e-07, 0.5
]


def word_cut(text: str, width: int = KEY_WIDTH) -> str:
    """``text`` in at most ``width`` characters, cut at a word boundary (never mid-word), "…" when cut."""
    text = str(text)
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    space = cut.rfind(" ")
    if space > width // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:—-") + "…"


def key(name: str, why: str) -> str:
    """The count key of oracle ``name`` skipped for ``why``: ``"name: why"`` with the oracle's own name
    at the start of ``why`` said once (``jacobian: jacobian: ...`` before), whole up to :data:`KEY_WIDTH`.

    >>> key("jacobian", "jacobian: exact tie/kink at v0 = abs(x0)")
    'jacobian: exact tie/kink at v0 = abs(x0)'
    >>> key("finite-differences", "finite differences: exact tie/kink at v0 = abs(x0)")
    'finite-differences: exact tie/kink at v0 = abs(x0)'
    """
    why = str(why)
    for own in (f"{name}: ", f"{name.replace('-', ' ')}: "):
        if why.startswith(own):
            why = why[len(own):]
            break
    return word_cut(f"{name}: {why}")


def kind_of(reason: str, numbers: bool = True) -> tuple[str, str]:
    """(the reason with its node-, element- and number-specific parts replaced, those parts as an example);
    ``numbers=False`` leaves the numbers in place (what a reader is shown: "within 1.2e-05 of", not "within …")."""
    found: list[str] = []

    def keep(placeholder):
        def sub(m):
            found.append(m.group(0))
            return placeholder
        return sub

    kind = reason
    for pattern, placeholder in _PARTS if numbers else _PARTS[:-1]:
        kind = pattern.sub(keep(placeholder), kind)
    return kind, "; ".join(dict.fromkeys(found))  # each part once, in order


# A campaign's reason counter is folded (``fold_numbers``) whenever it holds more than this many reasons:
# reasons that differ only in a measured number (a step, a size of change) made one entry per case, 6881
# entries and 2.1 MB of summary.json after 120 s of one op (tryout6 #12).
FOLD_AT = 256
# any number standing alone, integers too ("at all 29 points", "at 25"), not a part of a name ("x0", "float32")
_ANY_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?(?![\w.])")


def fold_numbers(counts) -> dict:
    """``{reason: count}`` with reasons that differ only in their numbers merged: each such kind is kept under
    its most frequent reason (numbers in place, as a reader is shown it), with the kind's total count; reasons
    naming different nodes or elements stay apart (summary.json lists where; ``group`` folds those for the
    terminal).  Most frequent first."""
    kinds: dict[str, list] = {}
    for reason, n in sorted(dict(counts).items(), key=lambda kv: -kv[1]):
        row = kinds.setdefault(_ANY_NUMBER.sub("…", str(reason)), [str(reason), 0])
        row[1] += int(n)
    return dict(sorted((tuple(r) for r in kinds.values()), key=lambda r: -r[1]))


def group(skipped: dict) -> list[tuple[str, int, str]]:
    """``[(kind, count, example), ...]`` from ``{reason: count}``, most frequent kind first.  Reasons that
    differ only in their node, element and numbers are one kind; it is shown as its most frequent reason,
    numbers in place (a reason with "…" for each number, and the numbers apart, read as a riddle: tryout4
    #14), its node and element parts the example ("" when the reason names nothing specific)."""
    kinds: dict[str, list] = {}
    for reason, n in sorted((skipped or {}).items(), key=lambda kv: -kv[1]):
        kind = kind_of(str(reason))[0]
        row = kinds.setdefault(kind, [0, *kind_of(str(reason), numbers=False)])
        row[0] += int(n)
    return sorted(((shown, n, ex) for n, shown, ex in kinds.values()), key=lambda r: -r[1])
