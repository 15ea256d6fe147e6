"""Verifying users' code: ``gs.verify_op``, ``gs.verify_torch_function``, ``gs.verify_engine``.

Each runs a Hypothesis search (random graphs, shapes, values and seeds; failures are shrunk)
within a budget of examples or seconds and returns a :class:`Result`.  Runs are deterministic
for a given ``seed``; when no seed is given one is drawn and recorded, so every result says how
to run it again.

* ``verify_op(op)``: a user op (``gs.Op``) at the root of small graphs, deep inside larger ones
  (fed by fan-out, its output used twice, multiplied by random tensors so that its upstream
  gradient is never all ones), against table ops, with broadcasting where its signature allows
  it (loop dimensions that really broadcast, batch dims of matmul-like ops), with its params
  drawn, big sides (5 to 8) and high ranks (up to 4) in part of the cases, exact zeros and
  repeated values among the inputs.  Every applicable oracle: finite differences of the
  forward, the jacobian oracle (the op's own ``jvp``, or a finite-difference JVP of its forward,
  compared with a finite-difference tolerance), torch (``torch=``).  The VJP's contract (count, exact shape,
  dtype, no writing into its arguments, no exception) is checked on every call.
* ``verify_torch_function(fn)``: ``fn`` (e.g. ``MyFunction.apply``) wrapped as a user op whose
  VJP is fn's own backward (``torch.autograd.grad``) and whose torch twin is fn itself, so the
  backward is checked both call by call and inside whole torch graphs (fn called several times,
  inputs used twice), plus backward twice (accumulation, state kept between calls).
* ``verify_module(module, example_inputs=...)``: a ``torch.nn.Module`` as a function of its
  trainable parameters and its float inputs (all leaves), through ``verify_torch_function``.
* ``surrogate=`` (both): the gradient a backward is meant to compute where that is not the derivative
  on purpose (a straight-through estimator, gradient reversal): :mod:`gradspec.verify.torch_surrogate`.
* ``verify_engine(engine)``: an :class:`gradspec.engines.Engine` adapter on random graphs of
  the ops it supports, plus every backward() rule of CONTRACT §5 as a check of its own
  (implicit seeds, seed shapes, J^T seed, accumulation across calls/roots/uses, reset,
  retain_graph, freeing), differential against torch wherever torch decides.

Example::

    >>> import numpy as np, gradspec as gs
    >>> cube = gs.Op("cube", forward=lambda x: x ** 3, vjp=lambda g, x, out: (3 * x ** 2 * g,))
    >>> gs.verify_op(cube, max_examples=5, seed=0).ok
    True
"""

from __future__ import annotations

from ..oracles.engine_oracle import EngineOracle
from ..oracles.fd_jacobian import FDJacobianOracle, fd_jacobian_error
from ..result import Result, VerifyDiscrepancy
from ..search import DEFAULT_MAX_EXAMPLES, SHRINK_CALLS, SHRINK_SECONDS
from .engine import verify_engine
from .op import COMPANIONS, verify_op
from .torch_function import verify_module, verify_torch_function

__all__ = [
    "Result",
    "VerifyDiscrepancy",
    "verify_op",
    "verify_torch_function",
    "verify_module",
    "verify_engine",
    "fd_jacobian_error",
    "FDJacobianOracle",
    "EngineOracle",
    "DEFAULT_MAX_EXAMPLES",
    "SHRINK_CALLS",
    "SHRINK_SECONDS",
    "COMPANIONS",
]
