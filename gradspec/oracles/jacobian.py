"""The jacobian oracle: the dense Jacobian by forward mode, then ``J^T . seed``.

It never calls a VJP rule.  Each leaf that requires grad gets an identity block of tangent
directions (one direction per input element, ``n`` in all); the ops' JVP rules carry the
directions through the graph in batched passes (the chain rule over the DAG: a node used twice
receives both contributions because its tangent is the sum of its inputs' contributions as the
JVP rules combine them) -- one pass for small graphs, blocks of directions of at most
``MAX_TANGENT_ELEMENTS`` per tensor for large ones.  The tangent of root ``r`` is the block of
columns ``d r / d x`` of J; ``J^T . seed`` is the contraction with the seeds.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .._private import limits as _limits
from .._private import percase as _percase
from .._private import straightline as _straight
from .._private import structure as _structure
from .._private.kinks import exclusion
from .._private.prologue import oracle_call
from . import _plan
from ._base import Oracle, OracleError

__all__ = ["JacobianOracle", "jacobian"]


@dataclasses.dataclass
class Jacobian:
    """J (rows: root elements in order, columns: differentiable leaf elements in order)."""

    matrix: np.ndarray
    row_blocks: list[tuple[str, tuple]]  # (root, shape), in row order
    col_blocks: list[tuple[str, tuple]]  # (leaf, shape), in column order
    seed_vector: np.ndarray
    vjp: dict

    # Labels are for reports only: built on demand (per element, they cost more than J on small graphs).
    @property
    def row_labels(self) -> list[tuple[str, tuple]]:
        """(root, index) of every row."""
        return _labels(self.row_blocks)

    @property
    def col_labels(self) -> list[tuple[str, tuple]]:
        """(leaf, index) of every column."""
        return _labels(self.col_blocks)


def _labels(blocks):
    return [(name, tuple(int(i) for i in idx)) for name, shape in blocks for idx in np.ndindex(*shape)]


# Directions carried per forward-mode pass: at most 2**17 tangent elements (1 MiB of float64) per
# tensor, as for finite differences' batches (fd.MAX_BATCH_ELEMENTS): one pass over all n directions
# at n = 2000 held 16 MB per node and cost 20-28 ms; in blocks, a few ms.  Small graphs: one pass.
MAX_TANGENT_ELEMENTS = 2**17
# J itself is dense (kept for reports and for |J|^T|seed|, which needs |J| as well): at most 2**25
# elements (256 MiB of float64, twice that with |J|).  Above, the oracle refuses with the sizes rather
# than let an outer-product root of a few thousand inputs allocate tens of GB.
MAX_DENSE_ELEMENTS = 2**25


@oracle_call
def jacobian(case, max_inputs: int = 4096) -> Jacobian:
    p = _plan.plan(case)
    if p is not None:  # (what the structure fixes worked out once: _JacPlan)
        return _planned(case, p, max_inputs)
    leaves = case.grad_leaves()
    n = int(sum(l.value.size for l in leaves))
    if n > max_inputs:
        raise OracleError(f"jacobian: {n} input elements exceed the dense limit of {max_inputs}")
    values = case._evaluate(None, 0)
    seeds = case.seed_arrays(values)
    row_blocks = [(r, values[r].shape) for r in case.roots]  # (evaluate gives arrays)
    col_blocks = [(l.name, l.shape) for l in leaves]
    sizes = [values[r].size for r in case.roots]
    _check_dense(sum(sizes), n)
    J = np.zeros((sum(sizes), n))
    biggest = max([v.size for v in values.values()] + [1])
    chunk = max(1, MAX_TANGENT_ELEMENTS // biggest)
    for start in range(0, max(n, 1), chunk):
        stop = min(n, start + chunk)
        tangents = _propagate(case, values, _identity_block(case, start, stop), stop - start)
        row = 0
        for r, size in zip(case.roots, sizes):
            t = tangents.get(r)
            if t is not None:
                J[row : row + size, start:stop] = t.reshape(stop - start, size).T
            row += size
    v = np.concatenate([np.asarray(s, dtype=np.float64).ravel() for s in seeds]) if seeds else np.zeros(0)
    g = J.T @ v if J.size else np.zeros(n)
    if np.isnan(g).any():
        _refuse_at_infinity(case, values)
    out = {}
    off = 0
    for l in leaves:
        out[l.name] = g[off : off + l.value.size].reshape(l.shape).astype(l.value.dtype)
        off += l.value.size
    return Jacobian(J, row_blocks, col_blocks, v, out)


def _check_dense(rows: int, n: int) -> None:
    # A command line's --max-elements (a case read from a file) lowers the dense limit with it.
    dense = min(MAX_DENSE_ELEMENTS, _limits.current() or MAX_DENSE_ELEMENTS)
    if rows * n > dense:
        raise OracleError(
            f"jacobian: J would be {rows} x {n} = {rows * n:,} elements "
            f"({rows * n * 8 / 2**30:.1f} GiB), above the dense limit of {dense:,}"
            + (" (--max-elements)" if dense < MAX_DENSE_ELEMENTS else "")
        )


class _JacPlan:
    """What ``jacobian`` derives from a structure alone: ``n`` (columns), the grad leaves' positions, sizes,
    shapes and dtypes, the row and column blocks, the chunks of directions with each leaf's identity block
    (tiny ones kept, else ``_block``'s arguments), and the propagation steps: per node that receives a tangent, its index, spec,
    input positions and which of them carry one into the JVP rule (``_propagate``'s masking)."""

    __slots__ = ("n", "leaves", "row_blocks", "col_blocks", "sizes", "chunks", "steps", "calls", "straight")

    def __init__(self, case, p, vals: list) -> None:
        self.leaves = [(i, vals[i].size, case.leaves[i].shape, case.leaves[i].value.dtype, case.leaves[i].name)
                       for i in p.grad_leaves]
        self.n = n = int(sum(size for _, size, _, _, _ in self.leaves))
        self.row_blocks = [(case.roots[k], vals[r].shape) for k, r in enumerate(p.roots)]
        self.col_blocks = [(name, shape) for _, _, shape, _, name in self.leaves]
        self.sizes = [vals[r].size for r in p.roots]
        chunk = max(1, MAX_TANGENT_ELEMENTS // max([v.size for v in vals] + [1]))
        self.chunks = []
        for start in range(0, max(n, 1), chunk):
            stop = min(n, start + chunk)
            blocks, off = [], 0
            for i, size, shape, _, _ in self.leaves:  # (_identity_block, per leaf)
                lo, hi = max(start, off), min(stop, off + size)
                args, shape_k = (stop - start, size, lo - start, lo - off, hi - lo), (stop - start,) + shape
                # a tiny block kept here (read-only, copied per call: <= 4 KiB a leaf, whatever the number of
                # plans kept), others from _block's cache or built per call, as _identity_block does
                tiny = _block(*args).reshape(shape_k) if (stop - start) * size <= 512 else None
                blocks.append((i, tiny, args, shape_k, (stop - start) * size <= 4096))
                off += size
            self.chunks.append((start, stop, blocks))
        carries = [False] * len(vals)
        for i in p.grad_leaves:
            carries[i] = True
        self.steps = []
        for k, (spec, ins) in enumerate(zip(p.specs, p.inputs)):
            if any(carries[j] for j in ins):  # (else: no tangent, as _propagate)
                carries[p.nleaves + k] = True
                diff = spec.differentiable
                self.steps.append((k, spec, ins, tuple(diff is None or diff[i] for i in range(len(ins)))))
        self.calls = 0
        self.straight = None  # (the steps as straight-line code: _propagate_planned)


def _planned(case, p, max_inputs: int) -> Jacobian:
    """``jacobian`` of a case with a structure plan: the same arithmetic in the same order, by positions."""
    jp = p.jacobian
    n = jp.n if jp is not None else int(sum(l.value.size for l in case.grad_leaves()))
    if n > max_inputs:
        raise OracleError(f"jacobian: {n} input elements exceed the dense limit of {max_inputs}")
    if _percase.active(case) is not None:  # (gs.check: the forward shared with the other oracles and rules)
        values = case._evaluate(None, 0)
        vals = [values[name] for name in p.names]
    else:
        vals = [l.value for l in case.leaves]
        for k, (spec, node) in enumerate(zip(p.specs, case.nodes)):  # (Case._forward, by positions)
            vals.append(np.asarray(spec.forward(*[vals[j] for j in p.inputs[k]], **node.params)))
    # (Case.seed_arrays; an implicit seed's ones_like is np.ones of the root's shape and dtype: the same array)
    seeds = [np.ones(vals[r].shape, vals[r].dtype) if s is None else np.asarray(s).astype(vals[r].dtype)
             for s, r in zip(case.seeds, p.roots)]
    if jp is None:
        jp = p.jacobian = _JacPlan(case, p, vals)
    sizes = jp.sizes
    rows = sum(sizes)
    _check_dense(rows, n)
    J = np.zeros((rows, n))
    for start, stop, blocks in jp.chunks:
        tangents = _propagate_planned(case, p, jp, vals, blocks, stop - start)
        row = 0
        for r, size in zip(p.roots, sizes):
            t = tangents[r]
            if t is not None:
                J[row : row + size, start:stop] = t.reshape(stop - start, size).T
            row += size
    if len(seeds) == 1:  # (a fresh array either way: seeds above are new arrays, ravel a view of one)
        v = np.asarray(seeds[0], dtype=np.float64).ravel()
    else:
        v = np.concatenate([np.asarray(s, dtype=np.float64).ravel() for s in seeds]) if seeds else np.zeros(0)
    g = J.T @ v if J.size else np.zeros(n)
    if np.isnan(g).any():
        _refuse_at_infinity(case, dict(zip(p.names, vals)))
    out = {}
    off = 0
    for _, size, shape, dtype, name in jp.leaves:
        out[name] = g[off : off + size].reshape(shape).astype(dtype)
        off += size
    return Jacobian(J, list(jp.row_blocks), list(jp.col_blocks), v, out)


def _propagate_planned(case, p, jp, vals: list, blocks, k: int) -> list:
    """``_propagate`` by positions: the tangent of every position (None where none flows)."""
    tangents = [None] * len(vals)
    for i, tiny, args, shape, small in blocks:  # (_identity_block: a copy, a JVP rule may write to it)
        tangents[i] = tiny.copy() if tiny is not None else \
            (_block if small else _block.__wrapped__)(*args).copy().reshape(shape)
    nodes = case.nodes
    f = jp.straight
    if f is None:
        jp.calls += 1
        if jp.calls >= _straight.COMPILE_AFTER:
            f = jp.straight = _straight.tangent_function(jp.steps, p.nleaves, {"step": _jvp_step})
    if f is not None:
        return f(tangents, vals, nodes, k)
    base = p.nleaves
    for j, spec, ins, use in jp.steps:
        tangents[base + j] = _jvp_step(nodes[j], spec, [tangents[i] if u else None for i, u in zip(ins, use)],
                                       vals, ins, vals[base + j], k)
    return tangents


def _refuse_at_infinity(case, values) -> None:
    """A NaN in J^T.seed where the forward holds an infinity or a NaN is this witness's own 0 * inf or
    0 * NaN (a zero tangent direction, or a zero seed element, meeting an infinite or NaN partial: with
    x = [nan, 2], J[0, 1] = 0 * exp(nan) = NaN spread to the finite x[1]), not the code under test's:
    reverse mode never forms those products.  Say so instead of comparing it."""
    for name in [l.name for l in case.leaves] + [nd.name for nd in case.nodes]:
        a = values.get(name)
        if a is not None and np.asarray(a).dtype.kind == "f" and not np.isfinite(a).all():
            what = "infinite" if np.isinf(a).any() else "NaN"
            raise OracleError(f"jacobian: {name} is {what} at this point, so the explicit J.seed meets "
                              f"0 * {'inf' if what == 'infinite' else 'NaN'} (NaN) where reverse mode does not: "
                              "not compared here")


def _identity_block(case, start: int, stop: int) -> dict:
    """Tangents of the leaves for directions ``start:stop`` (direction j = input element j): each
    differentiable leaf gets the rows of the identity that fall in its range, constants None."""
    tangents: dict[str, np.ndarray | None] = {}
    off = 0
    for l in case.leaves:
        if not l.differentiable:
            tangents[l.name] = None
            continue
        size = l.value.size
        lo, hi = max(start, off), min(stop, off + size)
        block = _block if (stop - start) * size <= 4096 else _block.__wrapped__  # (cache small blocks only)
        t = block(stop - start, size, lo - start, lo - off, hi - lo).copy()  # (a JVP rule may write to it)
        tangents[l.name] = t.reshape((stop - start,) + l.shape)
        off += size
    return tangents


@functools.lru_cache(maxsize=512)
def _block(rows: int, cols: int, r0: int, c0: int, length: int) -> np.ndarray:
    """A (rows, cols) zero matrix with ones on the diagonal run (r0 + i, c0 + i), i < length (read-only;
    the same few small blocks serve every small case: at most 512 x 4096 elements are kept)."""
    t = np.zeros((rows, cols), dtype=np.float64)
    if length > 0:
        t[np.arange(r0, r0 + length), np.arange(c0, c0 + length)] = 1.0
    t.flags.writeable = False
    return t


def _propagate(case, values, tangents: dict, k: int) -> dict:
    """Carry the leaves' tangents (``k`` directions) through every node's JVP rule (in place in ``tangents``)."""
    specs = case._node_specs() or [None] * len(case.nodes)
    for node, spec in zip(case.nodes, specs):
        spec = spec or case.spec(node.op)
        names = node.inputs
        ins = [tangents[i] for i in names]
        for t in ins:
            if t is not None:
                break
        else:  # no input carries a tangent
            tangents[node.name] = None
            continue
        diff = spec.differentiable
        if diff is not None:  # (spec.input_differentiable, inlined)
            ins = [t if diff[j] else None for j, t in enumerate(ins)]
        tangents[node.name] = _jvp_step(node, spec, ins, values, names, values[node.name], k)
    return tangents


def _jvp_step(node, spec, ins: list, values, at, value, k: int) -> np.ndarray:
    """One node's tangent (``k`` directions): its JVP rule on the input tangents ``ins`` (None where none flows
    or the input is not differentiable), at its inputs ``values[i] for i in at`` and its output ``value``.  Both
    paths of ``jacobian`` take this step: the general one by names (``values`` a dict), the planned one by
    positions (a list)."""
    if spec.jvp is None:
        raise OracleError(f"jacobian: op {node.op!r} declares no JVP rule")
    # Tangents are carried in float64 whatever the case dtype: J is a reference value.
    f64 = np.float64
    prim = []
    for i in at:
        v = values[i]
        # (np.asarray of a float64 array is the array itself: skipped)
        prim.append(v if v.dtype.kind != "f" or v.dtype is _F64 and type(v) is np.ndarray else np.asarray(v, dtype=f64))
    out = value if value.dtype is _F64 and type(value) is np.ndarray else np.asarray(value, dtype=f64)
    t = np.asarray(spec.jvp(ins, *prim, out=out, **node.params), dtype=f64)
    want = (k,) + value.shape  # (evaluate gives arrays)
    if t.shape != want:
        raise OracleError(f"jacobian: JVP of {node.op!r} (node {node.name}) returned shape {t.shape}, expected {want}")
    return t


_F64 = np.dtype(np.float64)  # (an array's float64 dtype is this very object: `is` skips numpy's comparison)


def _no_jvp(case) -> list:
    specs = case._node_specs() or [case.spec(n.op) for n in case.nodes]
    return sorted({n.op for n, spec in zip(case.nodes, specs) if spec.jvp is None})


class JacobianOracle(Oracle):
    name = "jacobian"
    kind = "exact"
    max_inputs = 4096

    def applies(self, case):
        missing = _structure.once(case, "no_jvp", lambda: _no_jvp(case))  # (the value sets of a group share it)
        if missing:
            return False, f"jacobian: no JVP rule for op(s) {', '.join(missing)}"
        n = case.n_inputs
        if n > self.max_inputs:
            return False, f"jacobian: {n} input elements exceed the dense limit of {self.max_inputs}"
        why = exclusion(case, "jacobian")
        return (False, why) if why else (True, "")

    def vjp(self, case):
        return jacobian(case, self.max_inputs).vjp

    def jacobian(self, case) -> Jacobian:
        return jacobian(case, self.max_inputs)
