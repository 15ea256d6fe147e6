"""What a torch Function's backward returns that torch drops or casts without a word, read once per run at the
example (tryout10 F10, F3; a Function of several outputs and a ``torch.library.custom_op``'s registered backward
too): a gradient for an int/bool tensor argument (torch discards it: ``ctx.needs_input_grad``
ignored), and a gradient in a lower precision than its float input (torch casts it back).  Neither changes a value
gradspec compares where the op computes in float32 inside (the comparison is at float32 precision there), so the
dtype is read from the return itself, never inferred from the values.

Example::

    >>> import torch
    >>> class Half(torch.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         return x * 2
    ...     @staticmethod
    ...     def backward(ctx, g):
    ...         return (2 * g).float()
    >>> print(returns_notes(Half.apply, (torch.ones(2, dtype=torch.float64),), "Half")[0][:46])
    Half's backward returns float32 for input 0, a
"""

from __future__ import annotations

from .._private import determinism as _determinism

__all__ = ["returns_notes"]


def returns_notes(fn, example, label: str) -> list:
    """Notes on what ``fn``'s backward returns at ``example`` (fn's positional arguments); [] when nothing is odd
    or it cannot be read (not a torch.autograd.Function's or a custom_op's output, a raise)."""
    import torch

    example = (example,) if isinstance(example, torch.Tensor) else tuple(example or ())
    try:
        # non-leaf copies (an in-place Function may write into them); everything else a copy too
        args = [(x.detach().clone().requires_grad_(True).clone() if x.is_floating_point() else x.clone())
                if isinstance(x, torch.Tensor) else x for x in example]
        # (seeded as every other call of fn, and the caller's generator state restored: fn may draw random numbers)
        with torch.enable_grad(), _determinism.TorchSeeded():
            y = fn(*args)
            node, grads = _node_and_seeds(torch, y)
            if node is None:
                return []
            res = node.apply(*grads)  # the backward's own return, before torch drops or casts anything
    except Exception:  # noqa: BLE001 - cannot be read: the run's own checks stand
        return []
    res = res if isinstance(res, tuple) else (res,)
    notes = []
    for k, (x, r) in enumerate(zip(args, res)):
        if not isinstance(x, torch.Tensor) or not isinstance(r, torch.Tensor):
            continue
        dt = str(x.dtype).removeprefix("torch.")
        if not x.is_floating_point():
            notes.append(f"{label}'s backward returns a {str(r.dtype).removeprefix('torch.')} tensor for position {k}, "
                         f"{'an' if dt.startswith('int') else 'a'} {dt} argument that cannot require grad: torch "
                         "drops it without a word; return None there "
                         f"(check ctx.needs_input_grad[{k}]), as a gradient computed for it is work thrown away")
        elif r.is_floating_point() and torch.finfo(r.dtype).bits < torch.finfo(x.dtype).bits:
            got = str(r.dtype).removeprefix("torch.")
            notes.append(f"{label}'s backward returns {got} for input {k}, a {dt} input: torch casts it back to {dt} "
                         f"without a word, so that gradient carries {got}'s rounding (where fn computes in {got} inside "
                         f"the comparison is at {got} precision and no value shows it); return it in the input's dtype "
                         "(.to(x.dtype))")
    return notes


def _node_and_seeds(torch, y) -> tuple:
    """``(the backward node of the Function or custom_op that made fn's result, one seed per output)``, or
    ``(None, None)`` where fn's result cannot be told to be exactly that node's outputs in order.

    A Function's backward takes one gradient per output of its forward: fn's result is read as those outputs only
    where each output that has the node as its grad_fn sits at its own index (``output_nr``), so a fn returning a
    subset or a reordering of them is not read (a wrong seed count raises inside ``apply``: not read either).
    Seeds: ones for each output with the node, zeros for another tensor output (a non-differentiable one gets
    materialised zeros from torch's engine too), None for a non-tensor one (as torch passes)."""
    outs = list(y) if isinstance(y, (tuple, list)) else [y]
    node = next((o.grad_fn for o in outs if isinstance(o, torch.Tensor) and o.grad_fn is not None), None)
    if node is None or not hasattr(node, "_forward_cls") or not _users(node._forward_cls):
        return None, None
    grads = []
    for k, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            grads.append(None)
        elif o.grad_fn is None:
            grads.append(torch.zeros_like(o))
        elif o.grad_fn is not node or o.output_nr != k:
            return None, None
        else:
            grads.append(torch.ones_like(o))
    return node, grads


def _users(cls) -> bool:
    """A Function the user wrote, or the one ``torch.library.custom_op`` generates around a ``register_autograd``
    backward (its backward returns the user's gradients as they are, and None for its own metadata input); not
    one of torch's own Functions."""
    module = str(getattr(cls, "__module__", ""))
    return not module.startswith("torch.") or (module == "torch._library.autograd"
                                               and cls.__name__.startswith("GeneratedBackwardFor_"))
