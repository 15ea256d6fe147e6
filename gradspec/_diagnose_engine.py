"""Engine findings: whole-graph hypotheses tried before the node-by-node walk (CONTRACT §8 engine ids).

An engine under test that ignores the seed, uses its mean, refuses an implicit seed of one element, or
lets a later backward() replace .grad instead of adding to it is wrong on every node at once; these
hypotheses simulate each wrong semantics on the whole case and keep the one that reproduces the
engine's numbers.  Called by :func:`gradspec.diagnose.localise`.

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec._diagnose_engine import _engine_overwrite
    >>> case = gs.Case.build({"x": np.array([1.0, 2.0])}, [("a", "sin", ["x"], {}), ("b", "cos", ["x"], {})],
    ...                      ["a", "b"], seeds=[np.ones(2), np.ones(2)])
    >>> _engine_overwrite(case, "engine:mine", gs.check(case, oracles=["reference"])) is None  # right numbers
    True
"""

from __future__ import annotations

import numpy as np

from ._diagnose_text import _fmt
from ._private.vjp_patterns import classify, explains, flat
from .case import Case
from .causes import Cause
from .check import check as _run_check
from .oracles import jacobian as _jac

__all__: list = []


def _engine_seed_ignored(case: Case, suspect: str, verdict) -> Cause | None:
    """The engine computes with another seed than the one passed to backward(): ones, or the seed's mean."""
    got = verdict.results.get(suspect)
    seeds = [None if s is None else np.asarray(s, dtype=np.float64) for s in case.seeds]
    if got is None or all(s is None or np.all(s == 1) for s in seeds):
        return None
    # the mean differs from the seed only where some seed is not constant
    varied = any(s is not None and s.size and np.ptp(s) > 0 for s in seeds)
    leaves = [l for l in case.grad_leaves() if got.get(l.name) is not None]
    if not leaves:
        return None
    try:
        right = _jac.jacobian(case).vjp
    except Exception:  # noqa: BLE001
        return None
    uu, tt = flat(got, leaves), flat(right, leaves)
    for how, other in (("ones", lambda s: np.ones_like(s)), ("mean", lambda s: np.full_like(s, s.mean()))):
        if how == "mean" and not varied:
            continue
        alt = Case(case.leaves, case.nodes, case.roots, [None if s is None else other(s) for s in seeds],
                   engine=case.engine, user_ops=case.user_ops)
        try:
            hh = flat(_jac.jacobian(alt).vjp, leaves)
        except Exception:  # noqa: BLE001
            continue
        if not explains(uu, hh, tt):
            continue
        if how == "ones":
            return Cause("seed-ignored", "the engine's backward(gradient) ignores the gradient: every leaf's .grad is "
                         "what a seed of ones gives (J^T·1), not J^T·seed; use the gradient passed to backward() as "
                         "the root's initial gradient", evidence=f"engine {_fmt(uu)}; J^T·1 {_fmt(hh)}; "
                                                                  f"J^T·seed {_fmt(tt)}")
        return Cause("seed-misapplied", "the engine's backward(gradient) uses the mean of the gradient for every "
                     "element instead of the gradient itself: every leaf's .grad is J^T·mean(seed), not J^T·seed; use "
                     "the gradient passed to backward() element by element",
                     evidence=f"engine {_fmt(uu)}; J^T·mean(seed) {_fmt(hh)}; J^T·seed {_fmt(tt)}")
    return None


def _engine_implicit_refused(case: Case, suspect: str, oracles: dict) -> Cause | None:
    """The engine raises on backward() without a gradient for a one-element root, and runs with ones."""
    if oracles.get(suspect) is None or not any(s is None for s in case.seeds):
        return None
    shapes = case.shapes()
    ones = Case(case.leaves, case.nodes, case.roots, [np.ones(shapes[r]) if s is None else s
                                                      for r, s in zip(case.roots, case.seeds)],
                engine=case.engine, user_ops=case.user_ops)
    try:
        v = _run_check(ones, oracles=[oracles[suspect], "reference"])
    except Exception:  # noqa: BLE001
        return None
    if suspect in v.errors:
        return None
    implicit = [f"{r} {shapes[r]}" for r, s in zip(case.roots, case.seeds) if s is None]
    return Cause("implicit-seed-refused", "the engine raises on backward() without a gradient for a root of one "
                 f"element ({', '.join(implicit)}), and runs when given np.ones of that shape; torch accepts an "
                 "implicit seed of ones for any one-element output, whatever its shape",
                 evidence=f"implicit seeds for {', '.join(implicit)}: raised; explicit ones: no error")


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
        if explains(uu, tail, full):
            return Cause("accumulation-overwrite", f"the engine's .grad holds only what the last {len(parts) - k} of "
                         f"{len(parts)} backward() calls (one per root) contributed: each backward replaced .grad "
                         "instead of adding to it", evidence=f"engine {_fmt(uu)}; last roots only {_fmt(tail)}; "
                         f"all roots {_fmt(full)}")
    return None



def _engine_cleared(case: Case, suspect: str, verdict) -> Cause | None:
    """Several roots, each back-propagated by its own backward() call, and .grad None exactly for the leaves
    that only earlier roots reach (a gradient of zeros, say relu at 0, leaves no value to tell by): a later
    backward cleared them.  Needs a leaf the last root reaches updated (else nothing was computed at all)."""
    got, ref = verdict.results.get(suspect), verdict.results.get("reference")
    if got is None or ref is None or len(case.roots) < 2:
        return None
    reached = {r: case.ancestors([r]) for r in case.roots}
    last = reached[case.roots[-1]]
    earlier = set().union(*(reached[r] for r in case.roots[:-1]))
    leaves = [l.name for l in case.grad_leaves()]
    missing = [n for n in leaves if got.get(n) is None and ref.get(n) is not None]
    if not missing or any(n in last or n not in earlier for n in missing):
        return None
    if not any(got.get(n) is not None for n in leaves if n in last):
        return None
    names = ", ".join(missing)
    return Cause("accumulation-overwrite", f"backward() of root {case.roots[-1]} cleared the .grad of {names}, which "
                 f"only earlier roots reach: each backward replaced .grad instead of adding to it",
                 evidence=f"the engine's .grad is None for {names} (reached by "
                 f"{', '.join(r for r in case.roots[:-1] if set(missing) & reached[r])}, not by the last root "
                 f"{case.roots[-1]}); the reference has {', '.join(f'{n} = {_fmt(ref[n])}' for n in missing)}")


# Other broadcasting ops the engine is probed with: a broadcast input of shape (3,) against (2, 3), a
# non-constant upstream gradient (a constant one cannot tell the first slice from the mean of the copies).
_BROADCAST_PROBES = ("add", "mul", "sub", "div")


def _engine_shared_broadcast(op: str, suspect: str, twin: str, run, found: Cause, mean: bool) -> Cause | None:
    """One engine-level cause for a broadcast input's gradient reduced wrongly (``found``, on a node of ``op``)
    when the engine makes the same mistake on another broadcasting op: the engine's shared code that sums a
    broadcast gradient back to the input's shape (an ``unbroadcast`` / ``sum_to`` helper) is wrong, one bug
    whichever op a case shows it on, not one per op.  ``run(case)`` checks a case with the finding's oracles;
    ``mean``: the mistake found is a mean (else the first slice)."""
    rng = np.random.default_rng(5)
    for other in _BROADCAST_PROBES:
        if other == op:
            continue
        a, b = rng.uniform(0.5, 1.5, 3), rng.uniform(0.5, 1.5, (2, 3))
        g = rng.uniform(0.5, 1.5, (2, 3)) * rng.choice([-1.0, 1.0], (2, 3))
        probe = Case.build({"a": a, "b": b}, [("p", other, ["a", "b"], {})], ["p"], seeds=[g])
        try:
            v = run(probe)
        except Exception:  # noqa: BLE001 - the engine does not take this op: try the next
            continue
        u, t = v.results.get(suspect), v.results.get(twin)
        if u is None or t is None or suspect in v.errors:
            continue
        leaves = [l for l in probe.grad_leaves() if u.get(l.name) is not None and t.get(l.name) is not None]
        try:
            J = _jac.jacobian(probe)
            pattern, factor, detail = classify(probe, probe.nodes[0], probe.spec(other), leaves, u, t, J, g)
        except Exception:  # noqa: BLE001
            continue
        if pattern != "broadcast-reduction" or (factor is not None) != mean:
            continue
        how = "keeps only the first slice" if factor is None else "is averaged over the broadcast axes"
        return Cause("shared-broadcast-reduction",
                     f"the engine's shared reduction of broadcast gradients is wrong: a broadcast input's gradient "
                     f"{how} where the sum over the broadcast axes belongs, on {op} and on {other} alike (every "
                     "broadcasting op shows it); fix the helper that sums a gradient back to an input's shape "
                     "(sum over the leading axes added and over the size-1 axes, never a mean or a slice)",
                     evidence=f"{found}; probe {other}(a (3,), b (2, 3)) with a non-constant upstream g: "
                              f"{detail}", pattern="broadcast-reduction", factor=found.factor if found.pattern == pattern else None,
                     fix="sum the gradient over the broadcast axes in the engine's shared unbroadcast helper")
    return None


# Ops whose VJP cannot produce a non-finite value from finite numbers (neg: -g; add: g, g; mul: g*y, g*x):
# probed at the failing node's inputs to tell the engine's shared code from one op's rule.
_FINITE_PROBES = ("neg", "add", "sub", "mul")


def _engine_shared_non_finite(op: str | None, leaves: dict, suspect: str, twin: str, run, found: str) -> Cause | None:
    """One engine-level cause for a node whose gradient the engine gives non-finite where J^T·g is finite
    (``found`` says so; ``op``: the node's op, None for a leaf root) when a one-node graph of another op, at the
    same input values, is non-finite too although its
    VJP cannot be (neg's is -g): the engine's shared backward code (the backward loop, accumulation, ``grad()``)
    is at fault, one bug whichever op a case shows it on, not one per op (tryout8 F6: 13 findings, each with a
    false per-op guess).  ``leaves``: the one-node case's leaf values; ``run(case)`` checks a case with the
    finding's oracles."""
    x = next((np.asarray(v, dtype=np.float64) for v in leaves.values() if np.size(v)), None)
    if x is None:
        return None
    rng = np.random.default_rng(6)
    g = rng.uniform(0.5, 1.5, x.shape) * rng.choice([-1.0, 1.0], x.shape)
    for other in _FINITE_PROBES:
        if other == op:
            continue
        ins = {"a": x} if other == "neg" else {"a": x, "b": rng.uniform(0.5, 1.5, x.shape)}
        probe = Case.build(ins, [("p", other, list(ins), {})], ["p"], seeds=[g])
        try:
            v = run(probe)
        except Exception:  # noqa: BLE001 - the engine does not take this op: try the next
            continue
        u, t = v.results.get(suspect), v.results.get(twin)
        if u is None or t is None or u.get("a") is None or t.get("a") is None:
            continue
        ua, ta = np.asarray(u["a"], dtype=np.float64), np.asarray(t["a"], dtype=np.float64)
        if ua.shape != ta.shape or not np.all(np.isfinite(ta)):
            continue
        if np.all(np.isfinite(ua)):
            return None  # another op is finite at these inputs: the node's own rule
        return Cause("shared-non-finite",
                     f"the engine's gradients are non-finite where J^T·g is finite on {op or 'a leaf root'} and also on "
                     f"{other}, "
                     f"whose VJP cannot overflow (its gradient needs no division or exp), at the same inputs: the "
                     "engine's shared backward code (the backward loop, the accumulation into .grad, grad()) makes "
                     "them, not one op's rule",
                     evidence=f"{found}; probe {other}(a{', b' if other != 'neg' else ''}) at a = {_fmt(x)}: "
                              f"engine {_fmt(ua)}, J^T·g {_fmt(ta)}",
                     fix="look for the non-finite step in the engine's shared backward code, not in an op's rule")
    return None


def _engine_shared_shape(op: str, suspect: str, run, found: Cause) -> Cause | None:
    """One engine-level cause for a broadcast input's gradient returned in a wrong shape (``found``, on a node of
    ``op``) when another broadcasting op does the same: a (1,) input broadcast against (2, 3) whose gradient is
    not (1,) there too (tryout8 F7: one unbroadcast helper, one finding per op before)."""
    rng = np.random.default_rng(5)
    for other in _BROADCAST_PROBES:
        if other == op:
            continue
        a, b = np.array([0.75]), rng.uniform(0.5, 1.5, (2, 3))
        probe = Case.build({"a": a, "b": b}, [("p", other, ["a", "b"], {})], ["p"], seeds=[rng.uniform(0.5, 1.5, (2, 3))])
        try:
            u = run(probe).results.get(suspect) or {}
        except Exception:  # noqa: BLE001 - the engine does not take this op: try the next
            continue
        got = None if u.get("a") is None else np.shape(u["a"])
        if got is None or got == (1,):
            continue
        return Cause("shared-broadcast-reduction",
                     f"the engine's shared reduction of broadcast gradients is wrong: a broadcast input's gradient "
                     f"comes back in a wrong shape on {op} and on {other} alike (every broadcasting op shows it); fix "
                     "the helper that sums a gradient back to an input's shape: over every broadcast axis, aligned "
                     "from the right (the leading axes added and the size-1 ones)",
                     evidence=f"{found.summary}; probe {other}(a (1,), b (2, 3)): a's gradient has shape {got}",
                     pattern="broadcast-reduction",
                     fix="sum the gradient over the broadcast axes, aligned from the right, in the engine's shared "
                         "unbroadcast helper")
    return None


def empty_broadcast(mini: Case, node, u: dict) -> bool:
    """An input broadcast over an axis of size 0 whose gradient the engine gives as NaN: the mean of no copies
    (0/0) where their sum, 0, belongs."""
    shapes = mini.shapes()
    out = shapes[node.name]
    for i in node.inputs:
        s = shapes[i]
        lead = len(out) - len(s)
        over = [a for a, n in enumerate(out) if n == 0 and (a < lead or s[a - lead] == 1)]
        g = u.get(i)
        if over and g is not None and np.size(g) and np.isnan(np.asarray(g, dtype=np.float64)).any():
            return True
    return False
