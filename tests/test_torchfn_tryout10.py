"""tryout10's torch Functions: an in-place (ctx.mark_dirty) Function on a graph that reads its dirtied input again,
a forward that mutates what it stashed on ctx, ``at=`` points with non-float arguments, what a passing run held
fixed, and the notes on a backward's returns.  Expectations come from how each Function in
tests/_tryout10_torchfn.py was written (its comments), never from running gradspec."""

from __future__ import annotations

import json

import pytest
import torch

import gradspec as gs
from gradspec import caseio
from tests import _tryout10_torchfn as T

MOD = "tests._tryout10_torchfn"


def _in_place_case(tmp_path, reads_again: bool = True):
    """tryout10 F4's shrunk case: y = f(x0, x1); t = tanh(x0); y2 = f(t, x1), f = AddScaledInplace (a graph that
    reads x0 after f wrote into it), as verify_torch_function wrote it."""
    leaf = lambda name, data, rg: {"name": name, "requires_grad": rg, "value": {  # noqa: E731
        "dtype": "float64", "shape": [1, 2], "data": [float.hex(v) for v in data]}}
    seed = lambda data: {"dtype": "float64", "shape": [1, 2], "data": [float.hex(v) for v in data]}  # noqa: E731
    node = lambda name, op, ins, p: {"name": name, "op": op, "inputs": ins, "params": p}  # noqa: E731
    op = "torch_AddScaledInplace"
    d = {"format": "gradspec-case/1", "engine": "reference", "user_ops": {op: f"{MOD}:AddScaledInplace"},
         "leaves": [leaf("x0", [0.32170366688834073, -1.9710766378250741], False),
                    leaf("x1", [1.3116126075925647, 1.5266189817219973], True)],
         "nodes": [node("y", op, ["x0", "x1"], {"arg2": 0.5}), node("t", "tanh", ["x0" if reads_again else "x1"], {}),
                   node("y2", op, ["t", "x1"], {"arg2": 0.5})],
         "roots": ["y", "y2"],
         "seeds": [seed([-1.043624991465423, 1.4350724237877683]), seed([0.5027385001701481, -1.3574042765875693])],
         "meta": {"generator": "gradspec.verify_torch_function (twice, learnt shapes)", "dtype": "float64",
                  "torch_functions": [op], "torch_function_specs": {op: {
                      "n_args": 3, "tensor_pos": [0, 1], "shape": "forward", "domain": None}}}}
    p = tmp_path / "case.json"
    p.write_text(json.dumps(d))
    return caseio.load(str(p), allow_import=(MOD,))


# F4 (high, false alarm + wrong cause): the reference engine reads x0 as it was (a program of values), the torch
# witness read the buffer AddScaledInplace had written into (program order): two programs, and the difference was
# called "keeps state between calls".  Every witness must compute the same program: the in-place call gets its own copy.
def test_an_in_place_function_whose_input_is_read_again_agrees(tmp_path):
    v = gs.check(_in_place_case(tmp_path))
    assert v.ok, [(d.message, d.cause and d.cause.summary) for d in v.discrepancies]


def test_an_in_place_function_agrees_on_a_graph_that_does_not_read_it_again(tmp_path):
    v = gs.check(_in_place_case(tmp_path, reads_again=False))
    assert v.ok, [(d.message, d.cause and d.cause.summary) for d in v.discrepancies]


def _ex(n=1, shape=(3, 4)):
    return tuple(torch.linspace(-1.5, 1.3, 12, dtype=torch.float64).reshape(shape) + k for k in range(n))


@pytest.mark.parametrize("fn, ex", [
    (T.AddScaledInplace.apply, _ex(2) + (0.5,)),
    (T.ScaleInplace.apply, _ex(1)),
    (T.FirstHalfView.apply, _ex(1)),
], ids=["add-scaled-inplace", "scale-inplace", "first-half-view"])
def test_in_place_and_view_returning_functions_agree(fn, ex):
    r = gs.verify_torch_function(fn, example_inputs=ex, max_examples=40, seed=1)
    assert r.status == "agree", [d.cause.summary if d.cause else d.message for d in r.discrepancies]


def test_the_in_place_probe_writes_into_no_callers_tensor():
    from gradspec.verify.torch_call import InPlace

    buf, x = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64, requires_grad=True)
    ip = InPlace()
    given = ip.inputs(lambda ts: T.AddScaledInplace.apply(ts[0], ts[1], 0.5), [buf, x])
    assert ip.seen and given[0] is not buf and given[1] is not x
    assert buf.tolist() == [0.0, 0.0]  # neither the probe nor the copy wrote into the caller's buffer


def test_a_write_into_an_input_read_again_is_not_called_state_between_calls(tmp_path, monkeypatch):
    """The diagnosis on its own: were a witness still to run the in-place call on the caller's tensor (the copy this
    file's first test asks for undone), the difference is that write, read again by another node - never evidence
    of class state."""
    from gradspec.verify import torch_call

    def shared(self, call, xs):  # before F4's fix: a tensor that does not require grad was passed as given
        if self.seen is None and any(isinstance(x, torch.Tensor) and x.requires_grad for x in xs):
            self._probe(call, xs)
        return [x.clone() if self.seen and isinstance(x, torch.Tensor) and x.requires_grad else x for x in xs]

    monkeypatch.setattr(torch_call.InPlace, "inputs", shared)
    v = gs.check(_in_place_case(tmp_path))
    assert not v.ok  # (the two programs differ: this test is about the words)
    for d in v.discrepancies:
        assert d.cause is not None and "state between calls" not in d.cause.summary, d.cause.summary
        assert "in place" in d.cause.summary and "y = torch_AddScaledInplace" in d.cause.summary, d.cause.summary


# F6: a forward that stashes a tensor on ctx and then modifies it in place was found as "no simple pattern" /
# "the ratio varies": the backward reads the modified values.  The cause names the attribute and the fix.
def test_a_forward_that_modifies_what_it_stashed_on_ctx_is_named():
    r = gs.verify_torch_function(T.SquareSavedMutated.apply, example_inputs=_ex(1), max_examples=25, seed=1)
    assert r.status == "disagree"
    c = r.discrepancies[0].cause
    assert c is not None and c.id == "wrong-vjp", c
    for words in ("forward", "ctx.t", "in place", "clone"):
        assert words in c.summary, c.summary
    assert "no simple pattern" not in c.summary and "ratio varies" not in c.summary, c.summary


def test_a_forward_that_modifies_a_clone_it_did_not_stash_agrees():
    r = gs.verify_torch_function(T.SquareSavedGood.apply, example_inputs=_ex(1), max_examples=25, seed=1)
    assert r.status == "agree", [d.cause.summary if d.cause else d.message for d in r.discrepancies]


def test_a_forward_that_fills_a_tensor_it_stashed_on_purpose_agrees():
    """ctx.mask = zeros; ctx.mask.scatter_(...) writes the stash on purpose (the values backward needs): the
    modification is no cause where the backward is right."""
    r = gs.verify_torch_function(T.TopKGateStashFilled.apply, example_inputs=_ex(1) + (2,), max_examples=25, seed=1)
    assert r.status == "agree", [d.cause.summary if d.cause else d.message for d in r.discrepancies]


def test_a_stash_filled_on_purpose_is_not_blamed_for_a_backward_wrong_otherwise():
    """review15 #3: putting the stash back as it was set changes the gradient (exp(x) -> x) but does not make it
    J^T·g; the backward's own mistake (a factor 2) is the cause, as before the stash probe."""
    r = gs.verify_torch_function(T.ExpStashFilledTwice.apply, example_inputs=(torch.linspace(-1, 1, 3, dtype=torch.float64),),
                                 max_examples=10, seed=1)
    assert r.status == "disagree"
    c = r.discrepancies[0].cause
    assert c is not None and "ctx.e" not in c.summary and "clone" not in c.summary, c.summary
    assert "2 × J^T·g" in c.summary, c.summary


# F2: at= points are laid out as example_inputs, non-float arguments (an int k, an int64 index, a count) included;
# before, every such point was refused: "fn's shape rule refuses input shapes [(2, 4)]" (its own example's shapes).
def test_at_takes_points_with_an_int_argument():
    x = torch.tensor([[3.0, 1.0, 1.0, 0.5], [0.2, 0.7, 0.5, 0.1]], dtype=torch.float64)
    r = gs.verify_torch_function(T.TopKGate.apply, example_inputs=(x, 2), at=[(x, 2), (x + 1, 3)], seed=0)
    assert r.status == "agree" and r.cases_run == 2, (r.status, r.reason, r.cases_run)


def test_at_takes_points_with_an_index_tensor_and_a_count():
    x6, idx = torch.linspace(-1, 1, 18, dtype=torch.float64).reshape(6, 3), torch.tensor([0, 2, 2, 1, 0, 2])
    r = gs.verify_torch_function(T.SegmentSum.apply, example_inputs=(x6, idx, 3), at=[(x6, idx, 3)], seed=0)
    assert r.status == "agree" and r.cases_run == 1, (r.status, r.reason, r.cases_run)


def test_at_checks_its_points_own_index_values():
    """A duplicate index given in an at= point (the example has none) is the point checked: the bug is found."""
    x = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(4, 3)
    r = gs.verify_torch_function(T.GatherRowsDropDups.apply, example_inputs=(x, torch.tensor([0, 2, 1])),
                                 at=[(x, torch.tensor([0, 2, 2]))], seed=0)
    assert r.status == "disagree", (r.status, r.reason)


@pytest.mark.parametrize("point, words", [
    ((torch.ones(2, 4, dtype=torch.float64),), ("2 arguments", "got 1")),
    ((torch.ones(2, 4, dtype=torch.float64), torch.ones(2, 4, dtype=torch.float64)), ("argument 1", "int")),
    ((2, torch.ones(2, 4, dtype=torch.float64)), ("argument 0", "float tensor")),
], ids=["arity", "float-tensor-for-k", "number-for-x"])
def test_an_at_point_that_does_not_fit_names_the_argument(point, words):
    x = torch.ones(2, 4, dtype=torch.float64)
    with pytest.raises(gs.UserOpError) as e:
        gs.verify_torch_function(T.TopKGate.apply, example_inputs=(x, 2), at=[point], seed=0)
    assert all(w in str(e.value) for w in words), str(e.value)


# F7: a passing assert_torch_function never showed that an int/bool tensor argument was held at the example's
# values (a backward that drops duplicate indices passes when the example has none): the Result says what was held,
# and a passing assertion warns (pytest's warnings summary names the test; -W error::... makes it fail).
def test_a_passing_assertion_says_which_index_tensor_was_held():
    x = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(4, 3)
    with pytest.warns(gs.testing.HeldFixedWarning) as w:
        r = gs.assert_torch_function(T.GatherRowsDropDups.apply, example_inputs=(x, torch.tensor([0, 2, 1])),
                                     max_examples=10, seed=0)
    assert r.status == "agree"  # (the bug needs a duplicate index: the example has none)
    text = str(w[0].message)
    for words in ("position 1", "int64", "3 elements", "example's values", "at="):
        assert words in text, text
    assert r.held and "position 1" in r.held[0], r.held


def test_a_run_with_only_float_tensors_holds_nothing_and_does_not_warn(recwarn):
    r = gs.assert_torch_function(T.FirstHalfView.apply, example_inputs=_ex(1), max_examples=5, seed=0)
    assert r.held == [] and not [w for w in recwarn if issubclass(w.category, gs.testing.HeldFixedWarning)]


def test_a_held_number_is_listed_but_does_not_warn():
    """review15 #6: a held int dim is listed in r.held (with the args= that varies it) but does not warn: the
    warning's bugs (a duplicate index, an empty mask, an ignored target) need an int/bool tensor, and under
    filterwarnings = error the passing test failed."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", gs.testing.HeldFixedWarning)
        r = gs.assert_torch_function(T.SumDim.apply, example_inputs=(_ex(1)[0], 1), max_examples=5, seed=0)
    assert r.held and r.held[0].startswith("position 1 = 1") and "args={1: st.integers(" in r.held[0], r.held


def test_a_held_index_warns_with_the_index_only_and_lists_the_number_too():
    x6, idx = torch.linspace(-1, 1, 18, dtype=torch.float64).reshape(6, 3), torch.tensor([0, 2, 2, 1, 0, 2])
    with pytest.warns(gs.testing.HeldFixedWarning) as w:
        r = gs.assert_torch_function(T.SegmentSum.apply, example_inputs=(x6, idx, 3), max_examples=5, seed=0)
    text = str(w[0].message)
    assert "position 1" in text and "position 2" not in text and "gs.strategies.indices" in text, text
    assert [h.split(" ")[1] for h in r.held] == ["1", "2"], r.held


# F9: d.case.to_json() of a verify_torch_function finding recorded no import path ("user_ops": {}), so `gradspec
# replay` refused it while the report folder's case.json replayed: one serialisation, both replayable.
def test_a_findings_own_case_json_replays(tmp_path):
    from tests.test_replay_findings import replay

    x = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(4, 3)
    r = gs.verify_torch_function(T.GatherRowsDropDups.apply, example_inputs=(x, torch.tensor([0, 2, 1])),
                                 at=[(x, torch.tensor([0, 2, 2]))], seed=0)
    assert r.status == "disagree"
    text = r.discrepancies[0].case.to_json()
    assert json.loads(text)["user_ops"] == {"torch_GatherRowsDropDups": f"{MOD}:GatherRowsDropDups"}, text[:300]
    (tmp_path / "case.json").write_text(text)
    p = replay(tmp_path / "case.json", tmp_path, MOD)
    assert p.returncode == 1, p.stdout + p.stderr


# F10 / F3: what a backward returns that torch drops or casts without a word: a float "gradient" for an int64 index
# (ctx.needs_input_grad ignored), and a float32 gradient for a float64 input of an op that computes in float32
# inside (compared at float32 precision there, so no value shows it): notes, whatever the op computes inside.
def test_a_gradient_returned_for_an_index_input_is_noted():
    x = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(4, 3)
    r = gs.verify_torch_function(T.GatherRowsGradForIndex.apply, example_inputs=(x, torch.tensor([0, 2, 2])),
                                 max_examples=10, seed=0)
    assert r.status == "agree"
    said = [n for n in r.notes if "needs_input_grad" in n]
    assert said and "position 1" in said[0] and "int64" in said[0], r.notes


def test_a_float32_gradient_for_a_float64_input_is_noted_when_fn_computes_in_float32():
    r = gs.verify_torch_function(T.Softplus32Dtype.apply, example_inputs=_ex(1), max_examples=10, seed=0)
    said = [n for n in r.notes if "returns float32" in n]
    assert said and "input 0" in said[0] and "float64" in said[0], r.notes


def test_a_right_backward_gets_no_return_note():
    x = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(4, 3)
    r = gs.verify_torch_function(T.SegmentSum.apply, example_inputs=(x, torch.tensor([0, 2, 2, 1]), 3),
                                 max_examples=5, seed=0)
    assert not [n for n in r.notes if "needs_input_grad" in n or "returns float32" in n], r.notes
