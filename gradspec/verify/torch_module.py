"""``gs.verify_module``: a ``torch.nn.Module``'s gradients, its parameters and its inputs as leaves.

(Defined in :mod:`gradspec.verify.torch_function`, which calls this module.)

A user's module (a two-layer net, a layer with a custom ``autograd.Function`` inside, a module whose
forward detaches something it should not) is run as a function of *all* its trainable parameters
and its float inputs, ``torch.func.functional_call(module, params, inputs)``, on a float64 copy, and on a
float32 copy for float32 cases (the user's module is not touched).  That function goes through ``gs.verify_torch_function`` with the
parameters and ``example_inputs`` as one real call: the parameters keep their shapes (the module's
structure), the input dims not tied to a parameter (batch, sequence...) vary, seeds are random
(not only ``out.backward(torch.ones_like(out))``), and each parameter and input sometimes does not
require grad.  ``verify_torch_function(module, example_inputs=...)`` does the same.

The leaves of a finding are named in the result's notes (``x0 = fc1.weight`` ...).

Example::

    >>> import torch, gradspec as gs
    >>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    >>> r = gs.verify_module(net, example_inputs=(torch.randn(5, 3),), max_examples=5, seed=0)
    >>> r.status
    'agree'
"""

from __future__ import annotations

import copy

from .._private import torch_grad as _torch_grad
from ..ops.user import UserOpError

__all__ = ["module_function", "surrogate_of", "finish", "named"]


def module_function(module, example_inputs):
    """(fn, example, names): ``fn(*params, *inputs)`` calls a float64 copy of ``module`` functionally;
    ``example`` is the trainable parameters followed by ``example_inputs`` (float tensors in float64);
    ``names`` labels each float tensor of the example."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"verify_module expects a torch.nn.Module, got {type(module).__name__}")
    if example_inputs is None:
        raise UserOpError("verify_module: pass example_inputs=(...) (the arguments of one real forward call)")
    if isinstance(example_inputs, torch.Tensor) or not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    mod = copy.deepcopy(module).to(torch.float64)
    # a float32 case (verify_torch_function's dtypes=) runs a float32 copy: its buffers (running statistics)
    # in the case's dtype too, as when the user trains in float32
    mods = {torch.float64: mod, torch.float32: copy.deepcopy(module).to(torch.float32)}
    names = [n for n, p in mod.named_parameters() if p.requires_grad]
    params = [p.detach().clone() for n, p in mod.named_parameters() if p.requires_grad]
    k = len(params)

    shapes = [tuple(p.shape) for p in params]

    def fn(*args):
        if [tuple(a.shape) for a in args[:k]] != shapes:
            # the module's structure fixes its parameters' shapes: only the inputs' free dims vary
            raise ValueError("parameter shapes differ from the module's")
        m = mods.get(args[0].dtype, mod) if args else mod
        if not checkpointed:
            with _torch_grad.checkpoint_watch() as seen:
                out = torch.func.functional_call(m, dict(zip(names, args[:k])), tuple(args[k:]))
            if not seen:
                return out
            checkpointed.extend(seen)
        # a checkpoint recomputes in backward, after functional_call put the module's own parameters back: this
        # call's parameters stay in a structural copy instead (the forward above, on the wrong ones, is dropped)
        own = dict(m.named_parameters())
        return _torch_grad.bound_copy(m, {id(own[n]): a for n, a in zip(names, args[:k])})(*args[k:])

    checkpointed: list = []  # how the module uses torch.utils.checkpoint, once seen

    start = {d: {n: b.detach().clone() for n, b in m.named_buffers()} for d, m in mods.items()}

    def state_changes() -> str:
        """The copies' buffers that changed since the run began (an EMA or running statistics updated in
        forward): what the reason of a module that is not a function of its inputs names."""
        changed = sorted({n for d, m in mods.items() for n, b in m.named_buffers()
                          if n in start[d] and not torch.equal(b.detach(), start[d][n])})
        return (f"{type(module).__name__} updates its buffer(s) {', '.join(map(repr, changed))} in forward"
                if changed else "")

    fn.__qualname__ = type(module).__name__
    fn._gs_state = state_changes  # (determinism.why_not_a_function)
    fn._gs_parts = (names, k, mods)  # (surrogate_of: the same parameters, the same copies' dtypes)
    fn._gs_checkpointed = checkpointed  # (finish: the note)
    fn._gs_module = type(module).__name__  # (verify_torch_function: a module's findings replay in this process only)
    inputs = [x.detach().to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
              for x in example_inputs]
    labels = names + [f"input {i}" for i, x in enumerate(inputs)
                      if isinstance(x, torch.Tensor) and x.is_floating_point()]
    return fn, tuple(params) + tuple(inputs), labels


def surrogate_of(module, fn, surrogate) -> tuple:
    """(the surrogate of ``fn`` = :func:`module_function`'s, or None; the padding rows it holds at 0): the user's
    surrogate module, and each ``nn.Embedding(padding_idx=p)`` whose row p torch leaves without gradient."""
    from . import torch_surrogate

    names, k, mods = fn._gs_parts
    pads = torch_surrogate.padding_rows(module, names)
    return torch_surrogate.module_surrogate(surrogate, names, k, pads, mods), pads


def finish(result, labels: list, fn=None) -> None:
    """A module's result: named as such, its leaves listed, its replay through verify_module."""
    result.what = "module"
    if getattr(fn, "_gs_checkpointed", None):
        result.note(f"the module uses torch.utils.checkpoint ({fn._gs_checkpointed[0]}), which recomputes in backward "
                    "with the parameters the module holds then: each call ran a structural copy of it holding that "
                    "call's parameters (torch.func.functional_call swaps them back when the forward returns)")
    result.note("leaves: " + ", ".join(f"x{i} = {n}" for i, n in enumerate(labels)))
    for d in result.discrepancies:  # the user's names in the words of each finding (tryout5 #10: "x0" was the weight)
        if getattr(d, "cause", None) is not None:
            d.cause.summary = named(d.cause.summary, labels)
        d.message = named(d.message, labels)
    result.replay = result.replay.replace("gs.verify_torch_function(", "gs.verify_module(", 1)


def named(text: str, labels: list) -> str:
    """``text`` with each leaf name ``x<i>`` of a module's case followed, once, by what it is (``x0 (weight)``)."""
    import re

    done: set = set()

    def one(m):
        i = int(m.group(1))
        if i >= len(labels) or i in done:
            return m.group(0)
        done.add(i)
        return f"{m.group(0)} ({labels[i]})"

    # x<i> standing alone (not inside a longer name, nor a leaf name quoted as 'x0' in a repr)
    return re.sub(r"(?<![\w.'\"])x(\d+)(?![\w'\"(])", one, str(text))
