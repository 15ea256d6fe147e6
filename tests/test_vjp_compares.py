"""``OpSpec.vjp_compares``: the ops whose VJP compares values, which the rounding-noise re-run keeps exact.

``gradspec._check_noise.rounding_noise`` moves every op's output by a few ulps (a different but correct
library rounds there too), except the output of an op whose VJP compares values where a gradient flows
through it: an ulp on amax's output empties its ``x == out`` mask, and the measured "noise" would be the whole
gradient.  The declaration is one keyword in the op table; these tests hold it to what the VJPs do:

* a row per comparing op: the VJP's support moves when the value it compares moves by one ulp (the output,
  or one of two tied inputs), and the op declares it; std masks ``result == 0``, a zero that rounding inside
  its own forward (x - mean of one element) moves: with the declaration taken away the noise re-run's spread
  is the whole gradient;
* the ops with kinks that compare nothing (norm p != +-inf, var, softplus, clamp, relu) are jittered: their
  float32 rounding is part of the noise floor (``tests/known_false_alarms``: sin(norm(x)) at |x| = 568);
* a sweep over every table op on drawn float64 cases: the noise re-run's spread is rounding (below 1e-6 of
  the gradient), never a mask that flipped (one that flips to NaN, amax's empty mask dividing 0 by 0, is not in
  the spread, which skips non-finite values: the rows hold those ops).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import gradspec as gs
from gradspec import engine as E
from gradspec import strategies as gst
from gradspec._check_noise import rounding_noise
from gradspec.oracles.reference import ReferenceOracle


def _vjp(name, arrays, params, out=None):
    """The op's VJP at ``arrays`` (seed ones), with ``out`` in place of the forward's output if given."""
    spec = gs.ops.get(name)
    arrays = [np.asarray(a) for a in arrays]
    params = spec.canonical([a.shape for a in arrays], params)
    exact = np.asarray(spec.forward(*arrays, **params))
    out = exact if out is None else out(exact)
    grads = spec.vjp(E.Tensor(np.ones_like(out)), *[E.Tensor(a) for a in arrays], out=E.Tensor(out), **params)
    if isinstance(grads, E.Tensor) or grads is None:
        grads = (grads,)
    return [None if g is None else np.asarray(g.numpy() if isinstance(g, E.Tensor) else g, dtype=np.float64)
            for g in grads], params


def _ulp_away(a):
    """Every nonzero element one ulp further from zero: the noise model's multiplicative jitter, whose
    zeros stay zeros (a ``std == 0`` or ``norm == 0`` mask is not a comparison it can break)."""
    a = np.asarray(a)
    return np.where(a != 0, np.nextafter(a, np.copysign(np.inf, a)), a).astype(a.dtype)


def _support(grads):
    return [None if g is None else np.broadcast_to(g != 0, g.shape).tolist() for g in grads]


def _nudge_input(i, index):
    def nudge(arrays):
        arrays = [np.array(a, copy=True) for a in arrays]
        arrays[i][index] = np.nextafter(arrays[i][index], np.inf)
        return arrays

    return nudge


TIE = np.array([[1.0, 3.0, 3.0], [5.0, 2.0, 5.0]])
# (op, inputs, params, what moves by one ulp: "out" or a function of the inputs)
COMPARING = [
    pytest.param("amax", [[1.0, 3.0, 2.0]], {}, "out", id="amax-mask-x-eq-out"),
    pytest.param("amin", [[1.0, 3.0, 2.0]], {"dim": 0}, "out", id="amin-mask-x-eq-out"),
    pytest.param("max", [[1.0, 3.0, 2.0]], {}, "out", id="max-full-mask-x-eq-out"),
    pytest.param("min", [[1.0, 3.0, 2.0]], {}, "out", id="min-full-mask-x-eq-out"),
    pytest.param("max", [TIE], {"dim": 1}, _nudge_input(0, (0, 2)), id="max-dim-argmax"),
    pytest.param("min", [-TIE], {"dim": 1}, _nudge_input(0, (0, 1)), id="min-dim-argmin"),
    pytest.param("maximum", [[1.0, 2.0], [1.0, 0.5]], {}, _nudge_input(1, 0), id="maximum-tie"),
    pytest.param("minimum", [[1.0, 2.0], [1.0, 3.0]], {}, _nudge_input(1, 0), id="minimum-tie"),
    pytest.param("norm", [[1.0, -3.0, 2.0]], {"p": float("inf")}, "out", id="norm-inf-mask-abs-eq-out"),
    pytest.param("norm", [[1.0, -3.0, 2.0]], {"p": float("-inf")}, "out", id="norm-neg-inf-mask-abs-eq-out"),
]


@pytest.mark.parametrize("name, inputs, params, move", COMPARING)
def test_an_op_whose_vjp_compares_values_declares_it(name, inputs, params, move):
    arrays = [np.asarray(a, dtype=np.float64) for a in inputs]
    exact, canon = _vjp(name, arrays, params)
    moved = _vjp(name, arrays, params, out=_ulp_away)[0] if move == "out" else _vjp(name, move(arrays), params)[0]
    assert _support(moved) != _support(exact), "the row does not show a comparison: fix the row, not the flag"
    assert gs.ops.get(name).compares_values(canon), f"{name}'s VJP compares values: declare vjp_compares"


def _noise_jumps(case) -> bool:
    """The noise re-run's spread is more than rounding: above 1e-6 of the gradient's scale (float64 rounding,
    4 ulps amplified by a tame case's conditioning, is ~1e-13 of it: a flipped mask moves a whole element)."""
    base = ReferenceOracle().vjp(case)
    noise = rounding_noise(case)
    # (default 0: norm with p=0 has no gradient at all, None for every leaf, as torch's)
    scale = 1.0 + max((float(np.max(np.abs(g), initial=0.0)) for g in base.values() if g is not None), default=0.0)
    return any(float(np.max(n, initial=0.0)) > 1e-6 * scale for n in (noise or {}).values() if n is not None)


def test_std_masks_a_zero_its_own_rounding_moves(monkeypatch):
    # one element a slice (dim 0 of a (1, 3)): std is 0 by x - mean's exact cancellation, its gradient masked
    # to 0; jittered inside, x - mean is an ulp of x, std too, and (x - mean) / std is +-1
    case = gs.Case.build({"x": np.array([[0.25, 10.0, 8.2]])}, [("y", "std", ["x"], {"dim": 0, "correction": 0})],
                         ["y"], [np.ones(3)])
    spec = gs.ops.get("std")
    monkeypatch.setattr(spec, "vjp_compares", False)
    assert _noise_jumps(case), "the row does not show a comparison: fix the row, not the flag"
    monkeypatch.undo()
    assert spec.compares_values(case.nodes[0].params)
    assert not _noise_jumps(case)


SMOOTH_WITH_KINKS = [  # kinks or masks against constants and zeros, but no comparison an ulp on the output breaks
    pytest.param("norm", [[1.0, -3.0, 2.0]], {"p": 2.0}, id="norm-2"),
    pytest.param("norm", [[1.0, -3.0, 2.0]], {"p": 1.5}, id="norm-1.5"),
    pytest.param("norm", [[0.0, 0.0]], {"p": 2.0}, id="norm-2-zero-vector"),
    pytest.param("var", [[1.0, 3.0, 2.0]], {}, id="var"),
    pytest.param("softplus", [[1.0, 25.0]], {}, id="softplus"),
    pytest.param("clamp", [[-2.0, 0.25, 2.0]], {"min": -1.0, "max": 1.0}, id="clamp"),
    pytest.param("relu", [[-2.0, 0.0, 2.0]], {}, id="relu"),
]


@pytest.mark.parametrize("name, inputs, params", SMOOTH_WITH_KINKS)
def test_an_op_whose_vjp_only_does_arithmetic_on_its_output_is_jittered(name, inputs, params):
    arrays = [np.asarray(a, dtype=np.float64) for a in inputs]
    exact, canon = _vjp(name, arrays, params)
    moved = _vjp(name, arrays, params, out=_ulp_away)[0]
    assert _support(moved) == _support(exact)
    assert not gs.ops.get(name).compares_values(canon)


@pytest.mark.parametrize("name", gs.ops.names())
def test_the_noise_rerun_measures_rounding_on_every_table_op(name):
    seen = []

    @settings(max_examples=6, deadline=None, database=None)
    @given(gst.cases(ops=[name], min_nodes=1, max_nodes=1, max_roots=1, dtype="float64"))
    def run(case):
        seen.append(case.nodes[0].op)
        assert not _noise_jumps(case), (
            f"{case.nodes[0].op}{case.nodes[0].params}: the noise re-run moves the gradient beyond rounding; "
            "does its VJP compare values (declare vjp_compares)?")

    run()
    assert name in seen  # the sweep judged the op itself, at least once


@pytest.mark.parametrize("kink, expected", [(None, False), (lambda x: float(np.min(np.abs(x))), True)],
                         ids=["no-kink-distance", "kink-distance"])
def test_a_user_op_with_a_kink_distance_is_kept_exact(kink, expected):
    # a user's VJP cannot be read: one that declares where its kinks are is assumed to compare there
    op = gs.Op(f"u_vjpcmp_{expected}", forward=np.abs, vjp=lambda g, x, out: (g * np.sign(x),), kink_distance=kink)
    assert op.compares_values({}) is expected
