"""PyTorch as an oracle: the case's graph built from each op's torch mapping."""

from __future__ import annotations

import functools

import numpy as np

from ._base import Oracle, OracleError

__all__ = ["TorchOracle", "build_torch_graph"]


@functools.lru_cache(maxsize=None)
def _torch():
    import torch

    return torch


def build_torch_graph(case, device: str = "cpu"):
    """Leaves and nodes of ``case`` as torch tensors on ``device``; returns (env, roots)."""
    torch = _torch()
    env = {}
    for leaf in case.leaves:
        # from_numpy + to(device) avoids torch.tensor's per-element Python path (the per-case
        # overhead that dominates small graphs).
        t = torch.from_numpy(np.require(leaf.value, requirements="C")).to(device)
        if leaf.differentiable:
            t.requires_grad_(True)
        env[leaf.name] = t
    for n in case.nodes:
        spec = case.spec(n.op)
        if spec.torch is None:
            raise OracleError(f"op {n.op!r} has no torch mapping")
        env[n.name] = spec.torch(*[env[i] for i in n.inputs], **n.params)
    return env, [env[r] for r in case.roots]


class TorchOracle(Oracle):
    kind = "exact"
    reports_none = True

    def __init__(self, device: str) -> None:
        self.device = device
        self.name = f"torch-{device}"

    def available(self):
        if self.device == "cpu":
            return True, ""
        torch = _torch()
        if not torch.cuda.is_available():
            return False, f"torch {torch.__version__} reports torch.cuda.is_available() == False (no CUDA device)"
        return True, ""

    def applies(self, case):
        specs = case._node_specs() or [case.spec(n.op) for n in case.nodes]
        missing = sorted({n.op for n, spec in zip(case.nodes, specs) if spec.torch is None})
        if missing:
            return False, f"{self.name}: no torch mapping for op(s) {', '.join(missing)}"
        return True, ""

    def vjp(self, case):
        ok, why = self.available()
        if not ok:
            raise OracleError(why)
        torch = _torch()
        env, roots = build_torch_graph(case, self.device)
        seeds = []
        for s in case.seeds:
            seeds.append(None if s is None else torch.from_numpy(np.array(s, copy=True)).to(self.device))
        torch.autograd.backward(roots, seeds)
        out = {}
        for leaf in case.grad_leaves():
            g = env[leaf.name].grad
            out[leaf.name] = None if g is None else g.detach().cpu().numpy()
        return out
