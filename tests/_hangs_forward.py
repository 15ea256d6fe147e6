"""Code under test whose *forward* hangs (reliability review H5a/H5b).

gradspec calls a user op's forward before any case exists: the graph generator probes each planned
node's shapes with it (``gradspec.strategies._graph``), and ``verify_torch_function`` learns fn's
shapes by calling it (``gradspec.verify.fn_shapes``).  These hang there:

* ``forward_hangs``: a user op whose forward never returns on any input (``time.sleep`` in Python);
* ``forward_hangs_big``: a user op whose forward loops forever on more than 3 elements only, so
  small probes pass and the hang comes later (in a case, or a larger probe);
* ``forward_hangs_stubborn``: a user op whose forward never returns and swallows every exception, the
  alarm's and Ctrl-C's too (only a kill stops it);
* ``forward_slow_once``: a user op whose forward hangs on its first call only (a one-off stall: a JIT
  compile, a page-in, a loaded machine), then returns at once (review F6); ``SLOW["calls"] = 0`` re-arms it;
* ``ForwardHangs``: a torch Function whose forward never returns;
* ``vjp_blocks``: a user op whose vjp blocks in C for ever, using no CPU: it locks a pthread mutex it holds (a
  deadlock, as OpenMP's team barrier after a fork was, tryout11 #1); no signal handler of Python's runs there, so
  the per-case timeout's alarm cannot cut it.
"""

import time

import numpy as np

import gradspec as gs


def _sleep_forward(x):
    time.sleep(1e9)
    return np.sin(x)


def _big_forward(x):
    if np.size(x) > 3:
        while True:  # a fixed-point iteration that never converges
            pass
    return np.sin(x)


def _stubborn_forward(x):
    while True:
        try:
            time.sleep(1e9)
        except BaseException:  # noqa: BLE001, S110 - the point: nothing but a kill stops it
            pass


SLOW = {"calls": 0}


def _slow_once_forward(x):
    SLOW["calls"] += 1
    if SLOW["calls"] == 1:
        time.sleep(1e9)  # (cut by the per-case timeout's alarm)
    return np.sin(x)


def _vjp(g, x, out):
    return (g * np.cos(x),)


forward_hangs = gs.Op("my_forward_hangs", forward=_sleep_forward, vjp=_vjp)
forward_hangs_big = gs.Op("my_forward_hangs_big", forward=_big_forward, vjp=_vjp)
forward_slow_once = gs.Op("my_forward_slow_once", forward=_slow_once_forward, vjp=_vjp)


def _blocking_vjp(g, x, out):
    import ctypes

    libc = ctypes.CDLL(None)
    mutex = ctypes.create_string_buffer(64)  # all zeros: PTHREAD_MUTEX_INITIALIZER (a normal mutex) in glibc
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)  # a normal mutex locked again by its holder: never returns
    return (g * np.cos(x),)


vjp_blocks = gs.Op("my_vjp_blocks", forward=np.sin, vjp=_blocking_vjp)
forward_hangs_stubborn = gs.Op("my_forward_hangs_stubborn", forward=_stubborn_forward, vjp=_vjp)

try:
    import torch
except ImportError:  # the torch tests skip
    torch = None

if torch is not None:
    class ForwardHangs(torch.autograd.Function):
        """forward never returns."""

        @staticmethod
        def forward(ctx, x):
            time.sleep(1e9)
            return x.sin()

        @staticmethod
        def backward(ctx, g):
            return g
# a forward that returns at once: a test's stand-in for guard.bounded says it hung at every drawing call (counted,
# nothing sleeps: tests/test_draw_cuts.py, the marks a worker carries from chunk to chunk)
forward_said_hung = gs.Op("my_forward_said_hung", forward=np.sin, vjp=_vjp)
