"""Shapes as users have them: which input dims are tied, learnt by probing, then varied.

From one set of example shapes and a ``probe(shapes) -> bool`` that says whether the code accepts
them (one real call), :func:`learn` finds

* the tie classes: the sets of axes (across inputs) that must keep one size.  Axes of equal size
  in the example are candidates; the smallest set containing an axis that can move to a fresh size
  together (and no smaller one) is its class.  An axis that cannot move at all stays fixed;
* which axes may be 1 while the others of their class are not (broadcasting, one way or both);
* whether extra leading (batch / loop) axes are accepted on all inputs, on each input alone
  (one-way broadcasting), and with 1s among them (two-way).

:meth:`ShapeModel.draw` then draws shapes that keep every tie (so a rule tying four inputs is
satisfied by construction, not by luck), vary the sizes (1 included where allowed) and the
ranks (up to :data:`MAX_RANK`).  :func:`from_signature` builds the same model from a numpy gufunc
signature, with the loop dims broadcasting ``"full"``, ``"one-way"`` or ``"none"``.

Example::

    >>> from gradspec._private.shapes_learn import learn
    >>> def probe(shapes):  # A (m, n), x (n,), b (m,): A @ x + b
    ...     a, x, b = shapes
    ...     return len(a) == 2 and x == (a[1],) and b == (a[0],)
    >>> m = learn([(3, 4), (4,), (3,)], probe)
    >>> m.describe()
    'x0: (d0, d1), x1: (d1,), x2: (d0,)'
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Sequence

__all__ = ["ShapeModel", "learn", "from_signature", "MAX_RANK", "BROADCAST_MODES"]

MAX_RANK = 6  # numpy/torch code is routinely written for up to 6-d inputs (batch x channels x 3-d, ...)
BROADCAST_MODES = ("auto", "full", "one-way", "none")
_MAX_SUBSET = 4  # the largest tie class searched for (beyond it: the whole group is one class)
_MAX_PROBES = 400  # per learn(): each probe is one call of the user's code


@dataclasses.dataclass
class ShapeModel:
    """Per input, per axis: a tie class id.  ``sizes[c]`` is the example size of class ``c``;
    ``varies[c]`` whether it may change; ``ones`` the (input, axis) that may be 1 on their own;
    ``loop_all`` extra leading axes on every input at once; ``loop_alone[i]`` on input i alone;
    ``loop_ones[i]`` input i's loop axes may be 1 where the others' are not."""

    axes: list  # list[list[int]]
    sizes: list  # list[int]
    varies: list  # list[bool]
    ones: set = dataclasses.field(default_factory=set)
    loop_all: bool = False
    loop_alone: list = dataclasses.field(default_factory=list)
    loop_ones: list = dataclasses.field(default_factory=list)
    max_loop: int = 2

    @property
    def n(self) -> int:
        return len(self.axes)

    def describe(self) -> str:
        parts, label = [], {}
        for i, ax in enumerate(self.axes):
            names = []
            for a, c in enumerate(ax):
                if self.varies[c]:
                    label.setdefault(c, f"d{len(label)}")  # numbered in order of appearance
                nm = label[c] if self.varies[c] else str(self.sizes[c])
                names.append(nm + ("|1" if (i, a) in self.ones else ""))
            lead = "..., " if self.loop_all or (self.loop_alone and self.loop_alone[i]) else ""
            parts.append(f"x{i}: ({lead}{', '.join(names)}{',' if len(names) == 1 and not lead else ''})")
        return ", ".join(parts)

    def example(self) -> list[tuple]:
        return [tuple(self.sizes[c] for c in ax) for ax in self.axes]

    def side_limit(self, c: int, max_side: int) -> int:
        """The largest size class ``c`` is drawn with: ``max_side``, or twice the example's size when
        that is larger (code with a path for big sizes -- a blocked loop, a fast path from n >= 7 --
        is reached only above the example's size)."""
        return max(max_side, 2 * self.sizes[c])

    def draw(self, draw, *, max_side: int = 5, max_elements: int = 300) -> list[tuple]:
        """Shapes that keep every tie (Hypothesis ``draw``); sizes 1..max(max_side, 2 x the
        example's), some axes 1 where allowed, leading loop axes where accepted; total rank at most
        MAX_RANK."""
        from hypothesis import strategies as st

        # 3 means "as in the example" (a quarter of the draws); 0 (the shrink target) a drawn size,
        # which shrinks towards 1: a finding is shrunk below the example's shape where the rule allows
        sizes = [self.sizes[c] if not self.varies[c] or draw(st.integers(0, 3)) == 3
                 else draw(st.integers(1, self.side_limit(c, max_side))) for c in range(len(self.sizes))]
        ones = {o for o in sorted(self.ones) if draw(st.integers(0, 3)) == 0}
        room = MAX_RANK - max((len(ax) for ax in self.axes), default=0)
        who, loop, loop_ones = [False] * self.n, [], {}
        if (self.loop_all or any(self.loop_alone)) and room > 0 and draw(st.integers(0, 2)) > 0:
            loop = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, min(room, self.max_loop + 2))))]
            who = [True] * self.n if self.loop_all else [False] * self.n
            alone = [i for i in range(self.n) if self.loop_alone and self.loop_alone[i]]
            if alone and (not self.loop_all or draw(st.integers(0, 2)) == 0):
                pick = draw(st.sampled_from(alone))
                who = [i == pick or (self.loop_all and draw(st.booleans())) for i in range(self.n)]
            for i in range(self.n):
                if who[i] and self.loop_ones and self.loop_ones[i] and draw(st.integers(0, 2)) == 0:
                    loop_ones[i] = [draw(st.booleans()) for _ in loop]
        shapes = self._compose(sizes, ones, who, loop, loop_ones)
        while sum(_numel(s) for s in shapes) > max_elements:
            # fit: halve the largest varying size (or loop axis) until the case fits, so one large
            # axis survives next to small ones; at 2 everywhere, keep what is left
            big = max((c for c in range(len(sizes)) if self.varies[c] and sizes[c] > 2),
                      key=lambda c: sizes[c], default=None)
            if big is not None:
                sizes[big] = max(2, sizes[big] // 2)
            elif any(x > 2 for x in loop):
                loop = [min(x, 2) for x in loop]
            else:
                break
            shapes = self._compose(sizes, ones, who, loop, loop_ones)
        return shapes

    def _compose(self, sizes, ones, who, loop, loop_ones) -> list[tuple]:
        shapes = []
        for i, ax in enumerate(self.axes):
            core = [1 if (i, a) in ones else sizes[c] for a, c in enumerate(ax)]
            lead = []
            if who[i]:
                lead = [1 if f else s for s, f in zip(loop, loop_ones.get(i, [False] * len(loop)))]
            shapes.append(tuple(lead + core))
        return shapes


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _fresh(taken: set) -> int:
    for f in (5, 7, 11, 13, 6, 9, 10, 12, 14, 15, 17, 19):
        if f not in taken:
            return f
    return max(taken) + 1


class _Prober:
    def __init__(self, probe: Callable[[list], bool]):
        self.probe = probe
        self.calls = 0
        self.memo: dict = {}

    def __call__(self, shapes) -> bool:
        key = tuple(tuple(s) for s in shapes)
        if key not in self.memo:
            if self.calls >= _MAX_PROBES:
                return False  # out of probes: assume the stricter answer (a tie kept, a size fixed)
            self.calls += 1
            try:
                self.memo[key] = bool(self.probe([tuple(s) for s in key]))
            except Exception:  # noqa: BLE001 - a probe that raises is a "no"
                self.memo[key] = False
        return self.memo[key]


def _with(base: list, occ, size: int) -> list:
    out = [list(s) for s in base]
    for i, a in occ:
        out[i][a] = size
    return out


def learn(example: Sequence[tuple], probe: Callable[[list], bool], *, broadcast: str = "auto",
          explore: bool = True) -> ShapeModel:
    """The shape model of code that accepts ``example`` (one shape per tensor input); ``probe(shapes)``
    says whether it accepts other shapes (True/False; an exception counts as False).

    ``explore=False`` (a user's example under ``broadcast="auto"``): no axis becomes 1 and no leading
    axis is added unless the example itself has a 1 against a larger size - the user showed how the
    code is called; ``explore=True`` also probes every axis for 1 and for leading (batch) axes."""
    if broadcast not in BROADCAST_MODES:
        raise ValueError(f"broadcast={broadcast!r}: choose one of {', '.join(BROADCAST_MODES)}")
    base = [tuple(int(s) for s in shp) for shp in example]
    p = _Prober(probe)
    if not p(base):
        raise ValueError("the example shapes are rejected by the code itself")
    taken = {s for shp in base for s in shp}
    fresh = _fresh(taken)
    axes = [[-1] * len(s) for s in base]
    sizes: list = []
    varies: list = []

    def new_class(occ, size, vary):
        sizes.append(size)
        varies.append(vary)
        for i, a in occ:
            axes[i][a] = len(sizes) - 1

    groups: dict = {}
    for i, shp in enumerate(base):
        for a, s in enumerate(shp):
            groups.setdefault(s, []).append((i, a))
    for size in sorted(groups):
        if size <= 1:
            continue
        todo = list(groups[size])
        while todo:
            o, rest = todo[0], todo[1:]
            found = None
            for k in range(0, min(len(rest), _MAX_SUBSET - 1) + 1):
                for extra in itertools.combinations(rest, k):
                    if p(_with(base, (o,) + extra, fresh)):
                        found = (o,) + extra
                        break
                if found:
                    break
            if found is None and len(rest) >= _MAX_SUBSET and p(_with(base, todo, fresh)):
                found = tuple(todo)
            if found is None:
                new_class([o], size, False)
                todo = rest
            else:
                new_class(found, size, True)
                todo = [x for x in todo if x not in found]
    ones: set = set()
    for o in groups.get(1, []) + groups.get(0, []):
        size = base[o[0]][o[1]]
        if size == 1 and p(_with(base, [o], fresh)):
            new_class([o], 1, True)
            continue
        joined = False
        if size == 1 and broadcast != "none":
            for c in range(len(sizes)):
                if varies[c] and sizes[c] > 1:
                    members = [(i, a) for i, ax in enumerate(axes) for a, cc in enumerate(ax) if cc == c]
                    if p(_with(base, [o], sizes[c])) and p(_with(_with(base, members, fresh), [o], fresh)):
                        axes[o[0]][o[1]] = c
                        ones.add(o)
                        joined = True
                        break
        if not joined:
            new_class([o], size, False)
    if broadcast != "none" and explore:
        for i, ax in enumerate(axes):
            for a, c in enumerate(ax):
                if (i, a) in ones or not varies[c] or sizes[c] <= 1:
                    continue
                if broadcast == "one-way" and i == 0:
                    continue
                members = [(j, b) for j, bx in enumerate(axes) for b, cc in enumerate(bx) if cc == c]
                if len(members) > 1 and p(_with(base, [(i, a)], 1)):
                    ones.add((i, a))
    model = ShapeModel(axes, sizes, varies, ones)
    if explore:
        _learn_loops(model, base, p, broadcast)
    return model


def _learn_loops(model: ShapeModel, base: list, p: _Prober, broadcast: str) -> None:
    n = len(base)
    if max((len(s) for s in base), default=0) >= MAX_RANK:
        return
    model.loop_all = p([(2,) + s for s in base])
    if broadcast == "none":
        return
    model.loop_alone = [p([(2,) + s if j == i else s for j, s in enumerate(base)]) for i in range(n)]
    if broadcast == "one-way":
        model.loop_alone = [model.loop_alone[0]] + [False] * (n - 1)
    if model.loop_all and n > 1:
        model.loop_ones = [p([(1,) + s if j == i else (3,) + s for j, s in enumerate(base)]) for i in range(n)]
        if broadcast == "one-way":
            model.loop_ones[0] = False


def from_signature(cores: Sequence[Sequence[str]], *, broadcast: str = "full", example_size: int = 3) -> ShapeModel:
    """The model of a gufunc signature's inputs (``cores`` as parsed: one tuple of dim names or digits
    per input); loop dims broadcast ``"full"`` (numpy's rule), ``"one-way"`` (only towards input 0's
    loop shape: the others may drop axes or have 1s, input 0 never broadcasts) or ``"none"``."""
    if broadcast not in ("full", "one-way", "none"):
        raise ValueError(f"broadcast={broadcast!r}: choose one of full, one-way, none")
    ids: dict = {}
    sizes, varies, axes = [], [], []
    for core in cores:
        ax = []
        for d in core:
            if d.isdigit():
                sizes.append(int(d))
                varies.append(False)
                ax.append(len(sizes) - 1)
            else:
                if d not in ids:
                    ids[d] = len(sizes)
                    sizes.append(example_size + len(ids) - 1)
                    varies.append(True)
                ax.append(ids[d])
        axes.append(ax)
    n = len(axes)
    m = ShapeModel(axes, sizes, varies, set(), loop_all=True)
    if broadcast == "full":
        m.loop_alone = [True] * n
        m.loop_ones = [True] * n
    elif broadcast == "one-way":
        m.loop_alone = [True] + [False] * (n - 1)
        m.loop_ones = [False] + [True] * (n - 1)
    return m
