"""gradspec's engine against torch 2.13, rule by rule: §4 accumulation; §5 freeing.

The scenarios, the two backends and the comparison are described in ``tests/_semantics_harness.py``
(each scenario runs on gradspec and on torch; the two logs must be equal)."""

from __future__ import annotations

import numpy as np
import pytest

from tests._semantics_harness import (
    ACCUM,
    FREE,
    assert_same_behaviour,
)

# ---------------------------------------------------------------- §4 accumulation


@ACCUM.add("4.1 None before backward")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    rec("x.grad", x.grad)
    rec("x.is_leaf", x.is_leaf)


@ACCUM.add("4.2 repeated backward adds")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    for i in range(3):
        (x * x).sum().backward()
        rec(f"x.grad after {i + 1}", x.grad)


@ACCUM.add("4.3 every use of a leaf (x*x + x, x + x)")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    (x * x + x).sum().backward()
    rec("x*x+x", x.grad)
    x.grad = None
    (x + x).sum().backward()
    rec("x+x", x.grad)


@ACCUM.add("4.3 fan-out through an intermediate")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    h = x.exp()
    y = (h * h + h.sin() * x - h).sum()
    y.backward()
    rec("x.grad", x.grad)


@ACCUM.add("4.4 different seeds on a retained graph add up")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    y.backward(B.tensor([1.0, 0.0]), retain_graph=True)
    rec("first", x.grad)
    y.backward(B.tensor([0.0, 1.0]))
    rec("second", x.grad)


@ACCUM.add("4.5 several roots: sum of VJPs")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    y1, y2 = x * x, x * 10
    B.backward([y1, y2], [B.tensor([1.0, 1.0]), B.tensor([2.0, 3.0])])
    rec("x.grad", x.grad)


@ACCUM.add("4.5 the same root twice counts twice")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    y = x * 5
    B.backward([y, y], [B.tensor([1.0, 1.0]), B.tensor([2.0, 3.0])])
    rec("x.grad", x.grad)


@ACCUM.add("4.5 the same scalar root twice, implicit seeds")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    B.backward((y, y))
    rec("x.grad", x.grad)


@ACCUM.add("4.5 a leaf as root next to a computed root")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    B.backward([x, x * 3], [B.tensor([1.0, 1.0]), B.tensor([1.0, 2.0])])
    rec("x.grad", x.grad)


@ACCUM.add("4.5 roots sharing a subgraph")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    h = x * x
    B.backward([h.sum(), (h * 3).sum(), h], [None, None, B.tensor([1.0, -1.0])])
    rec("x.grad", x.grad)


@ACCUM.add("4.6 autograd.grad returns a tuple, never touches .grad")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    g = B.grad((x * x).sum(), x)
    rec("type", type(g).__name__)
    rec("g", g)
    rec("x.grad", x.grad)


@ACCUM.add("4.6 autograd.grad does not add to an existing .grad")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    g1 = x.grad
    g = B.grad((x * x).sum(), [x])
    rec("g", g)
    rec("x.grad", x.grad)
    rec("same object", x.grad is g1)


@ACCUM.add("4.7 x.grad = None resets")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    (x * x).sum().backward()
    rec("twice", x.grad)
    x.grad = None
    rec("reset", x.grad)
    (x * x).sum().backward()
    rec("fresh", x.grad)


@ACCUM.add("4.7 del x.grad resets")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    del x.grad
    rec("reset", x.grad)
    (x * 3).sum().backward()
    rec("fresh", x.grad)


@ACCUM.add("4.7b zero_grad(set_to_none=False) zeroes in place, default -> None")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    g = x.grad
    B.zero_grad(x, set_to_none=False)
    rec("zeroed", x.grad)
    rec("same object", x.grad is g)
    (x * 3).sum().backward()
    rec("after next backward", g)
    B.zero_grad(x, set_to_none=True)
    rec("None", x.grad)


@ACCUM.add("4.8 accumulation is in place (same object)")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    (x * 2).sum().backward()
    g1 = x.grad
    (x * 2).sum().backward()
    rec("same object", x.grad is g1)
    rec("g1", g1)


@ACCUM.add("4.8b create_graph accumulation makes a new object")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    (x * 2).sum().backward()
    g1 = x.grad
    (x * x).sum().backward(create_graph=True)
    rec("same object", x.grad is g1)
    rec("g1", g1)
    rec("x.grad", x.grad)


@ACCUM.add("4.8b create_graph on the first write, then a plain one")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    (x * x).sum().backward(create_graph=True)
    g1 = x.grad
    rec("first", g1)
    (x * 2).sum().backward()
    rec("same object", x.grad is g1)
    rec("x.grad", x.grad)


@ACCUM.add("4.9 a user-assigned buffer is mutated")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    buf = B.tensor(np.zeros(3))
    x.grad = buf
    (x * 2).sum().backward()
    rec("same object", x.grad is buf)
    rec("buf", buf)


@ACCUM.add("4.9 an assigned buffer that requires grad")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    buf = B.tensor(np.zeros(3), requires_grad=True)
    x.grad = buf
    rec("x.grad", x.grad)


@ACCUM.add("4.10 first .grad never aliases the seed (leaf root)")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    g = B.tensor([1.0, 2.0, 3.0])
    x.backward(g)
    rec("same object", x.grad is g)
    B.scale_(g, 100)
    rec("x.grad", x.grad)


@ACCUM.add("4.10 first .grad never aliases the seed (through add, mul by 1)")
def _(B, rec):
    # (Not through reshape/view: there torch's .grad is a view of the seed's storage, because
    # AccumulateGrad steals the view it receives; gradspec always copies, see the module notes.)
    x = B.tensor(np.ones(3), requires_grad=True)
    g = B.tensor([1.0, 2.0, 3.0])
    (x + 1).backward(g)
    B.scale_(g, 100)
    rec("via add", x.grad)
    x.grad = None
    g = B.tensor([1.0, 2.0, 3.0])
    (x * 1).backward(g)
    B.scale_(g, 100)
    rec("via mul", x.grad)


@ACCUM.add("4.10 first .grad never aliases a numpy seed")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    g = B.seed([1.0, 2.0, 3.0])
    x.backward(g)
    B.scale_(g, 100)
    rec("x.grad", x.grad)


@ACCUM.add("4.10 retained root grad does not alias the seed")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    y = x * 2
    y.retain_grad()
    g = B.tensor([1.0, 2.0, 3.0])
    y.backward(g)
    B.scale_(g, 100)
    rec("y.grad", y.grad)
    rec("x.grad", x.grad)


@ACCUM.add("4.x accumulating inf then -inf gives nan, silently")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    (x * B.tensor([float("inf"), 1.0])).sum().backward()
    (x * B.tensor([float("-inf"), 1.0])).sum().backward()
    rec("x.grad", x.grad)


@ACCUM.add("4.x gradients of one leaf from several branches are summed before accumulating")
def _(B, rec):
    x = B.tensor([1e16, 1.0], requires_grad=True)
    x.grad = B.tensor([1.0, 0.0])
    # .grad + (g1 + g2) and (.grad + g1) + g2 differ in float64 here.
    (x * B.tensor([1e16, 1.0]) + x * B.tensor([-1e16, 1.0])).sum().backward()
    rec("x.grad", x.grad)


@ACCUM.add("4.11 assign wrong shape")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    x.grad = B.tensor(np.zeros(2))


@ACCUM.add("4.11 assign wrong dtype (float32 leaf, float64 grad)")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True, dtype=B.float32)
    x.grad = B.tensor(np.zeros(3))


@ACCUM.add("4.11 assign wrong dtype (float64 leaf, float32 grad)")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    x.grad = B.tensor(np.zeros(3), dtype=B.float32)


@ACCUM.add("4.11 assign wrong dtype (float64 leaf, int grad)")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    x.grad = B.tensor([0, 0, 0])


@ACCUM.add("4.11 assign wrong shape and dtype")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    x.grad = B.tensor(np.zeros(2), dtype=B.float32)


@ACCUM.add("4.11d assign a list")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    x.grad = [0.0, 0.0, 0.0]


@ACCUM.add("4.11d assign a float")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    x.grad = 0.0


@ACCUM.add("4.11f assign broadcastable (1,)")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    x.grad = B.tensor(np.zeros(1))


@ACCUM.add("4.11 assign to a leaf that does not require grad, then backward elsewhere")
def _(B, rec):
    c = B.tensor(np.ones(3))
    c.grad = B.tensor([1.0, 2.0, 3.0])
    rec("c.grad", c.grad)
    x = B.tensor(np.ones(3), requires_grad=True)
    (x * c).sum().backward()
    rec("c.grad after", c.grad)


@ACCUM.add("4.13 .grad dtype is the leaf's dtype")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True, dtype=B.float32)
    w = B.tensor(np.ones(2), requires_grad=True)
    y = (x.to(B.float64) * 2 + x * w).sum()
    rec("y.dtype", y.dtype)
    y.backward()
    rec("x.grad", x.grad)
    rec("w.grad", w.grad)


# ---------------------------------------------------------------- §5 freeing

_FREEING = [
    # (id, op, needs): the op applied to x = [1., 2.] before .sum()
    ("x*x", lambda B, x: x * x, ()),
    ("x*2", lambda B, x: x * 2, ()),
    ("2*x", lambda B, x: 2 * x, ()),
    ("x/2", lambda B, x: x / 2, ()),
    ("2/x", lambda B, x: 2 / x, ()),
    ("x**2", lambda B, x: x**2, ()),
    ("x**1", lambda B, x: x**1, ()),
    ("x**tensor", lambda B, x: x ** B.tensor(2.0), ()),
    ("relu", lambda B, x: x.relu(), ()),
    ("exp", lambda B, x: x.exp(), ()),
    ("sqrt", lambda B, x: x.sqrt(), ()),
    ("sigmoid", lambda B, x: x.sigmoid(), ()),
    ("abs", lambda B, x: x.abs(), ()),
    ("clamp", lambda B, x: x.clamp(min=1.5), ()),
    ("where", lambda B, x: B.where(B.tensor([True, False]), x, B.tensor([0.0, 0.0])), ()),
    ("maximum", lambda B, x: B.maximum(x, B.tensor([1.5, 1.5])), ()),
    ("x*c", lambda B, x: x * B.tensor([3.0, 4.0]), ()),
    ("x+1", lambda B, x: x + 1, ()),
    ("x-1", lambda B, x: x - 1, ()),
    ("1-x", lambda B, x: 1 - x, ()),
    ("x+c", lambda B, x: x + B.tensor([1.0, 1.0]), ()),
    ("-x", lambda B, x: -x, ()),
    ("sum", lambda B, x: x, ()),
    ("sum(dim)", lambda B, x: x.reshape(1, 2).sum(1), ()),
    ("reshape", lambda B, x: x.reshape(2, 1), ()),
    ("view", lambda B, x: x.view(2, 1), ()),
    ("expand", lambda B, x: x.expand(3, 2), ()),
    ("x.double()", lambda B, x: x.double(), ()),
    ("x.float()", lambda B, x: x.float(), ()),
    ("mean", lambda B, x: x.mean(), ("mean",)),
    ("t", lambda B, x: x.view(1, 2).t(), ("transpose",)),
    ("x[0]", lambda B, x: x[0], ("index",)),
    ("cat", lambda B, x: B.cat([x, x]), ("cat",)),
    # Beyond the reference's list (its rule: views/joins/select/slice save nothing; index
    # tensors, inputs or outputs needed by the backward are saved).
    ("x.T", lambda B, x: x.view(1, 2).T, ("permute",)),
    ("transpose", lambda B, x: x.view(1, 2).transpose(0, 1), ("transpose",)),
    ("permute", lambda B, x: x.view(1, 2).permute(1, 0), ("permute",)),
    ("unsqueeze", lambda B, x: x.unsqueeze(0), ("unsqueeze",)),
    ("squeeze", lambda B, x: x.view(1, 2).squeeze(0), ("squeeze",)),
    ("flatten", lambda B, x: x.view(2, 1).flatten(), ("flatten",)),
    ("stack", lambda B, x: B.stack([x, x]), ("stack",)),
    ("x[0:1]", lambda B, x: x[0:1], ("index",)),
    ("x[[1, 0]]", lambda B, x: x[[1, 0]], ("index",)),
    ("index_select", lambda B, x: x.index_select(0, B.tensor([1, 0])), ("index_select",)),
    ("gather", lambda B, x: x.gather(0, B.tensor([1, 1])), ("gather",)),
    ("amax", lambda B, x: x.amax(), ("amax",)),
    ("max()", lambda B, x: x.max(), ("max",)),
    ("max(dim)", lambda B, x: x.max(dim=0)[0], ("max",)),
    ("prod", lambda B, x: x.prod(), ("prod",)),
    ("norm", lambda B, x: x.norm(), ("norm",)),
    ("std", lambda B, x: x.std(), ("std",)),
    ("softmax", lambda B, x: x.softmax(0), ("softmax",)),
    ("log_softmax", lambda B, x: x.log_softmax(0), ("log_softmax",)),
    ("logsumexp", lambda B, x: x.logsumexp(0), ("logsumexp",)),
    ("x @ v", lambda B, x: x @ B.tensor([1.0, 2.0]), ("matmul",)),
    ("mm", lambda B, x: x.view(1, 2).mm(B.tensor([[1.0], [2.0]])), ("mm",)),
]

for _id, _op, _needs in _FREEING:

    def _second_backward(B, rec, op=_op):
        x = B.tensor([1.0, 2.0], requires_grad=True)
        y = op(B, x).sum()
        y.backward()
        rec("x.grad", x.grad)
        rec.raises("second backward", y.backward)
        rec("x.grad after", x.grad)

    FREE.add(f"5.2 second backward through {_id}", _second_backward, needs=_needs)


@FREE.add("5.2 all saving-nothing ops, twice each (no new ops)")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    ys = [
        (x + 1).sum(),
        (x - 1).sum(),
        (x + B.tensor(np.ones(2))).sum(),
        (-x).sum(),
        x.sum(),
        x.view(2, 1).sum(),
        x.expand(3, 2).sum(),
    ]
    for y in ys:
        y.backward()
        y.backward()
    rec("x.grad", x.grad)


@FREE.add("5.2 all saving-nothing ops of the reference, twice each", needs=("mean", "transpose", "index", "cat"))
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    ys = [
        (x + 1).sum(),
        (x - 1).sum(),
        (x + B.tensor(np.ones(2))).sum(),
        (-x).sum(),
        x.sum(),
        x.mean(),
        x.view(2, 1).sum(),
        x.expand(3, 2).sum(),
        x.view(1, 2).t().sum(),
        x[0],
        B.cat([x, x]).sum(),
    ]
    for y in ys:
        y.backward()
        y.backward()
    rec("x.grad", x.grad)


@FREE.add("5.4 retain_graph=True keeps buffers for exactly the next call")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    rec("x.grad", x.grad)
    rec.raises("third", y.backward)


@FREE.add("5.4 retain_graph=False explicitly")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=False)
    rec.raises("second", lambda: y.backward(retain_graph=True))


@FREE.add("5.5 create_graph implies retain_graph")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(create_graph=True)
    y.backward()
    rec("x.grad", x.grad)
    rec.raises("third", y.backward)


@FREE.add("5.5 create_graph=True, retain_graph=False frees")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(create_graph=True, retain_graph=False)
    rec("x.grad", x.grad)
    rec.raises("second", y.backward)


@FREE.add("5.6 autograd.grad frees too")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    rec("g", B.grad(y, x))
    rec.raises("grad again", lambda: B.grad(y, x))
    rec.raises("backward after grad", y.backward)


@FREE.add("5.6 autograd.grad(retain_graph=True) then backward")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    rec("g", B.grad(y, x, retain_graph=True))
    y.backward()
    rec("x.grad", x.grad)


@FREE.add("5.6 autograd.grad(create_graph=True) retains")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    rec("g", B.grad(y, x, create_graph=True))
    rec("g again", B.grad(y, x))
    rec.raises("third", lambda: B.grad(y, x))


@FREE.add("5.7 failing 2nd backward is not atomic (w branch first)")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    w = B.tensor([1.0, 1.0], requires_grad=True)
    y = (x * x).sum() + (w + 1).sum()
    y.backward()
    rec("x.grad", x.grad)
    rec("w.grad", w.grad)
    rec.raises("second", y.backward)
    rec("x.grad after failure", x.grad)
    rec("w.grad after failure", w.grad)


@FREE.add("5.7 failing 2nd backward is not atomic (x*x branch first)")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    w = B.tensor([1.0, 1.0], requires_grad=True)
    y = (w + 1).sum() + (x * x).sum()
    y.backward()
    rec.raises("second", y.backward)
    rec("x.grad after failure", x.grad)
    rec("w.grad after failure", w.grad)


@FREE.add("5.7 not atomic: several saving nodes, partial progress")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    w = B.tensor([3.0, 1.0], requires_grad=True)
    u = B.tensor([0.5, 0.5], requires_grad=True)
    a = (x * x).sum()
    b = (w + 2).sum()
    c = (u.exp() + w).sum()
    y = a + b + c
    y.backward()
    rec.raises("second", y.backward)
    rec("x.grad", x.grad)
    rec("w.grad", w.grad)
    rec("u.grad", u.grad)


@FREE.add("5.8 a new graph on the same leaves works after freeing")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    h = x * x
    a = (h + 1).sum()
    a.backward()
    (x + 1).sum().backward()
    rec("x.grad", x.grad)
    (x * x).sum().backward()
    rec("x.grad 2", x.grad)


@FREE.add("5.8 a new root on a freed subgraph fails")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    h = x * x
    (h + 1).sum().backward()
    rec.raises("(h*2).sum()", lambda: (h * 2).sum().backward())
    rec("x.grad", x.grad)


@FREE.add("5.x nodes not executed (inputs=) are not freed")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    w = B.tensor([3.0, 4.0], requires_grad=True)
    y = (x * x).sum() + (w * w).sum()
    y.backward(inputs=[x])
    rec("x.grad", x.grad)
    rec("w.grad", w.grad)
    rec.raises("backward(inputs=[w])", lambda: y.backward(inputs=[w]))
    rec("w.grad after", w.grad)
    rec.raises("backward(inputs=[x]) again", lambda: y.backward(inputs=[x]))


@FREE.add("5.x autograd.grad only frees what it ran")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    w = B.tensor([3.0, 4.0], requires_grad=True)
    y = (x * x).sum() + (w * w).sum()
    rec("gx", B.grad(y, [x]))
    rec("gw", B.grad(y, [w]))
    rec.raises("gx again", lambda: B.grad(y, [x]))


# --------------------------------------------------------------------------------------
# The tests: one per table
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ACCUM.rows)
def test_accumulation(scenario):
    assert_same_behaviour(scenario)


@pytest.mark.parametrize("scenario", FREE.rows)
def test_freeing(scenario):
    assert_same_behaviour(scenario)
