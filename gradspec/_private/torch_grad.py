"""``torch.autograd.grad`` for user torch code, or ``.backward()`` where torch refuses ``.grad()``.

gradspec asks torch for ``J^T . g`` of fn's inputs with ``torch.autograd.grad``: it never touches
anybody's ``.grad``.  A reentrant checkpoint (``torch.utils.checkpoint(..., use_reentrant=True)``)
does not support that: its backward raises "incompatible with .grad() or passing an `inputs`
parameter to .backward()" -- torch's own refusal, not a bug of the user's code, which is meant to
be trained with ``loss.backward()``.  There (found in the graph before anything runs, or told by
that refusal) the gradient is taken the way the user's training takes it: ``torch.autograd.backward``
without ``inputs=``, the inputs' ``.grad`` read and put back as they were (tryout6 #2).

Example::

    >>> import torch, torch.utils.checkpoint as cp, warnings
    >>> from gradspec._private.torch_grad import grad
    >>> x = torch.tensor([0.5, 1.0], dtype=torch.float64, requires_grad=True)
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     y = cp.checkpoint(torch.sin, x, use_reentrant=True) * 2
    >>> torch.allclose(grad([y], [x], [torch.ones(2, dtype=torch.float64)])[0], 2 * torch.cos(x.detach()))
    True
    >>> x.grad is None
    True
"""

from __future__ import annotations

import contextlib
import copy

__all__ = ["grad", "refuses_grad", "refusing_node", "backward_note", "checkpoint_watch", "bound_copy"]

# the words torch (and DeepSpeed, fairscale, which copied them) use when a backward cannot run under .grad()
_REFUSAL = (".grad()", "backward")


def refuses_grad(exc: BaseException) -> bool:
    """Whether ``exc`` is a backward's refusal to run under ``torch.autograd.grad`` (asking for
    ``.backward()`` without ``inputs=`` instead), as a reentrant checkpoint's is."""
    msg = str(exc)
    return isinstance(exc, RuntimeError) and all(w in msg for w in _REFUSAL) \
        and ("incompatible" in msg or "not compatible" in msg)


def refusing_node(outputs, limit: int = 2000) -> str | None:
    """The name of a node in the autograd graph of ``outputs`` whose backward refuses ``.grad()``
    (torch's reentrant ``CheckpointFunction``), or None; at most ``limit`` nodes are walked."""
    seen, todo = set(), [getattr(o, "grad_fn", None) for o in outputs]
    while todo and len(seen) < limit:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        cls = getattr(node, "_forward_cls", None)
        if cls is not None and cls.__name__ == "CheckpointFunction" and cls.__module__ == "torch.utils.checkpoint":
            return node.name()
        todo += [f for f, _ in getattr(node, "next_functions", ())]
    return None


def grad(outputs, inputs, grad_outputs, *, rebuild=None, used: list | None = None) -> tuple:
    """``torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True)``; where the graph
    holds a backward that refuses ``.grad()``, the same gradients through ``.backward()``.

    ``rebuild``: called with no argument where a refusal comes only while the backward runs (a
    checkpoint this module does not know, deep in the graph: torch has freed what it ran before
    it), returns a fresh ``(outputs, inputs, grad_outputs)`` of the same call.  ``used``: where the
    gradients came through ``.backward()``, why is appended to it (the first time)."""
    import torch

    why = refusing_node(outputs)
    if why is None:
        try:
            return torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True)
        except RuntimeError as e:
            if not refuses_grad(e):
                raise
            why = f"a backward that raised {str(e).split('. ')[0]!r}"
            if rebuild is not None:
                outputs, inputs, grad_outputs = rebuild()
    if used is not None and not used:
        used.append(why)
    return _by_backward(torch, outputs, inputs, grad_outputs)


def backward_note(why: str) -> str:
    """What a result says where fn's backward ran through ``.backward()`` (``why``: from :func:`grad`)."""
    return (f"fn's graph holds {why} (as torch's reentrant checkpoint, use_reentrant=True, refuses torch.autograd.grad "
            "by design): its backward was run as a training step runs it, .backward() without inputs=, and the "
            "inputs' .grad read (then put back); second-order gradients are not checked through it: the gradient "
            "a reentrant checkpoint's backward gives has no graph even under create_graph=True (torch differentiates "
            "a checkpoint twice only with use_reentrant=False)")


def _by_backward(torch, outputs, inputs, grad_outputs) -> tuple:
    """The inputs' gradients from ``torch.autograd.backward(outputs, grad_outputs)`` (no ``inputs=``):
    read from their ``.grad`` (a non-leaf input is asked to keep it), which is then put back."""
    before = [x.grad for x in inputs]
    for x in inputs:
        if not x.is_leaf:
            x.retain_grad()
        x.grad = None
    try:
        torch.autograd.backward(list(outputs), list(grad_outputs))
        # (an input listed twice is one tensor: its .grad holds its whole gradient, as autograd.grad gives)
        return tuple(x.grad for x in inputs)
    finally:
        for x, g in zip(inputs, before, strict=True):
            x.grad = g


@contextlib.contextmanager
def checkpoint_watch():
    """Within: each ``torch.utils.checkpoint`` call (reentrant or not, however the user imported ``checkpoint``)
    appends to the list yielded.  Its entry points are looked up in the module's globals at each call, and
    wrapped here only for the duration (a module's checkpoint recomputes its block in backward: verify_module
    must then leave its own parameters in place for backward)."""
    try:
        import torch.utils.checkpoint as C
    except ImportError:  # (no torch: nothing to watch)
        yield []
        return
    seen: list = []
    gen, fn = getattr(C, "_checkpoint_without_reentrant_generator", None), getattr(C, "CheckpointFunction", None)

    def watched_gen(*a, **k):
        seen.append("use_reentrant=False")
        return gen(*a, **k)

    class _Watched:  # (CheckpointFunction.apply is all checkpoint() uses of it)
        @staticmethod
        def apply(*a, **k):
            seen.append("use_reentrant=True")
            return fn.apply(*a, **k)

    if gen is not None:
        C._checkpoint_without_reentrant_generator = watched_gen
    if fn is not None:
        C.CheckpointFunction = _Watched
    try:
        yield seen
    finally:
        if gen is not None:
            C._checkpoint_without_reentrant_generator = gen
        if fn is not None:
            C.CheckpointFunction = fn


def bound_copy(module, by_id: dict):
    """A structural copy of ``module`` whose parameters are replaced (``by_id``: id of a parameter -> the tensor in
    its place, tied parameters alike), every other attribute, buffers included, shared with ``module``: the copy
    keeps that call's parameters through a backward that recomputes (a checkpoint), which
    ``torch.func.functional_call`` swaps back when the forward returns."""
    c = copy.copy(module)
    c._parameters = {n: by_id.get(id(p), p) for n, p in module._parameters.items()}
    c._modules = {n: None if s is None else bound_copy(s, by_id) for n, s in module._modules.items()}
    return c
