"""Which inputs of a mixed-precision node get a gradient its VJP rule computes through float32 arithmetic.

Why: torch's promotion (which the engine follows) computes ``atan2(x f64, y f32 [])`` in float64, but its
backward computes the float32 operand's own terms in float32 before they meet a float64 value: atan2's
``x * x + y * y`` squares y in float32, pow's ``b * a ** (b - 1)`` subtracts 1 from b in float32.  x's gradient
then carries a float32 rounding (1e-8 and 1.9e-7 relative in two soak cases) scaled by whatever follows (|log a|
in pow's), which the reference and torch share and an oracle computing its partials in float64 (the jacobian)
does not: held to float64 precision, two correct oracles disagree.  The forward's dtypes cannot tell
(``check._precision_flow`` saw only a float64 node); the rule's own arithmetic can.  ``float32_grads`` runs
the node's VJP once and follows, op by op, the values that float32 arithmetic on a float32 input computed.

A cast the rule makes on float64 values (a ``.float()`` planted in a float64 rule) is *not* counted: only
float32 arithmetic whose operands come from the node's own float32 inputs, which is the library's
precision, not a bug.  ``mul(x f64, c f32 [])``'s rule ``g * c`` promotes c exactly (float32 -> float64 is
exact) and rounds nothing: x's gradient stays held to float64 precision there.

Example::

    >>> import numpy as np
    >>> from gradspec.spec.registry import lookup
    >>> from gradspec._check_precision import float32_grads
    >>> x, y = np.array(1.0), np.array(6.2861, dtype=np.float32)
    >>> float32_grads(lookup("atan2"), [x, y], np.arctan2(x, y), {})
    frozenset({0, 1})
    >>> float32_grads(lookup("mul"), [x, y], x * y, {})
    frozenset()
"""

from __future__ import annotations

import numpy as np

__all__ = ["float32_grads", "mixed_float"]

_F32 = np.dtype(np.float32)


def mixed_float(dtypes) -> bool:
    """Whether ``dtypes`` (a node's inputs') hold both float32 and a wider float (the only nodes ``float32_grads``
    can find anything in)."""
    kinds = {np.dtype(d) for d in dtypes if np.dtype(d).kind == "f"}
    return _F32 in kinds and len(kinds) > 1


def float32_grads(spec, arrays, out, params) -> frozenset:
    """Indices of the inputs (``arrays``, in the dtypes the engine computes the node with; ``out`` its output)
    whose gradient the op's VJP rule, given a seed of ones, computes through float32 arithmetic on the node's
    float32 inputs.  Empty for user ops (their numpy code is not the engine's) and when the rule raises here
    (the oracles report that)."""
    from . import engine as E

    if spec.user or spec.vjp is None:
        return frozenset()
    inputs = [E.Tensor(np.array(a, copy=True)) for a in arrays]
    low = {id(t): t for t in inputs if t.data.dtype == _F32}  # float32 values from the float32 inputs
    rounded: dict = {}  # values computed through float32 arithmetic on them (kept alive: ids stay unique)
    original = E.apply

    def follow(s, ins, p):
        res = original(s, ins, p)
        ids = [id(t) for t in ins if isinstance(t, E.Tensor)]
        if any(i in rounded for i in ids):
            rounded[id(res)] = res
        elif res.data.dtype == _F32 and any(i in low for i in ids):
            low[id(res)] = res
            rounded[id(res)] = res  # float32 arithmetic rounds at float32's eps
        return res

    E.apply = follow
    try:
        with E.no_grad(), np.errstate(all="ignore"):
            o = E.Tensor(np.array(out, copy=True))
            grads = spec.vjp(E.Tensor(np.ones_like(o.data)), *inputs, out=o, **params)
    except Exception:  # noqa: BLE001 - the rule raising is the oracles' finding, not this question's
        return frozenset()
    finally:
        E.apply = original
    if not isinstance(grads, (tuple, list)):
        grads = (grads,)
    return frozenset(i for i, g in enumerate(grads) if g is not None and id(g) in rounded)
