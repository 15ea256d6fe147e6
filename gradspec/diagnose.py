"""Localisation: which node's gradient rule is wrong, and how (CONTRACT §8, ``wrong-vjp``).

A value discrepancy says *which leaf element* is off; this module says *which node* and *what
kind of mistake*.  It evaluates the forward (every node's real input values), then walks the nodes
from the roots towards the leaves and checks each node on its own: a one-node case whose leaves
are the node's inputs (values from the forward) and whose seed is the upstream gradient that really
arrives there, run by the code under test (the user's vjp, a torch Function's backward, or a
black-box engine rebuilt on that one node) and by the node's independent twin (its JVP rule, or
finite differences), through :func:`gradspec.check.check` itself.  A node that passes hands the
upstream gradient on through its twin's VJP (so a VJP that raises does not hide the nodes below it).
The first node that disagrees is blamed: every node nearer the roots passed, so the upstream
gradient it received is right.  The error is then named (:mod:`gradspec._private.vjp_patterns`) by
testing a few hypotheses against the twin's local Jacobian ``J``: ``sign``, ``scale`` (with the
factor, named as a simple rational such as ``(n-1)/n`` when it is one), ``seed-ignored`` (the VJP
behaves as if ``g`` were ones, or its mean), ``broadcast-reduction`` (a broadcast input's gradient
taken from the first slice or averaged instead of summed), ``permuted`` (the right numbers in the
wrong places, e.g. ``g`` broadcast without the unsqueeze, or split at the wrong index), else
``other``; a pattern must also hold on fresh upstream gradients at the same inputs (a shrunk case
of one element fits any factor), and a factor at other inputs of the same shape (a missing term in the
formula gives a ratio that varies with the input).  Where some inputs' gradients are right, the wrong ones
are named.  A node whose JVP twin cannot run (a finite-difference JVP of a float32 forward) is compared
with finite differences, and a float32 node that is right at the same inputs in float64 is said to be
wrong only in float32.  Gradients of the wrong shape are named from the arrays the code
returned before any shape check, and so is a None returned for an input that needs a gradient.  A torch
Function's backward that modifies what forward saved (``ctx.saved_tensors``, tensors or numbers on ``ctx``)
is found by calling it at the node's inputs and comparing them before and after, then calling it again: it
is named as such, whether its first answer is wrong or only the next one (torch may refuse that one).

:func:`attach` is called by ``check()`` on every disagreement (registered below, so the
comparison layer does not import this one); it sets ``Discrepancy.cause``.  Its private parts: ``_diagnose_engine`` (whole-graph
hypotheses for an engine under test, tried before the walk), ``_diagnose_raw`` (what the code under test
returns at one node before any check), ``_diagnose_findings`` (findings outside ``check()``'s comparison)
and ``_diagnose_text`` (the wording they share).

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
import re

import numpy as np

from ._diagnose_engine import (
    _engine_cleared,
    _engine_implicit_refused,
    _engine_overwrite,
    _engine_seed_ignored,
    _engine_shared_broadcast,
    _engine_shared_non_finite,
    _engine_shared_shape,
    empty_broadcast,
)
from ._diagnose_findings import _raised_cause, drawing_backward_cause, explain_finding, in_place_read_again
from ._diagnose_points import factor_at_points, factors_per_slice, flat_forward_words, float32_only, nonfinite_words, not_linear_in_g, swapped_inputs
from ._diagnose_raw import (
    _forward_mutation_cause,
    _mutation_cause,
    _none_returned,
    _returned_dtype,
    _returned_shapes,
    _split_case,
    _stash_mutation_cause,
    graph_where_trap,
    masked_in_backward_words,
    partial_broadcast_words,
    unselected_branch_words,
)
from ._diagnose_text import ENGINES as _ENGINES
from ._diagnose_text import _clip, _cut_from_graph, _evidence, _fmt, _is_engine, _is_torch_function, _twin_label, _where, _whose
from ._private import case_budget as _case_budget
from ._private.iteration_words import CLAIM as _CLAIM
from ._private.skips import word_cut
from ._private.torch_where import FIX as _WHERE_FIX
from ._private.vjp_patterns import EXPLAINED, NO_WITNESS, TEXT_PATTERNS, by_output, classify, disagrees, explains, name_factor
from .case import Case, Leaf, NodeDef
from .causes import Cause
from .check import check as _run_check
from .check import register_explainer
from .oracles import jacobian as _jac
from .oracles.engine_oracle import EngineOracle
from .tolerances import accuracy_claim

__all__ = ["attach", "explain", "deferred", "localise", "diagnosis_timeouts", "classify", "name_factor", "explain_finding", "EXPLAINED"]

_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("gradspec_diagnosing", default=False)
_DEFERRED: contextvars.ContextVar = contextvars.ContextVar("gradspec_diagnosis_deferred", default=False)
_LOCALISED_KINDS = ("value", "nan-inf-pattern", "shape", "none-vs-zeros")
# verify_op / verify_torch_function contract findings that the node walk can name better than the message
# (which node, and what the gradients of the wrong shape are); explain_finding covers them otherwise
_WALKED_CONTRACT_KINDS = ("raised", "vjp-shape", "vjp-raised")


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
        if d.case is not None and v is not None and d.kind in _LOCALISED_KINDS + _WALKED_CONTRACT_KINDS and not _ACTIVE.get():
            token = _ACTIVE.set(True)
            oracles = getattr(v, "oracles", None) or {}
            etoken = _ENGINES.set(_engine_names(oracles))
            try:
                d.cause = _bounded_localise(d.case, d, oracles, v)
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
            if d.kind == "raised" and (verdict.errors.get(d.oracles[0]) or ("",))[0] == "CaseTimeout":
                continue  # a hang (gradspec.guard makes it a timeout finding, which needs no cause): re-running
                # the code to localise it would only meet the hang again (a forward that hangs: 30 s more a case)
            key = (tuple(_suspects(d.oracles)), d.kind == "raised")
            if key not in done:
                try:
                    done[key] = _bounded_localise(d.case, d, oracles, verdict)
                except Exception as e:  # noqa: BLE001 - a diagnosis must never hide the finding itself
                    done[key] = Cause("not-localised", f"the localisation itself failed ({type(e).__name__}: {e}); "
                                      "the finding stands, see its numbers", evidence=d.message)
            d.cause = done[key]
        verdict.discrepancies.extend(diagnosis_timeouts(verdict.discrepancies))
    finally:
        _ENGINES.reset(etoken)
        _ACTIVE.reset(token)


def _bounded_localise(case: Case, d, oracles: dict, verdict) -> Cause | None:
    """:func:`localise` under the diagnosis budget when a per-case timeout is in effect
    (``gradspec._private.case_budget``); cut, ``d.diagnosis_cut`` says so and :func:`diagnosis_timeouts`
    turns it into a ``timeout`` finding."""
    import signal

    from .guard import Alarm, CaseTimeout, _main_thread

    timeout = _case_budget.current()
    if timeout is None or not _main_thread():
        return localise(case, d, oracles, verdict)
    budget = _case_budget.diagnosis_budget(timeout)
    outer = signal.getitimer(signal.ITIMER_REAL)[0]  # inside a guarded check: never past its own bound
    budget = min(budget, max(outer - 0.5, 0.01)) if outer else budget
    alarm = Alarm(budget, f"the diagnosis exceeded {budget:g} s", rearm=0.05)
    cause = None
    try:
        with alarm:
            cause = localise(case, d, oracles, verdict)
    except CaseTimeout:
        if not alarm.fired:
            raise
    if not alarm.fired:
        return cause
    text = (f"the diagnosis was cut after {budget:.3g} s (per-case timeout {timeout:g} s): "
            f"the code under test ({_suspect(d.oracles, oracles)}), re-run on parts of this case (one node at a time, "
            "at other upstream gradients), did not return there -- a hang, reported as a timeout finding")
    d.diagnosis_cut = text
    if cause is not None:  # named from the re-runs that returned (the cut ones raised): said, not hidden
        cause.evidence = f"{cause.evidence}; {text}" if cause.evidence else text
        return cause
    return Cause("not-localised", text, evidence=d.message)


def diagnosis_timeouts(discrepancies) -> list:
    """A ``timeout`` finding for each discrepancy whose diagnosis was cut (the code under test hung when the
    diagnosis re-ran it), on the same case, with the code under test's side of the pair."""
    import dataclasses

    out = []
    for d in discrepancies:
        text = getattr(d, "diagnosis_cut", "")
        if text and not any(x.kind == "timeout" for x in out):
            t = dataclasses.replace(d, kind="timeout", oracles=(_suspects(d.oracles)[0], "case-timeout"), message=text,
                                    leaf=None, index=None, values=None, abs_err=None, rel_err=None, tolerance=None,
                                    tolerance_why=None, traceback=None, cause=None)
            out.append(t)
    return out


def _engine_names(oracles: dict) -> frozenset:
    return frozenset(n for n, o in oracles.items() if isinstance(o, EngineOracle))


def localise(case: Case, d, oracles: dict, verdict=None) -> Cause | None:
    """The cause of discrepancy ``d`` on ``case``: the first node whose rule is wrong, or why there is none
    (None for a ``verify_*`` contract finding, e.g. ``vjp-shape``, that no node explains on its own)."""
    try:  # (the accuracy the code claims on this case: the iteration words say the error's ratio to it)
        claim = accuracy_claim(case.meta)
    except ValueError:
        claim = None
    token = _CLAIM.set(claim)
    try:
        return _localise(case, d, oracles, verdict)
    finally:
        _CLAIM.reset(token)


def _localise(case: Case, d, oracles: dict, verdict=None) -> Cause | None:
    suspect = _suspect(d.oracles, oracles)
    suspects = _suspects(d.oracles)
    if _is_engine(suspect) and verdict is not None and d.kind != "raised":
        c = (_engine_seed_ignored(case, suspect, verdict) or _engine_overwrite(case, suspect, verdict)
             or _engine_cleared(case, suspect, verdict))
        if c is not None:
            return c
    if d.kind == "none-vs-zeros":
        return _none_vs_zeros(d)
    if d.kind == "raised" and _is_engine(suspect):
        c = _engine_implicit_refused(case, suspect, oracles)
        if c is not None:
            return c
    try:
        values = case.evaluate()
    except Exception as e:  # noqa: BLE001
        return Cause("not-localised", f"the forward cannot run on this case ({type(e).__name__}: {e}), so the "
                     "inputs of each node are unknown", evidence=d.message)
    # Walk from the roots towards the leaves.  The upstream gradient of each node is pushed on by the twin
    # of the nodes it feeds (their JVP rule, or finite differences), never by the code under test: a VJP
    # that raises or returns the wrong shape does not hide the nodes below it.
    adj = _root_seeds(case, values)
    leaf_names = {l.name for l in case.leaves}
    for node in reversed(case.nodes):
        g = adj.get(node.name)
        if g is None:
            continue
        mini = _one_node_case(case, node, values, g)
        if mini is None:
            continue
        c, local = _check_node(case, mini, node, suspects, oracles, raised_only=d.kind in _WALKED_CONTRACT_KINDS,
                               fd_witness="finite-differences" in d.oracles)
        if c is not None:
            return c
        for i in set(node.inputs):
            if i not in leaf_names and (local or {}).get(i) is not None:
                adj[i] = np.asarray(local[i], dtype=np.float64) + adj.get(i, 0.0)
    if d.kind not in _LOCALISED_KINDS + ("raised",):
        return None
    # No node is wrong on its own: a backward that modifies what it saved is right once and wrong (or refused
    # by torch) the next time the graph is backpropagated
    c = _mutation_cause(case, values) or _forward_mutation_cause(case, values)
    if c is not None:
        return c
    if d.kind == "nan-inf-pattern" and _is_engine(suspect) and verdict is not None and suspect in oracles:
        # (no node is wrong on its own, e.g. a leaf root: the same probe as a node's, on the leaves the engine failed on)
        u = verdict.results.get(suspect) or {}
        bad = {l.name: l.value for l in case.leaves if u.get(l.name) is not None
               and not np.all(np.isfinite(np.asarray(u[l.name], dtype=np.float64)))}
        c = _engine_shared_non_finite(None, bad, suspect, "reference", lambda m: _run_check(
            m, oracles=[oracles[suspect], "reference"]), d.message) if bad else None
        if c is not None:
            return c
    if d.kind == "nan-inf-pattern" and (c := graph_where_trap(case, values)) is not None:
        return c  # no node wrong on its own: the NaN of a branch a where does not select, through the graph
    if d.kind == "raised":
        c = _raised_cause(case, d)
        # no node raises on its own: the graph raises only when a Function is called several times (state)
        return c if c.id != "not-localised" else _unlocalised(case, d, suspect, c, verdict)
    return _unlocalised(case, d, suspect, verdict=verdict)


def _root_seeds(case: Case, values: dict) -> dict:
    adj: dict = {}
    for r, s in zip(case.roots, case.seeds):
        v = values[r]
        if np.asarray(v).dtype.kind != "f":
            continue
        g = np.ones(np.shape(v)) if s is None else np.asarray(s, dtype=np.float64).reshape(np.shape(v))
        adj[r] = g + adj.get(r, 0.0)
    return adj


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
# one node on its own: its inputs as leaves, its upstream gradient as the seed
# =============================================================================================


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


def _check_node(case: Case, mini: Case, node: NodeDef, suspects: list, oracles: dict,
                raised_only: bool = False, fd_witness: bool = False) -> tuple[Cause | None, dict]:
    """Run ``node`` alone through the suspects and its twins: (the cause if one of the suspects is wrong
    here, else None; the node's VJP by its twin, per input, which carries the upstream gradient on).
    ``raised_only``: the finding is a raise, so only a node where the suspect raises is its cause (a wrong
    value elsewhere in the graph is another finding's).  ``fd_witness``: finite differences are a side of the
    finding (they are then asked where the jacobian twin agrees with the code)."""
    spec = case.spec(node.op)
    code = [s for s in suspects if s != "jacobian"] or ["reference"]
    names = [oracles.get(s) or s for s in code] + ["jacobian"]
    v = _run_check(mini, oracles=names)
    fd_only = False
    if not v.discrepancies and not v.errors and "jacobian" in v.results:
        # A user op without a jvp: its jacobian twin is a finite-difference JVP of its forward with a looser
        # bound than the finite-differences oracle's (near a jump of floor it "agrees" with the rule and with 0
        # alike).  Where finite differences found the finding, they are asked here too, and decide.
        if not (fd_witness and spec.user and getattr(spec, "jvp_source", "declared") != "declared"):
            return None, _carried(v, code)
        names = names + ["finite-differences"]
        v = _run_check(mini, oracles=names)
        if not v.discrepancies and not v.errors:
            return None, _carried(v, code)
        fd_only = True
    # A declared surrogate (verify_torch_function(surrogate=)) is the jacobian twin on purpose: finite differences
    # of fn's forward measure the derivative the backward does not mean to compute, so they never decide here
    no_fd = bool(getattr(spec, "surrogate", None))
    if "finite-differences" not in names and not no_fd and (
            "jacobian" not in v.results or (spec.user and spec.jvp_source == "declared") or "jacobian" in suspects
            or any(s.startswith("torch") for s in suspects)):
        # The twin is the user's own jvp, or the suspect is a torch twin, or the twin could not run here (a
        # finite-difference JVP of a float32 forward compares nothing): finite differences decide which side is wrong.
        names = names + ["finite-differences"]
        v = _run_check(mini, oracles=names)

    def run(m):
        w = _run_check(m, oracles=names)
        if "jacobian" not in w.results and "finite-differences" not in names and not no_fd:  # (another point: above)
            w = _run_check(m, oracles=names + ["finite-differences"])
        return w

    for s in code:
        if s in v.errors:
            return _raised_at(mini, node, spec, s, v.errors[s]), {}
    if raised_only:
        # the code returns a gradient of the wrong shape here: passed on, it makes a later backward raise (review
        # F7: a raise downstream of an engine's unbroadcast bug was 'not-localised', a report apart from the shape's)
        shaped = next((x for x in v.discrepancies if x.kind == "shape" and set(x.oracles) & set(code)), None)
        if shaped is not None:
            s = next(o for o in shaped.oracles if o in code)
            twin = next((t for t in ("jacobian", "finite-differences") if t in v.results), None)
            return _node_cause(mini, node, spec, s, v, twin, shaped, run), {}
        return None, _carried(v, code)

    def apart(a, b):
        return [x for x in v.discrepancies if set(x.oracles) == {a, b}]

    has_fd = "finite-differences" in v.results
    jac_ok = "jacobian" in v.results and not (has_fd and apart("jacobian", "finite-differences")) and not fd_only
    if jac_ok and has_fd and not all(any(set(c.oracles) == {s, "jacobian"} for c in v.comparisons) for s in code
                                     if s in v.results):
        # a finite-difference JVP too shaky to witness against the code here (its pair a note: a ramp about as
        # wide as its step) decides nothing; finite differences, which resolved the point, are the twin
        jac_ok = False
    twin = "jacobian" if jac_ok else "finite-differences" if has_fd else None
    if twin is None:  # no full twin gradient (above the jacobian's dense limit): random directions may decide
        c = _directional_cause(mini, node, spec, code, v)
        return (c, {}) if c is not None else (None, _carried(v, code))
    bad = {s: apart(s, twin) for s in code if s in v.results}
    if "jacobian" in v.results and not jac_ok and "reference" in v.results and not apart("reference", twin):
        return _wrong_jvp(mini, node, spec, v.results["jacobian"], v.results[twin]), {}
    if "reference" in bad and bad["reference"]:
        return _node_cause(mini, node, spec, "reference", v, twin, bad["reference"][0], run), {}
    for s, found in bad.items():
        if not found:
            continue
        if s.startswith("torch") and not _is_torch_function(spec):
            return _twin_mismatch(mini, node, spec, s, v.results.get(s), v.results.get(twin)), {}
        return _node_cause(mini, node, spec, s, v, twin, found[0], run), {}
    return None, v.results.get(twin) or {}


def _directional_cause(mini, node, spec, code, v) -> Cause | None:
    """The node alone disagrees with finite differences of its own forward along random directions (a case
    above the jacobian's dense limit, where finite differences compare <u, grad> only): the node is wrong on
    its own, but no full twin gradient exists to name a pattern (tryout6 #6: at 300 x 300 this read "agrees
    with its twin" and the finding was "not-localised")."""
    for d in v.discrepancies:
        others = set(d.oracles) - {"finite-differences"}
        if d.kind != "value" or d.leaf is not None or "finite-differences" not in d.oracles or not others <= set(code):
            continue
        suspect = next(iter(others))
        why = v.skipped.get("jacobian", "")
        return Cause("wrong-vjp", f"{_where(node, spec)}: {_whose(spec, suspect)} disagrees with finite differences "
                     f"of the node's own forward along random directions, at its real inputs and upstream gradient "
                     f"({mini.n_inputs:,} input elements: no full twin gradient{f' -- {_clip(why, 120)}' if why else ''}"
                     "), so the node is wrong on its own; which elements and what pattern, a smaller case shows "
                     "(the same code at a few elements per axis)", node=node.name, op=node.op, evidence=d.message,
                     pattern="other")
    return None


def _carried(v, code) -> dict:
    """The VJP that pushes the upstream gradient on from a node that passed: its twin's, else the code's."""
    for name in ("jacobian", "finite-differences", *code):
        if v.results.get(name) is not None:
            return v.results[name]
    return {}



def _node_cause(mini, node, spec, suspect, v, twin, first, run=None) -> Cause:
    if _is_engine(suspect) and len(set(node.inputs)) < len(node.inputs):
        c = _repeated_dropped(mini, node, spec, suspect, v.results[suspect])
        if c is not None:
            return c
    c = _returned_shapes(mini, node, spec, suspect, hidden=True) or _none_returned(
        mini, node, spec, suspect, v.results.get(suspect) or {}, v.results.get(twin) or {}) or _returned_dtype(
        mini, node, spec, suspect)
    if c is not None:
        return c
    if first.kind == "shape":
        c = _shape_cause(mini, node, spec, suspect, first)
        shared = _is_engine(suspect) and c.pattern == "broadcast-reduction" and run is not None and \
            _engine_shared_shape(node.op, suspect, run, c)
        return shared or c
    u, t = _off_kinks(v, twin, v.results[suspect], v.results[twin])
    c = _wrong_vjp(mini, node, spec, suspect, u, t, first, twin, run)
    empty = first.kind == "nan-inf-pattern" and _is_engine(suspect) and empty_broadcast(mini, node, v.results[suspect])
    if _is_engine(suspect) and (c.pattern == "broadcast-reduction" or empty) and run is not None:
        shared = _engine_shared_broadcast(node.op, suspect, twin, run, c, mean=empty or c.factor is not None)
        if shared is not None:  # the same mistake on another op: the engine's shared helper, one finding
            return shared
    if _is_engine(suspect) and first.kind == "nan-inf-pattern" and run is not None and twin is not None:
        u = v.results.get(suspect) or {}
        bad = [l.name for l in mini.leaves if u.get(l.name) is not None and not np.all(np.isfinite(
            np.asarray(u[l.name], dtype=np.float64)))]  # the probe takes the inputs the engine failed on
        shared = _engine_shared_non_finite(node.op, {l.name: l.value for l in mini.leaves if l.name in bad}, suspect,
                                           twin, run, c.summary)
        if shared is not None:  # another op non-finite at the same inputs: the engine's shared code, one finding
            return shared
    if _is_torch_function(spec):  # computing from a saved tensor it modified in place: that is the cause
        m = _mutation_cause(mini, wrong=c.summary.split(" is wrong — ", 1)[-1])
        if m is not None:
            return Cause(c.id, m.summary, node=c.node, op=c.op, evidence=f"{c.evidence}; {m.evidence}",
                         pattern=c.named_pattern, factor=c.factor, fix=m.fix)
        return _stash_mutation_cause(mini, c, v.results.get(twin)) or c  # (or what its forward modified after stashing it: tryout10 F6)
    return c


def _off_kinks(v, twin, u: dict, t: dict) -> tuple[dict, dict]:
    """``u`` and ``t`` with 0 on both sides at the elements finite differences (the twin) left out at a kink
    (``Verdict.unjudged_elements``: their error bound is infinite): a pattern is fitted on the compared elements
    only, never on a convention at a kink against an average of two slopes (0 = c x 0 fits every factor)."""
    err = v.fd_error if twin == "finite-differences" and v.unjudged_elements.get(twin) else None
    if not isinstance(err, dict):
        return u, t
    u, t = dict(u), dict(t)
    for leaf, e in err.items():
        out = np.isposinf(np.asarray(e))
        if out.any() and u.get(leaf) is not None and t.get(leaf) is not None and np.shape(u[leaf]) == out.shape:
            u[leaf] = np.where(out, 0.0, np.asarray(u[leaf], dtype=np.float64))
            t[leaf] = np.where(out, 0.0, np.asarray(t[leaf], dtype=np.float64))
    return u, t


def _wrong_vjp(mini: Case, node: NodeDef, spec, suspect: str, u: dict, t: dict, first, twin=None, run=None) -> Cause:
    g = np.asarray(mini.seeds[0], dtype=np.float64)
    leaves = [l for l in mini.grad_leaves() if u.get(l.name) is not None and t.get(l.name) is not None]
    try:
        J = _jac.jacobian(mini)
    except Exception:  # noqa: BLE001 - patterns that need J are then not tried
        J = None
    pattern, factor, detail = classify(mini, node, spec, leaves, u, t, J, g)
    no_witness = detail.startswith(NO_WITNESS)  # only J^T·g's estimate is not finite, the rest agrees (tryout11 #12)
    where = _where(node, spec)
    code = _whose(spec, suspect)
    flat = first.kind != "nan-inf-pattern" and flat_forward_words(leaves, u, t, g, J)
    if flat and _is_torch_function(spec):  # (a torch function can declare it: tryout6 #7)
        flat = flat.replace("verify the code around it instead", "declare the intended gradient with "
                            "verify_torch_function(..., surrogate=...) (e.g. lambda x: x.clamp(-1, 1) for a clipped "
                            "straight-through estimator)")
    fix = ""
    if first.kind == "nan-inf-pattern" and (trap := unselected_branch_words(mini, node, spec)):
        # a select's unselected branch is non-finite (evidence from running fn, not its name): no division there
        pattern, factor, fix = "unselected-branch", None, _WHERE_FIX
        detail = f"it returns non-finite values ({_fmt(first.values)}) where J^T·g is finite: {trap}"
    elif first.kind == "nan-inf-pattern":
        pattern, factor = "other", None
        why = nonfinite_words(mini, u, None if run is None else lambda c: run(c).results.get(suspect))
        detail = f"it returns non-finite values ({_fmt(first.values)}) where J^T·g is finite ({why}" + (
            ")" if why.startswith("at |") else "")
    elif flat and pattern in ("other", "scale", *TEXT_PATTERNS):  # (a factor fitted to J^T·g = 0 + rounding is noise: tryout6 #7's 3e11)
        pattern, factor, detail = "other", None, flat
    elif pattern != "permuted" and run is not None and twin is not None and (
            swap := swapped_inputs(mini, node, suspect, twin, run)):
        pattern, factor, detail = "permuted", None, swap
    elif pattern == "other" and "no simple pattern" in detail and run is not None and twin is not None and (
            per := factors_per_slice(mini, node, spec, suspect, twin, run, u, t)):
        detail = detail[:detail.index("it differs from J^T·g on")] + per
    elif pattern not in ("other", *TEXT_PATTERNS) and run is not None and twin is not None:
        pattern, factor, detail = _confirmed(mini, node, spec, suspect, twin, run, J, (pattern, factor, detail))
        if pattern == "scale" and abs(factor - 1) >= 1e-3:  # (a factor near 1 has its own words)
            pattern, factor, detail = factor_at_points(mini, node, spec, suspect, twin, run, u, t,
                                                         (pattern, factor, detail))
    if first.kind != "nan-inf-pattern":  # a finite wrong value a mask in the backward made
        detail += masked_in_backward_words(mini, node, spec)
    if run is not None and twin is not None:
        detail = float32_only(mini, suspect, twin, run) + detail
    part = None if run is None or twin is None else by_output(mini, node, spec, lambda g2: _recheck(mini, g2, run),
                                                              suspect, twin, J)
    if part:
        pattern, factor, detail = part[1] or (pattern, factor, detail)
        detail = f"{part[0]}: {detail}"
    verb = "cannot be judged at this case" if no_witness and NO_WITNESS in detail else "is wrong"
    summary = (not leaves and _cut_from_graph(mini, node, spec, u, t)) or f"{where}: {code} {verb} — {detail}"
    if getattr(spec, "surrogate", None) and twin == "jacobian":
        summary += f" (J^T·g here: the gradient of the surrogate {spec.surrogate}, not of fn's forward)"
    elif getattr(spec, "grad_cuts", None) and getattr(spec, "fn_has_backward", True) is False and not flat:
        summary += "; if that gradient is intended, declare it with verify_torch_function(..., surrogate=...)"
    return Cause("wrong-vjp", summary, node=node.name, op=node.op,
                 evidence=_evidence(mini, leaves, u, t, g, suspect, _twin_label(spec, twin)), pattern=pattern, factor=factor,
                 fix=fix)


# Fresh upstream gradients a pattern must also hold for (a shrunk case often has one or two elements,
# where "a factor times J^T·g" or "a constant seed" fits any number, and g = -1 makes "ignores g" look
# like "wrong sign").  Two draws: a coincidence on both is negligible, and each costs one one-node check.
_FRESH_SEEDS = 2


def _confirmed(mini, node, spec, suspect, twin, run, J, found) -> tuple:
    """``found`` = (pattern, factor, detail) on the case's own upstream gradient, kept only if the same
    pattern (and factor) names the error on fresh upstream gradients at the same inputs."""
    pattern, factor, detail = found
    rng = np.random.default_rng(8)
    out = np.shape(mini.seeds[0])
    fresh = []
    for _ in range(_FRESH_SEEDS):
        g2 = (rng.uniform(0.5, 1.5, out) * rng.choice([-1.0, 1.0], out)).astype(np.asarray(mini.seeds[0]).dtype)
        v2 = _recheck(mini, g2, run)
        if v2 is None:  # no second opinion; the first one stands
            continue
        m2 = v2.case
        u2, t2 = v2.results.get(suspect), v2.results.get(twin)
        if u2 is None or t2 is None or not disagrees(v2, suspect, twin):
            continue  # right on this g: it says nothing about the pattern
        u2, t2 = _off_kinks(v2, twin, u2, t2)
        leaves = [l for l in m2.grad_leaves() if u2.get(l.name) is not None and t2.get(l.name) is not None]
        fresh.append(classify(m2, node, spec, leaves, u2, t2, J, np.asarray(g2, dtype=np.float64)))

    def same(a, b):
        # a broadcast input's gradient: its first slice (factor None) and its mean (1/n) are one pattern, two
        # mistakes, which a constant g (a seed of ones) cannot tell apart
        return a[0] == b[0] and (a[0] not in ("scale", "broadcast-reduction") or a[1] == b[1] or (
            a[1] is not None and b[1] is not None and abs(a[1] - b[1]) <= 1e-6 * abs(b[1])))

    if all(same(f, found) for f in fresh):
        return found
    if len(fresh) == _FRESH_SEEDS and fresh[0][0] not in ("other", *TEXT_PATTERNS) and all(same(f, fresh[0]) for f in fresh):
        p2, f2, d2 = fresh[0]
        if p2 == pattern == "broadcast-reduction":
            return p2, f2, (f"{d2} (seen on fresh upstream gradients at the same inputs: this case's own g is "
                            "constant, where the first slice and the mean of the copies are the same numbers)")
        return p2, f2, (f"{d2} (seen on fresh upstream gradients at the same inputs: this case's own g fits "
                        f"'{pattern}' as well and cannot tell them apart)")
    nonlinear = not_linear_in_g(mini, suspect, lambda g2: _recheck(mini, g2, run))
    if nonlinear:
        return "other", None, nonlinear
    seen = sorted({f[0] for f in fresh})
    if seen == [pattern] == ["scale"]:  # the same pattern with another factor each time: say that, not "no pattern"
        factors = ", ".join(f"{f[1]:.6g}" for f in fresh if f[1] is not None)
        return "other", None, (f"it is off by a factor that changes with the upstream gradient: {factor:.6g} on this "
                               f"case's, {factors} on fresh ones at the same inputs")
    return "other", None, (f"it differs from J^T·g with no single pattern: on this case's upstream gradient it looks "
                           f"like '{pattern}', on fresh upstream gradients at the same inputs like "
                           f"{' / '.join(repr(p) for p in seen)}")


def _recheck(mini, g2, run):
    """The verdict of ``mini`` under another upstream gradient, or None where that check fails."""
    m2 = Case(mini.leaves, mini.nodes, mini.roots, [g2], engine=mini.engine, user_ops=dict(mini.user_ops))
    try:
        return run(m2)
    except Exception:  # noqa: BLE001
        return None


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
    shapes = [tuple(int(x) for x in m.split(",") if x.strip()) for m in re.findall(r"\(([\d, ]*)\)", msg)]
    got = next((sh for sh in shapes if leaf is not None and sh != leaf.shape), None)
    partial = got is not None and partial_broadcast_words(got, leaf.shape, tuple(out), leaf.name)
    if partial:
        return Cause("wrong-vjp", f"{_where(node, spec)}: {_whose(spec, suspect)} {partial}", node=node.name,
                     op=node.op, evidence=msg, pattern="broadcast-reduction")
    return Cause("wrong-vjp", f"{_where(node, spec)}: {_whose(spec, suspect)} returns a gradient of the wrong shape "
                 f"({msg})", node=node.name, op=node.op, evidence=msg, pattern="other")



def _repeated_dropped(mini, node, spec, suspect, u) -> Cause | None:
    """op(x, x) whose gradient is what some of the uses of x give, not all: one use of the repeated input lost."""
    try:
        per_use = _jac.jacobian(_split_case(mini, node)).vjp
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
                if explains(got, sum(sub).ravel(), full):
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


def _raised_at(mini, node, spec, suspect, err) -> Cause:
    c = _returned_shapes(mini, node, spec, suspect)
    if c is not None:
        return c
    tname, msg, _ = err
    inner = re.search(r"(?:vjp|backward) raised (\w+): (.*)", msg or "")
    said = ""
    if tname.startswith("VJP") and inner:  # gradspec's wrapper: name the code's own exception and its words
        tname, said = inner.group(1), f" ({_clip(inner.group(2), 80)})"
    return Cause("wrong-vjp", f"{_where(node, spec)}: {_whose(spec, suspect)} raised {tname}{said} on its own, at the "
                 "node's real inputs and upstream gradient", node=node.name, op=node.op, evidence=word_cut(msg, 400),
                 pattern="other")


def _runs_own_backward(spec) -> bool:
    """A torch Function (or custom op) whose backward is the user's code, run by the torch oracle."""
    return _is_torch_function(spec) and getattr(spec, "fn_has_backward", True) is not False


def _other_side_odd(d, verdict) -> bool:
    """Whether the non-torch side of ``d`` also disagrees, at the same leaf, with an oracle that is not torch."""
    if verdict is None:
        return False
    other = [o for o in d.oracles if not o.startswith("torch")]
    return any(x is not d and x.leaf == d.leaf and set(other) & set(x.oracles)
               and not any(o.startswith("torch") for o in x.oracles) for x in verdict.discrepancies)


def _unlocalised(case, d, suspect, fallback: Cause | None = None, verdict=None) -> Cause:
    drew = drawing_backward_cause(case, d)  # no node wrong on its own, twice alike: a backward drawing its own mask
    if drew is not None:
        return drew
    reread = in_place_read_again(case, d)  # two programs, not state between calls (tryout10 F4)
    if reread is not None:
        return reread
    calls = {}
    for n in case.nodes:
        calls[n.op] = calls.get(n.op, 0) + 1
    # "state between calls" needs the torch side to run the user's own backward (a torch Function: a gs.Op's
    # torch= twin runs torch's autograd, never the op's vjp) and to be the odd one out: where the other side
    # disagrees with a third oracle too (finite differences off a ramp it cannot resolve, against the reference
    # and torch alike: tryout6 #3), that side is the suspect, not the repeated calls.
    repeated = [op for op, k in calls.items() if k > 1 and _runs_own_backward(case.spec(op))]
    if any(s.startswith("torch") for s in d.oracles) and repeated and not _other_side_odd(d, verdict):
        op = repeated[0]
        first = next(n for n in case.nodes if n.op == op)
        return Cause("wrong-vjp", f"{_where(first, case.spec(op))}: {_whose(case.spec(op), 'torch-cpu')} is right "
                     f"when called alone, wrong when called "
                     f"{calls[op]} times in one graph: the code keeps state between calls (class attributes, "
                     "globals) where it should keep it on ctx", node=first.name, op=op, evidence=d.message,
                     pattern="other")
    if fallback is not None:
        return fallback
    if len(case.nodes) == 1:  # nothing to combine: "how the graph combines them" would contradict the finding
        n = case.nodes[0]
        return Cause("not-localised", f"{_where(n, case.spec(n.op))}: its gradient rule agrees with its twin (J^T·g of "
                     f"its forward) on its own, at its real inputs and upstream gradient, yet {d.oracles[0]} and "
                     f"{d.oracles[1]} disagree on this one-node case: one of them carries its own error at this point "
                     "(a torch twin that computes the gradient another way, precision lost to cancellation in a "
                     "formula), not the graph", node=n.name, op=n.op, evidence=d.message)
    return Cause("not-localised", f"every node's gradient rule agrees with its twin on its own, at its real inputs "
                 f"and upstream gradient; the disagreement between {d.oracles[0]} and {d.oracles[1]} comes from how "
                 "the graph combines them (accumulation over the uses of a tensor, state shared between calls) or "
                 "from an oracle's own error", evidence=d.message)


# The comparison layer calls the explainers registered with it on every disagreement (it does not
# import this module: the localisation runs check() itself, so check() cannot import it).
register_explainer(attach)
