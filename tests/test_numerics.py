"""Real users' numerical code (issue 13): non-differentiable points, approximate code with a
declared accuracy, ill-conditioning, poles, and torch's threads inside the oracles.

The planted families live in ``tests/_planted_real.py`` (a correct version and a buggy twin
each).  The error-rate tests draw their points from a fixed-seed generator, so each run checks the
same few hundred cases; ``benchmarks/numerics_soak.py`` runs the larger soak.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradspec as gs
from gradspec import search
from gradspec._private import threads
from gradspec.oracles import fd
from tests import _planted_real as R

ORACLES = ["reference", "finite-differences", "jacobian"]

step_op = gs.Op("t_step_jump", forward=lambda x: x + (x > 0), vjp=lambda g, x, out: (g,))


@pytest.fixture(autouse=True)
def _short_shrinking(monkeypatch):
    monkeypatch.setattr(search, "SHRINK_CALLS", 25)  # CI speed; still deterministic


def _case(op, leaves, seed):
    return gs.Case.build(leaves, [("y", op.name, list(leaves), {})], ["y"], [np.asarray(seed, dtype=float)])


# ---------------------------------------------------------------------------------------------
# non-differentiable points: detected numerically, skipped with the reason, never reported
# ---------------------------------------------------------------------------------------------

NONDIFF = {
    "sparsemax-tie-at-integers": (R.np_sparsemax_op, {"z": np.array([1.0, 0.0])}, [0.3, -1.2], "kink"),
    "forward-jump": (step_op, {"x": np.array([0.0, 0.5])}, [1.0, 1.0], "jump"),
}


@pytest.mark.parametrize("name", list(NONDIFF), ids=list(NONDIFF))
def test_a_non_differentiable_point_is_skipped_with_the_reason(name):
    op, leaves, seed, word = NONDIFF[name]
    v = gs.check(_case(op, leaves, seed), oracles=ORACLES)
    assert word in v.nondifferentiable, v.summary()
    assert not v.discrepancies and v.status == "inconclusive" and word in v.reason, v.summary()
    assert "finite-differences" not in v.results and "jacobian" not in v.results  # no estimate is judged


def test_the_elements_off_a_kink_are_judged_and_the_kinked_ones_named():
    # the issue's point: tau = -1 = z[3], on the support boundary ("0.0 vs -9.08" before); z[2] and z[3]'s lines
    # cross the kink, z[0] and z[1] (far below the support) do not: they are compared (tryout7 #13g)
    v = gs.check(_case(R.np_sparsemax_op, {"z": np.array([-10.0, -1000, 0, -1])}, [1.0, 2, 3, 4]), oracles=ORACLES)
    assert v.status == "agree" and not v.discrepancies, v.summary()
    assert set(v.unjudged_elements["finite-differences"]) == {"z[2]", "z[3]"}, v.summary()
    assert all("kink" in why for why in v.unjudged_elements["finite-differences"].values())


def test_a_smooth_point_of_the_same_functions_is_judged():
    v = gs.check(_case(R.np_sparsemax_op, {"z": np.array([0.3, 0.1, -2.0])}, [1.0, -2.0, 0.5]), oracles=ORACLES)
    assert v.ok and not v.nondifferentiable and "finite-differences" in v.results, v.summary()
    v = gs.check(_case(step_op, {"x": np.array([0.7, -0.5])}, [1.0, 2.0]), oracles=ORACLES)
    assert v.ok and not v.nondifferentiable, v.summary()


# ---------------------------------------------------------------------------------------------
# finite differences near poles and with ill-conditioned forwards
# ---------------------------------------------------------------------------------------------

POINTS = {
    # a pole at 1e-4 from x=5: the FD-JVP's step eps^(1/5) |x| = 3.7e-3 crossed it ("2956452 vs -42597" before)
    "pole-1e-4-from-5": (R.np_pole_op, R.np_pole_bug, {"x": np.array([5.0]), "a": np.array([4.9999])}, [0.7]),
    "pole-1e-2-from-1000": (R.np_pole_op, R.np_pole_bug, {"x": np.array([1000.0]), "a": np.array([999.99])}, [1.3]),
    "pole-1e-6-from-1": (R.np_pole_op, R.np_pole_bug, {"x": np.array([1.000001]), "a": np.array([1.0])}, [-0.4]),
    "solve-cond-1e5": (R.np_illsolve_op, R.np_illsolve_bug, {"b": np.array([1.0, -2.0, 0.5, 3.0])}, [1.0, 0.2, -1, 2]),
}


@pytest.mark.parametrize("name", list(POINTS), ids=list(POINTS))
def test_fd_and_the_fd_jacobian_agree_with_the_correct_rule_and_catch_the_bug(name):
    ok, bug, leaves, seed = POINTS[name]
    v = gs.check(_case(ok, leaves, seed), oracles=ORACLES)
    assert v.ok, v.summary()
    assert {"finite-differences", "jacobian"} <= set(v.results), v.summary()  # both witnesses took part
    b = gs.check(_case(bug, leaves, seed), oracles=ORACLES)
    assert any(d.kind == "value" for d in b.discrepancies), b.summary()


def _solve_point(rng):
    n = int(rng.integers(2, 7))
    return {"b": rng.standard_normal(n) * 10 ** rng.uniform(-2, 2)}, rng.standard_normal(n)


def _pole_point(rng):
    a = rng.uniform(-1000, 1000) * rng.choice([1.0, 1e-3])
    d = 10 ** rng.uniform(-5, 0) * rng.choice([-1.0, 1.0]) * max(1.0, abs(a)) ** 0.5
    return {"x": np.array([a + d]), "a": np.array([a])}, np.array([rng.standard_normal()])


def _sparsemax_point(rng):
    n = int(rng.integers(2, 6))
    z = rng.integers(-3, 3, n).astype(float) if rng.uniform() < 0.5 else rng.standard_normal(n)  # ties half the time
    return {"z": z}, rng.standard_normal(n)


RATES = {
    "ill-conditioned solve": (R.np_illsolve_op, R.np_illsolve_bug, _solve_point),
    "pole": (R.np_pole_op, R.np_pole_bug, _pole_point),
    "kinked projection": (R.np_sparsemax_op, None, _sparsemax_point),
}


@pytest.mark.parametrize("family", list(RATES), ids=list(RATES))
def test_error_rates_on_a_hundred_points(family):
    """0 false alarms on the correct rule, every smooth point of the buggy one caught.  Before
    issue 13 (same points): pole 108/300 and sparsemax 54/300 false alarms."""
    ok, bug, draw = RATES[family]
    rng = np.random.default_rng(13)
    alarms, missed, nondiff = [], 0, 0
    for _ in range(100):
        leaves, seed = draw(rng)
        v = gs.check(_case(ok, leaves, seed), oracles=ORACLES)
        nondiff += bool(v.nondifferentiable)
        if v.discrepancies:
            alarms.append(v.summary())
        if bug is not None:
            missed += not gs.check(_case(bug, leaves, seed), oracles=ORACLES).discrepancies
    assert not alarms, alarms[0]
    assert missed == 0
    if family == "kinked projection":
        assert nondiff > 0  # integer inputs tie; those points are skipped, not judged


# ---------------------------------------------------------------------------------------------
# rtol / atol: the accuracy the code under test claims
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_an_iterative_solver_accurate_to_half_the_digits_needs_no_claim(seed):
    """30 Kepler steps (2.4e-9 relative at most, measured): within OPAQUE_RTOL = sqrt(eps) for code gradspec
    cannot see inside.  A new user's fixed-point solve (1.5e-9) was reported with 'float32 inside'."""
    assert gs.verify_op(R.np_kepler_op, max_examples=40, seed=seed).ok


def test_an_iterative_solver_is_judged_at_the_accuracy_it_claims():
    plain = gs.verify_op(R.np_kepler_rough_op, max_examples=15, seed=0)
    assert not plain.ok and plain.kinds == ["value"]  # 20 steps, accurate to ~5e-7: beyond OPAQUE_RTOL
    claimed = gs.verify_op(R.np_kepler_rough_op, max_examples=15, seed=0, rtol=1e-6)
    assert claimed.ok, str(claimed)
    assert claimed.accuracy == {"rtol": 1e-6, "atol": 0.0} and "rtol=1e-06" in claimed.replay


def test_a_bug_beyond_the_claimed_accuracy_is_found_and_replays_with_the_claim():
    r = gs.verify_op(R.np_kepler_bug, max_examples=15, seed=0, rtol=1e-6)
    assert not r.ok and "value" in r.kinds, str(r)
    d = r.discrepancies[0]
    assert d.case.meta["accuracy"] == {"rtol": 1e-6, "atol": 0.0}
    assert "accuracy the code under test claims" in d.tolerance_why
    again = gs.check(gs.Case.from_json(d.case.to_json()))  # the claim travels with the case
    assert again.accuracy == (1e-6, 0.0) and any(x.kind == "value" for x in again.discrepancies)


def test_the_claim_is_the_larger_of_the_two_tolerances_and_only_for_the_code_under_test():
    plain = gs.verify_op(R.np_kepler_rough_op, max_examples=15, seed=0)
    case = gs.Case.from_json(plain.discrepancies[0].case.to_json())
    assert not gs.check(case).ok
    case.meta["accuracy"] = {"rtol": 1e-6, "atol": 0.0}
    assert gs.check(case).ok
    # atol alone, as large as the disagreement's scale: the same
    case.meta["accuracy"] = {"rtol": 0.0, "atol": 1e-3}
    assert gs.check(case).ok
    # a claim never loosens the comparison of two estimates of the same forward (FD vs the FD-JVP
    # jacobian): the verdict on that pair is the same with and without it
    pair = ["finite-differences", "jacobian"]
    case.meta["accuracy"] = {"rtol": 0.0, "atol": 1e6}
    with_claim = gs.check(case, oracles=pair)
    case.meta.pop("accuracy")
    assert [c.max_ratio for c in with_claim.comparisons] == [c.max_ratio for c in gs.check(case, oracles=pair).comparisons]


@pytest.mark.parametrize("kw", [{"rtol": -1e-6}, {"atol": float("nan")}, {"rtol": "1e-6"}], ids=str)
def test_a_bad_claim_is_a_clear_error(kw):
    with pytest.raises(ValueError, match="must be a finite number >= 0"):
        gs.verify_op(R.np_kepler_op, max_examples=1, seed=0, **kw)


# ---------------------------------------------------------------------------------------------
# verify_torch_function on the planted Functions
# ---------------------------------------------------------------------------------------------

BUDGET = {"sparsemax": 40, "kepler": 10, "illsolve": 8, "pole": 40}


@pytest.mark.parametrize("family", list(R.FAMILIES), ids=list(R.FAMILIES))
def test_verify_torch_function_is_silent_on_the_correct_function(family):
    f = R.FAMILIES[family]
    r = gs.verify_torch_function(f.ok, max_examples=BUDGET[family], seed=0, **f.kwargs)
    assert r.ok, str(r)


@pytest.mark.parametrize("family", list(R.FAMILIES), ids=list(R.FAMILIES))
def test_verify_torch_function_finds_the_planted_bug(family):
    f = R.FAMILIES[family]
    r = gs.verify_torch_function(f.bug, max_examples=BUDGET[family], seed=0, **f.kwargs)
    assert not r.ok and "value" in r.kinds, str(r)


def test_kink_distance_keeps_cases_away_from_known_kinks():
    def kinks(z):  # distance of the inputs to sparsemax's support boundary
        zs = np.asarray(z)
        p = R.np_sparsemax(zs)
        tau = (zs - p)[p > 0]
        return float(np.min(np.abs(zs - (tau[0] if tau.size else zs.max() - 1)))) if zs.size else np.inf

    r = gs.verify_torch_function(R.Sparsemax.apply, signature="(n)->(n)", kink_distance=kinks, max_examples=20,
                                 seed=1)
    assert r.ok, str(r)
    with pytest.raises(TypeError, match="kink_distance must be callable"):
        gs.verify_torch_function(R.Sparsemax.apply, signature="(n)->(n)", kink_distance=0.1, max_examples=1)


# ---------------------------------------------------------------------------------------------
# torch's intra-op threads inside the oracles
# ---------------------------------------------------------------------------------------------


def test_oracles_run_torch_with_one_thread_and_restore_it(monkeypatch):
    import torch

    before = torch.get_num_threads()
    seen = []
    monkeypatch.delenv(threads.ENV, raising=False)
    with threads.oracle_threads():
        seen.append(torch.get_num_threads())
    assert seen == [1] and torch.get_num_threads() == before
    monkeypatch.setenv(threads.ENV, "default")  # opt out: torch's own setting
    with threads.oracle_threads():
        assert torch.get_num_threads() == before
    monkeypatch.setenv(threads.ENV, "many")
    with pytest.raises(ValueError, match=threads.ENV):
        threads.wanted()


# ---------------------------------------------------------------------------------------------
# gradspec fuzz --rtol / --atol for user ops, and replay with the recorded claim
# ---------------------------------------------------------------------------------------------


def _gradspec(*args, cwd):
    import subprocess
    import sys

    root = str(__import__("pathlib").Path(__file__).resolve().parents[1])
    env = dict(__import__("os").environ, PYTHONPATH=root)
    return subprocess.run([sys.executable, "-m", "gradspec.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_fuzz_rtol_for_a_user_op_and_replay_with_the_claim(tmp_path):
    """With --rtol 1e-6 the correct solver is clean, and its planted bug (1e-4) is still found and replays
    so (beyond the claim)."""
    base = ["--max-examples", 8, "--seed", 1, "-q", "--shrink-seconds", 2, "--rtol", "1e-6"]
    claimed = _gradspec("fuzz", "--ops", "tests._planted_real:np_kepler_op", *base, "--report-dir", tmp_path / "ok",
                        cwd=tmp_path)
    assert claimed.returncode == 0, claimed.stdout + claimed.stderr
    bug = _gradspec("fuzz", "--ops", "tests._planted_real:np_kepler_bug", *base, "--report-dir", tmp_path / "bug",
                    cwd=tmp_path)
    assert bug.returncode == 1, bug.stdout + bug.stderr
    saved = sorted((tmp_path / "bug").glob("d-*/case.json"))[0]
    assert '"accuracy"' in saved.read_text()
    allow = ["--allow-import", "tests._planted_real"] if "--allow-import" in _gradspec(
        "replay", "--help", cwd=tmp_path).stdout else []
    again = _gradspec("replay", saved, *allow, cwd=tmp_path)
    assert again.returncode == 1, again.stdout + again.stderr  # the bug is beyond the claim
    bad = _gradspec("fuzz", "--rtol", "-1", "--report-dir", tmp_path / "x", cwd=tmp_path)
    assert bad.returncode == 2 and "--rtol" in bad.stderr


# ---------------------------------------------------------------------------------------------
# the per-case deadline keeps the budget of verify_*
# ---------------------------------------------------------------------------------------------


class _Slow(R.Pole):
    """A correct Function whose backward takes 0.3 s (or ``HANG`` s): generating cases (which runs
    forwards) is fast, checking one is slow."""

    HANG = 0.3

    @staticmethod
    def backward(ctx, g):
        import time

        time.sleep(_Slow.HANG)
        return R.Pole.backward(ctx, g)


def test_a_seconds_budget_is_kept_inside_a_case():
    import time

    t = time.perf_counter()
    r = gs.verify_torch_function(_Slow.apply, seconds=1.0, seed=0)
    took = time.perf_counter() - t
    # one case calls the backward several times (a few seconds): the run ends at the budget, with the
    # case that was running cut and said so (a 20 s budget used to run to 40-135 s)
    assert took < 2.0, (took, str(r))
    assert not r.discrepancies and any("ran out" in n for n in r.notes), str(r)


def test_a_case_over_the_per_case_deadline_is_a_timeout_finding(monkeypatch):
    from gradspec.verify import numerics

    monkeypatch.setattr(numerics, "CASE_TIMEOUT", 0.5)
    monkeypatch.setattr(_Slow, "HANG", 3.0)
    r = gs.verify_torch_function(_Slow.apply, max_examples=1, seed=0)
    timeouts = [d for d in r.discrepancies if d.kind == "timeout"]
    assert timeouts and "took longer than 0.5 s" in timeouts[0].message, str(r)


class _CubeThroughFloat32(__import__("torch").autograd.Function):
    """Correct, but computed in float32 inside: a staircase at the noise line's scale (~2e-8 |x|)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x.float() ** 3).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (g.float() * 3 * x.float() ** 2).to(x.dtype)


def test_fd_steps_aside_where_the_forward_is_a_float32_staircase():
    # Before: FD measured no noise on its (flat) noise line, vouched for an estimate off by ~quantum / h
    # (3.012 vs 3 at x = 1) and called the correct backward wrong.
    r = gs.verify_torch_function(_CubeThroughFloat32.apply, max_examples=40, seed=0)
    assert r.status == "agree", r.summary()
    case = gs.Case.build({"x": np.array(1.0)}, [("y", "exp", ["x"], {})], ["y"], None)
    assert gs.check(case).status == "agree"  # float64 code: the staircase test stays quiet


def test_fd_estimates_a_float32_staircase_whose_noise_line_is_flat_by_symmetry():
    # x = [[1, 1]], seed [1, 1]: the noise line of n = 2 runs along (1, -1), where x1^3 + x2^3 has no
    # slope, so its repeated values proved nothing and FD vouched for 3.012 vs 3 (a false alarm found
    # when other draws reached this case).  Then a line along the gradient made FD step aside; now the op's
    # float32 values make FD estimate it as a float32 computation, and it witnesses (tests/test_float32_inside.py).
    from gradspec.verify.torch_function import _torch_fn_name

    fn = _CubeThroughFloat32.apply
    gs.verify_torch_function(fn, max_examples=1, seed=0)  # registers the Function as an op
    case = gs.Case.build({"x0": np.array([[1.0, 1.0]])}, [("v0", _torch_fn_name(fn), ["x0"], {})], ["v0"],
                         [np.ones((1, 2))])
    v = gs.check(case)
    assert v.status == "agree", str(v)
    assert "finite-differences" in v.results and any("float32-sized step" in n for n in v.notes), str(v)


from tests._correct_code import TanhThroughFloat32 as _TanhThroughFloat32  # noqa: E402


# Points where the first step resolved the staircase but FD refined into it: at x = 1 (verify seed 11's
# shrunk case) the h / 16^k stencil gave the very same value at every point, so the estimate was 0.0 and
# its error estimate tiny (reference 0.41997 vs 0.0, a FAILED).  Then FD stepped aside there; now it
# estimates at the float32 step and agrees (tests/test_float32_inside.py has more points and the twin).
@pytest.mark.parametrize("x", [1.0, 0.3], ids=["x=1", "x=0.3"])
def test_fd_no_longer_refines_into_a_float32_staircase(x):
    from gradspec.verify.torch_function import _torch_fn_name

    fn = _TanhThroughFloat32.apply
    gs.verify_torch_function(fn, max_examples=1, seed=0)  # registers the Function as an op
    case = gs.Case.build({"x0": np.array(x)}, [("v0", _torch_fn_name(fn), ["x0"], {})], ["v0"], None)
    v = gs.check(case)
    assert "finite-differences" in v.results, str(v)
    _no_alarm_and_agree_only_with_a_witness(v)
    assert v.status == "agree", str(v)


# Points where the whole stencil gave one value (float32's steps wider than 2 h): FD said 0 with a tiny
# error (x = 5: reference 1.8e-4 vs 0.0, a FAILED), and at x = 8 the jacobian's finite-difference JVP said 0
# too (reference 4.77e-7).  Then both probed farther and stepped aside; now both estimate at float32 steps.
# At x = 12 float32's tanh is exactly 1 wherever FD looks and the Function's own rule gives 0.
@pytest.mark.parametrize("x", [5.0, 8.0, 12.0], ids=["x=5", "x=8", "x=12"])
def test_fd_estimates_where_a_float32_staircase_is_flat_over_the_float64_stencil(x):
    from gradspec.verify.torch_function import _torch_fn_name

    fn = _TanhThroughFloat32.apply
    gs.verify_torch_function(fn, max_examples=1, seed=0)  # registers the Function as an op
    case = gs.Case.build({"x0": np.array(x)}, [("v0", _torch_fn_name(fn), ["x0"], {})], ["v0"], None)
    v = gs.check(case)
    assert "finite-differences" in v.results and "jacobian" in v.results, str(v)
    _no_alarm_and_agree_only_with_a_witness(v)
    assert v.status == "agree", str(v)


# A staircase the float32 test cannot see: tanh quantized to 2^-24 plus the float64 constant 0.1 (no value is
# a float32 number).  FD never vouches for a difference quotient of quanta at a float64 step: where the
# quanta are flat over every probe (x = 5) its noise-line probes (gradspec.oracles._fd_probes.staircase) make
# it step aside; where they show on a line a few float32 ulps long (x = 1: hidden_float32) it estimates at
# the float32 step with a float32 error bound (quanta of 2^-24 are float32's size), which holds the true slope;
# the steps are not at x's float32 cells (a float64 quantizer), so the reason does not claim float32 rounding.
_quantized_tanh = gs.Op("t_num_quantized_tanh", forward=lambda x: np.round(np.tanh(x) * 2.0**24) / 2.0**24 + 0.1,
                        vjp=lambda g, x, out: (g * (1 - np.tanh(x) ** 2),))


@pytest.mark.parametrize("x", [1.0, 5.0], ids=["x=1", "x=5"])
def test_a_staircase_the_float32_test_cannot_see_still_makes_fd_step_aside(x):
    case = gs.Case.build({"x": np.array(x)}, [("y", _quantized_tanh.name, ["x"], {})], ["y"], None)
    res = None
    try:
        res = fd.fd_gradient(case)
    except gs.oracles.OracleError as e:
        assert "same value" in str(e) or "very same" in str(e), str(e)
    if res is not None:
        assert res.float32_inside and "far above float64 rounding" in res.float32_why, (res.grads, res.error)
        assert "not where its inputs cross float32 cells" in res.float32_why, res.float32_why
        assert abs(float(res.grads["x"]) - (1 - np.tanh(x) ** 2)) <= float(res.error["x"]), (res.grads, res.error)
    assert gs.check(case).status != "disagree"


def _no_alarm_and_agree_only_with_a_witness(v):
    # No false alarm; "agree" only where an oracle independent of the Function compared (finite differences,
    # the jacobian's FD-JVP): reference and torch-cpu both run its backward, so where the others stepped aside
    # (or were too shaky to witness) the case is inconclusive, never "agree".
    assert v.status != "disagree", str(v)
    if v.status == "agree":
        assert any(set(c.oracles) - {"reference", "torch-cpu"} for c in v.comparisons), str(v)
    else:
        assert "compared with itself" in v.reason, v.reason


class _ReluPassingNegatives(__import__("torch").autograd.Function):
    """relu with the classic bug: its backward passes g where x < 0 too."""

    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, g):
        return g


def test_a_forward_flat_over_the_probe_is_still_a_witness():
    # relu at x = -1 is constant far beyond the flat-stencil probe (~0.025): FD's 0 still finds the bug
    from gradspec.verify.torch_function import _torch_fn_name

    fn = _ReluPassingNegatives.apply
    gs.verify_torch_function(fn, max_examples=1, seed=0)
    case = gs.Case.build({"x0": np.array([-1.0, -0.5])}, [("v0", _torch_fn_name(fn), ["x0"], {})], ["v0"],
                         [np.ones(2)])
    v = gs.check(case)
    assert v.status == "disagree" and "finite-differences" in v.results, str(v)
