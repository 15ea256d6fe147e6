"""The declaration format of one op (the `OpSpec`), shared by table ops and user ops.

One declaration drives everything: the engine calls ``forward`` and ``vjp``, the jacobian
oracle calls ``jvp``, the finite-difference oracle calls ``forward`` on a leading batch axis,
the torch oracles call ``torch``, and the strategies use ``shape_fn``/``signature``,
``param_strategy`` and ``domain``.

Conventions every table op follows (they are what make the batched oracles possible):

* ``forward(*arrays, **params)`` is numpy and must accept arrays with *extra leading batch
  axes* when ``params`` went through ``normalize`` (all ``dim`` params negative) and
  ``batch_params``.  Inputs of a broadcasting op are aligned to equal rank first
  (``align_ranks``) so a batch axis never broadcasts against a data axis.
* ``vjp(g, *inputs, out=..., **params)`` receives engine ``Tensor``s and returns one gradient
  per input (or ``None``), written with engine ops so that the backward pass is itself a
  graph (``create_graph=True``).  A gradient may have the *broadcast* shape: the engine loop,
  not the rule, sums it down to the input's shape and casts it to the input's dtype.
* ``jvp(tangents, *inputs, out=..., **params)`` is numpy, independent of ``vjp``; ``tangents``
  has one entry per input (``None`` for constants) with one extra leading axis (the
  direction axis).  It is what the jacobian oracle composes.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Sequence

import numpy as np

from .. import domains as _domains

__all__ = ["OpSpec", "Unsupported", "align_ranks", "set_applier"]

# How ``spec(*tensors)`` runs an op: the engine installs its ``apply`` here when it is imported
# (the spec layer sits below the engine and cannot import it).
_APPLY: list = []


def set_applier(fn) -> None:
    """Install ``fn(spec, inputs, params)`` as what calling an OpSpec on tensors does (the engine's ``apply``)."""
    _APPLY[:] = [fn]


class Unsupported(ValueError):
    """The shapes or params given to an op are not valid for it (raised by ``shape_fn`` users)."""


def _default_saves(params: dict) -> bool:
    return True


@dataclasses.dataclass(eq=False)
class OpSpec:
    """Everything gradspec knows about one op.

    Example::

        >>> import gradspec as gs
        >>> spec = gs.ops.get("mul")
        >>> spec.name, spec.arity, spec.torch_name
        ('mul', 2, 'torch.mul')
    """

    name: str
    forward: Callable[..., np.ndarray]
    vjp: Callable[..., Sequence[Any]]
    arity: int | None  # None: variadic (a list of tensors, e.g. cat/stack)
    family: str = "user"
    torch: Callable[..., Any] | None = None
    torch_name: str | None = None
    jvp: Callable[..., np.ndarray] | None = None
    signature: str | None = None
    shape_fn: Callable[..., tuple | None] | None = None
    param_strategy: Callable[[tuple], Any] | None = None  # shapes -> SearchStrategy[dict]
    domain: Any = None  # Domain or list of Domain (one per input)
    saves: Callable[[dict], bool] | bool = True
    normalize: Callable[..., dict] | None = None  # (shapes, **params) -> canonical params
    batch_params: Callable[[dict, tuple], dict] | None = None  # (params, batch_shape) -> params
    differentiable: tuple[bool, ...] | None = None  # per input; False for index-like inputs
    call: Callable[..., tuple] | None = None  # public signature -> (inputs, params)
    method: bool = False  # also a Tensor method
    linear: bool = False  # forward is linear in all inputs jointly: jvp(t) = forward(t)
    broadcasting: bool = False  # inputs broadcast against each other (aligned before batching)
    # torch refuses tensor inputs of different dtypes here (mm, matmul, linear, conv1d, einsum: no type
    # promotion, unlike numpy): the engine refuses them too, so such a program is not blamed on torch
    same_dtype: bool = False
    notes: str = ""  # tie/kink conventions, in words (shown by `gradspec ops`)
    user: bool = False
    import_path: str | None = None  # "module:attr" for user ops that can be re-imported
    once_differentiable: bool = False  # VJP is numpy (user ops): create_graph gives a constant
    jvp_source: str = "declared"
    kink_distance: Callable[..., float] | None = None  # (*arrays, **params) -> distance to nearest kink/tie
    # The VJP compares values, so ties decide the gradient: its output with its inputs (amax's x == out mask)
    # or its inputs with each other (maximum's a == b, max(x, dim)'s argmax); a bool, or params -> bool
    # (norm: only p = +-inf).  The rounding-noise re-run keeps such an op's output exact (``compares_values``).
    vjp_compares: Callable[[dict], bool] | bool = False
    post: Callable[..., Any] | None = None  # (out, inputs, params) -> public return value
    dispatch: Callable[..., Any] | None = None  # public args -> (spec name, inputs, params) override

    def __post_init__(self) -> None:
        if self.jvp is None and self.linear:
            self.jvp = _linear_jvp(self)
        if self.domain is None:
            self.domain = _domains.real()

    # -- helpers used by the engine and the oracles ---------------------------------------
    def domains_for(self, n: int) -> list:
        if isinstance(self.domain, (list, tuple)):
            return list(self.domain)
        return [self.domain] * n

    def singular_distance(self, arrays: Sequence[np.ndarray], params: dict) -> float:
        """How far these input values are from a point where the op is not differentiable.

        Uses the op's own ``kink_distance`` (ties between inputs, clamp bounds...) and the
        per-input domains' singular points; in the inputs' units, ``inf`` if there are none.
        """
        d = np.inf
        for dom, a in zip(self.domains_for(len(arrays)), arrays):
            a = np.asarray(a)
            if a.size == 0 or not np.issubdtype(a.dtype, np.floating):
                continue
            for p in dom.points:
                d = min(d, float(np.min(np.abs(a - p))))
            if np.isfinite(dom.lo):
                d = min(d, float(np.min(a - dom.lo)))
            if np.isfinite(dom.hi):
                d = min(d, float(np.min(dom.hi - a)))
        if self.kink_distance is not None:
            with np.errstate(all="ignore"):
                d = min(d, float(self.kink_distance(*arrays, **params)))
        return d

    def compares_values(self, params: dict) -> bool:
        """Whether this op's VJP, with these params, compares values (``vjp_compares``): moving its output by an
        ulp, or its inputs apart, can move its whole gradient to another element.  A user op's VJP cannot be
        read: one that declares a ``kink_distance`` is assumed to compare.

        Example::

            >>> import gradspec as gs
            >>> [gs.ops.get(n).compares_values({}) for n in ("amax", "maximum", "clamp", "sin")]
            [True, True, False, False]
            >>> gs.ops.get("norm").compares_values({"p": float("inf")}), gs.ops.get("norm").compares_values({"p": 2.0})
            (True, False)
        """
        if self.user:
            return self.kink_distance is not None
        return bool(self.vjp_compares(params) if callable(self.vjp_compares) else self.vjp_compares)

    def saves_tensors(self, params: dict) -> bool:
        return self.saves(params) if callable(self.saves) else bool(self.saves)

    def canonical(self, shapes: Sequence[tuple], params: dict) -> dict:
        if self.normalize is None:
            return dict(params)
        return self.normalize(tuple(tuple(s) for s in shapes), **params)

    def input_differentiable(self, i: int) -> bool:
        return True if self.differentiable is None else self.differentiable[i]

    def out_shape(self, shapes: Sequence[tuple], params: dict) -> tuple | None:
        """Output shape for input ``shapes`` and canonical ``params``; None if invalid."""
        shapes = [tuple(s) for s in shapes]
        if self.shape_fn is not None:
            try:
                return self.shape_fn(*shapes, **params)
            except (ValueError, IndexError, TypeError, Unsupported):
                return None
        if self.signature is not None:
            from .._private.signature import signature_out_shape

            return signature_out_shape(self.signature, shapes)
        try:
            with np.errstate(all="ignore"):
                return np.shape(self.forward(*[np.ones(s) for s in shapes], **params))
        except Exception:
            return None

    def forward_batched(self, arrays: Sequence[np.ndarray], params: dict, nbatch: int) -> np.ndarray:
        """Forward over arrays that all carry ``nbatch`` leading batch axes (same sizes)."""
        if self.user and not self.broadcasting:
            # A user's forward need not accept extra leading axes: evaluate point by point.
            bshape = np.shape(arrays[0])[:nbatch]
            outs = [self.forward(*[a[idx] for a in arrays], **params) for idx in np.ndindex(*bshape)]
            return np.stack(outs).reshape(bshape + np.shape(outs[0])) if outs else np.zeros(bshape)
        if self.broadcasting:
            arrays = align_ranks(arrays, nbatch)
        if self.batch_params is not None:
            params = self.batch_params(params, arrays[0].shape[:nbatch] if arrays else ())
        return self.forward(*arrays, **params)

    def __call__(self, *inputs, **params):
        """Apply the op to engine tensors (``double(x)`` for a user op ``double``)."""
        if not _APPLY:  # pragma: no cover - gradspec/__init__ imports the engine first
            raise RuntimeError("import gradspec before calling an op")
        return _APPLY[0](self, inputs, params)

    def __repr__(self) -> str:
        return f"OpSpec({self.name!r}, arity={self.arity}, family={self.family!r})"

    @property
    def public_signature(self) -> str:
        if self.call is None:
            return f"{self.name}(" + ", ".join(f"x{i}" for i in range(self.arity or 1)) + ")"
        return self.name + str(inspect.signature(self.call))


def align_ranks(arrays: Sequence[np.ndarray], nbatch: int) -> list[np.ndarray]:
    """Insert size-1 axes right after the batch axes so every array has the same rank.

    Needed because numpy aligns shapes from the right: a batched ``(B, 3)`` against a
    batched ``(B, 2, 3)`` must become ``(B, 1, 3)``, not broadcast ``B`` against ``2``.
    """
    arrays = [np.asarray(a) for a in arrays]
    rank = max(a.ndim for a in arrays)
    out = []
    for a in arrays:
        missing = rank - a.ndim
        if missing:
            a = a.reshape(a.shape[:nbatch] + (1,) * missing + a.shape[nbatch:])
        out.append(a)
    return out


def _linear_jvp(spec: OpSpec):
    def jvp(tangents, *inputs, out, **params):
        # A jointly linear op maps tangents exactly as it maps values; a constant input
        # (tangent None) contributes nothing, i.e. a zero tangent of its shape.
        n = next(t.shape[0] for t in tangents if t is not None)
        ts = [
            t if t is not None else np.zeros((n,) + np.shape(x), dtype=np.result_type(x, float))
            for t, x in zip(tangents, inputs)
        ]
        # (every tangent has n rows but where one was given with 1: np.broadcast_to of an array to its own shape
        # is the same numbers, ~1.5 us a call, paid by every neg, sum, permute... of the jacobian oracle)
        ts = [t if t.shape[0] == n else np.broadcast_to(t, (n,) + t.shape[1:]) for t in ts]
        return spec.forward_batched(ts, params, 1)

    return jvp
