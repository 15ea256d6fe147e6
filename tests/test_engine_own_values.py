"""Review F5/F7 (session 13): what the engine checks read back from an engine is the engine's OWN value.

F5: an engine may keep non-float inputs (where's condition) as plain numpy
arrays: they never take part in autograd, and gradspec never asked grad() of them before 6ce7730.
F7: an engine storing its leaves in float32 reads back rounded leaves; that is not a mutation (the forward
mutation check compared them with the float64 scenario values and blamed every rule failure on the forward).
The engines are planted (a ReferenceEngine with one change each); the expected causes come from how they were
planted, never from running gradspec.
"""

from __future__ import annotations

import numpy as np

import gradspec as gs
from gradspec import engine as E
from gradspec import rules as R
from gradspec.engines import ReferenceEngine
from gradspec.oracles.engine_oracle import EngineOracle


class NpConst(ReferenceEngine):
    """non-float inputs are kept as plain numpy arrays (no grad attribute at all)"""

    name = "npconst"

    def leaf(self, value, requires_grad=True):
        if np.asarray(value).dtype.kind != "f":
            return np.array(value, copy=True)
        return super().leaf(value, requires_grad)

    def apply(self, op, *args, **params):
        return E.call(op, *[E.tensor(a) if isinstance(a, np.ndarray) else a for a in args], **params)


class F32(ReferenceEngine):
    """the reference engine with float32 leaves, as a GPU-style engine"""

    name = "f32"

    def leaf(self, value, requires_grad=True):
        v = np.asarray(value)
        return super().leaf(v.astype(np.float32) if v.dtype.kind == "f" else v, requires_grad)


class F32NoReset(F32):
    """...and one planted bug: zero_grad does nothing"""

    name = "f32noreset"

    def zero_grad(self, leaf):
        pass


def _where_case():
    return gs.Case.build({"c": np.array([True, False, True]), "a": np.array([1.0, -2.0, 0.5]),
                          "b": np.array([3.0, 0.25, -1.0])},
                         [("y", "where", ["c", "a", "b"], {})], ["y"], [np.array([1.0, 2.0, -1.0])])


def test_an_engine_keeping_a_mask_as_a_numpy_array_is_no_discrepancy():
    # (indices are op params, never leaves: where's condition is the non-float leaf a case can hold)
    v = gs.check(_where_case(), oracles=[EngineOracle(NpConst(), name="npconst"), "reference"])
    assert v.ok, [(d.kind, d.message) for d in v.discrepancies]


def test_a_float_constant_with_a_gradient_is_still_caught_when_indices_are_plain_arrays():
    # the F3 check stays on for float leaves created with requires_grad=False
    class Leaky(NpConst):
        def grad(self, leaf):
            g = super().grad(leaf)
            return np.ones(np.shape(self.to_numpy(leaf))) if g is None else g

    case = gs.Case.build({"c": np.array([True, False, True]), "a": np.array([1.0, -2.0, 0.5]),
                          "b": np.array([3.0, 0.25, -1.0])},
                         [("y", "where", ["c", "a", "b"], {})], ["y"], [np.array([1.0, 2.0, -1.0])],
                         requires_grad={"b": False})
    v = gs.check(case, oracles=[EngineOracle(Leaky(), name="npconst"), "reference"])
    assert not v.ok and "requires_grad=False" in v.discrepancies[0].message, v


def test_a_float32_engine_ignoring_zero_grad_is_reset_ignored_not_a_mutation():
    res = R.check_rules(F32NoReset(), max_examples=15, seed=0, rules=["reset"])
    ids = [f.cause.id for f in res.findings]
    assert ids == ["reset-ignored"], [(f.rule, f.cause.id, f.cause.summary[:120]) for f in res.findings]


def test_a_correct_float32_engine_has_no_mutation_cause():
    from gradspec.rules import diagnosis as W
    from gradspec.rules.scenario import Scenario, Step

    sc = Scenario({"x": np.array([0.3, -1.1])}, [("h", "exp", ["x"], {}), ("y", "tanh", ["h"], {})],
                  [Step("backward", "y", np.array([1.0, 2.0]), retain=True), Step("backward", "y", None)])
    assert W._forward_mutation(sc, W.Context(F32(), ["exp", "tanh"])) is None
