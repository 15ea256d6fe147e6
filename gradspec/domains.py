"""Where an op's input values are drawn, and where the op is not differentiable.

A domain says two things: which values are *valid* (``contains``) and which points are
*non-differentiable* (``singular``: kinks, ties, poles).  Strategies draw values from
``strategy()``; the finite-difference oracle refuses a case whose input lies within its
step reach of a singular point.

Example::

    >>> import gradspec as gs
    >>> d = gs.domains.away_from([0.0], margin=0.1)
    >>> d.contains(0.05), d.contains(0.5)
    (False, True)
    >>> gs.domains.coerce("positive") == gs.domains.positive()
    True
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

__all__ = ["Domain", "real", "positive", "interval", "away_from", "coerce", "text"]


@dataclasses.dataclass(frozen=True)
class Domain:
    """A set of valid real values: an open interval minus neighbourhoods of points."""

    lo: float = -math.inf
    hi: float = math.inf
    points: tuple[float, ...] = ()  # non-differentiable points (kinks, poles, ties)
    margin: float = 0.0  # values are drawn at least this far from ``points``
    name: str = "real"

    def contains(self, v: float) -> bool:
        if not (self.lo < v < self.hi):
            return False
        return all(abs(v - p) >= self.margin for p in self.points)

    def distance_to_singular(self, v: float) -> float:
        """Distance from ``v`` to the nearest non-differentiable point or domain edge."""
        d = math.inf
        for p in self.points:
            d = min(d, abs(v - p))
        if math.isfinite(self.lo):
            d = min(d, v - self.lo)
        if math.isfinite(self.hi):
            d = min(d, self.hi - v)
        return d

    def describe(self) -> str:
        parts = []
        if math.isfinite(self.lo) or math.isfinite(self.hi):
            parts.append(f"({self.lo:g}, {self.hi:g})")
        if self.points:
            parts.append("away from " + ", ".join(f"{p:g}" for p in self.points) + f" by {self.margin:g}")
        return self.name + (" " + " ".join(parts) if parts else "")

    def to_json(self) -> dict:
        return {"lo": _f(self.lo), "hi": _f(self.hi), "points": list(self.points), "margin": self.margin, "name": self.name}

    @classmethod
    def from_json(cls, d: dict) -> "Domain":
        return cls(float(d["lo"]), float(d["hi"]), tuple(d["points"]), float(d["margin"]), d["name"])

    def strategy(self, *, min_magnitude: float = 1e-3, max_magnitude: float = 1e3):
        from ._private.values import domain_floats

        return domain_floats(self, min_magnitude=min_magnitude, max_magnitude=max_magnitude)


def _f(x: float):
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def real() -> Domain:
    """All of R (the default)."""
    return Domain()


def positive(margin: float = 0.0) -> Domain:
    """Strictly positive values (log, sqrt, rsqrt...); 0 is the singular edge."""
    return Domain(lo=0.0, points=(0.0,), margin=margin, name="positive")


def interval(lo: float, hi: float) -> Domain:
    """The open interval (lo, hi); both ends are treated as singular."""
    if not lo < hi:
        raise ValueError(f"interval(lo={lo!r}, hi={hi!r}): need lo < hi")
    return Domain(lo=float(lo), hi=float(hi), name="interval")


def away_from(points: Sequence[float] | float, margin: float = 1e-2) -> Domain:
    """R minus ``margin``-neighbourhoods of ``points`` (kinks such as abs at 0)."""
    if isinstance(points, (int, float)):
        points = [points]
    if margin < 0:
        raise ValueError(f"away_from(margin={margin!r}): margin must be >= 0")
    return Domain(points=tuple(float(p) for p in points), margin=float(margin), name="away_from")


_BY_NAME = {"real": real, "positive": positive}  # the constructors that need no argument
_ACCEPTS = ("a gradspec.domains.Domain (gs.domains.real(), gs.domains.positive(), gs.domains.interval(lo, hi), "
            "gs.domains.away_from(points, margin)), the name 'real' or 'positive', or a list with one per input")


def coerce(domain, where: str = "domain"):
    """``domain`` as Domain(s): None, a Domain, ``"real"`` / ``"positive"``, or a list/tuple of those.

    Anything else raises ``TypeError`` (``ValueError`` for a name that needs arguments or is unknown)
    naming ``where`` and what is accepted -- not an ``AttributeError`` from deep inside a run."""
    if domain is None or isinstance(domain, Domain):
        return domain
    if isinstance(domain, (list, tuple)):
        return [_one(d, where) for d in domain]
    return _one(domain, where)


def _one(d, where: str) -> Domain:
    if isinstance(d, Domain):
        return d
    if isinstance(d, str):
        if d in _BY_NAME:
            return _BY_NAME[d]()
        if d in ("interval", "away_from"):
            args = "lo, hi" if d == "interval" else "points, margin"
            raise ValueError(f"{where}: domain={d!r} needs arguments: pass gs.domains.{d}({args})")
        raise ValueError(f"{where}: domain={d!r} is not a domain name; give {_ACCEPTS}")
    raise TypeError(f"{where}: domain={d!r} ({type(d).__name__}) is not a domain; give {_ACCEPTS}")


def text(domain, *, source: bool = False) -> str:
    """A declared domain as the user wrote it: for a message (``source=False``: ``interval(-5, -1)``; ``None`` is
    ``real()``), or as Python source a generated repro can run (``source=True``: ``gs.domains.interval(-5.0, -1.0)``,
    exact reprs; ``None`` stays ``None``).  A list renders each entry.

    >>> text([interval(-5, -1), positive()])
    '[interval(-5, -1), positive()]'
    >>> text(interval(-5, -1), source=True)
    'gs.domains.interval(-5.0, -1.0)'
    """
    if isinstance(domain, (list, tuple)):
        return "[" + ", ".join(text(d, source=source) for d in domain) + "]"
    if domain is None and not source:
        return "real()"
    name = getattr(domain, "name", None)
    num = repr if source else (lambda v: format(v, "g"))  # source: exact; a message: short
    pre = "gs.domains." if source else ""
    if name == "real":
        return f"{pre}real()"
    if name == "interval":
        return f"{pre}interval({num(domain.lo)}, {num(domain.hi)})"
    if name == "positive":
        return f"{pre}positive({num(domain.margin)})" if domain.margin else f"{pre}positive()"
    if name == "away_from":
        return f"{pre}away_from({list(domain.points)!r}, {num(domain.margin)})"
    return repr(domain)
