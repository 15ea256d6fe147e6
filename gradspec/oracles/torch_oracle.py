"""PyTorch as an oracle: the case's graph built from each op's torch mapping."""

from __future__ import annotations

import functools

import numpy as np

from .._private import structure as _structure
from .._private import torch_grad as _torch_grad
from ._base import Oracle, OracleError

__all__ = ["TorchOracle", "build_torch_graph"]


@functools.lru_cache(maxsize=None)
def _torch():
    import torch

    return torch


def build_torch_graph(case, device: str = "cpu"):
    """Leaves and nodes of ``case`` as torch tensors on ``device``; returns (env, roots)."""
    env, roots, _ = _graph(case, device)
    return env, roots


def _graph(case, device: str):
    """(env, roots, whether a user op's torch code runs in the graph)."""
    torch = _torch()
    env = {}
    cpu = device == "cpu"
    specs = case._node_specs() or [case.spec(n.op) for n in case.nodes]
    # user code (a Function whose forward writes into its input) gets its own copy of the values: from_numpy shares
    # the case's memory, and the witnesses that run after torch would see other inputs (the table ops never write)
    user = any(spec.user for spec in specs)
    for leaf in case.leaves:
        # from_numpy + to(device) avoids torch.tensor's per-element Python path (the per-case
        # overhead that dominates small graphs); on the CPU, to() would return the tensor itself.
        v = leaf.value
        if user and cpu:
            v = np.array(v, order="C")
        t = torch.from_numpy(v if type(v) is np.ndarray and v.flags.c_contiguous else np.require(v, requirements="C"))
        if not cpu:
            t = t.to(device)
        if leaf.differentiable:
            t.requires_grad_(True)
        env[leaf.name] = t
    for n, spec in zip(case.nodes, specs):
        if spec.torch is None:
            raise OracleError(f"op {n.op!r} has no torch mapping")
        env[n.name] = spec.torch(*[env[i] for i in n.inputs], **n.params)
    return env, [env[r] for r in case.roots], user


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
        missing = _structure.once(case, "no_torch", lambda: _missing(case))  # (the value sets of a group share it)
        if missing:
            return False, f"{self.name}: no torch mapping for op(s) {', '.join(missing)}"
        return True, ""

    def vjp(self, case):
        ok, why = self.available()
        if not ok:
            raise OracleError(why)
        torch = _torch()
        env, roots, user = _graph(case, self.device)
        seeds = []
        for s in case.seeds:
            t = None if s is None else torch.from_numpy(np.array(s, copy=True))
            seeds.append(t if t is None or self.device == "cpu" else t.to(self.device))
        leaves = case.grad_leaves()
        if user:
            # a user op's torch code may reach tensors of its own (a closure's nn.Linear): gradients go into the
            # case's leaves only, never into the user's .grad (the table ops' torch twins reach nothing else)
            def rebuild():
                nonlocal env
                env, again = build_torch_graph(case, self.device)
                return again, [env[l.name] for l in case.leaves if l.differentiable]

            _torch_grad.backward(roots, seeds, [env[l.name] for l in case.leaves if l.differentiable],
                                 rebuild=rebuild, run=lambda r, s, inputs: _backward(torch, r, s, inputs))
        else:
            got = _captured(torch, roots, seeds, [env[leaf.name] for leaf in leaves]) if self.device == "cpu" else None
            if got is not None:
                return {leaf.name: g for leaf, g in zip(leaves, got)}
            _backward(torch, roots, seeds)
        out = {}
        for leaf in leaves:
            g = env[leaf.name].grad
            # (is_cpu: the device's type without building a torch.device object per leaf)
            out[leaf.name] = None if g is None else g.numpy() if g.is_cpu and not g.requires_grad \
                else g.detach().cpu().numpy()
        return out


def _missing(case) -> list:
    specs = case._node_specs() or [case.spec(n.op) for n in case.nodes]
    return sorted({n.op for n, spec in zip(case.nodes, specs) if spec.torch is None})


def _captured(torch, roots, seeds, leaves) -> list | None:
    """The leaves' gradients (numpy arrays, or None for a leaf no gradient reaches) of a CPU graph of table ops,
    taken from torch's engine as ``torch.autograd.grad`` takes them (``accumulate_grad=False``); None where
    ``_backward`` must run instead (its ``.grad`` then holds them).

    Each value is what ``.backward()`` would leave in ``.grad``, bit for bit: the engine sums a leaf's incoming
    gradients before the leaf's ``AccumulateGrad`` node, which only stores (steals or copies) that sum.  Without
    that node, the ``.grad`` reads and ``_engine_run_backward``'s Python wrapper (a logger-level walk; a context
    stash for device threads, which a CPU graph never runs on) a small graph's call costs ~2.5 us less of ~37 us.
    A captured gradient may share memory with another leaf's (``add``'s backward hands one tensor to both
    inputs) or with a seed, or be a stride-0 expansion (``sum``'s backward): each is copied, C-contiguous, as
    ``AccumulateGrad`` copies what it cannot steal, so no two answers alias."""
    engine, log = _engine(torch)
    if engine is None or not leaves or log.isEnabledFor(10):  # (10: logging.DEBUG -- torch's wrapper logs the graph's nodes then)
        return None
    grads = _engine_grads(torch, roots, seeds)
    if grads is None:
        return None
    got = engine.run_backward(tuple(roots), tuple(grads), False, False, tuple(leaves),
                              allow_unreachable=True, accumulate_grad=False)
    return [None if g is None else g.numpy().copy() for g in got]


def _backward(torch, roots, seeds, inputs=None) -> None:
    """``torch.autograd.backward(roots, seeds, inputs=inputs)``.

    Its Python prologue (``_make_grads``: the seeds' checks, an import per seed, the implicit
    seeds; the ``__torch_function__`` dispatch) cost ~17 us of a small graph's ~40 us backward.
    Where that prologue would only pass the seeds through (``_engine_grads``), its result is built
    here and torch's engine entry (``torch.autograd.graph._engine_run_backward``, what ``backward``
    calls next) is called directly; anything else goes through ``torch.autograd.backward`` itself,
    so every error is torch's own, raised from torch's frames."""
    run = _engine_entry(torch)
    grads = None if run is None else _engine_grads(torch, roots, seeds)
    if grads is None:
        torch.autograd.backward(roots, seeds, inputs=inputs)
        return
    run(tuple(roots), tuple(grads), False, False, tuple(inputs or ()), allow_unreachable=True, accumulate_grad=True)


def _engine_grads(torch, roots, seeds) -> list | None:
    """The seeds ``torch.autograd.backward``'s prologue would hand its engine, where that prologue would only
    pass them through (plain tensors, seeds of the roots' shapes, implicit seeds of real scalar roots that
    require grad); None for anything else -- a root that does not require grad, a mismatched or complex seed,
    a tensor subclass, functorch transforms -- whose errors and handling must be torch's own."""
    if len(roots) != len(seeds) or torch._C._are_functorch_transforms_active() \
            or torch._C._has_torch_function(tuple(roots)):
        return None
    grads = []
    for r, s in zip(roots, seeds):
        if type(r) is not torch.Tensor:
            return None
        if s is None:
            if not (r.requires_grad and r.numel() == 1 and r.dtype.is_floating_point):
                return None
            s = torch.ones_like(r, memory_format=torch.preserve_format)
        elif type(s) is not torch.Tensor or s.shape != r.shape or s.dtype.is_complex != r.dtype.is_complex:
            return None
        grads.append(s)
    return grads


@functools.lru_cache(maxsize=None)
def _engine_entry(torch):
    return getattr(getattr(getattr(torch, "autograd", None), "graph", None), "_engine_run_backward", None)


@functools.lru_cache(maxsize=None)
def _engine(torch):
    """(torch's C++ autograd engine, the logger ``_engine_run_backward`` consults), or (None, None) on a torch
    without them."""
    graph = getattr(getattr(torch, "autograd", None), "graph", None)
    engine = getattr(getattr(getattr(torch, "autograd", None), "Variable", None), "_execution_engine", None)
    log = getattr(graph, "log", None)
    if engine is None or log is None or not hasattr(engine, "run_backward"):
        return None, None
    return engine, log
