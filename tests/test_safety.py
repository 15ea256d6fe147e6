"""Case files are data (CONTRACT §6): nothing they name is imported unless allowed; sizes are checked first.

Hostile files are written next to a module (``evilmod``) that leaves a marker file when it is
imported: a test passes only if the marker is absent (nothing ran) and the command exits 2 with a
message naming the module and ``--allow-import``.
"""

from __future__ import annotations

import json
import re
import resource
import subprocess
import textwrap

import numpy as np
import pytest

import gradspec as gs
from tests.test_cli import FAST_ORACLES, gradspec, plant, summary

EVIL_SRC = textwrap.dedent('''
    import os
    open(os.environ["GRADSPEC_TEST_MARKER"], "a").write("imported\\n")
    engine = None
    frob = None
''')


def _good() -> dict:
    case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("h", "exp", ["x"], {}), ("y", "sum", ["h"], {})], ["y"])
    return json.loads(case.to_json())


@pytest.fixture
def hostile(tmp_path):
    """(directory, environment) with ``evilmod`` importable and its marker path set."""
    env = plant(tmp_path)
    (tmp_path / "evilmod.py").write_text(EVIL_SRC)
    env["GRADSPEC_TEST_MARKER"] = str(tmp_path / "MARKER")
    return tmp_path, env


def _with_op(d: dict, path: str) -> dict:
    return {**d, "user_ops": {"frob": path}, "nodes": [{**d["nodes"][0], "op": "frob"}, d["nodes"][1]]}


NAMED = {
    "engine-os-abort": (lambda d: {**d, "engine": "os:abort"}, "os"),
    "engine-breakpoint": (lambda d: {**d, "engine": "builtins:breakpoint"}, "builtins"),
    "engine-planted-module": (lambda d: {**d, "engine": "evilmod:engine"}, "evilmod"),
    "user-op-planted-module": (lambda d: _with_op(d, "evilmod:frob"), "evilmod"),
    "user-op-os-system": (lambda d: _with_op(d, "os:system"), "os"),
}


@pytest.mark.parametrize("mutate,module", NAMED.values(), ids=NAMED.keys())
def test_replay_imports_nothing_a_case_file_names(hostile, mutate, module):
    root, env = hostile
    (root / "case.json").write_text(json.dumps(mutate(_good())))
    p = gradspec("replay", "case.json", "--oracles", FAST_ORACLES, cwd=root, env=env, stdin=subprocess.DEVNULL,
                 timeout=60)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert f"module '{module}'" in p.stderr and f"--allow-import {module}" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert not (root / "MARKER").exists()


def test_allow_import_is_what_lets_a_case_named_module_run(hostile):
    root, env = hostile
    (root / "case.json").write_text(json.dumps(_with_op(_good(), "evilmod:frob")))
    p = gradspec("replay", "case.json", "--allow-import", "evilmod", "--oracles", FAST_ORACLES, cwd=root, env=env,
                 timeout=60)
    assert (root / "MARKER").read_text() == "imported\n"  # allowed: imported (once)
    assert p.returncode == 2 and "'evilmod:frob' is a NoneType, not a gradspec op" in p.stderr, p.stderr


def test_a_campaign_does_not_run_code_planted_in_its_report_dir(hostile):
    """`gradspec fuzz` re-checks earlier reports and turns cases left in flight into crash reports:
    neither may import what a planted file names."""
    root, env = hostile
    out = root / "reports"
    rid = "d-0123456789"
    (out / rid).mkdir(parents=True)
    (out / rid / "case.json").write_text(json.dumps(_with_op(_good(), "evilmod:frob")))
    (out / rid / "discrepancy.json").write_text(json.dumps(
        {"id": rid, "kind": "value", "oracles": ["reference", "jacobian"], "ops": ["frob"], "engine": "reference",
         "run_id": "old", "message": "planted"}))
    stale = out / ".gradspec" / "runs" / "old"
    stale.mkdir(parents=True)
    (stale / "inflight-999999.json").write_text(json.dumps({**_with_op(_good(), "evilmod:frob"),
                                                            "engine": "evilmod:engine"}))
    p = gradspec("fuzz", "--ops", "exp,mul", "--max-examples", 3, "--oracles", FAST_ORACLES, "--seed", 1,
                 "--report-dir", out, cwd=root, env=env, timeout=120)
    assert not (root / "MARKER").exists(), p.stderr
    assert p.returncode == 2, p.stdout + p.stderr  # a report not re-checked never reads as fixed (CONTRACT §6)
    (prev,) = [x for x in summary(out)["previous"] if x["id"] == rid]
    assert "not re-checked" in prev["status"] and "--allow-import evilmod" in prev["status"], prev
    assert "--allow-import evilmod" in p.stdout + p.stderr  # the left-over in-flight case, refused and said so


def test_a_record_cannot_point_the_campaign_outside_its_report_dir(tmp_path):
    from gradspec import report

    (tmp_path / "d-1").mkdir()
    (tmp_path / "d-1" / "discrepancy.json").write_text(json.dumps({"id": "../../elsewhere", "kind": "value"}))
    assert [r["id"] for r in report.read_records(str(tmp_path))] == ["d-1"]


# ---------------------------------------------------------------------------------------------
# malformed fields and sizes: exit 2 naming the field, before anything is allocated
# ---------------------------------------------------------------------------------------------


def _leaf_value(d, **value):
    return {**d, "leaves": [{**d["leaves"][0], "value": {**d["leaves"][0]["value"], **value}}]}


def _nodes(d, *nodes):
    return {**d, "nodes": [{"name": n, "op": op, "inputs": ins, "params": p} for n, op, ins, p in nodes]}


E9 = 10**9
MALFORMED = {
    "dtype-object": (lambda d: _leaf_value(d, dtype="object"), "leaves[0].value.dtype"),
    "dtype-str": (lambda d: _leaf_value(d, dtype="<U3", data=["a", "b"]), "leaves[0].value.dtype"),
    # a float16 leaf reached torch as Half and came back as "torch's backward for 'mm' raised on its own", exit 1
    "dtype-float16": (lambda d: _leaf_value(d, dtype="float16"), "leaves[0].value.dtype: dtype float16 is not supported"),
    "int-requires-grad": (lambda d: _leaf_value(d, dtype="int64", data=[1, 2]), "leaves[0].requires_grad"),
    "shape-negative": (lambda d: _leaf_value(d, shape=[-2]), "leaves[0].value.shape[0]"),
    "shape-float": (lambda d: _leaf_value(d, shape=[2.0]), "leaves[0].value.shape[0]"),
    "shape-string": (lambda d: _leaf_value(d, shape="2"), "leaves[0].value.shape"),
    "data-length": (lambda d: _leaf_value(d, data=["0x1p+0"]), "leaves[0].value.data"),
    "data-not-hex": (lambda d: _leaf_value(d, data=["0x1p+0", "hello"]), "leaves[0].value.data[1]"),
    "data-bool-as-float": (lambda d: _leaf_value(d, data=["0x1p+0", True]), "leaves[0].value.data[1]"),
    "requires-grad-string": (lambda d: {**d, "leaves": [{**d["leaves"][0], "requires_grad": "yes"}]},
                             "leaves[0].requires_grad"),
    "leaf-name-number": (lambda d: {**d, "leaves": [{**d["leaves"][0], "name": 7}]}, "leaves[0].name"),
    "node-name-list": (lambda d: {**d, "nodes": [{**d["nodes"][0], "name": ["h"]}, d["nodes"][1]]}, "nodes[0].name"),
    "inputs-not-list": (lambda d: {**d, "nodes": [{**d["nodes"][0], "inputs": "x"}, d["nodes"][1]]}, "nodes[0].inputs"),
    "params-not-object": (lambda d: {**d, "nodes": [d["nodes"][0], {**d["nodes"][1], "params": [1]}]},
                          "nodes[1].params"),
    "params-huge-int": (lambda d: {**d, "nodes": [d["nodes"][0], {**d["nodes"][1], "params": {"dim": [10**30]}}]},
                        "nodes[1].params.dim[0]"),
    "params-absurd-dim": (lambda d: {**d, "nodes": [d["nodes"][0], {**d["nodes"][1], "params": {"dim": [7]}}]},
                          "node 'y'"),
    "params-unknown": (lambda d: {**d, "nodes": [d["nodes"][0], {**d["nodes"][1], "params": {"bogus": 1}}]},
                       "node 'y'"),
    "seed-not-array": (lambda d: {**d, "seeds": ["ones"]}, "seeds[0]"),
    "seeds-not-list": (lambda d: {**d, "seeds": None}, "seeds"),
    "roots-number": (lambda d: {**d, "roots": [3]}, "roots[0]"),
    "user-op-not-a-path": (lambda d: _with_op(d, "frob"), "user_ops.frob"),
    "engine-not-string": (lambda d: {**d, "engine": ["reference"]}, "engine"),
    # sizes, from the declared shapes and the shape rules, before any allocation
    "expand-to-1e9": (lambda d: _nodes(d, ("e", "expand", ["x"], {"size": [E9 // 2, 2]}), ("h", "exp", ["e"], {}),
                                        ("y", "sum", ["h"], {})), "node 'e' (expand)"),
    "leaf-0-by-1e9": (lambda d: _leaf_value(d, shape=[0, E9], data=[]), "leaves[0].value"),
    "seed-huge": (lambda d: {**d, "seeds": [{"dtype": "float64", "shape": [0, E9], "data": []}]}, "seeds[0]"),
    # 40 million elements: fine alone, but finite differences' batched pass holds 4 copies of each tensor
    "fd-batched-pass": (lambda d: _nodes(d, ("e", "expand", ["x"], {"size": [20_000_000, 2]}), ("h", "exp", ["e"], {}),
                                         ("y", "sum", ["h"], {})), "node 'e' (expand)"),
}


@pytest.mark.parametrize("mutate,field", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_or_oversized_case_files_exit_2_naming_the_field(tmp_path, capsys, mutate, field):
    from gradspec import cli

    path = tmp_path / "case.json"
    path.write_text(json.dumps(mutate(_good())))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rc = cli.main(["replay", str(path), "--oracles", FAST_ORACLES])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert field in err and "Traceback" not in err and "internal error" not in err, err
    # Refused before allocating: the process's peak RSS grew by less than 64 MiB (the bombs ask for 7-30 GiB).
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024


def test_case_build_refuses_a_float16_leaf():
    with pytest.raises(gs.CaseError, match="leaf 'x': dtype float16 is not supported: float64 or float32"):
        gs.Case.build({"x": np.ones(2, np.float16)}, [("y", "sin", ["x"], {})], ["y"], [np.ones(2)])


def test_the_size_limit_is_a_flag_and_names_itself(tmp_path, capsys):
    from gradspec import cli

    d = _nodes(_good(), ("e", "expand", ["x"], {"size": [1000, 2]}), ("y", "sum", ["e"], {}))
    (tmp_path / "case.json").write_text(json.dumps(d))
    assert cli.main(["replay", str(tmp_path / "case.json"), "--max-elements", "4000", "--oracles", "reference,jacobian"]) == 2
    assert "above --max-elements 4,000" in capsys.readouterr().err
    with pytest.raises(gs.CaseError, match="max-elements"):
        gs.Case.from_json(json.dumps(d), max_elements=4000)
    assert gs.Case.from_json(json.dumps(d), max_elements=20_000).ops == ["expand", "sum"]


def test_the_limit_counts_what_finite_differences_holds_at_once():
    from gradspec._private import limits
    from gradspec.oracles import fd

    assert limits.PASS_COPIES == len(fd.FACTORS) + 1
    assert limits.default_max_elements() <= limits.BASE_MAX_ELEMENTS


def test_python_api_loads_user_ops_only_when_allowed_or_already_imported():
    """In Python, ``allow_import=`` opens the gate; a user op object the user's own code already imported
    resolves without it (resolving it runs no new code, and it must be a gradspec op, not ``os:abort``)."""
    import tests._planted  # noqa: F401 - defines pl_mul_ok at module level

    d = _good()
    d = {**d, "user_ops": {"frob": "tests._planted:pl_mul_ok"},
         "nodes": [{"name": "h", "op": "frob", "inputs": ["x", "x"], "params": {}}, d["nodes"][1]]}
    assert gs.Case.from_json(json.dumps(d)).ops == ["frob", "sum"]
    for path, module in [("os:getcwd", "os"), ("tests.no_such_module:op", "tests.no_such_module")]:
        bad = {**d, "user_ops": {"frob": path}}
        with pytest.raises(gs.CaseError, match=f"--allow-import {module}"):
            gs.Case.from_json(json.dumps(bad))
    with pytest.raises(gs.CaseError, match="'os:getcwd' is a builtin_function_or_method, not a gradspec op"):
        gs.Case.from_json(json.dumps({**d, "user_ops": {"frob": "os:getcwd"}}), allow_import=["os"])
    from gradspec import caseio

    assert caseio.replay_command("r/case.json", "os:abort", {"f": "a.b:c"}) == \
        "gradspec replay r/case.json --allow-import a.b --allow-import os"


def test_the_dense_jacobian_obeys_the_limit_of_the_command_line():
    from gradspec._private import limits
    from gradspec.oracles import OracleError
    from gradspec.oracles.jacobian import jacobian

    case = gs.Case.build({"x": np.linspace(0.1, 2.0, 20)}, [("y", "exp", ["x"], {})], ["y"], [np.ones(20)])
    assert jacobian(case).matrix.shape == (20, 20)  # 400 elements: no limit in force in Python
    with limits.limiting(399), pytest.raises(OracleError, match="above the dense limit of 399 .--max-elements."):
        jacobian(case)


# Programs torch refuses because the op does not promote dtypes (numpy would): an int64 constant next to
# a float64 leaf in mm was reported as "torch's backward for 'mm' raised on its own", exit 1.
_UNPROMOTED = {  # leaves, nodes (the last one is refused), the root's shape
    "mm-int64-constant": ({"c": np.ones((1, 2), np.int64), "w": np.ones((2, 2))}, [("y", "mm", ["c", "w"], {})], (1, 2)),
    "matmul-float32-float64": ({"a": np.ones((2, 2), np.float32), "w": np.ones((2, 2))},
                               [("y", "matmul", ["a", "w"], {})], (2, 2)),
    "linear-after-a-float32-node": ({"a": np.ones((2, 3), np.float32), "w": np.ones((4, 3))},
                                    [("s", "sin", ["a"], {}), ("y", "linear_nobias", ["s", "w"], {})], (2, 4)),
}


@pytest.mark.parametrize("leaves,nodes,out", _UNPROMOTED.values(), ids=list(_UNPROMOTED))
def test_a_program_torch_refuses_is_refused_not_blamed_on_torch(leaves, nodes, out, tmp_path, capsys):
    import torch

    from gradspec import cli, engine
    from gradspec.check import refuse_unpromoted

    name, op = nodes[-1][:2]
    case = gs.Case.build(leaves, nodes, [name], [np.ones(out)],
                         requires_grad={k: v.dtype.kind == "f" for k, v in leaves.items()})
    for run, tensor, error in [(lambda o, *a, **p: case.spec(o).torch(*a, **p), torch.from_numpy, RuntimeError),
                               (engine.call, engine.tensor, engine.DtypeMismatchError)]:
        env = {k: tensor(v) for k, v in leaves.items()}
        with pytest.raises(error, match="same dtype"):  # torch's verdict on the program, and the engine's
            for n, o, ins, p in nodes:
                env[n] = run(o, *[env[x] for x in ins], **p)
        assert n == name  # refused at the last node
    v = gs.check(case)  # inconclusive, not raised: gradspec's own sub-cases go through check() too
    assert v.status == "inconclusive" and re.search(f"node '{name}' = {op}.*cast the inputs to one dtype", v.reason)
    with pytest.raises(gs.CaseError, match=f"node '{name}' = {op}"):
        refuse_unpromoted(case)
    (tmp_path / "case.json").write_text(case.to_json())
    assert cli.main(["replay", str(tmp_path / "case.json")]) == 2
    err = capsys.readouterr().err
    assert "torch refuses this case's forward" in err and "Traceback" not in err


def test_elementwise_ops_still_promote_mixed_dtypes():
    case = gs.Case.build({"a": np.ones(2, np.float32), "b": np.ones(2)}, [("y", "mul", ["a", "b"], {})], ["y"],
                         [np.ones(2)])
    assert gs.check(case, oracles=["reference", "torch-cpu", "finite-differences"]).status == "agree"
