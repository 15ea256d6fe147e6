"""What the value sets of one graph share: facts about a case's structure, computed once for all of them.

A campaign checks several value sets of one graph in a row (a ``CaseGroup``): the same leaves (names,
dtypes, shapes, requires_grad), nodes (names, ops, inputs, params), roots and seed layout; only leaf
values and seed values differ.  What depends on that structure alone (the precision each leaf's
gradient is computed at, which ops lack a torch mapping or a JVP rule, finite differences' watch
plan...) was computed again for every set, by every oracle and by the check.  ``share(cases)`` gives
cases whose per-case memo scopes (``percase.scope``) are open one *structure memo* per distinct
structure; ``once(case, key, fn)`` computes ``fn()`` once per structure memo.

Safety: two cases share a memo only when :func:`same` holds: every field above equal, param values of
the same types (1, 1.0 and True, or 0.0 and -0.0, are different structures), no user op (user code may
answer differently on two calls).  A case outside ``share`` gets a memo of its own for its scope, so
``once`` never answers from another structure; outside a scope nothing is kept.  What goes through
``once`` must be a function of the structure alone (never of values, seeds' values or ``case.meta``).

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec._private import percase, structure
    >>> a, b = (gs.Case.build({"x": np.array([v, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    ...         for v in (0.5, 1.5))
    >>> calls = []
    >>> with percase.scope(a), percase.scope(b):
    ...     memos = structure.share([a, b])
    ...     got = [structure.once(c, "n", lambda: calls.append(1) or len(c.nodes)) for c in (a, b)]
    >>> memos, got, len(calls), structure.same(a, b)
    (1, [1, 1], 1, True)
"""

from __future__ import annotations

import math

import numpy as np

from . import percase

__all__ = ["same", "same_value", "share", "once", "adopt", "LASTING"]

_KEY = object()  # the structure memo's key in a per-case memo
_KEPT = object()  # the key, in a per-case memo, of its structure's lasting facts (``adopt``)

# The facts kept between checks by ``adopt``: each a small immutable answer (a bool, an int, op names) from the
# structure alone.  (Not "fd_watch": it holds the first case's node objects; not the leaves' precisions: their
# float32 flow runs a VJP rule on the case's values.  Those are shared inside a group only, as before.)
LASTING = frozenset({"has_user_ops", "fd_jvp", "no_jvp", "no_torch", "fd_largest", "runs_user_code"})


def same(a, b) -> bool:
    """Whether ``a`` and ``b`` have one structure: leaves (name, dtype, shape, requires_grad), nodes (name,
    op, inputs, params with their types), roots, seeds (None, or dtype and shape), engine; and no node of
    either runs user code (a user op: ``OpSpec.user``, or an op named only by the case file)."""
    return _own_code(a) and (a is b or _own_code(b) and _same_own(a, b))


def _same_own(a, b) -> bool:
    """``same`` for two cases known to run only gradspec's own ops."""
    if a is b:
        return True
    if (a.engine != b.engine or a.roots != b.roots or len(a.leaves) != len(b.leaves)
            or len(a.nodes) != len(b.nodes) or len(a.seeds) != len(b.seeds)):
        return False
    for x, y in zip(a.leaves, b.leaves):
        u, v = x.value, y.value
        if type(u) is not np.ndarray or type(v) is not np.ndarray or x.name != y.name \
                or x.requires_grad is not y.requires_grad or u.dtype != v.dtype or u.shape != v.shape:
            return False
    for n, m in zip(a.nodes, b.nodes):
        if n.name != m.name or n.op != m.op or n.inputs != m.inputs or not _same_params(n.params, m.params):
            return False
    for s, t in zip(a.seeds, b.seeds):
        if s is None and t is None:
            continue
        if type(s) is not np.ndarray or type(t) is not np.ndarray or s.dtype != t.dtype or s.shape != t.shape:
            return False
    return True


def _own_code(case) -> bool:
    """Every node runs one of gradspec's own ops (never user code, which may answer differently twice)."""
    if case.user_ops:
        return False
    specs = case._node_specs()  # (looked up once per gs.check scope; None outside one)
    if specs is None:
        try:
            specs = [case.spec(n.op) for n in case.nodes]
        except Exception:  # noqa: BLE001 - an op that cannot be looked up: no sharing (the check says why)
            return False
    for spec in specs:
        if getattr(spec, "user", True):
            return False
    return True


def _same_params(p: dict, q: dict) -> bool:
    if len(p) != len(q):
        return False
    for k, v in p.items():
        w = q.get(k, _MISSING)
        if w is not v and not same_value(v, w):
            return False
    return True


_MISSING = object()
_PLAIN = (int, str, bool, type(None))


def same_value(v, w) -> bool:
    """Plain values of one type, equal (floats with the same sign: 0.0 and -0.0 differ; NaN never equal), or
    tuples of such -- values that are also JSON-written alike.  Anything else (arrays, lists, slices) counts
    as different: no sharing (and the in-flight file writes the set's own copy of the graph)."""
    t = type(v)
    if t is not type(w):
        return False
    if t is tuple:
        return len(v) == len(w) and all(x is y or same_value(x, y) for x, y in zip(v, w))
    if t is float:
        return v == w and math.copysign(1.0, v) == math.copysign(1.0, w)
    return t in _PLAIN and v == w


def share(cases) -> int:
    """Give each case (its per-case scope open) the structure memo of the first earlier case of the same
    structure (compared with the first case of each distinct structure met); returns how many memos."""
    firsts: list = []  # (case, its structure memo)
    for c in cases:
        memo = percase.active(c)
        if memo is None or not _own_code(c):
            continue  # (a case running user code gets a memo of its own from once(), when asked)
        for first, shared in firsts:
            if _same_own(c, first):
                memo[_KEY] = shared
                break
        else:
            shared = memo[_KEY] = {}
            firsts.append((c, shared))
    return len(firsts)


def once(case, key, fn):
    """``fn()``, computed once per structure memo of ``case`` (its group's, or its own for the scope of a
    case checked alone); every call outside a scope computes it."""
    memo = percase.active(case)
    if memo is None:
        return fn()
    shared = memo.get(_KEY)
    if shared is None:
        shared = memo[_KEY] = {}
    try:
        return shared[key]
    except KeyError:
        v = shared[key] = fn()
        if key.__class__ is str and key in LASTING:
            kept = memo.get(_KEPT)
            if kept is not None:
                kept[key] = v
        return v


def adopt(case, facts) -> None:
    """Start the structure memo of ``case`` (its scope open, no group's memo given by ``share``) from ``facts()``:
    the dict that holds its structure's lasting facts between checks (``oracles._plan``: kept beside the
    structure's oracle plan, found by the same key), or None for a case that has none (user code, a param that
    is not plain data).  What ``once`` computes for a key in ``LASTING`` is kept there for the next check of
    that structure; every other key lives for this scope only, as before.

    Safety: ``facts()`` must answer one dict per structure as :func:`same` defines it (``_plan``'s key holds
    the same fields), and a key goes into ``LASTING`` only where its answer is the structure's alone."""
    memo = percase.active(case)
    if memo is None or _KEY in memo:
        return
    kept = facts()
    if kept is not None:
        memo[_KEY] = dict(kept)
        memo[_KEPT] = kept
