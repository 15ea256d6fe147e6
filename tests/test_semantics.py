"""gradspec's engine against torch 2.13, rule by rule: §1 implicit seed; §2 explicit seed.

The scenarios, the two backends and the comparison are described in ``tests/_semantics_harness.py``
(each scenario runs on gradspec and on torch; the two logs must be equal)."""

from __future__ import annotations

import numpy as np
import pytest

from tests._semantics_harness import (
    GS,
    IMPLICIT,
    SEED,
    TORCH,
    assert_same_behaviour,
)

# ---------------------------------------------------------------- §1 implicit seed


@IMPLICIT.add("1.1 0-d output")
def _(B, rec):
    x = B.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    rec("y.shape", y.shape)
    rec("x.grad", x.grad)


for _shape in [(1,), (1, 1), (1, 1, 1)]:

    def _implicit_ok(B, rec, shape=_shape):
        x = B.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = (x * x).sum().reshape(shape)
        y.backward()
        rec("y.shape", y.shape)
        rec("x.grad", x.grad)

    IMPLICIT.add(f"1.2-3 numel-1 shape {_shape}", _implicit_ok)


for _shape, _dt in [((1, 1), "float64"), ((), "float64"), ((1,), "float32")]:

    def _implicit_is_ones_like(B, rec, shape=_shape, dt=_dt):
        x = B.tensor([1.0, 2.0], requires_grad=True, dtype=getattr(B, dt))
        y = x.sum().reshape(shape)
        (seed,) = B.grad(y, y)
        rec("seed", seed)

    IMPLICIT.add(f"1.4 seed is ones_like(out) {_shape} {_dt}", _implicit_is_ones_like)


@IMPLICIT.add("1.5 numel>1 -> error")
def _(B, rec):
    x = B.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * 2).backward()


@IMPLICIT.add("1.6 numel 0 -> error")
def _(B, rec):
    x = B.tensor(np.zeros(0), requires_grad=True)
    y = x * 2
    rec("y.shape", y.shape)
    rec("y.numel", y.numel())
    y.backward()


@IMPLICIT.add("1.6 numel 0 2-d -> error")
def _(B, rec):
    x = B.tensor(np.zeros((0, 3)), requires_grad=True)
    (x * 2).backward()


@IMPLICIT.add("1.6b sum of empty is 0-d: grad has the empty shape")
def _(B, rec):
    x = B.tensor(np.zeros((0, 3)), requires_grad=True)
    y = x.sum()
    y.backward()
    rec("y", y)
    rec("x.grad", x.grad)


@IMPLICIT.add("1.7 complex scalar output -> error")
def _(B, rec):
    z = B.tensor(1 + 2j, requires_grad=True)
    y = z * z
    rec("y.dtype", y.dtype)
    rec("y.numel", y.numel())
    y.backward()


@IMPLICIT.add("1.7 complex leaf itself -> error")
def _(B, rec):
    z = B.tensor([1 + 2j], requires_grad=True)
    z.backward()


@IMPLICIT.add("1.8 int output (cast) does not require grad")
def _(B, rec):
    x = B.tensor([1.5, 2.5], requires_grad=True)
    n = x.sum().to(B.int64)
    rec("n", n)
    rec("n.grad_fn is None", n.grad_fn is None)
    n.backward()


@IMPLICIT.add("1.8b bool output (comparison), numel 2: 'does not require grad' wins over the implicit-seed error")
def _(B, rec):
    x = B.tensor([1.5, 2.5], requires_grad=True)
    b = x > 0
    rec("b", b)
    b.backward()


@IMPLICIT.add("1.8c int leaf")
def _(B, rec):
    B.tensor(3).backward()


@IMPLICIT.add("1.9 float constant")
def _(B, rec):
    B.tensor(2.0).backward()


@IMPLICIT.add("1.9b computed under no_grad")
def _(B, rec):
    x = B.tensor(2.0, requires_grad=True)
    with B.no_grad():
        y = x * 3
    rec("y", y)
    rec("y.grad_fn is None", y.grad_fn is None)
    rec("y.is_leaf", y.is_leaf)
    y.backward()


@IMPLICIT.add("1.9c several roots: index names the offending root")
def _(B, rec):
    x = B.tensor(2.0, requires_grad=True)
    rec.raises("[x*3, const]", lambda: B.backward([x * 3, B.tensor(1.0)]))
    rec.raises("[const, x*3]", lambda: B.backward([B.tensor(1.0), x * 3]))
    with B.no_grad():
        y = x * 4
    rec.raises("[x*3, x*5, no_grad]", lambda: B.backward([x * 3, x * 5, y]))
    rec.raises("[x*3, x*5, x*6, int]", lambda: B.backward([x * 3, x * 5, x * 6, B.tensor(7)]))
    rec("x.grad (not atomic?)", x.grad)


@IMPLICIT.add("1.9d explicit seed does not help")
def _(B, rec):
    t = B.tensor(np.ones(3))
    t.backward(B.tensor(np.ones(3)))


@IMPLICIT.add("1.10 backward on a scalar leaf")
def _(B, rec):
    x = B.tensor(2.0, requires_grad=True)
    x.backward()
    rec("x.grad", x.grad)


@IMPLICIT.add("1.10 backward on a vector leaf with a seed")
def _(B, rec):
    x = B.tensor([2.0, 3.0], requires_grad=True)
    x.backward(B.tensor([5.0, 7.0]))
    rec("x.grad", x.grad)


@IMPLICIT.add("backward inside no_grad still computes grads")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    with B.no_grad():
        y.backward()
    rec("x.grad", x.grad)


@IMPLICIT.add("backward(create_graph=True) inside no_grad builds a graph")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x * x).sum()
    with B.no_grad():
        y.backward(create_graph=True)
    rec("x.grad", x.grad)


# ---------------------------------------------------------------- §2 explicit seed


@SEED.add("2.1 seed shape (3,2) vs output (2,3)")
def _(B, rec):
    x = B.tensor(np.ones((2, 3)), requires_grad=True)
    (x * 2).backward(B.tensor(np.ones((3, 2))))


for _shape in [(3,), (1, 3), (), (1, 2, 3), (2, 1), (6,)]:

    def _seed_broadcastable(B, rec, shape=_shape):
        x = B.tensor(np.ones((2, 3)), requires_grad=True)
        y = x * 2
        rec.raises("tensor seed", lambda: y.backward(B.tensor(np.ones(shape)), retain_graph=True))
        rec.raises("array seed", lambda: y.backward(B.seed(np.ones(shape)), retain_graph=True))
        rec("x.grad", x.grad)

    SEED.add(f"2.2 broadcastable seed {_shape} rejected", _seed_broadcastable)


@SEED.add("2.3 0-d output, (1,) seed")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    (x * 2).sum().backward(B.tensor(np.ones(1)))


@SEED.add("2.3 (1,) output, 0-d seed")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    (x * 2).sum().reshape(1).backward(B.tensor(1.0))


@SEED.add("2.3c mismatch at list position 1")
def _(B, rec):
    x = B.tensor(np.ones(1), requires_grad=True)
    y1, y2 = x * 2, x * 3
    B.backward([y1, y2], [B.tensor([5.0]), B.tensor(np.ones((1, 1)))])


@SEED.add("2.4 float32 seed on float64 output: cast up")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    y = x * 3
    y.retain_grad()
    y.backward(B.tensor([1.0, 2.0], dtype=B.float32))
    rec("y.grad", y.grad)
    rec("x.grad", x.grad)


@SEED.add("2.4b float64 seed on float32 output: cast down")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True, dtype=B.float32)
    y = x * 3
    y.retain_grad()
    y.backward(B.tensor([0.1, 0.2]))
    rec("y.grad", y.grad)
    rec("x.grad", x.grad)


@SEED.add("2.4c float32 numpy seed on float64 output")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    (x * 3).backward(B.seed([0.1, 0.2], dtype=B.float32))
    rec("x.grad", x.grad)


@SEED.add("2.5 int seed")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    y = x * 3
    y.retain_grad()
    y.backward(B.tensor([1, 2]))
    rec("y.grad", y.grad)
    rec("x.grad", x.grad)


@SEED.add("2.5 int seed on float32 output")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True, dtype=B.float32)
    (x * 3).backward(B.tensor([1, 2]))
    rec("x.grad", x.grad)


@SEED.add("2.5b bool seed")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    (x * 3).backward(B.tensor([True, False]))
    rec("x.grad", x.grad)


@SEED.add("2.6 complex seed on real output")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    (x * 3).backward(B.tensor(np.ones(2, dtype=np.complex128)))


@SEED.add("2.6 complex seed on float32 output")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True, dtype=B.float32)
    (x * 3).backward(B.tensor(np.ones(2, dtype=np.complex128)))


@SEED.add("2.6b real seed on complex output")
def _(B, rec):
    z = B.tensor(np.ones(2, dtype=np.complex128), requires_grad=True)
    (z * 3).backward(B.tensor(np.ones(2)))


@SEED.add("2.8 seed requiring grad, create_graph=False")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    g = B.tensor([1.0, 2.0], requires_grad=True)
    (x * 3).backward(g)
    rec("x.grad", x.grad)
    rec("g.grad", g.grad)


@SEED.add("2.8b seed requiring grad, create_graph=True")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    g = B.tensor([1.0, 2.0], requires_grad=True)
    (x * 3).backward(g, create_graph=True)
    rec("x.grad", x.grad)
    x.grad.sum().backward()
    rec("g.grad", g.grad)
    rec("x.grad after", x.grad)


@SEED.add("2.9 zeros seed -> zeros grad, not None")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    (x * 2).backward(B.tensor(np.zeros(3)))
    rec("x.grad", x.grad)


@SEED.add("2.9 zeros seed through a leaf-only root")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    x.backward(B.tensor(np.zeros(3)))
    rec("x.grad", x.grad)


_NAN = float("nan")


@SEED.add("2.10 NaN seed through mul (x*2, x*0)")
def _(B, rec):
    x = B.tensor(np.ones(3), requires_grad=True)
    (x * 2).backward(B.tensor([_NAN, 1.0, 1.0]))
    rec("x*2", x.grad)
    x.grad = None
    (x * 0).backward(B.tensor([_NAN, 1.0, 1.0]))
    rec("x*0", x.grad)


@SEED.add("2.10b NaN seed through relu")
def _(B, rec):
    x = B.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    B.relu(x).backward(B.tensor([_NAN, _NAN, _NAN]))
    rec("x.grad", x.grad)


@SEED.add("2.10c NaN seed through where")
def _(B, rec):
    a = B.tensor(np.ones(3), requires_grad=True)
    b = B.tensor(np.ones(3), requires_grad=True)
    B.where(B.tensor([True, False, True]), a, b).backward(B.tensor([_NAN, _NAN, _NAN]))
    rec("a.grad", a.grad)
    rec("b.grad", b.grad)


@SEED.add("2.10 NaN seed through clamp/abs/leaky_relu")
def _(B, rec):
    x = B.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    s = B.tensor([_NAN, _NAN, _NAN])
    x.clamp(min=0.5).backward(s)
    rec("clamp", x.grad)
    x.grad = None
    x.abs().backward(s)
    rec("abs", x.grad)
    x.grad = None
    B.leaky_relu(x, negative_slope=0.1).backward(s)
    rec("leaky_relu", x.grad)


for _id, _seed in [("bare float", 1.0), ("bare int", 1), ("bare bool", True)]:

    def _bare_number(B, rec, seed=_seed):
        x = B.tensor(np.ones(2), requires_grad=True)
        (x * 2).sum().backward(seed)

    SEED.add(f"2.11 seed a {_id} -> TypeError", _bare_number)


@SEED.add("2.11 seed a list of floats -> TypeError")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    (x * 2).backward([1.0, 1.0])


@SEED.add("2.11 grad_tensors list with a float -> TypeError")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    B.backward([(x * 2).sum()], [2.0])


@SEED.add("2.11 grad_tensors list with a str -> TypeError")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    B.backward([(x * 2).sum()], ["1"])


@SEED.add("2.12 fewer seeds than roots")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    B.backward([x * 2, x * 3], [B.tensor(np.ones(2))])


@SEED.add("2.12 one tensor seed for two roots")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    B.backward([x * 2, x * 3], B.tensor(np.ones(2)))


@SEED.add("2.12 empty seed list for one root")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    B.backward([(x * 2).sum()], [])


@SEED.add("2.12b more seeds silently dropped")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    B.backward([x * 2], [B.tensor(np.ones(2)), B.tensor(np.full(2, 100.0))])
    rec("x.grad", x.grad)


@SEED.add("2.12b extra seed is not even validated")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    B.backward([x * 2], [B.tensor(np.ones(2)), 3.0])
    rec("x.grad", x.grad)


@SEED.add("2.13 None entries per root")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    s, v = (x * 2).sum(), x * 3
    B.backward([s, v], [None, B.tensor([1.0, 10.0])])
    rec("x.grad", x.grad)


@SEED.add("2.13 None entry for a non-scalar root -> error")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    B.backward([(x * 2).sum(), x * 3], [None, None])


@SEED.add("2.13 None seed for a root that does not require grad")
def _(B, rec):
    x = B.tensor(np.ones(2), requires_grad=True)
    B.backward([(x * 2).sum(), B.tensor(np.ones(3))], [None, None])


@SEED.add("2.14 scalar seed scales")
def _(B, rec):
    x = B.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward(B.tensor(3.0))
    rec("x.grad", x.grad)


@SEED.add("2.14 numpy seed (gradspec contract) equals a tensor seed")
def _(B, rec):
    x = B.tensor(np.ones((2, 3)), requires_grad=True)
    (x * x).backward(B.seed([[1.0, 2, 3], [4, 5, 6]]))
    rec("x.grad", x.grad)


@SEED.add("3.1 x.grad = J^T . seed for mm", needs=("matmul",))
def _(B, rec):
    x = B.tensor(np.ones((2, 3)), requires_grad=True)
    a = B.tensor(np.ones((3, 4)), requires_grad=True)
    (x @ a).backward(B.tensor([[1.0, 2, 3, 4], [5, 6, 7, 8]]))
    rec("x.grad", x.grad)
    rec("a.grad", a.grad)


# --------------------------------------------------------------------------------------
# The tests: one per table
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", IMPLICIT.rows)
def test_implicit_seed(scenario):
    assert_same_behaviour(scenario)


@pytest.mark.parametrize("scenario", SEED.rows)
def test_explicit_seed(scenario):
    assert_same_behaviour(scenario)


# ---------------------------------------------------------------- the harness itself can fail


def test_harness_detects_a_difference():
    """A scenario that behaves differently on the two backends must fail the comparison."""

    def differs(B, rec):
        x = B.tensor([1.0, 2.0], requires_grad=True)
        (x * (3 if B is GS else 4)).sum().backward()
        rec("x.grad", x.grad)

    with pytest.raises(AssertionError, match="x.grad"):
        assert_same_behaviour(differs)


def test_harness_detects_a_different_message():
    def differs(B, rec):
        raise RuntimeError("a" if B is GS else "b")

    with pytest.raises(AssertionError):
        assert_same_behaviour(differs)


def test_harness_detects_a_missing_warning():
    def differs(B, rec):
        x = B.tensor([1.0], requires_grad=True)
        y = x * 2
        rec("y.grad", y.grad if B is TORCH else None)

    with pytest.raises(AssertionError):
        assert_same_behaviour(differs)
