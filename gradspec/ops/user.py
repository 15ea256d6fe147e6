"""User ops: ``gs.Op(name, forward=..., vjp=..., ...)`` goes through the same table and machinery.

A user op is an :class:`OpSpec` with numpy ``forward``/``vjp`` (and optionally ``jvp`` and a
``torch`` twin).  Its VJP receives READ-ONLY numpy arrays (writing into the upstream gradient is
reported, not silently tolerated); what it returns is validated (count, shape, dtype) with a
message that names the op and the input.

Example::

    >>> import numpy as np, gradspec as gs
    >>> double = gs.Op("double", forward=lambda x: 2 * x, vjp=lambda g, x, out: (2 * g,), torch=lambda x: 2 * x)
    >>> x = gs.tensor([1.0, 2.0], requires_grad=True)
    >>> double(x).sum().backward()
    >>> x.grad.numpy()
    array([2., 2.])
"""

from __future__ import annotations

import inspect
import sys

import numpy as np

from .. import domains as _domains
from .._private.signature import SignatureError, elementwise, parse, signature_out_shape
from ._registry import register
from ._spec import OpSpec

__all__ = ["Op", "UserOpError"]


class UserOpError(ValueError):
    """A user op declaration that cannot work; the message names the op, the field and the fix."""


def _infer_arity(name, forward, params) -> int:
    if isinstance(forward, np.ufunc):
        return forward.nin
    try:
        sig = inspect.signature(forward)
    except (TypeError, ValueError):
        raise UserOpError(f"Op {name!r}: cannot inspect forward's signature; pass arity=N explicitly") from None
    pos = [
        p
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in params and p.default is p.empty
    ]
    if any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()):
        raise UserOpError(f"Op {name!r}: forward takes *args; pass arity=N explicitly")
    if not pos:
        raise UserOpError(f"Op {name!r}: forward takes no tensor inputs (its positional parameters are all params)")
    return len(pos)


def _ro(a):
    a = np.array(a, copy=True) if not isinstance(a, np.ndarray) else a.copy()
    a.flags.writeable = False
    return a


def _user_vjp(spec_name, user_vjp, arity):
    def vjp(g, *inputs, out, **params):
        from .. import engine as E

        g_np = _ro(g.data)
        ins = [_ro(t.data) for t in inputs]
        out_np = _ro(out.data)
        try:
            res = user_vjp(g_np, *ins, out_np, **params)
        except ValueError as e:
            if "read-only" in str(e):
                raise RuntimeError(
                    f"user op {spec_name!r}: its vjp tried to write into an input array ({e}); the upstream "
                    "gradient and the inputs are read-only: compute into a new array instead (e.g. g * 2, not g *= 2)"
                ) from e
            raise
        if isinstance(res, np.ndarray) or res is None:
            res = (res,)
        res = list(res)
        if len(res) != arity:
            raise RuntimeError(
                f"user op {spec_name!r}: vjp returned {len(res)} gradient(s) but the op has {arity} input(s); "
                "return one gradient (or None) per input, in order"
            )
        grads = []
        for i, (r, t) in enumerate(zip(res, inputs)):
            if r is None:
                grads.append(None)
                continue
            arr = np.asarray(r)
            if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
                raise RuntimeError(
                    f"user op {spec_name!r}: vjp returned a {type(r).__name__} of dtype {arr.dtype} for input {i}; "
                    "return a numeric numpy array"
                )
            grads.append(E.Tensor(np.array(arr, dtype=np.result_type(arr.dtype, t.dtype) if arr.dtype.kind in "biu" else arr.dtype)))
        return grads

    return vjp


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
) -> OpSpec:
    """Declare a user op (CONTRACT §2). Returns its :class:`OpSpec`, callable on engine tensors.

    ``forward(*arrays, **params) -> array``; ``vjp(g, *arrays, out, **params) -> one gradient per
    input``; optional ``torch`` (the same function on torch tensors), ``signature`` (numpy gufunc
    style, default elementwise with broadcasting), ``shape_fn``, ``params`` (name -> Hypothesis
    strategy), ``domain`` (one, or one per input), ``jvp(tangents, *arrays, out, **params)``.
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
    params = dict(params or {})
    for k, v in params.items():
        if not hasattr(v, "example") or not hasattr(v, "map"):
            raise UserOpError(f"Op {name!r}: params[{k!r}] must be a Hypothesis strategy, got {type(v).__name__}")
    if arity is None:
        arity = _infer_arity(name, forward, params)
    if not isinstance(arity, int) or arity < 1:
        raise UserOpError(f"Op {name!r}: arity must be a positive int, got {arity!r}")
    if signature is not None and shape_fn is not None:
        raise UserOpError(f"Op {name!r}: give either signature= or shape_fn=, not both")
    if shape_fn is None:
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
        doms = domain if isinstance(domain, (list, tuple)) else [domain]
        if isinstance(domain, (list, tuple)) and len(domain) != arity:
            raise UserOpError(f"Op {name!r}: domain has {len(domain)} entries for {arity} input(s)")
        for d in doms:
            if not isinstance(d, _domains.Domain):
                raise UserOpError(f"Op {name!r}: domain entries must come from gs.domains (real(), positive(), ...)")

    strategies = params

    def param_strategy(shapes):
        from hypothesis import strategies as st

        return st.fixed_dictionaries(dict(strategies))

    module = sys._getframe(1).f_globals.get("__name__")
    elementwise_sig = signature is not None and signature == elementwise(arity)
    spec = OpSpec(
        name=name,
        family="user",
        arity=arity,
        forward=forward,
        vjp=_user_vjp(name, vjp, arity),
        torch=torch,
        torch_name="user torch function" if torch is not None else None,
        jvp=jvp,
        signature=signature,
        shape_fn=shape_fn,
        param_strategy=param_strategy,
        domain=domain,
        user=True,
        once_differentiable=True,
        broadcasting=elementwise_sig,
        jvp_source="declared" if jvp is not None else "finite differences of forward",
        call=None,
    )
    spec.user_vjp = vjp  # type: ignore[attr-defined]
    spec.defining_module = module  # type: ignore[attr-defined]
    register(spec)
    return spec


def import_path_of(spec: OpSpec) -> str | None:
    """``"module:attr"`` under which this user op can be imported again, or None (defined inline)."""
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
