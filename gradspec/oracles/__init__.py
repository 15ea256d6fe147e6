"""Oracles: independent ways to compute ``J^T . seed`` for a case.

* ``reference``: the reference engine's own backward over all roots with the case's seeds.
* ``finite-differences``: central differences (with Richardson extrapolation and an error
  estimate) of ``s(x) = sum_r <seed_r, f_r(x)>``, all perturbed points in one batched pass.
* ``jacobian``: the dense Jacobian composed by the chain rule from the ops' forward-mode
  (JVP) rules, never from the VJP rules under test; returns ``J^T . seed`` and keeps ``J``.
* ``torch-cpu`` / ``torch-cuda``: the same graph built in torch and run with
  ``torch.autograd.backward(roots, seeds)``.

Example::

    >>> import numpy as np, gradspec as gs
    >>> case = gs.Case.build({"x": np.array([1.0, 2.0])}, [("y", "mul", ["x", "x"], {})], ["y"], [np.ones(2)])
    >>> gs.oracles.get("reference").vjp(case)["x"]
    array([2., 4.])
    >>> sorted(gs.oracles.names())[:2]
    ['finite-differences', 'jacobian']
"""

from __future__ import annotations

from ._base import NonDifferentiable, Oracle, OracleError
from .fd import FiniteDifferences
from .jacobian import JacobianOracle
from .reference import ReferenceOracle
from .torch_oracle import TorchOracle

__all__ = ["Oracle", "OracleError", "NonDifferentiable", "names", "get", "register", "all_oracles"]

_ORACLES: dict[str, Oracle] = {}


def register(oracle: Oracle) -> Oracle:
    _ORACLES[oracle.name] = oracle
    return oracle


register(ReferenceOracle())
register(FiniteDifferences())
register(JacobianOracle())
register(TorchOracle("cpu"))
register(TorchOracle("cuda"))


def names() -> list[str]:
    """Registered oracle names."""
    return list(_ORACLES)


def get(name: str) -> Oracle:
    """The oracle called ``name``; KeyError naming the known ones otherwise."""
    try:
        return _ORACLES[name]
    except KeyError:
        raise KeyError(f"no oracle named {name!r}; known oracles: {', '.join(_ORACLES)}") from None


def all_oracles() -> list[Oracle]:
    return list(_ORACLES.values())
