"""torch code a new user (tryout6, training infra) checked, as test fixtures (findings 2 and 9).

Each wrong one says in a comment how it is wrong: the tests expect words from that, never from running gradspec.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.utils.checkpoint as cp

from tests._planted import SquareOk


def block(x):
    return torch.tanh(x) * torch.sigmoid(x)


def ckpt_reentrant(x):  # right: torch's reentrant checkpoint refuses torch.autograd.grad, not a bug
    return cp.checkpoint(block, x, use_reentrant=True)


def ckpt_nonreentrant(x):
    return cp.checkpoint(block, x, use_reentrant=False)


def ckpt_reentrant_inside(x):  # right: the checkpoint sits deep in the graph, nodes run before it in backward
    return torch.sin(cp.checkpoint(block, x * 1.5, use_reentrant=True)) * x


class Scale13(SquareOk):
    """y = x * x (SquareOk's forward); its backward multiplies by 1.3 more: wrong by a factor 1.3."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 1.3 * 2.0 * x * g


def ckpt_reentrant_wrong(x):  # wrong: the checkpointed block runs Scale13, whose backward is 1.3x too big
    return cp.checkpoint(Scale13.apply, x, use_reentrant=True)


class RefusesGrad(torch.autograd.Function):
    """y = exp(x), right; like DeepSpeed's checkpointing, its backward refuses to run under torch.autograd.grad
    (torch.autograd._is_checkpoint_valid() is False there) and asks for .backward()."""

    @staticmethod
    def forward(ctx, x):
        y = torch.exp(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        if not torch.autograd._is_checkpoint_valid():
            raise RuntimeError("Checkpointing is not compatible with .grad(), please use .backward() if possible")
        (y,) = ctx.saved_tensors
        return g * y


def refuses_grad_inside(x):  # right: the refusing node is reached only after others ran (and freed their buffers)
    return torch.tanh(RefusesGrad.apply(x * 0.5)) * x


def tuple_in(xs):  # one argument: a tuple of two tensors
    return xs[0] * xs[1]


def dict_out(x):
    return {"a": torch.sin(x), "b": x * 2}


@dataclasses.dataclass
class Out:
    y: torch.Tensor
    z: torch.Tensor


def dataclass_out(x):
    return Out(torch.sin(x), x * x)


class CtrlC:
    """A Function whose forward is interrupted as Ctrl-C interrupts it (KeyboardInterrupt raised inside the user's
    code, where SIGINT's handler raises it) at its ``at``-th call; ``scale`` 1.0: a right backward of sin, else a
    backward wrong by that factor."""

    def __init__(self, at: int, scale: float = 1.0):
        self.at, self.calls, self.scale = at, 0, scale
        owner = self

        class Sin(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                owner.calls += 1
                if owner.calls == owner.at:
                    raise KeyboardInterrupt
                ctx.save_for_backward(x)
                return torch.sin(x)

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return owner.scale * torch.cos(x) * g

        self.apply = Sin.apply


class CheckpointedNet(torch.nn.Module):
    """Right: a linear layer and tanh under torch.utils.checkpoint, as training code saves memory.  The recomputation
    in backward reads self.lin's parameters at backward time."""

    def __init__(self, reentrant: bool):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.reentrant = reentrant

    def forward(self, x):
        return cp.checkpoint(lambda t: torch.tanh(self.lin(t)), x, use_reentrant=self.reentrant)


class CheckpointedWrongNet(CheckpointedNet):
    """Wrong: the checkpointed block runs Scale13 (its backward 1.3x too big) on the layer's output."""

    def forward(self, x):
        return cp.checkpoint(lambda t: Scale13.apply(self.lin(t)), x, use_reentrant=self.reentrant)
