"""review15 findings 1, 2, 5, 8 on declared accuracy claims, one table row per repro (/tmp/s15/review/w).

Each row is a case with ``case.meta["accuracy"] = {"rtol": 1e-4}`` and the verdict it must get: a user op 1000x
beyond its claim never agrees (1, 5), one within its claim never disagrees (2, 8), and where the claim cannot be
sized the case is inconclusive with the reason, never agree (5).
"""

import sys
import types

import numpy as np
import pytest

import gradspec as gs
from gradspec._check_claim import claim_scale

RTOL = 1e-4
ORACLES = ["reference", "finite-differences", "jacobian"]


def _op(name, delta):
    return gs.Op(name, forward=np.exp, vjp=lambda g, x, out: (g * out * (1 + delta),))


def _split_leaf(extra):
    """test_claim_paths' split-leaf case: the op 0.1 off (1000x its claim) on x[0], x[1] a path of 1e6 beside it;
    ``extra``: one more root mm(c, p), 65 outputs, c not requiring grad (finding 1: the > 64-output branch)."""
    op = _op("r15_split_bug", 1000 * RTOL)
    leaves = {"x": np.array([0.3, 0.5])}
    nodes = [("a", "index_select", ["x"], {"dim": 0, "index": [0]}), ("u", op.name, ["a"], {}),
             ("b", "index_select", ["x"], {"dim": 0, "index": [1]}), ("w", "exp", ["b"], {})]
    roots, seeds, rg = ["u", "w"], [np.array([1.0]), np.array([1e6])], {}
    if extra:
        leaves.update(c=np.linspace(1, 2, 130).reshape(65, 2), p=np.array([[0.5], [0.25]]))
        nodes.append(("q", "mm", ["c", "p"], {}))
        roots.append("q")
        seeds.append(np.ones((65, 1)))
        rg = {"c": False}
    return gs.Case.build(leaves, nodes, roots, seeds, requires_grad=rg)


def _wide(n, delta=1000 * RTOL):
    """Finding 5: the split-leaf case with the op's input n elements wide (> COLS = 1000: the scale is not sized)."""
    op = _op(f"r15_cols_bug{int(delta * 1e4)}", delta)
    x = np.linspace(0.1, 0.5, n + 1)
    return gs.Case.build({"x": x},
                         [("a", "index_select", ["x"], {"dim": 0, "index": list(range(n))}), ("u", op.name, ["a"], {}),
                          ("b", "index_select", ["x"], {"dim": 0, "index": [n]}), ("w", "exp", ["b"], {})],
                         ["u", "w"], [np.ones(n), np.array([1e6])])


def _linear_after(seed, cancel=False):
    """Finding 2: an op 0.3 x its claim off, then mm(W, u) with 65 outputs: signs cancel in J^T a, not in |J|^T a."""
    op = _op("r15_within_claim", 0.3 * RTOL)
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((65, 3))
    s = rng.standard_normal((65, 1))
    if cancel:  # each column of W sums to 0 against the seed's signs: J^T |seed| = 0, |J|^T |seed| > 0
        W = np.abs(W) * np.where(np.arange(65) % 2, 1.0, -1.0)[:, None]
        W[-1] = -W[:-1].sum(axis=0)
        s = np.sign(W[:, :1])
    return gs.Case.build({"x": np.array([0.4, -0.2, 0.7]), "W": W},
                         [("u", op.name, ["x"], {}), ("u2", "unsqueeze", ["u"], {"dim": 1}),
                          ("y", "mm", ["W", "u2"], {})], ["y"], [s])


CASES = [
    ("1 split leaf (control)", lambda: _split_leaf(False), "disagree"),
    ("1 + a 65-output node fed by a no-grad leaf", lambda: _split_leaf(True), "disagree"),
    ("2 linear layer after, seed 1", lambda: _linear_after(1), "agree"),
    ("2 linear layer after, seed 2", lambda: _linear_after(2), "agree"),
    ("2 linear layer after, seed 6", lambda: _linear_after(6), "agree"),
    ("2 linear layer after, cancelling", lambda: _linear_after(0, cancel=True), "agree"),
    ("5 op of 10 inputs (control)", lambda: _wide(10), "disagree"),
]


@pytest.mark.parametrize("name, build, want", CASES, ids=[c[0] for c in CASES])
def test_claim_verdict(name, build, want):
    case = build()
    case.meta["accuracy"] = {"rtol": RTOL, "atol": 0.0}
    v = gs.check(case, oracles=ORACLES)
    assert v.status == want, (v.status, [(c.oracles, c.max_ratio) for c in v.comparisons], v.reason)


@pytest.mark.parametrize("oracles, delta", [(ORACLES, 0.1), (ORACLES[:2], 0.3)], ids=["per-element", "directional"])
def test_unsized_claim_is_inconclusive_with_reason(oracles, delta):
    """Finding 5: 1001 inputs (> COLS) cannot be sized: an op 1000x beyond its claim is never "agree"; since the
    comparison fails without the claim and passes only with the fallback scale, it is inconclusive, with the reason.
    Without the jacobian, 1002 leaf elements (> fd.full_limit) are compared along random directions: the op's vjp
    0.3 off (3000x its claim): 0.1 off is within FD's own error bound beside the 1e6 path (agree before and after)."""
    case = _wide(1001, delta)
    case.meta["accuracy"] = {"rtol": RTOL, "atol": 0.0}
    v = gs.check(case, oracles=oracles)
    assert v.status == "inconclusive", (v.status, [(c.oracles, c.max_ratio) for c in v.comparisons])
    assert f"the accuracy claim of r15_cols_bug{int(delta * 1e4)} could not be sized here" in v.reason and "1000 input elements" in v.reason


def test_scale_of_wide_node_is_abs_jacobian():
    """Finding 2, the scale itself: through the op, then mm(W, .), the scale is |W|^T |seed| x exp(x) exactly."""
    case = _linear_after(0, cancel=True)
    W, s = case.leaves[1].value, np.asarray(case.seeds[0])
    want = (np.abs(W).T @ np.abs(s)).ravel() * np.exp(case.leaves[0].value)
    np.testing.assert_allclose(claim_scale(case)["x"], want, rtol=1e-6)


def test_gradspec_bug_in_scale_is_not_swallowed(monkeypatch):
    """Finding 1: a programming error of gradspec's own code while sizing is raised, never read as "cannot be sized"."""
    import gradspec._check_claim as cc

    def broken(*a, **k):
        raise TypeError("a gradspec bug")
    monkeypatch.setattr(cc, "_abs_vjp", broken)
    with pytest.raises(TypeError, match="a gradspec bug"):
        cc.claim_scale(_split_leaf(True))


def test_engine_within_claim_agrees(monkeypatch):
    """Finding 8: the reference engine with every gradient 3e-5 relative off, within its claim of 1e-4: with an engine
    under test every node is code under test, so the claim's path scale is the whole |J|^T |seed|, not 0."""
    from gradspec.engines import ReferenceEngine
    from gradspec.oracles.engine_oracle import EngineOracle

    class Loose(ReferenceEngine):
        name = "r15-loose"

        def grad(self, leaf):
            g = super().grad(leaf)
            return None if g is None else g * (1 + 0.3e-4)

    mod = types.ModuleType("r15_engine")
    mod.Loose = Loose
    monkeypatch.setitem(sys.modules, "r15_engine", mod)
    x = np.array([0.5, -1.3, 2.0])
    case = gs.Case.build({"x": x}, [("u", "exp", ["x"], {}), ("w", "tanh", ["x"], {})], ["u", "w"],
                         [np.ones(3), np.ones(3)], engine="r15_engine:Loose")
    case.meta["accuracy"] = {"rtol": RTOL, "atol": 0.0}
    eo = EngineOracle(Loose(), name="engine:r15-loose", spec="r15_engine:Loose")
    v = gs.check(case, oracles=["reference", "jacobian", eo])
    assert v.status == "agree", [(c.oracles, c.max_ratio) for c in v.comparisons]
    assert np.all(claim_scale(case)["x"] > 0)
