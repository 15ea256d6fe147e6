"""``gs.check(case, timeout=S)``: a bare check of code under test that never returns ends, with a ``timeout``.

Before: gs.check had no timeout (``check() got an unexpected keyword argument 'timeout'``); a hanging user op hung it
for good (only verify_*, fuzz and assert_gradients went through gradspec.guard).  Now ``timeout`` runs the check
through ``gradspec.guard.guarded_check``, as ``assert_gradients(timeout=)`` and ``gradspec fuzz --case-timeout``
do: each oracle's own call is cut after S seconds and is a ``timeout`` discrepancy.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import gradspec as gs
from tests import _hangs

_CALLS = [0]


def _hang_once_vjp(g, x, out):
    # its first call sleeps "for ever" (the 1 s timeout cuts it), later ones return at once: the diagnosis of the
    # timeout, which re-runs the vjp, then costs nothing (tests/_hangs.hang_op's vjp hangs there too, for the
    # diagnosis' 30 s minimum budget: gradspec._private.case_budget)
    _CALLS[0] += 1
    if _CALLS[0] == 1:
        time.sleep(600)
    return (g * np.cos(x),)


_hang_once = gs.Op("t_check_hang_once", forward=np.sin, vjp=_hang_once_vjp)
# (id, case, oracles, expected status, whether a timeout is reported)
_X = np.linspace(0.1, 0.5, 5)
ROWS = [
    ("hanging-vjp", gs.Case.build({"x": _X}, [("y", _hang_once.name, ["x"], {})], ["y"], [np.ones(5)]),
     ["reference", "finite-differences"], "disagree", True),
    ("returning-op", gs.Case.build({"x": _X[:3]}, [("y", _hangs.hang_op.name, ["x"], {})], ["y"], [np.ones(3)]),
     ["reference", "finite-differences"], "agree", False),
    ("table-op", gs.Case.build({"x": _X}, [("y", "exp", ["x"], {})], ["y"], [np.ones(5)]), None, "agree", False),
]


@pytest.mark.parametrize("case, oracles, status, timed_out", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_check_with_a_timeout_returns(case, oracles, status, timed_out):
    _CALLS[0] = 0
    t0 = time.monotonic()
    v = gs.check(case, oracles=oracles, timeout=1.0)
    # (1 s for the hanging oracle's call, plus the other oracle and the comparison: far below 60 s on any load)
    assert time.monotonic() - t0 < 60
    assert v.status == status, str(v)
    assert any(d.kind == "timeout" for d in v.discrepancies) == timed_out, str(v)
