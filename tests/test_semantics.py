"""gradspec's engine reproduces torch 2.13's ``backward()`` semantics, rule for rule.

Every scenario is written ONCE, as a function ``scenario(B, rec)`` of a small backend
namespace ``B`` (``B.tensor``, ``B.backward``, ``B.grad``, ``B.no_grad``, ops...), and is run
twice: with ``B`` = gradspec and with ``B`` = torch (float64 in both, unless the scenario asks
for another dtype).  ``rec(label, value)`` records what the scenario observes (tensors: shape,
dtype, values, requires_grad, whether there is a grad_fn); ``rec.raises(label, fn)`` records
the exception type and exact ``str(e)`` of a call; warnings are recorded in order, between the
observations, with torch's build-specific "(Triggered internally at <file>:<line>.)" suffix
removed (gradspec drops it on purpose).  The two logs must be equal: no expected value or
message is written here, torch provides it at run time, so each test is a differential test
of one rule of ``/work/shared/reference/torch_backward_semantics.md`` (the section numbers in
the ids are that file's).

torch only warns ONCE per process for some messages (``TORCH_WARN_ONCE``, e.g. the
``create_graph=True`` warning); the torch backend runs with ``torch.set_warn_always(True)`` so
it warns every time, like gradspec under ``warnings.simplefilter("always")``.

Scenarios that need an op other helpers are still adding are skipped while that op is missing
from the table (``needs=...``), and run as soon as it lands.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any, Callable

import numpy as np
import pytest
import torch

import gradspec as gs
from gradspec import engine as E
from gradspec.ops import _registry
from gradspec.ops._spec import OpSpec
from tests._compare import assert_close

# --------------------------------------------------------------------------------------
# The two backends
# --------------------------------------------------------------------------------------


class _GS:
    """gradspec as a backend: ``gs.<op>`` functions, numpy dtypes."""

    name = "gradspec"
    float32, float64, int64, bool_, complex128 = np.float32, np.float64, np.int64, np.bool_, np.complex128
    Tensor = E.Tensor
    backward = staticmethod(gs.backward)
    grad = staticmethod(gs.grad)
    no_grad = staticmethod(gs.no_grad)
    enable_grad = staticmethod(gs.enable_grad)

    @staticmethod
    def tensor(data, requires_grad=False, dtype=None):
        return gs.tensor(data, requires_grad=requires_grad, dtype=dtype)

    @staticmethod
    def seed(data, dtype=None):
        """A seed as the contract allows it in gradspec: a plain numpy array."""
        return np.array(data, dtype=dtype)

    @staticmethod
    def scale_(t, k):
        if isinstance(t, np.ndarray):
            t *= k
        else:
            t.mul_(k)

    @staticmethod
    def zero_grad(x, set_to_none):
        x.zero_grad(set_to_none=set_to_none)

    @staticmethod
    def custom(name, forward, backward, arity):
        """A user op: numpy ``forward``, ``backward(B, g) -> grads`` (like an autograd.Function)."""
        spec = OpSpec(
            name=name,
            forward=forward,
            arity=arity,
            user=True,
            vjp=lambda g, *inputs, out: backward(_GS, g),
        )
        return lambda *xs: E.apply(spec, xs, {})

    def __getattr__(self, name):
        return getattr(gs, name)


class _Torch:
    """torch as a backend; float data becomes float64 (numpy's default), like gradspec."""

    name = "torch"
    float32, float64, int64, bool_, complex128 = torch.float32, torch.float64, torch.int64, torch.bool, torch.complex128
    Tensor = torch.Tensor
    backward = staticmethod(torch.autograd.backward)
    grad = staticmethod(torch.autograd.grad)
    no_grad = staticmethod(torch.no_grad)
    enable_grad = staticmethod(torch.enable_grad)
    _functional = {"leaky_relu": torch.nn.functional.leaky_relu}

    @staticmethod
    def tensor(data, requires_grad=False, dtype=None):
        return torch.tensor(np.array(data), requires_grad=requires_grad, dtype=dtype)

    @staticmethod
    def seed(data, dtype=None):
        return _Torch.tensor(data, dtype=dtype)

    @staticmethod
    def scale_(t, k):
        t.mul_(k)

    @staticmethod
    def zero_grad(x, set_to_none):
        torch.optim.SGD([x], lr=0.1).zero_grad(set_to_none=set_to_none)

    @staticmethod
    def custom(name, forward, backward, arity):
        def fwd(ctx, *xs):
            return torch.from_numpy(np.asarray(forward(*[x.detach().numpy() for x in xs])))

        def bwd(ctx, g):
            return backward(_Torch, g)

        fn = type(name, (torch.autograd.Function,), {"forward": staticmethod(fwd), "backward": staticmethod(bwd)})
        return fn.apply

    def __getattr__(self, name):
        return self._functional.get(name) or getattr(torch, name)


GS, TORCH = _GS(), _Torch()

# --------------------------------------------------------------------------------------
# Recording and comparing
# --------------------------------------------------------------------------------------

_TRIGGERED = re.compile(r" \(Triggered internally at [^\n]*\)$")


def _msg(text: str) -> str:
    return _TRIGGERED.sub("", str(text))


@dataclasses.dataclass
class _T:
    """What is compared of a tensor."""

    shape: tuple
    dtype: str
    requires_grad: bool
    has_grad_fn: bool
    values: np.ndarray

    def meta(self):
        return (self.shape, self.dtype, self.requires_grad, self.has_grad_fn)


def _dtype_name(dt) -> str:
    return str(dt).replace("torch.", "") if isinstance(dt, torch.dtype) else np.dtype(dt).name


def _norm(v):
    if isinstance(v, torch.Tensor):
        return _T(
            tuple(v.shape), _dtype_name(v.dtype), v.requires_grad, v.grad_fn is not None, v.detach().numpy().copy()
        )
    if isinstance(v, E.Tensor):
        return _T(tuple(v.shape), _dtype_name(v.dtype), v.requires_grad, v.grad_fn is not None, np.array(v.data))
    if isinstance(v, (torch.dtype, np.dtype)) or (isinstance(v, type) and issubclass(v, np.generic)):
        return ("dtype", _dtype_name(v))
    if isinstance(v, (tuple, list)):  # tuples, lists, torch.Size
        return ("seq", tuple(_norm(x) for x in v))
    if isinstance(v, np.ndarray):
        return _T(v.shape, v.dtype.name, False, False, v.copy())
    return v


class Recorder:
    def __init__(self, log: list, caught: list) -> None:
        self.log = log
        self.caught = caught
        self._seen = 0

    def _flush(self) -> None:
        for w in self.caught[self._seen :]:
            self.log.append(("warn", w.category.__name__, _msg(w.message)))
        self._seen = len(self.caught)

    def __call__(self, label: str, value: Any) -> Any:
        self._flush()
        self.log.append(("value", label, _norm(value)))
        return value

    def raises(self, label: str, fn: Callable[[], Any]) -> None:
        """Run ``fn``; record its exception (type, exact message) or that it did not raise."""
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the exception IS the observation
            self._flush()
            self.log.append(("raise", label, type(e).__name__, _msg(e)))
        else:
            self._flush()
            self.log.append(("ok", label))


def run_scenario(scenario, B) -> list:
    log: list = []
    prev = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rec = Recorder(log, caught)
            try:
                scenario(B, rec)
            except Exception as e:  # noqa: BLE001
                rec._flush()
                log.append(("raise", "<end of scenario>", type(e).__name__, _msg(e)))
            else:
                rec._flush()
    finally:
        torch.set_warn_always(prev)
    return log


def _fmt(entry) -> str:
    if entry[0] == "value" and isinstance(entry[2], _T):
        t = entry[2]
        return f"value {entry[1]!r}: {t.meta()} {t.values!r}"
    return repr(entry)


def _same_values(a: _T, b: _T, what: str) -> None:
    if np.issubdtype(b.values.dtype, np.complexfloating):
        assert_close(a.values.real, b.values.real, what=what + " (real)")
        assert_close(a.values.imag, b.values.imag, what=what + " (imag)")
    elif np.issubdtype(b.values.dtype, np.floating):
        # Same formulas, maybe another evaluation order: a few ulp (float32 kernels: ~1 ulp each).
        assert_close(a.values, b.values, what=what, rtol=1e-6 if b.values.dtype == np.float32 else 1e-12)
    else:
        assert np.array_equal(a.values, b.values), f"{what}: {a.values!r} != torch's {b.values!r}"


def _same(x, y, what: str) -> None:
    if isinstance(y, _T):
        assert isinstance(x, _T), f"{what}: gradspec gave {x!r}, torch a tensor {y.meta()}"
        assert x.meta() == y.meta(), (
            f"{what}: (shape, dtype, requires_grad, has grad_fn) gradspec {x.meta()} != torch {y.meta()}"
        )
        _same_values(x, y, what)
    elif isinstance(y, tuple) and y[:1] == ("seq",):
        assert isinstance(x, tuple) and x[:1] == ("seq",) and len(x[1]) == len(y[1]), f"{what}: {x!r} != {y!r}"
        for i, (a, b) in enumerate(zip(x[1], y[1], strict=True)):
            _same(a, b, f"{what}[{i}]")
    else:
        assert type(x) is type(y) and x == y, f"{what}: gradspec {x!r} != torch {y!r}"


def assert_same_behaviour(scenario) -> None:
    ours = run_scenario(scenario, GS)
    theirs = run_scenario(scenario, TORCH)
    assert theirs, "the scenario observed nothing"
    transcript = "\n".join(
        f"  #{i}: torch    {_fmt(t)}\n       gradspec {_fmt(o) if o is not None else '<missing>'}"
        for i, (t, o) in enumerate(zip(theirs, ours + [None] * len(theirs), strict=False))
    )
    for i, (o, t) in enumerate(zip(ours, theirs, strict=False)):  # lengths compared after
        where = f"step #{i} ({t[1]!r})"
        assert o[0] == t[0] and o[1] == t[1], f"{where}: gradspec {_fmt(o)}\n torch {_fmt(t)}\n{transcript}"
        if t[0] == "value":
            _same(o[2], t[2], where)
        else:
            assert o == t, f"{where}:\n gradspec {_fmt(o)}\n torch    {_fmt(t)}\n{transcript}"
    assert len(ours) == len(theirs), f"gradspec observed {len(ours)} steps, torch {len(theirs)}:\n{transcript}"


# --------------------------------------------------------------------------------------
# Scenario tables
# --------------------------------------------------------------------------------------


def _have(op: str) -> bool:
    return op in _registry.all_specs()


class Table:
    def __init__(self) -> None:
        self.rows: list = []

    def add(self, id: str, fn=None, *, needs: tuple = (), xfail: str | None = None):
        """Add a scenario; ``needs``: ops it uses that may not be in the table yet; ``xfail``: a
        known difference whose fix belongs in an op declaration (strict: remove it once fixed)."""

        def deco(f):
            missing = [op for op in needs if not _have(op)]
            marks = [pytest.mark.skip(reason=f"op {', '.join(missing)} not yet in the table")] if missing else []
            if xfail:
                marks.append(pytest.mark.xfail(reason=xfail, strict=True))
            self.rows.append(pytest.param(f, id=id, marks=marks))
            return f

        return deco if fn is None else deco(fn)


IMPLICIT, SEED, ACCUM, FREE, NONLEAF, INPUTS, GRAD, BCAST, KINKS, CUSTOM, F32 = (Table() for _ in range(11))

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


@pytest.mark.parametrize("scenario", IMPLICIT.rows)
def test_implicit_seed(scenario):
    assert_same_behaviour(scenario)


@pytest.mark.parametrize("scenario", SEED.rows)
def test_explicit_seed(scenario):
    assert_same_behaviour(scenario)


@pytest.mark.parametrize("scenario", ACCUM.rows)
def test_accumulation(scenario):
    assert_same_behaviour(scenario)


@pytest.mark.parametrize("scenario", FREE.rows)
def test_freeing(scenario):
    assert_same_behaviour(scenario)


@pytest.mark.parametrize("scenario", NONLEAF.rows)
def test_nonleaf_retain_requires_grad(scenario):
    assert_same_behaviour(scenario)


@pytest.mark.parametrize("scenario", INPUTS.rows)
def test_backward_inputs(scenario):
    assert_same_behaviour(scenario)


@pytest.mark.parametrize("scenario", GRAD.rows)
def test_create_graph_and_autograd_grad(scenario):
    assert_same_behaviour(scenario)


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
