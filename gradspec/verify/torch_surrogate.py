"""``surrogate=``: the gradient a torch backward is *meant* to compute, when that is not the derivative.

A straight-through estimator, gradient reversal or a stop-gradient mix has, on purpose, a backward that is not
the derivative of its forward: checked against the derivative it disagrees, and so do its bugs, in the same
words.  ``gs.verify_torch_function(fn, surrogate=s)`` names a differentiable function ``s`` of the same
arguments whose derivative IS the intended gradient (STE: ``x.clamp(-1, 1)``; reversal: ``-lam * x``;
stop-gradient: ``0 * x``).  fn's backward is then checked against that:

* the jacobian oracle takes, at each call of fn in a graph, a finite-difference JVP of ``s``'s forward at fn's
  inputs (``s``'s value is never used, only its derivative there), composed by the chain rule with the table
  ops around fn, and is compared with the finite-difference tolerance of such JVPs;
* finite differences of fn's own forward (the true derivative) are not compared;
* fn's backward is still run call by call and inside whole torch graphs, twice, with non-contiguous upstream
  gradients and through the double backward, as without a surrogate.

So a correct STE agrees while one that forgets its clip range is found, and a wrong-sign reversal is named
``sign``.  ``gs.verify_module(m, surrogate=m2)`` takes a module with the same parameters (``m`` with the trick
swapped for its surrogate).  A module's ``nn.Embedding(padding_idx=p)`` is recognised: torch gives row ``p``
no gradient from the lookup by design: the lookup's output there is held at its value (intended gradient 0);
so is a plain function's ``F.embedding(..., padding_idx=p)`` lookup, seen on fn's example.

Example::

    >>> import torch, gradspec as gs
    >>> class Reverse(torch.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x): return x.view_as(x)
    ...     @staticmethod
    ...     def backward(ctx, g): return -0.5 * g
    >>> x = torch.randn(3, dtype=torch.float64)
    >>> gs.verify_torch_function(Reverse.apply, example_inputs=(x,), surrogate=lambda x: -0.5 * x,
    ...                          max_examples=3, seed=0).status
    'agree'
"""

from __future__ import annotations

import copy
import math

import numpy as np

from ..ops.user import UserOpError, fd_jvp
from .torch_call import CallLayout, flat, label_of, outputs

__all__ = ["install", "check_example", "note", "NOTE", "HINT", "padding_rows", "module_surrogate", "padding_lookups",
           "function_surrogate", "rows_note"]

NOTE = ("surrogate={name}: fn's backward is checked against the gradient of the surrogate you declared (the jacobian "
        "oracle composes a finite-difference JVP of the surrogate's forward, taken at fn's inputs, with the ops "
        "around fn), not against the derivative of fn's forward; finite differences of fn's forward are not "
        "compared. fn's backward is still run call by call, inside torch graphs and twice")


HINT = ("a backward that is not the derivative on purpose (a straight-through estimator, gradient reversal, a "
        "stop-gradient or gradient hook) is checked against the derivative unless declared: pass surrogate=, a "
        "function of fn's arguments whose derivative is the intended gradient (x.clamp(-1, 1), -lam * x, 0 * x)")


def _forward(surrogate, layout: CallLayout):
    """The surrogate on numpy arrays, always in float64 (its derivative at the inputs is the reference value)."""
    import torch

    def forward(*arrays, **kw):
        xs = [torch.from_numpy(np.array(a, dtype=np.float64)) for a in arrays]
        with torch.no_grad():
            outs, multi = outputs(layout.call(surrogate, xs, kw))
            y = flat(outs, multi)
        return y.detach().cpu().to(torch.float64).numpy()

    return forward


def install(spec, surrogate, layout: CallLayout) -> None:
    """Make the jacobian oracle of ``spec`` (fn wrapped as a user op) the surrogate's derivative at fn's inputs."""
    if not callable(surrogate):
        raise TypeError(f"surrogate must be a callable on torch tensors with fn's arguments (its derivative is the "
                        f"intended gradient), got {type(surrogate).__name__}")
    twin = copy.copy(spec)
    twin.name = f"{spec.name}_surrogate"
    twin.forward = _forward(surrogate, layout)
    twin.kink_distance = None  # fn's kinks are not the surrogate's
    twin._batch_ok = None  # (whether the surrogate takes batch axes is its own business)
    twin.float32_seen = ""
    rule = fd_jvp(twin)
    hold = getattr(surrogate, "_gs_hold", None)  # (a module's padding rows: held at their value at fn's inputs)

    def jvp(tangents, *inputs, out, **params):
        if hold is not None:
            hold(inputs)
        mine = twin.forward(*inputs, **params)
        if np.shape(mine) != np.shape(out):
            raise UserOpError(f"surrogate {label_of(surrogate)} returns shape {np.shape(mine)} where fn returns "
                              f"{np.shape(out)}: it must take fn's arguments and return fn's output shape")
        return rule(tangents, *inputs, out=mine, **params)

    spec.jvp = jvp
    spec.surrogate = label_of(surrogate)  # type: ignore[attr-defined]  (diagnose: J^T·g is the surrogate's)


def note(surrogate) -> str:
    """The run's note: what its backward was checked against."""
    if getattr(surrogate, "_gs_auto", False):
        what = "the module" if getattr(surrogate, "_gs_rows", None) is None else "fn"
        return (f"the jacobian oracle composes a finite-difference JVP of {what} with its embedding lookups of "
                "padding rows held constant (their intended gradient is 0), taken at fn's inputs; finite differences "
                f"of {what} itself are not compared (they see the padding rows move)")
    return NOTE.format(name=label_of(surrogate))


def rows_note(rows: list) -> str:
    """A plain function's padding lookups (:func:`padding_lookups`), as the run says them."""
    which = ", ".join(f"padding_idx={r}" for r in dict.fromkeys(rows))
    return (f"fn calls F.embedding(..., {which}) (or an nn.Embedding with it): torch gives the padding row no gradient "
            "from the lookup by design (documented), so that lookup's intended gradient is taken as 0 (held constant "
            "in the jacobian oracle's JVP); the other rows, and any other use of the weight, are checked against the "
            "derivative")


def check_example(fn, surrogate, layout: CallLayout, example_inputs) -> None:
    """A surrogate that does not take fn's example or returns another shape: a usage error up front."""
    import torch

    if example_inputs is None:
        return
    xs = [x for x in example_inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
    kw = layout.params()
    try:
        with torch.no_grad():
            want = flat(*outputs(layout.call(fn, xs, kw))).shape
            got = flat(*outputs(layout.call(surrogate, xs, kw))).shape
    except Exception as e:  # noqa: BLE001 - fn's own failure is reported by the run; the surrogate's here
        try:
            with torch.no_grad():
                flat(*outputs(layout.call(fn, xs, kw)))
        except Exception:  # noqa: BLE001
            return
        raise UserOpError(f"surrogate {label_of(surrogate)} raised {type(e).__name__} on the example: {e} (it must "
                          "take fn's arguments)") from None
    if tuple(got) != tuple(want):
        raise UserOpError(f"surrogate {label_of(surrogate)} returns shape {tuple(got)} on the example where fn returns "
                          f"{tuple(want)}: it must return fn's output shape (its derivative is the intended gradient)")


def padding_rows(module, names: list) -> list:
    """``(index into names, submodule name, row, label)`` of each ``nn.Embedding`` with a padding row and a trainable
    weight.  (An ``nn.EmbeddingBag`` leaves the padding entries out of its sum, values and all: its derivative
    already has no padding term.)"""
    import torch

    out = []
    for mn, m in module.named_modules():
        pad = getattr(m, "padding_idx", None)
        pname = f"{mn}.weight" if mn else "weight"
        if isinstance(m, torch.nn.Embedding) and pad is not None and pname in names:
            out.append((names.index(pname), mn, int(pad), f"{type(m).__name__} {mn or '(the module)'} "
                                                          f"(padding_idx={int(pad)})"))
    return out


def module_surrogate(surrogate, names: list, k: int, pads: list, mods: dict):
    """The surrogate of a module's function ``fn(*params, *inputs)`` (``torch_module.module_function``): the user's
    surrogate module (else a copy of the module) called with the same parameters, each padding lookup's output held
    at its value at fn's inputs (the lookup's intended gradient for the padding row is 0; a weight tied elsewhere
    keeps its other uses); None if neither is needed."""
    import torch

    if surrogate is not None and not isinstance(surrogate, torch.nn.Module):
        raise TypeError("verify_module: surrogate must be a torch.nn.Module with the module's parameters (the "
                        f"module with its trick swapped for a differentiable surrogate), got {type(surrogate).__name__}")
    if surrogate is None and not pads:
        return None
    if surrogate is not None:
        own = dict(surrogate.named_parameters())
        missing = [n for n in names if n not in own]
        if missing:
            raise UserOpError(f"verify_module: surrogate has no parameter(s) {missing[:4]}: give it the module's "
                              "parameters (e.g. a copy of the module with the trick swapped)")
    source = surrogate if surrogate is not None else next(iter(mods.values()))
    twins = {dt: copy.deepcopy(source).to(dt) for dt in mods}  # (hooks below: never on the module fn runs)
    held: dict = {}
    for _, mn, row, _ in pads:
        for twin in twins.values():
            try:
                sub = twin.get_submodule(mn)
            except AttributeError:  # the user's surrogate has no such submodule: its own business
                continue
            sub.register_forward_hook(_held_lookup(held, mn, row))

    def hold(inputs):
        for j, mn, row, _ in pads:
            held[mn] = torch.from_numpy(np.array(np.asarray(inputs[j], dtype=np.float64)[row], copy=True))

    def surrogate_fn(*args):
        m = twins.get(args[0].dtype, twins[torch.float64]) if args else twins[torch.float64]
        return torch.func.functional_call(m, dict(zip(names, args[:k])), tuple(args[k:]))

    surrogate_fn._gs_hold = hold if pads else None  # (install: before each JVP, at fn's inputs)
    surrogate_fn._gs_auto = surrogate is None  # (recognised, not declared: the note says so)
    surrogate_fn.__qualname__ = (label_of(surrogate) if surrogate is not None
                                 else "(the module with its padding lookups held constant)")
    return surrogate_fn


def _held_lookup(held: dict, name: str, row: int):
    """A forward hook: where the lookup reads the padding row, its output is the row's held value (a constant)."""

    def hook(mod, args, out):
        value = held.get(name)
        if value is None or not args:
            return out
        return _held(args[0], row, value, out)

    return hook


def _held(idx, row: int, value, out):
    """An embedding lookup's output ``out`` with the padding row's entries (``idx == row``) replaced by ``value``."""
    import torch

    return torch.where((idx == row).unsqueeze(-1), value.to(out.dtype), out)


def _padding_of(args, kwargs):
    """(indices, weight, padding row) of an ``F.embedding`` call, the row made non-negative; None without one."""
    idx = args[0] if args else kwargs.get("input")
    weight = args[1] if len(args) > 1 else kwargs.get("weight")
    pad = args[2] if len(args) > 2 else kwargs.get("padding_idx")
    if pad is None or weight is None or idx is None:
        return None
    pad = int(pad)
    return idx, weight, pad + int(weight.shape[0]) if pad < 0 else pad


def _lookups(on_call):
    """A TorchFunctionMode that hands each ``F.embedding`` call with a padding row (``nn.Embedding``'s too) and its
    output to ``on_call(idx, weight, row, out)``, whose return value replaces the output."""
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    class Lookups(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if func is F.embedding and isinstance(out, torch.Tensor):
                got = _padding_of(args, kwargs)
                if got is not None:
                    return on_call(*got, out)
            return out

    return Lookups()


def padding_lookups(fn, layout: CallLayout, example_inputs, domain=None) -> list:
    """The padding row of each ``F.embedding(..., padding_idx=p)`` lookup fn makes on its example (a plain
    function's own, or an ``nn.Embedding``'s it calls), in call order; [] without an example, when fn raises, or
    when the example lies outside ``domain`` (fn is never called outside the domain the user declared for it)."""
    import torch

    if example_inputs is None:
        return []
    if domain is not None and not inside_domain(domain, [x for x in example_inputs
                                                   if isinstance(x, torch.Tensor) and x.is_floating_point()]):
        return []
    rows: list = []

    def seen(idx, weight, row, out):
        rows.append(row)
        return out

    xs = [x for x in example_inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
    try:
        with torch.no_grad(), _lookups(seen):
            layout.call(fn, xs, layout.params())
    except Exception:  # noqa: BLE001 - fn's own failure is the run's to report
        return []
    return rows


def inside_domain(domain, xs) -> bool:
    """Whether every value of the float inputs ``xs`` lies in ``domain`` (one Domain, or one per input)."""
    per = domain if isinstance(domain, (list, tuple)) else [domain] * len(xs)
    for d, x in zip(per, xs):
        if d is None or (d.lo == -math.inf and d.hi == math.inf and not d.points):
            continue
        if not all(d.contains(float(v)) for v in x.detach().reshape(-1).tolist()):
            return False
    return True


def function_surrogate(fn, rows: list):
    """The surrogate of a plain function whose ``F.embedding`` lookups have padding rows (:func:`padding_lookups`):
    fn itself with each lookup's output at the padding row held at its value at fn's inputs, as
    :func:`module_surrogate` holds a module's (torch gives that row no gradient from the lookup by design).  The
    values are recorded on the surrogate's first call after each hold (the jacobian oracle's JVP evaluates it at
    fn's inputs first) and held on the calls that follow (its finite-difference steps)."""
    held: list = []
    state = {"record": False, "k": 0}

    def on_call(idx, weight, row, out):
        k = state["k"]
        state["k"] += 1
        if state["record"]:
            held.append(weight.detach()[row].clone())
            return out
        return _held(idx, row, held[k], out) if k < len(held) else out

    def surrogate_fn(*args, **kw):
        state["k"] = 0
        try:
            with _lookups(on_call):
                return fn(*args, **kw)
        finally:
            state["record"] = False

    def hold(inputs):
        held.clear()
        state["record"] = True

    surrogate_fn._gs_hold = hold  # (install: before each JVP, at fn's inputs)
    surrogate_fn._gs_auto = True  # (recognised, not declared: the note says so)
    surrogate_fn._gs_rows = rows
    surrogate_fn.__qualname__ = "(fn with its embedding lookups of padding rows held constant)"
    return surrogate_fn
