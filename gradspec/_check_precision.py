"""The precision each leaf's gradient is compared at (``leaf_precisions``: float32 where float32 arithmetic
reaches it), and which inputs of a mixed-precision node get a gradient its VJP rule computes through float32
arithmetic (``float32_grads``, which that flow asks).

Why: torch's promotion (which the engine follows) computes ``atan2(x f64, y f32 [])`` in float64, but its
backward computes the float32 operand's own terms in float32 before they meet a float64 value: atan2's
``x * x + y * y`` squares y in float32, pow's ``b * a ** (b - 1)`` subtracts 1 from b in float32.  x's gradient
then carries a float32 rounding (1e-8 and 1.9e-7 relative in two soak cases) scaled by whatever follows (|log a|
in pow's), which the reference and torch share and an oracle computing its partials in float64 (the jacobian)
does not: held to float64 precision, two correct oracles disagree.  The forward's dtypes cannot tell
(``_precision_flow`` saw only a float64 node); the rule's own arithmetic can.  ``float32_grads`` runs
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

from . import engine as _engine
from ._private import dtypes as _dtypes
from ._private import structure as _structure
from .case import Case, CaseError

__all__ = ["case_dtype", "float32_grads", "leaf_precisions", "mixed_dtypes", "mixed_float", "refuse_unpromoted", "unpromoted"]

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


def case_dtype(case: Case) -> str:
    """The precision the case's gradients are compared at: float32 if any differentiated leaf's is (below)."""
    return "float32" if "float32" in leaf_precisions(case).values() else "float64"


def leaf_precisions(case: Case) -> dict:
    """Per differentiated leaf, the precision its gradient is computed at.  "float32" where the leaf is float32 (its
    gradient is cast to it), or where a node downstream of it has an input computed in float32 from a
    differentiated leaf: its gradient then flows back through float32 arithmetic, or through a VJP that uses a
    float32-rounded value which finite differences (evaluating perturbed leaves in float64) do not round.  Else
    "float64": a float32 leaf beside it does not loosen its comparison (x64 * c32 is float64; x's gradient held to
    float32 precision hid a 3e-6 bug in x's VJP).

    A float32 *constant* sets float32 precision only where a node on a differentiated leaf's path computes in
    float32: torch's promotion (which the engine follows) lets a dimensioned float32 tensor win over a 0-dim
    float64 one (pow(x2 f32 [3, 4], x3 f64 []) is float32), and such a gradient is rounded in float32.  A float32
    constant that never meets a differentiated path (e.g. through a user op on its own) rounds nothing FD or the
    VJPs see: counting it hid a 1e-5 bug at float32 precision."""
    diff = [l for l in case.leaves if l.requires_grad]
    out = {l.name: "float32" if l.value.dtype == _F32 else "float64" for l in diff}
    if not any(l.value.dtype == _F32 for l in case.leaves) or "float64" not in out.values():
        return out  # (no float32 anywhere, or every differentiated leaf float32 already: the flow only adds float32)
    try:
        values = case.evaluate()  # (the per-case memo's forward, shared with the oracles)
    except Exception:  # the code under test raised: the oracles report it; the loosest precision meanwhile
        return dict.fromkeys(out, "float32")
    # (dtypes and ranks: the value sets of a group share the answer, keyed by the ranks the forward gave)
    ranks = tuple([np.ndim(v) for v in values.values()])
    return dict(_structure.once(case, ("leaf_precisions", ranks), lambda: _precision_flow(case, values, diff, out)))


def _precision_flow(case: Case, values: dict, diff: list, out: dict) -> dict:
    """``leaf_precisions``' answer for a case with a float32 leaf, from the forward's ``values`` (their ranks)."""
    # Each node's dtype as the engine computes it (torch's rules, _private/dtypes.promote), not numpy's: the
    # case's numpy forward would give pow(x2 f32 [3, 4], x3 f64 []) float64.  Stand-ins carry dtype and rank only.
    dt = {l.name: l.value.dtype for l in case.leaves}
    upstream = {l.name: frozenset((l.name,)) for l in diff}  # node -> the differentiated leaves it depends on
    rounded = set()  # nodes computed in float32 from a differentiated leaf, or depending on one
    for n in case.nodes:
        spec = case.spec(n.op)
        ins = [np.empty((0,) * np.ndim(values[i]), dt.get(i, np.float64)) for i in n.inputs]
        floats = [a.dtype for a in _dtypes.promote(spec, ins) if a.dtype.kind == "f"]
        dt[n.name] = np.result_type(*floats) if floats else np.dtype(np.float64)
        up = frozenset().union(*(upstream.get(i, ()) for i in n.inputs))
        if up:
            upstream[n.name] = up
        if up and dt[n.name] == _F32 or any(i in rounded for i in n.inputs):
            rounded.add(n.name)
            for leaf in up:
                out[leaf] = "float32"
        elif up and mixed_float([dt[i] for i in n.inputs]):
            # a float64 node whose rule computes its float32 operand's terms in float32 (_check_precision)
            arrays = [np.asarray(values[i], dtype=dt.get(i, np.float64)) for i in n.inputs]
            out_value = np.asarray(values[n.name], dtype=dt[n.name])
            for k in float32_grads(spec, arrays, out_value, n.params):
                for leaf in upstream.get(n.inputs[k], ()):
                    out[leaf] = "float32"
    return out


def mixed_dtypes(leaves) -> bool:
    """Whether the leaves hold more than one dtype (the common case, one dtype object shared by every leaf, is
    told by identity; a set of dtypes hashes each, a microsecond a check)."""
    if not leaves:
        return False
    d0 = leaves[0].value.dtype
    for l in leaves:
        if l.value.dtype is not d0:
            return len({l.value.dtype for l in leaves}) > 1
    return False


def refuse_unpromoted(case: Case) -> None:
    """Raise ``CaseError`` if torch refuses the case's forward (see :func:`unpromoted`): a case file's fault."""
    why = unpromoted(case)
    if why:
        raise CaseError(why)


def unpromoted(case: Case) -> str | None:
    """Why torch refuses to run the case's forward, or None: an op that does not promote dtypes
    (``OpSpec.same_dtype``: mm, matmul, linear, conv1d, einsum) gets inputs of different dtypes (an int64
    constant next to a float64 leaf in ``mm``, say). numpy would promote and compute, so finite differences
    and the jacobian would return gradients and torch's refusal would read as a bug in torch."""
    nodes = case.nodes
    last = next((k for k, n in enumerate(nodes) if case.spec(n.op).same_dtype), None)
    if last is None:
        return None
    for k in range(last + 1, len(nodes)):  # the last such op: only they refuse, and no node after it is run
        try:
            if case.spec(nodes[k].op).same_dtype:
                last = k
        except Exception:  # noqa: BLE001 - the forward below would stop at this node (None) if it got there
            break
    env = {l.name: _engine.Tensor(l.value) for l in case.leaves}
    with _engine.no_grad():
        for n in nodes[: last + 1]:
            try:
                env[n.name] = _engine.apply(case.spec(n.op), [env[i] for i in n.inputs], n.params)
            except _engine.DtypeMismatchError as e:
                return f"node {n.name!r} = {n.op}({', '.join(n.inputs)}): torch refuses this case's forward: {e}"
            except Exception:  # noqa: BLE001 - any other failure is the oracles' to report, case by case
                return None
    return None
