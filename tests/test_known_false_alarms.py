"""False alarms found and not yet fixed, kept as data so that the next fix is measured against them.

Each case below is a correct graph of gradspec's own ops that ``gs.check`` calls a disagreement.  The tests are
strict xfails: they assert the verdict is not "disagree", fail today, and turn into an error (XPASS, strict)
once the cause is fixed -- then this entry is deleted and the case moves into an ordinary test.

* ``norm_sin_float32_*`` (20,000-case soak, seed 61, --groups, session 11; the same cases disagree on main at
  22902a5, the session's start: the soak drew them after new constants in gradspec's modules changed
  Hypothesis' draws).  x2 (float32, ~568) flows through sin(norm(x2)): norm's float32 rounding (one ulp of 568
  is 6.1e-5) moves sin's argument and so x2's gradient by ~5e-5, above rtol 6.1e-5 x |0.54|.  The rounding
  noise model (``_check_noise.rounding_noise``) leaves ops with a kink exact where a gradient flows through
  them (their VJPs may compare outputs with inputs), and norm has a kink at 0, so its rounding is not seen.
  Case 1 is reference vs torch; cases 0 and 2 are finite differences (float32 forward) as the odd one out.
  The fix is to leave exact only ops whose VJP compares outputs with inputs (max, min, clamp, ...), not
  every op with a kink, and to show the 20,000-case soak at 0 again.
"""

from __future__ import annotations

import pathlib

import pytest

import gradspec as gs

HERE = pathlib.Path(__file__).parent / "known_false_alarms"


@pytest.mark.xfail(strict=True, reason="known false alarm: norm's float32 rounding is not in the rounding-noise "
                   "model (see the module docstring)")
@pytest.mark.parametrize("name", ["norm_sin_float32_0", "norm_sin_float32_1", "norm_sin_float32_2"])
def test_a_correct_graph_is_not_called_a_disagreement(name):
    case = gs.Case.from_json((HERE / f"{name}.json").read_text())
    assert gs.check(case).status != "disagree"
