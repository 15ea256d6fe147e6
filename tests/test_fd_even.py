"""Finite differences' error estimate where the even part of s leaks into the corrected estimate (tryout10 F1).

At a LayerNorm row of equal values (variance 0, rstd = 1/sqrt(eps) = 316) followed by GELU, s(x + t e_j) has a large
even part (GELU's z^2 term, z ~ 2600 t) and an accidentally small third derivative (GELU has no z^3 term at 0; the
odd part's curvature comes from rstd alone, on a scale ~1e-2).  The 3-point stencil's corrected estimate takes its
correction from s(x + 2h), so it picks up the even part's 4th-order term h^3 f''''/12 (~1.4e-3 here), while its
error estimate |h^2 T / 6| (T the third difference) measures mostly f''': the estimate said 2e-3 where the error was
up to 6.5x it, and gs.check called a correct op (and torch's own layer_norm + gelu) wrong.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import gradspec as gs
from gradspec.case import Case
from gradspec.oracles import _fd_even as _even
from gradspec.oracles.fd import fd_gradient

torch = pytest.importorskip("torch")
F = torch.nn.functional
special = pytest.importorskip("scipy.special")

EPS = 1e-5
# the tryout's shrunk case (hex floats, as its case.json): x = all ones (4 x 6, every row constant), the weight w
# and the upstream gradient of the failing run (seed 3)
W = [
    "0x1.4000000000000p+3", "-0x1.4000000000000p+3", "0x1.c7cf463b020c5p+2", "-0x1.aabdda9fba63dp+3",
    "-0x1.0000000000000p-1", "0x1.11be258b22d0fp+2",
]
SEED = [
    "-0x1.2bda35279f7d8p-1", "0x1.793f3a0a5bdfap-1", "0x1.4d2052c72e6dep+0", "0x1.15089239de860p+0",
    "-0x1.3031a120142c1p-1", "-0x1.ddc2d076aa165p-1", "-0x1.f54636353e119p-1", "0x1.51c94c8c87925p-1",
    "-0x1.3c0d3f89b100bp+0", "-0x1.3a33381010bc8p-1", "-0x1.c84f0fb6e77d2p-1", "0x1.044915a8e3488p+0",
    "0x1.dc7b46a0d7193p-1", "-0x1.16386e61aa94ep+0", "-0x1.3ce2efee2c3ecp+0", "-0x1.74cdee49c1b9cp+0",
    "0x1.9182d09f9288dp-1", "0x1.2607309451eacp+0", "0x1.323b3628a67e2p+0", "0x1.95df7e77bd0f3p-1",
    "0x1.00c34ee7e0a53p-1", "-0x1.7934b14c13b0dp+0", "0x1.98c80b8be344bp-1", "0x1.a0c2c5f4474dep-1",
]


def _case_arrays():
    return (np.ones((4, 6)), np.array([float.fromhex(v) for v in W]),
            np.array([float.fromhex(v) for v in SEED]).reshape(4, 6))


def _ln_gelu_np(x, w):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    z = (x - mu) / np.sqrt(var + EPS) * w
    return 0.5 * z * (1 + special.erf(z / np.sqrt(2)))


def _truth(x, w, g):
    xt = torch.tensor(x, requires_grad=True)
    y = F.gelu(F.layer_norm(xt, (x.shape[-1],), torch.tensor(w), None, EPS))
    return torch.autograd.grad(y, xt, torch.tensor(g))[0].numpy()


_op = gs.Op("fd_even_ln_gelu", forward=_ln_gelu_np, signature="(n),(n)->(n)",
            vjp=lambda g, x, w, out: (_truth(x, w, g), np.zeros_like(w)))


def test_the_error_estimate_bounds_the_error_at_a_constant_layernorm_row():
    x, w, g = _case_arrays()
    case = Case.build({"x0": x, "x1": w}, [("y", "fd_even_ln_gelu", ["x0", "x1"], {})], ["y"], [g],
                      requires_grad={"x1": False})
    res = fd_gradient(case)
    err = np.asarray(res.error["x0"])
    off = np.abs(res.grads["x0"] - _truth(x, w, g))
    # the estimate itself (not the comparison's 4x of it) bounds the true error: on main it was off by 6.5x it
    assert (off <= err).all(), (off / err).max()


def test_torch_own_layer_norm_gelu_agrees_at_a_constant_row():
    x, w, _ = _case_arrays()

    def ln_gelu(x, w):
        return F.gelu(F.layer_norm(x, (x.shape[-1],), w, None, EPS))

    xt, wt = torch.tensor(x), torch.tensor(w)
    r = gs.verify_torch_function(ln_gelu, example_inputs=(xt, wt), at=[(xt, wt)], seed=3, dtypes=("float64",))
    assert r.status == "agree", [d.message[:300] for d in r.discrepancies]


def _stencils(rng, k):
    """k single-element stencils (sp, sm, s2) of s(x + t) = s0 + sum_i c_i t^i / i! at t = h, -h, 2h: coefficients
    of random sign and log-uniform size over 16 decades, a third of them 0 (an even part without f' or f''', the
    F1 shape; mse at its minimum; a one-sided kink: sm = s0), steps 1e-9 .. 1e-2, s0 from 0 to 1e6; a fifth
    instead s0 plus a few hundred ulps of it at each point."""
    out = []
    for _ in range(k):
        c = rng.choice([-1.0, 1.0], 5) * 10.0 ** rng.uniform(-8, 8, 5) * (rng.random(5) > 1 / 3)
        s0 = float(rng.choice([0.0, 1.0]) * 10.0 ** rng.uniform(-6, 6) * rng.choice([-1, 1]))
        h = 10.0 ** rng.uniform(-9, -2)

        def at(t):
            return s0 + sum(ci * t ** (i + 1) / math.factorial(i + 1) for i, ci in enumerate(c))
        sp, sm, s2 = at(h), at(-h), at(2 * h)
        if rng.random() < 0.05:
            sm = s0
        if rng.random() < 0.2:  # (differences at the rounding level of s0: where E's rounding share decides)
            sp, sm, s2 = (s0 + s0 * 2.0 ** -52 * d for d in rng.integers(-300, 300, 3))
        out.append((sp, sm, s2, s0, h))
    return out


def test_the_python_prefilter_never_clears_an_element_the_numpy_test_flags():
    """``_fd_even._cleared`` (in Python floats, ahead of the numpy test on every FD estimate up to SMALL_N
    elements) must not clear an element ``_flag`` would flag: on 20,000 random stencils, each alone and in
    blocks of 10, with the coarse filter off (scale 1e300) so that every flag shows.  The draw must put flagged
    elements near the prefilter's edge for the test to say anything: within 4x of it (its margin is 2x; the
    closest flagged element of this draw sits at 2.3x, 10 within 4x: a _K 2.5x too large fails here).  Its bound
    on E / O is implied by the other wherever E's rounding share leaves e > 0: no draw can fault that one."""
    rng = np.random.default_rng(15)
    flagged = cleared = near = 0
    for sp, sm, s2, s0, h in _stencils(rng, 20000):
        s = np.array([[sp], [sm], [s2]])
        hit = _even._flag(s, s0, np.array([h]), 1e300).size > 0
        ok = _even._cleared(s.tolist(), s0)
        assert not (hit and ok), (sp, sm, s2, s0, h)
        flagged += hit
        cleared += ok
        e, o = abs(sp + sm - 2 * s0), abs(sp - sm)
        k = _even._K * max(abs(s0), abs(sp), abs(sm))
        near += hit and o > 0 and (e / o <= 4 * _even._Q and e ** 3 / o ** 2 < 4 * k)
    assert flagged > 500 and cleared > 5000 and near >= 5, (flagged, cleared, near)
    blocks = np.array(_stencils(np.random.default_rng(16), 2000)).T
    for a in range(0, 2000, 10):
        sp, sm, s2, s0v, hv = blocks[:, a:a + 10]
        s = np.vstack([sp, sm, s2 + s0v[0] - s0v])  # (one s0 a block: shift each stencil to it)
        s[0] += s0v[0] - s0v
        s[1] += s0v[0] - s0v
        got = _even.suspects(s, s0v[0], hv, 1e300)
        assert np.array_equal(got, _even._flag(s, s0v[0], hv, 1e300))


def test_the_prefilter_above_small_n_gives_the_numpy_tests_answer():
    """``suspects`` tries ``_cleared`` up to CLEAR_N elements (160; session 16: it took SMALL_N = 20 before), so at
    n = 21 ... CLEAR_N its answer must still be ``_flag``'s: blocks of random stencils that the prefilter clears one
    by one (the common case: the whole block cleared, no numpy test), with now and then one the numpy test flags
    put in (the prefilter must then leave the block to it).  The prefilter's proof is per element, so the block
    size changes nothing in it; this pins the wiring (``s.tolist()`` where ``fd`` has no lists above SMALL_N)."""
    rng = np.random.default_rng(17)
    pool = _stencils(rng, 6000)
    s0 = 0.75
    shifted = [(sp - t + s0, sm - t + s0, s2 - t + s0, h) for sp, sm, s2, t, h in pool]
    clean = [st for st in shifted if _even._cleared([[st[0]], [st[1]]], s0)]
    hits = [st for st in shifted
            if _even._flag(np.array([[st[0]], [st[1]], [st[2]]]), s0, np.array([st[3]]), 1e300).size]
    assert len(clean) > 2000 and len(hits) > 20, (len(clean), len(hits))
    whole = 0
    for k, n in enumerate([21, 34, 100, _even.CLEAR_N] * 10):
        idx = rng.choice(len(clean), n, replace=False)
        rows = [clean[i] for i in idx]
        if k % 3 == 0:
            rows[int(rng.integers(n))] = hits[int(rng.integers(len(hits)))]
        sp, sm, s2, h = (np.array(c) for c in zip(*rows))
        s = np.vstack([sp, sm, s2])
        got = _even.suspects(s, s0, h, 1e300)
        assert np.array_equal(got, _even._flag(s, s0, h, 1e300)), n
        whole += _even._cleared(s.tolist(), s0)
    assert whole >= 20, whole  # (the prefilter did decide most blocks: what the test is about)
