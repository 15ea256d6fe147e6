"""Localisation: which node's gradient rule is wrong, and how (CONTRACT §8, ``wrong-vjp``).

A value discrepancy says *which leaf element* is off; this module says *which node* and *what
kind of mistake*.  It replays the reference forward (every node's real input values) and the
reference backward (the upstream gradient that really arrives at each node), then walks the nodes
from the roots towards the leaves and checks each node on its own: a one-node case whose leaves
are the node's inputs (values from the forward) and whose seed is that upstream gradient, run by
the code under test (the user's vjp, a torch Function's backward, or a black-box engine rebuilt
on that one node) and by the node's independent twin (its JVP rule, or finite differences),
through :func:`gradspec.check.check` itself.  The first node that disagrees is blamed: every node
nearer the roots passed, so the upstream gradient it received is right.  The error is then named
by testing a few hypotheses against the twin's local Jacobian ``J``: ``sign``, ``scale`` (with the
factor, named as a simple rational such as ``(n-1)/n`` when it is one), ``seed-ignored`` (the VJP
behaves as if ``g`` were ones, or its mean), ``broadcast-reduction`` (a broadcast input's gradient
taken from the first slice or averaged instead of summed), ``permuted`` (the right numbers in the
wrong places, e.g. ``g`` broadcast without the unsqueeze), else ``other``.

:func:`attach` is called by ``check()`` on every disagreement (registered below, so the
comparison layer does not import this one); it sets ``Discrepancy.cause``.

Example::

    >>> import numpy as np, gradspec as gs
    >>> half = gs.Op("half_sq", forward=lambda x: x * x, vjp=lambda g, x, out: (x * g,))
    >>> case = gs.Case.build({"x": np.array([1.0, -2.0, 3.0])},
    ...                      [("h", "tanh", ["x"], {}), ("y", "half_sq", ["h"], {}), ("s", "sum", ["y"], {})], ["s"])
    >>> c = gs.check(case, oracles=["reference", "jacobian"]).discrepancies[0].cause
    >>> c.id, c.node, c.op, c.pattern, c.factor
    ('wrong-vjp', 'y', 'half_sq', 'scale', 0.5)
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from fractions import Fraction

import numpy as np

from . import engine as E
from .case import Case, Leaf, NodeDef
from .causes import ENGINE_IDS, Cause
from .check import check as _run_check
from .check import register_explainer
from .oracles import jacobian as _jac
from .oracles.engine_oracle import EngineOracle
from .oracles.reference import build_engine_graph

__all__ = ["attach", "explain", "deferred", "localise", "classify", "name_factor", "explain_finding", "EXPLAINED"]

# A hypothesis "explains" a wrong gradient when what is left of the error under it is at most this
# fraction of the error itself: the hypotheses are exact transformations of J^T g (a sign, a factor,
# a slice, a permutation), so a true one leaves rounding (1e-16 relative) or, with a finite-difference
# JVP as the twin, that estimate's error (about 1e-9 relative) -- far below 1 % of any error that
# failed the comparison (>= its tolerance, itself >= 1e-12 relative).
EXPLAINED = 1e-2
# A factor is named as a simple rational when it matches one to this relative accuracy (the fitted
# factor is a ratio of two sums of exact products: good to ~1e-12 with an exact twin).
_RATIONAL_RTOL = 1e-7

_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("gradspec_diagnosing", default=False)
_ENGINES: contextvars.ContextVar = contextvars.ContextVar("gradspec_engine_oracles", default=frozenset())
_DEFERRED: contextvars.ContextVar = contextvars.ContextVar("gradspec_diagnosis_deferred", default=False)
_LOCALISED_KINDS = ("value", "nan-inf-pattern", "shape", "none-vs-zeros")


# =============================================================================================
# entry points
# =============================================================================================


@contextlib.contextmanager
def deferred():
    """Inside, ``check()`` leaves causes unset (a search shrinking a failure re-checks it hundreds of times;
    the finding it keeps is explained once, by :func:`explain`)."""
    token = _DEFERRED.set(True)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


def explain(d) -> Cause | None:
    """The cause of finding ``d`` (a check() discrepancy or a ``verify_*`` finding), computed once and kept."""
    if d.cause is None:
        v = getattr(d, "verdict", None)
        if d.case is not None and v is not None and d.kind in _LOCALISED_KINDS + ("raised",) and not _ACTIVE.get():
            token = _ACTIVE.set(True)
            oracles = getattr(v, "oracles", None) or {}
            etoken = _ENGINES.set(_engine_names(oracles))
            try:
                d.cause = localise(d.case, d, oracles, v)
            except Exception as e:  # noqa: BLE001 - a diagnosis must never hide the finding itself
                d.cause = Cause("not-localised", f"the localisation itself failed ({type(e).__name__}: {e})",
                                evidence=d.message)
            finally:
                _ENGINES.reset(etoken)
                _ACTIVE.reset(token)
        if d.cause is None:
            d.cause = explain_finding(d)
    return d.cause


def attach(verdict, oracles: dict) -> None:
    """Give every discrepancy of ``verdict`` (from ``check()``) a :class:`Cause` where it has none.

    ``oracles`` maps the oracle names used by the check to the oracle objects (an engine under
    test is one).  Discrepancies that blame the same oracle share one localisation.
    """
    if _ACTIVE.get() or _DEFERRED.get():
        return  # a one-node check made by the localisation itself, or a search that explains what it keeps
    token = _ACTIVE.set(True)
    etoken = _ENGINES.set(_engine_names(oracles))
    try:
        done: dict = {}
        for d in verdict.discrepancies:
            if d.cause is not None or d.case is None:
                continue
            key = (tuple(_suspects(d.oracles)), d.kind == "raised")
            if key not in done:
                try:
                    done[key] = localise(d.case, d, oracles, verdict)
                except Exception as e:  # noqa: BLE001 - a diagnosis must never hide the finding itself
                    done[key] = Cause("not-localised", f"the localisation itself failed ({type(e).__name__}: {e}); "
                                      "the finding stands, see its numbers", evidence=d.message)
            d.cause = done[key]
    finally:
        _ENGINES.reset(etoken)
        _ACTIVE.reset(token)


def _engine_names(oracles: dict) -> frozenset:
    return frozenset(n for n, o in oracles.items() if isinstance(o, EngineOracle))


def localise(case: Case, d, oracles: dict, verdict=None) -> Cause:
    """The cause of discrepancy ``d`` on ``case``: the first node whose rule is wrong, or why there is none."""
    suspect = _suspect(d.oracles, oracles)
    if d.kind == "raised":
        return _raised_cause(case, d)
    suspects = _suspects(d.oracles)
    if d.kind == "none-vs-zeros":
        return _none_vs_zeros(d)
    if _is_engine(suspect) and verdict is not None:
        c = _engine_seed_ignored(case, suspect, verdict) or _engine_overwrite(case, suspect, verdict)
        if c is not None:
            return c
    try:
        values, adjoints = _forward_backward(case)
    except Exception as e:  # noqa: BLE001
        return Cause("not-localised", f"the reference backward cannot run on this case ({type(e).__name__}: {e}), so "
                     "the upstream gradient of each node is unknown", evidence=d.message)
    for node in reversed(case.nodes):
        g = adjoints.get(node.name)
        if g is None:
            continue
        mini = _one_node_case(case, node, values, g)
        if mini is None:
            continue
        c = _check_node(case, mini, node, suspects, oracles)
        if c is not None:
            return c
    return _unlocalised(case, d, suspect)


def _is_engine(name: str) -> bool:
    return name.startswith("engine:") or name in _ENGINES.get()


def _suspects(pair) -> list:
    """The sides of an oracle pair that run code under test (VJP rules, an engine, a torch twin, a JVP)."""
    engines = [n for n in pair if _is_engine(n)]
    if engines:
        return engines[:1]  # an engine under test: the reference and the jacobian are its witnesses
    out = [n for n in pair if n == "reference" or n.startswith("torch")]
    return out or (["jacobian"] if "jacobian" in pair else list(pair[:1]))


def _suspect(pair, oracles: dict) -> str:
    """The side of an oracle pair that runs the code under test (VJP rules, an engine, a torch twin)."""
    a, b = pair
    for name in (a, b):
        if _is_engine(name):
            return name
    if "reference" in (a, b):
        return "reference"
    for name in (a, b):
        if name.startswith("torch"):
            return name
    return "jacobian" if "jacobian" in (a, b) else a


# =============================================================================================
# the reference forward and backward: every node's input values and upstream gradient
# =============================================================================================


def _forward_backward(case: Case) -> tuple[dict, dict]:
    values = case.evaluate()
    with E._quiet_fp():
        env, roots = build_engine_graph(case)
        for n in case.nodes:
            t = env[n.name]
            if t.requires_grad and not t.is_leaf:
                t.retain_grad()
        seeds = [None if s is None else E.Tensor(np.array(s, copy=True)) for s in case.seeds]
        E.backward(roots, seeds)
    adj = {}
    for n in case.nodes:
        g = env[n.name]._grad
        adj[n.name] = None if g is None else np.asarray(g.numpy())
    return values, adj


def _one_node_case(case: Case, node: NodeDef, values: dict, g: np.ndarray) -> Case | None:
    """``node`` alone: its inputs as fresh leaves (forward values; the same leaf for a repeated input),
    its output the root, seeded with the upstream gradient ``g``."""
    diff = _differentiable(case)
    leaves, seen = [], set()
    for i in node.inputs:
        if i in seen:
            continue
        seen.add(i)
        v = np.array(values[i], copy=True)
        leaves.append(Leaf(i, v, bool(diff.get(i)) and v.dtype.kind == "f"))
    if not any(l.differentiable for l in leaves):
        return None
    out = values[node.name]
    seed = np.asarray(g, dtype=out.dtype).reshape(out.shape)
    mini = Case(leaves, [NodeDef(node.name, node.op, list(node.inputs), dict(node.params))], [node.name], [seed],
                engine=case.engine, user_ops=dict(case.user_ops))
    return mini


def _differentiable(case: Case) -> dict:
    d = {l.name: l.differentiable for l in case.leaves}
    for n in case.nodes:
        d[n.name] = any(d.get(i) for i in n.inputs)
    return d


# =============================================================================================
# one node
# =============================================================================================


def _check_node(case: Case, mini: Case, node: NodeDef, suspects: list, oracles: dict) -> Cause | None:
    """Run ``node`` alone through the suspects and its twins; the cause if one of the suspects is wrong here."""
    spec = case.spec(node.op)
    code = [s for s in suspects if s != "jacobian"] or ["reference"]
    names = [oracles.get(s) or s for s in code] + ["jacobian"]
    v = _run_check(mini, oracles=names)
    if not v.discrepancies and not v.errors:
        return None
    if (spec.user and spec.jvp_source == "declared") or "jacobian" in suspects or any(
            s.startswith("torch") for s in suspects):
        # The twin is the user's own jvp, or the suspect is a torch twin: finite differences decide which side is wrong.
        v = _run_check(mini, oracles=names + ["finite-differences"])
    for s in code:
        if s in v.errors:
            return _raised_at(node, spec, s, v.errors[s])

    def apart(a, b):
        return [x for x in v.discrepancies if set(x.oracles) == {a, b}]

    has_fd = "finite-differences" in v.results
    jac_ok = "jacobian" in v.results and not (has_fd and apart("jacobian", "finite-differences"))
    twin = "jacobian" if jac_ok else "finite-differences" if has_fd else None
    if twin is None:
        return None
    bad = {s: apart(s, twin) for s in code if s in v.results}
    if "jacobian" in v.results and not jac_ok and "reference" in v.results and not apart("reference", twin):
        return _wrong_jvp(mini, node, spec, v.results["jacobian"], v.results[twin])
    if "reference" in bad and bad["reference"]:
        return _node_cause(mini, node, spec, "reference", v, twin, bad["reference"][0])
    for s, found in bad.items():
        if not found:
            continue
        if s.startswith("torch"):
            return _twin_mismatch(mini, node, spec, s, v.results.get(s), v.results.get(twin))
        return _node_cause(mini, node, spec, s, v, twin, found[0])
    return None


def _node_cause(mini, node, spec, suspect, v, twin, first) -> Cause:
    if _is_engine(suspect) and len(set(node.inputs)) < len(node.inputs):
        c = _repeated_dropped(mini, node, spec, suspect, v.results[suspect])
        if c is not None:
            return c
    if first.kind == "shape":
        return _shape_cause(mini, node, spec, suspect, first)
    return _wrong_vjp(mini, node, spec, suspect, v.results[suspect], v.results[twin], first)


def _wrong_vjp(mini: Case, node: NodeDef, spec, suspect: str, u: dict, t: dict, first) -> Cause:
    g = np.asarray(mini.seeds[0], dtype=np.float64)
    leaves = [l for l in mini.grad_leaves() if u.get(l.name) is not None and t.get(l.name) is not None]
    try:
        J = _jac.jacobian(mini)
    except Exception:  # noqa: BLE001 - patterns that need J are then not tried
        J = None
    pattern, factor, detail = classify(mini, node, spec, leaves, u, t, J, g)
    where = _where(node, spec)
    code = _whose(spec, suspect)
    if first.kind == "nan-inf-pattern":
        pattern, factor = "other", None
        detail = f"it returns non-finite values ({_fmt(first.values)}) where J^T·g is finite (a division by an input " \
                 "that is 0 there?); compute it without the singular step"
    summary = f"{where}: {code} is wrong — {detail}"
    return Cause("wrong-vjp", summary, node=node.name, op=node.op, evidence=_evidence(mini, leaves, u, t, g, suspect),
                 pattern=pattern, factor=factor)


def _wrong_jvp(mini, node, spec, jac_res, fd) -> Cause:
    leaves = [l for l in mini.grad_leaves() if (jac_res or {}).get(l.name) is not None and (fd or {}).get(l.name)
              is not None]
    pattern, factor, detail = classify(mini, node, spec, leaves, jac_res, fd, None, np.asarray(mini.seeds[0]))
    return Cause("wrong-jvp", f"{_where(node, spec)}: the declared jvp is wrong (its vjp agrees with finite "
                 f"differences) — {detail}", node=node.name, op=node.op,
                 evidence=_evidence(mini, leaves, jac_res, fd, np.asarray(mini.seeds[0]), "jacobian",
                                    twin="finite differences"), pattern=pattern, factor=factor)


def _twin_mismatch(mini, node, spec, suspect, u, jac_res) -> Cause:
    leaves = [l for l in mini.grad_leaves() if (u or {}).get(l.name) is not None]
    return Cause("twin-mismatch", f"{_where(node, spec)}: the torch= twin's gradient differs from the op's own vjp, "
                 "which agrees with its JVP and finite differences: the twin is a different function here (a note, "
                 "not a bug in the vjp)", node=node.name, op=node.op,
                 evidence=_evidence(mini, leaves, u or {}, jac_res or {}, np.asarray(mini.seeds[0]), suspect))


def _shape_cause(mini, node, spec, suspect, d) -> Cause:
    leaf = next((l for l in mini.leaves if l.name == d.leaf), None)
    out = mini.shapes()[node.name]
    msg = d.message.split(": ", 1)[-1]
    if leaf is not None and f"{tuple(out)}" in msg.split(" vs ")[-1] + msg.split(" vs ")[0]:
        return Cause("wrong-vjp", f"{_where(node, spec)}: {_whose(spec, suspect)} returns input {leaf.name}'s "
                     f"gradient in the output's broadcast shape {tuple(out)} instead of summing it down to "
                     f"{leaf.shape}", node=node.name, op=node.op, evidence=msg, pattern="broadcast-reduction")
    return Cause("wrong-vjp", f"{_where(node, spec)}: {_whose(spec, suspect)} returns a gradient of the wrong shape "
                 f"({msg})", node=node.name, op=node.op, evidence=msg, pattern="other")


def _repeated_dropped(mini, node, spec, suspect, u) -> Cause | None:
    """op(x, x) whose gradient is what some of the uses of x give, not all: one use of the repeated input lost."""
    leaves, nodes_in = [], []
    for k, i in enumerate(node.inputs):
        name = f"{i}__use{k}"
        leaves.append(Leaf(name, np.array(next(l.value for l in mini.leaves if l.name == i), copy=True),
                           next(l.differentiable for l in mini.leaves if l.name == i)))
        nodes_in.append(name)
    split = Case(leaves, [NodeDef(node.name, node.op, nodes_in, dict(node.params))], [node.name], list(mini.seeds),
                 engine=mini.engine, user_ops=dict(mini.user_ops))
    try:
        per_use = _jac.jacobian(split).vjp
    except Exception:  # noqa: BLE001
        return None
    for i in set(node.inputs):
        uses = [per_use[f"{i}__use{k}"].astype(np.float64) for k, j in enumerate(node.inputs) if j == i
                and per_use.get(f"{i}__use{k}") is not None]
        if len(uses) < 2 or u.get(i) is None:
            continue
        got, full = np.asarray(u[i], dtype=np.float64).ravel(), sum(uses).ravel()
        for r in range(1, len(uses)):
            for sub in itertools.combinations(uses, r):
                if _explains(got, sum(sub).ravel(), full):
                    return Cause("repeated-input-dropped", f"{_where(node, spec)}: the engine passes {i} to "
                                 f"{node.op} {len(uses)} times, but its gradient only counts {r} of the uses; "
                                 "accumulate the gradient of every argument, also when two arguments are the same "
                                 "tensor", node=node.name, op=node.op,
                                 evidence=f"{i}: engine {_fmt(got)}; all uses {_fmt(full)}; "
                                          f"per use {'; '.join(_fmt(x) for x in uses)}")
    return None


def _none_vs_zeros(d) -> Cause:
    return Cause("none-vs-zeros", f"leaf {d.leaf}: one side reports .grad None (no gradient reached it) and the "
                 f"other a gradient of zeros ({d.oracles[0]} vs {d.oracles[1]}); torch leaves .grad None for a leaf "
                 "no gradient flows to", evidence=d.message)


def _raised_at(node, spec, suspect, err) -> Cause:
    tname, msg, _ = err
    return Cause("wrong-vjp", f"{_where(node, spec)}: {_whose(spec, suspect)} raised {tname} on its own, at the "
                 "node's real inputs and upstream gradient", node=node.name, op=node.op, evidence=msg[:400],
                 pattern="other")


def _raised_cause(case: Case, d) -> Cause:
    who = d.oracles[0]
    text = d.message
    node = next((n for n in case.nodes if f"{n.op!r}" in text or f" {n.op}" in text), None)
    if node is not None:
        spec = case.spec(node.op)
        return Cause("wrong-vjp", f"{_where(node, spec)}: {_whose(spec, who)} raised ({text.split(': ', 1)[-1][:160]})",
                     node=node.name, op=node.op, evidence=text[:400], pattern="other")
    return Cause("not-localised", f"{who} raised on this case; no single node could be named ({text[:160]})",
                 evidence=text[:400])


def _unlocalised(case, d, suspect) -> Cause:
    calls = {}
    for n in case.nodes:
        calls[n.op] = calls.get(n.op, 0) + 1
    repeated = [op for op, k in calls.items() if k > 1 and case.spec(op).user]
    if any(s.startswith("torch") for s in d.oracles) and repeated:
        op = repeated[0]
        first = next(n for n in case.nodes if n.op == op)
        return Cause("wrong-vjp", f"{_where(first, case.spec(op))}: {_whose(case.spec(op), 'torch-cpu')} is right "
                     f"when called alone, wrong when called "
                     f"{calls[op]} times in one graph: the code keeps state between calls (class attributes, "
                     "globals) where it should keep it on ctx", node=first.name, op=op, evidence=d.message,
                     pattern="other")
    return Cause("not-localised", f"every node's gradient rule agrees with its twin on its own, at its real inputs "
                 f"and upstream gradient; the disagreement between {d.oracles[0]} and {d.oracles[1]} comes from how "
                 "the graph combines them (accumulation over the uses of a tensor, state shared between calls) or "
                 "from an oracle's own error", evidence=d.message)


# =============================================================================================
# engines: whole-graph hypotheses tried before bisecting
# =============================================================================================


def _engine_seed_ignored(case: Case, suspect: str, verdict) -> Cause | None:
    got = verdict.results.get(suspect)
    if got is None or all(s is None or np.all(np.asarray(s) == 1) for s in case.seeds):
        return None
    ones = Case(case.leaves, case.nodes, case.roots, [None if s is None else np.ones_like(s) for s in case.seeds],
                engine=case.engine, user_ops=case.user_ops)
    try:
        want = _jac.jacobian(ones).vjp
        right = _jac.jacobian(case).vjp
    except Exception:  # noqa: BLE001
        return None
    leaves = [l for l in case.grad_leaves() if got.get(l.name) is not None]
    if not leaves:
        return None
    uu, hh, tt = (_flat(x, leaves) for x in (got, want, right))
    if _explains(uu, hh, tt):
        return Cause("seed-ignored", "the engine's backward(gradient) ignores the gradient: every leaf's .grad is "
                     "what a seed of ones gives (J^T·1), not J^T·seed; use the gradient passed to backward() as the "
                     "root's initial gradient", evidence=f"engine {_fmt(uu)}; J^T·1 {_fmt(hh)}; J^T·seed {_fmt(tt)}")
    return None


def _engine_overwrite(case: Case, suspect: str, verdict) -> Cause | None:
    """Several roots, each back-propagated by its own backward() call: .grad holds only the last roots' part."""
    got = verdict.results.get(suspect)
    if got is None or len(case.roots) < 2:
        return None
    try:
        J = _jac.jacobian(case)
    except Exception:  # noqa: BLE001
        return None
    leaves = case.grad_leaves()
    uu = np.concatenate([np.zeros(l.value.size) if got.get(l.name) is None else
                         np.asarray(got[l.name], dtype=np.float64).reshape(-1) for l in leaves])
    parts, row = [], 0
    for _, shape in J.row_blocks:
        n = int(np.prod(shape))
        parts.append(J.matrix[row: row + n].T @ J.seed_vector[row: row + n])
        row += n
    full = sum(parts)
    for k in range(1, len(parts)):
        tail = sum(parts[k:])
        if _explains(uu, tail, full):
            return Cause("accumulation-overwrite", f"the engine's .grad holds only what the last {len(parts) - k} of "
                         f"{len(parts)} backward() calls (one per root) contributed: each backward replaced .grad "
                         "instead of adding to it", evidence=f"engine {_fmt(uu)}; last roots only {_fmt(tail)}; "
                         f"all roots {_fmt(full)}")
    return None


# =============================================================================================
# naming the error
# =============================================================================================


def classify(mini: Case, node: NodeDef, spec, leaves, u: dict, t: dict, J, g) -> tuple[str, float | None, str]:
    """(pattern, factor, a sentence with the fix direction) for a gradient ``u`` that should be ``t``.

    ``J`` is the twin's Jacobian of the one-node case ``mini`` (or None), ``g`` its seed.
    """
    if not leaves:
        return "other", None, "no gradient to compare"
    uu, tt = _flat(u, leaves), _flat(t, leaves)
    if not (np.isfinite(uu).all() and np.isfinite(tt).all()):
        return "other", None, "it is not finite where J^T·g is"
    err = uu - tt
    c = _fit(uu, tt)
    if c is not None and abs(c + 1) < 1e-9 and _explains(uu, -tt, tt):
        return "sign", -1.0, "it has the wrong sign everywhere; negate it"
    cols = None if J is None else _columns(J, leaves)
    if cols is not None:
        ones_vjp = J.matrix[:, cols].T @ np.ones(J.matrix.shape[0])
        cs = _fit(uu, ones_vjp)
        gf = np.ravel(g).astype(np.float64)
        constant = gf.size == 1 or np.ptp(gf) == 0
        if not np.all(gf == 1) and _explains(uu, ones_vjp, tt):
            return "seed-ignored", None, ("it ignores the upstream gradient g: the result is what g = ones gives "
                                          "(J^T·1); multiply by g element-wise")
        if not constant and _explains(uu, float(np.mean(gf)) * ones_vjp, tt):
            return "seed-ignored", None, ("it uses mean(g), a constant, instead of the upstream gradient g "
                                          "element-wise (right only when g is constant); use g itself")
        if not constant and cs is not None and _explains(uu, cs * ones_vjp, tt):
            return "seed-ignored", None, (f"it behaves as if the upstream gradient were the constant {cs:.4g}, "
                                          "not g; use g element-wise")
        b = _broadcast(mini, node, spec, leaves, u, t, J, g, cols)
        if b is not None:
            return "broadcast-reduction", None, b
        fan = _not_accumulated(uu, tt, J.matrix[:, cols], np.ravel(g))
        if fan is not None:
            return "other", None, fan
    if c is not None and c != 1 and c != 0 and _explains(uu, c * tt, tt):
        name = name_factor(c, _dims(mini, node))
        c = _snap(c, _dims(mini, node)) if name else c
        small = abs(c - 1) < 1e-3
        text = f"it is (1 {'+' if c > 1 else '-'} {abs(c - 1):.2g}) times J^T·g: a small relative error in the formula" \
            if small else f"it is {c:.6g} × J^T·g{' (' + f'{c:.6g}' + ' = ' + name + ')' if name and name != f'{c:g}' else ''}"
        return "scale", float(c), text + "; remove that factor"
    flip = np.abs(uu + tt) < np.abs(err)
    if flip.any() and _explains(uu, np.where(flip, -tt, tt), tt):
        return "sign", None, f"it has the wrong sign on {int(flip.sum())} of {uu.size} elements{_where_neg(mini, leaves, flip)}; " \
                             "fix the sign of the derivative there"
    p = _permuted(mini, node, leaves, u, t, J, g, cols)
    if p is not None:
        return "permuted", None, p
    bad = np.abs(err) > EXPLAINED * np.max(np.abs(err))
    return "other", None, f"it differs from J^T·g on {int(bad.sum())} of {uu.size} elements, with no simple pattern"


def _not_accumulated(uu, tt, Jc, g) -> str | None:
    """Each wrong element is the sum of a strict subset of the contributions it receives from several output
    elements (J[k, j] g[k]): contributions assigned or dropped instead of summed (repeated indices, windows)."""
    err = np.abs(uu - tt)
    bad = np.flatnonzero(err > EXPLAINED * float(np.max(err, initial=0.0)))
    if not bad.size:
        return None
    for j in bad:
        contrib = Jc[:, j] * g
        contrib = contrib[contrib != 0]
        if not 1 < contrib.size <= 12:
            return None
        if not any(abs(uu[j] - sum(sub)) <= EXPLAINED * err[j]
                   for r in range(contrib.size) for sub in itertools.combinations(contrib, r)):
            return None
    return (f"{bad.size} element(s) each receive contributions from several output elements (repeated indices, "
            "overlapping windows), and only some of them are summed; accumulate all of them (np.add.at / "
            "index_add instead of assignment)")


def name_factor(c: float, dims=()) -> str:
    """A simple rational for factor ``c`` (``"(n-1)/n with n = 4"``, ``"1/2"``, ``"2"``), or ""."""
    cands = []
    for k in range(2, 9):
        cands += [(Fraction(k), str(k)), (Fraction(1, k), f"1/{k}")]
    for n in sorted({int(d) for d in dims if int(d) > 1}):
        cands += [(Fraction(n - 1, n), f"(n-1)/n with n = {n}"), (Fraction(n, n - 1), f"n/(n-1) with n = {n}"),
                  (Fraction(1, n), f"1/n with n = {n}"), (Fraction(n), f"n with n = {n}")]
        if n > 2:
            cands += [(Fraction(1, n - 1), f"1/(n-1) with n = {n}")]
    for q, text in cands:
        if abs(c - float(q)) <= _RATIONAL_RTOL * abs(float(q)):
            return text
    if abs(c - 1) < 1e-3:
        return f"1 {'+' if c > 1 else '-'} {abs(c - 1):.2g}"
    return ""


def _snap(c: float, dims) -> float:
    """The named rational itself for a factor that matched one (the fit carries the twin's error)."""
    for q in _rationals(dims):
        if abs(c - float(q)) <= _RATIONAL_RTOL * abs(float(q)):
            return float(q)
    return c


def _rationals(dims) -> list:
    out = [Fraction(k) for k in range(2, 9)] + [Fraction(1, k) for k in range(2, 9)]
    for n in {int(d) for d in dims if int(d) > 1}:
        out += [Fraction(n - 1, n), Fraction(n, n - 1), Fraction(1, n), Fraction(n)] + ([Fraction(1, n - 1)] if n > 2 else [])
    return out


def _dims(mini: Case, node: NodeDef) -> list:
    shapes = mini.shapes()
    return [d for i in node.inputs for d in shapes[i]] + list(shapes[node.name])


def _broadcast(mini, node, spec, leaves, u, t, J, g, cols) -> str | None:
    """A broadcast input whose gradient keeps the first slice (or the mean) of the broadcast copies."""
    out_shape = np.shape(g)
    core_in, core_out = _core_ranks(spec, len(node.inputs))
    if core_in is None:
        return None
    off = 0
    for l in leaves:
        k = node.inputs.index(l.name)
        lo_out = len(out_shape) - core_out
        lo_in = len(l.shape) - core_in[k]
        loop_out, loop_in = out_shape[:lo_out], l.shape[:lo_in]
        axes = []
        for a in range(lo_out):
            j = a - (lo_out - lo_in)
            if loop_out[a] > 1 and (j < 0 or loop_in[j] == 1):
                axes.append(a)
        size = l.value.size
        if axes:
            ul, tl = np.asarray(u[l.name], dtype=np.float64).ravel(), np.asarray(t[l.name], dtype=np.float64).ravel()
            if np.allclose(ul, tl, rtol=1e-9, atol=0):
                off += size
                continue
            mask = np.zeros(out_shape)
            mask[tuple(slice(0, 1) if a in axes else slice(None) for a in range(len(out_shape)))] = 1.0
            first = (J.matrix.T @ (g * mask).ravel())[off: off + size]
            copies = int(np.prod([out_shape[a] for a in axes]))
            where = f"axis {axes[0]}" if len(axes) == 1 else f"axes {tuple(axes)}"
            if _explains(ul, first, tl):
                return (f"input {l.name} {l.shape} is broadcast over {where} of the output {tuple(out_shape)}, but its "
                        "gradient keeps only the first slice; sum over the broadcast axes (e.g. sum_to(g * ..., "
                        f"{l.name}.shape))")
            if _explains(ul, tl / copies, tl):
                return (f"input {l.name} {l.shape} is broadcast over {where} of the output {tuple(out_shape)}, but its "
                        f"gradient is averaged over the {copies} copies; sum them instead")
        off += size
    return None


def _core_ranks(spec, arity: int):
    sig = getattr(spec, "signature", None)
    if sig:
        from ._private.signature import parse

        try:
            ins, (out,) = parse(sig)
        except Exception:  # noqa: BLE001
            return None, None
        return [len(a) for a in ins], len(out)
    if getattr(spec, "broadcasting", False) or (spec.user and spec.shape_fn is None):
        return [0] * arity, 0
    return None, None


def _permuted(mini, node, leaves, u, t, J, g, cols) -> str | None:
    for l in leaves:
        ul, tl = np.asarray(u[l.name], dtype=np.float64), np.asarray(t[l.name], dtype=np.float64)
        if np.allclose(ul, tl, rtol=1e-9, atol=0):
            continue
        if J is not None and np.ndim(g) >= 1 and np.ndim(g) < l.value.ndim:
            try:
                gb = np.broadcast_to(g, l.shape)
            except ValueError:
                gb = None
            if gb is not None:
                one = _columns(J, [l])
                w = J.matrix[:, one].T @ np.ones(J.matrix.shape[0])
                if _explains(ul.ravel(), w * gb.ravel(), tl.ravel()):
                    return (f"the upstream gradient g {np.shape(g)} is broadcast against the trailing axes of input "
                            f"{l.name} {l.shape}, so g's elements land on the wrong positions; insert the reduced axis "
                            "first (g[..., None] / unsqueeze(-1))")
        for perm in itertools.permutations(range(ul.ndim)):
            if perm != tuple(range(ul.ndim)) and tl.transpose(perm).shape == ul.shape \
                    and _explains(ul.ravel(), tl.transpose(perm).ravel(), tl.ravel()):
                return (f"input {l.name}'s gradient is J^T·g with its axes permuted by {perm}; apply the inverse "
                        "permutation (np.argsort of the forward's)")
        err = float(np.max(np.abs(ul - tl)))
        if ul.size > 1 and float(np.max(np.abs(np.sort(ul.ravel()) - np.sort(tl.ravel())))) <= EXPLAINED * err:
            return f"input {l.name}'s gradient holds the right numbers in the wrong places; check the index mapping"
    return None


def _where_neg(mini, leaves, flip) -> str:
    off = 0
    for l in leaves:
        n = l.value.size
        f = flip[off: off + n]
        v = np.asarray(l.value, dtype=np.float64).ravel()
        if f.any() and np.array_equal(f, v < 0):
            return f" (exactly where {l.name} < 0)"
        off += n
    return ""


# =============================================================================================
# small helpers
# =============================================================================================


def _columns(J, leaves) -> np.ndarray:
    idx, off = [], 0
    names = {l.name for l in leaves}
    for name, shape in J.col_blocks:
        size = int(np.prod(shape))
        if name in names:
            idx.extend(range(off, off + size))
        off += size
    return np.array(idx, dtype=int)


def _flat(per_leaf: dict, leaves) -> np.ndarray:
    parts = [np.asarray(per_leaf[l.name], dtype=np.float64).reshape(-1) for l in leaves]
    return np.concatenate(parts) if parts else np.zeros(0)


def _fit(u: np.ndarray, t: np.ndarray) -> float | None:
    den = float(t @ t)
    return float(u @ t) / den if den > 0 and np.isfinite(den) else None


def _explains(u: np.ndarray, h: np.ndarray, t: np.ndarray) -> bool:
    """Hypothesis ``h`` explains ``u`` (which should be ``t``): element by element, it leaves at most 1 % of
    that element's error, plus a floor for the twin's own error (rounding, a finite-difference JVP's): 1e-8
    of the largest value, or twice the largest error among the elements that agree, if more."""
    if u.shape != h.shape or u.shape != t.shape:
        return False
    with np.errstate(all="ignore"):
        err = np.abs(u - t)
        scale = max(float(np.max(np.abs(u), initial=0.0)), float(np.max(np.abs(t), initial=0.0)))
        top = float(np.max(err, initial=0.0))
        # The twin's own noise, as seen on the elements that agree (errors below 1e-3 of the largest):
        # finite differences next to a kink are off by far more than 1e-8 relative there.
        noise = float(np.max(err[err <= 1e-3 * top], initial=0.0))
        floor = max(1e-8 * scale, 2 * noise)
        if not top > floor:
            return False
        return bool(np.all(np.abs(u - h) <= EXPLAINED * err + floor))


def _where(node: NodeDef, spec) -> str:
    return f"node {node.name} = {node.op}({', '.join(node.inputs)})"


def _whose(spec, suspect: str) -> str:
    if _is_engine(str(suspect)):
        return f"the engine's backward for {spec.name!r}"
    if spec.user and getattr(spec, "torch_name", None) and spec.name.startswith("torch_"):
        return f"your backward ({spec.name[6:]}.backward)"
    if spec.user:
        return "your vjp"
    if str(suspect).startswith("torch"):
        return f"torch's backward for {spec.name!r}"
    return f"gradspec's VJP rule for {spec.name!r}"


def _fmt(a, n: int = 6) -> str:
    try:
        flat = np.asarray(a, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        return str(a)
    body = ", ".join(f"{v:.6g}" for v in flat[:n])
    return "[" + body + (", ..." if flat.size > n else "") + "]"


def _evidence(mini, leaves, u, t, g, suspect, twin="J^T·g from the twin (JVP rule or finite differences)") -> str:
    parts = ["inputs: " + "; ".join(f"{l.name} = {_fmt(l.value)}" for l in mini.leaves), f"upstream g = {_fmt(g)}"]
    for l in leaves:
        parts.append(f"{l.name}: {suspect} {_fmt(u[l.name])} vs {twin} {_fmt(t[l.name])}")
    return "; ".join(parts)




# =============================================================================================
# findings that are not value discrepancies of check(): a user op's contract, a Function run twice,
# an engine rule (the engine-level diagnosis of each rule may replace these with sharper causes)
# =============================================================================================

_ENGINE_KIND_IDS = {
    "seed-shape": "seed-shape-accepted",
    "accumulation": "accumulation-overwrite",
    "reset": "reset-ignored",
    "freeing": "no-freeing",
    "retain-graph": "no-freeing",
    "repeated-argument": "repeated-input-dropped",
    "none-before-backward": "none-vs-zeros",
    "none-vs-zeros": "none-vs-zeros",
    "error-type": "error-type",
    "requires-grad": "error-type",
}


def explain_finding(d) -> Cause | None:
    """A cause for a finding made outside ``check()``'s value comparison (None only for ``timeout``)."""
    if d.kind == "timeout":
        return None
    msg = d.message or ""
    case = d.case
    node = _node_named_in(case, msg) if case is not None else None
    spec = case.spec(node.op) if node is not None else None
    if d.kind.startswith("vjp-") or d.kind == "jvp-raised":
        pattern = "other"
        if d.kind == "vjp-shape":
            pattern = _shape_pattern(case, node, msg)
        what = {"vjp-raised": "raised", "vjp-count": "returned the wrong number of gradients",
                "vjp-shape": "returned a gradient of the wrong shape", "vjp-dtype": "returned a gradient of the wrong "
                "dtype", "vjp-writes-input": "wrote into an array it was given (its upstream gradient or an input)",
                "jvp-raised": "(the declared jvp) raised"}.get(d.kind, d.kind)
        where = _where(node, spec) if node is not None else "the op under test"
        code = _whose(spec, "reference") if spec is not None else "your vjp"
        cid = "wrong-jvp" if d.kind == "jvp-raised" else "wrong-vjp"
        return Cause(cid, f"{where}: {code} {what} — {msg.split(': ', 2)[-1][:300]}", node=None if node is None else
                     node.name, op=None if node is None else node.op, evidence=msg[:600], pattern=pattern)
    if d.kind == "forward-raised":
        return Cause("forward-raised", f"the forward of the code under test raised: {msg[:300]}", evidence=msg[:600])
    if d.kind == "accumulation" and d.check_name == "backward twice" and case is not None:
        return _twice_cause(case, d)
    if d.kind == "raised":
        return _raised_cause(case, d) if case is not None else Cause("not-localised", msg[:300], evidence=msg[:600])
    if d.kind == "implicit-seed":
        cid = "implicit-seed-refused" if "refus" in msg or "numel() == 1" in msg and "raised" in msg else \
            "implicit-seed-non-scalar"
        return Cause(cid, f"{ENGINE_IDS[cid]} — {msg[:300]}", evidence=msg[:600])
    cid = _ENGINE_KIND_IDS.get(d.kind)
    if cid is not None:
        return Cause(cid, f"{ENGINE_IDS[cid]} — {msg[:300]}", evidence=msg[:600])
    return Cause("not-localised", f"{d.kind}: {msg[:300]}", evidence=msg[:600])


def _node_named_in(case: Case, msg: str) -> NodeDef | None:
    for n in case.nodes:
        if f"{n.op!r}" in msg:
            return n
    user = [n for n in case.nodes if case.spec(n.op).user]
    return user[0] if user else None


def _shape_pattern(case, node, msg) -> str:
    import re

    m = re.search(r"shape (\([^)]*\)) for input (\d+), whose shape is (\([^)]*\))", msg)
    if not m:
        return "broadcast-reduction" if "broadcast axes" in msg else "other"
    got, want = (tuple(int(x) for x in s.strip("()").split(",") if x.strip()) for s in (m.group(1), m.group(3)))
    if sorted(got) == sorted(want):
        return "permuted"
    if "broadcast axes" in msg and int(np.prod(got)) > int(np.prod(want)):
        return "broadcast-reduction"
    return "other"


def _twice_cause(case: Case, d) -> Cause:
    node = next((n for n in case.nodes if case.spec(n.op).user), None)
    factor = None
    if d.values is not None:
        twice, got = (float(v) for v in d.values)
        once = twice / 2
        if once:
            factor = (got - once) / once
    spec = case.spec(node.op) if node is not None else None
    where = _where(node, spec) if node is not None else "the Function"
    detail = f" (the second call gave {factor:.6g} times the first)" if factor is not None else ""
    return Cause("wrong-vjp", f"{where}: {_whose(spec, 'torch-cpu') if spec else 'its backward'} gives another answer "
                 f"when the same graph is backpropagated a second time (retain_graph=True){detail}: it modifies what "
                 "it saved on ctx or keeps state between calls; leave ctx unchanged in backward",
                 node=None if node is None else node.name, op=None if node is None else node.op, evidence=d.message,
                 pattern="scale" if factor is not None else "other", factor=factor)


# The comparison layer calls the explainers registered with it on every disagreement (it does not
# import this module: the localisation runs check() itself, so check() cannot import it).
register_explainer(attach)
