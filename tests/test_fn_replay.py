"""Findings of ``verify_torch_function`` replay whatever the Function's shape rule was: a reduction
(learnt from example_inputs, or a signature), a tuple output, a positional non-tensor argument.
``gradspec replay`` / ``repro.py`` exit 1 while the bug is there and 0 once the backward is fixed;
``gradspec explain case.json`` runs.  The rule travels in case.json as data, validated field by field.
"""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest
import torch

import gradspec as gs
from gradspec import cli
from gradspec.spec import registry
from tests.test_replay_findings import first_case, run
from tests.test_safety import _good

SRC = textwrap.dedent('''
    import torch

    BUG = {bug}


    class PopVar(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            m = x.mean(-1, keepdim=True)
            ctx.save_for_backward(x, m)
            return ((x - m) ** 2).mean(-1)

        @staticmethod
        def backward(ctx, g):
            x, m = ctx.saved_tensors
            n = x.shape[-1]
            return g.unsqueeze(-1) * 2 * (x - m) / n * ((n - 1) / n if BUG else 1.0)


    class SinCos(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin(), x.cos()

        @staticmethod
        def backward(ctx, gs, gc):
            (x,) = ctx.saved_tensors
            return gs * x.cos() + (1.0 if BUG else -1.0) * gc * x.sin()


    class PowN(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, n):
            ctx.save_for_backward(x)
            ctx.n = n
            return x ** n

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * ctx.n * x ** (ctx.n - 1) * (x if BUG else 1.0), None
''')

X = torch.linspace(-1.3, 1.7, 15, dtype=torch.float64).reshape(3, 5)
CASES = {  # id: (Function, verify keywords, the shape rule recorded)
    "reduction-example-inputs": ("PopVar", lambda: {"example_inputs": (X,)}, "forward"),
    "reduction-signature": ("PopVar", lambda: {"signature": "(n)->()"}, "signature"),
    "tuple-output": ("SinCos", lambda: {"example_inputs": (X,)}, "forward"),
    "non-tensor-argument": ("PowN", lambda: {"example_inputs": (X, 3)}, "forward"),
}


@pytest.fixture
def fnmod(tmp_path, monkeypatch):
    """(write(bug), module name): a module of torch Functions on sys.path, rewritten and re-imported."""
    name = f"fnrep_{tmp_path.name.replace('-', '_')}"
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)

    def write(bug: bool):
        (tmp_path / f"{name}.py").write_text(SRC.format(bug=bug))
        sys.modules.pop(name, None)
        return __import__(name)

    yield write, name
    sys.modules.pop(name, None)


def _forget(case_path):
    """Drop the ops the run registered in this process, so replay rebuilds them from the file alone."""
    for op in json.loads(case_path.read_text())["user_ops"]:
        registry.all_specs().pop(op, None)


@pytest.mark.parametrize("cls,kw,shape", CASES.values(), ids=CASES.keys())
def test_torch_function_findings_replay_1_then_0_after_the_fix(tmp_path, fnmod, cls, kw, shape):
    write, mod = fnmod
    fn = getattr(write(True), cls).apply
    r = gs.verify_torch_function(fn, max_examples=10, seed=0, **kw())
    assert r.status == "disagree", r.summary()
    case = first_case(r, tmp_path)
    rec = json.loads(case.read_text())["meta"]["torch_function_specs"]
    assert [v["shape"] for v in rec.values()] == [shape], rec
    _forget(case)
    assert cli.main(["replay", str(case), "--allow-import", mod]) == 1
    assert cli.main(["explain", str(case), "--allow-import", mod]) == 0
    write(False)  # the backward fixed
    _forget(case)
    assert cli.main(["replay", str(case), "--allow-import", mod]) == 0


def test_repro_py_of_a_torch_function_finding_exits_1_then_0(tmp_path, fnmod):
    # one subprocess pair (~10 s): repro.py rebuilds the op through the same Case.from_json as replay
    write, mod = fnmod
    r = gs.verify_torch_function(write(True).PopVar.apply, example_inputs=(X,), max_examples=10, seed=0)
    repro = first_case(r, tmp_path).parent / "repro.py"
    p = run([repro, "--allow-import", mod], tmp_path, [tmp_path])
    assert p.returncode == 1 and "Traceback" not in p.stdout + p.stderr, p.stdout + p.stderr
    write(False)
    p = run([repro, "--allow-import", mod], tmp_path, [tmp_path])
    assert p.returncode == 0 and "Traceback" not in p.stdout + p.stderr, p.stdout + p.stderr


# ---------------------------------------------------------------------------------------------
# the record is data: every field checked, exit 2 naming it, before any import
# ---------------------------------------------------------------------------------------------

def _rec(**fields):
    base = {"n_args": 1, "tensor_pos": [0], "shape": "forward", "domain": None}
    d = _good()
    d["meta"] = {"torch_functions": ["frob"], "torch_function_specs": {"frob": {**base, **fields}}}
    return d


BAD = {
    "shape-code": (_rec(shape="__import__('os')"), "torch_function_specs.frob.shape"),
    "n-args-huge": (_rec(n_args=10**9), "torch_function_specs.frob.n_args"),
    "tensor-pos-out-of-range": (_rec(tensor_pos=[3]), "torch_function_specs.frob.tensor_pos[0]"),
    "tensor-pos-repeated": (_rec(n_args=2, tensor_pos=[0, 0]), "torch_function_specs.frob.tensor_pos"),
    "signature-bad": (_rec(shape="signature", signature="(n->"), "torch_function_specs.frob.signature"),
    "signature-arity": (_rec(shape="signature", signature="(n),(n)->()"), "torch_function_specs.frob.signature"),
    "signature-without-shape": (_rec(signature="(n)->()"), "torch_function_specs.frob.signature"),
    "domain-not-object": (_rec(domain="positive"), "torch_function_specs.frob.domain"),
    "domain-lo-above-hi": (_rec(domain={"lo": 2, "hi": 1, "points": [], "margin": 0, "name": "interval"}),
                           "torch_function_specs.frob.domain"),
    "domain-name-code": (_rec(domain={"lo": 0, "hi": 1, "points": [], "margin": 0, "name": "os.system('x')"}),
                         "torch_function_specs.frob.domain.name"),
    "unknown-key": (_rec(code="print(1)"), "torch_function_specs.frob"),
    "record-not-object": ({**_good(), "meta": {"torch_function_specs": [1]}}, "meta.torch_function_specs"),
}


@pytest.mark.parametrize("doc,field", BAD.values(), ids=BAD.keys())
def test_a_malformed_torch_function_record_exits_2_naming_the_field(tmp_path, capsys, doc, field):
    path = tmp_path / "case.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["replay", str(path), "--oracles", "reference,finite-differences"]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err, err


def test_the_record_round_trips_with_its_domain():
    from gradspec._private import torchfn_record

    rec = torchfn_record.record(2, [0], "signature", "(n)->()", gs.domains.positive())
    back = torchfn_record.parse({"torch_function_specs": {"f": json.loads(json.dumps(rec))}}, "f")
    assert back["domain"] == gs.domains.positive() and back["signature"] == "(n)->()" and back["n_args"] == 2
    assert np.isinf(back["domain"].hi)


def test_a_node_that_does_not_fit_the_record_is_refused(tmp_path, fnmod, capsys):
    write, mod = fnmod
    r = gs.verify_torch_function(write(True).PowN.apply, example_inputs=(X, 3), max_examples=10, seed=0)
    case = first_case(r, tmp_path)
    d = json.loads(case.read_text())
    for n in d["nodes"]:
        n["params"].pop("arg1", None)  # the non-tensor argument gone
    case.write_text(json.dumps(d))
    _forget(case)
    assert cli.main(["replay", str(case), "--allow-import", mod]) == 2
    err = capsys.readouterr().err
    assert "arg1" in err and "Traceback" not in err, err


def test_a_tensor_argument_with_a_foreign_dtype_is_refused(tmp_path, fnmod, capsys):
    write, mod = fnmod
    r = gs.verify_torch_function(write(True).PowN.apply, example_inputs=(X, 3), max_examples=10, seed=0)
    case = first_case(r, tmp_path)
    d = json.loads(case.read_text())
    for n in d["nodes"]:
        if "arg1" in n["params"]:
            n["params"]["arg1"] = {"__tensor__": [3], "dtype": "load"}  # torch.load is not a dtype
    case.write_text(json.dumps(d))
    _forget(case)
    assert cli.main(["replay", str(case), "--allow-import", mod]) == 2
    err = capsys.readouterr().err
    assert "arg1" in err and "'load'" in err and "Traceback" not in err, err


def test_a_case_saved_before_the_record_still_replays_with_fns_own_output_shape(tmp_path, fnmod):
    write, mod = fnmod
    r = gs.verify_torch_function(write(True).SinCos.apply, example_inputs=(X,), max_examples=10, seed=0)
    case = first_case(r, tmp_path)
    d = json.loads(case.read_text())
    del d["meta"]["torch_function_specs"]  # as written by gradspec before it recorded the rule
    case.write_text(json.dumps(d))
    _forget(case)
    assert cli.main(["replay", str(case), "--allow-import", mod]) == 1




# Findings of the checks verify_torch_function runs beside gs.check (a double backward, a non-contiguous
# grad_output) replayed as 'agree', exit 0: replay ran gs.check only.  Each replays in a new process now.
CHECK_FINDINGS = {
    "double-backward": ("tests.test_torch_double", "_CubeBug", {}, "wrong-double-backward"),
    "non-contiguous-grad-output": ("tests.test_torch_layouts", "_DoubleView", {}, "layout-dependent"),
}


@pytest.mark.parametrize("module, cls, kw, cause", CHECK_FINDINGS.values(), ids=list(CHECK_FINDINGS))
def test_a_finding_of_a_torch_function_check_replays_in_a_new_process(module, cls, kw, cause, tmp_path):
    import importlib

    from tests.test_replay_findings import replay

    fn = getattr(importlib.import_module(module), cls).apply
    r = gs.verify_torch_function(fn, max_examples=12, seed=3, **kw)
    found = [d for d in r.discrepancies if d.cause is not None and d.cause.id == cause]
    assert found, str(r)
    index = r.write_html(str(tmp_path / "rep"))
    case = next(p for p in sorted(__import__("pathlib").Path(index).parent.glob("d-*/case.json"))
                if cause in (p.parent / "index.html").read_text(encoding="utf-8"))
    p = replay(case, tmp_path, module)
    assert p.returncode == 1 and f"[{cause}]" in p.stdout, p.stdout + p.stderr
