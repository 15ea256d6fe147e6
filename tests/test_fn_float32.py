"""verify_torch_function runs fn in float32 too (``dtypes=``, default float64 and float32, the budget
split between them): a backward wrong only in float32 is found and said to be float32-only; correct
code agrees in float32; a float32 forward that computes another function than the float64 one (which
finite differences evaluate) is never taken for a wrong backward."""

from __future__ import annotations

import json

import pytest
import torch

import gradspec as gs
from gradspec import cli
from gradspec.spec import registry
from gradspec.verify.torch_float32 import FLOAT32_ONLY
from tests import _correct_code as C
from tests import _float32_code as F
from tests import _planted as P
from tests.test_replay_findings import first_case

BUGS = {  # id: the Function (its backward wrong in float32 only)
    "scale-1pct": F.ExpF64Only,
    "sign": F.SinSign32,
    "through-float16": F.SquareThroughHalf,
}


def _float32(d) -> bool:
    return d.case is not None and all(l.value.dtype.name == "float32" for l in d.case.leaves)


@pytest.mark.parametrize("fn", BUGS.values(), ids=BUGS.keys())
def test_a_backward_wrong_only_in_float32_is_found_and_said_float32_only(fn):
    r = gs.verify_torch_function(fn.apply, max_examples=30, seed=0)
    assert r.status == "disagree", r.summary()
    d = r.discrepancies[0]
    assert d.kind == "value" and _float32(d), d.message
    assert FLOAT32_ONLY in d.message and d.cause is not None, d.message
    assert "only in float32" in d.cause.summary or FLOAT32_ONLY in d.cause.summary, d.cause  # the diagnosis's or ours


@pytest.mark.parametrize("fn", BUGS.values(), ids=BUGS.keys())
def test_float64_only_runs_do_not_see_a_float32_only_bug_and_say_so(fn):
    r = gs.verify_torch_function(fn.apply, max_examples=15, seed=0, dtypes=("float64",))
    assert r.status == "agree", r.summary()
    assert "float32 was not checked (dtypes=('float64',))" in r.summary()


CORRECT = {  # id: (fn, keywords): correct code, float32 cases only
    "exp": (P.ExpOk.apply, {}),
    "mul-broadcast": (P.MulOk.apply, {}),
    "matmul": (P.MatmulOk.apply, {"signature": "(m,n),(n,p)->(m,p)"}),
    "hypot": (C.Hypot.apply, {}),
    "sincos-two-outputs": (C.SinCos.apply, {}),
    "gradient-returned-in-float64": (F.MulInFloat64.apply, {}),
    "sigmoid-saved-output": (F.Sigmoid.apply, {}),
    "logsumexp": (F.LogSumExp.apply, {"signature": "(n)->()"}),
    "norm": (F.Norm.apply, {"signature": "(n)->()"}),
}


@pytest.mark.parametrize("fn,kw", CORRECT.values(), ids=CORRECT.keys())
def test_correct_code_agrees_in_float32(fn, kw):
    r = gs.verify_torch_function(fn, max_examples=15, seed=1, dtypes=("float32",), **kw)
    assert r.status == "agree", r.summary()
    assert r.cases_run == 15


def test_a_float32_forward_that_is_another_function_is_not_judged_never_accused():
    """A float32 forward 1% off (its backward the derivative of whichever forward ran): finite differences
    witness the float64 forward, another function."""
    r = gs.verify_torch_function(F.ExpForward32.apply, max_examples=15, seed=0, dtypes=("float32",))
    assert r.status != "disagree", r.summary()
    assert any("float32 forward of" in why and "computes another function" in why for why in r.inconclusive), \
        dict(r.inconclusive)


def test_an_ill_conditioned_float32_solve_is_no_finding():
    """A solve of condition 1e6 keeps no digit in float32 (kappa eps32 ~ 0.1): its forward differs from the
    float64 one (those cases are not judged) or its own jittered float32 ops measure that noise."""
    r = gs.verify_torch_function(C.Solve1e6.apply, signature="(n)->(n)", max_examples=15, seed=0, dtypes=("float32",))
    assert r.status != "disagree", r.summary()


def test_fn_runs_in_the_case_dtype_forward_and_backward():
    F.Recorder.seen.clear()
    r = gs.verify_torch_function(F.Recorder.apply, max_examples=12, seed=0)
    assert r.status == "agree", r.summary()
    assert {("forward", "torch.float32"), ("backward", "torch.float32"), ("forward", "torch.float64"),
            ("backward", "torch.float64")} <= F.Recorder.seen, F.Recorder.seen
    F.Recorder.seen.clear()
    gs.verify_torch_function(F.Recorder.apply, max_examples=8, seed=0, dtypes=("float64",))
    assert {dt for _, dt in F.Recorder.seen} == {"torch.float64"}, F.Recorder.seen


NOTES = {  # id: (dtypes, text the note must hold)
    "default-both": (None, "cases are split between float64 and float32: in a float32 case fn's forward and backward "
                           "run on float32 tensors"),
    "float64-only": (("float64",), "float32 was not checked (dtypes=('float64',)): fn runs on float64 inputs"),
    "float32-only": (("float32",), "float64 was not checked (dtypes=('float32',))"),
}


@pytest.mark.parametrize("dtypes,text", NOTES.values(), ids=NOTES.keys())
def test_the_note_says_what_ran_in_float32(dtypes, text):
    r = gs.verify_torch_function(P.SquareOk.apply, max_examples=3, seed=0, dtypes=dtypes)
    assert text in r.summary(), r.summary()
    if dtypes is not None:
        assert f"dtypes={dtypes!r}" in r.replay


@pytest.mark.parametrize("bad", ["float16", ("float64", "int32"), ()], ids=["float16", "int32", "empty"])
def test_dtypes_refuses_what_it_cannot_run(bad):
    with pytest.raises(ValueError, match="verify_torch_function: dtypes"):
        gs.verify_torch_function(P.SquareOk.apply, max_examples=3, dtypes=bad)


def test_torch_dtypes_are_accepted():
    r = gs.verify_torch_function(P.SquareOk.apply, max_examples=3, seed=0, dtypes=(torch.float32,))
    assert r.status == "agree" and "every case is float32" in r.summary()


def test_a_float32_finding_replays_with_the_same_verdict(tmp_path):
    r = gs.verify_torch_function(F.ExpF64Only.apply, max_examples=30, seed=0)
    case = first_case(r, tmp_path)
    data = json.loads(case.read_text())
    assert {l["value"]["dtype"] for l in data["leaves"]} == {"float32"}
    for op in data["meta"]["torch_functions"]:
        registry.all_specs().pop(op, None)  # rebuilt from the file alone
    assert cli.main(["replay", str(case), "--allow-import", "tests._float32_code"]) == 1
    v = gs.check(gs.Case.from_json(case.read_text()))
    assert v.status == "disagree" and any(FLOAT32_ONLY in d.message for d in v.discrepancies), v.summary()


def test_verify_module_runs_a_float32_copy():
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    r = gs.verify_module(net, example_inputs=(torch.randn(5, 3),), max_examples=8, seed=0, dtypes=("float32",))
    assert r.status == "agree", r.summary()
    assert next(net.parameters()).dtype == torch.float32  # the user's module untouched


def test_a_saturated_float32_derivative_is_float32_rounding_not_a_finding():
    """tanh's 1 - y*y from the saved float32 output is 0 at x = 10 (y rounds to 1), where the derivative is
    8.2e-9: float32 cannot resolve it, and torch's own float32 tanh backward gives the same 0.  Reported
    ('rel err 1, tolerance 2.24e-12') until check.rounding_noise jittered fn's own float32 ops too."""
    r = gs.verify_torch_function(F.Tanh.apply, seed=1, dtypes=("float32",))
    assert r.status == "agree", r.summary()
