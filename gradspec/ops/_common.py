"""Small pieces shared by the op family modules (not public)."""

from __future__ import annotations

import functools

import numpy as np

from .. import engine as E


@functools.lru_cache(maxsize=None)
def torch():
    """Import torch on first use: importing gradspec must not pay torch's start-up cost."""
    import torch as _torch

    return _torch


def F():
    return torch().nn.functional


class _Quiet:
    """A context that does nothing: numpy FP errors are already ignored (the engine's ``_quiet_fp``)."""

    __slots__ = ()

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_QUIET = _Quiet()


def quiet(**errstate):
    """``np.errstate(**errstate)`` for an op's own numpy code, or no context at all inside the engine's quiet-FP
    region (every oracle call and every ``gs.check`` of gradspec's own oracles: all FP errors are ignored there
    already, and entering an errstate costs about a microsecond, on every forward of every small case)."""
    return _QUIET if E._FP_QUIET else np.errstate(**errstate)


def const(value, like) -> "E.Tensor":
    """A constant (no grad) tensor in the dtype of ``like`` (an engine Tensor or array)."""
    dt = like.dtype
    return E.Tensor(np.asarray(value, dtype=dt))


def mask(cond_array) -> "E.Tensor":
    return E.Tensor(np.asarray(cond_array, dtype=bool))


def where(cond, a, b) -> "E.Tensor":
    """Engine ``where`` with a numpy/bool condition; scalar branches take the other's dtype."""
    like = a if isinstance(a, E.Tensor) else b
    a = a if isinstance(a, E.Tensor) else const(a, like)
    b = b if isinstance(b, E.Tensor) else const(b, like)
    return E.call("where", mask(cond), a, b)


def broadcast(a: np.ndarray, shape: tuple) -> np.ndarray:
    """``np.broadcast_to(a, shape)``, or ``a`` itself when it has that shape already (numpy's broadcast_to is
    Python code, ~1.5 us, called by VJP rules on every small case; masks and values read the same either way)."""
    return a if a.shape == shape else np.broadcast_to(a, shape)


def bcast_tangent(t: np.ndarray, out_ndim: int) -> np.ndarray:
    """Pad a batched tangent (n, *s) to rank 1 + out_ndim so it broadcasts against the output."""
    missing = out_ndim - (t.ndim - 1)
    if missing > 0:
        t = t.reshape((t.shape[0],) + (1,) * missing + t.shape[1:])
    return t


def with_lead(params: dict, batch_shape: tuple) -> dict:
    """``batch_params`` for ops whose forward must know how many leading batch axes it is given
    (passed as the private param ``_lead``; ops that index axes from the front need it)."""
    return {**params, "_lead": len(batch_shape)}
