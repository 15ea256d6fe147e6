"""Walking a graph given as ``name -> input names``: the one ancestor walk behind Case, Scenario and the
strategies' Graph (each keeps its own node type; the walk is the same)."""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

__all__ = ["ancestors"]


def ancestors(inputs: Mapping[str, Sequence[str]], start: Iterable[str]) -> set[str]:
    """Every name reachable from ``start`` through ``inputs`` (``start`` included; leaves have no entry).

    Example::

        >>> sorted(ancestors({"h": ["x"], "y": ["h", "w"]}, ["y"]))
        ['h', 'w', 'x', 'y']
    """
    seen: set[str] = set()
    todo = list(start)
    while todo:
        x = todo.pop()
        if x not in seen:
            seen.add(x)
            todo.extend(inputs.get(x, ()))
    return seen
