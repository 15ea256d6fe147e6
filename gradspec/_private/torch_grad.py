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

__all__ = ["grad", "backward", "grads_kept", "refuses_grad", "refusing_node", "backward_note", "checkpoint_watch",
           "bound_copy"]

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
    read from their ``.grad`` (a non-leaf input is asked to keep it), which is then put back, as is the
    ``.grad`` of every other leaf that backward reaches (a closure's parameters: :func:`grads_kept`)."""
    before = [x.grad for x in inputs]
    for x in inputs:
        if not x.is_leaf:
            x.retain_grad()
        x.grad = None
    try:
        with grads_kept(outputs, keep=inputs):
            torch.autograd.backward(list(outputs), list(grad_outputs))
        # (an input listed twice is one tensor: its .grad holds its whole gradient, as autograd.grad gives)
        return tuple(x.grad for x in inputs)
    finally:
        for x, g in zip(inputs, before, strict=True):
            x.grad = g


def backward(roots, seeds, inputs, *, retain_graph: bool = False, rebuild=None, run=None,
             refused: bool = False) -> tuple:
    """``torch.autograd.backward(roots, seeds, inputs=inputs)``: gradients accumulate into ``inputs`` (a case's
    leaves) and nowhere else.  Without ``inputs=`` torch adds them to every leaf the graph reaches: the
    parameters of an ``nn.Linear`` the user's fn holds in a closure, whose ``.grad`` a check must leave as it
    found it.  Where a backward refuses ``inputs=`` (a reentrant checkpoint; torch may have run part of the
    graph and freed it), ``rebuild()`` returns a fresh ``(roots, inputs)`` of the same graph (the leaves it
    returns start without a gradient) and backward runs as a training step runs it, without ``inputs=``, every
    other leaf it reaches given its ``.grad`` back (:func:`grads_kept`); ``refused=True`` goes there at once
    (a graph that refused before).  ``run(roots, seeds, inputs or None)``: what runs the backward,
    ``torch.autograd.backward`` by default (the torch oracle's own entry).

    Returns ``(roots, inputs, refused)``: the inputs whose ``.grad`` holds the result (rebuilt ones after a
    refusal) and their roots."""
    import torch

    if run is None:
        def run(r, s, i):
            torch.autograd.backward(r, s, retain_graph=retain_graph, inputs=i)
    if not refused:
        try:
            if not inputs:  # (no leaf to differentiate: torch raises, or reaches only leaves not the case's)
                with grads_kept(roots):
                    run(roots, seeds, None)
            else:
                run(roots, seeds, list(inputs))
            return roots, list(inputs), False
        except RuntimeError as e:
            if not refuses_grad(e) or rebuild is None:
                raise
        roots, inputs = rebuild()
    with grads_kept(roots, keep=inputs):
        run(roots, seeds, None)
    return roots, list(inputs), True


def _leaves(roots) -> list:
    """The leaf tensors the autograd graph of ``roots`` accumulates into (its ``AccumulateGrad`` nodes)."""
    seen, todo, out = set(), [getattr(r, "grad_fn", None) for r in roots], []
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        v = getattr(node, "variable", None)
        if v is not None:
            out.append(v)
        todo += [f for f, _ in getattr(node, "next_functions", ())]
    return out


@contextlib.contextmanager
def grads_kept(roots, keep=()):
    """Within: a backward of ``roots`` (and any backward it runs inside, as a reentrant checkpoint's recompute
    does) leaves every leaf's ``.grad`` as it was before, except ``keep``'s: each such leaf starts at None
    and gets its own ``.grad`` object back on exit (never written into: the user's tensor is the one they had).
    Nested backwards are seen through ``torch.autograd.backward``, swapped for the duration."""
    import torch

    kept = {id(k) for k in keep}
    held: dict = {}

    def hold(ts) -> None:
        for t in _leaves(ts if isinstance(ts, (list, tuple)) else [ts]):
            if id(t) not in kept and id(t) not in held:
                held[id(t)] = (t, t.grad)
                t.grad = None

    real = torch.autograd.backward

    def nested(tensors, *a, **k):
        hold(tensors)
        return real(tensors, *a, **k)

    hold(list(roots))
    torch.autograd.backward = nested
    try:
        yield
    finally:
        torch.autograd.backward = real
        for t, g in held.values():
            t.grad = g


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
