"""gradspec's engine against torch 2.13, rule by rule: §6 non-leaf grad, retain_grad, requires_grad; §7 inputs=; §7 create_graph, autograd.grad.

The scenarios, the two backends and the comparison are described in ``tests/_semantics_harness.py``
(each scenario runs on gradspec and on torch; the two logs must be equal)."""

from __future__ import annotations

import numpy as np
import pytest

from tests._semantics_harness import (
    GRAD,
    INPUTS,
    NONLEAF,
    assert_same_behaviour,
)

# ---------------------------------------------------------------- §6 non-leaf grad, retain_grad, requires_grad


@NONLEAF.add("6.1 non-leaf .grad is None with a warning")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    y = x * 2
    y.sum().backward()
    rec("y.is_leaf", y.is_leaf)
    rec("y.grad", y.grad)


@NONLEAF.add("6.1 non-leaf .grad before backward warns too")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    rec("(x*2).grad", (x * 2).grad)


@NONLEAF.add("6.1 leaf without requires_grad: .grad None, no warning")
def _(B, rec):
    c = B.tensor(np.ones(2))
    rec("c.grad", c.grad)
    with B.no_grad():
        d = B.tensor(np.ones(2), requires_grad=True) * 2
    rec("d.grad", d.grad)


@NONLEAF.add("6.2 retain_grad accumulates like a leaf")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    y = x * 2
    y.retain_grad()
    rec("retains_grad", y.retains_grad)
    rec("before", y.grad)
    y.backward(B.tensor([1.0, 5.0]), retain_graph=True)
    rec("y.grad", y.grad)
    rec("x.grad", x.grad)
    g1 = y.grad
    y.backward(B.tensor([1.0, 5.0]))
    rec("y.grad 2", y.grad)
    rec("same object", y.grad is g1)


@NONLEAF.add("6.2 retain_grad on an intermediate")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    h = x * x
    h.retain_grad()
    (h * 3 + h).sum().backward()
    rec("h.grad", h.grad)
    rec("x.grad", x.grad)


@NONLEAF.add("6.2 retain_grad with create_graph")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    h = x * x
    h.retain_grad()
    (h * h).sum().backward(create_graph=True)
    rec("h.grad", h.grad)
    rec("x.grad", x.grad)


@NONLEAF.add("6.2b retain_grad on a leaf is a no-op")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    x.retain_grad()
    rec("retains_grad", x.retains_grad)
    (x * 2).sum().backward()
    rec("x.grad", x.grad)


@NONLEAF.add("6.2b retain_grad on a tensor without grad")
def _(B, rec):
    B.tensor(np.ones(2)).retain_grad()


@NONLEAF.add("6.2b retain_grad on an int tensor")
def _(B, rec):
    B.tensor([1, 2]).retain_grad()


@NONLEAF.add("6.2c the root itself retained gets the seed, no warning")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    y = (x * 2).sum()
    y.retain_grad()
    y.backward()
    rec("y.grad", y.grad)


@NONLEAF.add("6.3 leaf without requires_grad gets no grad")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    c = B.tensor(np.ones(2))
    (x * c).sum().backward()
    rec("x.grad", x.grad)
    rec("c.grad", c.grad)
    rec("c.is_leaf", c.is_leaf)


@NONLEAF.add("6.4 detach cuts the gradient")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    (x.detach() * x).sum().backward()
    rec("x.grad", x.grad)


@NONLEAF.add("6.4b detach: leaf, no grad, shares storage")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    d = x.detach()
    rec("d", d)
    rec("d.is_leaf", d.is_leaf)
    d.add_(1)
    rec("x after d.add_(1)", x)


@NONLEAF.add("6.4b detach of a non-leaf")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    d = (x * 2).detach()
    rec("d", d)
    rec("d.is_leaf", d.is_leaf)
    d.requires_grad_()
    (d * d).sum().backward()
    rec("d.grad", d.grad)
    rec("x.grad", x.grad)


@NONLEAF.add("6.5 factory: int tensor cannot require grad")
def _(B, rec):
    B.tensor([1, 2], requires_grad=True)


@NONLEAF.add("6.5 factory: bool tensor cannot require grad")
def _(B, rec):
    B.tensor([True], requires_grad=True)


@NONLEAF.add("6.5b requires_grad_() on int and bool")
def _(B, rec):
    rec.raises("int", lambda: B.tensor([1, 2]).requires_grad_())
    rec.raises("bool", lambda: B.tensor([True]).requires_grad_())
    rec.raises("int, False", lambda: B.tensor([1, 2]).requires_grad_(False))


@NONLEAF.add("6.5b requires_grad_() on complex is allowed")
def _(B, rec):
    z = B.tensor([1 + 2j]).requires_grad_()
    rec("z.requires_grad", z.requires_grad)


@NONLEAF.add("6.5c .requires_grad = True on int")
def _(B, rec):
    t = B.tensor([1, 2], requires_grad=False)
    rec("t.requires_grad", t.requires_grad)

    def set_true():
        t.requires_grad = True

    def set_false():
        t.requires_grad = False

    rec.raises("= False", set_false)
    rec.raises("= True", set_true)


@NONLEAF.add("6.5c .requires_grad toggling on a float leaf")
def _(B, rec):
    x = B.tensor([1.0, 2.0])
    x.requires_grad = True
    rec("x", x)
    (x * 2).sum().backward()
    rec("x.grad", x.grad)
    x.requires_grad = False
    rec("x after", x)
    rec("x.grad kept", x.grad)


@NONLEAF.add("6.6 non-leaf requires_grad_(True) ok, (False) error")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    y = x * 2
    rec("requires_grad_(True) returns self", y.requires_grad_(True) is y)
    rec.raises("requires_grad_(False)", lambda: y.requires_grad_(False))

    def set_false():
        y.requires_grad = False

    def set_true():
        y.requires_grad = True

    rec.raises("requires_grad = False", set_false)
    rec.raises("requires_grad = True", set_true)


@NONLEAF.add("6.7 in-place on a leaf requiring grad")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    rec.raises("add_", lambda: x.add_(1))
    rec.raises("mul_", lambda: x.mul_(2))
    rec("x", x)


@NONLEAF.add("6.7b in-place on a leaf under no_grad (optimizer step)")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    (x * x).sum().backward()
    with B.no_grad():
        x.add_(x.grad * -0.1)
    rec("x", x)
    rec("x.is_leaf", x.is_leaf)
    (x * x).sum().backward()
    rec("x.grad", x.grad)


@NONLEAF.add("6.9 is_leaf rules")
def _(B, rec):
    a = B.tensor(np.ones(2))
    x = B.tensor(np.ones(2), requires_grad=True)
    rec("a", a.is_leaf)
    rec("a*2", (a * 2).is_leaf)
    rec("x", x.is_leaf)
    rec("x*2", (x * 2).is_leaf)
    rec("x.detach()", x.detach().is_leaf)
    rec("(x*2).grad_fn is None", (x * 2).grad_fn is None)
    rec("x.grad_fn is None", x.grad_fn is None)
    rec("a*x", a * x)
    with B.no_grad():
        rec("x*2 under no_grad", x * 2)
        with B.enable_grad():
            rec("x*2 under enable_grad", x * 2)


# ---------------------------------------------------------------- §7 inputs=


@INPUTS.add("7.1 inputs=[x]")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    w = B.tensor(np.full(2, 3.0), requires_grad=True)
    (x * w).sum().backward(inputs=[x])
    rec("x.grad", x.grad)
    rec("w.grad", w.grad)


@INPUTS.add("7.1b inputs=single tensor")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    w = B.tensor(np.full(2, 3.0), requires_grad=True)
    (x * w).sum().backward(inputs=w)
    rec("x.grad", x.grad)
    rec("w.grad", w.grad)


@INPUTS.add("7.1 inputs=tuple, via autograd.backward")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    w = B.tensor(np.full(2, 3.0), requires_grad=True)
    B.backward([(x * w).sum()], inputs=(w, x))
    rec("x.grad", x.grad)
    rec("w.grad", w.grad)


@INPUTS.add("7.2 non-leaf input populated, no warning, leaves untouched")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    h = x * 2
    (h * h).sum().backward(inputs=[h])
    rec("h.grad", h.grad)
    rec("x.grad", x.grad)


@INPUTS.add("7.2 non-leaf and leaf inputs together")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    (h * h).sum().backward(inputs=[h, x])
    rec("h.grad", h.grad)
    rec("x.grad", x.grad)


@INPUTS.add("7.2 the root as input")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.backward(B.tensor([3.0, 4.0]), inputs=[y])
    rec("y.grad", y.grad)
    rec("x.grad", x.grad)


@INPUTS.add("7.2 a non-leaf input keeps retaining its grad afterwards; its node ran (freed)")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    (h * 1.0 + h).sum().backward(inputs=[h])
    rec("h.retains_grad", h.retains_grad)
    rec("h.grad", h.grad)
    rec("x.grad", x.grad)
    rec.raises("h.sum().backward()", lambda: h.sum().backward())
    rec("h.grad after", h.grad)
    rec("x.grad after", x.grad)


@INPUTS.add("7.2 retained intermediates: only nodes that run fill their grad")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    w = B.tensor([1.0, 2.0], requires_grad=True)
    a = x * 2
    a.retain_grad()
    b = w * 3
    b.retain_grad()
    (a * b).sum().backward(inputs=[x])
    rec("a.grad", a.grad)
    rec("b.grad", b.grad)
    rec("w.grad", w.grad)
    rec.raises("b branch again (not freed)", lambda: b.sum().backward())
    rec("w.grad after", w.grad)


@INPUTS.add("7.4b retain_grad() happened on the inputs before the failing one")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    rec.raises("backward", lambda: (h * h).sum().backward(inputs=[h, B.tensor(np.ones(2))]))
    rec("h.retains_grad", h.retains_grad)
    rec("h.grad", h.grad)


@INPUTS.add("7.3 inputs=[] -> error")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    (x * 2).sum().backward(inputs=[])


@INPUTS.add("7.3 inputs=[] is checked before the seed")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    (x * 2).backward(inputs=[])


@INPUTS.add("7.4 unused input stays None")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    u = B.tensor(np.ones(2), requires_grad=True)
    (x * 2).sum().backward(inputs=[x, u])
    rec("x.grad", x.grad)
    rec("u.grad", u.grad)


@INPUTS.add("7.4b input not requiring grad -> error")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    c = B.tensor(np.ones(2))
    rec.raises("backward", lambda: (x * c).sum().backward(inputs=[x, c]))
    rec("x.grad", x.grad)


@INPUTS.add("7.4b root without grad and input without grad: which error first")
def _(B, rec):
    B.tensor(1.0).backward(inputs=[B.tensor(2.0)])


@INPUTS.add("7.4b bad seed and input without grad: which error first")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    (x * 2).backward(inputs=[B.tensor(2.0)])


# ---------------------------------------------------------------- §7 create_graph, autograd.grad


@GRAD.add("7.5 double backward with autograd.grad: 27 then 18")
def _(B, rec):
    x = B.tensor(3.0, requires_grad=True)
    (g,) = B.grad(x**3, x, create_graph=True)
    rec("g", g)
    (h,) = B.grad(g, x)
    rec("h", h)


@GRAD.add("7.5 double backward, tensor exponent and exp")
def _(B, rec):
    x = B.tensor([0.5, 1.5], requires_grad=True)
    y = (x ** B.tensor(3.0) * x.exp()).sum()
    (g,) = B.grad(y, x, create_graph=True)
    rec("g", g)
    (h,) = B.grad(g.sum(), x)
    rec("h", h)


@GRAD.add("7.5b backward(create_graph=True): .grad has a grad_fn, warning")
def _(B, rec):
    x = B.tensor(3.0, requires_grad=True)
    (x**3).backward(create_graph=True)
    rec("x.grad", x.grad)


@GRAD.add("7.5b create_graph warning comes after the root checks")
def _(B, rec):
    x = B.tensor(3.0, requires_grad=True)
    rec.raises("constant root", lambda: B.tensor(1.0).backward(create_graph=True))
    rec.raises("bad input", lambda: (x * x).backward(create_graph=True, inputs=[B.tensor(1.0)]))
    rec.raises("bad seed shape", lambda: (x * x).backward(B.tensor([1.0]), create_graph=True))
    rec.raises("autograd.grad does not warn", lambda: B.grad(x * x, x, create_graph=True))


@GRAD.add("7.5c double backward through .grad accumulates: 45")
def _(B, rec):
    x = B.tensor(3.0, requires_grad=True)
    (x**3).backward(create_graph=True)
    x.grad.backward()
    rec("x.grad", x.grad)


@GRAD.add("7.5c double backward through .grad, create_graph twice")
def _(B, rec):
    x = B.tensor(3.0, requires_grad=True)
    (x**4).backward(create_graph=True)
    g1 = x.grad
    g1.backward(create_graph=True)
    rec("x.grad", x.grad)
    rec("same object", x.grad is g1)
    rec("g1", g1)


@GRAD.add("7.5d grad of a linear function does not require grad")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    (g,) = B.grad((x * 2).sum(), x, create_graph=True)
    rec("g", g)
    B.grad(g.sum(), x)


@GRAD.add("7.5d backward(create_graph) on a linear function: .grad without grad_fn")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    (x * 2 + 1).sum().backward(create_graph=True)
    rec("x.grad", x.grad)
    x.grad.sum().backward()


@GRAD.add("7.5 create_graph with a seed that requires grad (autograd.grad)")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    v = B.tensor([3.0, 5.0], requires_grad=True)
    (g,) = B.grad(x * x, x, grad_outputs=v, create_graph=True)
    rec("g", g)
    gx, gv = B.grad(g.sum(), [x, v])
    rec("gx", gx)
    rec("gv", gv)


@GRAD.add("7.6 unused input -> error with its index")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    u = B.tensor(np.ones(2), requires_grad=True)
    rec.raises("[x, u]", lambda: B.grad((x * 2).sum(), [x, u]))
    rec.raises("[u, x]", lambda: B.grad((x * 2).sum(), [u, x]))
    rec.raises("allow_unused=False", lambda: B.grad((x * 2).sum(), [x, u], allow_unused=False))


@GRAD.add("7.6b allow_unused -> None")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    u = B.tensor(np.ones(2), requires_grad=True)
    rec("grads", B.grad((x * 2).sum(), [x, u], allow_unused=True))


@GRAD.add("7.6c materialize_grads -> zeros")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    u = B.tensor(np.ones((2, 2)), requires_grad=True)
    rec("grads", B.grad((x * 2).sum(), [x, u], materialize_grads=True))
    rec("with allow_unused=True", B.grad((x * 2).sum(), [u, x], allow_unused=True, materialize_grads=True))


@GRAD.add("7.6c materialize_grads with float32 unused input")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    u = B.tensor(np.ones(3), requires_grad=True, dtype=B.float32)
    rec("grads", B.grad((x * 2).sum(), [u], materialize_grads=True))


@GRAD.add("7.6d materialize_grads with allow_unused=False -> ValueError first")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    B.grad(x * 2, [], allow_unused=False, materialize_grads=True)


@GRAD.add("7.7 input not requiring grad")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    c = B.tensor(np.ones(2))
    B.grad((x * c).sum(), [x, c])


@GRAD.add("7.7 output and input not requiring grad: which error first")
def _(B, rec):
    B.grad(B.tensor(1.0), [B.tensor(2.0)])


@GRAD.add("7.7 output not requiring grad")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    B.grad(B.tensor(1.0), [x])


@GRAD.add("7.7b input reached only through detach counts as unused")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    w = B.tensor(np.ones(2), requires_grad=True)
    y = (x.detach() * w).sum()
    rec("allow_unused", B.grad(y, [w, x], allow_unused=True, retain_graph=True))
    B.grad(y, [w, x])


@GRAD.add("7.8 non-leaf input")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    h = x * 2
    rec("grad", B.grad((h * h).sum(), h))
    rec("x.grad", x.grad)


@GRAD.add("7.8 a non-leaf input is captured, its node does not run (not freed)")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    rec("grad", B.grad((h + 1).sum(), [h]))
    rec("h.retains_grad", h.retains_grad)
    rec.raises("h.sum().backward()", lambda: h.sum().backward())
    rec("x.grad", x.grad)


@GRAD.add("7.8 retain_grad fires during autograd.grad")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    w = B.tensor([1.0, 2.0], requires_grad=True)
    h = x * w
    h.retain_grad()
    rec("grad", B.grad((h * h).sum(), [x], retain_graph=True))
    rec("h.grad", h.grad)
    (h * 3).sum().backward(inputs=[x], retain_graph=True)
    rec("h.grad after backward(inputs=[x])", h.grad)
    (h * 5).sum().backward()
    rec("h.grad after plain backward", h.grad)


@GRAD.add("7.8 a retained non-leaf that is also a grad() input")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    h.retain_grad()
    rec("grad", B.grad((h * h).sum(), [h]))
    rec("h.grad", h.grad)
    rec("x.grad", x.grad)


@GRAD.add("7.8 grad w.r.t. the output itself")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    rec("grad", B.grad(y, [y, x], grad_outputs=B.tensor([2.0, 5.0])))


@GRAD.add("7.8 a leaf as output")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    w = B.tensor([1.0, 2.0], requires_grad=True)
    rec.raises("unused", lambda: B.grad(x, [w], grad_outputs=B.tensor([1.0, 1.0])))
    rec("itself", B.grad(x, [x, w], grad_outputs=B.tensor([1.0, 1.0]), allow_unused=True))


@GRAD.add("7.9 grad_outputs shape mismatch")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    B.grad(x * 2, x, grad_outputs=B.tensor(np.ones(3)))


@GRAD.add("7.9 grad_outputs list, several outputs")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    rec("grad", B.grad([x * x, (x * 3).sum()], [x], grad_outputs=[B.tensor([1.0, -1.0]), None]))


@GRAD.add("7.9 grad_outputs as numpy (gradspec contract)")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    rec("grad", B.grad(x * x, [x], grad_outputs=B.seed([1.0, -1.0])))


@GRAD.add("7.9 grad inputs=[]")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    B.grad(x * 2, [])


@GRAD.add("7.10 grad, non-scalar output, no grad_outputs")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    B.grad(x * 2, x)


@GRAD.add("7.x grad of a grad through a broadcast")
def _(B, rec):
    x = B.tensor([[1.0], [2.0]], requires_grad=True)
    w = B.tensor([0.5, -1.0, 2.0], requires_grad=True)
    y = (x * w * x).sum()
    gx, gw = B.grad(y, [x, w], create_graph=True)
    rec("gx", gx)
    rec("gw", gw)
    rec("hess", B.grad((gx * gx).sum() + gw.sum(), [x, w]))


# --------------------------------------------------------------------------------------
# The tests: one per table
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", NONLEAF.rows)
def test_nonleaf_retain_requires_grad(scenario):
    assert_same_behaviour(scenario)


@pytest.mark.parametrize("scenario", INPUTS.rows)
def test_backward_inputs(scenario):
    assert_same_behaviour(scenario)


@pytest.mark.parametrize("scenario", GRAD.rows)
def test_create_graph_and_autograd_grad(scenario):
    assert_same_behaviour(scenario)
