"""Three outcomes everywhere (CONTRACT §3, §6): the situations of issue 11 where a verdict was wrong.

Silent OKs that must now be ``disagree`` / exit 1 or ``inconclusive`` / exit 3, and false alarms on
correct user code that must now agree (with a note saying what was discounted).  The user code is
in ``tests/_verdict_ops.py`` so that subprocesses and replays can import it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gradspec as gs
from gradspec.oracles.engine_oracle import EngineOracle
from gradspec.testing import GradientMismatch, assert_gradients
from tests import _verdict_ops as V

pytest_plugins = ["pytester"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_TWIN = ["reference", "finite-differences", "jacobian"]  # what is left for a user op without a torch twin


def _sin_case(op, x=(0.5, 2.0)):
    return gs.Case.build({"x": np.array(x)}, [("y", op, ["x"], {})], ["y"], [np.array([1.0, -1.0])])


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    for k in ("GRADSPEC_REPORT_DIR", "PYTEST_XDIST_WORKER"):
        env.pop(k, None)
    return env


def _gradspec(*args, cwd, timeout=240):
    return subprocess.run([sys.executable, "-m", "gradspec.cli", *map(str, args)], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------------------------------------
# gs.check / gs.assert_gradients: the code under test raising or returning the wrong count
# ---------------------------------------------------------------------------------------------

BROKEN_VJPS = [
    pytest.param("vd_raising_vjp", "planted failure inside the vjp", id="vjp-raises"),
    pytest.param("vd_two_grads", "2 gradient", id="vjp-returns-two-gradients-for-one-input"),
]


@pytest.mark.parametrize("op, words", BROKEN_VJPS)
def test_check_reports_a_broken_vjp_even_when_only_fd_and_jacobian_are_left(op, words):
    v = gs.check(_sin_case(op))
    assert v.status == "disagree" and not v.ok
    (d,) = [d for d in v.discrepancies if "reference" in d.oracles]
    assert d.kind == "raised" and d.oracles[0] == "reference"
    assert words in d.message
    assert "DISCREPANCY" in v.summary()


@pytest.mark.parametrize("op, words", BROKEN_VJPS)
def test_assert_gradients_fails_on_a_broken_vjp(op, words):
    with pytest.raises(GradientMismatch, match=words):
        assert_gradients(_sin_case(op))


def test_an_engine_whose_backward_raises_is_a_discrepancy_against_fd_and_jacobian():
    case = _sin_case("sin")
    v = gs.check(case, oracles=["finite-differences", "jacobian", EngineOracle(V.backward_raises)])
    assert v.status == "disagree"
    assert any(d.kind == "raised" and "backward-raises" in d.oracles[0] for d in v.discrepancies)


def test_torch_and_the_code_under_test_raising_together_is_not_a_discrepancy():
    # The root requires no grad: torch raises "does not require grad", and so does the reference engine.
    case = gs.Case.build({"x": np.array([1.0, 2.0])}, [("y", "exp", ["x"], {}), ("s", "sum", ["y"], {})], ["s"],
                         requires_grad={"x": False})
    v = gs.check(case, oracles=["reference", "torch-cpu"])
    assert set(v.errors) == {"reference", "torch-cpu"}
    assert not v.discrepancies
    assert v.status == "inconclusive" and "raised" in v.reason


def test_forward_raising_everywhere_is_inconclusive_and_shows_the_error():
    case = gs.Case.build({"x": np.array([-1.0, 2.0])}, [("y", "vd_raising_fwd", ["x"], {})], ["y"], [np.ones(2)])
    v = gs.check(case, oracles=NO_TWIN)
    assert v.status == "inconclusive" and not v.discrepancies
    assert "forward raised" in v.reason and "planted: forward refuses every input" in v.reason


# ---------------------------------------------------------------------------------------------
# inconclusive is never a pass
# ---------------------------------------------------------------------------------------------


def test_a_check_with_no_pair_to_compare_is_inconclusive_with_the_reason():
    v = gs.check(_sin_case("sin"), oracles=["reference", "torch-cuda"])
    assert v.status == "inconclusive" and not v.ok
    assert "torch-cuda" in v.reason and "CUDA" in v.reason
    assert v.summary().startswith("INCONCLUSIVE")


def test_assert_gradients_does_not_pass_an_inconclusive_check():
    with pytest.raises(AssertionError, match="inconclusive.*torch-cuda"):
        assert_gradients(_sin_case("sin"), oracles=["reference", "torch-cuda"])


def test_assert_gradients_can_skip_an_inconclusive_check_with_the_reason():
    with pytest.raises(pytest.skip.Exception, match="torch-cuda"):
        assert_gradients(_sin_case("sin"), oracles=["reference", "torch-cuda"], inconclusive="skip")


def test_plugin_an_inconclusive_gradient_check_is_not_a_pass(pytester):
    pytester.makepyfile(textwrap.dedent(
        """
        import numpy as np, gradspec as gs

        def _case():
            return gs.Case.build({"x": np.array([0.5])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(1)])

        def test_fixture(gradspec_check):
            gradspec_check(_case(), oracles=["reference", "torch-cuda"])

        def test_skip(gradspec_check):
            gradspec_check(_case(), oracles=["reference", "torch-cuda"], inconclusive="skip")

        def test_agree(gradspec_check):
            gradspec_check(_case(), oracles=["reference", "jacobian"])
        """))
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs")
    res.assert_outcomes(passed=1, failed=1, skipped=1)
    res.stdout.fnmatch_lines(["*inconclusive*torch-cuda*"])


# ---------------------------------------------------------------------------------------------
# no false alarms on correct user code (issue 11 item 7)
# ---------------------------------------------------------------------------------------------


def test_zeros_for_a_non_differentiable_input_agree_with_torch_none():
    case = gs.Case.build({"c": np.array([1.0, -1.0, 2.0]), "a": np.array([0.5, 1.5, -2.0]), "b": np.array([3.0, 4.0, 5.0])},
                         [("y", "vd_where", ["c", "a", "b"], {})], ["y"], [np.array([1.0, 2.0, 3.0])])
    v = gs.check(case)
    assert v.status == "agree", v.summary()
    assert v.results["torch-cpu"]["c"] is None and not np.any(v.results["reference"]["c"])


def test_torch_refusing_a_path_through_a_non_differentiable_input_is_not_counted_against_the_op():
    # Only c requires grad: torch's output has no grad_fn and backward raises "does not require grad";
    # the op's vjp (correctly) gives zeros, as do finite differences and the jacobian.
    case = gs.Case.build({"c": np.array([1.0, -1.0]), "a": np.array([0.5, 1.5]), "b": np.array([3.0, 4.0])},
                         [("y", "vd_where", ["c", "a", "b"], {})], ["y"], [np.array([1.0, 2.0])],
                         requires_grad={"a": False, "b": False})
    v = gs.check(case)
    assert v.status == "agree", v.summary()
    assert "torch-cpu" not in v.errors
    assert any("does not require grad" in str(n) for n in v.notes)


def test_a_twin_that_is_another_function_at_the_point_is_a_twin_mismatch_note():
    # F.softplus(12, threshold=10) returns 12 (linear above its threshold); log(1 + e^12) = 12 + 6.1e-6, a
    # relative difference of 5e-7, 2e9 float64 ulps: not rounding.  Its derivative 1 vs 1 - 6.1e-6 is then no
    # witness.  (At threshold 20 the derivatives differ by 7.6e-10 only: within OPAQUE_RTOL, they agree.)
    case = gs.Case.build({"x": np.array([1.0, 12.0])}, [("y", "vd_softplus", ["x"], {})], ["y"], [np.ones(2)])
    v = gs.check(case)
    assert v.status == "agree", v.summary()
    (note,) = [n for n in v.notes if getattr(n, "id", None) == "twin-mismatch"]
    assert note.op == "vd_softplus" and note.node == "y"
    assert "x[1]" in note.evidence and "12" in note.evidence
    assert all("torch-cpu" not in c.oracles for c in v.comparisons)


def test_a_twin_that_agrees_with_the_forward_still_counts():
    case = gs.Case.build({"x": np.array([1.0, -3.0])}, [("y", "vd_softplus", ["x"], {})], ["y"], [np.ones(2)])
    v = gs.check(case)
    assert v.status == "agree" and not v.notes
    assert any("torch-cpu" in c.oracles for c in v.comparisons)


def test_a_wrong_vjp_is_still_found_when_the_twin_is_discounted():
    case = gs.Case.build({"x": np.array([1.0, 21.0])}, [("y", "vd_softplus_wrong", ["x"], {})], ["y"], [np.ones(2)])
    v = gs.check(case)
    assert v.status == "disagree"
    assert {frozenset(d.oracles) for d in v.discrepancies} >= {frozenset({"reference", "finite-differences"})}


# ---------------------------------------------------------------------------------------------
# verify_*: the code under test never ran
# ---------------------------------------------------------------------------------------------


def test_verify_torch_function_whose_forward_always_raises_is_inconclusive_with_the_error(tmp_path):
    r = gs.verify_torch_function(V.ForwardRaises.apply, max_examples=5, seed=1)
    assert r.status == "inconclusive" and not r.ok
    assert "planted: this forward always raises" in r.reason
    assert "INCONCLUSIVE" in r.summary() and "planted: this forward always raises" in r.summary()
    html = open(r.write_html(str(tmp_path))).read()
    assert "INCONCLUSIVE" in html and "planted: this forward always raises" in html


# ---------------------------------------------------------------------------------------------
# the command line: exit 1 for the broken code, 3 for inconclusive runs
# ---------------------------------------------------------------------------------------------


def _case_file(tmp_path, op_path, op):
    case = _sin_case(op)
    case.user_ops = {op: op_path}
    p = tmp_path / "case.json"
    p.write_text(case.to_json())
    return p


def test_replay_exits_1_on_a_broken_vjp(tmp_path):
    p = _case_file(tmp_path, "tests._verdict_ops:two_grads", "vd_two_grads")
    r = _gradspec("replay", p, "--allow-import", "tests._verdict_ops", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr


def test_replay_exits_3_when_nothing_is_compared(tmp_path):
    p = tmp_path / "case.json"
    p.write_text(_sin_case("sin").to_json())
    r = _gradspec("replay", p, "--oracles", "torch-cuda", "--engine", "reference", cwd=tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "inconclusive" in r.stdout.lower() and "CUDA" in r.stdout


@pytest.mark.parametrize("args", [
    pytest.param(["--ops", "tests._verdict_ops:raising_vjp"], id="user-op-vjp-raises"),
    pytest.param(["--ops", "tests._verdict_ops:two_grads"], id="user-op-vjp-two-gradients"),
    pytest.param(["--engine", "tests._verdict_ops:backward_raises", "--oracles", "finite-differences,jacobian",
                  "--ops", "sin,exp,add"], id="engine-backward-raises"),
])
def test_fuzz_exits_1_on_code_that_raises(tmp_path, args):
    r = _gradspec("fuzz", *args, "--max-examples", 5, "--seed", 1, "--report-dir", tmp_path / "rep", "-q",
                  cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert json.loads((tmp_path / "rep" / "summary.json").read_text())["discrepancies"] >= 1


def test_fuzz_with_only_an_unavailable_oracle_is_inconclusive(tmp_path):
    r = _gradspec("fuzz", "--oracles", "torch-cuda", "--ops", "sin,exp", "--max-examples", 5, "--seed", 1,
                  "--report-dir", tmp_path / "rep", "-q", cwd=tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "inconclusive" in r.stdout.lower() and "CUDA" in r.stdout
    s = json.loads((tmp_path / "rep" / "summary.json").read_text())
    # Availability is known before the first case: the budget is not spent on cases that compare nothing.
    assert s["status"] == "inconclusive" and s["cases"] == 0, s
    assert "only reference of the chosen oracles can run here" in s["reason"] and "torch-cuda" in s["reason"]


def test_verify_op_with_a_twin_that_is_another_function_passes_with_a_twin_mismatch_note():
    # tests/_planted.py's pl_sin_badtorch: forward sin, vjp cos (right), twin torch.cos (another function).
    from tests._planted import pl_sin_badtorch

    r = gs.verify_op(pl_sin_badtorch, max_examples=15, seed=0)
    assert r.status == "agree", r.summary()
    assert any(n.startswith("twin-mismatch on op 'pl_sin_badtorch'") for n in r.notes)


def test_a_kink_of_a_user_op_found_numerically_is_inconclusive_not_a_discrepancy():
    # where(c > 0, a, c) at c = 0 with a = 0: continuous, with slopes 1 and 0 on either side.  The vjp's
    # convention (b's side) and the jacobian's central difference (the average) both describe no derivative.
    # x1[0] (a) is no kink of its own line, but f jumps across c = 0 wherever a != 0: a's partial is 1 on one side
    # and 0 on the other, a convention at the kink -- nothing is compared (review14 #3; 5323248 compared it and
    # agreed only because this vjp's convention matches finite differences' line through c = 0).
    case = gs.Case.build({"x0": np.array([0.0, 1.0, -1.0]), "x1": np.array([0.0, 3.0, 4.0])},
                         [("v1", "vd_where", ["x0", "x1", "x0"], {})], ["v1"], [np.ones(3)])
    v = gs.check(case)
    assert v.status == "inconclusive", v.summary()
    assert "detected numerically at v1[0]" in v.reason and "kink" in v.reason
    assert "x1[0]'s partial changes across that kink at x0[0]" in v.nondifferentiable, v.summary()


def test_a_wrong_vjp_away_from_kinks_is_still_found():
    # the same op shape, off the tie: the wrong vjp of vd_softplus_wrong is found by FD and the jacobian
    case = gs.Case.build({"x": np.array([0.5, -2.0])}, [("y", "vd_softplus_wrong", ["x"], {})], ["y"], [np.ones(2)])
    assert gs.check(case).status == "disagree"


# Seeds whose runs raised a false alarm before (a tie c == a == 0 of where at case 40 of seed 3; softplus
# above its twin's threshold): each must now agree.
@pytest.mark.parametrize("op, seed, n", [(V.where, 3, 100), (V.softplus, 5, 40)],
                         ids=["where-zeros-for-c-and-ties", "softplus-twin-threshold"])
def test_verify_op_raises_no_false_alarm_on_correct_user_code(op, seed, n):
    r = gs.verify_op(op, max_examples=n, seed=seed)
    assert r.status == "agree", r.summary()


def test_fuzz_index_and_summary_say_what_was_compared_and_what_was_not(tmp_path):
    from gradspec import report

    summary = {"cases": 4, "seconds": 1.0, "engine": "reference", "status": "inconclusive",
               "reason": "no pair of oracles was compared in 4 cases: torch-cuda: no CUDA device (4 cases)",
               "oracles": {}, "skipped": {"torch-cuda: no CUDA device": 4}, "inconclusive": 4,
               "inconclusive_reasons": {"no pair of oracles produced gradients (only reference did)": 4}}
    html = open(report.write_run_report(str(tmp_path), summary)).read()
    assert "INCONCLUSIVE" in html and "no pair of oracles was compared in 4 cases" in html
    assert "Cases that compared nothing (4)" in html and "torch-cuda: no CUDA device" in html


def test_an_engine_returning_gradients_of_another_dtype_is_a_discrepancy():
    v = gs.check(_sin_case("sin"), oracles=["finite-differences", "jacobian", EngineOracle(V.float32_grads)])
    assert v.status == "disagree"
    (d,) = [d for d in v.discrepancies if d.kind == "dtype"]
    assert "float32-grads" in d.oracles[0] and d.leaf == "x" and "float32" in d.message and "float64" in d.message


INFINITE_FORWARDS = {  # the explicit J.seed meets 0 * inf there; reverse mode (reference, torch) does not
    "exp-of-inf": ({"x": np.array([np.inf, 1.0])}, [("y", "exp", ["x"], {})], [np.ones(2)]),
    "inf-times-zero-weight": ({"x": np.array([np.inf, 1.0]), "w": np.array([0.0, 2.0])}, [("y", "mul", ["x", "w"], {})],
                              [np.ones(2)]),
    "exp-overflows": ({"x": np.array([800.0, 1.0])}, [("h", "exp", ["x"], {}), ("y", "sum", ["h"], {})], None),
    "matmul-with-inf": ({"x": np.array([[np.inf, 1.0], [2.0, 3.0]]), "a": np.eye(2)}, [("y", "matmul", ["x", "a"], {})],
                        [np.ones((2, 2))]),
}


@pytest.mark.parametrize("leaves, nodes, seeds", INFINITE_FORWARDS.values(), ids=list(INFINITE_FORWARDS))
def test_an_infinite_forward_is_no_nan_inf_pattern_finding_against_the_jacobian(leaves, nodes, seeds):
    case = gs.Case.build(leaves, nodes, [nodes[-1][0]], seeds)
    v = gs.check(case, oracles=["reference", "jacobian", "finite-differences", "torch-cpu"])
    assert v.status == "agree", str(v)
    assert "is infinite at this point" in v.skipped["jacobian"]  # said, not silently dropped


def test_an_engine_with_nan_where_the_forward_is_infinite_is_still_found():
    # The jacobian steps aside there; the reference and torch still judge the engine under test.
    from gradspec.oracles.engine_oracle import EngineOracle
    from tests._planted import Small

    class NanGrad(Small):
        def grad(self, tensor):
            g = super().grad(tensor)
            return None if g is None else np.full(np.shape(g), np.nan)

    leaves, nodes, seeds = INFINITE_FORWARDS["exp-of-inf"]
    case = gs.Case.build(leaves, nodes, ["y"], seeds)
    v = gs.check(case, oracles=[EngineOracle(NanGrad(), "nan-grad"), "reference", "jacobian", "torch-cpu"])
    assert v.status == "disagree" and any(d.kind == "nan-inf-pattern" for d in v.discrepancies), str(v)


def test_an_internal_error_of_finite_differences_is_named_as_gradspecs_own(monkeypatch):
    # Before: excused as "finite-differences could not estimate the gradient (AttributeError: ...)",
    # which reads like the user's forward failing at a perturbed point.
    from gradspec.oracles import fd

    monkeypatch.setattr(fd, "_steps", None)  # a TypeError raised in fd.py's own frame (fd_gradient calls it first)
    v = gs.check(_sin_case("sin"), oracles=["reference", "finite-differences", "jacobian"])
    assert "failed inside gradspec itself" in v.excused["finite-differences"], v.excused



# A correct float32 graph from the 20,000-case soak (seed 53) whose gradient of x2 is subnormal in
# float32 (-9.06e-40): reference and torch gave -9.0598e-40, the jacobian -9.0607e-40 (62 spacings
# of 1.4e-45 apart), judged against rtol x 9e-40 = 5.5e-44 before the float32 underflow floor.
SUBNORMAL_CASE = (
    '{"format": "gradspec-case/1", "engine": "reference", "user_ops": {}, "leaves": [{"name": "x0", '
    '"requires_grad": true, "value": {"dtype": "float32", "shape": [3, 1, 4], "data": ["0x1.85b4aa0000000p+1", '
    '"0x1.0fba3a0000000p+3", "0x1.35fffe0000000p+3", "0x1.f82b440000000p+5", "0x1.69433e0000000p+2", '
    '"0x1.f82b440000000p+5", "-0x1.ff3b640000000p-1", "0x1.a596ea0000000p+2", "-0x1.ff3b640000000p-1", '
    '"-0x1.ff3b640000000p-1", "0x1.4ab2f00000000p+2", "-0x1.6b3d2a0000000p-2"]}}, {"name": "x1", "requires_grad": '
    'true, "value": {"dtype": "float32", "shape": [], "data": ["-0x1.314de20000000p+2"]}}, {"name": "x2", '
    '"requires_grad": true, "value": {"dtype": "float32", "shape": [], "data": ["0x1.3ab6e40000000p+3"]}}, {"name":'
    ' "x3", "requires_grad": true, "value": {"dtype": "float32", "shape": [], "data": ["0x1.f400000000000p+9"]}}], '
    '"nodes": [{"name": "v0", "op": "unsqueeze", "inputs": ["x0"], "params": {"dim": -4}}, {"name": "v1", "op": '
    '"softplus", "inputs": ["x1"], "params": {"beta": 2.0, "threshold": 20.0}}, {"name": "v2", "op": "erf", '
    '"inputs": ["x2"], "params": {}}, {"name": "v3", "op": "sqrt", "inputs": ["x2"], "params": {}}, {"name": "v4", '
    '"op": "square", "inputs": ["x3"], "params": {}}, {"name": "v5", "op": "log1p", "inputs": ["x0"], "params": '
    '{}}, {"name": "v6", "op": "expand", "inputs": ["v1"], "params": {"size": [0, 0]}}, {"name": "v7", "op": "elu",'
    ' "inputs": ["x0"], "params": {"alpha": 1.0}}], "roots": ["v2"], "seeds": [{"dtype": "float32", "shape": [], '
    '"data": ["-0x1.97a5aa0000000p+9"]}], "meta": {"generator": "gradspec.strategies.cases", "dtype": "float32"}}'
)


def test_float32_gradients_below_the_smallest_normal_are_no_evidence():
    v = gs.check(gs.Case.from_json(SUBNORMAL_CASE))
    assert v.status == "agree", str(v)


# Found by benchmarks/throughput.py (fuzz --engine reference, seed 100): gelu at x = -8.1 in float32, where
# erf(x / sqrt 2) rounds to exactly -1 and the derivative's 1 + erf cancels to 0.  Correct libraries differ
# there by an ulp of erf (torch gives 0, the reference -2.93e-14, the float64 Jacobian -2.89e-14); the rounding
# noise estimate missed it because both of its jittered runs drew perturbations under half an ulp of -1.
GELU_CANCELLATION_CASE = (
    '{"format": "gradspec-case/1", "engine": "reference", "leaves": [{"name": "x0", "requires_grad": true, "value":'
    ' {"dtype": "float32", "shape": [1, 4, 1], "data": ["0x1.47ae2a0000000p-7", "0x1.0000000000000p-2", "0x1.32463c'
    '0000000p+3", "0x1.47ae2a0000000p-7"]}}, {"name": "x1", "requires_grad": true, "value": {"dtype": "float32", "s'
    'hape": [1], "data": ["-0x1.03a78c0000000p+3"]}}, {"name": "x2", "requires_grad": true, "value": {"dtype": "flo'
    'at32", "shape": [1], "data": ["0x1.0000000000000p+0"]}}, {"name": "x3", "requires_grad": true, "value": {"dtyp'
    'e": "float32", "shape": [4, 1, 2], "data": ["0x1.0000000000000p+1", "0x1.0000000000000p-1", "0x1.0487b80000000'
    'p+3", "0x1.8000000000000p+1", "0x1.812b880000000p+9", "0x1.8000000000000p+1", "0x1.91a4040000000p+2", "0x1.f40'
    '0000000000p+9"]}}], "nodes": [{"name": "v0", "op": "abs", "inputs": ["x0"], "params": {}}, {"name": "v1", "op"'
    ': "stack", "inputs": ["x1", "x2"], "params": {"dim": -1}}, {"name": "v2", "op": "pow_scalar", "inputs": ["x2"]'
    ', "params": {"exponent": 2}}, {"name": "v3", "op": "var", "inputs": ["v2"], "params": {"dim": [-1], "keepdim":'
    ' true, "correction": 0, "full": true}}, {"name": "v4", "op": "rsqrt", "inputs": ["x3"], "params": {}}, {"name"'
    ': "v5", "op": "pow_scalar", "inputs": ["x0"], "params": {"exponent": 1.5}}, {"name": "v6", "op": "gelu", "inpu'
    'ts": ["v1"], "params": {"approximate": "none"}}, {"name": "v7", "op": "conv1d_nobias", "inputs": ["x0", "x0"],'
    ' "params": {"stride": 2, "padding": 0, "dilation": 2}}, {"name": "v8", "op": "log1p", "inputs": ["x3"], "param'
    's": {}}, {"name": "v9", "op": "prod", "inputs": ["v7"], "params": {"dim": [-3], "keepdim": true}}], "roots": ['
    '"v6"], "seeds": [{"dtype": "float64", "shape": [1, 2], "data": ["0x1.cb9d9674bc6aap+0", "0x1.0000000000000p-1"'
    ']}], "meta": {"generator": "gradspec.strategies.case_groups", "dtype": "float32"}}'
)


def test_rounding_noise_sees_an_ulp_of_a_value_that_cancels_later():
    v = gs.check(gs.Case.from_json(GELU_CANCELLATION_CASE))
    assert v.status == "agree", str(v)


# A new user's mm case with requires_grad false on every leaf: reference and torch both raised "element 0
# of tensors does not require grad" (excused: torch refuses too), finite differences and the jacobian
# returned {} and {} -- and that pair counted as a comparison: "OK: 1 oracle pair(s) compared", exit 0.
NO_GRAD_CASE = (
    '{"format": "gradspec-case/1", "engine": "reference", "user_ops": {}, "leaves": [{"name": "x0", "requires_grad":'
    ' false, "value": {"dtype": "float64", "shape": [1, 2], "data": ["0x1.8p+0", "-0x1.4p-2"]}}, {"name": "x1", '
    '"requires_grad": false, "value": {"dtype": "float64", "shape": [2, 2], "data": ["0x1.4p+0", "0x1.cp-1", '
    '"-0x1.2p-2", "0x1.6p+0"]}}], "nodes": [{"name": "y", "op": "mm", "inputs": ["x0", "x1"], "params": {}}], '
    '"roots": ["y"], "seeds": [{"dtype": "float64", "shape": [1, 2], "data": ["0x1.0p+0", "-0x1.8p-1"]}], "meta": {}}'
)


def test_a_case_where_no_leaf_requires_grad_is_inconclusive(tmp_path):
    v = gs.check(gs.Case.from_json(NO_GRAD_CASE))
    assert v.status == "inconclusive" and not v.comparisons, str(v)
    assert v.reason.startswith("no leaf requires grad: nothing to compare"), v.reason
    p = tmp_path / "case.json"
    p.write_text(NO_GRAD_CASE)
    r = _gradspec("replay", p, cwd=tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "no leaf requires grad: nothing to compare" in r.stdout


from tests._correct_code import TanhThroughFloat32Off as _F32BadTanh  # noqa: E402


def test_a_torch_function_compared_only_with_itself_is_inconclusive_not_agree():
    # reference and torch-cpu both run fn's backward: their agreement says nothing about it.  Before, with
    # finite differences and the jacobian both refusing (a float32 staircase), the case said "agree".
    from gradspec.verify.torch_function import _torch_fn_name

    fn = _F32BadTanh.apply
    gs.verify_torch_function(fn, arity=1, max_examples=1, seed=0)  # registers the Function as an op
    case = gs.Case.build({"x": np.array([8.0])}, [("y", _torch_fn_name(fn), ["x"], {})], ["y"], [np.ones(1)])
    # (finite differences and the jacobian now estimate this float32 staircase at a float32 step and find the
    # bug, tests/test_float32_inside.py: without them only the Function's own backward is left)
    assert gs.check(case).status == "disagree"
    v = gs.check(case, oracles=["reference", "torch-cpu"])
    assert v.status == "inconclusive", str(v)
    assert "itself" in v.reason and "no independent oracle ran" in v.reason, v.reason
    # a built-in op's torch twin is independent code: the same pair still decides there
    c2 = gs.Case.build({"x": np.array([0.5])}, [("y", "tanh", ["x"], {})], ["y"], [np.ones(1)])
    assert gs.check(c2, oracles=["reference", "torch-cpu"]).status == "agree"


def test_a_case_whose_leaves_are_all_empty_says_only_shapes_were_compared():
    """Zero-element gradients: the shapes are compared (an engine returning None or a wrong shape is found),
    but no value is; an 'agree' there must say so rather than read like a checked gradient."""
    empty = gs.Case.build({"x": np.ones((0, 3))}, [("y", "sin", ["x"], {})], ["y"], [np.ones((0, 3))])
    v = gs.check(empty)
    assert v.status == "agree" and any("no values to compare" in n for n in v.notes), v.notes
    assert not any("no values" in n for n in gs.check(_sin_case("sin")).notes)


def test_a_runs_note_on_cases_with_empty_leaves_is_one_line():
    from gradspec.outcome import run_notes

    notes: list = []
    for shape in [(0, 3), (2, 0), (0,)]:
        c = gs.Case.build({"x": np.ones(shape)}, [("y", "sin", ["x"], {})], ["y"], [np.ones(shape)])
        run_notes(notes, gs.check(c, oracles=["reference", "finite-differences"]))
    assert len(notes) == 1 and notes[0].startswith("on some cases every leaf") and "(0, 3)" in notes[0], notes


@pytest.mark.parametrize("shape", [(), (1,), (3,), (0,), (2, 3), (4, 4, 2), (7, 1, 3)], ids=str)
def test_rounding_noise_signs_are_the_draws_rng_choice_makes(shape):
    """The noise runs draw each value's sign as ``rng.choice((-1.0, 1.0), shape)`` did (the same generator
    stream, so the same noise floor and the same verdicts), without choice's own argument checks."""
    from gradspec._check_noise import _signs

    for seed in range(30):
        old, new = np.random.default_rng(seed), np.random.default_rng(seed)
        for _ in range(3):
            a = old.uniform(0.25, 1, shape) * old.choice((-1.0, 1.0), shape)
            b = new.uniform(0.25, 1, shape) * _signs(new, shape)
            assert type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def test_rounding_noise_from_the_reference_answer_is_the_noise_it_measures_itself():
    """``gs.check`` hands the reference oracle's gradients to ``rounding_noise`` as its unjittered run: the noise
    floor must be bit for bit the one it measures by running that itself (the jittered runs draw the same
    generator stream: the unjittered run draws nothing).  Cases with a leaf the roots do not reach (None), the
    gelu cancellation and the strategies' mix, float32 included."""
    from gradspec._check_noise import rounding_noise
    from gradspec._private.sampling import sample

    unreached = gs.Case.build({"x": np.array([0.5, 2.0]), "u": np.array([1.0])}, [("y", "tanh", ["x"], {})], ["y"],
                              [np.ones(2)])
    cases = [unreached, gs.Case.from_json(GELU_CANCELLATION_CASE)] + sample(gs.strategies.cases(), 40, 17)
    ref = gs.oracles.get("reference")
    for case in cases:
        base = ref.vjp(case)
        own, given = rounding_noise(case), rounding_noise(case, base=base)
        assert (own is None) == (given is None)
        assert own is None or {k: (v.dtype, v.tobytes()) for k, v in own.items()} == \
            {k: (v.dtype, v.tobytes()) for k, v in given.items()}, case.to_text()
    assert base is not None and rounding_noise(unreached, base=ref.vjp(unreached))["x"].shape == (2,)
