"""How big a case read from a file may be (``--max-elements``), checked before anything is allocated.

A case file is data (CONTRACT §6): a 479-byte file that expands one leaf to 10**9 elements made
the reference engine allocate 7.45 GiB and finite differences 29.8 GiB.  The sizes of every tensor
follow from the declared leaf shapes and the ops' shape rules, so the loader computes them first
and refuses a case whose check would need more than the limit.

What is counted: every tensor of the graph (leaves, nodes, explicit seeds) times
:data:`PASS_COPIES`.  The largest single pass of any oracle is finite differences' batched
stencil: when tensors are big (``fd.MAX_BATCH_ELEMENTS``) each pass evaluates the graph at the
three stencil points of one direction at once, beside the centre evaluation, so it holds four
copies of every tensor.  The reference engine holds two (forward values and gradients), the
explicit Jacobian refuses dense matrices above its own limit, torch holds about two.

The default (:func:`default_max_elements`): 2**27 float64 elements = 1 GiB for that pass, lowered
to 1/64 of the machine's physical memory in elements (1/8 of its bytes: the pass, the other
oracles' copies, the parse of the JSON itself and a second worker process fit beside it) on a
small machine.  On the 23 GiB reference machine that is 2**27.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os

__all__ = ["PASS_COPIES", "BASE_MAX_ELEMENTS", "default_max_elements", "current", "limiting", "SizeError",
           "check_dims", "Budget"]

PASS_COPIES = 4  # len(oracles.fd.FACTORS) + 1; tests/test_safety.py keeps the two in step
BASE_MAX_ELEMENTS = 2**27  # 1 GiB of float64


class SizeError(ValueError):
    """A case larger than the limit; the message names the tensor, its size and the flag."""


def default_max_elements() -> int:
    try:
        phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return BASE_MAX_ELEMENTS
    return int(max(2**20, min(BASE_MAX_ELEMENTS, phys // 64)))


_LIMIT: contextvars.ContextVar[int | None] = contextvars.ContextVar("gradspec_max_elements", default=None)


def current() -> int | None:
    """The limit in force (None: no limit, a case built in Python by the user's own code)."""
    return _LIMIT.get()


@contextlib.contextmanager
def limiting(max_elements: int | None):
    """Within the block the limit is ``max_elements`` (None: the one in force, else the default)."""
    if max_elements is None:
        max_elements = current() or default_max_elements()
    token = _LIMIT.set(int(max_elements))
    try:
        yield
    finally:
        _LIMIT.reset(token)


def _advice(limit: int) -> str:
    return (f"above --max-elements {limit:,} ({limit * 8 / 2**30:.2g} GiB of float64); "
            "raise --max-elements if this machine has the memory")


def check_dims(shape, where: str, limit: int | None = None) -> int:
    """``math.prod(shape)`` after checking each dimension and the product against the limit."""
    limit = current() if limit is None else limit
    n = math.prod(shape)
    if limit is not None:
        big = [d for d in shape if d > limit]
        if n > limit:
            raise SizeError(f"{where} has shape {tuple(shape)} ({n:,} elements), {_advice(limit)}")
        if big:  # (an empty tensor too: broadcast against it, or a gradient of its other dims, allocates that much)
            raise SizeError(f"{where} has shape {tuple(shape)}: dimension {big[0]:,} is {_advice(limit)}")
    return n


class Budget:
    """Running total of the elements of a case's tensors, refused once PASS_COPIES x total passes the limit."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = current() if limit is None else limit
        self.total = 0

    def add(self, shape, where: str) -> None:
        if self.limit is None:
            return
        n = check_dims(shape, where, self.limit)
        self.total += n
        if PASS_COPIES * self.total > self.limit:
            raise SizeError(
                f"{where} (shape {tuple(shape)}) brings the case's tensors to {self.total:,} elements; a check holds "
                f"about {PASS_COPIES} copies of them at once (finite differences' batched pass), "
                f"{PASS_COPIES * self.total:,} elements, {_advice(self.limit)}")
