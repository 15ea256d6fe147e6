"""Hypotheses for a broadcast input's wrong gradient: the first slice of its copies, their mean where the sum
belongs, a sum over the wrong axes, alone or on several inputs at once (CONTRACT §8 ``broadcast-reduction``).

Private to :mod:`gradspec._private.vjp_patterns` (``classify`` tries these among its hypotheses); split out of it
to keep each file readable.

Example::

    >>> from gradspec._private.vjp_broadcast import _broadcast_axes
    >>> _broadcast_axes((1, 3), (2, 3), 0, 0)
    ([0], {0})
"""

from __future__ import annotations

import itertools

import numpy as np

from .vjp_fit import columns, explains, flat

__all__ = ["broadcast", "dim_arg"]


def broadcast(mini, node, spec, leaves, u, t, J, g, cols) -> tuple[str, float | None] | None:
    """(what to say, the factor) for a broadcast input whose gradient keeps the first slice of the broadcast
    copies, or their mean over some of the broadcast axes (``g.mean(0)`` where ``g.sum(0)`` belongs), while
    every other input's gradient is right."""
    out_shape = tuple(np.shape(g))
    core_in, core_out = _core_ranks(spec, len(node.inputs))
    if spec.name == "matmul" and not getattr(spec, "user", False):  # no signature (1-D operands): from the shapes
        ranks = [len(mini.shapes()[i]) for i in node.inputs]
        core_in, core_out = [min(r, 2) for r in ranks], sum(1 for r in ranks if r >= 2)
    learnt = core_in is None
    if learnt:
        if not getattr(spec, "user", False):
            return None
        # shapes learnt from the code (a torch Function's example call): an input whose shape broadcasts to
        # the output's is taken as broadcast elementwise; the hypotheses below must still fit every element
        core_in, core_out = [0] * len(node.inputs), 0
    uu, tt = flat(u, leaves), flat(t, leaves)
    off = 0
    each: list = []  # per leaf: None where its gradient is right, else (leaf, axes, kept, first slice, J^T·g)
    for l in leaves:
        size = l.value.size
        k = node.inputs.index(l.name)
        axes, kept = _broadcast_axes(l.shape, out_shape, core_in[k], core_out)
        if learnt and not _broadcasts_to(l.shape, out_shape):
            axes = []
        tl = np.asarray(t[l.name], dtype=np.float64).ravel()
        right = np.allclose(np.asarray(u[l.name], dtype=np.float64).ravel(), tl, rtol=1e-9, atol=0)
        each.append(None)
        if axes and not right:

            def only(block, at=off, n=size):  # J^T·g with this input's gradient replaced by ``block``
                h = tt.copy()
                h[at: at + n] = block
                return h

            mask = np.zeros(out_shape)
            mask[tuple(slice(0, 1) if a in axes else slice(None) for a in range(len(out_shape)))] = 1.0
            first = J.matrix[:, columns(J, [l])].T @ (g * mask).ravel()
            each[-1] = (l, axes, kept, first, tl)
            where = f"axis {axes[0]}" if len(axes) == 1 else f"axes {tuple(axes)}"
            if explains(uu, only(first), tt):
                return (f"input {l.name} {l.shape} is broadcast over {where} of the output {out_shape}, but its "
                        "gradient keeps only the first slice; sum over the broadcast axes (e.g. sum_to(g * ..., "
                        f"{l.name}.shape))"), None
            named = _averaged(l, out_shape, axes, kept, lambda n: explains(uu, only(tl / n), tt))
            if named is not None:
                return named
            other = _other_axes(J.matrix[:, columns(J, [l])], g, out_shape, axes, size,
                                lambda h: explains(uu, only(h), tt))
            if other is not None:
                return (f"input {l.name} {l.shape} is broadcast over {where} of the output {out_shape}, but its "
                        f"gradient is reduced over {_axes_words(other)} instead (g.sum({dim_arg(other)}) where "
                        f"g.sum({dim_arg(axes)}) belongs); torch's shape check lets that through only where the axes "
                        "have the same size, as here: reduce over the axes the input was broadcast over"), None
        elif not right:
            return None  # a wrong gradient of an input that is not broadcast: no broadcast mistake explains it
        off += size
    return _jointly(leaves, each, out_shape, uu, tt)


# Combinations of per-input hypotheses tried at most (each is one exact transformation of J^T·g and one
# ``explains``: microseconds; a node has a few inputs with a few broadcast axes each, far fewer combinations).
_JOINT_MOST = 512


def _jointly(leaves, each: list, out_shape: tuple, uu, tt) -> tuple[str, float | None] | None:
    """(what to say, the factor) where several broadcast inputs are wrong at once, each by the first slice of its
    copies or their mean over some of its broadcast axes (tryout9 F4: a backward that averages every broadcast
    input's gradient; testing one input at a time, the others' wrong gradients left every hypothesis unfit, and
    the common 1/2 read "scale 0.5 ... remove that factor")."""
    wrong = [e for e in each if e is not None]
    if len(wrong) < 2:
        return None
    options = []  # per leaf: [(its block, 1/n or None for the first slice, n or 0)]
    for e in each:
        if e is None:
            options.append([(None, None, 0)])
            continue
        l, axes, kept, first, tl = e
        subs = [c for r in range(1, len(axes) + 1) for c in itertools.combinations(axes, r)]
        ns = sorted({int(np.prod([out_shape[a] for a in sub])) for sub in subs} - {0, 1})
        options.append([(first, None, 0)] + [(tl / n, 1.0 / n, n) for n in ns])
    for combo in itertools.islice(itertools.product(*options), _JOINT_MOST):
        h = np.concatenate([_tt_block(tt, leaves, k) if b is None else b for k, (b, _, _) in enumerate(combo)])
        if explains(uu, h, tt):
            return _joint_words(each, combo, out_shape)
    return None


def _tt_block(tt, leaves, k: int):
    """Leaf ``k``'s part of the flat ``tt`` (leaves in order)."""
    off = sum(int(l.value.size) for l in leaves[:k])
    return tt[off: off + int(leaves[k].value.size)]


def _joint_words(each: list, combo, out_shape: tuple) -> tuple[str, float | None]:
    parts = []
    for e, (_, _, n) in zip(each, combo, strict=True):
        if e is None:
            continue
        l, axes, kept, _, _ = e
        if n:
            parts.append((l, _averaged(l, out_shape, axes, kept, lambda m, n=n: m == n)[0]))
        else:
            where = f"axis {axes[0]}" if len(axes) == 1 else f"axes {tuple(axes)}"
            parts.append((l, f"input {l.name} {l.shape} is broadcast over {where} of the output {out_shape}, but its "
                             f"gradient keeps only the first slice; sum over the broadcast axes (e.g. sum_to(g * ..., "
                             f"{l.name}.shape))"))
    # one sentence for every input where they say the same (a mean over the same axes): "inputs x1 (1,), x2 (1,) are"
    tails = {w.removeprefix(f"input {l.name} {l.shape} is ").replace(f"{l.name}.shape", "x.shape") for l, w in parts}
    if len(tails) == 1:
        who = ", ".join(f"{l.name} {l.shape}" for l, _ in parts)
        tail = tails.pop().replace("its gradient is", "their gradients are").replace("but its gradient keeps",
                                                                                      "but their gradients keep")
        text = f"inputs {who} are {tail}"
    else:
        text = "; ".join(w for _, w in parts)
    ns = {n for _, _, n in combo if n}
    factor = 1.0 / ns.pop() if len(ns) == 1 and all(n or b is None for b, _, n in combo) else None
    return text, factor


def _axes_words(axes) -> str:
    return f"axis {axes[0]}" if len(axes) == 1 else f"axes {tuple(axes)}"


def dim_arg(axes):
    return axes[0] if len(axes) == 1 else tuple(axes)


def _other_axes(Jl: np.ndarray, g, out_shape: tuple, axes: list, size: int, fits) -> list | None:
    """The output axes (as many as ``axes``, not those) whose sum of the per-element products J[k, src(k)] g[k]
    ``fits``: a broadcast input's gradient reduced over the wrong axis (``g.sum(1)`` for a bias broadcast over
    axis 0 -- only square shapes pass torch's shape check, and then nothing else named it).  Only for an
    elementwise broadcast (each output element reads at most one element of the input)."""
    if Jl.ndim != 2 or Jl.shape[0] != int(np.prod(out_shape)) or np.any(np.count_nonzero(Jl, axis=1) > 1):
        return None
    per = (Jl.sum(axis=1) * np.ravel(g)).reshape(out_shape)
    for sub in itertools.combinations(range(len(out_shape)), len(axes)):
        if list(sub) == list(axes):
            continue
        h = per.sum(axis=sub)
        if h.size == size and fits(h.ravel()):
            return list(sub)
    return None


def _broadcast_axes(in_shape, out_shape, core_in: int, core_out: int) -> tuple[list, set]:
    """The output axes an input is broadcast over (size > 1 there, absent or 1 in the input), and those of
    them the input keeps as size-1 axes."""
    lo_out = len(out_shape) - core_out
    lo_in = len(in_shape) - core_in
    axes, kept = [], set()
    for a in range(lo_out):
        j = a - (lo_out - lo_in)
        if out_shape[a] > 1 and (j < 0 or in_shape[j] == 1):
            axes.append(a)
            if j >= 0:
                kept.add(a)
    return axes, kept


def _broadcasts_to(in_shape, out_shape) -> bool:
    try:
        return tuple(np.broadcast_shapes(tuple(in_shape), tuple(out_shape))) == tuple(out_shape)
    except ValueError:
        return False


def _averaged(l, out_shape, axes, kept, fits) -> tuple[str, float] | None:
    """(what to say, 1/n) when the gradient of input ``l`` is its J^T·g divided by the number of copies along
    some of its broadcast ``axes`` (a mean over them where the sum belongs); ``fits(n)`` tests J^T·g / n."""
    subsets = [c for r in range(1, len(axes) + 1) for c in itertools.combinations(axes, r)]
    for sub in subsets:
        n = int(np.prod([out_shape[a] for a in sub]))
        if n < 2 or not fits(n):
            continue
        over = f"axis {sub[0]} (size {n})" if len(sub) == 1 else \
            f"axes {sub} (sizes {' x '.join(str(out_shape[a]) for a in sub)})"
        sizes = f"size of axis {sub[0]}" if len(sub) == 1 else f"product of the sizes of axes {sub}"
        dim = sub[0] if len(sub) == 1 else sub
        keep = ", keepdim=True" if set(sub) <= kept else ""
        same = [o for o in subsets if o != sub and int(np.prod([out_shape[a] for a in o])) == n]
        alt = (f" (or over {'axis ' + str(same[0][0]) if len(same[0]) == 1 else 'axes ' + str(same[0])}, of the "
               "same size: these numbers cannot tell)") if same else ""
        return (f"input {l.name} {l.shape} is broadcast over {over} of the output {tuple(out_shape)}, and its gradient "
                f"is the mean of g over that {'axis' if len(sub) == 1 else 'set of axes'}{alt} where the sum belongs: "
                f"1/{n} = 1/({sizes}) of J^T·g; sum over it instead (g.sum({dim}{keep}) where the backward has "
                f"g.mean({dim}{keep}))"), 1.0 / n
    return None


def _core_ranks(spec, arity: int):
    sig = getattr(spec, "signature", None)
    if sig:
        from .signature import parse

        try:
            ins, (out,) = parse(sig)
        except Exception:  # noqa: BLE001
            return None, None
        return [len(a) for a in ins], len(out)
    if getattr(spec, "broadcasting", False) or (spec.user and spec.shape_fn is None):
        return [0] * arity, 0
    return None, None
