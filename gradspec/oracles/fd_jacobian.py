"""The jacobian oracle over finite-difference JVPs, compared with a finite-difference tolerance.

User ops without a ``jvp`` get a finite-difference JVP of their forward in the jacobian oracle;
:class:`FDJacobianOracle` declares itself an ``fd`` oracle so that ``check()`` compares it with
its own error estimate (:func:`fd_jacobian_error`).

Example::

    >>> from gradspec.oracles.fd_jacobian import FDJacobianOracle
    >>> FDJacobianOracle().name, FDJacobianOracle().kind
    ('jacobian', 'fd')
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..ops import user as _user
from ..ops._user_fd import fd_memo
from ..ops.user import FDStepError, fd_rounding_noise, fd_step_scale
from ._base import Oracle, OracleError
from .jacobian import JacobianOracle

__all__ = ["FDJacobianOracle", "fd_jacobian_error", "FD_JVP_WORK"]


def fd_jacobian_error(case, jac_vjp: dict | None = None) -> dict:
    """Error estimate of the jacobian oracle's ``J^T seed`` when some op's JVP is a finite
    difference of its forward (user ops without ``jvp``).

    Three witnesses, the largest wins: the same composition at step scales 1.7 and 0.55
    (truncation error: it changes with the step), and with the finite-difference JVPs' rounding
    error injected as random noise of its own size (:func:`gradspec.ops.user.fd_rounding_noise`:
    rounding is what limits a JVP entry that is tiny next to the op's output, e.g. a saturated
    softmax); plus 1e-12 of the leaf's largest gradient.  Inside ``fd_memo`` (``FDJacobianOracle.result``
    opens it around the first pass too) the noise pass evaluates no stencil point: its JVPs are the first
    pass's, whose values are known, plus the noise."""
    from .jacobian import jacobian

    with fd_memo():
        return _error(case, jac_vjp if jac_vjp is not None else jacobian(case).vjp)


def _error(case, base: dict) -> dict:
    from .jacobian import jacobian

    err = {k: np.zeros(np.shape(v)) for k, v in base.items()}
    for s in (1.7, 0.55, None):
        ctx = fd_step_scale(s) if s is not None else fd_rounding_noise(0)
        with ctx:
            other = jacobian(case).vjp
        for k in err:
            with np.errstate(all="ignore"):
                d = np.abs(np.asarray(other[k], dtype=np.float64) - np.asarray(base[k], dtype=np.float64))
            err[k] = np.maximum(err[k], np.where(np.isfinite(d), d, np.inf))
    for k, v in base.items():
        v = np.asarray(v, dtype=np.float64)
        fin = v[np.isfinite(v)]
        err[k] = err[k] + 1e-12 * (float(np.max(np.abs(fin))) if fin.size else 0.0)
    return err


@dataclasses.dataclass
class _FDRes:
    grads: dict
    error: dict
    float32_inside: str = ""  # an op whose FD-JVP ran as a float32 computation (gs.check compares at float32)
    judged: dict | None = None  # (the shaky test judges all of ``error``)
    float32_why: str = ""  # how a hidden float32 part showed (``ops.user._FLOAT32_WHY``), "" for float32 values


# The finite-difference jacobian is formed where (input elements) x (elements of the graph's largest tensor)
# stays within FD_JVP_WORK: it takes one FD-JVP per input element, each a few forward evaluations of the whole
# graph, four times over (fd_jacobian_error's steps 1.7 and 0.55 and the rounding pass), and a torch Function's
# forward runs one point at a time.  tryout6 #6 (a 300 x 300 weight held constant, its (3, 300) input varied:
# 900 x 90,000 = 8.1e7) took 5.6-7.1 s of 7.4-9.3 s a case there, ~4 ns per element of work; 2**24 bounds that
# at ~1.5 s a case, and a thousand inputs beside tensors of 16,000 elements still get it.  A size, not a time:
# which oracles ran must not depend on the machine's load.  Above it, finite differences (directional above
# fd.full_limit inputs) and the other oracles compare; the skip says so.
FD_JVP_WORK = 2**24


class FDJacobianOracle(Oracle):
    """The jacobian oracle for cases with finite-difference JVPs, declared as an ``fd`` oracle so
    that ``check()`` compares it with its own error estimate (:func:`fd_jacobian_error`)."""

    name = "jacobian"
    kind = "fd"
    full_limit = math.inf

    def applies(self, case):
        ok, why = JacobianOracle().applies(case)
        if not ok:
            return ok, why
        n, top = case.n_inputs, max([math.prod(s) for s in case.shapes().values()] + [1])
        if n * top > FD_JVP_WORK:
            return False, (f"jacobian: {n} input elements beside a tensor of {top:,}: the finite-difference JVPs of "
                           f"the ops without a jvp (one per input element, four times over) are formed up to "
                           f"{FD_JVP_WORK:,} = inputs x largest tensor (here {n * top:,}); the other oracles compare")
        return ok, why

    def result(self, case, check_reach: bool = True):
        from .jacobian import jacobian

        try:
            del _user._FLOAT32_SEEN[:]
            _user._FLOAT32_WHY.clear()
            with fd_memo():  # (the first pass's JVPs kept for the noise pass)
                g = jacobian(case).vjp
                out = _FDRes(g, fd_jacobian_error(case, g), ", ".join(dict.fromkeys(_user._FLOAT32_SEEN)))
            out.float32_why = "; ".join(dict.fromkeys(_user._FLOAT32_WHY.values()))
            return out
        except FDStepError as e:  # no step could be trusted: refuse, with the reason
            raise OracleError(f"jacobian: {e}") from None

    def vjp(self, case):
        return self.result(case).grads
