"""Evidence from other input points: is a factor constant, is a wrong gradient wrong only in float32.

Private to :mod:`gradspec.diagnose`.  A shrunk case often has one element, or a row of two whose gradients are
always multiples of [1, -1]: there "u is c × J^T·g" fits whatever ``u`` is, and a fresh upstream gradient at the
same inputs gives the same ``c``.  A constant factor in the formula (a forgotten 2, an n where n-1 belongs) gives
the same ``c`` at other inputs of the same shape; a missing or wrong term (``g / (3 y^2)`` for
``g / (3 y^2 + 1)``) gives a ratio that varies with the input, and "remove that factor" would be the wrong fix.
So the node is checked again at a few points near the case's inputs (each differentiable input's elements
scaled by e^r, 0.1 <= |r| <= 0.3, a zero moved by r times its input's largest magnitude, kept in the op's domain)
and the factor is named only if it holds there too.

A float32 case whose node is wrong is also checked at the same inputs cast to float64: a code path that only
float32 takes (a "fast path", a cast) is right there.

Example::

    >>> import numpy as np
    >>> from gradspec._diagnose_points import nearby
    >>> from gradspec.case import Case, Leaf, NodeDef
    >>> mini = Case([Leaf("x", np.array([1.0, -2.0]))], [NodeDef("y", "tanh", ["x"], {})], ["y"], [np.ones(2)])
    >>> [p.leaves[0].value.shape for p in nearby(mini, mini.nodes[0], mini.spec("tanh"))]
    [(2,), (2,)]
"""

from __future__ import annotations

import numpy as np

from ._diagnose_text import _fmt
from ._private.vjp_patterns import columns, disagrees, explains, fit, flat, only_wrong, slice_factors, slice_words, split_wrong, swapped
from .case import Case, Leaf

__all__: list = []

# Points tried (each one check of one node): two that agree on the factor with the case make a coincidence
# negligible for a ratio that varies with the input.
_POINTS = 2
# Each element scaled by e^r, 0.1 <= |r| <= this: far enough that a ratio depending on the input moves by
# percents (cubic's (3y^2+1)/(3y^2) moves by 5 % or more), near enough to stay in the region the case came from.
_SPREAD = 0.3
# Two fitted factors are "the same" within this, relative: each is a ratio of sums of products of the code's
# gradient and the twin's, and carries the twin's error (1e-16 for a JVP rule, ~1e-9 to 1e-6 relative for a
# finite-difference JVP of a stiff forward); a ratio that depends on the input moves by far more (>= 1e-2 here).
_SAME_FACTOR = 1e-4


def nearby(mini: Case, node, spec, n: int = _POINTS) -> list:
    """``n`` copies of the one-node case ``mini`` with each differentiable float input moved multiplicatively
    (signs kept, zeros moved additively, in the op's domain where the original is), same seed; fewer where
    none can move."""
    rng = np.random.default_rng(11)
    doms = spec.domains_for(len(node.inputs))
    dom_of = {}
    for k, i in enumerate(node.inputs):
        dom_of.setdefault(i, doms[k] if k < len(doms) else None)
    out = []
    for _ in range(4 * n):
        if len(out) == n:
            break
        leaves, moved = [], False
        for l in mini.leaves:
            v = np.asarray(l.value)
            if not (l.differentiable and v.dtype.kind == "f" and v.size):
                leaves.append(l)
                continue
            # zeros (a shrunk case is often all zeros) move by |r| of the leaf's largest magnitude
            ref = float(np.max(np.abs(v))) or 1.0
            r = rng.uniform(_SPREAD / 3, _SPREAD, v.shape) * rng.choice([-1.0, 1.0], v.shape)
            w = np.where(v == 0, ref * r, v * np.exp(r)).astype(v.dtype)
            if not _in_domain(v, w, dom_of.get(l.name)):
                break
            moved = moved or not np.array_equal(v, w)
            leaves.append(Leaf(l.name, w, l.differentiable))
        else:
            if moved:
                out.append(Case(leaves, mini.nodes, mini.roots, list(mini.seeds), engine=mini.engine,
                                user_ops=dict(mini.user_ops)))
    return out


def swapped_inputs(mini: Case, node, suspect: str, twin: str, run) -> str | None:
    """Words for gradients returned in each other's places (``return g * a, g * b`` for ``a * b``) on a case
    where only some of the node's inputs require grad: the swap shows only once both gradients are computed, so
    the node is checked again with every float input requiring grad.  None when that does not show a swap
    (before, a shrunk case with x1 not requiring grad was named "the ratio varies ... check term by term")."""
    ins = [l for l in mini.leaves if l.name in node.inputs and np.asarray(l.value).dtype.kind == "f"]
    off = [l.name for l in ins if not l.requires_grad]
    shapes = [l.shape for l in ins]
    if not off or not any(shapes.count(s) > 1 for s in shapes):
        return None
    leaves = [Leaf(l.name, l.value, True) if l in ins else l for l in mini.leaves]
    every = Case(leaves, mini.nodes, mini.roots, list(mini.seeds), engine=mini.engine, user_ops=dict(mini.user_ops))
    try:
        v = run(every)
    except Exception:  # noqa: BLE001 - no answer there: it says nothing
        return None
    u, t = v.results.get(suspect), v.results.get(twin)
    if u is None or t is None or any(u.get(l.name) is None or t.get(l.name) is None for l in ins):
        return None
    text = swapped(ins, u, t)
    if text is None:
        return None
    return (f"{text} (seen with every input requiring grad; in this case {', '.join(off)} did not, so the gradient "
            "compared here was the other input's)")


def _apart(a: float, b: float) -> str:
    """``a`` with enough digits (4 at least) to tell it from ``b``."""
    for d in range(4, 17):
        if f"{a:.{d}g}" != f"{b:.{d}g}":
            return f"{a:.{d}g}"
    return f"{a:.4g}"


def _in_domain(v, w, dom) -> bool:
    if dom is None:
        return True
    return all(dom.contains(float(b)) or not dom.contains(float(a)) for a, b in zip(v.ravel(), w.ravel()))


def factor_at_points(mini, node, spec, suspect, twin, run, u: dict, t: dict, found) -> tuple:
    """``found`` = ("scale", c, detail) on the case: kept where the same factor holds at other inputs, else
    ("other", None, the ratios seen and why that is no factor); on one element with no other point to try,
    ("other", None, what it is at this point only)."""
    _, c, detail = found
    leaves = [l for l in mini.grad_leaves() if u.get(l.name) is not None and t.get(l.name) is not None]
    wrong = [l.name for l in split_wrong(leaves, u, t)[0]]
    # the words that replace ``detail`` keep which inputs are wrong (tryout9 F6: "at this input it is -1.756 ×
    # J^T·g" read as if every input were wrong, where only a's gradient was)
    only = only_wrong(wrong, [l.name for l in leaves if l.name not in wrong])
    seen = []  # (the point's inputs, the factor there or None: not one factor)
    for m2 in nearby(mini, node, spec):
        try:
            v2 = run(m2)
        except Exception:  # noqa: BLE001 - no answer at that point: it says nothing
            continue
        tw = twin if twin in v2.results else "finite-differences"  # (the JVP twin may not run at every point)
        u2, t2 = v2.results.get(suspect), v2.results.get(tw)
        if u2 is None or t2 is None:
            continue
        ls = [l for l in m2.grad_leaves() if u2.get(l.name) is not None and t2.get(l.name) is not None]
        if not disagrees(v2, suspect, tw):
            seen.append((m2, 1.0, "right"))
            continue
        bad = split_wrong(ls, u2, t2)[0]
        if bad and [l.name for l in bad] == wrong:  # the same inputs wrong (the others right) as in the case
            ls = bad
        uu, tt = flat(u2, ls), flat(t2, ls)
        c2 = fit(uu, tt)
        if c2 is None or not explains(uu, c2 * tt, tt):
            seen.append((m2, None, "no single factor × J^T·g"))
        else:
            seen.append((m2, c2, f"{_apart(c2, c)} × J^T·g"))
    varied = [(m2, there) for m2, c2, there in seen if c2 is None or abs(c2 - c) > _SAME_FACTOR * max(abs(c), abs(c2))]
    if not varied:
        if not seen and sum(int(np.asarray(l.value).size) for l in mini.grad_leaves()) < 2:
            return "other", None, only + (f"at this point it is {c:.4g} × J^T·g (one element, and no other input could be "
                                "checked: whether the factor is constant cannot be told; a term missing from the "
                                "derivative formula gives a ratio that varies with the input)")
        if not seen and _on_one_line(mini, suspect, twin, run, t, leaves):
            return "other", None, only + (f"at this point it is {c:.4g} × J^T·g, but every J^T·g here is a multiple of one "
                                "vector (a row of two whose gradients are always multiples of [1, -1]: any wrong "
                                "formula fits some factor) and no other input could be checked: whether the factor is "
                                "constant cannot be told; a term missing from the derivative formula (an n where n - 1 "
                                "belongs) gives a ratio that varies with the input")
        return found
    m2, there = varied[0]
    c2 = next(c2 for m, c2, _ in seen if m is m2)
    if c2 is not None:  # the point that shows it best: the largest move of the ratio
        m2, c2, there = max(((m, x, th) for m, x, th in seen if x is not None), key=lambda p: abs(p[1] - c))
    where = "; ".join(f"{l.name} = {_fmt(l.value, 4)}" for l in m2.leaves if l.differentiable)
    here = f"{c:.4g}" if c2 is None else _apart(c, c2)
    return "other", None, only + (f"at this input it is {here} × J^T·g, but at {where} it is {there}: the ratio varies "
                           f"with the input, so it is not a constant factor (dividing by {c:.4g} would be wrong) — a "
                           "term missing from, or wrong in, the derivative formula; check it term by term")


# J^T·g for two upstream gradients on one line: |cos| above this (the twin's error, 1e-9 relative for a
# finite-difference JVP, moves the angle far less; two random seeds on a rank-2 Jacobian are this close with
# probability ~1e-5)
_ONE_LINE = 1 - 1e-10


def _on_one_line(mini, suspect, twin, run, t: dict, leaves) -> bool:
    """J^T·g at this point for a fresh random upstream gradient is a multiple of ``t`` (the case's J^T·g): every
    J^T·g here lies on one line (standardising two elements: always a multiple of [1, -1]), so "u = c × J^T·g"
    fits any ``u`` on that line and proves no constant factor."""
    rng = np.random.default_rng(12)
    seeds = [None if s is None else rng.standard_normal(np.shape(s)).astype(np.asarray(s).dtype) for s in mini.seeds]
    if all(s is None for s in seeds):
        return False  # (an implicit seed: one element out, no other upstream gradient to try)
    other = Case(list(mini.leaves), mini.nodes, mini.roots, seeds, engine=mini.engine, user_ops=dict(mini.user_ops))
    try:
        v = run(other)
    except Exception:  # noqa: BLE001 - it says nothing
        return False
    tw = twin if twin in v.results else "finite-differences"
    t2 = v.results.get(tw)
    if t2 is None or any(t2.get(l.name) is None for l in leaves):
        return False
    a, b = flat(t, leaves), flat(t2, leaves)
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return na > 0 and nb > 0 and abs(float(np.dot(a, b))) >= _ONE_LINE * na * nb


def factors_per_slice(mini, node, spec, suspect, twin, run, u: dict, t: dict) -> str | None:
    """The words for a gradient that is a different constant multiple of J^T·g along each slice of one axis
    (``slice_factors``), where the same factors hold at the nearby points (``nearby``) that could be checked,
    at least one; else None.  A per-slice normaliser over the wrong set (a full length where a masked count
    belongs) does not depend on the input values; a slice whose J^T·g is always a multiple of one vector fits
    some factor whatever the code computes, and that factor moves with the input (tryout10's layernorm rows of
    two: 1.3e5 at one point, 1.9e5 at the next)."""
    leaves = [l for l in mini.grad_leaves() if u.get(l.name) is not None and t.get(l.name) is not None]
    found = slice_factors(leaves, u, t)
    if found is None:
        return None
    name, axis, cs = found
    checked = 0
    for m2 in nearby(mini, node, spec):
        try:
            v2 = run(m2)
        except Exception:  # noqa: BLE001 - no answer at that point: it says nothing
            continue
        tw = twin if twin in v2.results else "finite-differences"
        u2, t2 = v2.results.get(suspect), v2.results.get(tw)
        if u2 is None or t2 is None or u2.get(name) is None or t2.get(name) is None:
            continue
        again = slice_factors([l for l in m2.grad_leaves() if l.name == name], u2, t2, where=(name, axis))
        if again is None or again[2].shape != cs.shape or np.any(
                np.abs(again[2] - cs) > _SAME_FACTOR * np.maximum(np.abs(cs), np.abs(again[2]))):
            return None
        checked += 1
    return slice_words(name, axis, np.ndim(u[name]), cs) if checked else None


def float32_only(mini, suspect, twin, run) -> str:
    """Words for a node that is wrong on a float32 case and right at the same inputs in float64, or ""."""
    if not any(np.asarray(l.value).dtype == np.float32 for l in mini.leaves):
        return ""
    leaves = [Leaf(l.name, np.asarray(l.value).astype(np.float64) if np.asarray(l.value).dtype == np.float32
                   else l.value, l.differentiable) for l in mini.leaves]
    seeds = [None if s is None else np.asarray(s).astype(np.float64) for s in mini.seeds]
    m64 = Case(leaves, mini.nodes, mini.roots, seeds, engine=mini.engine, user_ops=dict(mini.user_ops))
    try:
        v = run(m64)
    except Exception:  # noqa: BLE001
        return ""
    tw = twin if twin in v.results else "finite-differences"
    if v.results.get(suspect) is None or v.results.get(tw) is None or disagrees(v, suspect, tw):
        return ""
    return ("only in float32 (at the same inputs in float64 it agrees with J^T·g: look for code that depends on the "
            "dtype, such as a float32-only branch or fast path, a cast, or a formula that loses its precision in float32); "
            "in float32, ")


def not_linear_in_g(mini: Case, suspect: str, recheck) -> str | None:
    """The words for a rule that is not linear in its upstream gradient (``g`` applied twice, ``g`` inside
    a nonlinear function), else None.  ``recheck(g2)`` is the node's verdict under upstream gradient g2.

    Doubling ``g`` is exact in floating point (a power of two: no rounding, barring overflow and
    subnormals), so any rule linear in ``g`` returns exactly twice its gradient; the 1e-9 relative slack
    only spares code that rounds g differently (a float32 path), far from the factor 2 of ``g·g``."""
    g = np.asarray(mini.seeds[0], dtype=np.float64)
    if not g.size or not np.all(np.isfinite(g)) or not np.any(g):
        return None
    one, two = recheck(np.asarray(mini.seeds[0])), recheck((2 * g).astype(np.asarray(mini.seeds[0]).dtype))
    if one is None or two is None:
        return None
    u1, u2 = one.results.get(suspect), two.results.get(suspect)
    leaves = [l for l in mini.grad_leaves() if u1 and u2 and u1.get(l.name) is not None and u2.get(l.name) is not None]
    if not leaves:
        return None
    a, b = flat(u1, leaves), flat(u2, leaves)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))) or not np.any(a):
        return None
    if np.max(np.abs(b - 2 * a)) <= 1e-9 * np.max(np.abs(a)):
        return None
    k = int(np.argmax(np.abs(a)))
    r = float(b[k] / a[k])
    return (f"it is not linear in the upstream gradient g: with 2·g it returns {r:.6g} times what it returns with g "
            "(a VJP returns exactly 2 times): g applied twice (g·g), or g inside a nonlinear function?"
            if abs(r - 4) > 1e-6 else
            "it is not linear in the upstream gradient g: with 2·g it returns 4 times what it returns with g (a VJP "
            "returns exactly 2 times): g is applied twice (g·g)")


def nonfinite_words(mini: Case, u: dict, probe=None) -> str:
    """Why a rule returns NaN/inf where J^T·g is finite, from the inputs at the non-finite elements of ``u``
    (the rule's gradients by leaf name) only (tryout10 F11: an |x| = 851 in another row is no evidence).

    An input exactly 0 at such an element: a division by it (x/0, 0/0).  An input there, or in its row
    along the last axis (a softmax's or logsumexp's NaN can sit next to the big element), beyond where exp
    overflows in its dtype (|x| > log(max), 709.8 in float64, 88.7 in float32): an intermediate exp(x) is inf,
    and inf/inf or inf·0 is NaN.  Where both hold, neither is named alone (review15 #4: a 0 that divides nothing
    next to an overflow): ``probe(case)`` (the rule's gradients on another case, or None) re-runs the rule with
    the zeros moved off 0, and the NaN going or staying says which; without it both are said.  Else neither is
    evidenced, and both stay a question."""
    bad = _nonfinite_mask(mini, u)
    same = [(l.name, np.asarray(l.value)) for l in mini.leaves if np.asarray(l.value).dtype.kind == "f"
            and bad is not None and np.shape(l.value) == bad.shape]
    zeros = [(name, np.argwhere(bad & (v == 0))) for name, v in same]
    zeros = [(name, at) for name, at in zeros if len(at)]
    zero = ""
    if zeros:
        name, at = zeros[0]
        zero = ", ".join(f"{name}[{', '.join(str(int(i)) for i in ix)}]" if len(ix) else name for ix in at[:3])
        zero += f" = 0{', ...' if len(at) > 3 else ''}"
    over = _overflow_words(same, bad)
    if zero and over:
        gone = _zeros_moved_off(mini, bad, probe)
        if gone is None:
            return (f"an exp overflow or a division by 0, both possible here: {over}; and {zero} there, which "
                    "gives 0/0 or x/0 if the code divides by it); compute it in a form that cannot overflow and "
                    "without the singular step")
        over, zero = ("", f"{zero}, and the NaN goes with the zeros moved off 0 (to 0.5)") if gone else (
            f"{over}, and the NaN stays with {zero.split(' = ')[0]} moved off 0 (to 0.5)", "")
    if zero:
        return (f"a 0/0 or x/0: a division by an input that is 0 there, {zero}); compute it without the "
                "singular step")
    if over:
        return (f"{over}: compute it in a form that cannot overflow (sigmoid(x), exp(x - max), "
                "log1p(exp(-|x|)))")
    return "a 0/0 or inf/inf: a division by an input that is 0 there?); compute it without the singular step"


def _overflow_words(same: list, bad) -> str:
    """The words for an input at (or in the row of) a non-finite element beyond where exp overflows, or ""."""
    for name, v in same:
        rows = bad if v.ndim == 0 else np.broadcast_to(bad.any(axis=-1, keepdims=True), v.shape)
        near = np.abs(v[rows & np.isfinite(v)])
        limit = float(np.log(np.finfo(v.dtype).max))
        if near.size and float(near.max()) > limit:
            return (f"at |{name}| = {float(near.max()):.6g} there, beyond {limit:.4g} where exp overflows in {v.dtype}, "
                    "an intermediate exp(x) is inf and inf/inf or inf·0 gives NaN (e.g. exp(x) / (1 + exp(x)))")
    return ""


def _zeros_moved_off(mini: Case, bad, probe) -> bool | None:
    """Whether the rule's gradients are finite at every element of ``bad`` that holds a 0 input once each such
    0 is 0.5 (``probe``: the rule's gradients on a case, or None), or None when that cannot be told.  0.5: off
    the singular point, far below any overflow, in the domain of log and sqrt."""
    if probe is None:
        return None
    leaves, at = [], np.zeros(bad.shape, dtype=bool)
    for l in mini.leaves:
        v = np.asarray(l.value)
        if v.dtype.kind == "f" and v.shape == bad.shape and np.any(bad & (v == 0)):
            at |= bad & (v == 0)
            v = np.where(bad & (v == 0), v.dtype.type(0.5), v)
        leaves.append(Leaf(l.name, v, l.differentiable))
    try:
        u2 = probe(Case(leaves, mini.nodes, mini.roots, mini.seeds, engine=mini.engine, user_ops=dict(mini.user_ops)))
    except Exception:  # noqa: BLE001 - the rule failed on the probe: nothing told
        return None
    grads = [np.asarray(u2[l.name], dtype=np.float64) for l in mini.grad_leaves()
             if u2 is not None and u2.get(l.name) is not None and np.shape(u2[l.name]) == bad.shape]
    if not grads:
        return None
    return bool(all(np.all(np.isfinite(gr[at])) for gr in grads))


def _nonfinite_mask(mini: Case, u: dict):
    """Where any differentiable leaf's gradient in ``u`` is non-finite, over the leaves' common shape (the
    first such leaf's shape; leaves of other shapes do not add), or None."""
    mask = None
    for leaf in mini.grad_leaves():
        if u.get(leaf.name) is None:
            continue
        m = ~np.isfinite(np.asarray(u[leaf.name], dtype=np.float64))
        if m.shape != np.shape(leaf.value) or not m.any():
            continue
        mask = m if mask is None else (mask | m if mask.shape == m.shape else mask)
    return mask


def flat_forward_words(leaves: list, u: dict, t: dict, g: np.ndarray, J=None) -> str | None:
    """The words for a rule that returns a nonzero gradient where J^T·g is exactly 0, else None.  Where the
    forward is flat at these inputs (J = 0: a constant output, floor or round between its jumps): a
    straight-through or other surrogate gradient, not the derivative gradspec checks.  Where J (``J``,
    a ``Jacobian``; None: unknown, taken as flat) is not 0, g lies in J^T's null space (a seed of ones into a
    softmax: tryout8 F8), and the words say only that."""
    if not leaves:
        return None
    uu, tt = flat(u, leaves), flat(t, leaves)
    if not tt.size or not np.all(np.isfinite(uu)) or not np.any(uu != 0) or not np.all(np.isfinite(tt)):
        return None
    # finite differences of a flat forward leave rounding (3e-12 next to a gradient of 1: tryout6 #7), never a
    # value within 1e-8 of the rule's own scale where the forward really moves
    tiny = float(np.max(np.abs(tt)))
    if tiny > 1e-8 * float(np.max(np.abs(uu))):
        return None
    mine = np.asarray(u[leaves[0].name])
    passes = len(leaves) == 1 and mine.shape == np.shape(g) and np.array_equal(mine, g)
    rounding = '' if tiny == 0 else f' (up to finite differences rounding, {tiny:.2g})'
    if J is not None and _moves(J, leaves, g, uu):
        return (f"J^T·g is 0 for this upstream gradient{rounding}, although J is not 0 here (g lies in J^T's null "
                "space, as a g constant along a softmax's dim does: its outputs sum to 1 there), but it returns "
                f"{'g unchanged' if passes else 'nonzero values'}: a term that cancels such a g is missing or wrong "
                "(a sum over the wrong axis, a term dropped or scaled?)")
    # g unchanged is what a straight-through estimator returns, and also a mask or derivative factor that is 1
    # where it should be 0 (a projection's backward that forgets a term): both said, neither guessed
    return (f"J^T·g is 0 here{rounding} (the "
            "forward does not change at these inputs: a constant output, or floor/round "
            f"between its jumps) but it returns {'g unchanged' if passes else 'nonzero values'} (a mask or derivative "
            "factor that is 1 where it should be 0, a term of the derivative forgotten, or a deliberate surrogate "
            "gradient such as a straight-through estimator): a surrogate gradient is not the derivative, which is "
            "what gradspec checks; if it is deliberate, verify the code around it instead")


def _moves(J, leaves: list, g: np.ndarray, uu: np.ndarray) -> bool:
    """Whether the forward changes at these inputs: J's columns of ``leaves`` hold an entry that could give a
    J^T·g within 1e-8 of the rule's own answer's scale (J is exact up to rounding: forward mode)."""
    cols = columns(J, leaves)
    M = np.asarray(J.matrix, dtype=np.float64)
    if not cols.size or not M.size or not np.all(np.isfinite(M[:, cols])):
        return False
    top = float(np.max(np.abs(M[:, cols]))) * float(np.max(np.abs(g), initial=0.0))
    return top > 1e-8 * float(np.max(np.abs(uu)))
