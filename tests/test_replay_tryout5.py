"""Replay of what a fifth new user (tryout5, a custom-ops library) found: a ``torch.library.custom_op``
finding replays by its import path (it was recorded as "defined inline", exit 2); a ``verify_module``
finding says truthfully why it cannot replay in another process (it blamed "__main__ or inside a
function" for a module-level class)."""

from __future__ import annotations

import json

import pytest

import gradspec as gs
from gradspec import cli
from gradspec.spec import registry
from tests import _planted_user as pu
from tests.test_replay_findings import first_case, run

MODULE_NOTE = "cannot be replayed by `gradspec replay`"


def _forget(case_path):
    """Drop the ops the run registered in this process, so replay rebuilds them from the file alone."""
    d = json.loads(case_path.read_text())
    for op in list(d["user_ops"]) + [n["op"] for n in d["nodes"]]:
        if op.startswith("torch_"):
            registry.all_specs().pop(op, None)


def test_a_custom_op_finding_records_its_import_path_and_replays_1_then_0_once_fixed(tmp_path, capsys):
    r = gs.verify_torch_function(pu.scaled_cube_noscale, example_inputs=pu.CUBE_EXAMPLE, max_examples=10, seed=0)
    assert r.status == "disagree", r.summary()
    assert not any("inside a function" in str(n) for n in r.notes), r.notes
    case = first_case(r, tmp_path)
    d = json.loads(case.read_text())
    (op, path), = d["user_ops"].items()  # was {} and meta.inline_ops = [op]
    assert path == "tests._planted_user:scaled_cube_noscale" and "inline_ops" not in d["meta"], d
    _forget(case)
    assert cli.main(["replay", str(case), "--allow-import", "tests._planted_user"]) == 1, capsys.readouterr()
    # the same case with the op's backward fixed (the correct twin under the recorded name): it no longer reproduces
    d["user_ops"][op] = "tests._planted_user:scaled_cube"
    case.write_text(json.dumps(d))
    _forget(case)
    assert cli.main(["replay", str(case), "--allow-import", "tests._planted_user"]) == 0, capsys.readouterr()


def test_a_custom_op_case_without_permission_names_the_module_and_the_flag(tmp_path, capsys):
    r = gs.verify_torch_function(pu.scaled_cube_noscale, example_inputs=pu.CUBE_EXAMPLE, max_examples=10, seed=0)
    case = first_case(r, tmp_path)
    _forget(case)
    capsys.readouterr()
    # the module is imported in this process already: without --allow-import a custom op (not a class or
    # gs.Op) is still refused, naming the flag
    assert cli.main(["replay", str(case)]) == 2
    err = capsys.readouterr().err
    assert "--allow-import tests._planted_user" in err and "Traceback" not in err, err


@pytest.fixture(scope="module")
def module_finding(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("modrep")
    r = gs.verify_module(pu.TinyNet(pu.LinearFnFirstOnly), example_inputs=pu.NET_EXAMPLE, max_examples=12, seed=0)
    assert r.status == "disagree", r.summary()
    return r, first_case(r, tmp)


def test_a_module_finding_says_why_it_does_not_replay_not_that_it_was_defined_inline(module_finding, capsys):
    r, case = module_finding
    notes = " ".join(map(str, r.notes))
    assert "__main__ or inside a function" not in notes, notes  # TinyNet is a module-level class
    assert MODULE_NOTE in notes and "gs.verify_module(" in notes, notes
    _forget(case)
    assert cli.main(["replay", str(case), "--allow-import", "tests._planted_user"]) == 2
    err = capsys.readouterr().err
    assert "defined inline" not in err and "verify_module" in err and "TinyNet" in err, err


def test_a_module_findings_repro_py_exits_2_saying_why(module_finding, tmp_path):
    _, case = module_finding
    p = run([case.parent / "repro.py"], tmp_path)
    out = p.stdout + p.stderr
    assert p.returncode == 2 and "verify_module" in out and "defined inline" not in out, out


# ---------------------------------------------------------------------------------------------
# tryout5 #8: names from a case file are data; a control character in one forged output lines
# ("OK: 6 oracle pair(s) compared") and ran terminal escape sequences in replay / explain
# ---------------------------------------------------------------------------------------------

def _named(name: str) -> dict:
    """tryout5's hostile/ansi_newline/case.json with leaf x0 renamed to ``name``."""
    return {"format": "gradspec-case/1", "engine": "reference", "user_ops": {},
            "leaves": [{"name": name, "requires_grad": True, "value": {"dtype": "float64", "shape": [2], "data": [0.5, -1.0]}},
                       {"name": "x1", "requires_grad": True, "value": {"dtype": "float64", "shape": [2], "data": [1.5, 2.0]}}],
            "nodes": [{"name": "y", "op": "exp", "inputs": [name], "params": {}},
                      {"name": "z", "op": "mul", "inputs": ["y", "x1"], "params": {}}],
            "roots": ["z"], "seeds": [{"dtype": "float64", "shape": [2], "data": [1.0, 2.0]}], "meta": {}}


HOSTILE_NAMES = {
    "newline-forges-an-ok-line": "x0\nOK: 6 oracle pair(s) compared",
    "ansi-clear-screen-and-title": "x0\x1b[2J\x1b]0;pwned\x07",
    "carriage-return": "x0\rOK",
    "bidi-override": "x0\u202egnp.exe",
    "nul": "x0\x00",
    "line-separator": "x0\u2028OK",
}


@pytest.mark.parametrize("command", ["replay", "explain"])
@pytest.mark.parametrize("name", HOSTILE_NAMES.values(), ids=HOSTILE_NAMES.keys())
def test_a_control_character_in_a_name_is_refused_before_anything_is_printed(tmp_path, capsys, command, name):
    path = tmp_path / "case.json"
    path.write_text(json.dumps(_named(name)))
    assert cli.main([command, str(path)]) == 2
    out, err = capsys.readouterr()
    assert "leaves[0].name" in err and "control character" in err, err
    assert "\x1b" not in out + err and "\x07" not in out + err and "OK:" not in out, out + err


def test_a_name_in_another_script_still_loads(tmp_path, capsys):
    path = tmp_path / "case.json"
    path.write_text(json.dumps(_named("x_α")))
    assert cli.main(["replay", str(path)]) == 0, capsys.readouterr()


# ---------------------------------------------------------------------------------------------
# tryout5 #7: under the dev profile a failure found once is replayed first next time (as
# gradspec/profiles.py says); verify_* ran without any example database, so a rare bug failed
# one run in three and passed the others
# ---------------------------------------------------------------------------------------------

FINDS, MISSES = 2, 0  # seeds of a 4-case search: 2 meets RareBug's inputs, 0 does not (checked below)


@pytest.fixture
def profile(tmp_path):
    """load(name): gradspec's profile ``name``, its example database (if any) in tmp_path; restored after."""
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    before = settings.get_current_profile_name()
    saved = {n: settings.get_profile(n) for n in ("dev", "ci")}

    def load(name):
        db = DirectoryBasedExampleDatabase(str(tmp_path / ".hypothesis")) if saved[name].database is not None else None
        settings.register_profile(name, parent=saved[name], database=db)
        settings.load_profile(name)

    yield load
    for n, s in saved.items():
        settings.register_profile(n, parent=s)
    settings.load_profile(before)


@pytest.mark.parametrize("name, third_run", [("dev", "disagree"), ("ci", "agree")])
def test_a_failure_found_once_is_replayed_first_under_dev_only(profile, name, third_run):
    from tests._tryout5_code import RARE_EXAMPLE, RareBug

    def run_with(seed):
        return gs.verify_torch_function(RareBug.apply, example_inputs=RARE_EXAMPLE, max_examples=4,
                                        dtypes=("float64",), seed=seed)

    profile(name)
    assert run_with(MISSES).status == "agree"  # this seed alone never meets the bug
    assert run_with(FINDS).status == "disagree"
    again = run_with(MISSES)  # dev: the saved failure replays first; ci: nothing is carried between runs
    assert again.status == third_run, again.summary()
    if third_run == "disagree":
        assert any("replayed from the example database" in (getattr(d, "note", "") or "") for d in again.discrepancies)


# ---------------------------------------------------------------------------------------------
# tryout5 #10: smaller things a user reads
# ---------------------------------------------------------------------------------------------

def test_a_run_whose_only_case_the_budget_cut_says_so_in_its_reason():
    # verify_torch_function(Hang.apply, seconds=10): the one case hung and was cut by the budget; the reason said
    # "no pair of oracles was compared in 1 case", the cut only in a note
    from gradspec.result import Result
    from gradspec.verify.numerics import cut_by_budget

    r = Result(target="Hang.apply", what="torch function", seed=1)
    r.cases_run = 1
    cut_by_budget(r, 10, 8.97)
    assert r.status == "inconclusive" and "time budget of 10 s ran out inside a case" in r.reason, r.reason


EXPLAIN_ERRORS = {  # argv -> words the error must hold (and it must stay short)
    # read now (was "cannot read the array"); then explain says why it cannot build J at an infinite point
    "nan-and-inf-are-numbers": (["exp(x)", "--x", "[1e400, nan, -inf]", "--seed", "[1, 1, 1]"], "x is infinite"),
    "a-finite-array-is-explained": (["exp(x)", "--x", "[0.5, -1]", "--seed", "[1, 1]"], None),
    "a-name-is-named": (["exp(x)", "--x", "[1, foo]"], "the name 'foo' is not a number"),
    "a-syntax-error-is-said": (["exp(x)", "--x", "[1, (2"], "was never closed"),
    "a-long-array-is-cut": (["exp(x)", "--x", "[" + ", ".join(["1.0"] * 20000) + ", foo]"], "not a number"),
    "a-long-expression-is-cut": (["exp(" + "+".join(["x"] * 20000), "--x", "[1]"], "cannot parse"),
    "a-deep-expression-is-no-traceback": (["exp(" + "+".join(["x"] * 20000) + ")", "--x", "[1]"], "nests too deeply"),
}


@pytest.mark.parametrize("argv, words", EXPLAIN_ERRORS.values(), ids=EXPLAIN_ERRORS.keys())
def test_explain_says_why_an_input_cannot_be_read_in_a_few_lines(capsys, argv, words):
    rc = cli.main(["explain", *argv])
    out, err = capsys.readouterr()
    if words is None:
        assert rc == 0 and "x.grad" in out, out + err
        return
    assert rc == 2 and words in err and len(err) < 600 and "Traceback" not in err, err[:2000]


def test_a_huge_dimension_of_an_empty_leaf_is_named_not_called_0_elements(tmp_path, capsys):
    d = _named("x0")
    d["leaves"][0]["value"] = {"dtype": "float64", "shape": [2**40, 2**40, 0], "data": []}
    path = tmp_path / "case.json"
    path.write_text(json.dumps(d))
    assert cli.main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert "dimension 1,099,511,627,776 is above --max-elements" in err and "(0 elements)" not in err, err


def test_a_case_file_cannot_map_a_table_op_to_an_import_path(tmp_path, capsys):
    d = _named("x0")
    d["user_ops"] = {"exp": "subprocess:getoutput"}  # was ignored silently (the table's exp ran)
    path = tmp_path / "case.json"
    path.write_text(json.dumps(d))
    for command in ("replay", "explain"):
        assert cli.main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert "user_ops maps 'exp', an op of gradspec's table" in err, err


def test_explain_of_a_torch_function_case_without_permission_says_why_it_shows_nothing(tmp_path, capsys):
    r = gs.verify_torch_function(pu.scaled_cube_noscale, example_inputs=pu.CUBE_EXAMPLE, max_examples=10, seed=0)
    case = first_case(r, tmp_path)
    _forget(case)
    capsys.readouterr()
    assert cli.main(["explain", str(case)]) == 2
    err = capsys.readouterr().err
    assert "--allow-import tests._planted_user" in err and "explain computes J by running each op's forward" in err, err


def test_text_from_a_report_folder_is_printed_escaped(tmp_path, capsys):
    # a case.json that loads, beside a discrepancy.json and a summary.json with escape sequences in them
    from gradspec.fuzz.liveness import last_run

    (tmp_path / "case.json").write_text(json.dumps(_named("x0")))
    forged = "wrong\nOK: 6 oracle pair(s) compared\x1b[2J\x1b]0;pwned\x07"
    (tmp_path / "discrepancy.json").write_text(json.dumps({"discrepancy": {"kind": "value", "oracles": ["a", "b"],
                                                                           "message": forged}}))
    assert cli.main(["explain", str(tmp_path / "case.json")]) == 0
    out = capsys.readouterr().out
    assert "wrong\\nOK: 6 oracle pair(s) compared\\x1b[2J" in out and "\x1b" not in out and "\x07" not in out, out
    (tmp_path / "summary.json").write_text(json.dumps({"state": "running", "host": "elsewhere\x1b[2J", "run_id": forged}))
    msg = last_run(str(tmp_path))["message"]
    assert "\x1b" not in msg and "\n" not in msg and "elsewhere\\x1b[2J" in msg, msg
