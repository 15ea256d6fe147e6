"""``gs.explain`` / ``gradspec explain``: what ``backward(gradient)`` computes, element by element.

For a case, or a small expression over named inputs with a seed, this prints the Jacobian ``J``
(built from the ops' forward-mode rules), the seed, ``J^T·seed`` (each input's ``.grad``) and, for
each input element, the contributions ``J[k, i]·seed[k]`` that add up to it -- the answer to "what
does the ``gradient`` argument of ``backward`` do?".

Expressions are parsed with :mod:`ast` and only calls of table ops, input names, numbers and
``+ - * / @ **`` (and unary minus) are accepted; nothing is evaluated as Python.

Example::

    >>> import numpy as np, gradspec as gs
    >>> e = gs.explain("mm(x, a)", x=np.ones((2, 3)), a=np.ones((3, 4)), seed=[[1, 2, 3, 4], [5, 6, 7, 8]])
    >>> e.grads["x"]
    array([[10., 10., 10.],
           [26., 26., 26.]])
    >>> print(e.contributions("x", (1, 0)))
    x[1, 0] = 1·5 (y[1, 0]) + 1·6 (y[1, 1]) + 1·7 (y[1, 2]) + 1·8 (y[1, 3]) = 26
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import math

import numpy as np

from ._private import limits as _limits
from ._private.inert import short_repr
from .case import Case, CaseError
from .oracles.jacobian import jacobian
from .spec import registry as _registry

__all__ = ["explain", "Explanation", "ExplainError", "parse_expression", "parse_array", "code_gradients"]

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.MatMult: "matmul", ast.Pow: "pow"}
MAX_SHOWN = 400  # entries of J printed in full; above, the text shows the shape and the contributions only


class ExplainError(ValueError):
    """Bad input to ``explain``: the message names the part and the fix."""


@dataclasses.dataclass
class Explanation:
    """J, the seeds and J^T·seed of a case; ``text()`` lays them out, ``contributions(leaf, index)`` sums one."""

    case: Case
    J: np.ndarray  # rows: root elements in order; columns: differentiable leaf elements in order
    rows: list  # (root, index) per row
    cols: list  # (leaf, index) per column
    seed: np.ndarray  # the seeds, flattened in row order
    grads: dict  # leaf name -> J^T·seed in the leaf's shape
    expression: str | None = None
    code: dict | None = None  # leaf name -> what the code under test (the case's engine, user ops) returned
    code_label: str = ""  # which code that is; or why it gave no gradients
    finding: str | None = None  # the finding recorded beside a case file (discrepancy.json), if any
    # where J comes from finite-difference JVPs (user ops without a jvp): those ops, and J^T·seed's error estimate
    # per leaf (gradspec.oracles.fd_jacobian: its own estimate, as gs.check compares it); else "" and None
    estimated: str = ""
    error: dict | None = None

    def contributions(self, leaf: str, index) -> str:
        """``leaf[index] = J[k, i]·seed[k] (root[k]) + ... = total`` over the rows where both are non-zero."""
        index = tuple(int(i) for i in (index if isinstance(index, (tuple, list)) else (index,)))
        try:
            c = self.cols.index((leaf, index))
        except ValueError:
            raise ExplainError(f"no input element {leaf}[{_ix(index)}]; inputs: {sorted({n for n, _ in self.cols})}") \
                from None
        terms = [f"{_n(self.J[k, c])}·{_n(self.seed[k])} ({r}[{_ix(i)}])" for k, (r, i) in enumerate(self.rows)
                 if self.J[k, c] != 0 and self.seed[k] != 0]
        total = float(self.J[:, c] @ self.seed)
        body = " + ".join(terms) if terms else "0 (no output element it reaches has a non-zero seed)"
        return f"{leaf}[{_ix(index)}] = {body} = {_n(total)}"

    def text(self, limit: int = 24) -> str:
        """The whole explanation as text; ``limit`` input elements get their contributions spelled out."""
        c = self.case
        lines = [f"gradspec explain: {self.expression}" if self.expression else "gradspec explain: a case"]
        shapes = c.shapes()
        for n in c.nodes:
            p = ", ".join(f"{k}={v!r}" for k, v in n.params.items() if not k.startswith("_"))
            lines.append(f"  {n.name} = {n.op}({', '.join(n.inputs)}{', ' + p if p else ''})   # {shapes[n.name]}")
        lines.append("inputs:")
        for l in c.leaves:
            flag = "" if l.differentiable else "  (constant: no gradient)"
            lines.append(f"  {l.name} {l.shape} = {_arr(l.value)}{flag}")
        lines.append("seed (the gradient passed to backward):")
        for r, s in zip(c.roots, c.seeds, strict=True):
            lines.append(f"  {r} {shapes[r]}: " + ("implicit: ones (numel 1)" if s is None else _arr(s)))
        lines.append(f"J = d({', '.join(c.roots)}) / d({', '.join(l.name for l in c.grad_leaves())}): "
                     f"{self.J.shape[0]} x {self.J.shape[1]} (rows: output elements, columns: input elements)")
        if self.J.size <= MAX_SHOWN:
            lines += _table(self.J, self.rows, self.cols, self.seed)
        else:
            lines.append(f"  ({self.J.size} entries: not printed; the contributions below are its non-zero terms)")
        lines.append("J^T·seed (what backward(seed) leaves in .grad):")
        for l in c.grad_leaves():
            lines.append(f"  {l.name}.grad = {_arr(self.grads[l.name])}")
        if self.estimated:  # (tryout6 #3: a 3.4% difference from an FD-JVP estimate read as the code being off)
            lines.append(f"  (an estimate: J comes from finite-difference JVPs of {self.estimated}, which declare no jvp; "
                         "its error estimate per element, as gs.check compares it:)")
            for l in c.grad_leaves():
                if self.error and self.error.get(l.name) is not None:
                    lines.append(f"  {l.name}.grad error estimate = {_err_arr(self.error[l.name])}")
        lines += self._code_lines()
        lines.append("each element's contributions (J[k, i]·seed[k], summed over the output elements k):")
        shown = 0
        for name, idx in self.cols:
            if shown >= limit:
                lines.append(f"  ... {len(self.cols) - shown} more (gs.explain(...).contributions(leaf, index))")
                break
            lines.append("  " + self.contributions(name, idx))
            shown += 1
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def _code_lines(self) -> list:
        """The code under test's gradients beside J^T·seed, with their difference (and the recorded finding)."""
        lines = []
        if self.finding:
            lines.append(f"the finding recorded with this case: {self.finding}")
        if self.code is None:
            if self.code_label:
                lines.append(f"the code under test: {self.code_label}")
            return lines
        lines.append(f"what the code under test returned ({self.code_label}), beside J^T·seed:")
        for l in self.case.grad_leaves():
            got, want = self.code.get(l.name), self.grads[l.name]
            if got is None:
                lines.append(f"  {l.name}.grad: code None (no gradient), J^T·seed {_arr(want)}")
                continue
            got = np.asarray(got, dtype=np.float64)
            if got.shape != want.shape:
                lines.append(f"  {l.name}.grad: code {_arr(got)} of shape {got.shape}, J^T·seed {_arr(want)} of shape "
                             f"{want.shape}")
                continue
            diff = got - want
            big = float(np.max(np.abs(diff))) if diff.size else 0.0
            scale = float(np.max(np.abs(want))) if want.size else 0.0
            rel = f", relative {_n(big / scale)}" if scale > 0 else ""
            err = None if not self.error or self.error.get(l.name) is None else np.asarray(self.error[l.name])
            if err is not None and diff.size and err.shape == diff.shape:
                k = np.unravel_index(int(np.argmax(np.abs(diff))), diff.shape)
                inside = bool(abs(diff[k]) <= 4 * err[k])  # (gs.check's fd_factor 4 on an estimate's error)
                rel += (f"; J^T·seed's own error estimate there is {_n(float(err[k]))}: "
                        + ("within 4x it, no evidence against the code" if inside else "beyond 4x it"))
            lines.append(f"  {l.name}.grad: code {_arr(got)}, J^T·seed {_arr(want)}, difference (code - J^T·seed) "
                         f"{_arr(diff)}: max |difference| {_n(big)}{rel}")
        return lines


def code_gradients(case: Case) -> tuple[dict | None, str]:
    """``({leaf: gradient}, label)``: what the code under test -- the engine the case records (the reference
    engine runs its user ops' vjp and torch Functions' backward) -- returns for the case; ``(None, why)``
    where it raises.  A ``module:attr`` engine is imported through the case-file gate (``caseio.engine_for``):
    only from a module the user allowed, else ``(None, why)`` naming the module and ``--allow-import``."""
    from . import engines as _engines
    from . import oracles as _oracles
    from .oracles.engine_oracle import EngineOracle

    name = case.engine or "reference"
    users = sorted(case.user_ops) or sorted({n.op for n in case.nodes if case.spec(n.op).user})
    label = f"engine {name!r}" + (f", user op(s) {', '.join(users)}" if users else "")
    try:
        if ":" in name:  # a name read from a case: imported only through the gate (a module the user allowed)
            from .caseio import engine_for

            engine_for(case)
        oracle = _oracles.get(name) if ":" not in name else EngineOracle(_engines.get(name), name, name)
        got = oracle.vjp(case)
    except Exception as e:  # noqa: BLE001 - shown as what the code did, not a traceback
        return None, f"{label} raised {type(e).__name__}: {e}"
    return {k: (None if v is None else np.asarray(v)) for k, v in got.items()}, label


def explain(what, *, seed=None, requires_grad=None, **inputs) -> Explanation:
    """Explain ``backward(seed)`` for a :class:`gradspec.Case` or an expression over ``inputs``.

    ``what``: a Case (its own seeds are used), or an expression such as ``"mm(x, a)"`` or ``"sum(x * w, dim=1)"``
    whose names are the keyword ``inputs`` (arrays, nested lists or numbers). ``seed``: the gradient passed to
    ``backward`` (default: ones of the output's shape when it has one element, else required, as in torch).
    ``requires_grad``: {name: False} for inputs that are constants.
    """
    if isinstance(what, Case):
        if inputs or seed is not None:
            raise ExplainError("give either a Case (it carries its values and seeds) or an expression with inputs")
        case, text = what, None
    elif isinstance(what, str):
        case, text = build_case(what, inputs, seed, requires_grad or {}), what
    else:
        raise ExplainError(f"explain() takes a Case or an expression string, not {type(what).__name__}")
    try:
        jac = jacobian(case)
    except Exception as e:  # noqa: BLE001 - say what could not be computed, not a traceback
        raise ExplainError(f"cannot build J for this case: {e}") from None
    grads = {k: np.asarray(v, dtype=np.float64) for k, v in jac.vjp.items()}
    out = Explanation(case, jac.matrix, jac.row_labels, jac.col_labels, jac.seed_vector, grads, text)
    fd_ops = sorted({n.op for n in case.nodes if getattr(case.spec(n.op), "jvp_source", "declared") != "declared"})
    if fd_ops:
        from .oracles.fd_jacobian import fd_jacobian_error

        out.estimated = ", ".join(fd_ops)
        try:
            out.error = fd_jacobian_error(case, jac.vjp)
        except Exception:  # noqa: BLE001 - the estimate is then said to be one, without its size
            out.error = None
    return out


def build_case(expr: str, inputs: dict, seed, requires_grad: dict) -> Case:
    """The case of ``expr`` (parsed by :func:`parse_expression`), its root seeded with ``seed``."""
    nodes, consts = parse_expression(expr, set(inputs))
    leaves = {}
    for name, value in inputs.items():
        try:
            leaves[name] = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise ExplainError(f"input {name!r} is not numeric: {value!r}") from None
    unused = sorted(set(inputs) - {i for n in nodes for i in n[2]})
    if unused:
        raise ExplainError(f"input(s) {', '.join(unused)} do not appear in {_q(expr)}")
    leaves.update(consts)
    rg = {name: bool(requires_grad.get(name, True)) for name in inputs}
    rg.update({c: False for c in consts})
    if not nodes:
        raise ExplainError(f"{_q(expr)} computes nothing: call an op, e.g. \"sum(x)\" or \"x * w\"")
    _check_shapes(expr, leaves, nodes)
    root = nodes[-1][0]
    seeds = None if seed is None else [np.asarray(seed, dtype=np.float64)]
    try:
        return Case.build(leaves, nodes, [root], seeds, requires_grad=rg)
    except CaseError as e:
        hint = " (pass it with --seed / seed=...)" if "implicit seed" in str(e) or "seed for root" in str(e) else ""
        raise ExplainError(f"{_q(expr)}: {e}{hint}") from None


def _check_shapes(expr: str, leaves: dict, nodes: list) -> None:
    """Each op call's input shapes, checked in order: the error names the call, the shapes and the op's signature."""
    shapes = {k: np.shape(v) for k, v in leaves.items()}
    for name, op, ins, params in nodes:
        spec = _registry.lookup(op)
        got = [shapes[i] for i in ins]
        try:
            out = spec.out_shape(got, spec.canonical(got, dict(params)))
        except Exception:  # noqa: BLE001 - the op's own shape rule refused: reported below with the shapes
            out = None
        if out is None:
            call = f"{op}({', '.join(ins)}{', ' if params else ''}{', '.join(f'{k}={v!r}' for k, v in params.items())})"
            raise ExplainError(f"{_q(expr)}: {call} does not accept input shapes "
                               f"{', '.join(str(tuple(g)) for g in got)} (signature: {spec.public_signature}"
                               f"{'; ' + spec.signature if spec.signature else ''})")
        shapes[name] = tuple(out)


def parse_expression(expr: str, names: set) -> tuple[list, dict]:
    """``expr`` as case nodes ``(name, op, inputs, params)`` (the last is the root) and constant leaves.

    Only op calls (``mm(x, a)``, ``sum(x, dim=1)``), input names, numbers, ``+ - * / @ **`` and unary
    minus are accepted; anything else raises :class:`ExplainError` naming it.
    """
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        raise ExplainError(f"cannot parse {_q(expr)}: {e.msg} (column {e.offset})") from None
    except (RecursionError, MemoryError):  # (Python's parser gives up on ~1000 nested terms: no traceback)
        raise ExplainError(f"cannot parse {_q(expr)}: it nests too deeply for Python's parser; split it up") from None
    nodes: list = []
    consts: dict = {}
    counter = {"v": 0, "c": 0}

    def fresh(prefix: str) -> str:
        while True:
            counter[prefix] += 1
            name = f"{prefix}{counter[prefix]}"
            if name not in names and name not in consts and name not in {n[0] for n in nodes}:
                return name

    def const(value: float) -> str:
        name = fresh("c")
        consts[name] = np.array(float(value))
        return name

    def walk(node) -> str:
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise ExplainError(f"unknown name {_q(node.id)} in {_q(expr)}: give it as an input (--{node.id} SPEC)"
                                   + _suggest(node.id, names))
            return node.id
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return const(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = walk(node.operand)
            if isinstance(node.op, ast.UAdd):
                return inner
            return emit("neg", [inner], {})
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return emit(_BINOPS[type(node.op)], [walk(node.left), walk(node.right)], {})
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name):
                raise ExplainError(f"only calls of table ops by name are allowed, not {_q(ast.unparse(node.func))}")
            op = node.func.id
            try:
                _registry.lookup(op)
            except KeyError:
                raise ExplainError(f"unknown op {_q(op)}" + _suggest(op, set(_registry.public_names()))
                                   + " (`gradspec ops` lists them)") from None
            params = {}
            for kw in node.keywords:
                if kw.arg is None:
                    raise ExplainError("**kwargs are not allowed in an expression")
                params[kw.arg] = _literal(kw.value, expr)
            return emit(op, [walk(a) for a in node.args], params)
        raise ExplainError(f"{_q(ast.unparse(node))} is not allowed in an expression: use op calls, input names, "
                           "numbers and + - * / @ **")

    def emit(op: str, ins: list, params: dict) -> str:
        name = fresh("v")
        nodes.append((name, op, ins, params))
        return name

    try:
        root = walk(tree.body)
    except RecursionError:
        raise ExplainError(f"{_q(expr)} nests too deeply to explain (one Jacobian per term); split it up") from None
    if nodes and root == nodes[-1][0] and "y" not in names and "y" not in consts:
        nodes = [(("y" if n == root else n), op, [("y" if i == root else i) for i in ins], p) for n, op, ins, p in nodes]
    return nodes, consts


def _literal(node, expr: str):
    try:
        value = ast.literal_eval(node)
    except ValueError:
        raise ExplainError(f"the keyword value {_q(ast.unparse(node))} in {_q(expr)} must be a literal (a number, a "
                           "tuple, True/False/None)") from None
    return value


def _suggest(word: str, choices: set) -> str:
    close = difflib.get_close_matches(word, sorted(choices), n=3, cutoff=0.5)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _q(text: str) -> str:
    """A user's expression or array as an error quotes it: cut (a 100 KB --x was echoed whole: tryout5 #10)."""
    return short_repr(text, 80)


_NON_FINITE = {"nan": math.nan, "inf": math.inf}


def _non_finite(tree):
    """``tree`` with the names ``nan`` and ``inf`` made numbers (``[1e400, nan]``: literal_eval knows neither);
    any other name stays, so literal_eval refuses it."""
    for node in ast.walk(tree):
        for field, child in ast.iter_fields(node):
            if isinstance(child, list):
                child[:] = [ast.Constant(_NON_FINITE[c.id]) if isinstance(c, ast.Name) and c.id in _NON_FINITE else c
                            for c in child]
            elif isinstance(child, ast.Name) and child.id in _NON_FINITE:
                setattr(node, field, ast.Constant(_NON_FINITE[child.id]))
    return tree


def _why_not_literal(e: Exception, text: str) -> str:
    if isinstance(e, SyntaxError):
        return f"{e.msg}, column {e.offset}"
    if isinstance(e, ValueError):  # literal_eval's "malformed node" names no node: say which
        try:
            bad = next((n for n in ast.walk(ast.parse(text, mode="eval"))
                        if not isinstance(n, (ast.Expression, ast.List, ast.Tuple, ast.Constant, ast.UnaryOp,
                                              ast.USub, ast.UAdd, ast.Load))), None)
        except (SyntaxError, RecursionError):
            bad = None
        if isinstance(bad, ast.Name):
            return f"the name {_q(bad.id)} is not a number"
        if bad is not None:
            return f"{_q(ast.unparse(bad))} is not a number"
    return type(e).__name__


def parse_array(spec: str, where: str | None = None) -> np.ndarray:
    """An input from the command line: ``ones:2,3``, ``zeros:4``, ``arange:2,3``, ``randn:2,3`` (seeded),
    ``full:0.5:2,3``, a number, or a nested list ``[[1,2],[3,4]]``.

    Under a size limit (``gradspec explain --max-elements``, :mod:`gradspec._private.limits`) a shape above
    it raises ``SizeError`` naming ``where`` (default: the spec) before anything is allocated."""
    text = spec.strip()
    if not text:
        raise ExplainError("an empty array spec: use e.g. ones:2,3 or [[1,2],[3,4]]")
    kind, _, rest = text.partition(":")
    makers = {"ones": np.ones, "zeros": np.zeros}
    if kind in makers or kind in ("arange", "randn", "full"):
        fill = None
        if kind == "full":
            fill, _, rest = rest.partition(":")
        try:
            shape = tuple(int(s) for s in rest.split(",") if s.strip()) if rest.strip() else ()
            if any(s < 0 for s in shape):
                raise ValueError
        except ValueError:
            raise ExplainError(f"bad shape in {_q(spec)}: give sizes as integers, e.g. {kind}:2,3") from None
        _limits.check_dims(shape, where or repr(spec))
        if kind in makers:
            return makers[kind](shape)
        if kind == "arange":
            return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
        if kind == "randn":
            return np.random.default_rng(0).standard_normal(shape)
        try:
            return np.full(shape, float(fill))
        except ValueError:
            raise ExplainError(f"bad fill value in {_q(spec)}: full:VALUE:SHAPE, e.g. full:0.5:2,3") from None
    try:
        value = ast.literal_eval(_non_finite(ast.parse(text, mode="eval")))
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError) as e:
        why = _why_not_literal(e, text)
        raise ExplainError(f"cannot read the array {_q(spec)} ({why}): use ones:2,3 / zeros:2,3 / arange:2,3 / "
                           "randn:2,3 / full:0.5:2,3 / a number / a nested list like [[1,2],[3,4]] (nan, inf and "
                           "-inf as such)") from None
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ExplainError(f"{_q(spec)} is not a rectangular array of numbers") from None
    return arr


def _table(J, rows, cols, seed) -> list:
    head = ["row \\ col"] + [f"{n}[{_ix(i)}]" for n, i in cols] + ["seed"]
    body = [[f"{r}[{_ix(i)}]"] + [_n(v) for v in J[k]] + [_n(seed[k])] for k, (r, i) in enumerate(rows)]
    widths = [max(len(row[j]) for row in [head] + body) for j in range(len(head))]
    fmt = lambda row: "  " + "  ".join(c.rjust(w) for c, w in zip(row, widths))  # noqa: E731
    return [fmt(head)] + [fmt(r) for r in body]


def _arr(a) -> str:
    a = np.asarray(a)
    with np.printoptions(precision=6, threshold=60, edgeitems=4, suppress=True):
        return " ".join(np.array2string(a, separator=", ", max_line_width=10**6).split()) if a.ndim else _n(float(a))


def _err_arr(a) -> str:
    """Error estimates, 3 significant digits each: ``_arr``'s fixed 6 decimals print 4e-12 as "0." (tryout7 #13d)."""
    a = np.asarray(a, dtype=np.float64)
    with np.printoptions(threshold=60, edgeitems=4, formatter={"float_kind": lambda v: f"{v:.3g}"}):
        return " ".join(np.array2string(a, separator=", ", max_line_width=10**6).split()) if a.ndim else f"{float(a):.3g}"


def _n(v) -> str:
    v = float(v)
    return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.6g}"


def _ix(idx) -> str:
    return ", ".join(str(i) for i in idx)
