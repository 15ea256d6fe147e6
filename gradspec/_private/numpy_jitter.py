"""A user op's numpy code re-run with every result of its own operations off by a few ulps, for
``gradspec.check.rounding_noise`` (the numpy counterpart of ``gradspec.verify.torch_call.JitterFloat32``).

Why: a correct formula can cancel.  softplus' derivative written ``0.5 * (1 + tanh(x / 2))`` computes
``1 + tanh(-9.9)`` = 4.9e-9 from tanh's -0.99999999508, whose rounding (1.1e-16, half an ulp of 1) is 2.3e-8
of the result: the code is right, and differs from torch's ``sigmoid`` by 1.7e-8 relative there, above the
allowance for opaque code (OPAQUE_RTOL = 1.5e-8).  At x = -690.8 ``tanh`` is exactly -1 and the gradient 0
where torch gives 1e-300.  The rounding noise re-run jitters the values a user op's vjp is given, but not
the values its own code computes, so it measured none of that.  Run inside ``jittering`` (opaque_noise), a
user op's vjp gets its arrays as ``Jittered`` views: every ufunc result (operators, np.tanh, reductions)
is moved by up to the re-run's ulps, as a different but correct libm or summation order moves it, so the
spread of the gradient is the code's own rounding noise -- 4e-16 absolute for the formula above, which
then bounds a comparison with torch there.  A real bug (a wrong constant, 1e-5) stays far above it.

Example::

    >>> import numpy as np
    >>> from gradspec._private.numpy_jitter import jittered
    >>> x = np.array([-690.78])
    >>> with jittered(np.random.default_rng(0), 4.0):
    ...     float(np.abs(0.5 * (1 + np.tanh(0.5 * jittered.wrap(x))))[0]) > 0
    True
"""

from __future__ import annotations

import contextlib

import numpy as np

__all__ = ["Jittered", "jittered"]

_STATE: list = []  # [(rng, ulps)] while a jittered call runs
_SIGNS = np.array([-1.0, 1.0])


def _jitter(a):
    if not _STATE or not isinstance(a, np.ndarray) or a.dtype.kind != "f" or not a.size:
        return a
    rng, ulps = _STATE[-1]
    eps = np.finfo(a.dtype).eps
    # at least one eps relative, as rounding_noise's own jitter (a value's spacing is at most eps |value|)
    # (signs: rng.choice((-1.0, 1.0), shape)'s own draws, rng.integers(0, 2, shape) indexing the choices,
    # without choice's ~7 us of argument checks)
    u = rng.uniform(min(1.0, 1 / ulps), 1, a.shape) * _SIGNS[rng.integers(0, 2, a.shape)]
    return (a * (1 + ulps * eps * u)).astype(a.dtype, copy=False)


class Jittered(np.ndarray):
    """An ndarray whose ufunc results (and theirs, transitively) are jittered while ``jittered`` is active."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        base = [np.asarray(x) if isinstance(x, Jittered) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(np.asarray(o) if isinstance(o, Jittered) else o for o in kwargs["out"])
        res = getattr(ufunc, method)(*base, **kwargs)
        if isinstance(res, tuple):
            return tuple(_wrap(_jitter(np.asarray(r))) for r in res)
        return _wrap(_jitter(np.asarray(res))) if isinstance(res, np.ndarray) or np.isscalar(res) else res


def _wrap(a):
    a = np.asarray(a)
    return a.view(Jittered) if a.dtype.kind == "f" else a


class _Jittering:
    """``with jittered(rng, ulps):`` -- and ``jittered.wrap(a)``, the view a user's code is given."""

    @contextlib.contextmanager
    def __call__(self, rng, ulps: float):
        _STATE.append((rng, float(ulps)))
        try:
            yield
        finally:
            _STATE.pop()

    @staticmethod
    def wrap(a):
        return a.view(Jittered) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a


jittered = _Jittering()
