"""How ``verify_torch_function`` calls a user's torch code: positional non-tensor arguments, tuple outputs.

* :class:`CallLayout`: which positional arguments of ``fn`` are the tensors being differentiated and
  which are fixed or drawn non-tensor values (``Fn.apply(x, 3, "mean")``: ``Function.apply``
  takes no keywords, so a non-tensor argument must go by position).  The non-tensor values travel
  as the node's params named ``arg<position>`` (JSON in a saved case); integer/bool tensors from
  ``example_inputs`` (indices, masks) travel the same way, as lists, and are rebuilt as tensors.
* :func:`outputs` / :func:`flat`: a tuple of outputs becomes one flat tensor (the float outputs,
  raveled and concatenated), so every oracle sees one output whose seed holds one seed per output;
  the VJP then calls ``torch.autograd.grad`` on all outputs at once, leaving out those whose seed
  block is zero (as when a user's loss does not use that output: the backward gets None/zeros).

Example::

    >>> import torch
    >>> from gradspec.verify.torch_call import CallLayout, outputs, flat
    >>> lay = CallLayout.from_example((torch.ones(2), 3, "mean"))
    >>> lay.tensor_pos, lay.params()
    ([0], {'arg1': 3, 'arg2': 'mean'})
    >>> lay.call(lambda x, k, how: x * k, [torch.ones(2)], {"arg1": 3, "arg2": "mean"})
    tensor([3., 3.])
    >>> outs, multi = outputs((torch.ones(2), torch.zeros(1, 2), torch.tensor([1])))
    >>> flat(outs, multi).shape, multi
    (torch.Size([4]), True)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._private.determinism import TorchSeeded
from .._private.torch_structs import output_refusal

__all__ = ["CallLayout", "outputs", "flat", "blocks", "ARG_PREFIX", "label_of", "schema_of", "jitter_float32", "unmarked_note",
           "InPlace"]

ARG_PREFIX = "arg"


def _is_tensor(v) -> bool:
    import torch

    return isinstance(v, torch.Tensor)


def _encode(v):
    """A non-tensor argument (or an int/bool tensor) as JSON-able data."""
    if _is_tensor(v):
        return {"__tensor__": v.detach().cpu().tolist(), "dtype": str(v.dtype).replace("torch.", "")}
    return v


_TENSOR_DTYPES = ("int64", "int32", "int16", "int8", "uint8", "bool")  # what _encode writes (int/bool tensors)


def _decode(v):
    if isinstance(v, dict) and "__tensor__" in v:
        import torch

        dt = v.get("dtype", "int64")
        if dt not in _TENSOR_DTYPES:  # a case file is data: a name, never an attribute looked up as given
            raise ValueError(f"a tensor argument's dtype must be one of {', '.join(_TENSOR_DTYPES)}, got {str(dt)[:40]!r}")
        return torch.tensor(v["__tensor__"], dtype=getattr(torch, dt))
    return v


# how held_words() says an int/bool tensor held in every case: the phrases HeldFixedWarning is raised for (a number
# or string held is listed but does not warn: a duplicate index, an empty mask, an ignored target need a tensor)
HELD_TENSOR = "at the example's values"


def _strategy_hint(v) -> str:
    """A Hypothesis strategy, as source, of values around ``v`` (what a user would pass in args=)."""
    if isinstance(v, bool) or v is None:
        return "st.booleans()" if isinstance(v, bool) else "st.none()"
    if isinstance(v, int):
        return f"st.integers({min(0, v)}, {max(2 * v, v + 3)})"
    if isinstance(v, float):
        lo, hi = (v / 4, v * 4) if v > 0 else (v * 4, v / 4) if v < 0 else (-1.0, 1.0)
        return f"st.floats({lo:g}, {hi:g})"
    return f"st.sampled_from([{v!r}, ...])"


@dataclasses.dataclass
class CallLayout:
    """``n_args`` positional arguments; ``tensor_pos`` the differentiated tensors' positions;
    ``fixed``: position -> value; ``drawn``: position -> Hypothesis strategy."""

    n_args: int
    tensor_pos: list
    fixed: dict = dataclasses.field(default_factory=dict)
    drawn: dict = dataclasses.field(default_factory=dict)
    # [True] once a call of fn drew from torch's generator (seeded per call: TorchSeeded); not part of the layout
    drew: list = dataclasses.field(default_factory=list, compare=False, repr=False)

    @classmethod
    def plain(cls, arity: int) -> "CallLayout":
        return cls(arity, list(range(arity)))

    @classmethod
    def from_example(cls, example) -> "CallLayout":
        """Float tensors are the inputs; everything else (numbers, strings, int/bool tensors) is
        passed again as given, at its position."""
        if _is_tensor(example):
            example = (example,)
        tensors, fixed = [], {}
        for i, v in enumerate(example):
            if _is_tensor(v) and v.is_floating_point():
                tensors.append(i)
            else:
                fixed[i] = _encode(v)
        return cls(len(example), tensors, fixed)

    @classmethod
    def from_args(cls, args: dict, arity: int | None) -> "CallLayout":
        """``args``: position -> value or Hypothesis strategy; ``arity``: the number of tensors
        (None: every position not in ``args`` up to the highest one given, at least one)."""
        from ..ops.user import _is_strategy

        if not isinstance(args, dict) or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 0
                                                 for k in args):
            raise TypeError("args= must be a dict {position: value or Hypothesis strategy} with int positions, "
                            f"e.g. args={{1: 3, 2: 'mean'}} for Fn.apply(x, 3, 'mean'); got {args!r}")
        top = max(args, default=-1)
        if arity is None:
            n = top + 1 + (1 if top + 1 - len(args) == 0 else 0)
        else:
            n = arity + len(args)
            if top >= n:
                raise ValueError(f"args= names position {top}, but arity={arity} + {len(args)} non-tensor "
                                 f"argument(s) make {n} positions (0..{n - 1})")
        fixed = {k: _encode(v) for k, v in args.items() if not _is_strategy(v)}
        drawn = {k: v for k, v in args.items() if _is_strategy(v)}
        return cls(n, [i for i in range(n) if i not in args], fixed, drawn)

    @property
    def arity(self) -> int:
        return len(self.tensor_pos)

    @property
    def positional(self) -> bool:
        return bool(self.fixed or self.drawn)

    def params(self) -> dict:
        """The fixed non-tensor arguments as node params (``arg<position>``)."""
        return {f"{ARG_PREFIX}{k}": v for k, v in sorted(self.fixed.items())}

    def strategies(self) -> dict:
        """Param name -> Hypothesis strategy for every non-tensor argument."""
        from hypothesis import strategies as st

        out = {f"{ARG_PREFIX}{k}": st.just(v) for k, v in sorted(self.fixed.items())}
        out.update({f"{ARG_PREFIX}{k}": s.map(_encode) for k, s in sorted(self.drawn.items())})
        return out

    def held_note(self) -> str:
        """The note for non-tensor arguments held at one value in every case ("" when none is): fn's
        gradients are then checked at that value only, and a bug that shows at other values passes."""
        held = [(k, v) for k, v in sorted(self.fixed.items()) if v is None or isinstance(v, (bool, int, float, str))]
        tensors = [(k, v) for k, v in sorted(self.fixed.items()) if isinstance(v, dict) and "__tensor__" in v]
        if not held and not tensors:
            return ""
        what = ", ".join(f"position {k} = {v!r}" for k, v in held)
        hint = ", ".join(f"{k}: {_strategy_hint(v)}" for k, v in held)
        # an int/bool tensor (a target, an index, a mask) is held too (README: "a note names each"); before only
        # the numbers were named, and a user could not tell that every case used the example's targets
        tens = ", ".join(f"position {k} = the example's {v.get('dtype', 'int64')} tensor of shape "
                         f"{tuple(np.shape(v['__tensor__']))}" for k, v in tensors)
        text = ("non-tensor argument(s) held at one value in every case: "
                f"{'; '.join(x for x in (what, tens) if x)}; fn's gradients were checked there only (a bug that shows "
                "only at other values passes)")
        if held:
            text += (f": to vary the numbers pass args={{{hint}}} (from hypothesis import strategies as st) beside "
                     "example_inputs")
        if tensors:
            text += ("; a tensor argument is only ever the example's: draw its values with args={"
                     + ", ".join(f"{k}: gs.strategies.indices(<the example's tensor>)" for k, _ in tensors)
                     + "} (duplicates, constant tensors, all-False masks likely), or pass at= points with other "
                     "values (a duplicate index, an empty mask, an ignored target: at=[(x, idx2, ...)])")
        return text

    def tensor_shapes(self) -> list:
        """The shapes of the int/bool tensor arguments: the example's held ones and those gs.strategies.indices
        draws (always of its example's shape)."""
        from ..strategies._indices import SHAPE

        return ([tuple(np.shape(v["__tensor__"])) for v in self.fixed.values() if isinstance(v, dict) and "__tensor__" in v]
                + [tuple(getattr(s, SHAPE)) for s in self.drawn.values() if hasattr(s, SHAPE)])

    def examples(self) -> dict:
        """Param name -> the example's value, encoded, for each drawn argument that has one (gs.strategies.indices):
        what fn's shapes are probed at (a random draw could be the all-False mask fn's forward gives NaN at)."""
        from ..strategies._indices import EXAMPLE

        return {f"{ARG_PREFIX}{k}": _encode(getattr(s, EXAMPLE)) for k, s in sorted(self.drawn.items())
                if hasattr(s, EXAMPLE)}

    def drawn_note(self) -> str:
        """What the int/bool tensors drawn by ``gs.strategies.indices`` were drawn from ("" when none is)."""
        from ..strategies._indices import DESCRIPTION

        said = [(k, getattr(s, DESCRIPTION)) for k, s in sorted(self.drawn.items()) if hasattr(s, DESCRIPTION)]
        if not said:
            return ""
        return ("int/bool tensor argument(s) drawn in every case (gs.strategies.indices), not held: "
                + "; ".join(f"position {k}: {what}" for k, what in said)
                + " (few distinct values a draw: duplicates and constant tensors likely; a finding shrinks towards "
                "the example's values)")

    def held_words(self) -> list:
        """One phrase per argument every case holds at the example's value (an int/bool tensor, a number), each
        with what varies it (review15 #6: a number's advice is args=, a tensor's is indices or at=)."""
        out = []
        for k, v in sorted(self.fixed.items()):
            if isinstance(v, dict) and "__tensor__" in v:
                n = int(np.prod(np.shape(v["__tensor__"]), dtype=np.int64))
                out.append(f"position {k} ({v.get('dtype', 'int64')} tensor, {n} element{'s' if n != 1 else ''}) "
                           f"{HELD_TENSOR} (draw it with args={{{k}: gs.strategies.indices(<the example's tensor>)}} "
                           "or pass at= points)")
            elif v is None or isinstance(v, (bool, int, float, str)):
                out.append(f"position {k} = {v!r:.40} (vary it with args={{{k}: {_strategy_hint(v)}}})")
        return out

    def names(self) -> set:
        return {f"{ARG_PREFIX}{k}" for k in list(self.fixed) + list(self.drawn)}

    def split(self, params: dict) -> tuple[dict, dict]:
        """(positional non-tensor args by position, the remaining keyword params)."""
        pos, kw = {}, {}
        mine = self.names()
        for k, v in params.items():
            if k in mine:
                pos[int(k[len(ARG_PREFIX):])] = _decode(v)
            else:
                kw[k] = v
        return pos, kw

    def arguments(self, tensors, params: dict) -> tuple[list, dict]:
        pos, kw = self.split(params)
        args: list[Any] = [None] * self.n_args
        for p, t in zip(self.tensor_pos, tensors, strict=True):
            args[p] = t
        for p, v in pos.items():
            args[p] = v
        return args, kw

    def call(self, fn, tensors, params: dict):
        args, kw = self.arguments(tensors, params)
        # torch's generator at one fixed state for every call: random code (dropout) is a function of its
        # inputs (_private.determinism); whether fn drew from it goes into self.drew (the run's note)
        with TorchSeeded(self.drew):
            return fn(*args, **kw)

    def shape_args(self, shapes, params: dict) -> tuple[list, dict]:
        """A user's ``shape_fn`` sees fn's layout: shapes at the tensor positions, the other values
        at theirs; keyword params as keywords."""
        return self.arguments(list(shapes), params)


class InPlace:
    """Whether fn modifies its float inputs in place with ``ctx.mark_dirty(x)``, found once by calling it on
    non-leaf copies; from then on it is given copies of the inputs that require grad.

    torch refuses an in-place change of a leaf that requires grad (in forward already, when the Function's outputs
    are wrapped), so a caller always passes such a Function an activation, never a parameter: fed gradspec's leaves
    it raised on every call and the (right) backward was blamed (tryout5 #1).  A copy also keeps every other use
    of the tensor in gradspec's graphs (``f(a) * a``) reading the value it had, as the reference engine does.
    Other code keeps its inputs as given (their memory layout is what torch_layouts varies).

    >>> import torch
    >>> class Double_(torch.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.mark_dirty(x)
    ...         return x.mul_(2)
    ...     @staticmethod
    ...     def backward(ctx, g):
    ...         return 2 * g
    >>> ip = InPlace()
    >>> x = torch.ones(2, requires_grad=True)
    >>> ip.inputs(lambda t: Double_.apply(t[0]), [x])[0] is x, ip.seen
    (False, True)
    """

    _TRIES = 3  # probes that raised (fn rejects these inputs) before it is taken as not in place

    def __init__(self) -> None:
        self.seen: bool | None = None
        self.unmarked: list = []  # the inputs (positions in the call's tensors) forward wrote into WITHOUT mark_dirty
        self._tries = 0

    def inputs(self, call, xs: list) -> list:
        """``xs`` as fn may receive them; ``call(list)`` runs fn on a list of its tensors (the probe).

        Once fn is seen writing into its inputs, EVERY tensor is copied, also one that does not require grad (a
        buffer ``buf.add_(x)`` writes into): a graph that reads that tensor again after the call must read the value
        it had, as the reference engine (a program of values) does; else the torch witness computed another program
        and the difference was blamed on fn (tryout10 F4)."""
        if self.seen is None and any(_is_tensor(x) and x.requires_grad for x in xs):
            self._probe(call, xs)
        if not self.seen:
            return xs
        return [x.clone() if _is_tensor(x) else x for x in xs]

    def _probe(self, call, xs: list) -> None:
        import torch

        # (a tensor that does not require grad is copied too: fn may write into it, and it is the caller's)
        copies = [(x.detach().clone().requires_grad_(True).clone() if x.requires_grad else x.detach().clone())
                  if _is_tensor(x) else x for x in xs]
        before = [x.grad_fn if _is_tensor(x) else None for x in copies]
        try:
            with torch.enable_grad():
                call(copies)
        except Exception:  # noqa: BLE001 - fn rejects them: the real call says so; probe again next time
            self._tries += 1
            self.seen = False if self._tries >= self._TRIES else None
            return
        # ctx.mark_dirty rebases the modified input's history onto fn's node; an in-place change without it leaves
        # the copy's grad_fn alone, and the leaves stay (that mistake is a finding: forward-mutates-input)
        self.seen = any(_is_tensor(x) and x.grad_fn is not f for x, f in zip(copies, before, strict=True))
        if not self.seen:  # (written into all the same: what gradspec's witnesses no longer see, each its own copy)
            self.unmarked = [i for i, (c, x) in enumerate(zip(copies, xs, strict=True)) if _is_tensor(c)
                             and c.requires_grad and not _same(c.detach(), x.detach())]


def _same(a, b) -> bool:
    """Same values, NaN where NaN was (torch.equal says NaN != NaN)."""
    import torch

    return a.shape == b.shape and bool(torch.all((a == b) | (torch.isnan(a) & torch.isnan(b))))


def unmarked_note(label: str, positions: list) -> str:
    """What a result says of a fn whose forward writes into its inputs without ``ctx.mark_dirty``
    (:attr:`InPlace.unmarked`) where no finding named it."""
    which = ", ".join(f"tensor input {i}" for i in positions)
    return (f"{label}'s forward modifies its {which} in place without ctx.mark_dirty: autograd does not know, so a "
            "caller's graph that uses that tensor again (or a view of it) is refused or differentiated at the new "
            "values; each of gradspec's witnesses ran on its own copy of the inputs (none saw another's write), and "
            "no checked graph showed a wrong gradient from it. Call ctx.mark_dirty(...) on every input forward "
            "modifies, or compute out of place (x * 2, not x.mul_(2))")


def outputs(y) -> tuple[list, bool]:
    """fn's result as (float output tensors, whether it was a tuple)."""
    if _is_tensor(y):
        return [y], False
    if isinstance(y, (tuple, list)):
        outs = [o for o in y if _is_tensor(o) and (o.is_floating_point() or o.is_complex())]
        if not outs:
            raise TypeError(f"fn returned a {type(y).__name__} without a floating-point tensor")
        return outs, True
    raise TypeError(output_refusal(y))


def flat(outs: list, multi: bool):
    """One tensor: the output itself, or the outputs raveled and concatenated."""
    import torch

    if not multi:
        return outs[0]
    return torch.cat([o.reshape(-1) for o in outs])


def blocks(outs: list) -> list[tuple]:
    """The (start, stop, shape) of each output inside the flat tensor."""
    out, at = [], 0
    for o in outs:
        n = int(o.numel())
        out.append((at, at + n, tuple(o.shape)))
        at += n
    return out


def _op_schema(fn):
    """The schema of a torch.library custom op / OpOverload(Packet), or None."""
    for obj in (getattr(fn, "_opoverload", None), fn, getattr(fn, "default", None)):
        schema = getattr(obj, "_schema", None)
        if schema is not None and hasattr(schema, "arguments"):
            return schema
    return None


def label_of(fn) -> str:
    """How a user names fn: ``Fn.apply``, ``ns::op`` for a custom op, ``Net`` for a module, else its qualname."""
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, type):
        return f"{owner.__name__}.apply"
    qual = getattr(fn, "_qualname", None)
    if isinstance(qual, str):
        return qual
    schema = _op_schema(fn)
    if schema is not None:
        return str(schema.name)
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def schema_of(fn) -> tuple[list, list] | None:
    """For a custom op: (positions of its Tensor arguments, [(position, name, type) of required
    non-tensor ones]) from its schema; None for other callables."""
    schema = _op_schema(fn)
    if schema is None:
        return None
    tensors, others = [], []
    for i, a in enumerate(schema.arguments):
        if str(a.type) == "Tensor":
            tensors.append(i)
        elif not a.has_default_value() and not getattr(a, "kwarg_only", False):
            others.append((i, a.name, str(a.type)))
    return tensors, others


def jitter_float32(rng, ulps: float, *, float64: bool = False):
    """A torch dispatch mode that perturbs the result of every functional float32 op by ``ulps`` ulps (at
    least one, random sign): ``gradspec.check.rounding_noise``'s jitter, applied inside a torch Function's
    own float32 forward and backward, whose saved values and intermediate terms gradspec cannot reach
    otherwise (``1 - y*y`` of a saved tanh output).  In-place and view ops are left alone (their result
    aliases a tensor the code still holds).  ``float64``: float64 results too, by ulps of float64
    (torch_layouts measures the rounding noise of fn's float64 code with it)."""
    import numpy as np
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map

    eps = {torch.float32: float(np.finfo(np.float32).eps)}
    if float64:
        eps[torch.float64] = float(np.finfo(np.float64).eps)

    def jitter(t):
        if not isinstance(t, torch.Tensor) or t.dtype not in eps or not t.numel():
            return t
        shape = tuple(t.shape)
        u = rng.uniform(min(1.0, 1 / ulps), 1, shape) * rng.choice((-1.0, 1.0), shape)
        return t * torch.from_numpy(np.asarray(1 + ulps * eps[t.dtype] * u, dtype=np.float64)).to(t.dtype)

    class _Jitter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            schema = getattr(func, "_schema", None)
            if schema is None or schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
                return out
            return tree_map(jitter, out)

    return _Jitter()
