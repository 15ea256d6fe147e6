"""Hypothesis strategies for gradspec: shapes, values, seeds, graphs and whole cases.

Everything is generated *valid by construction* from the op declarations (``OpSpec``): each
node's op is drawn first, then its inputs are chosen among existing tensors whose shapes fit
(or new leaves are created with shapes drawn to fit), using the op's gufunc ``signature`` or,
failing that, its ``shape_fn`` + ``param_strategy`` checked with ``out_shape``.  Leaf values
come from ONE bytes choice per leaf, mapped into the domains of *every* slot that consumes the
leaf (``gradspec._private.values.Decoder``); after drawing, the case is evaluated and every
node's inputs are checked against the op's domain and ``kink_distance`` (ties, clamp bounds...)
with a relative margin of ``1e-3`` (far beyond the finite-difference reach).  Failures are
repaired, not rejected: the offending leaves are redrawn with tame values, and where the
structure itself is degenerate (``relu(relu(x))``, ``minimum(minimum(a, b), a)``) the node is fed
a fresh leaf instead; only the rare case that resists both is rejected.

Hard regions on purpose (``gradspec.strategies._hard``): by default a case is float64, float32
or mixed (float32 and float64 leaves meeting in an op that promotes, as torch does), and about
one case in twenty carries an exact tie or kink planted at one node (``relu``/``abs`` at 0, equal
elements of a ``max``, ``maximum(a, b)`` with ``a == b``, ``clamp`` at its bound) where only the
exact oracles compare (torch's tie conventions; finite differences and the jacobian step aside,
with the reason).  ``case.meta["hard"]`` names the planted node, ``case.meta["dtype"]`` the mix.

Shrinking goes towards fewer nodes, the simplest ops (the op list is sorted simple -> complex
and an op is drawn by index), inputs that reuse the latest tensor (a chain), smaller shapes,
float64, no planted tie, the value 1.0 and seeds of ones (or the implicit seed for numel-1 roots).

Example::

    >>> from hypothesis import given, settings
    >>> from gradspec import strategies as gst
    >>> @settings(max_examples=5, deadline=None)
    ... @given(gst.cases(ops=["mul", "sum", "exp"], max_nodes=3))
    ... def test(case):
    ...     assert set(case.ops) <= {"mul", "sum", "exp"}
    ...     case.evaluate()
    >>> test()
"""

from __future__ import annotations

from hypothesis.errors import InvalidArgument
from hypothesis.extra import numpy as hnp

from .._private import values as _values
from .._private.signature import SignatureError
from .._private.signature import parse as _parse_signature
from ._args import (
    _check_domain,
    _check_dtype,
    _check_int,
    _check_magnitudes,
    _check_order,
    _check_shape,
)
from ._cases import _cases, _seeds, _values_strategy
from ._graph import Graph, GraphLeaf, _config, _graphs
from ._groups import CaseGroup, _case_groups
from ._indices import indices_strategy as _indices_strategy
from ._ops import op_order, unusable_ops
from ._shapes import _shapes

__all__ = [
    "shapes",
    "broadcastable_shapes",
    "values",
    "seeds",
    "graphs",
    "cases",
    "case_groups",
    "indices",
    "CaseGroup",
    "op_order",
    "unusable_ops",
    "Graph",
    "GraphLeaf",
    "CHECK_MARGIN",
]

CHECK_MARGIN = _values.CHECK_MARGIN


def indices(like, *, low: int | None = None, high: int | None = None, values=None):
    """Torch int/bool tensors shaped like ``like`` (an example's index, segment id, target or mask), for
    ``gs.verify_torch_function(fn, example_inputs=(x, idx), args={1: gst.indices(idx)})``: the argument is drawn in
    every case instead of held at the example's value.

    Same shape and dtype as ``like``; values in ``like``'s observed range [min, max] (never outside: an index
    out of range is the caller's error, not a gradient bug), or in [``low``, ``high``], or from ``values`` (e.g.
    ``[-100, 0, 1, 2]`` for targets with an ignore_index of -100); a bool ``like`` gives masks.  Few distinct
    values per draw, so duplicates (and, about one draw in four, a constant tensor: all-False masks, one segment)
    are likely; shrinks towards ``like``'s own values.  (``gradspec.strategies._indices``.)

    Example::

        >>> import torch
        >>> from hypothesis import find
        >>> from gradspec import strategies as gst
        >>> find(gst.indices(torch.tensor([0, 2, 1])), lambda t: len(set(t.tolist())) < 3).shape
        torch.Size([3])
    """
    return _indices_strategy(like, low, high, values)


def shapes(*, min_dims: int = 0, max_dims: int = 4, min_side: int = 0, max_side: int = 5):
    """Array shapes with ``min_dims..max_dims`` axes of sizes ``min_side..max_side``.

    Size-1 axes are common (about 30% of sides), size 0 is rare; shrinks towards fewer axes of
    size 1.

    Example::

        >>> from hypothesis import given, settings
        >>> from gradspec import strategies as gst
        >>> @settings(max_examples=20)
        ... @given(gst.shapes(min_dims=1, max_dims=2, max_side=3))
        ... def test(shape):
        ...     assert 1 <= len(shape) <= 2 and all(0 <= s <= 3 for s in shape)
        >>> test()
    """
    _check_int("min_dims", min_dims)
    _check_int("max_dims", max_dims, ceiling=32)
    _check_order("min_dims", min_dims, "max_dims", max_dims)
    _check_int("min_side", min_side)
    _check_int("max_side", max_side)
    _check_order("min_side", min_side, "max_side", max_side)
    return _shapes(min_dims, max_dims, min_side, max_side, 16)


def broadcastable_shapes(
    shape: tuple = (),
    *,
    num_shapes: int | None = None,
    signature: str | None = None,
    min_dims: int = 0,
    max_dims: int | None = None,
    min_side: int = 1,
    max_side: int | None = None,
):
    """Shapes that broadcast with each other and with ``shape`` (``hypothesis.extra.numpy``'s
    ``mutually_broadcastable_shapes``): ``num_shapes`` of them (default 2), or one per input of a
    gufunc ``signature`` such as ``"(m,n),(n,p)->(m,p)"`` (core dims then match).

    Draws a ``BroadcastableShapes(input_shapes, result_shape)`` named tuple.

    Example::

        >>> import numpy as np
        >>> from hypothesis import given, settings
        >>> from gradspec import strategies as gst
        >>> @settings(max_examples=20)
        ... @given(gst.broadcastable_shapes((2, 3), num_shapes=3))
        ... def test(bs):
        ...     assert np.broadcast_shapes((2, 3), *bs.input_shapes) == bs.result_shape
        >>> test()
    """
    shape = _check_shape(shape)
    if signature is not None and num_shapes is not None:
        raise InvalidArgument(
            f"num_shapes={num_shapes!r} and signature={signature!r}: pass one of them (a signature fixes the count)"
        )
    if signature is not None:
        if not isinstance(signature, str):
            raise InvalidArgument(f"signature={signature!r} must be a string like '(m,n),(n,p)->(m,p)'")
        try:
            _parse_signature(signature)
        except SignatureError as e:
            raise InvalidArgument(f"signature={signature!r} is invalid: {e}") from None
    else:
        num_shapes = 2 if num_shapes is None else num_shapes
        _check_int("num_shapes", num_shapes, floor=1)
    _check_int("min_dims", min_dims)
    if max_dims is not None:
        _check_int("max_dims", max_dims, ceiling=32)
        _check_order("min_dims", min_dims, "max_dims", max_dims)
    _check_int("min_side", min_side)
    if max_side is not None:
        _check_int("max_side", max_side)
        _check_order("min_side", min_side, "max_side", max_side)
    kw = dict(base_shape=shape, min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)
    if signature is not None:
        return hnp.mutually_broadcastable_shapes(signature=signature.replace(" ", ""), **kw)
    return hnp.mutually_broadcastable_shapes(num_shapes=num_shapes, **kw)


def values(
    shape: tuple,
    domain=None,
    *,
    dtype: str = "float64",
    min_magnitude: float = 1e-3,
    max_magnitude: float = 1e3,
):
    """Float arrays of ``shape`` whose every element lies in ``domain`` (a Domain, or a list of
    Domains that must all hold), away from its edges and singular points by a relative margin.

    Elements mix simple values (exact 0 where the domain allows it, +-1, 0.5, 2 ... so exact
    repeats are common), moderate floats, tiny (``min_magnitude``) and large
    (``max_magnitude``) magnitudes, and negatives. Never NaN or Inf. Shrinks towards 1.0.

    Example::

        >>> import numpy as np
        >>> from hypothesis import given, settings
        >>> import gradspec as gs
        >>> from gradspec import strategies as gst
        >>> @settings(max_examples=20)
        ... @given(gst.values((2, 3), gs.domains.positive()))
        ... def test(a):
        ...     assert a.shape == (2, 3) and a.dtype == np.float64 and np.all(a > 0)
        >>> test()
    """
    shape = _check_shape(shape)
    doms = _check_domain(domain)
    dt = _check_dtype(dtype)
    _check_magnitudes(min_magnitude, max_magnitude)
    if _values.Allowed.of(doms, min_magnitude, max_magnitude).empty:
        raise InvalidArgument(
            f"domain={domain!r} has no value with magnitude 0 or in [min_magnitude={min_magnitude!r}, "
            f"max_magnitude={max_magnitude!r}]: widen the magnitudes or the domain"
        )
    return _values_strategy(shape, doms, dt, float(min_magnitude), float(max_magnitude))



def seeds(shape: tuple, *, dtype: str = "float64", implicit: bool = True, mixed_dtypes: bool = True):
    """Seeds (``gradient=`` arguments of ``backward``) for a root of ``shape``.

    Random, zeros, ones, one-hot (one row of the Jacobian), integer-valued; sometimes in the
    other float dtype (a float32 seed on a float64 root: backward casts it, as torch does);
    for numel-1 roots often ``None``, the implicit seed (when ``implicit``).  Shrinks towards
    ``None`` (numel 1) or ones.

    Example::

        >>> from hypothesis import given, settings
        >>> from gradspec import strategies as gst
        >>> @settings(max_examples=20)
        ... @given(gst.seeds((1, 1)))
        ... def test(seed):
        ...     assert seed is None or seed.shape == (1, 1)
        >>> test()
    """
    shape = _check_shape(shape)
    dt = _check_dtype(dtype)
    if not isinstance(implicit, bool):
        raise InvalidArgument(f"implicit={implicit!r} must be True or False")
    if not isinstance(mixed_dtypes, bool):
        raise InvalidArgument(f"mixed_dtypes={mixed_dtypes!r} must be True or False")
    return _seeds(shape, dt, implicit, mixed_dtypes)


def graphs(
    *,
    ops=None,
    min_leaves: int = 1,
    max_leaves: int = 4,
    min_nodes: int = 1,
    max_nodes: int = 10,
    min_roots: int = 1,
    max_roots: int = 3,
    dtype: str = "any",
    min_dims: int = 0,
    max_dims: int = 3,
    min_side: int = 0,
    max_side: int = 4,
    max_elements: int = 256,
):
    """Graph structures (:class:`Graph`: leaves with shapes, nodes, roots; no values), shape-valid
    by construction for every op in ``ops`` (names or OpSpecs; default: the whole usable table).

    ``dtype``: ``"float64"``, ``"float32"``, ``"mixed"`` (float32 and float64 leaves meeting in ops
    that promote) or ``"any"`` (the default: float64 60%, float32 20%, mixed 20%).

    Includes fan-out, the same tensor twice in one op (``x * x``), constant leaves, bool
    condition leaves for non-differentiable inputs (``where``'s condition), and 1-3 roots
    (numel-1 roots often, occasionally a leaf).  ``min_dims``..``max_side`` bound the leaves'
    shapes wherever the op's shape rule leaves a choice (conv1d's bias stays 1-D under
    ``min_dims=2``); ``max_elements`` bounds the total number of float leaf elements.

    Shapes come from the declarations: a gufunc ``signature`` (loop dims broadcast, core dims
    matched), else ``shape_fn`` + ``param_strategy`` checked with ``out_shape``; for 2-3 input
    ``shape_fn`` ops, which axes must match is learnt once from small probe shapes.  Every
    planned node is run once on tame values, so shapes/params where the op is undefined
    everywhere (``var`` of one element) are never used.

    Example::

        >>> from hypothesis import given, settings
        >>> from gradspec import strategies as gst
        >>> @settings(max_examples=10)
        ... @given(gst.graphs(ops=["add", "sum"], max_nodes=4))
        ... def test(g):
        ...     assert 1 <= len(g.nodes) <= 4 and all(n.op in ("add", "sum") for n in g.nodes)
        >>> test()
    """
    cfg = _config(ops, min_leaves, max_leaves, min_nodes, max_nodes, min_roots, max_roots, dtype, min_dims,
                  max_dims, min_side, max_side, max_elements)
    return _graphs(cfg)


def cases(
    *,
    ops=None,
    min_leaves: int = 1,
    max_leaves: int = 4,
    min_nodes: int = 1,
    max_nodes: int = 10,
    min_roots: int = 1,
    max_roots: int = 3,
    dtype: str = "any",
    min_dims: int = 0,
    max_dims: int = 3,
    min_side: int = 0,
    max_side: int = 4,
    max_elements: int = 256,
):
    """Full :class:`gradspec.Case` s: a graph from :func:`graphs` (same arguments), leaf values
    drawn in the domains of the ops they feed, and one seed per root (:func:`seeds`).

    Every case validates and evaluates to finite values, and every node's inputs lie in its
    op's domain at least ``CHECK_MARGIN`` (relative) from its kinks, ties and domain edges, at
    the actual intermediate values -- except one node in about twenty cases that sits *exactly* on
    a tie or kink on purpose (named in ``case.meta["hard"]``; see the module docstring).
    ``case.meta["dtype"]`` is the case's precision: float64, float32 or mixed.

    Example::

        >>> from hypothesis import given, settings
        >>> from gradspec import strategies as gst
        >>> import numpy as np
        >>> @settings(max_examples=10, deadline=None)
        ... @given(gst.cases(ops=["log", "mul"], max_nodes=3))
        ... def test(case):
        ...     env = case.evaluate()
        ...     assert all(np.all(env[n.inputs[0]] > 0) for n in case.nodes if n.op == "log")
        >>> test()
    """
    cfg = _config(ops, min_leaves, max_leaves, min_nodes, max_nodes, min_roots, max_roots, dtype, min_dims,
                  max_dims, min_side, max_side, max_elements)
    return _cases(cfg)


def case_groups(
    *,
    max_sets: int = 32,
    ops=None,
    min_leaves: int = 1,
    max_leaves: int = 4,
    min_nodes: int = 1,
    max_nodes: int = 10,
    min_roots: int = 1,
    max_roots: int = 3,
    dtype: str = "any",
    min_dims: int = 0,
    max_dims: int = 3,
    min_side: int = 0,
    max_side: int = 4,
    max_elements: int = 256,
):
    """A :class:`CaseGroup`: one graph drawn as :func:`cases` draws it (same arguments), then
    ``1..max_sets`` value sets for it (about 12 on average; fewer for large graphs, whose values
    would exceed Hypothesis' budget of choices per example), each a whole
    :class:`gradspec.Case` with its own leaf values, seeds and tie/kink plant, drawn exactly as
    :func:`cases` draws them.

    Drawing the graph costs more than checking a case; a group pays it once for several cases.
    Each value set is its own block of choices, so a group shrinks to the one set that fails
    (``gradspec fuzz`` checks groups; each set counts as one case).  Sets that come out identical
    are dropped; a set whose values resist repair is dropped (the group is rejected only when its
    first set is).

    Example::

        >>> from hypothesis import given, settings
        >>> from gradspec import strategies as gst
        >>> @settings(max_examples=5, deadline=None)
        ... @given(gst.case_groups(ops=["mul", "exp"], max_nodes=3, max_sets=4))
        ... def test(group):
        ...     assert 1 <= len(group) <= 4
        ...     assert len({tuple(n.op for n in c.nodes) for c in group}) == 1
        >>> test()
    """
    _check_int("max_sets", max_sets, floor=1)
    cfg = _config(ops, min_leaves, max_leaves, min_nodes, max_nodes, min_roots, max_roots, dtype, min_dims,
                  max_dims, min_side, max_side, max_elements)
    return _case_groups(cfg, int(max_sets))
