"""Signals that arrive at the worst moments, deterministically, for tests/test_interrupts.py (the chaos review's
harness, chaos_int.py / chaos_cli_int_on_write.py, kept as fixtures).

``int_bad`` is a wrong op (its VJP is 3g, the derivative 2g) that sends ``$GS_TEST_SIGNAL`` (default INT) to its own
process the first time its VJP runs while gradspec's search Driver is in mode ``$GS_TEST_MODE`` (default ``shrink``:
Ctrl-C while a found discrepancy is being shrunk; ``generate`` with ``$GS_TEST_SKIP=N``: after N cases).
``$GS_TEST_ONCE`` (a path): only the first process of the run to get there signals; ``$GS_TEST_MARK``: each
shrink call appends the pid to that file, then sleeps ``$GS_TEST_SLOW`` s.  ``good`` is a correct op that does the
same in ``generate`` mode.  ``swallow`` is correct but swallows the KeyboardInterrupt of the call the signal cuts and
returns 0 from it.
``sleepy`` sleeps ``$GS_TEST_SLEEP`` s in its
forward (a case whose replay hangs), after it appends its pid to ``$GS_TEST_MARK``.  ``engine`` (an --engine factory:
the reference engine) signals on its
``$GS_TEST_ENGINE_CALL``-th construction (the campaign's own set-up, after the run's header and "running" summary).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import gradspec as gs

_hits = {"vjp": 0, "engine": 0}


def _signal_now() -> None:
    sig = getattr(signal, "SIG" + os.environ.get("GS_TEST_SIGNAL", "INT"))
    os.kill(os.getpid(), sig)
    time.sleep(0.5)  # (a handler runs between bytecodes: the signal is taken here, not later)


def _driver_mode():
    f = sys._getframe(1)
    while f is not None:
        s = f.f_locals.get("self")
        if type(s).__name__ == "Driver" and type(s).__module__ == "gradspec.search":
            return s.mode
        f = f.f_back
    return None


def _first_in_run() -> bool:
    """Whether this process is the first of the run to get here (``$GS_TEST_ONCE``: a file made once, for
    campaign workers); always True without it."""
    path = os.environ.get("GS_TEST_ONCE")
    if not path:
        return True
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def _maybe_signal(default_mode: str) -> None:
    mode = _driver_mode()
    if mode == "shrink" and os.environ.get("GS_TEST_MARK"):  # (a test waits for a worker to shrink a finding)
        with open(os.environ["GS_TEST_MARK"], "a") as fh:
            fh.write(f"{os.getpid()}\n")
        time.sleep(float(os.environ.get("GS_TEST_SLOW", "0")))
    if mode == os.environ.get("GS_TEST_MODE", default_mode):
        _hits["vjp"] += 1
        if _hits["vjp"] == int(os.environ.get("GS_TEST_SKIP", "0")) + 1 and _first_in_run():
            _signal_now()


def _bad_vjp(g, x, out):
    _maybe_signal("shrink")
    return (3 * g,)


def _good_vjp(g, x, out):
    _maybe_signal("generate")
    return (2 * g,)


def _swallowing_vjp(g, x, out):
    """Correct, except the call a signal cuts: it swallows the KeyboardInterrupt and returns what it had (0)."""
    try:
        _maybe_signal("generate")
    except KeyboardInterrupt:
        return (0 * g,)
    return (2 * g,)


def _sleepy_forward(x):
    if os.environ.get("GS_TEST_MARK"):  # (a test waits for this before it signals)
        with open(os.environ["GS_TEST_MARK"], "a") as fh:
            fh.write(f"{os.getpid()}\n")
    time.sleep(float(os.environ.get("GS_TEST_SLEEP", "0")))
    return 2 * x


int_bad = gs.Op("int_bad", forward=lambda x: 2 * x, vjp=_bad_vjp)
good = gs.Op("int_good", forward=lambda x: 2 * x, vjp=_good_vjp)
swallow = gs.Op("int_swallow", forward=lambda x: 2 * x, vjp=_swallowing_vjp)
sleepy = gs.Op("int_sleepy", forward=_sleepy_forward, vjp=lambda g, x, out: (2 * g,))


def engine():
    """An --engine factory: the reference engine, or with ``$GS_TEST_ENGINE=broadcast_mean`` the planted engine of
    that name (a wrong one); its backward signals as the ops' VJPs do (default mode ``generate``)."""
    _hits["engine"] += 1
    if _hits["engine"] == int(os.environ.get("GS_TEST_ENGINE_CALL", "0")):
        _signal_now()
    if os.environ.get("GS_TEST_ENGINE") == "broadcast_mean":
        from tests._planted_engines import broadcast_mean

        eng = broadcast_mean()
    else:
        eng = gs.engines.get("reference")
    backward = eng.backward

    def signalling_backward(t, gradient=None, retain_graph=False):
        _maybe_signal("generate")
        return backward(t, gradient, retain_graph)

    eng.backward = signalling_backward
    return eng


def cli_signal_after_staging() -> int:
    """Run the command line (sys.argv[1:]) with ``$GS_TEST_SIGNAL`` sent to this process right after a finding's
    ``$GS_TEST_FILE`` (default repro.py) was staged, before its folder is moved into place."""
    import gradspec.report as rep

    orig, done = rep.atomic_write, []

    def atomic_write(path, text, *a, **k):
        r = orig(path, text, *a, **k)
        if not done and os.path.basename(path) == os.environ.get("GS_TEST_FILE", "repro.py"):
            done.append(path)
            _signal_now()
        return r

    rep.atomic_write = atomic_write
    from gradspec.cli import main

    sys.argv = ["gradspec"] + sys.argv[1:]
    return main()


if __name__ == "__main__":
    sys.exit(cli_signal_after_staging())
