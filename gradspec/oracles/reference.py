"""The reference engine as an oracle."""

from __future__ import annotations

import numpy as np

from .. import engine as E
from .._private.prologue import oracle_call
from . import _plan
from . import _reference_plan as _fast
from ._base import Oracle

__all__ = ["ReferenceOracle", "build_engine_graph"]


def build_engine_graph(case, jitter=None) -> tuple[dict[str, E.Tensor], list[E.Tensor]]:
    """Leaves and nodes of ``case`` as engine tensors; returns (env, roots).

    ``jitter`` (used by ``check.rounding_noise``) perturbs each op's output as it is computed,
    so later ops see consistent values; outputs of ops whose VJP compares values
    (``OpSpec.compares_values``: amax, maximum...) are left alone.
    """
    env: dict[str, E.Tensor] = {}
    for leaf in case.leaves:
        env[leaf.name] = E.Tensor(np.array(leaf.value, copy=True), requires_grad=leaf.differentiable)
    specs = case._node_specs() or [None] * len(case.nodes)
    for n, spec in zip(case.nodes, specs):
        spec = spec or case.spec(n.op)
        out = E.apply(spec, [env[i] for i in n.inputs], n.params)
        if jitter is not None and not spec.compares_values(n.params):
            out.data = jitter(out).data
        env[n.name] = out
    return env, [env[r] for r in case.roots]


class ReferenceOracle(Oracle):
    name = "reference"
    kind = "exact"
    reports_none = True

    @oracle_call
    def vjp(self, case):
        p = _plan.plan(case)
        if p is not None:  # (the engine's work replayed from the structure's plan, bit for bit)
            got = _fast.vjp(case, p)
            if got is not None:
                return got
        env, roots = build_engine_graph(case)
        seeds = [None if s is None else E.Tensor(np.array(s, copy=True)) for s in case.seeds]
        E.backward(roots, seeds)
        return {l.name: (None if env[l.name]._grad is None else env[l.name]._grad.numpy()) for l in case.grad_leaves()}
