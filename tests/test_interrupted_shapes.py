"""Ctrl-C while a verify_* call learns fn's shapes from its example (gradspec/verify/fn_shapes.py,
gradspec/_private/shapes_learn.py) gives gs.VerifyInterrupted, as it does inside the search (tests/test_interrupted_verify.py):
a KeyboardInterrupt whose ``.result`` is inconclusive and says where it came.  Before session 12 it was a bare
KeyboardInterrupt traceback.  A real SIGINT, sent by a thread (os.kill of the process itself) once fn's forward is
entered, in a child process: an interruption that missed would stop the test runner itself."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, os, signal, sys, threading, time
    import numpy as np, torch, gradspec as gs

    entered, stop = threading.Event(), threading.Event()

    def _busy():  # short sleeps: a signal another thread receives runs its handler when the main thread wakes
        for _ in range(6000):
            if stop.is_set():
                return
            time.sleep(0.01)

    def slow_sin(x):  # fn's forward: the SIGINT comes while it runs, at its first call (the shapes' first probe)
        entered.set()
        _busy()
        return torch.sin(x)

    def slow_np(x):
        entered.set()
        _busy()
        return np.sin(x)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 2)
        def forward(self, x):
            return slow_sin(self.fc(x))

    x = torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(2, 3)
    calls = {
        "verify_torch_function": lambda: gs.verify_torch_function(slow_sin, example_inputs=(x,), max_examples=3, seed=0),
        "verify_module": lambda: gs.verify_module(Net(), example_inputs=(x,), max_examples=3, seed=0),
        "verify_op": lambda: gs.verify_op(gs.Op("sidefx_slow_sin", forward=slow_np, vjp=lambda g, x, out: (g * np.cos(x),)),
                                          example_inputs=(x.numpy(),), max_examples=3, seed=0),
    }
    threading.Thread(target=lambda: entered.wait(120) and os.kill(os.getpid(), signal.SIGINT), daemon=True).start()
    try:
        calls[sys.argv[1]]()
        print(json.dumps({"raised": None}))
    except gs.VerifyInterrupted as e:
        r = e.result
        print(json.dumps({"raised": type(e).__name__, "status": r.status, "reason": r.reason, "ok": r.ok}))
    finally:
        stop.set()
""")


@pytest.mark.parametrize("entry", ["verify_torch_function", "verify_module", "verify_op"])
def test_ctrl_c_while_learning_shapes_is_a_verify_interrupted(entry):
    p = subprocess.run([sys.executable, "-c", SCRIPT, entry], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]  # (before: a bare KeyboardInterrupt traceback, nothing caught)
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["raised"] == "VerifyInterrupted" and got["status"] == "inconclusive" and not got["ok"], got
    assert "interrupted" in got["reason"] and "learning fn's shapes" in got["reason"], got["reason"]
