"""Naming a wrong gradient: which simple mistake turns J^T·g into what the code under test returned.

Used by :mod:`gradspec.diagnose` (CONTRACT §8 patterns of ``wrong-vjp``).  Every hypothesis is an exact
transformation of the right answer ``t = J^T·g`` -- a sign, a constant factor, the upstream gradient
replaced by ones or by its mean, a broadcast input's gradient taken from the first slice, the right numbers
in the wrong places -- and it "explains" the code's answer ``u`` when what is left of the error under it
is rounding.  :func:`shape_pattern` names gradients of the wrong *shape* the same way, from the arrays the
code returned before any shape check (axes permuted, ``g`` split at the wrong index, a broadcast input's
gradient not summed).  The broadcast hypotheses are in :mod:`gradspec._private.vjp_broadcast`, the arithmetic they
all share (``fit``, ``explains``) in :mod:`gradspec._private.vjp_fit`.

Example::

    >>> import numpy as np
    >>> from gradspec._private.vjp_patterns import name_factor, shape_pattern
    >>> name_factor(0.75, (4, 3))
    '(n-1)/n with n = 4'
    >>> g = np.arange(5.0).reshape(1, 5)
    >>> shape_pattern(["a", "b"], [g[:, :1], g[:, 1:]], [g[:, :4], g[:, 4:]])[0]
    'permuted'
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from .dims import summed_to as _summed_to
from .iteration_words import iterated as _iterated
from .iteration_words import within_reach
from .vjp_broadcast import broadcast as _broadcast
from .vjp_broadcast import dim_arg as _dim
from .vjp_fit import EXPLAINED, columns, explains, fit, flat
from .vjp_fit import HYP_RTOL as _HYP_RTOL

__all__ = ["classify", "slice_factors", "slice_words",
           "split_wrong", "TEXT_PATTERNS", "name_factor", "snap", "dims", "shape_pattern", "columns", "flat", "fit",
           "explains", "EXPLAINED", "by_output", "disagrees", "swapped", "transposed", "only_wrong", "NO_WITNESS"]

# A factor is named as a simple rational when it matches one to this relative accuracy (the fitted
# factor is a ratio of two sums of exact products: good to ~1e-12 with an exact twin).
_RATIONAL_RTOL = 1e-7
# A relative error at most this (4 float32 ulps) in float64 code is float32 rounding, not a factor.
_FLOAT32_ROUNDING = 4 * float(np.finfo(np.float32).eps)
# ... and at least this (1/16 of a float32 ulp): a float32 result carries ~7 digits, so a float32 computation
# inside leaves at least ~eps32/2 relative on most elements; 1.5e-9 is a solver's stopping tolerance (an implicit
# derivative of an iterative forward), not float32 (a new user's fixed-point solve was told "float32 inside").
_FLOAT32_LOW = float(np.finfo(np.float32).eps) / 16
# A relative error below this in user code may be an iteration's stopping tolerance (a solver, a fixed point), the
# words of _iterated; above it, a formula error (a missing term is rarely this small).
_SMALL = 1e-3


# Patterns of mistakes recognised by their words' own exact test (no CONTRACT §8 pattern of the first list):
# never re-fitted on fresh upstream gradients, as none was when they were reported as 'other'.
TEXT_PATTERNS = ("transposed", "not-symmetrised", "not-accumulated", "masked")


def _tiny_relative(rel: float) -> str:
    """Words for a relative error too small for a formula error: float32 rounding, or the accuracy of
    an iterative / ill-conditioned computation (below float32's ulps)."""
    if rel >= _FLOAT32_LOW:
        # (or cancellation: 0.5 * (1 + tanh(x / 2)) at x = -19.8 loses 2.3e-8 of its value to tanh's rounding; one
        # element cannot tell the two apart, and a new user's float64 softplus was told only "float32 inside")
        return (f"a relative {rel:.2g}, the size of float32's rounding: a float32 computation inside (e.g. "
                ".float()), or precision lost to cancellation in the formula (1 + tanh(x) for x << 0, 1 - y*y near "
                "saturation: rewrite it in a stable form), not a factor in the formula")
    return (f"a relative {rel:.2g}, far below a formula error: the accuracy of an iterative or ill-conditioned "
            "computation (a solver's stopping tolerance, an implicit derivative of an iterated forward); if your "
            "code is iterative, declare its accuracy (rtol=...)")


def classify(mini, node, spec, leaves, u: dict, t: dict, J, g) -> tuple[str, float | None, str]:
    """(pattern, factor, a sentence with the fix direction) for a gradient ``u`` that should be ``t``.

    ``J`` is the twin's Jacobian of the one-node case ``mini`` (or None), ``g`` its seed.  Where some inputs'
    gradients are right, the others' are named on their own, and the sentence says which inputs they are.
    """
    wrong, right = split_wrong(leaves, u, t)
    if not right or not wrong:
        found = _classify(mini, node, spec, leaves, u, t, J, g)
        if len(set(node.inputs)) < 2 or len(leaves) != 1 or f"input {leaves[0].name}" in found[2]:
            return found
        return found[0], found[1], f"input {leaves[0].name}'s gradient (the only one compared): {found[2]}"
    pattern, factor, detail = _classify(mini, node, spec, wrong, u, t, J, g)
    if all(f"input {l.name}" in detail for l in wrong):
        return pattern, factor, f"{detail} ({_right_words([l.name for l in right])})"
    return pattern, factor, only_wrong([l.name for l in wrong], [l.name for l in right]) + detail


def _right_words(right: list) -> str:
    return f"the gradient{'s' if len(right) > 1 else ''} of {', '.join(right)} {'is' if len(right) == 1 else 'are'} right"


def only_wrong(wrong: list, right: list) -> str:
    """``"only input x1's gradient is wrong (the gradients of x0, x2 are right): "`` for the input names whose
    gradients are wrong and right, "" where either list is empty (then there is nothing to tell apart)."""
    if not wrong or not right:
        return ""
    return f"only input {', '.join(wrong)}'s gradient{'s are' if len(wrong) > 1 else ' is'} wrong ({_right_words(right)}): "


def split_wrong(leaves, u: dict, t: dict) -> tuple[list, list]:
    """(the leaves whose gradient is wrong, those whose gradient is right): right means off by no more than the
    twin's own error (1e-8 of the largest value, or 1e-5 where that is still below 1 % of the largest error)."""
    errs = [float(np.max(np.abs(np.asarray(u[l.name], dtype=np.float64) - np.asarray(t[l.name], dtype=np.float64)),
                         initial=0.0)) for l in leaves]
    uu, tt = flat(u, leaves), flat(t, leaves)
    scale = max(float(np.max(np.abs(uu), initial=0.0)), float(np.max(np.abs(tt), initial=0.0)))
    top = max(errs, default=0.0)
    ok = max(1e-8 * scale, min(EXPLAINED * top, _HYP_RTOL * scale))
    return [l for l, e in zip(leaves, errs) if not e <= ok], [l for l, e in zip(leaves, errs) if e <= ok]


# The words that open a sentence saying J^T·g's estimate, not the backward, is what is not finite: no witness there.
NO_WITNESS = "J^T·g is not finite"


def _nonfinite(mini, node, spec, leaves, u: dict, t: dict, J, g, uu, tt) -> tuple[str, float | None, str]:
    """Which side is not finite, as the evidence shows it (tryout11 #12: "it is not finite where J^T·g is" was said
    of a finite backward whose J^T·g -- finite differences of a forward that is NaN next to a singular matrix --
    was NaN).  Where only J^T·g (or both) is not finite, those elements witness nothing: the rest is classified
    on its own, or, agreeing, the sentence says J^T·g is what is not finite."""
    fu, ft = np.isfinite(uu), np.isfinite(tt)
    if (~fu & ft).any():
        return "other", None, f"it is not finite where J^T·g is ({int((~fu & ft).sum())} of {uu.size} elements)"
    why = (f"{NO_WITNESS} on {int((~ft).sum())} of {uu.size} elements (where the backward is "
           f"{'finite' if fu.all() else 'not finite either'}): the forward is not finite, or not differentiable, next "
           "to these inputs -- outside its domain (a singular matrix?) -- so J^T·g's estimate there judges nothing")
    u2, t2 = {}, {}
    for l in leaves:  # 0 on both sides where either is not finite: compared on the other elements only
        a, b = np.asarray(u[l.name], dtype=np.float64), np.asarray(t[l.name], dtype=np.float64)
        keep = np.isfinite(a) & np.isfinite(b)
        u2[l.name], t2[l.name] = np.where(keep, a, 0.0), np.where(keep, b, 0.0)
    if not split_wrong(leaves, u2, t2)[0]:
        return "other", None, f"{why}; it agrees with J^T·g on every element where J^T·g is finite"
    pattern, factor, detail = _classify(mini, node, spec, leaves, u2, t2, J, g)
    return pattern, factor, f"{detail} (on the elements where J^T·g is finite; {why})"


def _classify(mini, node, spec, leaves, u: dict, t: dict, J, g) -> tuple[str, float | None, str]:
    if not leaves:
        return "other", None, "no gradient to compare"
    uu, tt = flat(u, leaves), flat(t, leaves)
    if not (np.isfinite(uu).all() and np.isfinite(tt).all()):
        return _nonfinite(mini, node, spec, leaves, u, t, J, g, uu, tt)
    err = uu - tt
    c = fit(uu, tt)
    if c is not None and abs(c + 1) < 1e-9 and explains(uu, -tt, tt):
        side = _one_sign(mini)
        if side:  # every element flipped, but every input on one side of 0: the other side is untested here
            return "sign", -1.0, (f"it has the wrong sign on every element here, all where {side} (this case cannot "
                                  "tell whether it is right for the other sign); fix the sign of the derivative there")
        return "sign", -1.0, "it has the wrong sign everywhere; negate it"
    cols = None if J is None else columns(J, leaves)
    if cols is not None:
        ones_vjp = J.matrix[:, cols].T @ np.ones(J.matrix.shape[0])
        cs = fit(uu, ones_vjp)
        gf = np.ravel(g).astype(np.float64)
        constant = gf.size == 1 or np.ptp(gf) == 0
        if not np.all(gf == 1) and explains(uu, ones_vjp, tt):
            return "seed-ignored", None, ("it ignores the upstream gradient g: the result is what g = ones gives "
                                          "(J^T·1); multiply by g element-wise")
        if not constant and explains(uu, float(np.mean(gf)) * ones_vjp, tt):
            return "seed-ignored", None, ("it uses mean(g), a constant, instead of the upstream gradient g "
                                          "element-wise (right only when g is constant); use g itself")
        # a fitted constant fits any single number: it names the error only where two elements or more pin it
        # ... and only where J^T·1 is not a multiple of J^T·g: there "a constant seed" is "a factor" as well (a row
        # of two elements whose gradients are all multiples of [1, -1] fits either, whatever the code computes)
        if not constant and cs is not None and np.count_nonzero(ones_vjp) >= 2 and not _parallel(ones_vjp, tt) \
                and explains(uu, cs * ones_vjp, tt):
            return "seed-ignored", None, (f"it behaves as if the upstream gradient were the constant {cs:.4g}, "
                                          "not g; use g element-wise")
        b = _broadcast(mini, node, spec, leaves, u, t, J, g, cols)
        if b is not None:
            return "broadcast-reduction", b[1], b[0]
        tr = transposed(leaves, u, t, J, g)  # (before the fan-in test: -A^-1 G A^-1 also sums some of J's terms)
        if tr is not None:
            return "transposed", None, tr
        fan = _not_accumulated(uu, tt, J.matrix[:, cols], np.ravel(g))
        if fan is not None:
            return "not-accumulated", None, fan
    if c is not None and c != 1 and c != 0 and explains(uu, c * tt, tt):
        name = name_factor(c, dims(mini, node))
        c = snap(c, dims(mini, node)) if name else c
        small = abs(c - 1) < _SMALL
        if small and abs(c - 1) <= _FLOAT32_ROUNDING:
            # A relative error the size of float32's rounding is what a float32 computation inside float64 code
            # leaves (a .float() in a backward), not a factor in a formula.
            return "other", None, f"it is off by {_tiny_relative(abs(c - 1))}"
        iterated = _iterated(abs(c - 1)) if within_reach(abs(c - 1), _SMALL) and getattr(spec, "user", False) else ""
        if small and np.count_nonzero(tt) < 2:
            # At one input point a factor in the formula and precision lost computing the derivative there
            # (cancellation) look the same; several points tell them apart.
            return "scale", float(c), (f"it is (1 {'+' if c > 1 else '-'} {abs(c - 1):.2g}) times J^T·g on its one "
                                       "element: a factor in the formula, or precision lost computing the derivative "
                                       f"there (cancellation){iterated}; a case of several elements tells a factor apart")
        text = f"it is (1 {'+' if c > 1 else '-'} {abs(c - 1):.2g}) times J^T·g: a small relative error in the formula" \
            if small else f"it is {c:.6g} × J^T·g{' (' + f'{c:.6g}' + ' = ' + name + ')' if name and name != f'{c:g}' else ''}"
        return "scale", float(c), text + iterated + "; remove that factor"
    flip = np.abs(uu + tt) < np.abs(err)
    if flip.any() and explains(uu, np.where(flip, -tt, tt), tt):
        return "sign", None, f"it has the wrong sign on {int(flip.sum())} of {uu.size} elements{_where_neg(mini, leaves, flip)}; " \
                             "fix the sign of the derivative there"
    p = _permuted(mini, node, leaves, u, t, J, g, cols)
    if p is not None:
        return "permuted", None, p
    bad = np.abs(err) > EXPLAINED * np.max(np.abs(err))
    with np.errstate(over="ignore"):  # an error beyond float64 over |J^T·g| is inf: far from rounding, as it should
        rel = float(np.max(np.abs(err) / np.maximum(np.abs(tt), np.finfo(np.float64).tiny)))
    if rel <= _FLOAT32_ROUNDING:
        return "other", None, f"it differs from J^T·g by at most {_tiny_relative(rel)}"
    # (the pattern is the one the words name: the report's heading and "Fix:" and a CI reading cause.pattern say
    # what the sentence says, tryout11 #9)
    sym = _symmetrised(leaves, u, t)
    if sym is not None:
        return "not-symmetrised", None, sym
    masked = _masked(uu, tt)
    if masked is not None:
        return "masked", None, masked
    # (user code that may iterate: a relative error this small is what a stopping tolerance leaves on the elements
    # where it converged slowest, tryout9 #11; the same words as a small factor's)
    iterated = _iterated(rel) if within_reach(rel, _SMALL) and getattr(spec, "user", False) else ""
    return "other", None, (f"it differs from J^T·g on {int(bad.sum())} of {uu.size} elements, with no simple pattern"
                           + _tried(cols is not None)
                           + (f" (by a relative {rel:.2g} at most: an error in the formula there{iterated})" if iterated else ""))


def _tried(with_j: bool) -> str:
    """What "no simple pattern" was tested against (tryout11 #11: a missing (I - J_f)^-1 in an implicit backward got
    the bare words, which say nothing of what was ruled out): the hypotheses of :func:`_classify`, those needing the
    twin's Jacobian only where it was known."""
    tried = ["a wrong sign", "one factor"] + (["g ignored or averaged", "a broadcast axis not summed",
                                              "A where A^T belongs", "contributions not summed"] if with_j else []) + \
        ["a permutation", "a missing symmetrisation", "a wrong mask"]
    return f" (none of these fits: {', '.join(tried)}; a term missing or wrong inside the formula is left)"


def _symmetrised(leaves, u: dict, t: dict) -> str | None:
    """Words for a square-matrix input whose gradient X is right once symmetrised (J^T·g = (X + X^T)/2), or once
    folded onto the lower triangle a forward reads (torch.linalg.eigh's default, UPLO='L'): a backward of a
    symmetric-matrix function (eigh, Cholesky) that returns X where sym(X) belongs."""
    for l in leaves:
        x, want = np.asarray(u[l.name], dtype=np.float64), np.asarray(t[l.name], dtype=np.float64)
        if x.ndim < 2 or x.shape[-1] != x.shape[-2] or x.shape[-1] < 2 or x.shape != want.shape:
            continue
        xt = np.swapaxes(x, -1, -2)
        eye = np.eye(x.shape[-1], dtype=bool)
        folded = np.tril(x + xt, -1) + np.where(eye, x, 0.0)
        for h, what in (((x + xt) / 2, "(X + X^T)/2"),
                        (folded, "X + X^T folded onto the lower triangle (the triangle the forward reads)")):
            if _same(h.ravel(), want.ravel()):
                return (f"input {l.name}'s gradient X is not symmetrised: J^T·g is {what}, which it returns X instead "
                        "of; symmetrise the result of the backward (sym(X) = (X + X^T)/2) as the input is a symmetric "
                        "matrix")
    return None


def slice_factors(leaves, u: dict, t: dict, where=None):
    """(leaf name, axis, factors) for a gradient that is a constant multiple of J^T·g along each slice of one
    axis of an input, a different multiple per slice (tryout10 F5: a masked mean's backward dividing by the full
    length D where the row's count belongs is count/D × J^T·g, row by row), else None.  ``where``: (name,
    axis), the only leaf and axis tried (the same slices at another point).

    Solid at this point only where a slice pins its factor: two nonzero elements or more with one ratio (one
    element fits any factor), on a slice whose factor is not 1; every slice must fit (explains, the same
    tolerance as the global factor's), the factors must differ (one factor is the global ``scale``), and a
    slice where J^T·g is 0 must be 0 too.  A slice whose J^T·g is always a multiple of one vector (a row of
    two under a normalisation: multiples of [1, -1]) fits a factor whatever the code computes: the caller
    checks the factors at other inputs (``_diagnose_points.factors_per_slice``)."""
    for l in leaves:
        x, want = np.asarray(u[l.name], dtype=np.float64), np.asarray(t[l.name], dtype=np.float64)
        if x.ndim < 2 or x.shape != want.shape or (where is not None and where[0] != l.name):
            continue
        for axis in reversed(range(x.ndim)) if where is None else [where[1]]:
            cs = _factors_along(np.moveaxis(x, axis, -1), np.moveaxis(want, axis, -1), where is None)
            if cs is not None:
                return l.name, axis, cs
    return None


def _factors_along(x: np.ndarray, want: np.ndarray, pin: bool) -> np.ndarray | None:
    rows_x, rows_t = x.reshape(-1, x.shape[-1]), want.reshape(-1, want.shape[-1])
    cs = np.array([fit(a, b) if np.any(b) else 1.0 for a, b in zip(rows_x, rows_t)], dtype=np.float64)
    if not np.all(np.isfinite(cs)) or not explains(x.ravel(), (cs[:, None] * rows_t).ravel(), want.ravel()):
        return None
    pinned = [c for c, b in zip(cs, rows_t) if np.count_nonzero(b) >= 2 and abs(c - 1) > _SMALL]
    if pin and (not pinned or np.ptp(cs) <= _SMALL * float(np.max(np.abs(cs)))):
        return None
    return cs


def slice_words(name: str, axis: int, ndim: int, cs: np.ndarray) -> str:
    """The words for ``slice_factors``' finding."""
    off = [k for k in range(len(cs)) if abs(cs[k] - 1) > _SMALL]
    along = "each row (along the last axis)" if axis == ndim - 1 else f"each slice along axis {axis}"
    shown = ", ".join(f"{cs[k]:.4g}" for k in off[:4]) + (", ..." if len(off) > 4 else "")
    return (f"input {name}'s gradient is a constant multiple of J^T·g along {along}, a different one per slice: "
            f"{len(off)} of {len(cs)} slices are off by the factors {shown}"
            f"{' (the others are right)' if len(off) < len(cs) else ''}, the same at other inputs: a per-slice "
            "normaliser (a count, length, norm or sum) computed over the wrong set, e.g. the full length where a "
            "masked count belongs?")


def _masked(uu: np.ndarray, tt: np.ndarray) -> str | None:
    """Words for a gradient that is 0 exactly where J^T·g is not (and, inverted, nonzero where J^T·g is 0): a mask
    or branch condition the wrong way round (> where <= belongs), or a branch's derivative dropped."""
    scale = float(np.max(np.abs(tt), initial=0.0))
    zero_u, zero_t = np.abs(uu) <= 1e-12 * max(scale, 1.0), np.abs(tt) <= 1e-12 * max(scale, 1.0)
    dropped = ~zero_t & zero_u
    if dropped.any() and np.any(~zero_t & ~zero_u & ~np.isclose(uu, tt, rtol=1e-9, atol=0)):
        return None
    extra = zero_t & ~zero_u
    if not dropped.any() and extra.any() and not np.any(~zero_t & ~zero_u & ~np.isclose(uu, tt, rtol=1e-9, atol=0)):
        return (f"it is nonzero on {int(extra.sum())} of {uu.size} elements where J^T·g is 0 (and right elsewhere): a "
                "mask, clip range or branch condition missing there (or the wrong side of a kink)?")
    if not dropped.any():
        return None
    if extra.any() and not np.any(~zero_t & ~zero_u):
        return (f"it is 0 on the {int(dropped.sum())} element(s) where J^T·g is not and nonzero on the {int(extra.sum())} "
                "where J^T·g is 0: a mask inverted (the condition the wrong way round, > where <= belongs)?")
    if extra.any():
        return None
    return (f"it is 0 on {int(dropped.sum())} of {uu.size} elements where J^T·g is not"
            f"{' (and right elsewhere)' if dropped.sum() < uu.size else ''}: a mask "
            "or branch condition that drops the gradient there (inverted, or the wrong side of a kink)?")


def _parallel(a: np.ndarray, b: np.ndarray) -> bool:
    """``a`` and ``b`` are multiples of one vector, up to the twin's error (a finite-difference JVP: ~1e-9
    relative, so the cosine is 1 within ~1e-12; two independent directions leave far more)."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return na == 0 or nb == 0 or abs(float(a @ b)) / (na * nb) >= 1 - 1e-6


def _not_accumulated(uu, tt, Jc, g) -> str | None:
    """Each wrong element is the sum of a strict subset of the contributions it receives from several output
    elements (J[k, j] g[k]): contributions assigned or dropped instead of summed (repeated indices, windows)."""
    err = np.abs(uu - tt)
    bad = np.flatnonzero(err > EXPLAINED * float(np.max(err, initial=0.0)))
    if not bad.size or not np.any(uu[bad] != 0):
        return None  # none of the contributions kept anywhere: a dropped gradient (a mask), not "only some summed"
    for j in bad:
        contrib = Jc[:, j] * g
        contrib = contrib[contrib != 0]
        if not 1 < contrib.size <= 12:
            return None
        if not any(abs(uu[j] - sum(sub)) <= EXPLAINED * err[j]
                   for r in range(contrib.size) for sub in itertools.combinations(contrib, r)):
            return None
    return (f"{bad.size} element(s) each receive contributions from several output elements (repeated indices, "
            "overlapping windows), and only some of them are summed; accumulate all of them (np.add.at / "
            "index_add instead of assignment)")


def name_factor(c: float, dims=()) -> str:
    """A simple rational for factor ``c`` (``"(n-1)/n with n = 4"``, ``"1/2"``, ``"2"``), or ""."""
    cands = []
    for k in range(2, 9):
        cands += [(Fraction(k), str(k)), (Fraction(1, k), f"1/{k}")]
    for n in sorted({int(d) for d in dims if int(d) > 1}):
        cands += [(Fraction(n - 1, n), f"(n-1)/n with n = {n}"), (Fraction(n, n - 1), f"n/(n-1) with n = {n}"),
                  (Fraction(1, n), f"1/n with n = {n}"), (Fraction(n), f"n with n = {n}")]
        if n > 2:
            cands += [(Fraction(1, n - 1), f"1/(n-1) with n = {n}")]
    for q, text in cands:
        if abs(c - float(q)) <= _RATIONAL_RTOL * abs(float(q)):
            return text
    if abs(c - 1) < 1e-3:
        return f"1 {'+' if c > 1 else '-'} {abs(c - 1):.2g}"
    return ""


def snap(c: float, dims) -> float:
    """The named rational itself for a factor that matched one (the fit carries the twin's error)."""
    for q in _rationals(dims):
        if abs(c - float(q)) <= _RATIONAL_RTOL * abs(float(q)):
            return float(q)
    return c


def _rationals(dims) -> list:
    out = [Fraction(k) for k in range(2, 9)] + [Fraction(1, k) for k in range(2, 9)]
    for n in {int(d) for d in dims if int(d) > 1}:
        out += [Fraction(n - 1, n), Fraction(n, n - 1), Fraction(1, n), Fraction(n)] + ([Fraction(1, n - 1)] if n > 2 else [])
    return out


def dims(mini, node) -> list:
    shapes = mini.shapes()
    return [d for i in node.inputs for d in shapes[i]] + list(shapes[node.name])


def _permuted(mini, node, leaves, u, t, J, g, cols) -> str | None:
    swapped = _swapped(leaves, u, t)
    if swapped is not None:
        return swapped
    for l in leaves:
        ul, tl = np.asarray(u[l.name], dtype=np.float64), np.asarray(t[l.name], dtype=np.float64)
        if np.allclose(ul, tl, rtol=1e-9, atol=0):
            continue
        if J is not None and np.ndim(g) >= 1 and np.ndim(g) < l.value.ndim:
            try:
                gb = np.broadcast_to(g, l.shape)
            except ValueError:
                gb = None
            if gb is not None:
                one = columns(J, [l])
                w = J.matrix[:, one].T @ np.ones(J.matrix.shape[0])
                if explains(ul.ravel(), w * gb.ravel(), tl.ravel()):
                    return (f"the upstream gradient g {np.shape(g)} is broadcast against the trailing axes of input "
                            f"{l.name} {l.shape}, so g's elements land on the wrong positions; insert the reduced axis "
                            "first (g[..., None] / unsqueeze(-1))")
        for perm in itertools.permutations(range(ul.ndim)):
            if perm != tuple(range(ul.ndim)) and tl.transpose(perm).shape == ul.shape \
                    and explains(ul.ravel(), tl.transpose(perm).ravel(), tl.ravel()):
                return (f"input {l.name}'s gradient is J^T·g with its axes permuted by {perm}; apply the inverse "
                        "permutation (np.argsort of the forward's)")
        err = float(np.max(np.abs(ul - tl)))
        if ul.size > 1 and float(np.max(np.abs(np.sort(ul.ravel()) - np.sort(tl.ravel())))) <= EXPLAINED * err:
            return f"input {l.name}'s gradient holds the right numbers in the wrong places; check the index mapping"
    return None


def transposed(leaves, u: dict, t: dict, J, g) -> str | None:
    """Words for a backward that applies a square Jacobian block where its transpose belongs, or None.

    x = solve(A, b) has J_b = A^-1, so b's gradient is A^-T g = solve(A^T, g); a backward that solves with A
    itself returns J_b g.  The other inputs' gradients come from that same adjoint vector (A's is -lam x^T), so
    they are J^T g~ for the g~ with J_b^T g~ = J_b g.  Hypothesis, for each input l whose block J_l is square:
    l's gradient is J_l g and every other input's J_m^T J_l^-T J_l g -- exact, given J (inv(A)'s backward
    -A^-1 G A^-1 is J g too; so is A g for y = A x).  A symmetric block gives J g = J^T g: nothing to name."""
    if J is None or not leaves:
        return None
    gf = np.ravel(np.asarray(g, dtype=np.float64))
    M = np.asarray(J.matrix, dtype=np.float64)
    if M.shape[0] != gf.size or not np.isfinite(M).all():
        return None
    uu, tt = flat(u, leaves), flat(t, leaves)
    for l in leaves:
        Jl = M[:, columns(J, [l])]
        n = Jl.shape[1]
        # l broadcast against a batch (b of shape (n,) beside A of shape (B, n, n)): Jl stacks B square blocks,
        # one per batch element, and l's gradient is the sum of the per-block adjoints (tryout7 #13c)
        if n < 2 or Jl.shape[0] % n:
            continue
        blocks = [slice(k, k + n) for k in range(0, Jl.shape[0], n)]
        if all(np.allclose(Jl[b], Jl[b].T, rtol=1e-9, atol=0) for b in blocks):
            continue  # symmetric blocks: J g is J^T g, nothing to name
        if np.all(np.count_nonzero(np.abs(Jl) > 1e-6 * np.max(np.abs(Jl)), axis=1) <= 1):
            continue  # a permutation (or selection): J g is J^T g rearranged, which _permuted names as such
        lams = [Jl[b] @ gf[b] for b in blocks]  # what a solve with A where A^T belongs gives, per batch element
        h = {l.name: np.sum(lams, axis=0).reshape(np.shape(t[l.name]))}
        others = [m for m in leaves if m.name != l.name]
        if others:
            try:  # the seed under which the right rule gives that adjoint vector, per batch element
                gt = np.concatenate([np.linalg.solve(Jl[b].T, lam) for b, lam in zip(blocks, lams)])
            except np.linalg.LinAlgError:
                continue
            for m in others:
                h[m.name] = (M[:, columns(J, [m])].T @ gt).reshape(np.shape(t[m.name]))
        if explains(uu, flat(h, leaves), tt):
            also = f" (and {', '.join(m.name for m in others)}'s gradient{'s follow' if len(others) > 1 else ' follows'} " \
                   "from that same wrong adjoint)" if others else ""
            return (f"input {l.name}'s gradient is J·g where J^T·g belongs{also}: the backward uses A where A^T is "
                    "needed -- solve(A, g) where the adjoint is solve(A^T, g) (A.mT), or inv(A) / A @ g where their "
                    "transposes belong; transpose A there")
    return None


def swapped(leaves, u: dict, t: dict) -> str | None:
    """Words for two inputs of one shape whose gradients came back in each other's places, or None."""
    return _swapped(leaves, u, t)


def _swapped(leaves, u: dict, t: dict) -> str | None:
    """Two inputs of one shape whose gradients came back in each other's places (``return gb, ga``)."""
    uu, tt = flat(u, leaves), flat(t, leaves)
    for a, b in itertools.combinations(range(len(leaves)), 2):
        la, lb = leaves[a], leaves[b]
        if la.shape != lb.shape:
            continue
        h = dict(t)
        h[la.name], h[lb.name] = t[lb.name], t[la.name]
        if explains(uu, flat(h, leaves), tt):
            return (f"the gradients of inputs {la.name} and {lb.name} are swapped: each holds the other's J^T·g; "
                    "return them in the order of the forward's inputs")
    return None


def _one_sign(mini) -> str:
    """``"x < 0"`` (or ``> 0``) for the first float input of the one-node case whose elements all sit on one
    side of 0, else ""."""
    for l in mini.leaves:
        if l.value.dtype.kind != "f" or not l.value.size:
            continue
        v = np.asarray(l.value, dtype=np.float64)
        if np.all(v < 0):
            return f"{l.name} < 0"
        if np.all(v > 0):
            return f"{l.name} > 0"
    return ""


def _where_neg(mini, leaves, flip) -> str:
    off = 0
    for l in leaves:
        n = l.value.size
        f = flip[off: off + n]
        v = np.asarray(l.value, dtype=np.float64).ravel()
        if f.any() and np.array_equal(f, v < 0):
            return f" (exactly where {l.name} < 0)"
        off += n
    return ""



# =============================================================================================
# gradients of the wrong shape
# =============================================================================================

# Two arrays are "the same numbers" here when they agree to 1e-6 of the larger magnitude: the right
# side is the twin's J^T·g (exact for gradspec's JVP rules, ~1e-9 relative for a finite-difference
# JVP) and a true hypothesis is an exact rearrangement of it, while a false one is off by O(1).
_SAME_RTOL = 1e-6


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return False
    scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)))
    return bool(np.all(np.abs(a - b) <= _SAME_RTOL * scale))


def _sum_to(a: np.ndarray, shape: tuple) -> np.ndarray | None:
    """``a`` summed over the axes along which an input of ``shape`` was broadcast to ``a.shape``."""
    s = _summed_to(a, tuple(shape))  # (gradspec.ops.user.sum_to's reduction, None where it would raise)
    if s is None:
        return None
    s = s.reshape(s.shape[s.ndim - len(shape):])  # (the leading axes summed, kept as 1s: dropped)
    return s if s.shape == tuple(shape) else None


def _summed_g(r, w, g) -> str | None:
    """Words for a gradient ``r`` that is the upstream ``g`` summed over other axes than those ``w`` (J^T·g, itself
    ``g`` summed over its broadcast axes: a bias added) needs: ``g.sum(1)`` for a bias broadcast over axis 0 of a
    (1, 4) output comes back in shape (1,) (tryout7, on tryout5's AddBiasWrongAxis drawn with one row)."""
    if g is None or g.ndim < 2 or r.size == w.size:
        return None
    subs = [c for k in range(1, g.ndim) for c in itertools.combinations(range(g.ndim), k)]
    got = next((c for c in subs if g.sum(axis=c).size == r.size and _same(g.sum(axis=c).ravel(), r.ravel())), None)
    want = next((c for c in subs if g.sum(axis=c).size == w.size and _same(g.sum(axis=c).ravel(), w.ravel())), None)
    if got is None or want is None or got == want:
        return None
    ax = lambda c: f"axis {c[0]}" if len(c) == 1 else f"axes {c}"  # noqa: E731
    return (f"its gradient is g summed over {ax(got)} (shape {r.shape}) where the input {w.shape} needs g summed over "
            f"{ax(want)}: the backward reduces over the wrong axis; use g.sum({_dim(list(want))}) there")


def shape_pattern(names, raw, right, reducible: bool = False, out_shape=(), g=None) -> tuple[str, str] | None:
    """(pattern, a sentence with the fix direction) for gradients returned in the wrong shapes, or None
    when every shape is right.  ``raw[k]``: what the code under test returned for input position ``k``
    (before any shape check; None when it returned none), ``right[k]``: J^T·g for that position.
    ``reducible``: a gradient in a shape the input broadcasts to is summed down to it by the caller (torch's
    autograd does that for a Function's backward, and refuses the others), so only the other shapes are wrong.
    ``out_shape``: the output's shape (its sizes name a factor)."""
    pairs = [(n, None if r is None else np.asarray(r, dtype=np.float64),
              None if w is None else np.asarray(w, dtype=np.float64)) for n, r, w in zip(names, raw, right)]
    wrong = [k for k, (_, r, w) in enumerate(pairs) if r is not None and w is not None and r.shape != w.shape
             and not (reducible and _sum_to(r, w.shape) is not None)]
    if not wrong:
        return None
    split = _split_point(pairs)
    if split is not None:
        return "permuted", split
    for k in wrong:
        n, r, w = pairs[k]
        if sorted(r.shape) == sorted(w.shape):
            for perm in itertools.permutations(range(r.ndim)):
                if r.transpose(perm).shape == w.shape and _same(r.transpose(perm), w):
                    return "permuted", (f"input {n}'s gradient comes back in shape {r.shape}, not the input's {w.shape}: "
                                        f"it is J^T·g with its axes permuted by {perm}; apply the inverse permutation "
                                        "(np.argsort of the forward's)")
        s = _sum_to(r, w.shape)
        if s is not None and _same(s, w):
            return "broadcast-reduction", (f"input {n}'s gradient comes back in the broadcast shape {r.shape}, not "
                                           f"summed down to the input's {w.shape}; sum over the broadcast axes "
                                           f"(sum_to(..., {n}.shape))")
    for k in wrong:
        n, r, w = pairs[k]
        if r.size == w.size:
            return "other", _reshaped(k, n, r, w, reducible, out_shape)
    both = [(r, w) for _, r, w in pairs if r is not None and w is not None]
    allr = np.concatenate([r.ravel() for r, _ in both])
    allw = np.concatenate([w.ravel() for _, w in both])
    if allr.size == allw.size and allr.size > 1 and _same(np.sort(allr), np.sort(allw)):
        return "permuted", ("the gradients hold the right numbers (those of J^T·g) in the wrong places: "
                            + "; ".join(f"{n} gets shape {r.shape} where the input is {w.shape}"
                                        for n, r, w in (pairs[k] for k in wrong)) + "; check the index mapping")
    for k in wrong:
        n, r, w = pairs[k]
        axis = _summed_g(r, w, None if g is None else np.asarray(g, dtype=np.float64))
        if axis is not None:
            return "other", f"input {n}'s gradient comes back in shape {r.shape}, not the input's {w.shape}: {axis}"
    n, r, w = pairs[wrong[0]]
    return "other", f"input {n}'s gradient comes back in shape {r.shape}, but the input's shape is {w.shape}"


def _reshaped(k: int, n: str, r: np.ndarray, w: np.ndarray, torch_refuses: bool, out_shape) -> str:
    """A gradient of as many elements as its input, in another shape (``()`` for ``(1,)``): its values said
    apart from its shape, what the caller does with it, and the fix."""
    rr, ww = r.ravel(), w.ravel()
    c = fit(rr, ww)
    if _same(rr, ww):
        values = "its values are right (those of J^T·g): only the shape is wrong"
    elif c is not None and c != 0 and explains(rr, c * ww, ww):
        name = name_factor(c, list(out_shape) + list(w.shape))
        values = f"its values are {c:.6g}{f' = {name}' if name and name != f'{c:g}' else ''} × J^T·g as well"
    else:
        values = "its values differ from J^T·g as well"
    got, want = ", ".join(map(str, r.shape)), ", ".join(map(str, w.shape))
    caller = (f"torch refuses it (\"returned an invalid gradient at index {k} - got [{got}] but expected shape "
              f"compatible with [{want}]\": a gradient is summed down to the input's shape only when that shape "
              "broadcasts to it)" if torch_refuses else "gradspec requires every gradient in its input's shape")
    return (f"it returns a gradient of shape {r.shape} for input {k} ({n}), an input of shape {w.shape}; {values}; "
            f"{caller}; return it in the input's shape ({n}.shape: e.g. .reshape({n}.shape), or reduce with "
            "keepdim=True)")


def _split_point(pairs) -> str | None:
    """The gradients are ``g`` (or J^T·g) cut into pieces along one axis at the wrong sizes: laid end to end
    they are the right gradients laid end to end (a concatenation's backward splitting at the wrong index)."""
    if len(pairs) < 2 or any(r is None or w is None for _, r, w in pairs):
        return None
    ranks = {r.ndim for _, r, _ in pairs} | {w.ndim for _, _, w in pairs}
    if len(ranks) != 1 or 0 in ranks:
        return None
    for ax in range(ranks.pop()):
        try:
            cr = np.concatenate([r for _, r, _ in pairs], axis=ax)
            cw = np.concatenate([w for _, _, w in pairs], axis=ax)
        except ValueError:
            continue
        if _same(cr, cw):
            got = tuple(int(r.shape[ax]) for _, r, _ in pairs)
            want = tuple(int(w.shape[ax]) for _, _, w in pairs)
            cuts = [int(c) for c in np.cumsum(want)[:-1]]
            return (f"g is split at the wrong index along axis {ax}: the gradients of "
                    f"{', '.join(n for n, _, _ in pairs)} get {'/'.join(map(str, got))} of its "
                    f"{int(cr.shape[ax])} entries where the inputs have {'/'.join(map(str, want))}; split at the "
                    f"inputs' own sizes (cut{'s' if len(cuts) > 1 else ''} at {', '.join(map(str, cuts))})")
    return None


def disagrees(v, suspect, twin) -> bool | None:
    """Whether verdict ``v`` has suspect and twin disagreeing (None: no verdict)."""
    return None if v is None else any(set(x.oracles) == {suspect, twin} for x in v.discrepancies)


def by_output(mini, node, spec, recheck, suspect, twin, J) -> tuple[str, tuple | None] | None:
    """Code with several outputs (a torch Function returning a tuple, checked as one flat output): which
    outputs' upstream gradients it gets wrong, from one check per output (``recheck(g)``: the verdict
    under seed g, or None) with a seed that is zero outside that output's block.  Returns (what to say,
    the wrong output's own (pattern, factor, detail) when one output alone is wrong and a pattern names
    it), or None when all are wrong, or it cannot tell."""
    blocks_of = getattr(spec, "output_blocks", None)
    if blocks_of is None or len(mini.nodes) != 1 or list(mini.roots) != [node.name]:
        return None
    try:
        env = mini.evaluate()
        blocks = blocks_of(*[np.asarray(env[i]) for i in node.inputs], **node.params)
    except Exception:  # noqa: BLE001 - no blocks, no per-output answer
        return None
    if not blocks or len(blocks) < 2:
        return None
    g = np.asarray(mini.seeds[0])
    rng = np.random.default_rng(9)
    verdicts, wrong = [], []
    for a, b, _ in blocks:
        gk = np.zeros(g.size, dtype=g.dtype)
        gk[a:b] = rng.uniform(0.5, 1.5, b - a) * rng.choice([-1.0, 1.0], b - a)
        verdicts.append(recheck(gk.reshape(g.shape)))
        wrong.append(disagrees(verdicts[-1], suspect, twin))
        if wrong[-1] is None:
            return None
    if all(wrong) or not any(wrong):
        return None
    n = len(blocks)
    bad_k, ok_k = [k for k in range(n) if wrong[k]], [k for k in range(n) if not wrong[k]]
    text = (f"for the upstream gradient of output{'s' if len(bad_k) > 1 else ''} {', '.join(map(str, bad_k))} of {n} "
            f"(shape{'s' if len(bad_k) > 1 else ''} {', '.join(str(tuple(blocks[k][2])) for k in bad_k)}) only "
            f"(output{'s' if len(ok_k) > 1 else ''} {', '.join(map(str, ok_k))} {'are' if len(ok_k) > 1 else 'is'} right)")
    own = None
    if len(bad_k) == 1:  # its own pattern, on a seed of that output alone
        v = verdicts[bad_k[0]]
        u, t = v.results.get(suspect), v.results.get(twin)
        if u is not None and t is not None:
            ls = [l for l in v.case.grad_leaves() if u.get(l.name) is not None and t.get(l.name) is not None]
            own = classify(v.case, node, spec, ls, u, t, J, np.asarray(v.case.seeds[0], dtype=np.float64))
            own = own if own[0] not in ("other", *TEXT_PATTERNS) else None  # (as before they were named)
    return text, own
