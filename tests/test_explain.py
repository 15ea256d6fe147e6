"""``gs.explain`` / ``gradspec explain`` (issue 14 item 4): J, the seed, J^T·seed and each element's
contributions, for expressions parsed safely (ast: table ops, names, numbers, + - * / @ **) and case files;
bad input gets an error naming the thing and the fix.  Expected gradients are closed forms written here.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradspec as gs
from gradspec import cli
from gradspec.explain import ExplainError, parse_array

X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
A = np.arange(12.0).reshape(3, 4) / 10
S = np.array([[1.0, 2, 3, 4], [5, 6, 7, 8]])

# expression, inputs, seed, {leaf: closed-form J^T seed}
CASES = {
    "mm": ("mm(x, a)", {"x": X, "a": A}, S, {"x": S @ A.T, "a": X.T @ S}),
    "matmul-operator": ("x @ a", {"x": X, "a": A}, S, {"x": S @ A.T, "a": X.T @ S}),
    "arithmetic": ("x * x - 2 * x / w + x ** 2", {"x": X, "w": X + 3}, np.ones_like(X),
                   {"x": 2 * X - 2 / (X + 3) + 2 * X, "w": 2 * X / (X + 3) ** 2}),
    "negation-and-sum": ("-sum(x, dim=1)", {"x": X}, np.array([2.0, -1.0]),
                         {"x": -np.repeat(np.array([[2.0], [-1.0]]), 3, axis=1)}),
    "implicit-seed": ("sum(exp(x))", {"x": X}, None, {"x": np.exp(X)}),
}


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_explain_gives_the_closed_form_vjp(name):
    expr, inputs, seed, want = CASES[name]
    e = gs.explain(expr, seed=seed, **inputs)
    for leaf, g in want.items():
        # J from forward-mode rules, contracted once with the seed: rounding of a few O(1) products
        np.testing.assert_allclose(e.grads[leaf], g, rtol=1e-13, atol=1e-13)
    text = e.text()
    assert "J^T·seed" in text and "contributions" in text


def test_contributions_spell_out_the_sum():
    e = gs.explain("mm(x, a)", x=np.ones((2, 3)), a=np.ones((3, 4)), seed=S)
    assert e.contributions("x", (1, 2)) == "x[1, 2] = 1·5 (y[1, 0]) + 1·6 (y[1, 1]) + 1·7 (y[1, 2]) + 1·8 (y[1, 3]) = 26"
    assert e.J.shape == (8, 18) and e.seed.tolist() == S.ravel().tolist()


def test_constants_get_no_gradient():
    e = gs.explain("mm(x, a)", x=X, a=A, seed=S, requires_grad={"a": False})
    assert set(e.grads) == {"x"} and "(constant: no gradient)" in e.text()


def test_a_case_is_explained_with_its_own_seeds():
    case = gs.Case.build({"x": X}, [("y", "tanh", ["x"], {})], ["y"], [S[:, :3]])
    e = gs.explain(case)
    np.testing.assert_allclose(e.grads["x"], S[:, :3] * (1 - np.tanh(X) ** 2), rtol=1e-13)


@pytest.mark.parametrize("expr, inputs, seed, message", [
    ("mmm(x, a)", {"x": X, "a": A}, S, "unknown op 'mmm'; did you mean mm"),
    ("mm(x, a)", {"x": X, "a": np.ones((4, 4))}, S, "mm(x, a) does not accept input shapes (2, 3), (4, 4)"),
    ("mm(x, a)", {"x": X, "a": A}, None, "root 'y' has shape (2, 4)"),
    ("mm(x, a)", {"x": X, "a": A}, np.ones(3), "seed for root 'y' has shape (3,), the root has shape (2, 4)"),
    ("mm(x, b)", {"x": X, "a": A}, S, "unknown name 'b'"),
    ("__import__('os').system('true')", {}, None, "only calls of table ops by name"),
    ("x.T", {"x": X}, None, "'x.T' is not allowed"),
    ("[x][0]", {"x": X}, None, "is not allowed"),
    ("exp(x", {"x": X}, None, "cannot parse"),
    ("sum(x, dim=y)", {"x": X, "y": X}, None, "must be a literal"),
], ids=["unknown-op", "shape-mismatch", "seed-needed", "seed-shape", "unknown-name", "no-python", "no-attribute",
        "no-subscript", "syntax", "literal-params"])
def test_bad_input_is_named(expr, inputs, seed, message):
    with pytest.raises(ExplainError, match=None) as e:
        gs.explain(expr, seed=seed, **inputs)
    assert message in str(e.value), str(e.value)


@pytest.mark.parametrize("spec, want", [
    ("ones:2,3", np.ones((2, 3))), ("zeros:4", np.zeros(4)), ("arange:2,2", np.array([[0.0, 1], [2, 3]])),
    ("full:0.5:2", np.array([0.5, 0.5])), ("2.5", np.array(2.5)), ("[[1,2],[3,4]]", np.array([[1.0, 2], [3, 4]])),
], ids=str)
def test_parse_array(spec, want):
    np.testing.assert_array_equal(parse_array(spec), want)


def test_cli_explain(capsys):
    rc = cli.main(["explain", "mm(x, a)", "--x", "ones:2,3", "--a", "ones:3,4", "--seed", "[[1,2,3,4],[5,6,7,8]]"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "x.grad = [[10., 10., 10.], [26., 26., 26.]]" in out
    assert "x[1, 0] = 1·5 (y[1, 0]) + 1·6 (y[1, 1]) + 1·7 (y[1, 2]) + 1·8 (y[1, 3]) = 26" in out


@pytest.mark.parametrize("argv, message", [
    (["explain", "mmm(x)", "--x", "ones:2"], "did you mean mm"),
    (["explain", "mm(x, a)", "--x", "ones:2,3", "--a", "ones:4,4", "--seed", "ones:2,4"], "input shapes (2, 3), (4, 4)"),
    (["explain", "sum(x)", "--x", "oness:3"], "cannot read the array 'oness:3'"),
    (["explain", "sum(x)", "--x"], "--x needs a value"),
    (["explain", "sum(x)", "x"], "unexpected argument 'x'"),
    # refused before numpy allocates 74.5 GiB (it died with _ArrayMemoryError): the size, the limit, the flag
    (["explain", "x*x", "--x", "ones:100000,100000"], "--x ones:100000,100000 has shape (100000, 100000) "
                                                      "(10,000,000,000 elements), above --max-elements "),
    (["explain", "x*x", "--x", "ones:2", "--seed", "zeros:100000,100000"], "--seed zeros:100000,100000 has shape"),
    (["explain", "x*x", "--x", "arange:20", "--max-elements", "10"], "(20 elements), above --max-elements 10 "),
], ids=["unknown-op", "shapes", "bad-array", "missing-value", "stray-argument", "too-big", "seed-too-big",
        "max-elements"])
def test_cli_explain_errors_exit_2(capsys, argv, message):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gradspec: error: ") and message in err and "Traceback" not in err


def test_cli_explains_a_case_file(tmp_path, capsys):
    case = gs.Case.build({"x": np.array([1.0, -2.0])}, [("y", "mul", ["x", "x"], {})], ["y"], [np.array([3.0, 0.5])])
    path = tmp_path / "case.json"
    path.write_text(case.to_json())
    assert cli.main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    assert "x.grad = [ 6., -2.]" in out and "x[0] = 2·3 (y[0]) = 6" in out


def test_cli_explain_refuses_a_case_file_above_max_elements(tmp_path, capsys):
    """explain read case files without the size limit replay applies (a case file is data, CONTRACT §6)."""
    case = gs.Case.build({"x": np.arange(50.0)}, [("y", "mul", ["x", "x"], {})], ["y"], [np.ones(50)])
    path = tmp_path / "case.json"
    path.write_text(case.to_json())
    assert cli.main(["explain", str(path), "--max-elements", "100"]) == 2
    err = capsys.readouterr().err
    assert "--max-elements 100" in err and "Traceback" not in err


# explain CASE.json showed J^T·seed but not what the user's code returned (tryout 2, finding 11).
# (op, x, seed, what the code returns, J^T·seed, their difference) -- all worked out by hand:
# pl_xabsx_* is x|x|, d/dx = 2|x|; the planted bug returns 2x. J comes from finite differences of the forward
# (the ops declare no jvp): exact for this quadratic up to rounding, so a correct rule differs by < 1e-9.
CODE_BESIDE_TRUTH = {
    "wrong-sign-where-negative": ("pl_xabsx_sign", [-1.5, 2.0], [1.0, 1.0],
                                  "code [-3., 4.]", "J^T·seed [3., 4.]", r"\[-6\., 0\.\]: max \|difference\| (6), relative 1.5"),
    "correct": ("pl_xabsx_ok", [-1.5, 2.0], [1.0, 1.0],
                "code [3., 4.]", "J^T·seed [3., 4.]", r"\[0\., 0\.\]: max \|difference\| (\S+), relative"),
}


@pytest.mark.parametrize("op, x, seed, code, truth, diff", CODE_BESIDE_TRUTH.values(), ids=list(CODE_BESIDE_TRUTH))
def test_cli_explain_of_a_case_file_shows_what_the_code_returned(op, x, seed, code, truth, diff, tmp_path, capsys):
    import tests._planted  # noqa: F401 - registers the planted ops

    case = gs.Case.build({"x": np.array(x)}, [("y", op, ["x"], {})], ["y"], [np.array(seed)])
    case.user_ops = {op: f"tests._planted:{op}"}
    path = tmp_path / "case.json"
    path.write_text(case.to_json())
    assert cli.main(["explain", str(path), "--allow-import", "tests._planted"]) == 0
    out = capsys.readouterr().out
    import re

    m = re.search(re.escape(f"x.grad: {code}, {truth}, difference (code - J^T·seed) ") + diff, out)
    assert m, out
    big = float(m.group(1))
    assert big == 6.0 if op == "pl_xabsx_sign" else big < 1e-9, big
    assert f"user op(s) {op}" in out, out


def test_cli_explain_shows_the_finding_recorded_beside_the_case(tmp_path, capsys):
    import json

    import tests._planted  # noqa: F401

    case = gs.Case.build({"x": np.array([-1.5])}, [("y", "pl_xabsx_sign", ["x"], {})], ["y"], [np.array([1.0])])
    case.user_ops = {"pl_xabsx_sign": "tests._planted:pl_xabsx_sign"}
    (tmp_path / "case.json").write_text(case.to_json())
    (tmp_path / "discrepancy.json").write_text(json.dumps({"discrepancy": {
        "kind": "value", "oracles": ["reference", "finite-differences"], "cause": {"summary": "PLANTED SUMMARY"}}}))
    assert cli.main(["explain", str(tmp_path / "case.json"), "--allow-import", "tests._planted"]) == 0
    out = capsys.readouterr().out
    assert "the finding recorded with this case: value (reference vs finite-differences): PLANTED SUMMARY" in out


def test_cli_explain_of_a_case_file_without_permission_still_explains_and_says_why_the_code_did_not_run(
        tmp_path, capsys):
    case = gs.Case.build({"x": np.array([1.0])}, [("y", "exp", ["x"], {})], ["y"], [np.array([1.0])])
    case.engine = "tests._planted_engines:nowhere"
    (tmp_path / "case.json").write_text(case.to_json())
    assert cli.main(["explain", str(tmp_path / "case.json")]) == 0
    out = capsys.readouterr().out
    assert "x.grad = [2.718282]" in out and "the code under test: not run:" in out and "--allow-import" in out, out
