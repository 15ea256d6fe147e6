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
