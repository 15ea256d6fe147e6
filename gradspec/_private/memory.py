"""Keep glibc from handing each oracle call fresh pages for its mid-sized arrays.

glibc serves allocations above ``M_MMAP_THRESHOLD`` (128 KiB, raised dynamically up to 32 MiB as
such blocks are freed) with ``mmap`` and returns free heap memory above ``M_TRIM_THRESHOLD`` to the
OS at once.  A gradient check allocates and frees the same few arrays of 0.1-10 MB over and over
(finite-difference batches, the jacobian's tangents), so with the defaults every call page-faults
its whole working set again.  Measured on ``sum(tanh(x * w))`` (benchmarks/README.md): ``gs.check``
with the four CPU oracles took 3.1-4.4 ms at n = 340 inputs and 13-15 ms at n = 1000 with glibc's
defaults, 1.0-1.2 ms and 5.3-5.8 ms with the settings below; the jacobian oracle alone at n = 1000
9.3-9.8 ms -> 1.0-1.3 ms.  Arrays under 128 KiB (all small graphs) are not affected.

What it costs: the process keeps up to ``TRIM`` bytes of freed memory for reuse instead of returning
it, and blocks up to ``MMAP`` bytes come from the heap.  Both are process-wide settings, so they are
applied once, only on glibc, never over the user's own ``MALLOC_MMAP_THRESHOLD_`` /
``MALLOC_TRIM_THRESHOLD_`` environment variables, and not at all with ``GRADSPEC_MALLOC=default``.
"""

from __future__ import annotations

import ctypes
import os
import platform

__all__ = ["tune_malloc", "tune_malloc_once", "freeze_heap", "MMAP", "TRIM"]

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP = 16 * 2**20  # under glibc's own dynamic maximum (32 MiB on 64-bit)
TRIM = 64 * 2**20

_applied: dict[str, int] | None = None


def tune_malloc(environ, mallopt, libc: str) -> dict[str, int]:
    """Apply the settings through ``mallopt`` unless ``environ`` or ``libc`` say not to; returns
    what was set (``{}``: nothing)."""
    if environ.get("GRADSPEC_MALLOC", "").strip().lower() == "default" or libc != "glibc":
        return {}
    done: dict[str, int] = {}
    for var, param, value in (("MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, MMAP),
                              ("MALLOC_TRIM_THRESHOLD_", M_TRIM_THRESHOLD, TRIM)):
        if var in environ:
            continue  # the user's own choice wins
        if mallopt(param, value) == 1:  # mallopt returns 1 on success
            done[var] = value
    return done


def tune_malloc_once() -> dict[str, int]:
    """``tune_malloc`` for this process (glibc's ``mallopt`` via ctypes), applied on the first call only."""
    global _applied
    if _applied is None:
        libc = platform.libc_ver()[0]
        try:
            mallopt = ctypes.CDLL("libc.so.6").mallopt if libc == "glibc" else None
        except (OSError, AttributeError):
            mallopt = None
        _applied = {} if mallopt is None else tune_malloc(os.environ, mallopt, libc)
    return _applied


def freeze_heap() -> None:
    """Move every object alive now (torch, numpy, the op table, Hypothesis: ~200,000 objects) out of
    the cyclic garbage collector's sight (``gc.freeze``) for the rest of the process.  (Not
    ``gc.get_freeze_count()`` after it: counting walks the whole frozen heap, 12 ms a run.)

    A fuzz campaign allocates millions of short-lived objects, and each collection of the oldest
    generation walked that whole import-time heap again: 5% of a campaign's CPU time went to the
    collector, half of it after freezing (benchmarks/README.md).  Only for processes gradspec owns (the
    ``gradspec fuzz`` command and its workers), never from the library API: frozen objects that later
    become cyclic garbage are not freed, which a user's long-lived process should not inherit.  No
    ``gc.collect()`` first: it walks the same heap (70 ms, 6% of a 400-case run) to free a little
    import-time garbage, which now stays (frozen objects are never collected)."""
    import gc

    gc.freeze()
