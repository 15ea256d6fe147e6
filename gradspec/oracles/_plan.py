"""One plan per graph structure, shared by the exact oracles (reference, jacobian, torch) over every value set.

A small case's oracles spend more time in Python around the numerics (looking ops up, building per-node
objects, re-deriving the backward order and which tensors need gradients) than in the numerics: fuzz checks
~6-16 value sets per structure, and ``benchmarks/run.py`` times repeated calls on one case.  What depends on
the structure alone -- each node's op spec and input positions, the leaves' and roots' positions, and what
each oracle derives from them (``_reference_plan``, the jacobian's blocks, the torch replay) -- is kept in a
:class:`Plan`, found again by the structure's key; every value-dependent step runs afresh on every call.

The key (:func:`structure_key`) holds what ``_private.structure.same`` compares -- leaves (name, dtype,
shape, requires_grad), nodes (name, op *spec object*, inputs, params with their types: 1, 1.0 and True, or
0.0 and -0.0, are different keys), roots, seeds (None or dtype and shape), engine -- and is None, so that
no plan is used, for a case naming a user op or holding a param that is not plain data (an array, NaN).
The op spec itself (not its name) is in the key: an op registered again under a name is another structure.
Inside a ``gs.check`` scope the plan is found through ``_private.structure.once`` (no key built again).

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec.oracles import _plan
    >>> a, b = (gs.Case.build({"x": np.array([v, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    ...         for v in (0.5, 1.5))
    >>> _plan.plan(a) is _plan.plan(b), _plan.plan(a).inputs
    (True, [(0,)])
"""

from __future__ import annotations

import math

import numpy as np

from .._private import percase as _percase
from .._private import structure as _structure
from ..spec import registry as _registry

__all__ = ["Plan", "plan", "structure_key", "adopt"]

_PLANS: dict = {}
_MAX_PLANS = 512  # (cleared when full: a fuzz run meets new structures all the time, old ones rarely again)
_ONCE_KEY = "oracle-plan"  # (its key in a structure memo)


class Plan:
    """What the exact oracles share for one structure.  ``specs``: each node's op spec; ``inputs``: each
    node's input positions (leaves first, 0..nleaves-1, then nodes in order); ``roots``: the roots' positions;
    ``grad_leaves``: positions of the differentiable leaves; ``names``: the name at each position.  The other slots are each oracle's own,
    filled on its first call (None until then)."""

    __slots__ = ("names", "specs", "inputs", "nleaves", "roots", "grad_leaves", "reference", "torch", "jacobian",
                 "facts")

    def __init__(self, case) -> None:
        table = _registry.all_specs()
        pos = {}
        for i, l in enumerate(case.leaves):
            pos[l.name] = i
        self.nleaves = len(case.leaves)
        self.specs = [table[n.op] for n in case.nodes]
        self.inputs = []
        for k, n in enumerate(case.nodes):
            self.inputs.append(tuple([pos[i] for i in n.inputs]))
            pos[n.name] = self.nleaves + k
        self.roots = [pos[r] for r in case.roots]
        self.names = [l.name for l in case.leaves] + [n.name for n in case.nodes]
        self.grad_leaves = [i for i, l in enumerate(case.leaves) if l.differentiable]
        self.reference = self.torch = self.jacobian = None
        self.facts = {_ONCE_KEY: self}  # (the structure's lasting facts between checks: adopt)


def plan(case) -> Plan | None:
    """The plan of ``case``'s structure (built on first use), or None when the case has no plan (a user op,
    a param that is not plain data, an input that is no earlier leaf or node: the oracles' general path)."""
    if _percase.active(case) is not None:
        return _structure.once(case, _ONCE_KEY, lambda: _lookup(case))
    return _lookup(case)


def adopt(case) -> None:
    """``gs.check``, the case's scope open: its structure memo starts from the facts kept for its structure
    (``_private.structure.adopt``): the plan itself, and what the oracles and the rules found about the
    structure alone on an earlier check (which ops lack a torch mapping or a JVP rule, the largest tensor...)."""
    _structure.adopt(case, lambda: _facts(case))


def _facts(case) -> dict | None:
    try:
        p = _lookup(case)
    except Exception:  # noqa: BLE001 - a malformed case: no kept facts; the oracles and the rules report it
        return None
    return None if p is None else p.facts


def _lookup(case) -> Plan | None:
    key = structure_key(case)
    if key is None:
        return None
    got = _PLANS.get(key)
    if got is None:
        try:
            got = Plan(case)
        except (KeyError, TypeError):  # (a dangling input name, a root that names nothing: the general path says so)
            return None
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = got
    return got


def structure_key(case):
    """A hashable key equal for two cases exactly when their structures are the same (module docstring), or
    None when the case must not share a plan.  (One flat tuple, each part preceded by its length: cheaper to
    build and hash than nested ones, and as unambiguous.)"""
    if case.user_ops:
        return None
    roots = case.roots
    key = [case.engine, len(roots), *roots, len(case.leaves)]
    add = key.append
    for l in case.leaves:
        v = l.value
        if type(v) is not np.ndarray:
            return None
        rg = l.requires_grad
        add(l.name)
        add(v.dtype)
        add(v.shape)
        if rg is not True and rg is not False:  # np.bool_, 0/1, ...: the general path reads its truthiness (review F1:
            return None                          # folded into one key value, such flags shared one another's plans)
        add(rg)
    table = _registry.all_specs()
    add(len(case.nodes))
    for n in case.nodes:
        spec = table.get(n.op)
        if spec is None or spec.user:
            return None
        add(n.name)
        add(spec)
        ins = n.inputs
        add(len(ins))
        key.extend(ins)
        p = n.params
        if p:
            p = _freeze_params(p)
            if p is None:
                return None
            add(p)
        else:
            add(())
    for s in case.seeds:
        if s is None:
            add(None)
        elif type(s) is np.ndarray:
            add(s.dtype)
            add(s.shape)
        else:
            return None
    return tuple(key)


_SCALARS = (int, bool, str, type(None))
_PLAIN = frozenset(_SCALARS)


def _freeze_params(p: dict):
    """The params' names, value types and values, flat (types tell 1, 1.0 and True apart), or None."""
    out = []
    add = out.append
    for k, v in p.items():
        t = type(v)
        if t is tuple:
            for e in v:
                if type(e) is not int:
                    return _freeze_slow(p)
        elif t not in _PLAIN:
            return _freeze_slow(p)
        add(k)
        add(t)
        add(v)
    return tuple(out)


def _freeze_slow(p: dict):
    out = []
    for k, v in p.items():
        f = _freeze(v)
        if f is None:
            return None
        out.append((k, f))
    return ("slow", tuple(out))


def _freeze(v):
    """A hashable, type-tagged copy of a plain param value, or None (arrays, NaN, other objects)."""
    t = type(v)
    if t in _SCALARS:
        return (t, v)
    if t is float:
        return None if v != v else (t, v, math.copysign(1.0, v))
    if t is tuple or t is list:
        items = []
        for e in v:
            f = _freeze(e)
            if f is None:
                return None
            items.append(f)
        return (t, tuple(items))
    if t is dict:
        items = []
        for k, e in v.items():
            f = _freeze(e)
            if f is None or type(k) is not str:
                return None
            items.append((k, f))
        return (t, tuple(items))
    return None
