"""User ops: ``gs.Op(name, forward=..., vjp=..., ...)`` goes through the same table and machinery.

A user op is an :class:`OpSpec` with numpy ``forward``/``vjp`` (and optionally ``jvp`` and a
``torch`` twin).  What gradspec holds a user's rules to:

* the VJP receives READ-ONLY numpy arrays (the upstream gradient, the inputs, the output): a
  VJP that writes into one of them raises :class:`VJPWriteError` instead of silently corrupting
  the gradient that other branches of the graph share;
* what it returns is validated: one gradient (or ``None``) per input (:class:`VJPCountError`),
  each of EXACTLY its input's shape (:class:`VJPShapeError`: the engine does not sum a user's
  broadcast-shaped gradient down for it, because "forgot to reduce over the broadcast axes" is
  the bug we are looking for), of a real floating dtype (:class:`VJPDtypeError`); an exception
  inside the VJP becomes :class:`VJPRaisedError`.  All are :class:`UserVJPError` (a
  ``RuntimeError``) with ``.kind``, ``.op`` and ``.input`` (the offending input's index);
* without a ``jvp`` the op still has a forward-mode rule for the jacobian oracle: a
  finite-difference JVP of ``forward`` (4-point central differences with Richardson
  extrapolation, see :func:`fd_jvp`), marked ``spec.jvp_source = "finite differences of
  forward"``.  It is accurate to ~1e-12 relative on smooth functions, NOT exact: compare it
  with a finite-difference tolerance (``gradspec.verify`` does, with an error estimate from
  two step sizes).

A user's ``jvp(tangents, *inputs, out, **params)`` is written per direction: ``tangents`` has
one array per input, of that input's shape; it returns the output's tangent (out's shape).

Example::

    >>> import numpy as np, gradspec as gs
    >>> double = gs.Op("double", forward=lambda x: 2 * x, vjp=lambda g, x, out: (2 * g,), torch=lambda x: 2 * x)
    >>> x = gs.tensor([1.0, 2.0], requires_grad=True)
    >>> double(x).sum().backward()
    >>> x.grad.numpy()
    array([2., 2.])
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from typing import Sequence

import numpy as np

from .. import domains as _domains
from .._private import numpy_jitter as _nj
from .._private import opaque_noise as _opaque_noise
from .._private.dims import summed_to as _summed_to
from .._private.signature import SignatureError, elementwise, parse, signature_out_shape
from ..spec.opspec import OpSpec, align_ranks
from ..spec.registry import register
from ._user_fd import (  # noqa: F401 - re-exported: the FD-JVP of a user op without a jvp, and its state
    _FLOAT32_SEEN,
    _FLOAT32_WHY,
    _NOISE,
    _STEP_SCALE,
    FD_STEP,
    FD_STEP32,
    NOISE_ULPS,
    FDStepError,
    _active_directions,
    fd_jvp,
    fd_rounding_noise,
    fd_step_scale,
)

__all__ = [
    "Op",
    "UserOpError",
    "UserOpSpec",
    "UserVJPError",
    "VJPRaisedError",
    "VJPCountError",
    "VJPShapeError",
    "VJPDtypeError",
    "VJPWriteError",
    "fd_jvp",
    "fd_step_scale",
    "fd_rounding_noise",
    "import_path_of",
    "FD_JVP_SOURCE",
    "sum_to",
]

FD_JVP_SOURCE = "finite differences of forward"


class UserOpError(ValueError):
    """A user op declaration that cannot work; the message names the op, the field and the fix."""


class UserVJPError(RuntimeError):
    """A user op's VJP broke its contract; ``kind`` says how, ``input`` which input (or None)."""

    kind = "vjp-raised"

    def __init__(self, message: str, op: str | None = None, input: int | None = None):
        super().__init__(message)
        self.op = op
        self.input = input


class VJPRaisedError(UserVJPError):
    kind = "vjp-raised"


class VJPCountError(UserVJPError):
    kind = "vjp-count"


class VJPShapeError(UserVJPError):
    kind = "vjp-shape"


class VJPDtypeError(UserVJPError):
    kind = "vjp-dtype"


class VJPWriteError(UserVJPError):
    kind = "vjp-writes-input"


#: exception class name -> discrepancy kind (check() records only the class name of an error)
ERROR_KINDS = {c.__name__: c.kind for c in (UserVJPError, VJPRaisedError, VJPCountError, VJPShapeError,
                                             VJPDtypeError, VJPWriteError)}


def sum_to(grad, shape) -> np.ndarray:
    """Sum a gradient of a broadcast shape down to ``shape`` (what a VJP owes a broadcast input).

    Example::

        >>> from gradspec.ops.user import sum_to
        >>> sum_to(np.ones((2, 3)), (3,))
        array([2., 2., 2.])
    """
    grad = np.asarray(grad)
    shape = tuple(shape)
    out = _summed_to(grad, shape)
    if out is None:
        raise ValueError(f"sum_to: cannot sum shape {grad.shape} down to the larger rank of {shape}")
    return out.reshape(shape)


# ---------------------------------------------------------------------------------------------
# declaration checks
# ---------------------------------------------------------------------------------------------


def _sig(fn):
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _infer_arity(name, forward, params) -> int:
    if isinstance(forward, np.ufunc):
        return forward.nin
    sig = _sig(forward)
    if sig is None:
        raise UserOpError(f"Op {name!r}: cannot inspect forward's signature; pass arity=N explicitly")
    if any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()):
        raise UserOpError(f"Op {name!r}: forward takes *args; pass arity=N explicitly")
    pos = [
        p
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in params and p.default is p.empty
    ]
    if not pos:
        raise UserOpError(f"Op {name!r}: forward takes no tensor inputs (its positional parameters are all params)")
    return len(pos)


def _check_binds(name: str, what: str, fn, nargs: int, params: dict, how: str) -> None:
    """``fn`` must accept ``nargs`` positional arguments plus ``params`` as keywords."""
    sig = _sig(fn)
    if sig is None:  # builtins/ufuncs: cannot tell, they will fail loudly at the first call
        return
    try:
        sig.bind(*([None] * nargs), **{k: None for k in params})
    except TypeError as e:
        raise UserOpError(f"Op {name!r}: {what} must accept {how}; {what}{sig} does not ({e})") from None


# ---------------------------------------------------------------------------------------------
# the VJP wrapper: read-only arrays in, validated gradients out
# ---------------------------------------------------------------------------------------------


def _ro(a):
    a = np.array(a, copy=True)
    a.flags.writeable = False
    return a


_NO_JITTER = contextlib.nullcontext()


def _user_vjp(spec_name, user_vjp, arity):
    def vjp(g, *inputs, out, **params):
        from .. import engine as E

        g_np = _ro(g.data)
        ins = [_ro(t.data) for t in inputs]
        out_np = _ro(out.data)
        noise = _opaque_noise.active()  # check.rounding_noise: the vjp's own numpy operations jittered too
        if noise is not None:
            g_np, out_np, ins = _nj.jittered.wrap(g_np), _nj.jittered.wrap(out_np), [_nj.jittered.wrap(a) for a in ins]
        try:
            with np.errstate(all="ignore"), _nj.jittered(*noise) if noise is not None else _NO_JITTER:
                res = user_vjp(g_np, *ins, out_np, **params)
        except ValueError as e:
            if "read-only" in str(e):
                raise VJPWriteError(
                    f"user op {spec_name!r}: its vjp tried to write into an array it was given ({e}); the upstream "
                    "gradient, the inputs and the output are read-only because other parts of the graph share them: "
                    "compute into a new array instead (e.g. g * 2, not g *= 2)",
                    spec_name,
                ) from e
            raise VJPRaisedError(f"user op {spec_name!r}: vjp raised ValueError: {e}", spec_name) from e
        except UserVJPError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of the user's code is a finding
            raise VJPRaisedError(f"user op {spec_name!r}: vjp raised {type(e).__name__}: {e}", spec_name) from e
        if isinstance(res, np.ndarray) or res is None or np.isscalar(res):
            res = (res,)
        try:
            res = list(res)
        except TypeError:
            raise VJPCountError(
                f"user op {spec_name!r}: vjp returned a {type(res).__name__}; return a tuple with one gradient "
                "(or None) per input", spec_name) from None
        if len(res) != arity:
            raise VJPCountError(
                f"user op {spec_name!r}: vjp returned {len(res)} gradient(s) but the op has {arity} input(s); "
                "return one gradient (or None) per input, in order",
                spec_name,
            )
        grads = []
        for i, (r, t) in enumerate(zip(res, inputs, strict=True)):
            if r is None:
                grads.append(None)
                continue
            arr = np.asarray(r)
            if arr.dtype == object or arr.dtype.kind not in "f":
                raise VJPDtypeError(
                    f"user op {spec_name!r}: vjp returned a gradient of dtype {arr.dtype} for input {i}; "
                    f"return a real floating-point array (the input is {t.dtype})",
                    spec_name,
                    i,
                )
            if tuple(arr.shape) != tuple(t.shape):
                hint = ""
                try:
                    np.broadcast_shapes(arr.shape, t.shape)
                    if len(arr.shape) >= len(t.shape):
                        hint = (" — it looks like the gradient of a broadcast input was not summed over the "
                                "broadcast axes")
                except ValueError:
                    pass
                raise VJPShapeError(
                    f"user op {spec_name!r}: vjp returned a gradient of shape {tuple(arr.shape)} for input {i}, "
                    f"whose shape is {tuple(t.shape)}{hint}; return each gradient in its input's exact shape",
                    spec_name,
                    i,
                )
            grads.append(E.Tensor(np.array(arr, dtype=t.dtype if t.dtype.kind == "f" else arr.dtype)))
        return grads

    return vjp


# ---------------------------------------------------------------------------------------------
# forward-mode: the user's per-direction JVP, or finite differences of forward
# ---------------------------------------------------------------------------------------------


def _user_jvp(spec_name, user_jvp):
    def jvp(tangents, *inputs, out, **params):
        n = next(t.shape[0] for t in tangents if t is not None)
        ins = [_ro(x) for x in inputs]
        out_ro = _ro(out)
        res = np.zeros((n,) + np.shape(out), dtype=np.float64)
        active = _active_directions(tangents, n)
        for k in np.nonzero(active)[0]:
            tk = [np.zeros(np.shape(x)) if t is None else _ro(t[k]) for t, x in zip(tangents, inputs, strict=True)]
            with np.errstate(all="ignore"):
                r = np.asarray(user_jvp(tk, *ins, out_ro, **params), dtype=np.float64)
            if r.shape != np.shape(out):
                raise RuntimeError(
                    f"user op {spec_name!r}: jvp returned shape {r.shape}, expected the output's shape "
                    f"{np.shape(out)} (jvp(tangents, *inputs, out) gets one tangent per input, in the input's "
                    "shape, and returns the output's tangent)"
                )
            res[k] = r
        return res

    return jvp


# ---------------------------------------------------------------------------------------------
# the spec
# ---------------------------------------------------------------------------------------------


class UserOpSpec(OpSpec):
    """An :class:`OpSpec` for user ops: batched forward over gufunc loop dimensions.

    A forward declared with a signature must broadcast over leading loop dimensions (that is what
    the signature says), so the finite-difference oracles can evaluate thousands of perturbed
    copies in one call, with each input's loop axes aligned after the batch axes.  The first
    batched call is checked against point-by-point evaluation; a forward that does not really
    broadcast (or a ``shape_fn`` op that rejects a leading axis) is evaluated point by point.
    """

    _batch_ok: bool | None = None

    def forward_batched(self, arrays: Sequence[np.ndarray], params: dict, nbatch: int) -> np.ndarray:
        arrays = [np.asarray(a) for a in arrays]
        bshape = arrays[0].shape[:nbatch] if arrays else ()
        if self._batch_ok is not False and int(np.prod(bshape)) > 0:
            try:
                y = np.asarray(self.forward(*self._aligned(arrays, nbatch), **params))
            except Exception:  # noqa: BLE001 - the forward does not take batch axes
                y = None
            want = self._out_shape_of(arrays, params, nbatch)
            if y is not None and want is not None and y.shape == bshape + want:
                if self._batch_ok:
                    return y
                if self._matches_pointwise(y, arrays, params, nbatch, bshape):
                    self._batch_ok = True
                    return y
            self._batch_ok = False
        return self._pointwise(arrays, params, nbatch, bshape)

    def _aligned(self, arrays, nbatch):
        if self.signature is None:
            return arrays
        cores = [len(c) for c in parse(self.signature)[0]]
        loops = [a.ndim - nbatch - c for a, c in zip(arrays, cores, strict=True)]
        top = max(loops) if loops else 0
        out = []
        for a, lp in zip(arrays, loops, strict=True):
            if lp < top:
                a = a.reshape(a.shape[:nbatch] + (1,) * (top - lp) + a.shape[nbatch:])
            out.append(a)
        return out

    def _out_shape_of(self, arrays, params, nbatch):
        return self.out_shape([a.shape[nbatch:] for a in arrays], params)

    def _pointwise(self, arrays, params, nbatch, bshape):
        outs = [np.asarray(self.forward(*[a[idx] for a in arrays], **params)) for idx in np.ndindex(*bshape)]
        return np.stack(outs).reshape(bshape + np.shape(outs[0])) if outs else np.zeros(bshape)

    def _matches_pointwise(self, y, arrays, params, nbatch, bshape) -> bool:
        total = int(np.prod(bshape))
        picks = sorted({0, total // 2, total - 1})
        for p in picks:
            idx = np.unravel_index(p, bshape)
            try:
                ref = np.asarray(self.forward(*[a[idx] for a in arrays], **params))
            except Exception:  # noqa: BLE001
                return False
            got = y[idx]
            if ref.shape != got.shape or not np.allclose(got, ref, rtol=1e-13, atol=1e-300, equal_nan=True):
                return False
        return True


def Op(
    name: str,
    *,
    forward,
    vjp,
    torch=None,
    arity: int | None = None,
    signature: str | None = None,
    shape_fn=None,
    params: dict | None = None,
    domain=None,
    jvp=None,
    kink_distance=None,
) -> OpSpec:
    """Declare a user op (CONTRACT §2). Returns its spec, callable on engine tensors.

    ``forward(*arrays, **params) -> array``; ``vjp(g, *arrays, out, **params) -> one gradient per
    input`` (each of its input's exact shape, or None); optional ``torch`` (the same function on
    torch tensors), ``signature`` (numpy gufunc style, default elementwise with broadcasting) or
    ``shape_fn(*shapes, **params) -> shape | None``, ``params`` (name -> Hypothesis strategy),
    ``domain`` (one, or one per input), ``jvp(tangents, *arrays, out, **params) -> out tangent``
    (per direction: one tangent per input, in its shape) and ``kink_distance(*arrays, **params)
    -> float`` (distance of the inputs to the nearest point where the op is not differentiable,
    for kinks that move with the params; static ones go in ``domain=gs.domains.away_from(...)``).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise UserOpError(f"Op name must be a Python identifier, got {name!r}")
    if not callable(forward):
        raise UserOpError(f"Op {name!r}: forward must be callable, got {type(forward).__name__}")
    if not callable(vjp):
        raise UserOpError(f"Op {name!r}: vjp must be callable, got {type(vjp).__name__}")
    if torch is not None and not callable(torch):
        raise UserOpError(f"Op {name!r}: torch must be callable (the op written with torch ops) or None")
    if jvp is not None and not callable(jvp):
        raise UserOpError(f"Op {name!r}: jvp must be callable or None")
    if kink_distance is not None and not callable(kink_distance):
        raise UserOpError(f"Op {name!r}: kink_distance must be callable (*arrays, **params) -> float, or None")
    if params is not None and not isinstance(params, dict):
        raise UserOpError(
            f"Op {name!r}: params must be a dict of name -> Hypothesis strategy, got {type(params).__name__}")
    params = dict(params or {})
    for k, v in params.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise UserOpError(f"Op {name!r}: param names must be identifiers, got {k!r}")
        if not _is_strategy(v):
            raise UserOpError(
                f"Op {name!r}: params[{k!r}] must be a Hypothesis strategy (e.g. st.floats(0.1, 2.0) or "
                f"st.just({v!r})), got {type(v).__name__}"
            )
    if arity is None:
        arity = _infer_arity(name, forward, params)
    if isinstance(arity, bool) or not isinstance(arity, int) or arity < 1:
        raise UserOpError(f"Op {name!r}: arity must be a positive int, got {arity!r}")
    names = ", ".join(f"x{i}" for i in range(arity))
    kw = "".join(f", {k}=..." for k in params)
    _check_binds(name, "forward", forward, arity, params, f"({names}{kw}) ({arity} array(s), params as keywords)")
    _check_binds(name, "vjp", vjp, arity + 2, params, f"(g, {names}, out{kw}) and return one gradient per input")
    if jvp is not None:
        _check_binds(name, "jvp", jvp, arity + 2, params, f"(tangents, {names}, out{kw}) and return out's tangent")
    if kink_distance is not None:
        _check_binds(name, "kink_distance", kink_distance, arity, params, f"({names}{kw})")
    if signature is not None and shape_fn is not None:
        raise UserOpError(f"Op {name!r}: give either signature= or shape_fn=, not both")
    if shape_fn is not None and not callable(shape_fn):
        raise UserOpError(f"Op {name!r}: shape_fn must be callable (*input_shapes, **params) -> shape or None")
    if shape_fn is None:
        if signature is not None and not isinstance(signature, str):
            raise UserOpError(f"Op {name!r}: signature must be a string such as '(n)->()', got {signature!r}")
        signature = signature or elementwise(arity)
        try:
            ins, _ = parse(signature)
        except SignatureError as e:
            raise UserOpError(f"Op {name!r}: {e}") from None
        if len(ins) != arity:
            raise UserOpError(
                f"Op {name!r}: signature {signature!r} has {len(ins)} input(s) but forward takes {arity}; "
                "fix the signature or pass arity="
            )
    if domain is not None:
        try:  # a Domain, a name ('positive'), or a list with one per input
            domain = _domains.coerce(domain, f"Op {name!r}")
        except (TypeError, ValueError) as e:
            raise UserOpError(str(e)) from None
        if isinstance(domain, list) and len(domain) != arity:
            raise UserOpError(f"Op {name!r}: domain has {len(domain)} entries for {arity} input(s); give one "
                              "domain for all inputs or exactly one per input")

    strategies = params

    def param_strategy(shapes):
        from hypothesis import strategies as st

        return st.fixed_dictionaries(dict(strategies))

    module = sys._getframe(1).f_globals.get("__name__")
    elementwise_sig = signature is not None and signature == elementwise(arity)
    spec = UserOpSpec(
        name=name,
        family="user",
        arity=arity,
        forward=forward,
        vjp=_user_vjp(name, vjp, arity),
        torch=torch,
        torch_name="user torch function" if torch is not None else None,
        jvp=None,
        signature=signature,
        shape_fn=shape_fn,
        param_strategy=param_strategy,
        domain=domain,
        user=True,
        once_differentiable=True,
        broadcasting=elementwise_sig,
        jvp_source="declared" if jvp is not None else FD_JVP_SOURCE,
        kink_distance=kink_distance,
        call=None,
    )
    spec.jvp = _user_jvp(name, jvp) if jvp is not None else fd_jvp(spec)
    spec.user_vjp = vjp  # type: ignore[attr-defined]
    spec.user_jvp = jvp  # type: ignore[attr-defined]
    spec.params_strategies = dict(params)  # type: ignore[attr-defined]
    spec.defining_module = module  # type: ignore[attr-defined]
    register(spec)
    return spec


def _is_strategy(v) -> bool:
    try:
        from hypothesis.strategies import SearchStrategy
    except ImportError:  # pragma: no cover
        return hasattr(v, "example") and hasattr(v, "map")
    return isinstance(v, SearchStrategy)


def import_path_of(spec: OpSpec) -> str | None:
    """``"module:attr"`` under which this user op can be imported again, or None (defined inline)."""
    if getattr(spec, "import_path", None):
        return spec.import_path
    mod_name = getattr(spec, "defining_module", None)
    if not mod_name or mod_name == "__main__":
        return None
    mod = sys.modules.get(mod_name)
    if mod is None:
        return None
    for attr, val in vars(mod).items():
        if val is spec:
            return f"{mod_name}:{attr}"
    return None


def _check_shapes(spec, shapes):
    if spec.signature is not None:
        return signature_out_shape(spec.signature, shapes)
    return spec.shape_fn(*shapes)


# keep align_ranks importable from here for callers that batch user forwards themselves
_ = align_ranks
