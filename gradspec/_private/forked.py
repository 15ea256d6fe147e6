"""What every child process gradspec forks without exec does first (review F3, F4).

A fork inherits the parent's open descriptors, the report dir's lock among them: after a ``kill -9`` of the
controller (the OOM killer, a CI runner's hard cancel) a child hanging in C code -- what ``--isolate`` and replay's
check process are for -- kept the ``flock`` and the next run was refused, naming a dead pid.  Nor did anything end
such an orphan: the parent's watchdog died with the parent, and replay's check child is in a process group of its
own, so ``kill -9 -- -PGID`` of replay missed it.  The child now closes the lock descriptors and, on Linux, asks the
kernel to SIGKILL it when its parent dies (``PR_SET_PDEATHSIG``; the signal comes when the thread that forked ends:
both forks wait for their child in that thread, so it ends only after the child or with the process).

A fork also inherits torch's OpenMP state but not its worker threads: once the parent ran one parallel kernel
(a QR of a 7x7 matrix is enough: its triu runs under ``at::parallel_for``), the child's first parallel region waits
on a team barrier for threads that do not exist, for ever (tryout11 #1: ``gradspec replay`` of a torch Function's
finding; libgomp registers no ``pthread_atfork`` handler).  The child therefore runs torch on one thread, as torch's
own DataLoader workers do (``torch.set_num_threads(1)`` in ``_worker_loop``): ATen then runs every kernel inline,
without entering OpenMP.  Its cost is a call of a few microseconds; a child's cases are small, and spawning a fresh
interpreter instead would cost an import of torch (1-2 s) per child.
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
    _torch_single_threaded()


def _torch_single_threaded() -> None:
    torch = sys.modules.get("torch")  # (never imported here: a child of a process without torch needs none)
    if torch is None:
        return
    try:
        torch.set_num_threads(1)
    except Exception:  # noqa: BLE001 - a broken torch is the oracles' to report, not the fork's
        pass
