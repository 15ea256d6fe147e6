"""An engine under test (the CONTRACT §4 ``Engine`` protocol) driven like an oracle.

One class for every entry point (``gradspec fuzz --engine``, ``verify_engine``,
``assert_gradients(engine=...)``): each case is built in the engine with ``leaf`` and
``apply(op, *args, **params)`` (canonical params), each root is back-propagated with its seed
(``retain_graph=True`` except for the last root, so shared subgraphs survive), and ``grad(leaf)``
is read for every leaf that requires grad (and for every other leaf: a constant must read back None).
What comes back is validated: anything that is not a numeric array (or None) raises a ``TypeError`` naming the
leaf, which ``gs.check`` records as a ``raised`` discrepancy.

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec.oracles.engine_oracle import EngineOracle
    >>> eo = EngineOracle(gs.engines.get("reference"), name="engine:reference")
    >>> case = gs.Case.build({"x": np.array([1.0, 2.0])}, [("y", "mul", ["x", "x"], {})], ["y"], [np.ones(2)])
    >>> eo.vjp(case)["x"]
    array([2., 4.])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._base import Oracle

__all__ = ["EngineOracle"]


class EngineOracle(Oracle):
    """``engine`` as an oracle named ``name`` (default: the engine's ``name``).

    ``spec`` is how the engine was named on the command line (a built-in name or
    ``module:attr``), recorded in case files so that they replay.  ``strict``: whether the
    engine must leave ``.grad`` None where torch does (``verify_engine(strict=True)``); by
    default zeros are accepted there.
    """

    kind = "exact"
    reports_none = False  # an engine may legitimately report zeros where torch has None

    def __init__(self, engine, name: str | None = None, spec: str | None = None, *, strict: bool = False) -> None:
        self.engine = engine
        self.name = name or getattr(engine, "name", "engine")
        self.spec = spec or self.name
        self.reports_none = bool(strict)

    def _supports(self, op: str) -> bool:
        try:
            return bool(self.engine.supports(op))
        except Exception:  # noqa: BLE001 - an engine whose supports() raises does not support the op
            return False

    def applies(self, case):
        missing = sorted({n.op for n in case.nodes if not self._supports(n.op)})
        if missing:
            return False, f"{self.name}: engine does not support op(s) {', '.join(missing)}"
        return True, ""

    def vjp(self, case):
        eng = self.engine
        try:
            env: dict[str, Any] = {}
            for leaf in case.leaves:
                env[leaf.name] = eng.leaf(np.array(leaf.value, copy=True), requires_grad=leaf.differentiable)
            for n in case.nodes:
                env[n.name] = eng.apply(n.op, *[env[i] for i in n.inputs], **n.params)
            k = len(case.roots)
            for j, (r, s) in enumerate(zip(case.roots, case.seeds, strict=True)):
                eng.backward(env[r], None if s is None else np.array(s, copy=True), retain_graph=j < k - 1)
            out = {}
            for leaf in case.grad_leaves():
                g = eng.grad(env[leaf.name])
                out[leaf.name] = None if g is None else _as_gradient(g, self.name, leaf.name)
            _constants_untouched(eng, env, case, self.name)
            return out
        except (SystemExit, GeneratorExit) as e:  # an engine must not end the campaign
            raise RuntimeError(f"engine {self.name!r} raised {type(e).__name__}({e})") from e


def _constants_untouched(eng, env, case, engine: str) -> None:
    """A leaf created with requires_grad=False must read back no gradient (torch's grad stays None there): the
    values compared are the trainable leaves', so a gradient stored into a constant would pass unseen (tryout8
    F3).  Zeros are let through, as the oracle lets zeros stand for None elsewhere (``reports_none``).
    Only float leaves are asked: an engine may keep a mask (where's condition) as a plain array outside
    autograd, and grad() of it was never part of the protocol (review F5).  A grad() that raises on a
    constant is "no gradient" here, not a raise of the whole case: the constant holds no gradient to compare."""
    for leaf in case.leaves:
        if leaf.differentiable or np.asarray(leaf.value).dtype.kind != "f":
            continue
        try:
            g = eng.grad(env[leaf.name])
        except Exception:  # noqa: BLE001 - no gradient readable is what torch gives here (None)
            continue
        if g is not None and np.any(np.asarray(_as_gradient(g, engine, leaf.name)) != 0):
            raise RuntimeError(f"engine {engine!r}: grad({leaf.name}) is not None after backward() although "
                               f"{leaf.name} was created with requires_grad=False (torch leaves it None)")


def _as_gradient(g, engine: str, leaf: str) -> np.ndarray:
    try:
        if hasattr(g, "detach") and hasattr(g, "cpu"):  # a torch tensor slipped through
            g = g.detach().cpu().numpy()
        arr = np.asarray(g)
    except Exception as e:
        raise TypeError(f"engine {engine!r}: grad({leaf}) returned {type(g).__name__}, not an array: {e}") from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(
            f"engine {engine!r}: grad({leaf}) returned a {type(g).__name__} of dtype {arr.dtype}; "
            "the Engine protocol wants a numeric numpy array (or None)"
        )
    if np.iscomplexobj(arr):
        raise TypeError(f"engine {engine!r}: grad({leaf}) returned complex values ({arr.dtype})")
    return arr
