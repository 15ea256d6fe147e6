"""A custom ``torch.autograd.Function`` with a subtle backward bug, and its fixed twin.

``RowNormalize`` maps each row ``x`` (last axis) to ``y = x / ||x||``.  Its Jacobian is
``(I - y y^T) / ||x||``, so the backward owes ``(g - y <g, y>) / ||x||``.  The buggy version
writes ``y.sum(-1)`` where ``(g * y).sum(-1)`` belongs: it is exactly right whenever the
upstream gradient ``g`` is all ones, i.e. for the usual smoke test ``y.sum().backward()``.

``gs.verify_torch_function`` drives it with random seeds (and inside random graphs), so it
finds the bug in a fraction of a second; the fixed twin passes.

Run it::

    python examples/custom_function.py     # exit 0 when the bug is found and the fix is clean
"""

from __future__ import annotations

import sys

import torch


class RowNormalize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        n = x.norm(dim=-1, keepdim=True)
        y = x / n
        ctx.save_for_backward(y, n)
        return y

    @staticmethod
    def backward(ctx, g):
        y, n = ctx.saved_tensors
        return (g - y * (g * y).sum(-1, keepdim=True)) / n


class RowNormalizeBuggy(RowNormalize):
    # the same forward (inherited); only the backward differs
    @staticmethod
    def backward(ctx, g):
        y, n = ctx.saved_tensors
        return (g - y * y.sum(-1, keepdim=True)) / n  # BUG: right only when g is all ones


def smoke_test(fn) -> bool:
    """What many projects check: y.sum().backward() against autograd of the plain formula."""
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    fn(x).sum().backward()
    x2 = x.detach().clone().requires_grad_(True)
    (x2 / x2.norm(dim=-1, keepdim=True)).sum().backward()
    return torch.allclose(x.grad, x2.grad)


def main() -> int:
    import gradspec as gs

    # The op is a row-wise map: a gufunc over the last axis, away from the zero row.
    kw = dict(signature="(n)->(n)", domain=gs.domains.away_from([0.0], 0.05), max_examples=40, seed=0)
    print("smoke test y.sum().backward() passes for the buggy version:", smoke_test(RowNormalizeBuggy.apply))
    buggy = gs.verify_torch_function(RowNormalizeBuggy.apply, **kw)
    print(buggy.summary())
    fixed = gs.verify_torch_function(RowNormalize.apply, **kw)
    print(fixed.summary())
    print(f"buggy: {'bug found' if not buggy.ok else 'NOT FOUND'}"
          + (f" after {buggy.time_to_first:.2f} s" if buggy.time_to_first is not None else ""))
    print(f"fixed: {'clean' if fixed.ok else 'REPORTED'}")
    return 0 if (not buggy.ok and fixed.ok) else 1


if __name__ == "__main__":
    sys.exit(main())
