"""The scale of a claimed accuracy: per leaf element, the sum of the absolute values of the path terms that run
through the code under test (a user op, a torch Function's backward).

A claimed relative accuracy ``rtol`` (``verify_*(rtol=)``, ``gradspec fuzz --rtol``, ``case.meta["accuracy"]``)
says the op's derivative may be off by ``rtol`` of its own size.  That error reaches a leaf along every path
through the op, each path term ``g_out^T J_op J_in`` off by at most ``rtol`` x ``|g_out|^T |J_op| |J_in|``:
the sum of those bounds is what a leaf's gradient may be off by.  It is not ``rtol`` x the leaf's gradient,
which other paths may cancel (tryout9 #2: a one-step Newton ndtri accurate to 2.6e-5, declared at 1e-4, on
a path term of 10.5 beside another path's -9.1: the leaf's 1.43 allowed 1.4e-4 for an error of 2.7e-4 that
its claim allows up to 1.1e-3), nor ``|J|^T |seed|``, whose entries are already summed over the paths
inside each root.

:func:`claim_scale` computes it with a backward pass over absolute values, ``a_in += |J_node|^T a_out`` from
``a_root = |seed|``, carrying beside ``a`` the part ``e`` of paths that went through a user op (``e_in +=
|J_node|^T a_out`` at a user op's node, ``|J_node|^T e_out`` elsewhere); the leaves' ``e`` is the scale.  With an
engine under test (no user op) every node's backward is code under test: ``e`` is ``a`` at every node, the whole
``|J|^T |seed|`` (review15 #8: a claim was worth its atol only).
``|J_node|`` of gradspec's own op is its local Jacobian, one vjp of its rule per output element (:data:`ROWS`
at most per node; above, the scale is not sized: ``|vjp(a_out)|`` is |J^T a|, whose signs cancel inside a linear
layer -- 1e-17 of |J|^T a, review15 #2).  ``|J_node|`` of a user op comes from central differences of its forward
(:func:`_abs_fd`), never from its vjp or jvp: a tolerance is never sized by the code it judges.
``gs.check`` computes it only where a claim is in force and a comparison failed without it; where it cannot be
sized (:func:`claim_scale_why`), a comparison that passes only with the comparison's own scale is inconclusive,
with the reason, never agree (review15 #5).

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec._check_claim import claim_scale
    >>> op = gs.Op("doc_claim_exp", forward=np.exp, vjp=lambda g, x, out: (g * out,))
    >>> case = gs.Case.build({"x": np.zeros(1)}, [("u", "doc_claim_exp", ["x"], {}), ("w", "exp", ["x"], {})],
    ...                      ["u", "w"], [np.ones(1), -np.ones(1)])
    >>> claim_scale(case)["x"]  # the path terms 1 and -1 cancel; through the op: 1
    array([1.])
"""

from __future__ import annotations

import numpy as np

from . import engine as _E
from ._private.under_test import reaching_leaves, user_ops
from ._private.vjp_patterns import _sum_to
from .oracles.reference import build_engine_graph

__all__ = ["claim_scale", "claim_scale_why", "directional_allowance", "ROWS", "COLS"]

# Output elements up to which a node's |J| is built row by row (one vjp each, ~10 us on the small arrays a fuzz
# run draws): 4096 bounds the cost of a node at ~50 ms, paid only where a claim is in force and a comparison failed
# without it.  Above, the scale is not sized (no cheaper bound is sound: |vjp(a)| cancels, review15 #2).
ROWS = 4096
# Input elements of a user op's node up to which its |J| is measured (2 forward calls each): the full
# finite-difference oracle already pays ~3 evaluations of the whole case per leaf element up to 1000
# (oracles.fd, full_limit); above, the claim keeps its other scales.
COLS = 1000


def claim_scale(case) -> dict | None:
    """Per leaf (by name, an array of its shape): the sum of |path terms| through the code under test; None
    where it cannot be sized (:func:`claim_scale_why` says why)."""
    return claim_scale_why(case)[0]


def claim_scale_why(case) -> tuple[dict | None, str]:
    """(:func:`claim_scale`, "") or (None, why it cannot be sized here: "op X: more than 1000 input elements").
    Only the expected failures are caught (:class:`_NoScale`, and the user's forward raising, turned into one
    where it is called): an error of gradspec's own code here is a bug, raised, never "cannot be sized" (review15
    #1: a TypeError read as that let a user op 1000x beyond its claim agree)."""
    try:
        with np.errstate(all="ignore"):
            env = _graph(case)
            with _E.no_grad():
                return _backward_abs(case, env), ""
    except _NoScale as e:
        who = ", ".join(sorted(user_ops(case))) or "the engine under test"
        return None, f"the accuracy claim of {who} could not be sized here: {e}"


def _graph(case) -> dict:
    """The case's values on gradspec's engine; a user op's forward that raises is "cannot be sized"."""
    if not user_ops(case):
        return build_engine_graph(case)[0]
    try:
        return build_engine_graph(case)[0]
    except Exception as e:  # noqa: BLE001 - the code under test may raise anything; gradspec's own ops ran in the oracles
        raise _NoScale(f"a forward raised {type(e).__name__}") from e


def directional_allowance(case, claim, dirs: dict, grads: dict, through: dict | None) -> np.ndarray:
    """Per direction u (``dirs``: leaf name -> (k, *shape)): what a claim allows ``<u, grad>`` to be off by,
    ``sum |u| (atol + rtol x scale)`` over the elements of the leaves that reach the code under test
    (``_private.under_test``), ``scale`` the sum of |path terms| through it (``through``, :func:`claim_scale`)
    or, where that is not known (None or empty: not computed, or a forward it cannot difference), the element's
    own |grad| (``grads``), as the per-element comparison's claim.  A leaf reaching no code under test adds
    nothing: its path terms cannot carry the claimed error, and summed into a direction its |u| |grad| (1000
    elements of ~1 beside 12 through the op) let a user op 10x beyond its claim agree (session 14)."""
    rtol, atol = claim
    k = next(iter(dirs.values())).shape[0] if dirs else 0
    total = np.zeros(k)
    by_paths = bool(through)  # (no user op: the engine is under test, every path counts: through is |J|^T |seed|)
    for name in reaching_leaves(case):
        u = dirs.get(name)
        if u is None:
            continue
        u = np.abs(u.reshape(k, -1))
        if by_paths:
            scale = np.ravel(through[name])
        else:
            g = grads.get(name)
            scale = np.zeros(u.shape[1]) if g is None else np.abs(np.asarray(g, dtype=np.float64)).ravel()
        total += atol * u.sum(axis=1) + rtol * (u @ scale)
    return total


def _backward_abs(case, env) -> dict:
    specs = case._node_specs() or [case.spec(n.op) for n in case.nodes]
    a = {name: np.zeros(np.shape(t.data)) for name, t in env.items()}
    e = {name: np.zeros(np.shape(t.data)) for name, t in env.items()}
    for r, s in zip(case.roots, case.seeds):
        a[r] = a[r] + (1.0 if s is None else np.abs(np.asarray(s, dtype=np.float64)))
    engine = not user_ops(case)  # (an engine under test: every node's backward is code under test)
    for n, spec in zip(reversed(case.nodes), reversed(specs)):
        node = env[n.name].grad_fn
        if node is None or not a[n.name].any():
            continue
        user = getattr(spec, "user", False)
        through = a[n.name] if user or engine else e[n.name]
        pairs = _abs_fd(spec, n.params, node, a[n.name], through) if user else _abs_vjp(node, a[n.name], through)
        for i, pair in enumerate(pairs):
            if pair is not None:  # (None: an input with no gradient, review15 #1)
                name = n.inputs[i]
                a[name] = a[name] + pair[0]
                e[name] = e[name] + pair[1]
    return {l.name: e[l.name] for l in case.leaves}


def _abs_fd(spec, params, node, a: np.ndarray, e: np.ndarray) -> list:
    """``_abs_vjp`` of a user op's node, its |J| from central differences of its forward (one column per input
    element), never from its vjp: that is the code under test, and a vjp not linear in g (one that ignores g,
    or adds a term that does not scale with it) answers every basis vector with a dense row, a scale ~n times
    too large that hid a gradient 50% off (review14 #1).  The forward is the function being differentiated.
    Truncation and rounding errors of the columns (~h^2, ~eps/h relative) are far below any claim; at a kink a
    column averages the two pieces: a scale, not a value.  Above :data:`COLS` input elements the scale is not
    sized (raises :class:`_NoScale`): ``gs.check`` then never lets the comparison's own scale stand in silently --
    a comparison failing without the claim is inconclusive with the reason (review15 #5: that scale, larger, let an
    op 1000x beyond its claim agree)."""
    inputs = [t.data for t in node.inputs]
    if sum(x.size for x in inputs) > COLS:
        raise _NoScale(f"op {spec.name} has more than {COLS} input elements to difference its forward over")
    flat_a, flat_e = a.ravel(), e.ravel()
    mid = np.asarray(node.out.data, dtype=np.float64).ravel()
    acc: list = [None] * len(inputs)
    for i, x in enumerate(inputs):
        if not node.inputs[i].requires_grad or not np.issubdtype(x.dtype, np.floating):
            continue
        cols = np.empty((x.size, flat_a.size))
        h_unit = float(np.finfo(x.dtype).eps) ** (1 / 3)  # the step that balances truncation and rounding
        for j in range(x.size):
            h = h_unit * max(1.0, abs(float(x.flat[j])))
            cols[j] = _column(spec, params, inputs, i, j, h, mid)
        acc[i] = (cols @ flat_a).reshape(x.shape), (cols @ flat_e).reshape(x.shape)
    return acc


def _column(spec, params, inputs, i, j, h, mid) -> np.ndarray:
    """|d out / d inputs[i].flat[j]|: the smaller of two central differences (steps h and h/4), each one-sided
    where a side leaves the forward's domain.  A jump of the forward within the step grows the estimate as 1/h
    (a scale ~1e5 too large that would absorb any error): 4x at the smaller step refuses the scale."""
    wide, narrow = _central(spec, params, inputs, i, j, h, mid), _central(spec, params, inputs, i, j, h / 4, mid)
    wide, narrow = np.abs(wide), np.abs(narrow)
    floor = 64 * float(np.finfo(inputs[i].dtype).eps) * float(np.max(np.abs(mid), initial=1.0)) * 4 / h
    if np.any((narrow > 3 * wide) & (narrow > floor)):
        raise _NoScale(f"the forward of op {spec.name} jumps within {h:.3g} of its input")
    return np.minimum(wide, narrow)


def _central(spec, params, inputs, i, j, h, mid) -> np.ndarray:
    """d out / d inputs[i].flat[j] by differences of step ~h (float64, flat); ``mid``: the node's output."""
    def at(step):
        xs = [x.copy() if k == i else x for k, x in enumerate(inputs)]
        xs[i].flat[j] += step
        took = float(xs[i].flat[j]) - float(inputs[i].flat[j])  # (the step as rounded to the input's dtype)
        try:
            y = _E.apply(spec, [_E.Tensor(x) for x in xs], params).data
        except Exception as e:  # noqa: BLE001 - the user's forward, off its input by ~h: it may raise anything
            raise _NoScale(f"the forward of op {spec.name} raised {type(e).__name__} within {h:.3g} of its input") from e
        return np.asarray(y, dtype=np.float64).ravel(), took
    (up, hu), (down, hd) = at(h), at(-h)
    col = (up - down) / (hu - hd)
    if not np.all(np.isfinite(col)):
        col = np.where(np.isfinite(up), (up - mid) / hu, (mid - down) / hd)
        if not np.all(np.isfinite(col)):
            raise _NoScale(f"the forward of op {spec.name} is not finite around its input")
    return col


class _NoScale(Exception):
    """The path scale cannot be sized from an independent source (claim_scale_why: None and this message)."""


def _abs_vjp(node, a: np.ndarray, e: np.ndarray) -> list:
    """``(|J|^T a, |J|^T e)`` per input of ``node`` (None for an input with no gradient), ``a``, ``e`` >= 0."""
    out = node.out.data
    shapes = [np.shape(t.data) for t in node.inputs]
    if out.size > ROWS:
        raise _NoScale(f"node {node.spec.name} has more than {ROWS} output elements to take |J| over row by row")
    acc: list = [None] * len(shapes)
    flat_a, flat_e = a.ravel(), e.ravel()
    for k in np.flatnonzero(flat_a):
        basis = np.zeros(out.size, dtype=out.dtype)
        basis[k] = 1
        for i, row in enumerate(_vjp(node, basis.reshape(out.shape), shapes)):
            if row is not None:
                was = acc[i] or (0.0, 0.0)
                acc[i] = (was[0] + flat_a[k] * row, was[1] + flat_e[k] * row)
    return acc


def _vjp(node, g: np.ndarray, shapes: list) -> list:
    """``|vjp(g)|`` per input, each summed down to its input's shape (a broadcast gradient, as the engine does
    after the rule) in float64; None for an input the rule gives no gradient."""
    grads = _E._call_vjp(node, _E.Tensor(g), False)
    out = []
    for gi, shape in zip(grads, shapes):
        if gi is None:
            out.append(None)
            continue
        x = np.abs(np.asarray(gi.data if isinstance(gi, _E.Tensor) else gi, dtype=np.float64))
        x = x if x.shape == shape else _sum_to(x, shape)  # (the base layer's: ops.user.sum_to raises instead)
        if x is None:
            raise _NoScale("a gradient not of its input's shape")
        out.append(x)
    return out
