"""The cause of a real bug at scale (tryout6 #6): a 300 x 300 weight whose gradient is halved was "not-localised
... its gradient rule agrees with its twin on its own ... one of them carries its own error", while the same bug
at 5 x 5 was "0.5 x J^T.g".  Above the jacobian's dense limit no full twin gradient exists; the node check then
asked nothing and read that as agreement.  Finite differences along random directions on the node alone decide."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import gradspec as gs
from gradspec import report
from tests import _scale_code as S
from tests import _steep_code


def _op() -> str:
    import torch

    from gradspec.verify.torch_function import _torch_fn_name

    small = torch.linspace(-1, 1, 6, dtype=torch.float64)
    gs.verify_torch_function(S.HalfWeightMM.apply, example_inputs=(small.reshape(2, 3), small.reshape(3, 2)),
                             max_examples=2, seed=0)  # registers it (found or not), as a run does
    return _torch_fn_name(S.HalfWeightMM.apply)


def test_a_wrong_backward_above_the_dense_limit_is_blamed_on_its_node():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 80)), rng.standard_normal((80, 80)) / 9  # 7040 inputs: above 4096
    case = gs.Case.build({"x": x, "w": w}, [("y", _op(), ["x", "w"], {})], ["y"], [rng.standard_normal((8, 80))])
    v = gs.check(case, oracles=["reference", "finite-differences", "jacobian"])
    assert "jacobian" in v.skipped and v.discrepancies, str(v)
    for d in v.discrepancies:
        c = d.cause
        assert (c.id, c.node) == ("wrong-vjp", "y"), c
        assert "agrees with its twin" not in c.summary and "random directions" in c.summary, c.summary


def test_a_large_finding_folder_stays_small_and_its_repro_runs(tmp_path):
    # tryout6 #6: repro.py was 6.8 MB beside a 2.7 MB case.json (the values written out three times); now it reads
    # case.json beside it, omits recorded gradients above 4096 elements, and its listing skips finite differences
    # of leaves above 2000 elements, saying so.  It still finds the bug again (exit 1).
    # a numpy op with a torch twin and a halved vjp, on 100 x 50 values (5000 inputs: above 4096)
    case = _steep_code.single(np.random.default_rng(0).standard_normal((100, 50)), "t6_rmsnorm_half")
    v = gs.check(case, oracles=["reference", "finite-differences"])
    assert v.discrepancies, str(v)
    folder = report.write_discrepancy_report(str(tmp_path), v.discrepancies[0], v)
    script = tmp_path / folder / "repro.py"
    case_bytes = (tmp_path / folder / "case.json").stat().st_size
    assert script.stat().st_size < 0.2 * case_bytes, (script.stat().st_size, case_bytes)  # (it held them 3 times)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(script), "--allow-import", "tests._steep_code"], capture_output=True, text=True, timeout=300,
                          cwd=str(tmp_path), env=env)
    assert proc.returncode == 1 and "DISAGREEMENT" in proc.stdout, proc.stdout + proc.stderr
    assert "finite differences (now)" in proc.stdout and "skipped (5000 elements" in proc.stdout, proc.stdout
