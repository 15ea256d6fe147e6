"""Engines with planted wrong VJPs for the pipeline tests (dedup by cause, replay)."""

from __future__ import annotations

from gradspec.engines import ReferenceEngine
from tests._planted import Small


def _scaled(out, k):
    # Same value, gradient through this node scaled by (1 + k).
    from gradspec import engine as E

    return E.call("add", out, E.call("mul", E.call("sub", out, out.detach()), E.tensor(float(k))))


class ExpDoubled(Small):
    """One bug: exp's VJP is twice what it should be."""

    name = "exp-doubled"

    def apply(self, op, *args, **params):
        out = super().apply(op, *args, **params)
        return _scaled(out, 1.0) if op == "exp" else out


class ExpDoubledTanhNegated(ExpDoubled):
    """Two bugs in two ops: exp's VJP doubled, tanh's VJP of the wrong sign."""

    name = "exp-doubled-tanh-negated"

    def apply(self, op, *args, **params):
        out = super().apply(op, *args, **params)
        return _scaled(out, -2.0) if op == "tanh" else out


class AllOpsMulScaled(ReferenceEngine):
    """One bug in an engine that runs the whole table: mul's VJP scaled by 1.5."""

    name = "all-ops-mul-scaled"

    def apply(self, op, *args, **params):
        out = super().apply(op, *args, **params)
        return _scaled(out, 0.5) if op == "mul" else out


class TanhOneMinusOut(Small):
    """tanh's VJP written as g * (1 - out) instead of g * (1 - out**2): off by 1 / (1 + out), a
    factor that depends on the input (a 'scale' on one element, no single factor on several)."""

    name = "tanh-one-minus-out"

    def apply(self, op, *args, **params):
        out = super().apply(op, *args, **params)
        if op != "tanh":
            return out
        import numpy as np

        from gradspec import engine as E

        k = 1.0 / (1.0 + np.asarray(out.numpy())) - 1.0
        return E.call("add", out, E.call("mul", E.call("sub", out, out.detach()), E.tensor(k)))
