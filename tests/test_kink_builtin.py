"""Per-element judging at kinks of gradspec's own elementwise kinked ops (relu, abs, clamp, maximum, minimum).

Before, a case with one element of a built-in kinked op at (or within FD's reach of) its kink was refused whole by
finite differences (the exact-kink exclusion, or the reach check), so a user op behind ``relu`` with one input at 0
was judged by the exact oracles alone, or not at all (benchmarks/kink_builtin.py: 335 of 800 correct cases
inconclusive).  Now the elements whose stencil moves such a position by a quarter of its distance to the kink are
left out (``Verdict.unjudged_elements``) and the others compared (``oracles/_fd_kinkpos.py``).
"""

from __future__ import annotations

import numpy as np

import gradspec as gs
from gradspec.oracles.fd import STEP, fd_gradient

GOOD = gs.Op("kb_exp", forward=np.exp, vjp=lambda g, y, out: (g * out,))
BAD = gs.Op("kb_exp_bug", forward=np.exp, vjp=lambda g, y, out: (1.01 * g * out,))
# a jump surface through relu's kink: u = b * (y > 0); b's partial is 1 on one side of a = 0, 0 on the other
GATE = gs.Op("kb_gate", forward=lambda y, b: b * (y > 0), vjp=lambda g, y, b, out: (0 * g, g * (y > 0)))
# the same kink declared by a user op: not gradspec's own, so still refused whole
UMAX = gs.Op("kb_umax", forward=np.maximum, vjp=lambda g, a, b, out: (g * (a >= b), g * (a < b)),
             kink_distance=lambda a, b: float(np.min(np.abs(a - b))))


def _case(op, params, user, **leaves):
    leaves = {k: np.asarray(v, dtype=np.float64) for k, v in leaves.items()}
    n = next(iter(leaves.values())).size
    return gs.Case.build(leaves, [("y", op, list(leaves), params), ("u", user.name, ["y"], {})], ["u"],
                         [np.arange(1.0, n + 1)])


def test_a_case_at_a_relu_kink_is_judged_by_finite_differences_now():
    v = gs.check(_case("relu", {}, GOOD, x=[0.0, 0.7, -1.2, 2.0]))
    assert v.status == "agree", v.summary()
    assert "finite-differences" in v.unjudged_elements, v.summary()  # FD ran (it was excluded: "exact tie/kink")


def test_the_kink_element_stays_unjudged_and_the_others_are_compared():
    v = gs.check(_case("relu", {}, GOOD, x=[0.0, 0.7, -1.2, 2.0]))
    assert set(v.unjudged_elements["finite-differences"]) == {"x[0]"}, v.unjudged_elements


def test_a_planted_bug_beside_a_relu_kink_is_found():
    v = gs.check(_case("relu", {}, BAD, x=[0.0, 0.7, -1.2, 2.0]))
    assert v.status == "disagree", v.summary()


def test_a_kink_at_half_a_step_is_left_out_though_fd_sees_no_coarseness():
    # fixtrust's case: a kink at h/2 from x along the line makes FD's error delta/4 with an estimate of ~0; the op's
    # declaration, not the numbers, names the element
    x = np.array([0.5 * STEP, 0.7, 1.3])
    res = fd_gradient(gs.Case.build({"x": x}, [("y", "relu", ["x"], {}), ("u", GOOD.name, ["y"], {})], ["u"],
                                    [np.ones(3)]))
    assert set(res.kinks) == {"x[0]"}, res.kinks
    assert np.isinf(res.error["x"][0]) and np.isfinite(res.error["x"][1:]).all()


def test_clamp_and_maximum_ties_leave_out_their_elements_only():
    v = gs.check(_case("clamp", {"min": -1.0, "max": 1.0}, GOOD, x=[1.0, 0.3, -1.0, 0.2]))
    assert v.status == "agree" and set(v.unjudged_elements["finite-differences"]) == {"x[0]", "x[2]"}, v.summary()
    v = gs.check(_case("maximum", {}, GOOD, a=[0.5, 0.3, -1.0], b=[0.5, 0.9, -2.0]))
    assert v.status == "agree" and set(v.unjudged_elements["finite-differences"]) == {"a[0]", "b[0]"}, v.summary()


def test_a_jump_surface_through_the_kink_still_refuses_the_case():
    leaves = {"a": np.array([0.0, 0.5]), "b": np.array([1.0, 2.0])}
    case = gs.Case.build(leaves, [("y", "relu", ["a"], {}), ("u", GATE.name, ["y", "b"], {})], ["u"], [np.ones(2)])
    v = gs.check(case)
    assert "finite-differences" not in v.unjudged_elements, v.summary()
    assert "convention" in v.skipped["finite-differences"], v.skipped


def test_a_user_ops_declared_kink_still_refuses_the_whole_case():
    case = gs.Case.build({"a": np.array([0.5, 0.3]), "b": np.array([0.5, 0.9])},
                         [("y", UMAX.name, ["a", "b"], {}), ("u", GOOD.name, ["y"], {})], ["u"], [np.ones(2)])
    v = gs.check(case)
    assert "finite-differences" in v.skipped and "finite-differences" not in v.unjudged_elements, v.summary()


def test_a_broadcast_tie_leaves_out_the_scalar_and_its_tied_element():
    # maximum(a, b) with b a scalar: the tie a[1] == b is a kink of a[1]'s line and of b's (b moves every position)
    v = gs.check(_case("maximum", {}, GOOD, a=[0.5, 0.3, -1.0], b=0.3))
    assert v.status == "agree" and set(v.unjudged_elements["finite-differences"]) == {"a[1]", "b[]"}, v.summary()


def test_clamp_with_array_bounds_is_no_gradspec_bug():
    # review15b #3: clamp's bounds may be arrays; _fd_kinkpos took float(b) of them and FD failed "inside gradspec
    # itself" (TypeError).  Such a node is not one of the per-position kinked ops: FD steps aside as before.
    op = gs.Op("t_kb_exp_clamp_arrays", forward=np.exp, vjp=lambda g, y, out: (g * out,))
    case = gs.Case.build({"x": np.array([0.0, 0.5, 0.1])},
                         [("k", "clamp", ["x"], {"min": np.array([0.0, 0.5, 0.0])}), ("u", op.name, ["k"], {})],
                         ["u"], [np.ones(3)])
    v = gs.check(case)
    assert "gradspec bug" not in str(v) and "TypeError" not in str(v), str(v)
    assert v.status != "disagree", str(v)


# review15b #1: where a reduction or matmul follows the kinked op, every compared partial is coupled to the kink
# element's (mixed curvature), and the both-sides probe at 2h (the stencil's farthest point) saw that smooth change
# (~2.4e-5 x the mixed curvature, above the estimates' own bounds) as a partial that jumps across the kink: FD
# refused the case, saying "a jump surface", where there is none.


def _through(user, post, x, w=None):
    x = np.asarray(x, dtype=np.float64)
    if post == "sum":
        return gs.Case.build({"x": x}, [("r", "relu", ["x"], {}), ("s", "sum", ["r"], {}), ("u", user.name, ["s"], {})],
                             ["u"], [np.ones(())])
    n = x.size
    return gs.Case.build({"x": x, "W": np.asarray(w, dtype=np.float64)},
                         [("r", "relu", ["x"], {}), ("r2", "reshape", ["r"], {"shape": (1, n)}),
                          ("s", "mm", ["r2", "W"], {}), ("u", user.name, ["s"], {})], ["u"], [np.ones((1, 2))])


_X = [0.0, 0.7, -1.2, 2.0]
_W = [[0.3, -0.4], [0.5, 0.2], [-0.1, 0.6], [0.2, 0.25]]


def test_a_correct_op_after_a_sum_beside_a_relu_kink_is_judged():
    v = gs.check(_through(GOOD, "sum", _X))
    assert v.status == "agree", v.summary()
    assert set(v.unjudged_elements["finite-differences"]) == {"x[0]"}, v.summary()


def test_a_planted_bug_after_a_sum_beside_a_relu_kink_is_found():
    v = gs.check(_through(BAD, "sum", _X))
    assert v.status == "disagree", v.summary()


def test_a_correct_op_after_a_matmul_beside_a_relu_kink_is_judged_and_a_bug_there_found():
    v = gs.check(_through(GOOD, "mm", _X, _W))
    assert v.status == "agree" and set(v.unjudged_elements["finite-differences"]) == {"x[0]"}, v.summary()
    v = gs.check(_through(BAD, "mm", _X, _W))
    assert v.status == "disagree", v.summary()


def test_a_jump_surface_after_a_sum_is_still_refused_and_called_one():
    # u = b * (sum(relu(a)) > 0): b's partial is 0 at a[0] = 0 (a[1] < 0), 1 on a[0]'s positive side
    leaves = {"a": np.array([0.0, -0.5]), "b": np.array([1.0, 2.0])}
    case = gs.Case.build(leaves, [("y", "relu", ["a"], {}), ("s", "sum", ["y"], {}), ("u", GATE.name, ["s", "b"], {})],
                         ["u"], [np.ones(2)])
    v = gs.check(case)
    assert "finite-differences" not in v.unjudged_elements, v.summary()
    why = v.skipped["finite-differences"]
    assert "jump surface" in why and "convention" in why, why


def test_a_strong_coupling_after_a_sum_is_judged_where_the_change_shrinks_with_the_probe():
    # u = exp(30 sum(relu(x))): every partial is 30 u, its change across x[0]'s kink 2 hf 900 u: above the estimates'
    # bounds (3x) at the finest step, 16x smaller at a 16th of it (0.2x the bounds): a smooth coupling, no jump
    e30 = gs.Op("kb_exp30", forward=lambda y: np.exp(30 * y), vjp=lambda g, y, out: (30 * g * out,))
    v = gs.check(_through(e30, "sum", [0.0, 0.007, -1.2, 0.002]))
    assert v.status == "agree" and set(v.unjudged_elements["finite-differences"]) == {"x[0]"}, v.summary()


def _first_pass_of(case):
    from gradspec.oracles import fd
    from gradspec.oracles._fd_values import _inputs

    leaves, x64, flat = _inputs(case)
    h, hl = fd._steps(flat, flat.size)
    specs = fd._specs(case)
    plan = fd._watch_plan(case, specs)
    return x64, leaves, h, plan, fd._run_pass(case, x64, leaves, flat, h, flat.size, plan, hl, specs, fd._user_code(specs))


def test_flagged_from_the_first_pass_names_what_a_fresh_evaluation_of_the_stencil_names():
    # _fd_kinkpos reads the near positions' moves from the first pass's batch (a small case's one pass holds the
    # stencil's rows); a fresh evaluation of the same points (its fallback, a plain centre) must name the same elements
    import types

    from gradspec._private.kinks import center_kink_distances
    from gradspec.oracles import _fd_kinkpos as kp

    cases = [_case("relu", {}, GOOD, x=[0.0, 0.7, -1.2, 2.0]), _case("clamp", {"min": -1.0, "max": 1.0}, GOOD,
             x=[1.0, 0.3, -1.0, 0.2]), _case("maximum", {}, GOOD, a=[0.5, 0.3, -1.0], b=[0.5, 0.9, -2.0]),
             _through(GOOD, "mm", _X, _W)]
    for case in cases:
        x64, leaves, h, plan, p = _first_pass_of(case)
        assert hasattr(p.center, "env"), "a small case's pass is inline"
        known = center_kink_distances(case)
        fresh = types.SimpleNamespace(center=case._evaluate(x64, 0), reach=p.reach, tops=dict(p.tops or {}),
                                      evaluations=p.evaluations)
        got = kp.flagged(case, x64, leaves, h, plan, p, known)
        assert got.size and np.array_equal(got, kp.flagged(case, x64, leaves, h, plan, fresh, known)), case


def test_a_large_case_at_a_relu_kink_leaves_out_its_element_only():
    # 400 elements: the first pass runs in chunks (its centre unbatched), so _fd_kinkpos evaluates the stencil itself
    x = np.linspace(-2.0, 2.0, 400)
    x[7] = 0.0
    case = gs.Case.build({"x": x}, [("y", "relu", ["x"], {}), ("u", GOOD.name, ["y"], {})], ["u"], [np.ones(400)])
    assert not hasattr(_first_pass_of(case)[-1].center, "env"), "a chunked pass"
    res = fd_gradient(case)
    assert set(res.kinks) == {"x[7]"}, res.kinks


def test_the_jump_surface_probe_runs_where_a_user_op_could_jump_and_not_on_a_graph_of_table_ops(monkeypatch):
    # A jump surface through the kink needs discontinuous code (GATE above); every table op is continuous, so on
    # their graphs the both-sides probe could only see the smooth part of the compared partials (_fd_kinkpos.leave_out)
    from gradspec.oracles import _fd_refine

    calls = []
    real = _fd_refine._estimates_at
    monkeypatch.setattr(_fd_refine, "_estimates_at", lambda *a: calls.append(1) or real(*a))
    table = gs.Case.build({"x": np.array(_X)}, [("r", "relu", ["x"], {}), ("s", "sum", ["r"], {}),
                                                ("u", "exp", ["s"], {})], ["u"], [np.ones(())])
    res = fd_gradient(table)
    assert set(res.kinks) == {"x[0]"} and not calls, (res.kinks, len(calls))
    res = fd_gradient(_through(GOOD, "sum", _X))
    assert set(res.kinks) == {"x[0]"} and calls, (res.kinks, len(calls))


def test_flagged_tests_only_the_positions_the_first_pass_reach_can_bring_near_and_names_the_same(monkeypatch):
    # _candidates: a unary node's positions whose largest move over the stencil (the pass's reach) is 0 or below a
    # quarter of their distance to the kink are hit by no row; testing only the others must name the same elements
    from gradspec._private.kinks import center_kink_distances
    from gradspec.oracles import _fd_kinkpos as kp

    x = np.linspace(-2.0, 2.0, 41)
    x[[3, 20, 33]] = [0.0, 1e-9, -2e-6]  # on the kink, within its 4x reach, at a third of a step
    cases = [gs.Case.build({"x": x}, [("y", op, ["x"], {}), ("u", GOOD.name, ["y"], {})], ["u"], [np.ones(41)])
             for op in ("relu", "abs")] + [_through(GOOD, "mm", _X, _W)]
    for case in cases:
        x64, leaves, h, plan, p = _first_pass_of(case)
        known = center_kink_distances(case)
        got = kp.flagged(case, x64, leaves, h, plan, p, known)
        monkeypatch.setattr(kp, "_candidates", lambda *a: None)
        every = kp.flagged(case, x64, leaves, h, plan, p, known)
        monkeypatch.undo()
        assert got.size and np.array_equal(got, every), (got, every)
