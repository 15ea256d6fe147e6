"""What every child process gradspec forks without exec does first (review F3, F4).

A fork inherits the parent's open descriptors, the report dir's lock among them: after a ``kill -9`` of the
controller (the OOM killer, a CI runner's hard cancel) a child hanging in C code -- what ``--isolate`` and replay's
check process are for -- kept the ``flock`` and the next run was refused, naming a dead pid.  Nor did anything end
such an orphan: the parent's watchdog died with the parent, and replay's check child is in a process group of its
own, so ``kill -9 -- -PGID`` of replay missed it.  The child now closes the lock descriptors and, on Linux, asks the
kernel to SIGKILL it when its parent dies (``PR_SET_PDEATHSIG``; the signal comes when the thread that forked ends:
both forks wait for their child in that thread, so it ends only after the child or with the process).
"""

from __future__ import annotations

import os
import sys

__all__ = ["forked_child"]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(parent: int) -> None:
    if not sys.platform.startswith("linux"):
        return  # (elsewhere the parent's own watchdog and its Ctrl-C handling are all there is)
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the prctl: no signal will come
        os._exit(70)


def forked_child(parent: int) -> None:
    """Call first thing in a child forked (no exec) by process ``parent``: releases no lock of the parent's (its
    descriptors are closed here; the parent's lock stands) and dies when the parent dies."""
    from .safefs import close_locks_in_child

    close_locks_in_child()
    _die_with_parent(parent)
