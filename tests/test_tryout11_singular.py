"""The correct CG solve at an exactly singular A (tryout11 #7a).

``verify_torch_function(CGSolve.apply, at=[(ones(2, 2), ones(2))])`` said "OK — 1 cases".  No derivative exists
there: CG on the normal equations converges to the least-norm least-squares solution, continuous in A but not
differentiable at a singular A (the user's central differences along one direction: -0.386 / -0.630 / +0.722 at
h = 1e-3 / 1e-5 / 1e-7; torch.autograd.gradcheck fails).  Finite differences refused the case (its steps do not
resolve the forward), and the only pair left was reference vs the finite-difference JVP of the jacobian oracle,
which "agreed" within its own error estimate: its estimates for A's gradient, [0.192, 0.284, 0.192, 0.284], are
20 % off the backward's 0.238 each, an estimate that changes that much with its step witnesses nothing.  Now the
case is inconclusive, saying why.
"""

from __future__ import annotations

import json

import pytest

import gradspec as gs

torch = pytest.importorskip("torch")

from tests._tryout11_cg import CGSolve  # noqa: E402


def test_correct_cg_solve_at_a_singular_matrix_is_not_ok():
    d = torch.float64
    r = gs.verify_torch_function(CGSolve.apply, at=[(torch.ones(2, 2, dtype=d), torch.ones(2, dtype=d))], seed=0,
                                 dtypes=("float64",), double_backward=False)
    assert r.status == "inconclusive", r.summary()
    assert not r.discrepancies, r.summary()  # nor a bug: the backward is right wherever a derivative exists
    text = r.summary()
    assert "finite-difference JVP agreed only within its own error estimate" in text, text
    assert "may not be differentiable at these inputs" in text, text


def test_correct_cg_solve_at_a_well_conditioned_matrix_still_agrees():
    d = torch.float64
    A = torch.tensor([[3.0, 1.0], [0.5, 2.0]], dtype=d)
    r = gs.verify_torch_function(CGSolve.apply, at=[(A, torch.tensor([1.0, -2.0], dtype=d))], seed=0,
                                 dtypes=("float64",), double_backward=False)
    assert r.status == "agree", r.summary()


def _soak_case(tmp_path):
    """The user's soak case (a CG solve feeding another at the all-ones A, then a weighted sum), as a case file."""
    ones = ["0x1.0000000000000p+0"]
    leaf = lambda name, shape, data, grad=True: {"name": name, "requires_grad": grad,  # noqa: E731
                                                 "value": {"dtype": "float64", "shape": shape, "data": data}}
    spec = {"n_args": 2, "tensor_pos": [0, 1], "shape": "signature", "domain": None, "signature": "(n,n),(n)->(n)"}
    d = {"format": "gradspec-case/1", "engine": "reference", "user_ops": {"torch_CGSolve": "tests._tryout11_cg:CGSolve"},
         "leaves": [leaf("x0", [2, 2], ones * 4), leaf("x1", [2], ones * 2),
                    leaf("w0", [2], ["-0x1.230febcfd9c28p+0", "-0x1.8a217bf105b3ap-1"], False)],
         "nodes": [{"name": "v0", "op": "torch_CGSolve", "inputs": ["x0", "x1"], "params": {}},
                   {"name": "v1", "op": "torch_CGSolve", "inputs": ["x0", "v0"], "params": {}},
                   {"name": "q0", "op": "mul", "inputs": ["v0", "w0"], "params": {}},
                   {"name": "s0", "op": "sum", "inputs": ["q0"], "params": {"dim": [-1], "keepdim": False}}],
         "roots": ["v0", "s0"], "seeds": [{"dtype": "float64", "shape": [2], "data": ones * 2}, None],
         "meta": {"dtype": "float64", "torch_functions": ["torch_CGSolve"],
                  "torch_function_specs": {"torch_CGSolve": spec}}}
    path = tmp_path / "case.json"
    path.write_text(json.dumps(d))
    return str(path)


_CHECK = """
import sys
import gradspec as gs
from gradspec import caseio
case = caseio.load(sys.argv[1], allow_import=("tests._tryout11_cg",))
v = gs.check(case, oracles=["reference", "finite-differences", "jacobian", "torch-cpu"])
print("FD-REFUSED" if "finite-differences" in v.skipped else "FD-RAN", v.status)
print(v.summary())
"""


def test_gs_check_at_the_singular_matrix_is_not_ok_on_a_shaky_fd_jvp(tmp_path):
    # gs.check (replay, fuzz): finite differences refused, reference vs the FD-JVP jacobian "agreed" at a ratio of
    # 0.41 of a tolerance made of its own error estimate (its estimates change with the step): before, agree.  A
    # fresh process, as replay's: after other checks of the same op in one process FD judges this case otherwise
    # (it disagreed there, the soak's finding; left open, tryout11 #7b)
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", _CHECK, _soak_case(tmp_path)], cwd=root, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=root), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    if first.startswith("FD-RAN"):
        pytest.skip("finite differences did not refuse this case here: the premise of the test")
    assert first == "FD-REFUSED inconclusive", proc.stdout
    assert "jacobian agreed with reference only within its own error estimate" in proc.stdout, proc.stdout
