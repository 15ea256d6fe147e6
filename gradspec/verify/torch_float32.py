"""Seeing a torch Function compute in float32 inside, from the ops it runs.

Finite differences see float32 inside from the values (``gradspec.oracles._fd_probes``): all float32 numbers,
or a staircase on a line a few float32 ulps long.  Where the float32 part is flat over every step FD takes
(``x + tanh(x.float()).double()`` at x = 8: float32's tanh changes once every 0.3 in x there), no value can
show it, and a float64 comparison accuses the Function's correct float32 rule (1 - t*t from a float32 t is
2.4e-7 where the slope is 1.9e-7: both right to float32 precision).  A torch Function's forward can be
watched instead: a torch dispatch mode sees every aten op it runs, and an op that takes a float64 tensor and
returns a float32 (or half) one -- ``x.float()``, ``.to(torch.float32)`` -- is a computation at lower
precision.  Its spec then says so (``float32_seen``, which FD and the FD-JVPs read: float32 step, float32
error bound, comparison at float32 precision).  The first WATCHED_CALLS forward calls on float64 inputs are
watched (the dtype a Function computes in rarely depends on the values); later calls run as before.

Example::

    >>> import torch
    >>> from gradspec.verify.torch_float32 import downcasts
    >>> with downcasts() as seen:
    ...     _ = torch.tanh(torch.ones(2, dtype=torch.float64).float())
    >>> seen
    ['aten._to_copy.default (float64 -> float32)']
"""

from __future__ import annotations

import contextlib

__all__ = ["downcasts", "watch", "WATCHED_CALLS"]

WATCHED_CALLS = 4


@contextlib.contextmanager
def downcasts():
    """A torch dispatch mode, as a context manager yielding the list of the ops seen casting a float64
    tensor to float32 / float16 / bfloat16 inside the block (one entry per op name)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    low = (torch.float32, torch.float16, torch.bfloat16)
    seen: list = []

    class _Downcasts(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            ins = [t.dtype for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            if torch.float64 in ins:
                outs = [t.dtype for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
                to = next((d for d in outs if d in low), None)
                if to is not None:
                    text = f"{func} (float64 -> {str(to).replace('torch.', '')})"
                    if text not in seen:
                        seen.append(text)
            return out

    with _Downcasts():
        yield seen


def watch(spec, arrays, call):
    """``call()`` (fn's forward on ``arrays``), watched while the spec has had fewer than WATCHED_CALLS
    float64 calls and nothing was seen yet; a downcast found sets ``spec.float32_seen`` (the evidence)."""
    import numpy as np

    n = getattr(spec, "_f32_watched", 0)
    if n >= WATCHED_CALLS or getattr(spec, "float32_seen", "") or not arrays or not all(
            np.asarray(a).dtype == np.float64 for a in arrays):
        return call()
    spec._f32_watched = n + 1
    with downcasts() as seen:
        out = call()
    if seen:
        spec.float32_seen = (f"on float64 inputs its forward casts to lower precision: {', '.join(seen[:2])}, "
                             "seen by a torch dispatch mode")
    return out
