"""How many times the jacobian oracle calls a user op's forward when its JVP is a finite difference
(tryout10 F12: a softmax cross-entropy torch Function, one point per call, checked ~1 case/s).

``FDJacobianOracle.result`` builds J four times: at the FD-JVP's step, at 1.7x and 0.55x it, and with
rounding noise added (``fd_jacobian_error``).  The noise pass's JVPs are the first pass's plus noise: with the
same inputs, tangents and step they evaluate the very same forward points, so their answer is known.
These tests count calls (no timing): the noise pass must evaluate nothing but the noise line it needs, and the
oracle's answer (gradients and error estimate) must be the one it gave when it evaluated everything.
"""

from __future__ import annotations

import numpy as np

import gradspec as gs
from gradspec import tolerances as _tol
from gradspec.ops import _user_fd as U
from gradspec.oracles.fd_jacobian import FDJacobianOracle
from gradspec.oracles.jacobian import jacobian

CALLS = [0]


def _xent(x):
    # a forward without a batch axis (as a torch Function's usually is): a leading axis is refused, so
    # forward_batched evaluates one point per call and every call is one forward point
    if np.ndim(x) != 2:
        raise ValueError("one (rows, classes) point at a time")
    CALLS[0] += 1
    z = x - x.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -(0.9 * logp[:, 0] + 0.1 * logp.mean(-1))


_op = gs.Op("fdcalls_xent", forward=_xent, vjp=lambda g, x, out: (np.zeros(x.shape),),
            shape_fn=lambda s: (s[0],) if len(s) == 2 else None)


def _case(seed=0):
    x = np.random.default_rng(seed).standard_normal((5, 4))
    return gs.Case.build({"x": x}, [("y", _op.name, ["x"], {})], ["y"], [np.linspace(0.5, 1.5, 5)])


def _count(fn):
    CALLS[0] = 0
    out = fn()
    return CALLS[0], out


def test_the_noise_pass_evaluates_only_its_noise_line():
    case = _case()
    FDJacobianOracle().result(case)  # (warm: forward_batched has learnt the forward takes no batch axis)
    assert _op._batch_ok is False
    passes = {}
    for s in (1.0, 1.7, 0.55):
        with U.fd_step_scale(s):
            passes[s] = _count(lambda: jacobian(case))[0]
    total, res = _count(lambda: FDJacobianOracle().result(case))
    # each pass evaluates the graph's forward once (jacobian's values) and its stencils; the noise pass adds
    # its noise line.  Before: the noise pass evaluated the first pass's stencils again (660 = 4 x 161 + 16)
    assert total <= passes[1.0] + passes[1.7] + passes[0.55] + 1 + _tol.FD_NOISE_POINTS, (total, passes)
    # one pass: the graph's forward once, then per direction (20) the stencils at h and h / 2, 8 points less
    # the 2 they share (h / 2's +-2 points are h's +-1 points): 121; before, 161
    assert passes[1.0] == 1 + 20 * 6, passes


def _full_stencils(monkeypatch):
    # every stencil point evaluated, as before (outer=None: nothing taken from the stencil at twice the step)
    full = U._stencil
    monkeypatch.setattr(U, "_stencil", lambda *a, outer=None, **kw: full(*a, **kw))


def test_the_answer_is_the_one_of_evaluating_everything(monkeypatch):
    case = _case(1)
    got = FDJacobianOracle().result(case)
    # the same passes run one by one, outside the oracle (no memo) and every stencil point evaluated
    _full_stencils(monkeypatch)
    base = jacobian(case).vjp
    err = {k: np.zeros(np.shape(v)) for k, v in base.items()}
    for ctx in (U.fd_step_scale(1.7), U.fd_step_scale(0.55), U.fd_rounding_noise(0)):
        with ctx:
            other = jacobian(case).vjp
        for k in err:
            err[k] = np.maximum(err[k], np.abs(other[k] - base[k]))
    for k, v in base.items():
        err[k] = err[k] + 1e-12 * float(np.max(np.abs(v)))
        np.testing.assert_array_equal(got.grads[k], v)
        np.testing.assert_array_equal(got.error[k], err[k])
