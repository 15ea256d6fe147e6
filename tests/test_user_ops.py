"""User ops (``gs.Op``): declaration errors, the VJP contract, the finite-difference JVP, batched
forwards, and ``gs.verify_op`` finding every planted user-op bug (and staying silent on its twin).

The planted bugs live in ``tests/_planted.py``; each run uses a fixed seed and a small budget.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st

import gradspec as gs
from gradspec import search, verify
from gradspec.ops import user as U
from tests import _planted as P

OP_BUGS = {k: p for k, p in P.BUGS.items() if p.how == "op"}
TWINS = {}
for _k, _p in OP_BUGS.items():
    TWINS.setdefault(_p.twin.name, (_k, _p))


@pytest.fixture(autouse=True)
def _short_shrinking(monkeypatch):
    # CI speed: a shorter (still deterministic) shrinking budget than a user's default.
    monkeypatch.setattr(search, "SHRINK_CALLS", 25)


# ---------------------------------------------------------------------------------------------
# declaration errors
# ---------------------------------------------------------------------------------------------

_f1 = lambda x: x  # noqa: E731
_v1 = lambda g, x, out: (g,)  # noqa: E731

BAD_DECLS = [
    ("name-not-identifier", dict(name="my op", forward=_f1, vjp=_v1), "must be a Python identifier"),
    ("forward-not-callable", dict(name="u_a", forward=3, vjp=_v1), "forward must be callable"),
    ("vjp-not-callable", dict(name="u_b", forward=_f1, vjp="g"), "vjp must be callable"),
    ("malformed-signature", dict(name="u_c", forward=_f1, vjp=_v1, signature="(n->()"), "signature"),
    ("signature-arity", dict(name="u_d", forward=_f1, vjp=_v1, signature="(n),(n)->()"),
     "has 2 input(s) but forward takes 1"),
    ("explicit-arity-vs-forward", dict(name="u_e", forward=_f1, vjp=_v1, arity=2), "forward must accept"),
    ("arity-zero", dict(name="u_f", forward=_f1, vjp=_v1, arity=0), "arity must be a positive int"),
    ("vjp-signature", dict(name="u_g", forward=_f1, vjp=lambda g: (g,)), "vjp must accept (g, x0, out)"),
    ("domain-not-domain", dict(name="u_h", forward=_f1, vjp=_v1, domain=(0, 1)), "domain"),
    ("domain-count", dict(name="u_i", forward=lambda a, b: a + b, vjp=lambda g, a, b, out: (g, g),
                          domain=[gs.domains.real()] * 3), "domain has 3 entries for 2 input(s)"),
    ("params-not-strategies", dict(name="u_j", forward=lambda x, k: x * k, vjp=lambda g, x, out, k: (g * k,),
                                   params={"k": 2.0}), "must be a Hypothesis strategy"),
    ("param-not-accepted", dict(name="u_k", forward=_f1, vjp=_v1, params={"k": st.just(1)}), "forward must accept"),
    ("signature-and-shape-fn", dict(name="u_l", forward=_f1, vjp=_v1, signature="()->()", shape_fn=lambda s: s),
     "either signature= or shape_fn="),
    ("jvp-signature", dict(name="u_m", forward=_f1, vjp=_v1, jvp=lambda t: t), "jvp must accept"),
    ("output-dim-unknown", dict(name="u_n", forward=_f1, vjp=_v1, signature="(n)->(m)"),
     "does not appear in any input"),
    # tryout4 #14: the multi-output error names the ways out, not only the rule
    ("two-outputs", dict(name="u_o", forward=_f1, vjp=_v1, signature="(n,n)->(n),(n,n)"),
     "register one op per output"),
    ("two-outputs-torch", dict(name="u_p", forward=_f1, vjp=_v1, signature="(n)->(),(n)"),
     "gs.verify_torch_function, which takes tuple outputs"),
]


@pytest.mark.parametrize("kw, fragment", [(kw, frag) for _, kw, frag in BAD_DECLS], ids=[i for i, _, _ in BAD_DECLS])
def test_declaration_errors_are_clear(kw, fragment):
    kw = dict(kw)
    name = kw.pop("name")
    with pytest.raises(gs.UserOpError) as e:
        gs.Op(name, **kw)
    assert fragment in str(e.value)
    if name.isidentifier():
        assert repr(name) in str(e.value)  # the message names the op


def test_arity_is_inferred_from_forward_without_params():
    op = gs.Op("u_arity", forward=lambda x, y, scale: x * y * scale, vjp=lambda g, x, y, out, scale: (g, g),
               params={"scale": st.just(1.0)})
    assert op.arity == 2 and op.signature == "(),()->()"
    assert gs.Op("u_ufunc", forward=np.hypot, vjp=lambda g, a, b, out: (g * a / out, g * b / out)).arity == 2


# ---------------------------------------------------------------------------------------------
# the VJP contract, on direct engine use
# ---------------------------------------------------------------------------------------------


def _run(op, *arrays, seed=None):
    xs = [gs.tensor(np.asarray(a, dtype=float), requires_grad=True) for a in arrays]
    y = op(*xs)
    y.backward(np.ones(y.shape) if seed is None else seed)
    return [x.grad.numpy() if x.grad is not None else None for x in xs]


CONTRACT = [
    ("writes-upstream", P.pl_sq_inplace, [[1.0, 2.0]], U.VJPWriteError, "read-only"),
    ("count", P.pl_mul_count, [[1.0, 2.0], [3.0, 4.0]], U.VJPCountError, "returned 1 gradient(s) but the op has 2"),
    ("shape-unreduced", P.pl_add_unreduced, [[[1.0, 2.0], [3.0, 4.0]], [1.0, 2.0]], U.VJPShapeError,
     "not summed over the broadcast axes"),
    ("dtype", P.pl_step_int, [[1.0, 2.0]], U.VJPDtypeError, "dtype int64 for input 0"),
    ("raises", P.pl_sq_raises, [2.0], U.VJPRaisedError, "vjp raised IndexError"),
]


@pytest.mark.parametrize("op, arrays, exc, fragment", [c[1:] for c in CONTRACT], ids=[c[0] for c in CONTRACT])
def test_vjp_contract_breaches_raise_named_errors(op, arrays, exc, fragment):
    with pytest.raises(exc) as e:
        _run(op, *arrays)
    assert fragment in str(e.value) and repr(op.name) in str(e.value)
    assert isinstance(e.value, RuntimeError) and e.value.kind == exc.kind


def test_vjp_receives_read_only_arrays_and_correct_ops_work():
    seen = {}

    def vjp(g, a, b, out):
        seen["flags"] = [g.flags.writeable, a.flags.writeable, b.flags.writeable, out.flags.writeable]
        return U.sum_to(g * b, a.shape), U.sum_to(g * a, b.shape)

    op = gs.Op("u_ro", forward=lambda a, b: a * b, vjp=vjp)
    ga, gb = _run(op, [[1.0, 2.0], [3.0, 4.0]], [10.0, 20.0], seed=np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert seen["flags"] == [False] * 4
    np.testing.assert_array_equal(ga, [[10.0, 40.0], [30.0, 80.0]])
    np.testing.assert_array_equal(gb, [10.0, 20.0])


def test_sum_to():
    np.testing.assert_array_equal(U.sum_to(np.ones((2, 3, 4)), (3, 1)), np.full((3, 1), 8.0))
    assert U.sum_to(np.ones((2, 3)), ()).shape == ()
    with pytest.raises(ValueError):
        U.sum_to(np.ones(3), (1, 3))


# ---------------------------------------------------------------------------------------------
# forward mode without a jvp: finite differences of the forward
# ---------------------------------------------------------------------------------------------

FD_JVP = [
    ("tanh", lambda x: np.tanh(x), lambda t, x: (1 - np.tanh(x) ** 2) * t, [0.3, -1.2, 2.5], None),
    ("exp-large", lambda x: np.exp(x), lambda t, x: np.exp(x) * t, [0.0, 5.0, 12.0], None),
    # the steps shrink near the domain edge, so no stencil point crosses 0
    ("log-near-edge", lambda x: np.log(x), lambda t, x: t / x, [0.0016, 1.0, 40.0], gs.domains.positive()),
    ("cubic-offset", lambda x: x ** 3 + 1000.0, lambda t, x: 3 * x ** 2 * t, [0.5, -3.0, 7.0], None),
]


@pytest.mark.parametrize("f, df, x, dom", [c[1:] for c in FD_JVP], ids=[c[0] for c in FD_JVP])
def test_fd_jvp_is_accurate(f, df, x, dom):
    op = gs.Op("u_fdj", forward=f, vjp=lambda g, x, out: (g,), arity=1, domain=dom)
    assert op.jvp_source == U.FD_JVP_SOURCE
    x = np.array(x)
    t = np.random.default_rng(0).standard_normal((4, 3))
    got = op.jvp([t], x, out=f(x))
    want = df(t, x)
    np.testing.assert_allclose(got, want, rtol=1e-9)


def test_fd_jvp_of_a_gufunc_and_step_scale():
    op = gs.Op("u_fdg", forward=lambda x, w: (x * w).sum(-1), signature="(n),(n)->()",
               vjp=lambda g, x, w, out: (U.sum_to(g[..., None] * w, x.shape), U.sum_to(g[..., None] * x, w.shape)))
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3)), rng.standard_normal(3)
    tx, tw = rng.standard_normal((5, 2, 3)), rng.standard_normal((5, 3))
    want = (tx * w).sum(-1) + (x * tw[:, None, :]).sum(-1)
    np.testing.assert_allclose(op.jvp([tx, tw], x, w, out=(x * w).sum(-1)), want, rtol=1e-10)
    with U.fd_step_scale(2.0):
        np.testing.assert_allclose(op.jvp([tx, None], x, w, out=(x * w).sum(-1)), (tx * w).sum(-1), rtol=1e-10)
    assert op._batch_ok is True  # the gufunc forward was evaluated batched (and checked pointwise once)


def test_forward_that_does_not_broadcast_falls_back_to_pointwise():
    op = gs.Op("u_nb", forward=lambda x: np.array([x.sum(), x.max()]), vjp=lambda g, x, out: (np.zeros(x.shape),),
               shape_fn=lambda s: (2,) if len(s) == 1 and s[0] > 0 else None)
    arrays = [np.arange(12.0).reshape(4, 3)]
    got = op.forward_batched(arrays, {}, 1)
    np.testing.assert_array_equal(got, [[3.0, 2.0], [12.0, 5.0], [21.0, 8.0], [30.0, 11.0]])
    assert op._batch_ok is False


def test_declared_jvp_is_used_per_direction():
    op = gs.Op("u_dj", forward=lambda x: x * x, vjp=lambda g, x, out: (2 * x * g,), jvp=lambda t, x, out: 2 * x * t[0])
    assert op.jvp_source == "declared"
    t = np.eye(2)
    np.testing.assert_array_equal(op.jvp([t], np.array([1.0, 3.0]), out=np.array([1.0, 9.0])), [[2.0, 0.0], [0.0, 6.0]])


def test_fd_jacobian_error_covers_rounding_of_saturated_softmax():
    sm = gs.Op("u_sm", signature="(n)->(n)", forward=lambda x: np.exp(x - x.max(-1, keepdims=True)) / np.exp(
        x - x.max(-1, keepdims=True)).sum(-1, keepdims=True),
        vjp=lambda g, x, out: (out * (g - (g * out).sum(-1, keepdims=True)),))
    case = gs.Case.build({"x": np.array([1.0, 100.0])}, [("y", "u_sm", ["x"], {})], ["y"], [np.array([1.0, -0.5])])
    err = verify.fd_jacobian_error(case)["x"]
    assert err[0] > 1e-13  # the finite-difference JVP cannot resolve d y1 / d x0 ~ 1e-43 next to y1 = 1
    assert verify.verify_op(sm, max_examples=20, seed=0).ok


# ---------------------------------------------------------------------------------------------
# verify_op: every planted bug is found, every correct twin passes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bug", list(OP_BUGS), ids=list(OP_BUGS))
def test_verify_op_finds_planted_bug(bug):
    p = OP_BUGS[bug]
    r = gs.verify_op(p.target, max_examples=30, seed=0)
    assert not r.ok, f"{bug}: not found\n{r}"
    assert set(r.kinds) & set(p.kinds), f"{bug}: found {r.kinds}, expected one of {p.kinds}\n{r}"
    d = next(d for d in r.discrepancies if d.kind in p.kinds)
    assert d.case is not None and p.target.name in d.case.ops
    assert "replay" in str(d) and f"seed={r.seed}" in d.replay
    assert r.time_to_first is not None


@pytest.mark.parametrize("twin", list(TWINS), ids=list(TWINS))
def test_verify_op_is_silent_on_correct_twin(twin):
    _, p = TWINS[twin]
    r = gs.verify_op(p.twin, max_examples=30, seed=0)
    assert r.ok, str(r)
    assert r.cases_run == 30
    assert r.op_counts[p.twin.name] > 0


def test_fd_jvp_finds_jvp_free_bug_via_jacobian_with_fd_tolerance():
    r = gs.verify_op(P.pl_exp_1e6, max_examples=10, seed=0, oracles=["jacobian"])
    assert not r.ok and r.discrepancies[0].oracles == ("reference", "jacobian")
    assert "finite-difference JVP" in r.discrepancies[0].message
    assert any("declares no jvp" in n for n in r.notes)


def _halve_via_float64(x):
    return x / (np.ones(x.shape, dtype=np.int64) + 1.0)  # an int array + 1.0: float64, whatever x's dtype


halve_promoting = gs.Op("halve_promoting", forward=_halve_via_float64, vjp=lambda g, x, out: (g / 2,))


def test_a_user_forward_that_promotes_float32_keeps_its_inputs_dtype_in_the_engine():
    """A new user's simplex projection returned float64 for float32 input (numpy promotion through an
    int array); the next mm met float64 and float32 and verify_op died with an internal CaseError.  The
    engine casts the output back (torch ops keep their input's dtype) and verify_op says so."""
    x = gs.tensor(np.ones((2, 2), np.float32), requires_grad=True)
    y = halve_promoting(x)
    assert y.dtype == np.float32
    (y @ gs.tensor(np.ones((2, 2), np.float32))).sum().backward()  # mm of two float32 tensors: no refusal
    assert x.grad.dtype == np.float32
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 2), 1.0, np.float32))
    r = gs.verify_op(halve_promoting, max_examples=40, seed=3)
    assert r.status == "agree", r
    assert any("returned float64 for float32 inputs" in n for n in r.notes), r.notes
