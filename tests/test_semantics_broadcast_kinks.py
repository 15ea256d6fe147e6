"""gradspec's engine against torch 2.13, rule by rule: §8 broadcasting;
§9 kinks and singular points; §10 gradients returned by backward functions; float32 path.

The scenarios, the two backends and the comparison are described in ``tests/_semantics_harness.py``
(each scenario runs on gradspec and on torch; the two logs must be equal)."""

from __future__ import annotations

import numpy as np
import pytest

from tests._semantics_harness import (
    BCAST,
    CUSTOM,
    F32,
    KINKS,
    assert_same_behaviour,
)

_NAN = float("nan")

# ---------------------------------------------------------------- §8 broadcasting

_SEED23 = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]


@BCAST.add("8.1 (2,3)+(3,)")
def _(B, rec):
    a = B.tensor(np.ones((2, 3)), requires_grad=True)
    b = B.tensor(np.ones(3), requires_grad=True)
    (a + b).backward(B.tensor(_SEED23))
    rec("a.grad", a.grad)
    rec("b.grad", b.grad)


@BCAST.add("8.2 size-1 dims keep their dim: (2,3)*(2,1)*(1,3)")
def _(B, rec):
    a = B.tensor(np.ones((2, 3)))
    b = B.tensor(np.ones((2, 1)), requires_grad=True)
    c = B.tensor(np.ones((1, 3)), requires_grad=True)
    (a * b * c).backward(B.tensor(_SEED23))
    rec("b.grad", b.grad)
    rec("c.grad", c.grad)


@BCAST.add("8.3 0-d operand gets a 0-d grad")
def _(B, rec):
    a = B.tensor(np.ones((2, 3)))
    s = B.tensor(2.0, requires_grad=True)
    (a * s).backward(B.tensor(_SEED23))
    rec("s.grad", s.grad)


@BCAST.add("8.3 (1,1) operand against (2,3)")
def _(B, rec):
    a = B.tensor(np.ones((2, 3)), requires_grad=True)
    s = B.tensor([[2.0]], requires_grad=True)
    (a * s - s).backward(B.tensor(_SEED23))
    rec("a.grad", a.grad)
    rec("s.grad", s.grad)


@BCAST.add("8.4 leading dims (4,) -> (2,3,4)")
def _(B, rec):
    b = B.tensor(np.ones(4), requires_grad=True)
    (B.tensor(np.zeros((2, 3, 4))) + b).sum().backward()
    rec("b.grad", b.grad)


@BCAST.add("8.4 leading and size-1 dims (3,1) -> (2,3,4)")
def _(B, rec):
    b = B.tensor([[1.0], [2.0], [3.0]], requires_grad=True)
    y = B.tensor(np.arange(24.0).reshape(2, 3, 4)) * b
    y.backward(B.tensor(np.arange(24.0).reshape(2, 3, 4) % 5))
    rec("b.grad", b.grad)


@BCAST.add("8.5 two-sided (3,1)+(1,4)")
def _(B, rec):
    a = B.tensor(np.ones((3, 1)), requires_grad=True)
    b = B.tensor(np.ones((1, 4)), requires_grad=True)
    (a + b).sum().backward()
    rec("a.grad", a.grad)
    rec("b.grad", b.grad)


@BCAST.add("8.5 two-sided through mul and div")
def _(B, rec):
    a = B.tensor([[1.0], [2.0], [3.0]], requires_grad=True)
    b = B.tensor([[1.0, -2.0, 0.5, 4.0]], requires_grad=True)
    (a * b / (b * b + a)).backward(B.tensor(np.arange(12.0).reshape(3, 4)))
    rec("a.grad", a.grad)
    rec("b.grad", b.grad)


@BCAST.add("8.5 where with broadcast condition and operands")
def _(B, rec):
    a = B.tensor([[1.0], [2.0]], requires_grad=True)
    b = B.tensor([5.0, 6.0, 7.0], requires_grad=True)
    B.where(B.tensor([True, False, True]), a, b).backward(B.tensor(_SEED23))
    rec("a.grad", a.grad)
    rec("b.grad", b.grad)


@BCAST.add("8.6 expand incl. new leading dims")
def _(B, rec):
    x = B.tensor([[1.0], [2.0], [3.0]], requires_grad=True)
    x.expand(2, 3, 4).backward(B.tensor(np.ones((2, 3, 4))))
    rec("x.grad", x.grad)


@BCAST.add("8.7 0-size dims: grad has the empty leaf shape")
def _(B, rec):
    x = B.tensor(np.zeros((0, 3)), requires_grad=True)
    (x * 2).sum().backward()
    rec("x.grad", x.grad)


@BCAST.add("8.7b broadcast against a 0-size dim: zeros, not None")
def _(B, rec):
    a = B.tensor(np.zeros((0, 3)))
    b = B.tensor(np.ones(3), requires_grad=True)
    c = B.tensor(np.ones((1, 3)), requires_grad=True)
    s = B.tensor(2.0, requires_grad=True)
    (a + b + c * s).sum().backward()
    rec("b.grad", b.grad)
    rec("c.grad", c.grad)
    rec("s.grad", s.grad)


@BCAST.add("8.7b empty seed on an empty output")
def _(B, rec):
    x = B.tensor(np.ones((1, 3)), requires_grad=True)
    (x * B.tensor(np.ones((0, 3)))).backward(B.tensor(np.ones((0, 3))))
    rec("x.grad", x.grad)


@BCAST.add("8.7c matmul with inner dim 0", needs=("matmul",))
def _(B, rec):
    a = B.tensor(np.zeros((2, 0)), requires_grad=True)
    b = B.tensor(np.zeros((0, 3)), requires_grad=True)
    out = a @ b
    rec("out", out)
    out.sum().backward()
    rec("a.grad", a.grad)
    rec("b.grad", b.grad)


@BCAST.add("8.7d mean over empty", needs=("mean",))
def _(B, rec):
    x = B.tensor(np.zeros(0), requires_grad=True)
    y = x.mean()
    rec("y", y)
    y.backward()
    rec("x.grad", x.grad)


@BCAST.add("8.8 mixed dtype: each grad cast to its own dtype")
def _(B, rec):
    a = B.tensor(np.ones((2, 3)), requires_grad=True)
    b = B.tensor(np.ones(3), requires_grad=True, dtype=B.float32)
    y = a * b
    rec("y.dtype", y.dtype)
    y.sum().backward()
    rec("a.grad", a.grad)
    rec("b.grad", b.grad)


@BCAST.add("8.8 float32 tensor * 0-d float64 tensor stays float32")
def _(B, rec):
    a = B.tensor([1.0, 2.0, 3.0], requires_grad=True, dtype=B.float32)
    s = B.tensor(0.1, requires_grad=True)
    y = a * s
    rec("y", y)
    y.backward(B.tensor([1.0, 1.0, 1.0]))
    rec("a.grad", a.grad)
    rec("s.grad", s.grad)


@BCAST.add("8.8 0-d float32 * (2,) float64 -> float64")
def _(B, rec):
    s = B.tensor(0.1, requires_grad=True, dtype=B.float32)
    a = B.tensor([1.0, 2.0], requires_grad=True)
    y = s * a + s
    rec("y", y)
    y.sum().backward()
    rec("a.grad", a.grad)
    rec("s.grad", s.grad)


@BCAST.add("8.8 int tensor * float 0-d tensor -> float64")
def _(B, rec):
    n = B.tensor([1, 2, 3])
    s = B.tensor(0.5, requires_grad=True)
    y = n * s
    rec("y", y)
    y.sum().backward()
    rec("s.grad", s.grad)


@BCAST.add("8.8 where(cond, float32, 0-d float64)")
def _(B, rec):
    a = B.tensor([1.0, 2.0, 3.0], requires_grad=True, dtype=B.float32)
    s = B.tensor(0.5, requires_grad=True)
    y = B.where(B.tensor([True, False, True]), a, s)
    rec("y", y)
    y.sum().backward()
    rec("a.grad", a.grad)
    rec("s.grad", s.grad)


# ---------------------------------------------------------------- §9 kinks and singular points


def _kink(id, f, values, seed=None, needs=(), xfail=None):
    """Scenario: y = f(B, x) at x = values; backward with `seed` (default: ones); record y and x.grad."""

    def scenario(B, rec):
        x = B.tensor(values, requires_grad=True)
        y = f(B, x)
        rec("y", y)
        y.backward(B.tensor(np.ones(np.shape(values)) if seed is None else seed))
        rec("x.grad", x.grad)

    KINKS.add(id, scenario, needs=needs, xfail=xfail)


_kink("9.5 abs at 0", lambda B, x: x.abs(), [-2.0, 0.0, 3.0])
_kink("9.6 relu at 0", lambda B, x: B.relu(x), [-1.0, 0.0, 1.0])
_kink("9.6 clamp(min=0) at 0", lambda B, x: x.clamp(min=0), [-1.0, 0.0, 1.0])
_kink("9.6 clamp(max=0) at 0", lambda B, x: x.clamp(max=0), [-1.0, 0.0, 1.0])
_kink("9.6 leaky_relu at 0", lambda B, x: B.leaky_relu(x, negative_slope=0.1), [-1.0, 0.0, 1.0])
_kink("9.6b clamp(0, 1) inclusive bounds", lambda B, x: x.clamp(min=0, max=1), [-1.0, 0.0, 0.5, 1.0, 2.0])
_kink(
    "9.7 sqrt at 0, zero seed -> nan; negative -> nan",
    lambda B, x: B.sqrt(x),
    [0.0, 0.0, -1.0, 4.0],
    seed=[1.0, 0.0, 1.0, 1.0],
)
for _p in [0, 1, 2, 3, 0.5, -1, -0.5, 1.5, -2]:
    _kink(f"9.8 x**{_p} at 0", lambda B, x, p=_p: x**p, 0.0)
    _kink(f"9.8 x**{_p} at 0 and -1", lambda B, x, p=_p: x**p, [0.0, -1.0, 2.0])
_kink("9.14 1/x at 0", lambda B, x: 1 / x, [0.0, 1.0])
_kink("9.14 x/0", lambda B, x: x / B.tensor(np.zeros(2)), [0.0, 1.0])
_kink("9.14 log at 0", lambda B, x: B.log(x), [0.0, 1.0])
_kink("9.14 0/0 forward nan", lambda B, x: x / x, [0.0, 1.0])
_kink("9.12 where leaks nan from sqrt", lambda B, x: B.where(x > 0, B.sqrt(x), B.tensor(np.zeros(2))), [-1.0, 4.0])
_kink("9.12b where(x != 0, 1/x, 0) at 0", lambda B, x: B.where(x.ne(0), 1 / x, B.tensor(np.zeros(2))), [0.0, 2.0])
_kink(
    "9.12c double where avoids the leak",
    lambda B, x: B.where(x > 0, B.sqrt(B.where(x > 0, x, B.tensor(np.ones(2)))), B.tensor(np.zeros(2))),
    [-1.0, 4.0],
)
_kink("9.3 maximum(x, 0) tie at 0", lambda B, x: B.maximum(x, B.tensor(0.0)), [-1.0, 0.0, 1.0])
_kink("9.4 minimum(x, 0) tie at 0", lambda B, x: B.minimum(x, B.tensor(0.0)), [-1.0, 0.0, 1.0])
_kink("9.18 exp overflow", lambda B, x: x.exp(), [1000.0, -1000.0])
_kink("9.18 sigmoid saturation", lambda B, x: B.sigmoid(x), [1000.0, -1000.0, 0.0])
_kink("9.18 tanh saturation", lambda B, x: B.tanh(x), [1000.0, -1000.0])
_kink(
    "9.x relu of inf and nan",
    lambda B, x: B.relu(x),
    [float("inf"), float("-inf"), _NAN],
)
_kink(
    "9.x abs of nan",
    lambda B, x: x.abs(),
    [_NAN, -0.0],
)
_kink("9.x clamp of nan", lambda B, x: x.clamp(min=0, max=1), [_NAN, 0.5])
_kink("9.17 mean distributes 1/N", lambda B, x: x.mean(), np.ones((2, 3)), seed=1.0, needs=("mean",))
_kink("9.1 amax full ties split evenly", lambda B, x: x.amax(), [1.0, 3.0, 3.0, 2.0], seed=1.0, needs=("amax",))
_kink(
    "9.2b amax(dim) ties split evenly",
    lambda B, x: x.amax(dim=1),
    [[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 0.0]],
    seed=[1.0, 1.0],
    needs=("amax",),
)


@KINKS.add("9.3 maximum/minimum ties: g/2 each")
def _(B, rec):
    a = B.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = B.tensor([1.0, 5.0, 0.0], requires_grad=True)
    B.maximum(a, b).backward(B.tensor([10.0, 10.0, 10.0]))
    rec("max a.grad", a.grad)
    rec("max b.grad", b.grad)
    a.grad = b.grad = None
    B.minimum(a, b).backward(B.tensor([10.0, 10.0, 10.0]))
    rec("min a.grad", a.grad)
    rec("min b.grad", b.grad)


@KINKS.add("9.8b tensor pow(0, 0) masked")
def _(B, rec):
    b = B.tensor([0.0, 0.0, 2.0, -2.0, 0.0], requires_grad=True)
    e = B.tensor([0.0, 2.0, 0.0, 0.5, -1.0], requires_grad=True)
    y = B.pow(b, e)
    rec("y", y)
    y.sum().backward()
    rec("b.grad", b.grad)
    rec("e.grad", e.grad)


@KINKS.add("9.8c scalar base ** tensor exponent")
def _(B, rec):
    e = B.tensor([0.0, 1.0, -1.0], requires_grad=True)
    y = B.pow(0.0, e)
    rec("0**e", y)
    y.sum().backward()
    rec("e.grad", e.grad)
    e.grad = None
    B.pow(2.0, e).sum().backward()
    rec("2**e grad", e.grad)


@KINKS.add("9.12d where routes the grad, zeros (not None) to the other side")
def _(B, rec):
    a = B.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = B.tensor([4.0, 5.0, 6.0], requires_grad=True)
    B.where(B.tensor([True, False, True]), a, b).backward(B.tensor([10.0, 20.0, 30.0]))
    rec("a.grad", a.grad)
    rec("b.grad", b.grad)
    a.grad = b.grad = None
    B.where(B.tensor([True, True, True]), a, b).backward(B.tensor([10.0, 20.0, 30.0]))
    rec("all-true a.grad", a.grad)
    rec("all-true b.grad", b.grad)


# ---------------------------------------------------------------- §10 gradients returned by backward functions


def _clone(x):
    return np.array(x, copy=True)


@CUSTOM.add("10.1 larger broadcast-compatible grad is summed")
def _(B, rec):
    f = B.custom("F1", _clone, lambda B, g: B.tensor(np.ones((2, 3))), 1)
    x = B.tensor(np.ones(3), requires_grad=True)
    f(x).sum().backward()
    rec("x.grad", x.grad)


@CUSTOM.add("10.2 incompatible shape -> error naming the node")
def _(B, rec):
    f = B.custom("F2", _clone, lambda B, g: B.tensor(np.ones(3)), 1)
    x = B.tensor(np.ones((2, 3)), requires_grad=True)
    f(x).sum().backward()


@CUSTOM.add("10.2 size-1 input, grad larger in that dim is summed")
def _(B, rec):
    f = B.custom("F2b", _clone, lambda B, g: B.tensor(np.ones((4, 2, 3))), 1)
    x = B.tensor(np.ones((1, 3)), requires_grad=True)
    f(x).sum().backward()
    rec("x.grad", x.grad)


@CUSTOM.add("10.3 other dtype is cast to the input's")
def _(B, rec):
    f = B.custom("F3", _clone, lambda B, g: g.to(B.float64) * 2, 1)
    x = B.tensor(np.ones(2), requires_grad=True, dtype=B.float32)
    f(x).sum().backward()
    rec("x.grad", x.grad)


@CUSTOM.add("10.4 wrong number of grads")
def _(B, rec):
    f = B.custom("F4", np.multiply, lambda B, g: (g,), 2)
    x = B.tensor(np.ones(2), requires_grad=True)
    f(x, x).sum().backward()


@CUSTOM.add("10.4b None for an input that requires grad")
def _(B, rec):
    f = B.custom("F5", np.multiply, lambda B, g: (g * 2, None), 2)
    x = B.tensor(np.ones(2), requires_grad=True)
    w = B.tensor(np.ones(2), requires_grad=True)
    f(x, w).sum().backward()
    rec("x.grad", x.grad)
    rec("w.grad", w.grad)


# ---------------------------------------------------------------- float32 path

_F32_OPS = [
    ("x*2", lambda B, x: x * 2),
    ("2*x", lambda B, x: 2 * x),
    ("x*x", lambda B, x: x * x),
    ("x/3", lambda B, x: x / 3),
    ("1/x", lambda B, x: 1 / x),
    ("x+1.5", lambda B, x: x + 1.5),
    ("1-x", lambda B, x: 1 - x),
    ("x+int", lambda B, x: x + 2),
    ("-x", lambda B, x: -x),
    ("exp", lambda B, x: x.exp()),
    ("log", lambda B, x: x.log()),
    ("sqrt", lambda B, x: x.sqrt()),
    ("sigmoid", lambda B, x: x.sigmoid()),
    ("tanh", lambda B, x: x.tanh()),
    ("sin", lambda B, x: x.sin()),
    ("relu", lambda B, x: x.relu()),
    ("abs", lambda B, x: x.abs()),
    ("clamp", lambda B, x: x.clamp(min=0.6, max=2.0)),
    ("leaky_relu", lambda B, x: B.leaky_relu(x - 1, negative_slope=0.1)),
    ("x**2", lambda B, x: x**2),
    ("x**0.5", lambda B, x: x**0.5),
    ("x**tensor32", lambda B, x: x ** B.tensor(1.5, dtype=B.float32)),
    ("2**x", lambda B, x: B.pow(2.0, x)),
    ("maximum", lambda B, x: B.maximum(x, B.tensor([1.0, 1.0, 1.0], dtype=B.float32))),
    ("where", lambda B, x: B.where(x > 1, x, x * 3)),
    ("where(.., 0.)", lambda B, x: B.where(x > 1, x, B.tensor(0.0, dtype=B.float32))),
    ("sum", lambda B, x: x.sum()),
    ("sum(dim)", lambda B, x: x.reshape(3, 1).sum(0)),
    ("reshape", lambda B, x: x.reshape(1, 3)),
    ("expand", lambda B, x: x.expand(2, 3)),
    ("x * 0-d float64", lambda B, x: x * B.tensor(3.0)),
    ("x + 0-d float64", lambda B, x: x + B.tensor(3.0)),
    ("x * float64 vector", lambda B, x: x * B.tensor([1.0, 2.0, 3.0])),
    ("mean", lambda B, x: x.mean(), ("mean",)),
    ("amax", lambda B, x: x.amax(), ("amax",)),
    ("softmax", lambda B, x: x.softmax(0) * B.tensor([1.0, 2.0, 3.0], dtype=B.float32), ("softmax",)),
    ("x[1:]", lambda B, x: x[1:], ("index",)),
    ("cat", lambda B, x: B.cat([x, x * 2]), ("cat",)),
    ("x @ v32", lambda B, x: x @ B.tensor([1.0, -2.0, 3.0], dtype=B.float32), ("matmul",)),
]

for _id, _op, *_needs in _F32_OPS:

    def _f32(B, rec, op=_op):
        x = B.tensor([0.5, 1.25, 2.0], requires_grad=True, dtype=B.float32)
        y = op(B, x)
        rec("y", y)
        y.sum().backward()
        rec("x.grad", x.grad)

    F32.add(f"float32 {_id}", _f32, needs=_needs[0] if _needs else ())


@F32.add("float32 double backward")
def _(B, rec):
    x = B.tensor([0.5, 1.25, 2.0], requires_grad=True, dtype=B.float32)
    y = (x**3 * x.exp()).sum()
    (g,) = B.grad(y, x, create_graph=True)
    rec("g", g)
    (h,) = B.grad(g.sum(), x)
    rec("h", h)


@F32.add("float32 implicit seed and accumulation")
def _(B, rec):
    x = B.tensor([0.5, 1.25, 2.0], requires_grad=True, dtype=B.float32)
    y = (x * x).sum()
    rec("y", y)
    y.backward(retain_graph=True)
    y.backward(B.tensor(0.1))
    rec("x.grad", x.grad)


# --------------------------------------------------------------------------------------
# The tests: one per table
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", BCAST.rows)
def test_broadcasting(scenario):
    assert_same_behaviour(scenario)


@pytest.mark.parametrize("scenario", KINKS.rows)
def test_kinks_and_singular_points(scenario):
    assert_same_behaviour(scenario)


@pytest.mark.parametrize("scenario", CUSTOM.rows)
def test_gradients_returned_by_backward_functions(scenario):
    assert_same_behaviour(scenario)


@pytest.mark.parametrize("scenario", F32.rows)
def test_float32_path(scenario):
    assert_same_behaviour(scenario)
