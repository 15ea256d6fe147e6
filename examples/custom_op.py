"""A ``torch.library.custom_op`` with ``register_autograd`` (torch's recommended way to write a custom op
since 2.4), checked by ``gs.verify_torch_function`` and by ``torch.library.opcheck`` side by side.

``scaled_tanh(x, scale) = scale * tanh(x)``; its derivative is ``scale * (1 - tanh(x)^2)``, which the
backward computes from the saved output ``y`` as ``scale - y^2 / scale``.  The buggy twin writes
``scale - y^2`` - right only for ``scale == 1``.

``torch.library.opcheck`` checks how the op is *registered* (schema and mutation annotations, the
autograd registration, the fake-tensor kernel, torch.compile's AOT dispatch with dynamic shapes):
it passes on both versions, because it does not check that the gradient is mathematically right.
gradspec checks the gradient values (random seeds, inside graphs, inputs that do or do not require
grad, backward twice) and finds the bug; the correct op passes both.

Run it::

    python examples/custom_op.py     # exit 0 when opcheck passes both, gradspec finds the bug and the fix is clean
"""

from __future__ import annotations

import sys

import torch


def _fake(x, scale):
    return torch.empty_like(x)


def _setup(ctx, inputs, output):
    _, scale = inputs
    ctx.save_for_backward(output)
    ctx.scale = scale


@torch.library.custom_op("gradspec_examples::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, scale: float) -> torch.Tensor:
    return scale * torch.tanh(x)


def _backward(ctx, g):
    (y,) = ctx.saved_tensors
    return g * (ctx.scale - y * y / ctx.scale), None


scaled_tanh.register_fake(_fake)
scaled_tanh.register_autograd(_backward, setup_context=_setup)


@torch.library.custom_op("gradspec_examples::scaled_tanh_buggy", mutates_args=())
def scaled_tanh_buggy(x: torch.Tensor, scale: float) -> torch.Tensor:
    return scale * torch.tanh(x)


def _backward_buggy(ctx, g):
    (y,) = ctx.saved_tensors
    return g * (ctx.scale - y * y), None  # BUG: y^2 not divided by scale (right only for scale == 1)


scaled_tanh_buggy.register_fake(_fake)
scaled_tanh_buggy.register_autograd(_backward_buggy, setup_context=_setup)


def opcheck(op) -> dict:
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    return torch.library.opcheck(op, (x, 2.0))


def main() -> int:
    import gradspec as gs

    example = (torch.randn(4, 3, dtype=torch.float64), 2.0)  # one real call: the tensor and the scale
    ok = True
    for op, want_bug in ((scaled_tanh_buggy, True), (scaled_tanh, False)):
        oc = opcheck(op)
        passed = all(v == "SUCCESS" for v in oc.values())
        print(f"{op._qualname}: torch.library.opcheck: {'passes' if passed else 'FAILS'} {oc}")
        r = gs.verify_torch_function(op, example_inputs=example, max_examples=30, seed=0)
        print(r.summary())
        found = r.status == "disagree"
        print(f"{op._qualname}: gradspec: {'bug found' if found else 'clean' if r.ok else r.status}")
        ok &= passed and found == want_bug and (found or r.ok)
    print("opcheck passes both; gradspec finds the buggy backward and passes the correct one:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
