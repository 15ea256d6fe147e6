"""A child gradspec forks runs torch after the parent used torch's OpenMP pool (tryout11 #1).

Before: ``gradspec replay`` of a torch Function's finding (a least-squares solve via QR) hung for ever in its check
process.  The parent had called the Function to learn its output shape (a QR: its triu runs under
``at::parallel_for``), so libgomp's thread team existed; the forked child has none of its threads and its first
parallel region waited on the team's barrier for ever (gdb: ``gomp_team_barrier_wait_end`` under ``linalg_qr``).
Every fork without exec (replay's check process, ``--isolate``'s) now runs torch on one thread in the child
(``_private.forked``).  The script runs in a fresh interpreter: the parent's OpenMP team must exist before the fork.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="forked children only")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The budget only bounds the failure (before the fix the child never ended and was killed at it): a 1000x1000
# matmul takes well under a second on one thread, so 20 s is no timing assertion.
_SCRIPT = """
import torch
from gradspec._private import isolate
torch.set_num_threads(2)  # (a one-core machine's default of 1 would never start a team)
a = torch.rand(1000, 1000)
(a @ a).sum()  # the parent's OpenMP team exists from here
kind, value, _, _ = isolate.run(lambda report: float((a @ a).sum()), budget=20, between=20)
print(kind, torch.get_num_threads())
"""


def test_a_forked_child_runs_torch_after_the_parent_ran_a_parallel_kernel():
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1")
    env.pop("OMP_NUM_THREADS", None)
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # "verdict": the child ended with its answer (before: "killed", blocked on the team barrier); the parent keeps
    # its own threads (only the child runs on one).
    assert proc.stdout.split() == ["verdict", "2"], proc.stdout + proc.stderr
