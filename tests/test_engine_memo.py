"""The engine's memo of ``OpSpec.canonical`` (``engine._canonical``) answers exactly what the op's normalizer
would: params that are equal as dict keys but not the same value (1 / 1.0 / True, 0.0 / -0.0, NaN) never
share an entry, and every caller gets a dict of its own."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gradspec import engine as E
from gradspec.spec.opspec import OpSpec

# A normalizer that hands back what it was given (types included), and counts its calls.
CALLS: list = []


def _echo(shapes, **p):
    CALLS.append(p)
    return dict(p)


SPEC = OpSpec(name="memo_probe", forward=lambda x, **p: x, vjp=lambda g, x, **p: (g,), arity=1, family="test",
              normalize=_echo)

# (first params, second params): equal as dict keys, different as values
LOOKALIKES = {
    "int-vs-float": ({"a": 1}, {"a": 1.0}),
    "int-vs-bool": ({"a": 1}, {"a": True}),
    "zero-vs-negative-zero": ({"a": 0.0}, {"a": -0.0}),
    "tuple-int-vs-tuple-bool": ({"a": (1, 0)}, {"a": (True, False)}),
    "nan-then-nan": ({"a": math.nan}, {"a": math.nan}),
}


def _same(a: dict, b: dict) -> bool:
    # same keys, and each value of the same type and bits (repr tells -0.0 and nan apart, as == does not)
    return list(a) == list(b) and all(type(a[k]) is type(b[k]) and repr(a[k]) == repr(b[k]) for k in a)


@pytest.mark.parametrize("first,second", LOOKALIKES.values(), ids=list(LOOKALIKES))
def test_lookalike_params_are_normalized_apart(first, second):
    E._CANON.clear()
    shapes = [(2,)]
    assert _same(E._canonical(SPEC, shapes, first), first)
    assert _same(E._canonical(SPEC, shapes, second), second)


def test_each_caller_gets_its_own_dict_and_the_normalizer_runs_once():
    E._CANON.clear()
    CALLS.clear()
    got = E._canonical(SPEC, [(3,)], {"dim": (-1,), "keepdim": False})
    got["dim"] = "edited by the caller"
    again = E._canonical(SPEC, [(3,)], {"dim": (-1,), "keepdim": False})
    assert again == {"dim": (-1,), "keepdim": False}
    assert len(CALLS) == 1  # the second call was answered from the memo


def test_other_shapes_are_other_entries():
    E._CANON.clear()
    CALLS.clear()
    E._canonical(SPEC, [(3,)], {"k": 1})
    E._canonical(SPEC, [(4,)], {"k": 1})
    assert len(CALLS) == 2


def test_unhashable_params_are_normalized_every_time():
    E._CANON.clear()
    CALLS.clear()
    for _ in range(2):
        assert E._canonical(SPEC, [(3,)], {"k": [1, 2]}) == {"k": [1, 2]}
    assert len(CALLS) == 2 and not E._CANON


def test_an_op_through_the_engine_keeps_the_sign_of_zero():
    # leaky_relu(x, slope) at x < 0 is x * slope: slope 0.0 then -0.0 must give -0.0 then +0.0 (signbit)
    x = E.tensor(np.array([-2.0]))
    first = E.call("leaky_relu", x, negative_slope=0.0).numpy()
    second = E.call("leaky_relu", x, negative_slope=-0.0).numpy()
    assert np.signbit(first[0]) and not np.signbit(second[0])
