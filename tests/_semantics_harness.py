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

__all__ = ["GS", "TORCH", "Table", "assert_same_behaviour", "IMPLICIT", "SEED", "ACCUM", "FREE", "NONLEAF", "INPUTS",
           "GRAD", "BCAST", "KINKS", "CUSTOM", "F32"]

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
