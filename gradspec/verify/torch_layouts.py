"""fn's backward called with a non-contiguous upstream gradient (``grad_output``) of the same values.

Every oracle hands a torch Function a contiguous upstream gradient, but in real use it gets whatever
the layer after it produced: after a ``.transpose()`` / ``.permute()`` / slicing downstream, a
non-contiguous one.  A backward that does ``g.view(-1, n)`` then raises ("view size is not compatible
with input tensor's size and stride"), and one that reads ``g``'s memory directly (``as_strided``, a C
extension that assumes contiguity) returns the wrong numbers, yet both pass every contiguous check.
torch's own tests feed such layouts (``torch.testing.make_tensor(..., noncontiguous=True)``, the
OpInfo samples' non-contiguous copies: a buffer twice as large, every other element); this check does
the same at the Function's node of a few cases: one forward and backward with a contiguous upstream
gradient and one with :func:`noncontiguous_like` of it, then compares.

Example::

    >>> import torch
    >>> from gradspec.verify.torch_layouts import noncontiguous_like
    >>> g = torch.arange(6.0).reshape(2, 3)
    >>> h = noncontiguous_like(g)
    >>> bool(torch.equal(g, h)), h.is_contiguous()
    (True, False)
"""

from __future__ import annotations

import numpy as np

from .. import tolerances as _tol
from .._private.fdstep import float32_valued as _float32_valued
from ..case import Case
from ..causes import Cause
from ..result import VerifyDiscrepancy

__all__ = ["noncontiguous_like", "LayoutCheck"]

# Cases per run whose Function node is checked this way while nothing was found: the layouts a backward
# breaks on show up on the first case of rank >= 2 (reversed strides) or >= 1 (strided); a few more cover
# shapes with size-1 axes.  After a finding every case is checked (the shrinker needs it to reproduce).
CLEAN_CHECKS = {2: 8, 1: 2}
CHECK_NAME = "non-contiguous grad_output"


def noncontiguous_like(g):
    """A non-contiguous tensor equal to ``g``: its axes' strides reversed (what a ``.transpose()`` /
    ``.permute()`` downstream gives) inside a buffer twice as large (every other element, what slicing
    gives).  None for fewer than two elements (no layout to vary)."""
    import torch

    if g.numel() < 2:
        return None
    buf = torch.zeros(tuple(reversed(g.shape)) + (2,), dtype=g.dtype, device=g.device)
    view = buf[..., 0].permute(*reversed(range(g.dim())))
    view.copy_(g)
    return view


class LayoutCheck:
    """The per-run state of the check (how many clean checks are left, whether it found something)."""

    def __init__(self, spec, target: str, replay: str) -> None:
        self.spec, self.target, self.replay = spec, target, replay
        self.left = dict(CLEAN_CHECKS)
        self.found = False

    def __call__(self, case: Case) -> list:
        node = next((n for n in case.nodes if n.op == self.spec.name), None)
        if node is None:
            return []
        try:
            env = case.evaluate()
            ins = [np.asarray(env[i]) for i in node.inputs]
            g = self._seed(np.asarray(env[node.name]))
        except Exception:  # noqa: BLE001 - the forward raised: the case's own check reports or excuses it
            return []
        rank = min(g.ndim, 2)
        if g.size < 2 or (not self.found and self.left.get(rank, 0) <= 0):
            return []
        if not self.found:
            self.left[rank] -= 1
        import torch

        gt = torch.from_numpy(g)
        try:
            want = self._grads(ins, node.params, gt)
        except Exception:  # noqa: BLE001 - raising on a contiguous gradient is the other checks' business
            return []
        nc = noncontiguous_like(gt)
        try:
            got = self._grads(ins, node.params, nc)
        except Exception as e:  # noqa: BLE001 - the finding
            self.found = True
            return [self._raised(case, node, nc, e)]
        bad = _differ(want, got)
        if bad is None:
            return []
        try:  # the same layouts again: a backward that differs from call to call is not a layout issue
            if _differ(want, self._grads(ins, node.params, gt)) is not None or \
                    _differ(got, self._grads(ins, node.params, noncontiguous_like(gt))) is not None:
                return []
        except Exception:  # noqa: BLE001
            return []
        self.found = True
        return [self._value(case, node, nc, bad, want, got)]

    @staticmethod
    def _seed(out: np.ndarray) -> np.ndarray:
        # fixed values of both signs, all distinct: a backward that reads elements from the wrong places
        # gives other numbers (a seed of ones would hide a permutation)
        k = np.arange(out.size, dtype=np.float64).reshape(out.shape)
        return np.asarray((0.5 + (k * 0.618034) % 1.0) * np.where(k % 2 == 0, 1.0, -1.0),
                          dtype=out.dtype if out.dtype.kind == "f" else np.float64)

    def _grads(self, ins, params, g) -> list:
        import torch

        xs = [torch.from_numpy(np.array(a)) for a in ins]
        need = [x for x in xs if x.is_floating_point()]
        for x in need:
            x.requires_grad_(True)
        with torch.enable_grad():
            out = self.spec.torch(*xs, **params)
            res = iter(torch.autograd.grad(out, need, g, allow_unused=True))
        # one per input of the node (None for the ones that are not floating point), so k names node.inputs[k]
        grads = [next(res) if x.is_floating_point() else None for x in xs]
        return [None if r is None else r.detach().numpy().copy() for r in grads]

    def _where(self, node) -> str:
        return f"node {node.name} = {node.op}({', '.join(node.inputs)})"

    def _raised(self, case, node, nc, e) -> VerifyDiscrepancy:
        fn = self.spec.name.removeprefix("torch_")
        said = f"{type(e).__name__}: {str(e).splitlines()[0].rstrip('.') if str(e) else ''}"
        summary = (f"{self._where(node)}: your backward ({fn}.backward) raised {said} when its upstream gradient "
                   f"(grad_output) is non-contiguous — the same values, strides {tuple(nc.stride())}, as after a "
                   ".transpose()/.permute() or slicing downstream; with a contiguous one it works: use .reshape "
                   "instead of .view on grad_output, or call grad_output.contiguous() first")
        d = VerifyDiscrepancy("raised", ("torch-cpu", "torch-cpu"), f"{self.target}: {summary}", case,
                              replay=self.replay, check_name=CHECK_NAME)
        d.cause = Cause("layout-dependent", summary, node=node.name, op=node.op,
                        evidence=f"grad_output shape {tuple(nc.shape)}: contiguous -> gradients; strides "
                                 f"{tuple(nc.stride())} -> {said}",
                        fix="use .reshape (not .view) on grad_output, or grad_output.contiguous()")
        return d

    def _value(self, case, node, nc, bad, want, got) -> VerifyDiscrepancy:
        fn = self.spec.name.removeprefix("torch_")
        k, idx = bad
        name = node.inputs[k] if k < len(node.inputs) else f"input {k}"
        summary = (f"{self._where(node)}: your backward ({fn}.backward) returns other numbers when its upstream "
                   f"gradient (grad_output) is non-contiguous — the same values, strides {tuple(nc.stride())}, as "
                   f"after a .transpose()/.permute() or slicing downstream: input {name}'s gradient "
                   f"{_short(got[k])} vs {_short(want[k])} with a contiguous one; it reads grad_output's memory as if "
                   "it were contiguous (as_strided, .data_ptr() in an extension?): call grad_output.contiguous() first")
        leaf = name if name in {l.name for l in case.leaves} else None
        d = VerifyDiscrepancy("value", ("torch-cpu", "torch-cpu"), f"{self.target}: {summary}", case, leaf=leaf,
                              index=idx, values=(float(got[k][idx]), float(want[k][idx])), replay=self.replay,
                              check_name=CHECK_NAME)
        d.cause = Cause("layout-dependent", summary, node=node.name, op=node.op,
                        evidence=f"input {name}: non-contiguous grad_output {_short(got[k])}, contiguous "
                                 f"{_short(want[k])}", fix="call grad_output.contiguous() before reading its memory")
        return d


def _differ(a: list, b: list):
    """``(input k, element index)`` of the first gradient that differs beyond rounding, else None."""
    for k, (x, y) in enumerate(zip(a, b, strict=True)):
        if (x is None) != (y is None):
            return k, ()
        if x is None:
            continue
        if x.shape != y.shape:
            return k, ()
        # the same math on the same values in another memory order: only the summation order of the
        # reductions inside may change, i.e. rounding of the gradient's dtype (EXACT_RTOL: 2^12 eps64 /
        # 2^9 eps32) relative to the largest element, never more
        # (a backward that computes in float32 inside and casts back rounds its sums at eps32: its float64
        # gradients are then float32 numbers, gradspec._private.fdstep.float32_valued)
        f32 = x.dtype == np.float32 or _float32_valued(x) and _float32_valued(y)
        rtol = _tol.EXACT_RTOL["float32" if f32 else "float64"]
        with np.errstate(all="ignore"):
            scale = float(np.max(np.abs(x[np.isfinite(x)]), initial=0.0))
            err = np.abs(x.astype(np.float64) - y.astype(np.float64))
        same_nan = np.isnan(x) & np.isnan(y)
        bad = ~same_nan & ~(err <= rtol * max(scale, 1e-300))
        if np.any(bad):
            return k, tuple(int(i) for i in np.argwhere(bad)[0])
    return None


def _short(a) -> str:
    vals = np.asarray(a, dtype=np.float64).ravel()
    return "[" + ", ".join(f"{v:.4g}" for v in vals[:6]) + (", ..." if vals.size > 6 else "") + "]"
