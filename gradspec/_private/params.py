"""A node's params checked against what its op takes, before its normalizer or forward sees them.

A case built in Python or a hand-edited case file can name a param the op does not take (``tanh(x, x=...)``),
leave out a required one, or give a number as a string (``pow_scalar`` with ``exponent: "2"``).  Without a
check these reached the forward: a TypeError there read as the op's own failure (exit 3), or numpy computed
something else and the verdict blamed gradspec's rule.  ``problem`` names the param and the fix instead;
``gradspec.case`` raises it as a CaseError (exit 2 for ``gradspec replay``).

What an op takes is read from its normalizer's signature (the gate for the params a user writes), else from
its forward's (after the array inputs); a numpy ufunc forward takes none.  A signature with ``**kwargs``
leaves the names open.  Types are checked for gradspec's own ops only, where the table's defaults say what a
param is: a string where a number is expected is refused (a user op may take any value).

Example::

    >>> from gradspec.spec import registry
    >>> problem(registry.lookup("tanh"), {"x": 1})
    "op 'tanh' has no param 'x' (it takes no params)"
    >>> problem(registry.lookup("pow_scalar"), {"exponent": "2"})
    "op 'pow_scalar': param 'exponent' is the string '2'; give a number"
    >>> problem(registry.lookup("pow_scalar"), {}) + "."
    "op 'pow_scalar' needs param 'exponent'."
    >>> problem(registry.lookup("sum"), {"dim": None})
    ''
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

__all__ = ["problem"]

# Params of gradspec's ops that take strings although the signature gives no string default (conv1d's padding="same",
# norm's p="fro", einsum's subscripts, _cast's dtype).  A string anywhere else is a mistake: pow_scalar's exponent "2".
_STRING_PARAMS = frozenset({"subscripts", "dtype", "padding", "p", "reduction", "approximate"})


@functools.lru_cache(maxsize=None)
def _declared(spec) -> tuple:
    """(names the op takes, or None where a ``**kwargs`` leaves them open; required names; defaults)."""
    sources = []
    if spec.normalize is not None:
        sources.append((spec.normalize, 1))  # normalize(shapes, **params)
    if not isinstance(spec.forward, np.ufunc):
        sources.append((spec.forward, spec.arity or 0))
    names: set = set()
    defaults: dict = {}
    required: set | None = None
    for fn, inputs in sources:
        try:
            ps = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):  # a builtin without a signature: nothing is known
            return None, frozenset(), {}
        own, need, open_ = set(), set(), False
        for i, p in enumerate(ps):
            if p.kind is p.VAR_KEYWORD:
                open_ = True
            elif p.kind is p.VAR_POSITIONAL or (p.kind is not p.KEYWORD_ONLY and i < inputs):
                continue
            else:
                own.add(p.name)
                if p.default is p.empty:
                    need.add(p.name)
                else:
                    defaults.setdefault(p.name, p.default)
        names |= own
        if required is None:
            required = need  # the gate's (the normalizer's, when there is one): what it cannot default
        if not open_:
            return frozenset(names), frozenset(required), defaults
    if not sources:  # a ufunc with no normalizer: no params at all
        return frozenset(), frozenset(), {}
    return None, frozenset(required or ()), defaults


def problem(spec, params: dict) -> str:
    """What is wrong with ``params`` for ``spec`` ("" when nothing is seen)."""
    names, required, defaults = _declared(spec)
    if names is not None:
        unknown = [k for k in params if k not in names]
        if unknown:
            takes = ", ".join(sorted(n for n in names if not n.startswith("_"))) or "no params"
            return f"op {spec.name!r} has no param {unknown[0]!r} (it takes {takes})"
    missing = sorted(required - set(params))
    if missing:
        return f"op {spec.name!r} needs param {missing[0]!r}"
    if not spec.user:
        for k, v in params.items():
            if isinstance(v, str) and k not in _STRING_PARAMS and not isinstance(defaults.get(k), str):
                return f"op {spec.name!r}: param {k!r} is the string {v[:40]!r}; give a number"
    return ""
