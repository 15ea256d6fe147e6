"""Values a case file or a report folder holds are read as what they say, or refused naming the field.

A case file, a report folder or a state directory handed over by somebody else is data (CONTRACT §6): a
value gradspec would misread (``"1.5"`` as hex 0x1.5), a field of the wrong type, a huge graph or a deep
nest is refused with the field and the fix (exit 2), never run as something else, never a false
"still disagrees", never a hang or an internal error that loses a run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import gradspec as gs
from tests.test_cli import FAST_ORACLES
from tests.test_safety import _good, _leaf_value

pytest_plugins = ["pytester"]


def _meta(d, **meta):
    return {**d, "meta": {**d.get("meta", {}), **meta}}


def _chain(d, n):
    """``d`` with a chain of ``n`` neg nodes ending in a sum."""
    nodes = [{"name": f"n{i}", "op": "neg", "inputs": [f"n{i - 1}" if i else "x"], "params": {}} for i in range(n)]
    return {**d, "nodes": nodes + [{"name": "y", "op": "sum", "inputs": [f"n{n - 1}"], "params": {}}]}


REFUSED = {
    # "1.5" went through float.fromhex: 0x1.5 = 1.3125, replayed silently as another case
    "data-decimal-string": (lambda d: _leaf_value(d, data=["1.5", "0x1p+1"]), "leaves[0].value.data[0]"),
    "data-decimal-integer-string": (lambda d: _leaf_value(d, data=["0x1p+0", "10"]), "leaves[0].value.data[1]"),
    "seed-decimal-string": (lambda d: {**d, "seeds": [{"dtype": "float64", "shape": [], "data": ["2.5"]}]},
                            "seeds[0].data[0]"),
    # 1e300 became inf in float32 with a raw numpy RuntimeWarning
    "float32-overflow": (lambda d: _leaf_value(d, dtype="float32", data=[1e300, 1.0]), "leaves[0].value.data[0]"),
    "float32-overflow-hex": (lambda d: _leaf_value(d, dtype="float32", data=["0x1p+200", 1.0]),
                             "leaves[0].value.data[0]"),
    # a malformed claimed accuracy was "gs.check itself raised ValueError ... still disagrees (exit 1)"
    "accuracy-string": (lambda d: _meta(d, accuracy={"rtol": "abc"}), "meta.accuracy"),
    "accuracy-list": (lambda d: _meta(d, accuracy=[1e-3, 0]), "meta.accuracy"),
    "accuracy-negative": (lambda d: _meta(d, accuracy={"rtol": -1.0, "atol": 0.0}), "meta.accuracy"),
    "accuracy-bool": (lambda d: _meta(d, accuracy={"rtol": True, "atol": 0.0}), "meta.accuracy"),
    "accuracy-unknown-key": (lambda d: _meta(d, accuracy={"rtol": 1e-3, "tol": 1.0}), "meta.accuracy"),
    # a params object {"float": ...} was read as one non-finite float: "could not convert string to float"
    "params-float-key": (lambda d: {**d, "nodes": [{**d["nodes"][0], "params": {"float": "x"}}, d["nodes"][1]]},
                         "no param 'float'"),
    # a 200,000-node file hung replay for minutes (Case.validate was quadratic)
    "too-many-nodes": (lambda d: _chain(d, 1100), "nodes: the file has 1,101 nodes"),
    # loaded, then Case.to_json (every report) raised RecursionError
    "deep-meta": (lambda d: _meta(d, notes=json.loads("[" * 200 + "]" * 200)), "meta.notes"),
}


@pytest.mark.parametrize("mutate,field", REFUSED.values(), ids=REFUSED.keys())
def test_a_value_gradspec_would_misread_is_refused_naming_the_field(tmp_path, capsys, mutate, field):
    from gradspec import cli

    path = tmp_path / "case.json"
    path.write_text(json.dumps(mutate(_good())))
    # (1,100 nodes: above the node limit at --max-elements 2**20, 1,024; the default limit needs 16,385 nodes)
    with _no_warning():
        rc = cli.main(["replay", str(path), "--oracles", FAST_ORACLES, "--max-elements", str(2**20)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert field in err and "Traceback" not in err and "internal error" not in err, err


class _no_warning:
    """No warning reaches the user's terminal (numpy's 'overflow encountered in cast' did)."""

    def __enter__(self):
        import warnings

        self._cm = warnings.catch_warnings(record=True)
        self.caught = self._cm.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self._cm.__exit__(*exc)
        assert not [str(w.message) for w in self.caught if "overflow" in str(w.message)]


ACCEPTED = {
    # what Case.to_json writes, and JSON numbers
    "hex": (lambda d: _leaf_value(d, data=["0x1.8000000000000p+0", "-0x1.0000000000000p-1"]), [1.5, -0.5]),
    "hex-short": (lambda d: _leaf_value(d, data=["0x1.8p+0", "0x0p+0"]), [1.5, 0.0]),
    "numbers": (lambda d: _leaf_value(d, data=[1.5, 2]), [1.5, 2.0]),
    "non-finite": (lambda d: _leaf_value(d, data=["inf", "-inf"]), [np.inf, -np.inf]),
    "float32-inf-stays": (lambda d: _leaf_value(d, dtype="float32", data=["inf", 3.0]), [np.inf, 3.0]),
    "accuracy-claim": (lambda d: _meta(d, accuracy={"rtol": 1e-3, "atol": 0}), [0.5, 2.0]),
    "accuracy-null-fields": (lambda d: _meta(d, accuracy={"rtol": None, "atol": 1e-9}), [0.5, 2.0]),
}


@pytest.mark.parametrize("mutate,values", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_values_written_as_gradspec_writes_them_are_read_exactly(mutate, values):
    case = gs.Case.from_json(json.dumps(mutate(_good())))
    np.testing.assert_array_equal(case.leaves[0].value, np.array(values, dtype=case.leaves[0].value.dtype))


def test_a_case_built_in_python_keeps_a_param_named_float():
    # (the {"float": ...} wrapper is a value's, never a params object's: this used to raise TypeError)
    case = gs.Case.build({"x": np.array([1.0, 2.0])}, [("y", "norm", ["x"], {"p": np.inf})], ["y"])
    assert gs.Case.from_json(case.to_json()).nodes[0].params["p"] == np.inf


# ---------------------------------------------------------------------------------------------
# a NaN in a leaf (finding 12): the explicit Jacobian's own 0 * NaN is not the code's gradient
# ---------------------------------------------------------------------------------------------

NAN_LEAVES = {
    "exp": ([("y", "exp", ["x"], {})], [np.ones(2)]),
    "exp-sum": ([("h", "exp", ["x"]), ("y", "sum", ["h"])], None),
    "mul-sum": ([("h", "mul", ["x", "x"]), ("y", "sum", ["h"])], None),
}


@pytest.mark.parametrize("nodes,seeds", NAN_LEAVES.values(), ids=NAN_LEAVES.keys())
def test_a_nan_leaf_element_is_no_discrepancy(nodes, seeds):
    """x = [nan, 2]: reference and torch agree (d/dx[1] finite, d/dx[0] NaN); the Jacobian witness formed
    J[0, 1] = 0 * exp(nan) = NaN, which reverse mode never forms, and was compared as 'still disagrees'
    blaming gradspec's exp rule."""
    nodes = [n if len(n) == 4 else (*n, {}) for n in nodes]
    case = gs.Case.build({"x": np.array([np.nan, 2.0])}, nodes, ["y"], seeds)
    v = gs.check(case, oracles=["reference", "jacobian", "torch-cpu"])
    assert v.status != "disagree", str(v)
    assert "jacobian" in str(v) and "NaN" in str(v), str(v)  # said, not silently dropped


# ---------------------------------------------------------------------------------------------
# report folders from somebody else (findings 15, 16): a bad record is skipped with a note, never a crash
# ---------------------------------------------------------------------------------------------

GOOD_RECORD = {"kind": "value", "oracles": ["reference", "jacobian"], "ops": ["exp"], "engine": "reference",
               "run_id": "old", "first_found": 1.7e9, "message": "", "covers": ["value|reference vs jacobian|exp"]}
BAD_RECORDS = {
    # every later `gradspec fuzz` there ended "internal error: TypeError" and lost its run; a pytest session exit 1
    "d-0000000001": {"kind": ["a"], "oracles": 5, "ops": 7, "engine": "reference", "run_id": "old"},
    "d-0000000002": {**GOOD_RECORD, "first_found": "yesterday"},  # (sorted beside numbers: TypeError)
    "d-0000000003": {**GOOD_RECORD, "covers": ["value|reference"]},  # (split into 3 parts: ValueError)
    "d-0000000004": {**GOOD_RECORD, "cause": 5},
    "d-0000000005": {**GOOD_RECORD, "discrepancy": {"cause": ["exp"]}},
    # a bare RecursionError from json.loads; then 'internal error: RecursionError' without the file
    "d-0000000006": "[" * 100_000 + "]" * 100_000,
    # parses, then recursed through by the readers after it
    "d-0000000007": {**GOOD_RECORD, "note": json.loads("[" * 500 + "]" * 500)},
}


def _plant_records(where, good=True):
    where.mkdir(parents=True, exist_ok=True)
    for rid, rec in BAD_RECORDS.items():
        (where / rid).mkdir()
        (where / rid / "discrepancy.json").write_text(rec if isinstance(rec, str) else json.dumps(rec))
    if good:
        (where / "d-00000000ff").mkdir()
        (where / "d-00000000ff" / "discrepancy.json").write_text(json.dumps(GOOD_RECORD))
    return where


def test_a_record_gradspec_did_not_write_is_skipped_naming_its_folder(tmp_path):
    from gradspec._private.records import read_records

    skipped = []
    assert [r["id"] for r in read_records(str(_plant_records(tmp_path)), skipped)] == ["d-00000000ff"]
    for rid in BAD_RECORDS:
        assert any(rid in note for note in skipped), (rid, skipped)


def test_a_campaign_in_a_folder_of_bad_records_keeps_its_results(tmp_path):
    from tests.test_cli import gradspec, plant, summary

    rep = _plant_records(tmp_path / "reports")
    (rep / "summary.json").write_text("[" * 100_000 + "]" * 100_000)  # (liveness.last_run reads it first)
    proc = gradspec("fuzz", "--ops", "exp,mul", "--max-examples", 5, "--oracles", FAST_ORACLES, "--seed", 1,
                    "--report-dir", rep, "-q", cwd=tmp_path, env=plant(tmp_path))
    assert proc.returncode == 0 and "internal error" not in proc.stderr, proc.stderr[-2000:]
    s = summary(rep)
    assert s["state"] != "running" and s["cases"] > 0, s
    out = proc.stdout + proc.stderr
    assert "d-0000000001/discrepancy.json: field kind" in out, out[-3000:]  # said, with the file and the field


def test_explain_beside_a_deeply_nested_record_explains_the_case(tmp_path, capsys):
    from gradspec import cli

    (tmp_path / "case.json").write_text(json.dumps(_good()))
    (tmp_path / "discrepancy.json").write_text('{"discrepancy": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert cli.main(["explain", str(tmp_path / "case.json")]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "x.grad" in out, err


def test_a_passing_session_stays_passing_beside_a_bad_record(pytester, monkeypatch):
    for k in ("GRADSPEC_REPORT_DIR", "GRADSPEC_SESSION_ID", "GRADSPEC_PROFILE", "PYTEST_XDIST_WORKER"):
        monkeypatch.delenv(k, raising=False)
    rep = _plant_records(pytester.path / "rep", good=False)
    pytester.makepyfile("def test_ok():\n    assert True\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--gradspec-report-dir={rep}")
    assert result.ret == 0, result.stdout.str()[-3000:] + result.stderr.str()[-3000:]
    result.assert_outcomes(passed=1)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
