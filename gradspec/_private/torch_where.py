"""The "where trap": a select whose unselected branch is NaN or inf, which poisons the gradient (tryout9 F3).

``torch.where(x > 0, x * log(x), 0)`` is finite everywhere, but at x < 0 its gradient is NaN: ``where`` sends a
zero gradient to the branch it does not select, and that branch's backward multiplies the zero by its own
non-finite values there (``mul``'s gradient for x is g * log(x) = 0 * nan = nan). ``masked_fill`` is the same
select, and so is ``nan_to_num``: it keeps its input where finite and a constant elsewhere, so masking the NaN in
the value (``torch.nan_to_num(x * log(x))``) leaves it in the gradient all the same. Torch's autograd applies that
exactly as written; the fix is in the code: compute the branch on a safe input (the "double-where").
:func:`recording` runs one call under a pass-through ``TorchFunctionMode`` that notes every such select met on
tensors that require grad (nothing the call computes changes), with the place in the user's code that made it.
Selects inside a custom ``autograd.Function``'s forward run under no_grad and are not noted: that Function's own
backward is what is checked there; a select inside that backward is noted where its double backward is NaN
(``verify.torch_double``, which calls the backward itself: torch's autograd engine runs backwards without the
caller's TorchFunctionMode).

Example::

    >>> import torch
    >>> from gradspec._private.torch_where import recording
    >>> x = torch.tensor([-1.0, 2.0], requires_grad=True)
    >>> with recording() as traps:
    ...     y = torch.where(x > 0, x * torch.log(x), 0.0)
    >>> traps[0].what, traps[0].branch, traps[0].count
    ('torch.where', 'its second argument (the value where the condition holds)', 1)
"""

from __future__ import annotations

import contextlib
import dataclasses

from .torch_cuts import _user_frame

__all__ = ["recording", "backward_traps", "Trap", "FIX"]

_MOST = 3  # traps kept per call (the first names the place; more add nothing)

# The fix every trap takes (CONTRACT §8 ``Cause.fix``).
FIX = ("make the branch the select does not take finite there: compute it on a safe input (the double-where: "
       "safe = torch.where(cond, x, 1.0); torch.where(cond, f(safe), 0.0)), or clamp its input into the branch's "
       "domain, so its backward never multiplies the zero gradient by nan or inf")


@dataclasses.dataclass
class Trap:
    """One select met on a tensor that requires grad, whose unselected branch is non-finite somewhere."""

    what: str  # "torch.where" / "masked_fill"
    branch: str  # which argument, in words
    count: int  # unselected elements that are non-finite
    values: str  # their kinds ("nan", "inf", "-inf")
    where: str  # "file:line (in func)", or "" where unknown

    def words(self) -> str:
        at = f" at {self.where}" if self.where else ""
        return (f"{self.what}{at} does not select {self.branch} at {self.count} element{'s' if self.count > 1 else ''}, "
                f"where that branch is {self.values}")


def _bad_unselected(branch, selected) -> tuple[int, str] | None:
    """(how many elements of ``branch`` the select does not take are non-finite, their kinds), or None for none.
    ``selected``: a bool tensor, True where the select takes ``branch``; both broadcast to the result's shape."""
    import torch

    try:
        b, s = torch.broadcast_tensors(branch.detach(), selected.detach().to(torch.bool))
    except (RuntimeError, TypeError):
        return None
    if not torch.is_floating_point(b):
        return None
    bad = ~torch.isfinite(b) & ~s
    n = int(bad.sum())
    if not n:
        return None
    vals = b[bad]
    kinds = [k for k, m in (("nan", torch.isnan(vals)), ("inf", vals == float("inf")), ("-inf", vals == float("-inf")))
             if bool(m.any())]
    return n, " / ".join(kinds)


def _selects(name: str, method: bool, args, kwargs) -> list:
    """[(branch tensor, bool tensor where it is selected, words naming it)] for a where / masked_fill call
    (``method``: called as a Tensor method, the tensor first)."""
    import torch

    if name.startswith("nan_to_num"):  # a select too: it keeps its input where finite, a constant elsewhere
        x = args[0] if args else kwargs.get("input")
        return [(x, torch.isfinite(x), "its input (kept only where finite)")] if isinstance(x, torch.Tensor) else []
    if name == "where" and method and args:
        # Tensor.where(self, condition, other): the tensor itself is the branch taken where condition holds
        cond, a, b = (list(args[1:2]) or [kwargs.get("condition")])[0], args[0], (
            list(args[2:3]) or [kwargs.get("other")])[0]
    elif name == "where":
        rest = list(args[1:]) + [kwargs.get("input"), kwargs.get("other")][len(args) - 1:]
        if len(args) < 1 or len(rest) < 2:
            return []  # torch.where(condition) alone: indices, no select
        cond, a, b = args[0], rest[0], rest[1]
    else:  # masked_fill(self, mask, value): self is replaced where mask holds
        mask = (list(args[1:2]) or [kwargs.get("mask")])[0]
        return [(args[0], ~mask.to(torch.bool), "the tensor it fills (the value kept where the mask is False)")] \
            if isinstance(mask, torch.Tensor) else []
    if not isinstance(cond, torch.Tensor):
        return []
    c = cond.to(torch.bool)
    return [(a, c, "its second argument (the value where the condition holds)"),
            (b, ~c, "its third argument (the value where the condition is False)")]


@contextlib.contextmanager
def recording():
    """A list, filled while the block runs, of :class:`Trap` s: each where / masked_fill on a branch that requires
    grad and is NaN or inf at elements it does not select (at most a few)."""
    import torch
    from torch.overrides import TorchFunctionMode

    found: list = []
    names = {"where": "torch.where", "masked_fill": "masked_fill", "masked_fill_": "masked_fill_",
             "nan_to_num": "nan_to_num", "nan_to_num_": "nan_to_num_"}

    class _Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if name in names and len(found) < _MOST and torch.is_grad_enabled():
                try:
                    for branch, selected, words in _selects(name, func is not torch.where, args, kwargs):
                        if not (isinstance(branch, torch.Tensor) and branch.requires_grad):
                            continue
                        bad = _bad_unselected(branch, selected)
                        if bad is not None:
                            found.append(Trap(names[name], words, bad[0], bad[1], _user_frame() or ""))
                except Exception:  # noqa: BLE001 - a note only: the call itself must run as written
                    pass
            return func(*args, **kwargs)

    with _Mode():
        yield found


def backward_traps(call, xs, params, seed) -> list:
    """The :class:`Trap` s met while the backward of the Function whose output ``call(*xs, **params)`` is runs with
    grad enabled (its inputs and the upstream gradient ``seed(shape, 0.0)`` requiring grad, as under
    ``create_graph=True``): a where / masked_fill / nan_to_num in the backward itself.  [] where none, where the
    output is not made by a Function's backward directly, or where the probe fails.  The backward is called on its
    node itself (``ctx`` = the node, as ``BackwardCFunction.apply`` does; not through ``apply``, whose frame tells
    the place finder a Function's forward is running): torch's autograd engine runs backwards without the caller's
    TorchFunctionMode, so a backward run by ``autograd.grad`` is never seen."""
    import numpy as np
    import torch

    try:
        ys = [x.detach().to(torch.float64).requires_grad_(True) for x in xs]
        with torch.enable_grad():
            out = call(*ys, **params)
            node = out.grad_fn
            if not isinstance(node, torch.autograd.function.BackwardCFunction):
                return []
            g = torch.from_numpy(np.asarray(seed(tuple(out.shape), 0.0), dtype=np.float64)).requires_grad_(True)
            with recording() as traps:
                node._forward_cls.backward(node, g)
        return list(traps)
    except Exception:  # noqa: BLE001 - a probe for words only: what it was asked for stands without them
        return []
