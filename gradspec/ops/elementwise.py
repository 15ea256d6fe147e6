"""Elementwise ops (unary and broadcasting binary), one declaration each.

VJP rules use engine ops only (so ``create_graph=True`` differentiates them again) and return
gradients in the *broadcast* output shape: reducing them to each operand's shape happens once,
in the engine loop.  ``deriv``/``partials`` are the independent numpy derivatives the jacobian
oracle uses (forward mode); they share no code with the VJP rules.
"""

from __future__ import annotations

import math

import numpy as np

from .. import domains as D
from .. import engine as E
from ..spec.opspec import OpSpec
from ..spec.registry import register
from ._common import F, bcast_tangent, broadcast, const, quiet, torch, where

__all__: list[str] = []

call = E.call
SQRT1_2 = 1 / math.sqrt(2.0)
INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)
GELU_K = math.sqrt(2 / math.pi)


def _erf(x):
    # scipy.special: a vectorised erf accurate to a few ulp; imported on first use because it
    # costs ~0.4 s, which every `gradspec` command and test process would otherwise pay.
    from scipy import special

    return special.erf(x)


def _no_params(shapes):
    from hypothesis import strategies as st

    return st.just({})


def unary(
    name,
    forward,
    vjp,
    deriv,
    torch_fn,
    *,
    domain=None,
    saves=True,
    notes="",
    method=True,
    params=None,
    param_strategy=None,
    torch_name=None,
    linear=False,
    kink_distance=None,
):
    """Declare a unary elementwise op. ``params``: {name: default} (keyword args of the public function)."""
    defaults = dict(params or {})

    def call_(input, *args, **kw):
        # torch allows these params positionally too: F.leaky_relu(x, 0.1), x.clamp(0, 1).
        if len(args) > len(defaults):
            raise TypeError(f"{name}() takes at most {1 + len(defaults)} positional arguments ({1 + len(args)} given)")
        p = dict(zip(defaults, args))
        dup = set(p) & set(kw)
        if dup:
            raise TypeError(f"{name}() got multiple values for argument(s) {sorted(dup)}")
        unknown = set(kw) - set(defaults)
        if unknown:
            raise TypeError(f"{name}() got unexpected keyword argument(s) {sorted(unknown)}")
        return (input,), {**defaults, **p, **kw}

    # Give the public function torch's real signature (input, *, param=default, ...).
    import inspect

    call_.__signature__ = inspect.Signature(
        [inspect.Parameter("input", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(k, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=v) for k, v in defaults.items()]
    )

    def jvp(tangents, x, *, out, **p):
        (t,) = tangents
        return deriv(x, out, **p) * t

    return register(
        OpSpec(
            name=name,
            family="elementwise",
            arity=1,
            forward=forward,
            vjp=lambda g, x, *, out, **p: (vjp(g, x, out, **p),),
            jvp=None if linear else jvp,
            linear=linear,
            torch=torch_fn,
            torch_name=torch_name or f"torch.{name}",
            signature="()->()",
            domain=domain,
            saves=saves,
            notes=notes,
            method=method,
            call=call_,
            param_strategy=param_strategy or _no_params,
            kink_distance=kink_distance,
            broadcasting=True,
            normalize=(lambda shapes, **p: {**defaults, **p}) if defaults else None,
        )
    )


def binary(
    name,
    forward,
    vjp,
    partials,
    torch_fn,
    *,
    domain=None,
    saves=True,
    notes="",
    method=True,
    linear=False,
    kink_distance=None,
    vjp_compares=False,
    torch_name=None,
    arg_names=("input", "other"),
):
    def jvp(tangents, a, b, *, out):
        da, db = partials(a, b, out)
        acc = None
        for t, d in zip(tangents, (da, db)):
            if t is None:
                continue
            term = d * bcast_tangent(t, out.ndim)
            acc = term if acc is None else acc + term
        n = max(t.shape[0] for t in tangents if t is not None)
        want = (n,) + out.shape
        return acc if acc.shape == want else np.broadcast_to(acc, want)  # (the same numbers, without a view)

    import inspect

    def call_(*args, **kw):
        return tuple(sig.bind(*args, **kw).arguments.values()), {}

    sig = inspect.Signature([inspect.Parameter(a, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in arg_names])
    call_.__signature__ = sig
    return register(
        OpSpec(
            name=name,
            family="elementwise",
            arity=2,
            forward=forward,
            vjp=lambda g, a, b, *, out: vjp(g, a, b, out),
            jvp=None if linear else jvp,
            linear=linear,
            torch=torch_fn,
            torch_name=torch_name or f"torch.{name}",
            signature="(),()->()",
            domain=domain,
            saves=saves,
            notes=notes,
            method=method,
            call=call_,
            param_strategy=_no_params,
            kink_distance=kink_distance,
            vjp_compares=vjp_compares,
            broadcasting=True,
        )
    )


def _st():
    from hypothesis import strategies as st

    return st


# ---------------------------------------------------------------------------------------
# unary
# ---------------------------------------------------------------------------------------

unary("neg", np.negative, lambda g, x, out: -g, None, lambda x: -x, saves=False, linear=True)
unary("exp", np.exp, lambda g, x, out: g * out, lambda x, out: out, lambda x: torch().exp(x),
      notes="saves its output")
unary("log", np.log, lambda g, x, out: g / x, lambda x, out: 1 / x, lambda x: torch().log(x),
      domain=D.positive(), notes="d/dx at 0 is +inf (reference 9.14)")
unary("log1p", np.log1p, lambda g, x, out: g / (x + 1), lambda x, out: 1 / (1 + x), lambda x: torch().log1p(x),
      domain=D.Domain(lo=-1.0, points=(-1.0,), name="greater than -1"))
unary("expm1", np.expm1, lambda g, x, out: g * (out + 1), lambda x, out: out + 1, lambda x: torch().expm1(x))
unary("sin", np.sin, lambda g, x, out: g * x.cos(), lambda x, out: np.cos(x), lambda x: torch().sin(x))
unary("cos", np.cos, lambda g, x, out: g * -x.sin(), lambda x, out: -np.sin(x), lambda x: torch().cos(x))
unary("tan", np.tan, lambda g, x, out: g * (out * out + 1), lambda x, out: 1 + out * out, lambda x: torch().tan(x),
      domain=D.interval(-1.4, 1.4), notes="drawn in (-1.4, 1.4), away from the poles at +-pi/2")
unary("tanh", np.tanh, lambda g, x, out: g * (1 - out * out), lambda x, out: 1 - out * out,
      lambda x: torch().tanh(x))


def _sigmoid(x):
    # Split by sign so neither branch overflows (exp of a large positive number).
    with quiet(over="ignore"):
        e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(np.result_type(x, np.float32), copy=False)


unary("sigmoid", _sigmoid, lambda g, x, out: g * (out * (1 - out)), lambda x, out: out * (1 - out),
      lambda x: torch().sigmoid(x), notes="saturates to an exact 0 gradient (reference 9.18)")
# torch's threshold_backward zeroes the gradient where x <= 0, so relu'(nan) is 1, not 0.
unary("relu", lambda x: np.maximum(x, 0).astype(x.dtype, copy=False),
      lambda g, x, out: where(~(x.data <= 0), g, 0), lambda x, out: (~(x <= 0)).astype(x.dtype),
      lambda x: torch().relu(x), domain=D.away_from(0.0),
      notes="relu'(0) = 0; backward is a select, so a NaN seed gives exactly 0 where x <= 0 (reference 2.10b, 9.6)")


def _slopes(shapes):
    return _st().fixed_dictionaries({"negative_slope": _st().sampled_from([0.01, 0.2, -0.5, 1.5])})


unary("leaky_relu", lambda x, negative_slope=0.01: np.where(x > 0, x, x * negative_slope).astype(x.dtype, copy=False),
      lambda g, x, out, negative_slope: where(x.data > 0, g, g * negative_slope),
      lambda x, out, negative_slope: np.where(x > 0, 1.0, negative_slope).astype(x.dtype),
      lambda x, negative_slope: F().leaky_relu(x, negative_slope), params={"negative_slope": 0.01},
      param_strategy=_slopes, domain=D.away_from(0.0), method=False,
      torch_name="torch.nn.functional.leaky_relu", notes="leaky_relu'(0) = negative_slope (reference 9.6)")


def _elu(x, alpha=1.0):
    with quiet(over="ignore"):
        return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))).astype(x.dtype, copy=False)


# The negative branch's factor (out + alpha) depends on x only where x < 0: torch's
# elu_double_backward masks with self < 0, so the second derivative at exactly 0 is 0.
unary("elu", _elu, lambda g, x, out, alpha: where(x.data > 0, g, g * (where(x.data < 0, out, 0) + alpha)),
      lambda x, out, alpha: np.where(x > 0, 1.0, out + alpha).astype(x.dtype),
      lambda x, alpha: F().elu(x, alpha), params={"alpha": 1.0},
      param_strategy=lambda s: _st().fixed_dictionaries({"alpha": _st().sampled_from([1.0, 0.5, 2.0])}),
      domain=D.away_from(0.0), method=False, torch_name="torch.nn.functional.elu",
      notes="x <= 0 branch alpha*(exp(x)-1); at 0 the gradient is alpha (torch's elu_backward)")


def _softplus(x, beta=1.0, threshold=20.0):
    bx = beta * x
    with quiet(over="ignore"):
        soft = np.log1p(np.exp(-np.abs(bx))) + np.maximum(bx, 0)
    return np.where(bx > threshold, x, soft / beta).astype(x.dtype, copy=False)


unary("softplus", _softplus,
      lambda g, x, out, beta, threshold: where((x.data * beta) > threshold, g, g * (x * beta).sigmoid()),
      lambda x, out, beta, threshold: np.where(beta * x > threshold, 1.0, _sigmoid(beta * x)).astype(x.dtype),
      lambda x, beta, threshold: F().softplus(x, beta=beta, threshold=threshold),
      params={"beta": 1.0, "threshold": 20.0},
      param_strategy=lambda s: _st().fixed_dictionaries({"beta": _st().sampled_from([1.0, 2.0, 0.5]),
                                                         "threshold": _st().just(20.0)}),
      method=False, torch_name="torch.nn.functional.softplus",
      kink_distance=lambda x, beta, threshold: np.minimum.reduce(np.abs(x - threshold / beta), axis=None, initial=np.inf),
      notes="linear above threshold/beta (a tiny jump in the derivative there, treated as a kink)")


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        return (0.5 * x * (1 + np.tanh(GELU_K * (x + 0.044715 * x**3)))).astype(x.dtype, copy=False)
    return (0.5 * x * (1 + _erf(x * SQRT1_2))).astype(x.dtype, copy=False)


def _gelu_vjp(g, x, out, approximate):
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * GELU_K
        t = inner.tanh()
        d = (t + 1) * 0.5 + x * 0.5 * (1 - t * t) * ((x * x * (3 * 0.044715) + 1) * GELU_K)
        return g * d
    cdf = ((x * SQRT1_2).erf() + 1) * 0.5
    pdf = (x * x * -0.5).exp() * INV_SQRT_2PI
    return g * (cdf + x * pdf)


def _gelu_deriv(x, out, approximate):
    if approximate == "tanh":
        t = np.tanh(GELU_K * (x + 0.044715 * x**3))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_K * (1 + 3 * 0.044715 * x * x)
    return 0.5 * (1 + _erf(x * SQRT1_2)) + x * np.exp(-0.5 * x * x) * INV_SQRT_2PI


unary("gelu", _gelu, _gelu_vjp, _gelu_deriv, lambda x, approximate: F().gelu(x, approximate=approximate),
      params={"approximate": "none"},
      param_strategy=lambda s: _st().fixed_dictionaries({"approximate": _st().sampled_from(["none", "tanh"])}),
      method=False, torch_name="torch.nn.functional.gelu")
def _sgn(x):
    # torch's sgn is (0 < x) - (x < 0): 0 at NaN, where np.sign gives NaN.
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


unary("abs", np.abs, lambda g, x, out: g * const(_sgn(x.data), x), lambda x, out: _sgn(x),
      lambda x: torch().abs(x), domain=D.away_from(0.0), notes="abs'(0) = sgn(0) = 0 (reference 9.5)")
unary("sqrt", np.sqrt, lambda g, x, out: g / (out * 2), lambda x, out: 0.5 / out, lambda x: torch().sqrt(x),
      domain=D.positive(), notes="sqrt'(0) = inf; 0 * inf = nan with a zero seed (reference 9.7)")
unary("rsqrt", lambda x: 1 / np.sqrt(x), lambda g, x, out: g * (out * out * out) * -0.5,
      lambda x, out: -0.5 * out**3, lambda x: torch().rsqrt(x), domain=D.positive())
unary("square", np.square, lambda g, x, out: g * (x * 2), lambda x, out: 2 * x, lambda x: torch().square(x))
unary("reciprocal", np.reciprocal, lambda g, x, out: g * -(out * out), lambda x, out: -out * out,
      lambda x: torch().reciprocal(x), domain=D.away_from(0.0, 0.1))
unary("erf", lambda x: _erf(x).astype(x.dtype, copy=False),
      lambda g, x, out: g * ((x * x * -1).exp() * TWO_OVER_SQRT_PI),
      lambda x, out: TWO_OVER_SQRT_PI * np.exp(-x * x), lambda x: torch().erf(x))


def _clamp(x, min=None, max=None):
    y = x
    if min is not None:
        y = np.maximum(y, np.asarray(min, dtype=x.dtype))
    if max is not None:
        y = np.minimum(y, np.asarray(max, dtype=x.dtype))
    return np.asarray(y, dtype=x.dtype)


def _in_range(x, min, max):
    m = np.ones(np.shape(x), dtype=bool)
    if min is not None:
        m &= x >= min
    if max is not None:
        m &= x <= max
    return m


def _clamp_params(shapes):
    st = _st()
    bound = st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0])
    return st.tuples(st.one_of(st.none(), bound), st.one_of(st.none(), bound)).filter(
        lambda mm: mm != (None, None) and (None in mm or mm[0] < mm[1])
    ).map(lambda mm: {"min": mm[0], "max": mm[1]})


def _clamp_kinks(x, min, max):
    d = np.inf
    for b in (min, max):
        if b is not None and np.size(x):
            d = np.minimum(d, np.minimum.reduce(np.abs(x - b), axis=None))  # (np.min without its Python wrapper: FD calls this per case)
    return d


unary("clamp", _clamp, lambda g, x, out, min, max: where(_in_range(x.data, min, max), g, 0),
      lambda x, out, min, max: _in_range(x, min, max).astype(x.dtype),
      lambda x, min, max: torch().clamp(x, min=min, max=max), params={"min": None, "max": None},
      param_strategy=_clamp_params, kink_distance=_clamp_kinks,
      notes="bounds inclusive: gradient 1 at x == min and x == max (reference 9.6b)")


# ---------------------------------------------------------------------------------------
# binary (broadcasting)
# ---------------------------------------------------------------------------------------

binary("add", np.add, lambda g, a, b, out: (g, g), None, lambda a, b: torch().add(a, b), saves=False, linear=True)
binary("sub", np.subtract, lambda g, a, b, out: (g, -g), None, lambda a, b: torch().sub(a, b), saves=False,
       linear=True)
binary("mul", np.multiply, lambda g, a, b, out: (g * b, g * a), lambda a, b, out: (b, a),
       lambda a, b: torch().mul(a, b), notes="saves both operands, even a Python scalar (reference 5.2b)")
binary("div", np.divide, lambda g, a, b, out: (g / b, -g * a / (b * b)), lambda a, b, out: (1 / b, -a / (b * b)),
       lambda a, b: torch().div(a, b), domain=[D.real(), D.away_from(0.0, 0.1)])


def _pow_vjp(g, a, b, out):
    # Same structure as torch's pow_backward_self / pow_backward_exponent: the seed sits inside
    # the mask for the base but outside it for the exponent, which decides NaN patterns of
    # double backward at pow(0, b).
    ga = where(b.data == 0, 0, g * (b * a ** (b - 1)))
    gb = g * where((a.data == 0) & (b.data >= 0), 0, out * a.log())
    return ga, gb


def _pow_partials(a, b, out):
    with quiet(all="ignore"):
        da = np.where(b == 0, 0.0, b * np.power(a, b - 1))
        db = np.where((a == 0) & (b >= 0), 0.0, out * np.log(a))
    return da, db


def _pow_call(input, exponent):
    if isinstance(exponent, (int, float)) and not isinstance(exponent, bool):
        return "pow_scalar", (input,), {"exponent": exponent}
    if not isinstance(input, E.Tensor) and isinstance(input, (int, float)):
        return "pow", (E.Tensor(np.asarray(input, dtype=getattr(exponent, "dtype", np.float64))), exponent), {}
    return "pow", (input, exponent), {}


_pow = binary("pow", np.power, _pow_vjp, _pow_partials, lambda a, b: torch().pow(a, b),
              domain=[D.positive(), D.interval(-3.0, 3.0)], arg_names=("input", "exponent"),
              notes="pow(0, 0): both gradients masked to 0 (reference 9.8b); base drawn positive")
_pow.dispatch = _pow_call


def _pow_scalar_vjp(g, x, *, out, exponent):
    if exponent == 0:
        return (g * 0,)
    return (g * (x ** (exponent - 1) * exponent) if exponent != 1 else g,)


def _pow_scalar_fwd(x, exponent):
    return np.power(x, np.asarray(exponent, dtype=x.dtype))


register(
    OpSpec(
        name="pow_scalar",
        family="elementwise",
        arity=1,
        forward=_pow_scalar_fwd,
        vjp=_pow_scalar_vjp,
        jvp=lambda tangents, x, *, out, exponent: (
            (np.zeros_like(x) if exponent == 0 else exponent * np.power(x, np.asarray(exponent - 1, dtype=x.dtype)))
            * tangents[0]
        ),
        torch=lambda x, exponent: torch().pow(x, exponent),
        torch_name="torch.pow (Python-scalar exponent)",
        signature="()->()",
        domain=D.positive(),
        param_strategy=lambda s: _st().fixed_dictionaries(
            {"exponent": _st().sampled_from([2, 3, 0.5, -1, 1.5, -0.5, 1, 0])}
        ),
        call=lambda input, exponent: ((input,), {"exponent": exponent}),
        broadcasting=True,
        notes="x**p at 0: p=0 -> 0, p=1 -> 1, p=2 -> 0, p=0.5 -> inf, p=-1 -> -inf (reference 9.8)",
    )
)


def _max_vjp(pick):
    def vjp(g, a, b, out):
        ad, bd = a.data, b.data
        wa = np.where(pick(ad, bd), 1.0, np.where(ad == bd, 0.5, 0.0))
        wb = np.where(pick(bd, ad), 1.0, np.where(ad == bd, 0.5, 0.0))
        return g * const(wa, g), g * const(wb, g)

    return vjp


def _max_partials(pick):
    def partials(a, b, out):
        a, b = np.broadcast_arrays(a, b)
        wa = np.where(pick(a, b), 1.0, np.where(a == b, 0.5, 0.0))
        return wa.astype(out.dtype), (1.0 - wa).astype(out.dtype)

    return partials


def _tie_distance(a, b):  # (np.min's own reduction without its Python wrapper: FD's reach check calls this per case)
    return np.minimum.reduce(np.abs(np.subtract(a, b)), axis=None, initial=np.inf)


binary("maximum", np.maximum, _max_vjp(np.greater), _max_partials(np.greater), lambda a, b: torch().maximum(a, b),
       kink_distance=_tie_distance, vjp_compares=True, notes="ties: each side gets g/2 (reference 9.3)")
binary("minimum", np.minimum, _max_vjp(np.less), _max_partials(np.less), lambda a, b: torch().minimum(a, b),
       kink_distance=_tie_distance, vjp_compares=True, notes="ties: each side gets g/2 (reference 9.4)")


def _atan2_vjp(g, a, b, out):
    r = a * a + b * b
    return g * b / r, g * -a / r


def _atan2_partials(a, b, out):
    r = a * a + b * b
    return b / r, -a / r


binary("atan2", np.arctan2, _atan2_vjp, _atan2_partials, lambda a, b: torch().atan2(a, b),
       domain=[D.away_from(0.0, 0.1), D.real()],
       notes="first argument kept away from 0: the branch cut (b < 0, a = 0) and the pole at (0, 0)")


# where(condition, input, other): the condition is a bool tensor input that is never differentiated.
def _where_vjp(g, c, a, b, *, out):
    cd = broadcast(c.data, g.shape)
    return None, where(cd, g, 0), where(cd, 0, g)


def _where_jvp(tangents, c, a, b, *, out):
    _, ta, tb = tangents
    n = max(t.shape[0] for t in (ta, tb) if t is not None)
    ta = np.zeros((n,) + np.shape(a)) if ta is None else ta
    tb = np.zeros((n,) + np.shape(b)) if tb is None else tb
    c = np.asarray(c, dtype=bool)
    r = out.ndim
    return np.broadcast_to(np.where(c, bcast_tangent(ta, r), bcast_tangent(tb, r)), (n,) + out.shape)


register(
    OpSpec(
        name="where",
        family="elementwise",
        arity=3,
        forward=lambda c, a, b: np.where(np.asarray(c, dtype=bool), a, b),
        vjp=_where_vjp,
        jvp=_where_jvp,
        torch=lambda c, a, b: torch().where(c.bool(), a, b),
        torch_name="torch.where",
        signature="(),(),()->()",
        differentiable=(False, True, True),
        call=lambda condition, input, other: ((condition, input, other), {}),
        param_strategy=_no_params,
        broadcasting=True,
        notes="gradient routed by the condition; zeros (not None) to the other operand; does not stop NaN "
        "from the unselected branch (reference 9.12)",
    )
)

# Internal ops the engine itself needs (not part of the public table).
register(
    OpSpec(
        name="_cast",
        family="internal",
        arity=1,
        forward=lambda x, dtype: x.astype(dtype),
        vjp=lambda g, x, *, out, dtype: (g,),  # the engine casts back to x's dtype
        linear=True,
        torch=lambda x, dtype: x.to(getattr(torch(), dtype)),
        signature="()->()",
        saves=False,
        broadcasting=True,
    )
)
register(
    OpSpec(
        name="clone",
        family="internal",
        arity=1,
        forward=lambda x: np.array(x, copy=True),
        vjp=lambda g, x, *, out: (g,),
        linear=True,
        torch=lambda x: x.clone(),
        signature="()->()",
        saves=False,
        call=lambda input: ((input,), {}),
        method=True,
        broadcasting=True,
    )
)
