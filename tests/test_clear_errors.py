"""Errors a new user hit that did not say what was wrong (tryout 2, finding 10): each names the thing given
and the fix."""

from __future__ import annotations

import pytest
import torch

import gradspec as gs
from gradspec import cli


def _refuse_value(x):
    raise ValueError("nope")


def _refuse_key(x):
    raise KeyError("no such column")


ALWAYS_RAISING = {
    "elementwise-ValueError": (gs.Op("tf_nope", forward=_refuse_value, vjp=lambda g, x, out: (g,)),
                               "forward of op 'tf_nope' raised ValueError: nope"),
    "reduction-KeyError": (gs.Op("tf_nope_red", forward=_refuse_key, vjp=lambda g, x, out: (g,),
                                 signature="(n)->()"),
                           "forward of op 'tf_nope_red' raised KeyError: 'no such column'"),
}


@pytest.mark.parametrize("op, words", ALWAYS_RAISING.values(), ids=list(ALWAYS_RAISING))
def test_verify_op_whose_forward_always_raises_names_the_exception(op, words):
    r = gs.verify_op(op, max_examples=3, seed=0)
    assert r.status == "inconclusive" and not r.discrepancies, str(r)
    assert words in r.reason, r.reason
    # Hypothesis' "make your filters less strict" is about gradspec's filters, not the user's: not shown
    assert not any("Unsatisfiable" in n for n in r.notes), r.notes


class _NotAnOp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 2 * g


def _plain(x):
    return x


NOT_AN_OP = 1.5

# --ops module:attr that is not a gs.Op: (attr, words the message must hold)
BAD_OPS = {
    "function-class": ("_NotAnOp", ["tests.test_clear_errors:_NotAnOp is a torch.autograd.Function",
                                    "gs.verify_torch_function(_NotAnOp.apply)", "gs.Op"]),
    "function-apply": ("_NotAnOp.apply", ["tests.test_clear_errors:_NotAnOp.apply is a torch.autograd.Function",
                                          "gs.verify_torch_function(_NotAnOp.apply)"]),
    "plain-function": ("_plain", ["tests.test_clear_errors:_plain is a function, not a gradspec op",
                                  "gs.Op(", "gs.verify_torch_function"]),
    "number": ("NOT_AN_OP", ["tests.test_clear_errors:NOT_AN_OP is a float, not a gradspec op"]),
}


@pytest.mark.parametrize("attr, words", BAD_OPS.values(), ids=list(BAD_OPS))
def test_fuzz_ops_that_is_not_an_op_is_a_usage_error_naming_it(attr, words, tmp_path, capsys):
    rc = cli.main(["fuzz", "--ops", f"tests.test_clear_errors:{attr}", "--max-examples", "1",
                   "--report-dir", str(tmp_path / "rep")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "internal error" not in err and "None" not in err, err
    for w in words:
        assert w in err, (w, err)


def _detached(x):
    return torch.tanh(x).detach() * 2


def test_a_plain_function_that_detaches_is_not_said_to_have_a_wrong_backward():
    r = gs.verify_torch_function(_detached, max_examples=3, seed=0)
    assert r.status == "disagree", str(r)
    summary = r.discrepancies[0].cause.summary
    assert ".backward" not in summary and "no gradient to compare" not in summary, summary
    assert "no gradient flows through detached to x0" in summary and "detach" in summary, summary


class _ThreeInputs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, a, b):
        return x * a * b

    @staticmethod
    def backward(ctx, g):
        return g, g, g


# Bad arguments to verify_torch_function (tryout9 #8): (kwargs, words the message must hold, words it must not)
BAD_FN_INPUTS = {
    # was "verify_torch_function: zip() argument 2 is shorter than argument 1"
    "domain-list-too-short": (dict(fn=_ThreeInputs.apply, arity=3, domain=[gs.domains.positive()]),
                              ["domain=", "1 ", "3 ", "one per input"], ["zip()"]),
    "domain-list-too-long": (dict(fn=_ThreeInputs.apply, domain=[gs.domains.positive()] * 4),
                             ["domain=", "4 ", "3 ", "one per input"], ["zip()"]),
    # was "cannot infer fn's number of tensor inputs; pass arity=N"
    "function-class": (dict(fn=_ThreeInputs), ["_ThreeInputs.apply"], ["cannot infer"]),
}


@pytest.mark.parametrize("kw, words, not_words", BAD_FN_INPUTS.values(), ids=list(BAD_FN_INPUTS))
def test_bad_verify_torch_function_arguments_name_the_argument_and_the_fix(kw, words, not_words):
    kw = dict(kw)
    fn = kw.pop("fn")
    with pytest.raises((TypeError, ValueError)) as e:
        gs.verify_torch_function(fn, max_examples=3, seed=0, **kw)
    text = str(e.value)
    assert all(w in text for w in words) and not any(w in text for w in not_words), text
