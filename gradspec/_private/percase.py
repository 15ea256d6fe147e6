"""Values computed once per case while one ``gs.check`` runs, shared by the oracles and the verdict rules.

A case's forward values, its nodes' op specs and its exact ties/kinks do not change while it is being
checked, yet several oracles and rules need them (the jacobian and the kink test both evaluate the
forward; finite differences and the jacobian both ask for the kinks): on the small graphs that
dominate a fuzz run, computing them again cost more than some oracles do.  ``scope(case)`` opens a
memo for that one case object; ``once(case, key, fn)`` returns ``fn()``, computed at most once per
scope.  Outside a scope (an oracle called on its own) nothing is kept, so a case edited between two
calls is never answered from stale values.  A computation that raises is not kept (the next caller
raises afresh, with its own traceback).

Example::

    >>> from gradspec._private import percase
    >>> calls = []
    >>> class C: pass
    >>> c = C()
    >>> with percase.scope(c):
    ...     a = percase.once(c, "x", lambda: calls.append(1) or 42)
    ...     b = percase.once(c, "x", lambda: calls.append(1) or 42)
    >>> a, b, len(calls), percase.once(c, "x", lambda: 7)
    (42, 42, 1, 7)
"""

from __future__ import annotations

__all__ = ["scope", "once", "active", "offer_forward", "take_forward"]


class _Memo:
    __slots__ = ("case", "depth", "data")

    def __init__(self, case) -> None:
        self.case = case
        self.depth = 0
        self.data: dict = {}


_SCOPES: dict[int, _Memo] = {}


class scope:
    """Keep what ``once`` computes for ``case`` until the (outermost) scope of that case ends.
    (A class rather than a generator context manager: it is entered on every ``gs.check``.)"""

    __slots__ = ("_case", "_key", "_memo")

    def __init__(self, case) -> None:
        self._case = case

    def __enter__(self) -> dict:
        case = self._case
        self._key = key = id(case)
        m = _SCOPES.get(key)
        if m is None or m.case is not case:
            m = _SCOPES[key] = _Memo(case)
        self._memo = m
        m.depth += 1
        return m.data

    def __exit__(self, *exc) -> bool:
        m = self._memo
        m.depth -= 1
        if not m.depth and _SCOPES.get(self._key) is m:
            del _SCOPES[self._key]
        return False


def active(case) -> dict | None:
    """The memo of ``case`` while a scope of it is open, else None."""
    m = _SCOPES.get(id(case))
    return m.data if m is not None and m.case is case else None


def once(case, key, fn):
    """``fn()``, computed once per scope of ``case`` (every call outside a scope computes it)."""
    m = _SCOPES.get(id(case))
    if m is None or m.case is not case:
        return fn()
    data = m.data
    try:
        return data[key]
    except KeyError:
        v = data[key] = fn()
        return v


# The forward values a draw computed for a case's final values (the value check of
# ``gradspec.strategies``: every node's ``np.asarray(spec.forward(*args, **params))`` on the very
# leaf arrays the case holds, with the same params), kept on the case until its first check takes them.
_DRAWN = "_gradspec_drawn_forward"


def offer_forward(case, env: dict) -> None:
    """Give ``case`` the forward ``env`` (leaf and node name -> array) computed for its values when it was
    drawn; :func:`take_forward` hands it on once."""
    setattr(case, _DRAWN, env)


def take_forward(case) -> dict | None:
    """The forward offered for ``case`` (removed from it: taken once), or None -- also when any leaf no
    longer holds the very array object that forward was computed from, or a node's value is missing."""
    env = case.__dict__.pop(_DRAWN, None) if hasattr(case, "__dict__") else None
    if env is None:
        return None
    out = {}
    for leaf in case.leaves:
        v = env.get(leaf.name)
        if v is not leaf.value:
            return None
        out[leaf.name] = v
    for n in case.nodes:
        v = env.get(n.name)
        if v is None:
            return None
        out[n.name] = v
    return out
