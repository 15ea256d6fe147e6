"""``gs.check``'s comparison of the pairs when an estimate's error bound is still to be computed (finite
differences' ``LazyErrors``, ``gradspec.oracles._fd_lazy``).

Each pair's allowance is ``rtol * scale + floor [+ noise] + fd_factor * error [max claim]``: the estimate's
term is >= 0, so a pair that agrees without it agrees with it (the sum and the max are monotone in it, and
so is the rounding of each).  So the pairs are compared first without the pending error bounds, once (no
rounding-noise re-run: a failing pair there goes to the full comparison).  Where every pair agrees with
room to spare (``MARGIN``), that is the verdict's comparison: the error bound is not computed, and each
``Comparison.max_ratio`` is the full comparison's ratio, computed when first read (the error bounds then
too).  Anywhere else the full comparison runs at once, as it always did.

Why a margin: with the error bound, a non-finite bound sends every pair of the case from the vectorised
comparison to ``check._compare``, whose ratios equal the vectorised ones up to rounding (a few ulps), not
bit for bit; a pair within that of 1.0 could change sides.  A ratio <= MARGIN cannot.

Example::

    >>> from gradspec._check_lazy import MARGIN
    >>> MARGIN
    0.999
"""

from __future__ import annotations

__all__ = ["MARGIN", "compare", "lazy_comparison"]

MARGIN = 0.999  # (see above: far from 1 in units of the two comparison paths' rounding differences)


def _pending(errors) -> bool:
    return getattr(errors, "pending", False)


def compare(compare_pairs, make, case, leaves, results, kinds, precisions, jac, fd_errs, gated, claim):
    """``compare_pairs(case, leaves, results, kinds, precisions, jac, fd_errs, gated, claim)`` (check's
    ``_compare_pairs``: (comparisons, discrepancies)), without computing pending error bounds where the
    pairs agree without them; ``make`` = ``lazy_comparison(Comparison)``."""
    if not fd_errs or not any(_pending(e) for e in fd_errs.values()):
        return compare_pairs(case, leaves, results, kinds, precisions, jac, fd_errs, gated, claim)
    known = {n: (e.lower if _pending(e) else e) for n, e in fd_errs.items()}
    comps, found = compare_pairs(case, leaves, results, kinds, precisions, jac, known, gated, claim, retry=False)
    if found or not all(c.agreed and c.max_ratio <= MARGIN for c in comps):
        return compare_pairs(case, leaves, results, kinds, precisions, jac, fd_errs, gated, claim)
    # (copies of the dicts: the verdict's owner may edit its results; the full comparison sees these)
    args = (case, leaves, dict(results), kinds, precisions, jac, dict(fd_errs), gated, claim)
    full = _Full(compare_pairs, args)
    return [make(c.oracles, True, full) for c in comps], []


class _Full:
    """The full comparison (every error bound computed), run once when a ratio is first read."""

    __slots__ = ("_run", "_ratios")

    def __init__(self, compare_pairs, args):
        self._run, self._ratios = (compare_pairs, args), None

    def ratio(self, pair) -> float:
        if self._ratios is None:
            fn, args = self._run
            comps, found = fn(*args)
            self._ratios = {c.oracles: c for c in comps}
            self._run = None
            if found or not all(c.agreed for c in comps):  # (cannot happen: see the module's docstring)
                raise RuntimeError("gradspec internal error: a comparison that agreed without the estimates' error "
                                   f"bounds disagrees with them on {args[0]!r}; please report it")
        return self._ratios[pair].max_ratio


_CLASSES: dict = {}


def lazy_comparison(base):
    """The subclass of ``base`` (check's ``Comparison``) whose ``max_ratio`` may be a pending ``_Full``, read
    when first asked for; pickled and copied as a plain ``base``."""
    cls = _CLASSES.get(base)
    if cls is None:
        def get(self):
            v = self.__dict__["_ratio"]
            if type(v) is _Full:
                v = self.__dict__["_ratio"] = v.ratio(self.oracles)
            return v

        def put(self, v):
            self.__dict__["_ratio"] = v

        def reduce(self):
            return (base, (self.oracles, self.agreed, self.max_ratio))

        def eq(self, other):  # (equal to the plain comparison it stands for)
            if not isinstance(other, base):
                return NotImplemented
            return (self.oracles, self.agreed, self.max_ratio) == (other.oracles, other.agreed, other.max_ratio)

        cls = _CLASSES[base] = type("Lazy" + base.__name__, (base,), {
            "max_ratio": property(get, put, doc="the worst ratio |a - b| / tolerance (computed when first read)"),
            "__reduce__": reduce, "__eq__": eq, "__hash__": None, "__doc__": base.__doc__,
            "__qualname__": base.__qualname__, "__module__": base.__module__})  # (its repr is the plain one's)
    return cls
