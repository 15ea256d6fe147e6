"""Torch runs with one intra-op thread inside the oracles, unless the user says otherwise.

The oracles call torch on tiny tensors thousands of times (a user's Function in every FD
stencil, the torch oracle's graph); torch's intra-op thread pool costs more than such a call
does: one small call of a user's Function measured 2.7 ms with torch's default thread count and
0.16 ms with one thread on a many-core machine (benchmarks/threads.py measures it here).  The
setting is scoped: set around the oracle calls of ``gradspec.check`` and restored after, so the
user's own torch code outside gradspec keeps its threads.

``GRADSPEC_TORCH_THREADS``: unset -> 1 thread inside oracles; a positive integer -> that many;
``default`` (or ``0``) -> leave torch's setting alone.  torch is never imported for this: a run
that does not use torch does not pay for it.
"""

from __future__ import annotations

import os
import sys

__all__ = ["oracle_threads", "wanted", "ENV"]

ENV = "GRADSPEC_TORCH_THREADS"


def wanted() -> int | None:
    """The intra-op thread count for oracle calls, or None to leave torch alone."""
    v = os.environ.get(ENV, "").strip().lower()
    if not v:
        return 1
    if v in ("default", "0"):
        return None
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"{ENV}={v!r}: expected a positive integer, or 'default' to leave torch's threads alone") from None
    if n < 0:
        raise ValueError(f"{ENV}={v!r}: expected a positive integer, or 'default'")
    return n or None


class oracle_threads:
    """Run the body with ``wanted()`` torch intra-op threads (torch's own setting restored after).
    (A class rather than a generator context manager: it is entered on every ``gs.check``, where
    contextlib's machinery cost more than the rest of this.)"""

    __slots__ = ("_torch", "_old")

    def __enter__(self) -> None:
        self._old = None
        torch = sys.modules.get("torch")
        want = wanted() if torch is not None else None
        if want is None:
            return
        old = torch.get_num_threads()
        if old != want:
            torch.set_num_threads(want)
            self._torch, self._old = torch, old

    def __exit__(self, *exc) -> bool:
        if self._old is not None:
            self._torch.set_num_threads(self._old)
        return False
