"""A ``torch.nn.Module`` with a hand-written linear layer inside, checked with ``gs.verify_module``.

``MyLinear`` is a custom ``torch.autograd.Function`` for ``x @ W.T + b``.  The buggy version follows
a pattern seen in real code: it computes its gradients only ``if ctx.needs_input_grad[0]`` (the
input's), returning ``None`` for all three otherwise.  The usual smoke test - the net's output
compared with ``torch.nn.Linear``'s after ``out.backward(torch.ones_like(out))`` with an input that
requires grad - passes.  In training the input is data and does not require grad: every weight
gradient of that layer is silently ``None``, and the layer never learns.

``gs.verify_module(net, example_inputs=(x,))`` checks the net as a function of all its parameters
and its input (each sometimes not requiring grad), under random seeds: it finds the bug; the fixed
layer passes.

Run it::

    python examples/nn_module.py     # exit 0 when the bug is found and the fix is clean
"""

from __future__ import annotations

import sys

import torch


class MyLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, W, b):
        ctx.save_for_backward(x, W)
        return x @ W.T + b

    @staticmethod
    def backward(ctx, g):
        x, W = ctx.saved_tensors
        gx = g @ W if ctx.needs_input_grad[0] else None
        gW = g.T @ x if ctx.needs_input_grad[1] else None
        gb = g.sum(0) if ctx.needs_input_grad[2] else None
        return gx, gW, gb


class MyLinearFnBuggy(MyLinearFn):
    @staticmethod
    def backward(ctx, g):
        x, W = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:  # BUG: the weights' gradients depend on the INPUT needing one
            return None, None, None
        return g @ W, g.T @ x, g.sum(0)


class MyLinear(torch.nn.Module):
    def __init__(self, d_in, d_out, fn):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d_out, d_in) / d_in ** 0.5)
        self.bias = torch.nn.Parameter(torch.zeros(d_out))
        self.fn = fn

    def forward(self, x):
        return self.fn.apply(x, self.weight, self.bias)


class TwoLayerNet(torch.nn.Module):
    def __init__(self, fn, d_in=4, hidden=5, d_out=3):
        super().__init__()
        self.fc1 = MyLinear(d_in, hidden, fn)
        self.fc2 = torch.nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def smoke_test(fn) -> bool:
    """out.backward(torch.ones_like(out)) on an input that requires grad, against torch.nn.Linear."""
    torch.manual_seed(0)
    net = TwoLayerNet(fn).double()
    ref = torch.nn.Linear(4, 5).double()
    ref.weight.data, ref.bias.data = net.fc1.weight.data.clone(), net.fc1.bias.data.clone()
    x = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    out = net(x)
    out.backward(torch.ones_like(out))
    out2 = net.fc2(torch.tanh(ref(x)))
    w_grad = torch.autograd.grad(out2, ref.weight, torch.ones_like(out2))[0]
    return net.fc1.weight.grad is not None and torch.allclose(net.fc1.weight.grad, w_grad)


def main() -> int:
    import gradspec as gs

    torch.manual_seed(0)
    x = torch.randn(6, 4)
    print("smoke test out.backward(torch.ones_like(out)) passes for the buggy layer:", smoke_test(MyLinearFnBuggy))
    buggy = gs.verify_module(TwoLayerNet(MyLinearFnBuggy), example_inputs=(x,), max_examples=20, seed=0)
    print(buggy.summary())
    fixed = gs.verify_module(TwoLayerNet(MyLinearFn), example_inputs=(x,), max_examples=20, seed=0)
    print(fixed.summary())
    found = buggy.status == "disagree"
    print("buggy:", "bug found" if found else "NOT found")
    print("fixed:", "clean" if fixed.ok else "NOT clean")
    return 0 if found and fixed.ok else 1


if __name__ == "__main__":
    sys.exit(main())
