"""Float values that respect one or several :class:`~gradspec.domains.Domain` s.

A domain is an open interval minus neighbourhoods of singular points.  Intersected with the
magnitude window ``{0} U [min_magnitude, max_magnitude]`` (in absolute value) and shrunk away
from every edge and singular point by a *relative* margin, it becomes a finite union of closed
intervals (:class:`Allowed`).  Values are drawn from that set and nowhere else, which is what
lets a finite-difference oracle perturb them without crossing a kink, a pole or a domain edge.

Two margins are used on purpose: values are *drawn* ``DRAW_MARGIN`` (relative) away from
singular points and *checked* against the smaller ``CHECK_MARGIN``, so rounding (a float32
cast, a reused leaf) never turns a drawn value into a rejected one.

Example::

    >>> from gradspec import domains as D
    >>> from gradspec._private.values import Allowed
    >>> Allowed.of([D.positive()], 1e-3, 1e3).intervals
    [(0.0015, 1000.0)]
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
from typing import Sequence

import numpy as np

__all__ = [
    "Allowed",
    "undrawable",
    "domain_floats",
    "tame_array",
    "element_margin_ok",
    "Decoder",
    "decoder",
    "BYTES_PER_ELEMENT",
    "DRAW_MARGIN",
    "CHECK_MARGIN",
    "NICE",
]

DRAW_MARGIN = 1.5e-3  # relative distance kept from edges/singular points when drawing
CHECK_MARGIN = 1e-3  # relative distance required by the checks (>> finite-difference reach)

# "Interesting" values, simplest first: the first one inside the allowed set is what an
# element shrinks to.  Exact 0 and exact repeats come from here (and ties from repeats).
NICE = (1.0, 0.0, -1.0, 2.0, 0.5, -0.5, -2.0, 3.0, -3.0, 0.25, 10.0, -10.0, 1e-3, -1e-3, 1e3, -1e3)


def _m(p: float, margin: float = 0.0) -> float:
    # A hair above the domain's own margin: p + margin - p can round below margin.
    return max(margin * (1 + 1e-6), DRAW_MARGIN * max(1.0, abs(p)))


@dataclasses.dataclass(frozen=True)
class Allowed:
    """A finite union of disjoint closed intervals, sorted; ``(0.0, 0.0)`` stands for exact zero."""

    intervals: list

    @classmethod
    def of(cls, domains: Sequence, min_magnitude: float, max_magnitude: float) -> "Allowed":
        ivs = [(-max_magnitude, -min_magnitude), (0.0, 0.0), (min_magnitude, max_magnitude)]
        for d in domains:
            if d is None:
                continue
            if math.isfinite(d.lo):
                a = d.lo + _m(d.lo)
                ivs = [(max(x, a), y) for x, y in ivs if y >= a]
            if math.isfinite(d.hi):
                b = d.hi - _m(d.hi)
                ivs = [(x, min(y, b)) for x, y in ivs if x <= b]
            for p in d.points:
                m = _m(p, d.margin)
                out = []
                for x, y in ivs:
                    if y < p - m or x > p + m:  # untouched (the removed neighbourhood is open)
                        out.append((x, y))
                        continue
                    if x <= p - m:
                        out.append((x, p - m))
                    if y >= p + m:
                        out.append((p + m, y))
                ivs = out
        ivs = sorted((float(x), float(y)) for x, y in ivs if x <= y)
        return cls(ivs)

    @property
    def empty(self) -> bool:
        return not self.intervals

    def contains(self, v: float) -> bool:
        return any(x <= v <= y for x, y in self.intervals)

    def project(self, v: float) -> float:
        """``v`` itself if allowed, else the nearest allowed value (an interval end)."""
        if not math.isfinite(v):
            v = math.copysign(1e300, v) if not math.isnan(v) else 0.0
        best, dist = None, math.inf
        for x, y in self.intervals:
            if x <= v <= y:
                return v + 0.0  # + 0.0 turns -0.0 into 0.0
            for e in (x, y):
                if abs(e - v) < dist:
                    best, dist = e, abs(e - v)
        return best + 0.0

    def nice(self) -> list[float]:
        vals = [v for v in NICE if self.contains(v)]
        if not vals:  # e.g. interval(5, 6): fall back to the middle of the widest piece
            x, y = max(self.intervals, key=lambda iv: iv[1] - iv[0])
            vals = [(x + y) / 2]
        return vals

    def tame(self) -> "Allowed":
        """The well-behaved part: magnitudes in [0.25, 2] (or failing that, [-10, 10])."""
        for lo, hi in ((0.25, 2.0), (1e-2, 10.0)):
            ivs = []
            for x, y in self.intervals:
                for a, b in ((-hi, -lo), (lo, hi)):
                    u, w = max(x, a), min(y, b)
                    if u < w:
                        ivs.append((u, w))
            if ivs:
                return Allowed(sorted(ivs))
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` values uniform over the allowed set (by length; isolated points only if nothing else)."""
        ivs = [iv for iv in self.intervals if iv[1] > iv[0]] or self.intervals
        lengths = np.array([y - x for x, y in ivs], dtype=float)
        p = lengths / lengths.sum() if lengths.sum() > 0 else np.full(len(ivs), 1 / len(ivs))
        which = rng.choice(len(ivs), size=n, p=p)
        lo = np.array([ivs[i][0] for i in which])
        hi = np.array([ivs[i][1] for i in which])
        return lo + (hi - lo) * rng.random(n)


def _as_list(domain) -> list:
    if domain is None:
        return []
    if isinstance(domain, (list, tuple)):
        return list(domain)
    return [domain]


def domain_floats(domain, *, min_magnitude: float = 1e-3, max_magnitude: float = 1e3):
    """Strategy for Python floats inside ``domain`` (a Domain or a list of them, intersected).

    Magnitudes are 0 or within ``[min_magnitude, max_magnitude]``; edges and singular points
    are avoided by ``max(domain.margin, DRAW_MARGIN * max(1, |point|))``.  Mixes simple values
    (1, 0, -1, 0.5, ...), moderate floats, log-uniform magnitudes (tiny and large) and wide
    floats; shrinks towards the first simple value in the domain (1.0 for most domains).
    Raises ``ValueError`` if the set is empty.
    """
    from hypothesis import strategies as st

    allowed = Allowed.of(_as_list(domain), min_magnitude, max_magnitude)
    if allowed.empty:
        raise ValueError(
            f"no float in {[d.describe() for d in _as_list(domain)]} with magnitude 0 or in "
            f"[{min_magnitude:g}, {max_magnitude:g}] (after the {DRAW_MARGIN:g} relative margin)"
        )
    lo_e, hi_e = math.log10(min_magnitude), math.log10(max_magnitude)
    nice = st.sampled_from(allowed.nice())
    moderate = st.floats(-10.0, 10.0, allow_nan=False, allow_infinity=False)
    logmag = st.tuples(st.booleans(), st.floats(lo_e, hi_e)).map(lambda t: (-1.0 if t[0] else 1.0) * 10.0 ** t[1])
    wide = st.floats(-max_magnitude, max_magnitude, allow_nan=False, allow_infinity=False)
    # Weights by repetition: simple values ~30%, moderate ~40%, tiny/large ~20%, anything ~10%.
    return st.one_of(
        nice,
        moderate.map(allowed.project),
        nice,
        moderate.map(allowed.project),
        logmag.map(allowed.project),
        moderate.map(allowed.project),
        logmag.map(allowed.project),
        nice,
        moderate.map(allowed.project),
        wide.map(allowed.project),
    )


BYTES_PER_ELEMENT = 4
# What the first byte of an element selects (out of 256), by range; all-zero bytes decode to the
# first simple value of the domain (1.0 for most), which is where shrinking heads.
_NICE_END, _MODERATE_END, _LOGMAG_END, _WIDE_END = 77, 179, 229, 250  # then: repeat an earlier element
_UNIT = float(2**24)
_SMALL = 16  # elements up to which Decoder decodes in Python floats (see Decoder._small)


def _project(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Each value itself if inside one of the intervals ``[lo_k, hi_k]``, else the nearest interval end."""
    d = np.maximum(np.maximum(lo[None, :] - v[:, None], v[:, None] - hi[None, :]), 0.0)
    k = np.argmin(d, axis=1)
    return np.clip(v, lo[k], hi[k]) + 0.0  # + 0.0 turns -0.0 into 0.0


class Decoder:
    """Turns ``BYTES_PER_ELEMENT`` bytes per element into floats of one :class:`Allowed` set.

    This is how leaf values are drawn: ONE Hypothesis bytes choice per leaf (few wide choices are what
    Hypothesis generates and shrinks fastest), mapped here without any rejection.  Byte 0 of an element
    picks the kind of value -- simple (``NICE``: exact 0, +-1, 2, 0.5 ... ~30%), moderate (uniform over
    the allowed part of [-10, 10], ~40%), log-uniform magnitudes from tiny to large (~20%), anything up
    to the largest magnitude (~8%), or an exact repeat of an earlier element (~2%, ties) -- and the
    other three bytes the value within that kind.  Zero bytes decode to the first simple value the
    set allows, so Hypothesis' shrinking (bytes towards zero) shrinks values towards 1.0.
    """

    def __init__(self, allowed: Allowed, min_magnitude: float, max_magnitude: float):
        self.allowed = allowed
        ivs = allowed.intervals
        self.lo = np.array([x for x, _ in ivs])
        self.hi = np.array([y for _, y in ivs])
        self.nice = np.array(allowed.nice())
        self.lo_e, self.hi_e = math.log10(min_magnitude), math.log10(max_magnitude)
        self.max_magnitude = max_magnitude
        self.moderate = self._pieces(-10.0, 10.0)
        self._nice_list = [float(v) for v in self.nice]
        self._moderate_lists = tuple([float(v) for v in a] for a in self.moderate)
        self._intervals = [(float(a), float(b)) for a, b in zip(self.lo, self.hi)]

    def _pieces(self, a: float, b: float):
        """Interval pieces of the set within [a, b] (the whole set if that part has no length)."""
        lo, hi = np.maximum(self.lo, a), np.minimum(self.hi, b)
        keep = hi > lo
        if not keep.any():
            lo, hi = self.lo, self.hi
            keep = hi > lo
            if not keep.any():  # isolated points only (e.g. exact 0)
                return self.lo, self.lo, np.zeros(len(self.lo))
        lo, hi = lo[keep], hi[keep]
        return lo, hi, np.cumsum(hi - lo)

    def _from_unit(self, u: np.ndarray, pieces) -> np.ndarray:
        lo, hi, cum = pieces
        if cum[-1] == 0:
            return np.full(u.shape, lo[0])
        t = u * cum[-1]
        k = np.minimum(np.searchsorted(cum, t, side="right"), len(cum) - 1)
        start = cum[k] - (hi[k] - lo[k])
        return np.minimum(lo[k] + (t - start), hi[k])

    def __call__(self, raw: bytes, n: int) -> np.ndarray:
        """``n`` float64 values from ``raw`` (missing bytes count as zero)."""
        if n <= _SMALL:
            return np.array(self._small(raw, n), dtype=np.float64)
        need = n * BYTES_PER_ELEMENT
        buf = np.zeros(need, dtype=np.uint8)
        got = np.frombuffer(raw[:need], dtype=np.uint8)
        buf[: got.size] = got
        b = buf.reshape(n, BYTES_PER_ELEMENT).astype(np.int64)
        kind = b[:, 0]
        payload = (b[:, 1] << 16) | (b[:, 2] << 8) | b[:, 3]
        u = payload / _UNIT
        out = self.nice[payload % len(self.nice)]
        m = (kind >= _NICE_END) & (kind < _MODERATE_END)
        if m.any():
            out[m] = self._from_unit(u[m], self.moderate)
        m = (kind >= _MODERATE_END) & (kind < _LOGMAG_END)
        if m.any():
            sign = np.where(kind[m] % 2 == 1, -1.0, 1.0)
            out[m] = _project(sign * 10.0 ** (self.lo_e + (self.hi_e - self.lo_e) * u[m]), self.lo, self.hi)
        m = (kind >= _LOGMAG_END) & (kind < _WIDE_END)
        if m.any():
            out[m] = _project((2 * u[m] - 1) * self.max_magnitude, self.lo, self.hi)
        for i in np.flatnonzero(kind >= _WIDE_END):
            if i:  # an exact repeat of an earlier element: ties inside one array
                out[i] = out[int(payload[i]) % i]
        return out

    def _small(self, raw: bytes, n: int) -> list:
        # The same decoding element by element in Python floats (bit for bit: the same IEEE operations,
        # tests/test_strategies.py compares the two): most leaves hold a few elements, where the numpy
        # path's fixed cost (a dozen array calls, ~20-50 us) is most of a value set's draw.
        raw = bytes(raw[: n * BYTES_PER_ELEMENT]).ljust(n * BYTES_PER_ELEMENT, b"\0")
        out: list = []
        for i in range(n):
            kind, b1, b2, b3 = raw[4 * i: 4 * i + 4]
            payload = (b1 << 16) | (b2 << 8) | b3
            if kind < _NICE_END:
                v = self._nice_list[payload % len(self._nice_list)]
            elif kind < _MODERATE_END:
                v = self._unit_scalar(payload / _UNIT)
            elif kind < _LOGMAG_END:
                v = self._project_scalar((-1.0 if kind % 2 == 1 else 1.0)
                                         * float(np.power(10.0, self.lo_e + (self.hi_e - self.lo_e) * (payload / _UNIT))))
            elif kind < _WIDE_END:
                v = self._project_scalar((2 * (payload / _UNIT) - 1) * self.max_magnitude)
            elif i:  # an exact repeat of an earlier element: ties inside one array
                v = out[payload % i]
            else:
                v = self._nice_list[payload % len(self._nice_list)]
            out.append(v)
        return out

    def _unit_scalar(self, u: float) -> float:
        lo, hi, cum = self._moderate_lists
        if cum[-1] == 0:
            return lo[0]
        t = u * cum[-1]
        k = min(bisect.bisect_right(cum, t), len(cum) - 1)
        start = cum[k] - (hi[k] - lo[k])
        return min(lo[k] + (t - start), hi[k])

    def _project_scalar(self, v: float) -> float:
        best, dist = 0, math.inf
        for k, (a, b) in enumerate(self._intervals):
            d = max(a - v, v - b, 0.0)
            if d < dist:  # the first interval at the least distance, as numpy's argmin
                best, dist = k, d
        a, b = self._intervals[best]
        return min(max(v, a), b) + 0.0


@functools.lru_cache(maxsize=4096)
def decoder(domains: tuple, min_magnitude: float = 1e-3, max_magnitude: float = 1e3) -> Decoder:
    """The (cached) decoder for values inside every domain of ``domains``; ValueError if none exist."""
    allowed = Allowed.of(list(domains), min_magnitude, max_magnitude)
    if allowed.empty:
        raise ValueError(
            f"no float in {[d.describe() for d in domains if d is not None]} with magnitude 0 or in "
            f"[{min_magnitude:g}, {max_magnitude:g}] (after the {DRAW_MARGIN:g} relative margin)"
        )
    return Decoder(allowed, min_magnitude, max_magnitude)


def undrawable(domains, min_magnitude: float = 1e-3, max_magnitude: float = 1e3) -> str:
    """Why no value can be drawn inside every domain of ``domains`` (a Domain or a list, intersected), or "".

    ``interval(0.499, 0.501)`` (values near a kink) is narrower than the margins kept inside its edges; magnitudes
    above ``max_magnitude`` are never drawn (tryout7 #8: a bare ZeroDivisionError, or a run that drew nothing).

    >>> from gradspec import domains as D
    >>> undrawable(D.interval(0.49, 0.51))
    ''
    >>> undrawable(D.interval(0.499, 0.501)).startswith('no value can be drawn from interval (0.499, 0.501)')
    True
    """
    ds = [d for d in _as_list(domains) if d is not None]
    if not ds or not Allowed.of(ds, min_magnitude, max_magnitude).empty:
        return ""
    lo, hi = max(d.lo for d in ds), min(d.hi for d in ds)
    if lo >= max_magnitude or hi <= -max_magnitude:
        why = (f"values of magnitude above {max_magnitude:g} are never drawn: rescale the input (e.g. pass x / "
               f"{max_magnitude:g} and scale it back inside the function)")
    elif math.isfinite(lo) and math.isfinite(hi):
        why = (f"it is narrower than the {_m(lo) + _m(hi):.3g} those margins take together: widen it")
    else:
        why = "its singular points and edges leave no room between their margins"
    return (f"no value can be drawn from {' and '.join(d.describe() for d in ds)}: values are drawn with magnitude 0 "
            f"or {min_magnitude:g} to {max_magnitude:g}, at least {DRAW_MARGIN:g} * max(1, |edge|) inside each edge "
            f"and away from each singular point (so that a finite-difference step never crosses one); {why}. To check "
            "chosen points instead, build the case yourself: gs.check(gs.Case.build(...))")


def tame_array(rng: np.random.Generator, shape: tuple, domains, *, min_magnitude: float = 1e-3,
               max_magnitude: float = 1e3, dtype="float64") -> np.ndarray:
    """Distinct moderate values (|v| in [0.25, 2] where the domain allows) for repairing a case."""
    n = int(np.prod(shape, dtype=np.int64))
    try:
        key = (tuple(_as_list(domains)), float(min_magnitude), float(max_magnitude))
        hash(key)
    except TypeError:  # an unhashable domain: the same computation, uncached
        return _tame_set(domains, min_magnitude, max_magnitude).sample(rng, n).reshape(shape).astype(dtype)
    cdf, lo, width = _tame_plan(*key)
    # What Allowed.sample draws, bit for bit (tests/test_strategies.py compares them): numpy's
    # Generator.choice with p is this cumulative-sum search over one uniform per element; its
    # per-call checks of p, and the intervals (Allowed.of and tame, a few dozen us a repair), are done
    # once per domain set.
    which = cdf.searchsorted(rng.random(n), side="right")
    return (lo[which] + width[which] * rng.random(n)).reshape(shape).astype(dtype)


def _tame_set(domains, min_magnitude: float, max_magnitude: float) -> "Allowed":
    allowed = Allowed.of(_as_list(domains), min_magnitude, max_magnitude)
    if allowed.empty:
        allowed = Allowed.of(_as_list(domains), 1e-6, 1e6)
    if allowed.empty:
        raise ValueError(undrawable(domains, 1e-6, 1e6) or f"no value can be drawn from {domains!r}")
    return allowed.tame()


@functools.lru_cache(maxsize=1024)
def _tame_plan(domains: tuple, min_magnitude: float, max_magnitude: float):
    """``(cdf, lo, width)`` of :meth:`Allowed.sample` over ``tame_array``'s set for these domains."""
    ivs = [iv for iv in _tame_set(list(domains), min_magnitude, max_magnitude).intervals if iv[1] > iv[0]] \
        or _tame_set(list(domains), min_magnitude, max_magnitude).intervals
    lengths = np.array([y - x for x, y in ivs], dtype=float)
    p = lengths / lengths.sum() if lengths.sum() > 0 else np.full(len(ivs), 1 / len(ivs))
    cdf = p.cumsum()
    cdf /= cdf[-1]
    lo = np.array([x for x, _ in ivs])
    hi = np.array([y for _, y in ivs])
    for a in (cdf, lo, hi):
        a.setflags(write=False)
    return cdf, lo, hi - lo


def element_margin_ok(domain, a: np.ndarray) -> bool:
    """Every element of ``a`` is inside ``domain`` and ``CHECK_MARGIN`` (relative) from its singular points."""
    a = np.asarray(a, dtype=np.float64)
    if a.size == 0 or domain is None:
        return True
    if a.size <= _SMALL:
        return _margin_ok_small(domain, a.ravel().tolist())
    if not np.all(np.isfinite(a)):
        return False
    scale = CHECK_MARGIN * np.maximum(1.0, np.abs(a))
    if math.isfinite(domain.lo) and not np.all(a - domain.lo >= scale):
        return False
    if math.isfinite(domain.hi) and not np.all(domain.hi - a >= scale):
        return False
    for p in domain.points:
        if not np.all(np.abs(a - p) >= np.maximum(scale, domain.margin)):
            return False
    return True


def _margin_ok_small(domain, vals: list) -> bool:
    # element_margin_ok element by element in Python floats (the same IEEE operations, so the same
    # answer; tests/test_strategies.py compares the two): the value draw asks this of every input of
    # every node, mostly of a few elements, where a dozen numpy calls cost ~10 us.
    lo, hi, points, dm = domain.lo, domain.hi, domain.points, domain.margin
    lo_on, hi_on = math.isfinite(lo), math.isfinite(hi)
    for v in vals:
        if not math.isfinite(v):
            return False
        scale = CHECK_MARGIN * max(1.0, abs(v))
        if lo_on and not v - lo >= scale:
            return False
        if hi_on and not hi - v >= scale:
            return False
        for p in points:
            if not abs(v - p) >= max(scale, dm):
                return False
    return True
