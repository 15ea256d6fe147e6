"""Several value sets per graph structure: the draw behind ``case_groups()``.

Drawing a graph (ops, shapes, params, dtypes, roots) costs several times what checking one case
does; its values are one bytes choice per leaf.  A group draws the graph once, then value sets (leaf
values, repairs, the tie/kink plant, the seeds), each an element of a list, so the shrinker deletes
whole sets: a group whose third set fails shrinks to that one set.  The group is drawn inside a unique
collection, where Hypothesis' mutator does not copy blocks of choices: its copies shifted every later
choice of a group, which then came out as the simplest one (the same all-1.0 set again) or ran out.
Sets that repeat another of the group are dropped.
"""

from __future__ import annotations

import functools
import threading

from hypothesis import strategies as st

from .._private import values as _values
from ._cases import value_set
from ._graph import Graph, _Builder, _Cfg, _numel

# Hypothesis gives up on an example whose choices exceed BUFFER_SIZE (8 KiB of "entropy"): a group
# draws no more sets than fit in this many bytes of values (4 per float element, seeds included).
_SET_BYTES = 6000
_RUN = 3  # the most value sets in one run of a group (see _sets)
_CTX = threading.local()  # (graph, cfg, dtype mode, sets drawn so far) of the group being drawn


class CaseGroup(tuple):
    """Cases that share one graph structure and differ in their values and seeds (a tuple of
    :class:`gradspec.Case`; each is a whole case, checked on its own)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"CaseGroup({len(self)} value sets)"


@st.composite
def _set_strategy(draw):
    g, cfg, mode, drawn = _CTX.stack[-1]
    if not drawn:
        # The first set repairs the graph itself (as cases() does: a set that resists repair rejects
        # the group); later ones share it (a repair that detaches an input works on a copy), are
        # dropped alone, and reuse its canonical structure.
        case = value_set(draw, g, cfg, mode, seed_blocks=False, keep_forward=True)
        drawn.append(case)
        return case
    return value_set(draw, g, cfg, mode, reject=False, template=drawn[0], seed_blocks=False, shared=True,
                     keep_forward=True)


_SET = _set_strategy()


def _key(case):
    if case is None:
        return object()  # dropped sets are never "the same" as each other
    return (tuple(l.value.tobytes() for l in case.leaves),
            tuple(None if s is None else (s.dtype.char, s.tobytes()) for s in case.seeds), repr(case.meta.get("hard")))


@functools.lru_cache(maxsize=64)
def _sets(max_size: int):
    # Runs of 1-3 sets (2 on average) in a list of runs (6 on average): about 12 sets per graph (6 as
    # fuzz draws them: Hypothesis starts with short lists), and shrinking deletes runs and sets as for
    # any list, down to one set.  (Runs of 1-5 where 32 sets are allowed: ~15 sets per graph instead of
    # ~10 at 400 cases and ~14% more cases per CPU second, but the 6 planted bugs of throughput.py took
    # 33 cases on average to find instead of 20 over 36 runs, 1.6x the CPU: fewer graphs, and a graph's
    # structure is what several of them need.  benchmarks/README.md, session 8.)
    return st.lists(st.lists(_SET, min_size=1, max_size=min(_RUN, max_size)), min_size=1,
                    max_size=max(1, -(-max_size // 3)))


def mean_sets(max_sets: int) -> float:
    """About how many value sets a group holds on average (``st.lists``' mean sizes in :func:`_sets`;
    large graphs hold fewer)."""
    inner_max, outer_max = min(_RUN, max_sets), max(1, -(-max_sets // 3))
    inner = 1.0 if inner_max == 1 else min(6.0, 0.5 * (1 + inner_max))
    outer = 1.0 if outer_max == 1 else min(6.0, 0.5 * (1 + outer_max))
    return max(1.0, min(float(max_sets), inner * outer))


def _set_bytes(g: Graph) -> int:
    """About how many bytes of choices one value set of ``g`` draws (leaf values, random seeds)."""
    n = sum(_values.BYTES_PER_ELEMENT * _numel(l.shape) if l.is_float else _numel(l.shape) for l in g.leaves)
    return n + sum(_values.BYTES_PER_ELEMENT * _numel(g.shapes[r]) for r in g.roots) + 32


def _case_groups(cfg: _Cfg, max_sets: int):
    # The whole group sits in a unique collection: Hypothesis' mutator then never copies choices
    # inside it.  Its copies (a block of choices onto another, then the rest replayed) shift every
    # later choice of a group: each value set after the copy came out as the simplest one (all
    # values 1.0), or the example ran out of choices and was thrown away after it was drawn.
    return st.lists(_group_inner(cfg, max_sets), min_size=1, max_size=1, unique_by=_never_equal).map(_only)


def _never_equal(_group) -> object:
    return object()


def _only(xs: list):
    return xs[0]


@st.composite
def _group_inner(draw, cfg: _Cfg, max_sets: int) -> CaseGroup:
    builder = _Builder(draw, cfg)
    g = builder.build()
    stack = getattr(_CTX, "stack", None)
    if stack is None:
        stack = _CTX.stack = []
    stack.append((g, cfg, builder.dtype_mode, []))
    try:
        cap = max(1, min(max_sets, _SET_BYTES // _set_bytes(g)))
        runs = draw(_sets(cap))
    finally:
        stack.pop()
    out, seen = [], set()
    for case in (c for run in runs for c in run):
        if case is None:  # values that resisted repair: this set is dropped, the group stays
            continue
        key = _key(case)
        if key in seen:
            continue
        seen.add(key)
        case.meta["generator"] = "gradspec.strategies.case_groups"
        out.append(case)
    return CaseGroup(out[:cap])
