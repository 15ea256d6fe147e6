"""``gs.check(case)``: run every applicable oracle on a case and compare every pair.

Example::

    >>> import numpy as np, gradspec as gs
    >>> case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.array([1.0, -1.0])])
    >>> v = gs.check(case, oracles=["reference", "jacobian", "finite-differences"])
    >>> v.ok, len(v.comparisons)
    (True, 3)
    >>> gs.check(case, oracles=["reference", "jacobian"], timeout=10.0).ok  # each oracle's call cut after 10 s
    True
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import time
import traceback

import numpy as np

from . import _check_lazy as _lazy
from . import engine as _engine
from . import oracles as _oracles
from . import outcome as _outcome
from . import tolerances as _tol
from ._check_claim import claim_scale_why as _claim_scale_why
from ._check_claim import directional_allowance as _directional_claim
from ._check_noise import Unmeasured, rounding_noise  # (measured on a failing comparison; report_views imports it from here)
from ._check_nonfinite import agreed_nonfinite as _agreed_nonfinite
from ._check_precision import case_dtype as _case_dtype  # noqa: F401 - (tests read it here)
from ._check_precision import leaf_precisions as _leaf_precisions
from ._check_precision import mixed_dtypes as _mixed_dtypes
from ._check_precision import refuse_unpromoted, unpromoted  # noqa: F401 - (the CLI and tests import them from here)
from ._check_rules import (
    _compared_with_itself,
    _discount_amplified_rounding,
    _discount_edge_of_precision,
    _discount_mismatched_twins,
    _discount_numerical_kinks,
    _discount_other_precision,
    _discount_shaky_agreement,
    _discount_shaky_estimates,
    _discount_unsized_claim,
    _drop_estimates,
    _ix,
    _kinked_notes,
)
from ._private import activity as _activity
from ._private import determinism as _determinism
from ._private import float32_line as _f32line
from ._private import percase as _percase
from ._private import structure as _structure
from ._private.kinks import EXCLUDED as _EXCLUDED
from ._private.kinks import OTHERS_UNJUDGED as _OTHERS
from ._private.pairs import _allowed, _fast_pairs, _pair_claim, _path_scale, _per_leaf
from ._private.threads import oracle_threads
from .case import Case
from .causes import Cause, crash_type
from .oracles import _plan
from .oracles.reference import ReferenceOracle as _ReferenceOracle

__all__ = ["check", "Verdict", "Discrepancy", "Comparison", "register_explainer", "register_guard", "finding_lines"]

# Called with (verdict, {oracle name: oracle}) on every disagreement, to set Discrepancy.cause:
# gradspec.diagnose (same layer; it runs check() itself on one-node cases, so check() cannot import it)
# registers itself when the package is imported.
_EXPLAINERS: list = []


# ``check(case, timeout=S)``: gradspec.guard.guarded_check (same layer; it calls check(), so check() cannot import
# it) registers itself when the package is imported.
_GUARDED: list = []


def register_guard(fn) -> None:
    """Have ``check(case, oracles, timeout=S)`` run as ``fn(case, oracles, S)`` (``gradspec.guard.guarded_check``)."""
    _GUARDED[:] = [fn]


def register_explainer(fn) -> None:
    """Have ``fn(verdict, oracles)`` explain every disagreement ``check()`` finds (sets ``Discrepancy.cause``)."""
    if fn not in _EXPLAINERS:
        _EXPLAINERS.append(fn)


@dataclasses.dataclass
class Discrepancy:
    """One disagreement between two oracles (or an oracle that failed) on one case."""

    kind: str  # value | shape | dtype | none-vs-zeros | nan-inf-pattern | raised
    oracles: tuple[str, str]
    message: str
    case: Case | None = None
    leaf: str | None = None
    index: tuple | None = None
    values: tuple | None = None  # (value from oracles[0], value from oracles[1]) at index
    abs_err: float | None = None
    rel_err: float | None = None
    tolerance: float | None = None
    tolerance_why: str | None = None
    traceback: str | None = None
    cause: Cause | None = None  # CONTRACT §8: what is wrong and where (set by the diagnosis)
    culprit: str | None = None  # op of the smallest failing node, once localised (gradspec.findings)

    @property
    def signature(self) -> tuple:
        """What deduplicates findings (gradspec/findings.py): ``(cause id, (pattern,), (op,))`` when
        the diagnosis named a cause, else ``(kind, oracle pair, ops)`` with ops the culprit op once
        localised, the case's op set before."""
        c = self.cause
        # (a crash keeps its case's ops: two processes dying on two ops are two findings, with the ids they had)
        if c is not None and c.id not in ("twin-mismatch", "process-died"):
            # An engine-level cause names no op: the failing side (one-sided kinds) and the culprit
            # op tell two such findings apart (an oracle raising is not the engine raising).
            who = self.oracles[0] if self.kind in ("raised", "timeout", "crash", "check-error") else ""
            # An engine-level cause (seed ignored, stale gradients...) is one bug whichever op the
            # case it showed on had: the culprit op does not split it (one bug, one report).
            where = (c.op,) if c.op else ((self.culprit,) if self.culprit and not c.is_engine_level else ())
            # A wrong VJP is one bug per op whatever pattern each case shows (a factor that depends on
            # the input reads as 'scale' on a one-element case and 'other' on a larger one).
            # An engine crash naming an op is one bug per op and exception type (never its message: values).
            typed = (crash_type(c),) if crash_type(c) else ()
            return (c.id, ("" if c.id == "wrong-vjp" else c.pattern or who,) + typed, where)
        if self.culprit is not None:
            ops = (self.culprit,)
        else:
            ops = tuple(sorted({n.op for n in self.case.nodes})) if self.case is not None else ()
        return (self.kind, tuple(sorted(self.oracles)), ops)

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "oracles": list(self.oracles),
            "message": self.message,
            "leaf": self.leaf,
            "index": None if self.index is None else list(self.index),
            "values": None if self.values is None else [_num(v) for v in self.values],
            "abs_err": _num(self.abs_err),
            "rel_err": _num(self.rel_err),
            "tolerance": _num(self.tolerance),
            "tolerance_why": self.tolerance_why,
            "traceback": self.traceback,
            "cause": None if self.cause is None else self.cause.to_json(),
            "culprit": self.culprit,
        }


def _num(v):
    if v is None:
        return None
    v = float(v)
    return v if np.isfinite(v) else repr(v)


@dataclasses.dataclass
class Comparison:
    oracles: tuple[str, str]
    agreed: bool
    max_ratio: float  # max over elements of |a - b| / tolerance (<= 1 means agreement)


_LazyComparison = _lazy.lazy_comparison(Comparison)  # (its max_ratio computed when first read: _check_lazy)


@dataclasses.dataclass
class Verdict:
    """The outcome of ``gs.check`` on one case: ``status`` is ``agree`` / ``disagree`` / ``inconclusive``.

    ``errors`` holds every oracle that raised; each is either a ``raised`` discrepancy or ``excused``
    (name -> why: torch and the code under test both refused the case, the forward raised, a
    finite-difference estimate could not be formed).  ``notes`` are observations that decided
    nothing against the code (``twin-mismatch`` causes, torch's None taken as zeros...).
    """

    case: Case
    results: dict  # oracle name -> {leaf: ndarray | None}
    comparisons: list[Comparison]
    discrepancies: list[Discrepancy]
    skipped: dict  # oracle name -> reason
    errors: dict  # oracle name -> (exception type name, message, traceback)
    jacobian: object | None = None
    fd_error: dict | None = None
    notes: list = dataclasses.field(default_factory=list)  # str or Cause (e.g. twin-mismatch)
    excused: dict = dataclasses.field(default_factory=dict)  # oracle name -> why its raise is no discrepancy
    oracles: dict = dataclasses.field(default_factory=dict, repr=False)  # name -> the Oracle used (for diagnosis)
    unjudged: str = ""  # why nothing on this case is compared although oracles ran (a kink found numerically)
    # Why the case sits at a point where the function is not differentiable ("" if it does not):
    # estimate-based comparisons (finite differences, finite-difference JVPs) were dropped.
    nondifferentiable: str = ""
    accuracy: tuple | None = None  # (rtol, atol) claimed by the code under test (case.meta["accuracy"])
    # Why a user op is not a function of its inputs here ("" if it is): two calls on the same inputs gave
    # different outputs (_private.determinism); no oracle was asked, the verdict is inconclusive with this reason.
    not_a_function: str = ""
    # estimate name -> {input element ("x[0]"): why it was not compared}: the elements whose finite-difference line
    # crosses a kink (the other elements were compared); {} where there are none, or nothing was compared
    unjudged_elements: dict = dataclasses.field(default_factory=dict)

    @property
    def status(self) -> str:
        """``"agree"``, ``"disagree"`` or ``"inconclusive"`` (CONTRACT §3); ``ok`` is True only for agree."""
        if self.discrepancies or set(self.errors) - set(self.excused):
            return "disagree"
        if not self.comparisons:
            return "inconclusive"
        return "agree"

    @property
    def reason(self) -> str:
        """Why the verdict is inconclusive ("" otherwise)."""
        if self.status != "inconclusive":
            return ""
        if self.unjudged:
            return self.unjudged
        if self.nondifferentiable and not self.results:
            return f"the case is at a non-differentiable point ({self.nondifferentiable})"
        why = [f"{n}: {w}" for n, w in self.excused.items()] + [f"{n}: {w}" for n, w in self.skipped.items()]
        got = sorted(self.results)
        head = "no pair of oracles produced gradients to compare"
        head += f" (only {got[0]} did)" if len(got) == 1 else " (none did)" if not got else ""
        return head + (": " + "; ".join(why) if why else "")

    @property
    def ok(self) -> bool:
        return self.status == "agree"

    def summary(self) -> str:
        status = self.status
        if status == "inconclusive":
            lines = [f"INCONCLUSIVE: {self.reason}"]
        else:
            lines = [f"{'OK' if status == 'agree' else 'DISCREPANCY'}: {len(self.comparisons)} oracle pair(s) compared"
                     + (f" ({', '.join(' vs '.join(c.oracles) for c in self.comparisons)})" if self.comparisons else "")]
            for name, why in self.excused.items():
                lines.append(f"  excused {name}: {why}")
        for name, why in self.skipped.items():
            lines.append(f"  skipped {name}: {why}")
        for n in self.notes:
            lines.append(f"  note: {n}" + (f" [{n.evidence}]" if getattr(n, "evidence", "") else ""))
        lines += finding_lines(self.discrepancies, "  ")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def finding_lines(discrepancies, indent: str = "  ", kind: bool = False) -> list[str]:
    """Each discrepancy's message, then its cause (CONTRACT §8, ``Cause.describe``) -- said once where several
    oracle pairs saw the same one.  ``kind``: each message led by ``[kind]``."""
    lines: list[str] = []
    said = set()
    for d in discrepancies:
        lines.append(indent + (f"[{d.kind}] " if kind else "") + d.message.replace("\n", "\n" + indent))
        text = d.cause.describe() if getattr(d, "cause", None) is not None else ""
        if text and text not in said:
            said.add(text)
            lines.append(f"{indent}  cause: {text}")
    return lines


def check(case: Case, oracles=None, *, timeout: float | None = None) -> Verdict:
    """Run the oracles (default: every available and applicable one) on ``case``; compare all pairs.

    ``timeout``: seconds for each oracle's own call, as ``assert_gradients(timeout=)`` and ``gradspec fuzz
    --case-timeout`` (``gradspec.guard.guarded_check``): an oracle still running then is cut (an alarm signal
    in the main thread, a watchdog thread elsewhere) and is a ``timeout`` discrepancy, and the check returns
    instead of hanging on code under test that never does.  None (default): no limit."""
    if timeout is not None:
        if not _GUARDED:  # (the package import registers it: gradspec/__init__ imports gradspec.guard)
            raise RuntimeError("check(timeout=...) needs gradspec.guard: import gradspec, not gradspec.check alone")
        return _GUARDED[0](case, oracles, timeout)
    # torch's intra-op threads cost more than the oracles' tiny calls do; the case's forward, op specs
    # and kinks are computed once for all the oracles and rules (gradspec._private.percase)
    if oracles is None:
        chosen = _oracles.all_oracles()
    else:
        chosen = [o if isinstance(o, _oracles.Oracle) else _oracles.get(o) for o in oracles]
    if _mixed_dtypes(case.leaves):
        why = unpromoted(case)
        if why:  # not a program torch runs: no oracle is asked (numpy would promote and compute)
            return Verdict(case, {}, [], [], {}, {}, None, None, [], {}, {o.name: o for o in chosen}, why, "", None)
    with oracle_threads(), _percase.scope(case), _quiet_fp(chosen):
        _plan.adopt(case)  # (what the structure alone decides, found on an earlier check of it: oracles._plan)
        why = _determinism.probe(case) if _outcome.has_user_ops(case) else ""
        if why:  # every oracle would compare a different function (tryout6 #1, #4, #8): nothing to judge
            return Verdict(case, {}, [], [], {}, {}, oracles={o.name: o for o in chosen}, unjudged=why,
                           not_a_function=why)
        return _check(case, chosen)


def _quiet_fp(chosen):
    """One ignored-FP-errors region for the whole check when every oracle is gradspec's own: each of them
    (and every comparison) ignores numpy's floating-point errors anyway, and entering ``np.errstate``
    once instead of once per oracle call saves microseconds per case (each entry costs about 1.3 us).
    A third-party oracle (an engine under test) keeps the caller's numpy error settings."""
    own = _OWN_ORACLES or _own_oracles()
    for o in chosen:
        if type(o) not in own:
            return _NOTHING
    return _engine._quiet_fp()


class _Nothing:
    __slots__ = ()

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NOTHING = _Nothing()
_OWN_ORACLES: set = set()


def _own_oracles() -> set:
    from .oracles.fd import FiniteDifferences
    from .oracles.fd_jacobian import FDJacobianOracle
    from .oracles.jacobian import JacobianOracle
    from .oracles.reference import ReferenceOracle
    from .oracles.torch_oracle import TorchOracle

    _OWN_ORACLES.update({FiniteDifferences, FDJacobianOracle, JacobianOracle, ReferenceOracle, TorchOracle})
    return _OWN_ORACLES


def _check(case: Case, chosen: list) -> Verdict:
    results, skipped, errors, jac, fd_errs, directional, nondiff, used, f32, kinked = _ask_oracles(case, chosen)
    if nondiff:
        _drop_estimates(results, fd_errs, skipped, used, chosen, nondiff)
        directional = None

    discrepancies: list[Discrepancy] = []
    precisions = _leaf_precisions(case)
    dtype = "float32" if "float32" in precisions.values() else "float64"
    f32 = {k: v for k, v in f32.items() if k in results}
    if f32:  # the code computes in float32 inside: so is every gradient compared
        dtype = "float32"
        precisions = dict.fromkeys(precisions, "float32")
    kinds = {**{o.name: o for o in chosen}, **used}
    claim = _tol.accuracy_claim(case.meta)
    # CONTRACT §3: a raise is a discrepancy whichever oracles are left, unless it is excused
    # (torch and the code under test both refuse the case, the forward raised, FD could not estimate).
    gated = _outcome.user_gated_leaves(case)
    notes = _outcome.torch_no_grad_as_none(case, results, errors, kinds, gated)
    if f32:
        notes.append(_f32_note(f32))
    raised, excused = _outcome.settle_errors(case, results, errors, kinds)
    for name, other, text, tb in raised:
        discrepancies.append(Discrepancy(kind="raised", oracles=(name, other), message=text, case=case, traceback=tb))
    for name, leaf, got, want in _outcome.dtype_mismatches(case, results, kinds):
        other = next((n for n in results if n != name), name)
        discrepancies.append(Discrepancy(kind="dtype", oracles=(name, other), case=case, leaf=leaf, message=(
            f"{name} returned a {got} gradient for leaf {leaf!r}, whose dtype is {want} (torch's .grad has the leaf's dtype)")))
    leaves = case.grad_leaves()
    comparisons, found = _lazy.compare(_compare_pairs, _LazyComparison, case, leaves, results, kinds, precisions, jac,
                                       fd_errs, gated, claim)  # (an estimate's pending error bound: _check_lazy)
    discrepancies.extend(found)
    if directional is not None and results:
        _compare_directional(case, directional, results, kinds, dtype, comparisons, discrepancies, skipped, claim)
    _discount_mismatched_twins(case, dtype, kinds, comparisons, discrepancies, errors, excused, notes)
    _discount_other_precision(case, dtype, kinds, comparisons, discrepancies, skipped, notes)
    _discount_amplified_rounding(case, dtype, kinds, comparisons, discrepancies, skipped, notes)
    judged = {k: (f32[k].judged if k in f32 and f32[k].judged is not None else v) for k, v in fd_errs.items()}
    _discount_shaky_estimates(kinds, judged, comparisons, discrepancies, notes, fd_errs)
    _discount_shaky_agreement(kinds, fd_errs, results, comparisons, {**skipped, **excused}, notes)
    unjudged = _unjudged(case, leaves, kinds, nondiff, comparisons, discrepancies, skipped, excused, notes, kinked)
    if kinked and not unjudged:
        notes.extend(_kinked_notes(case, kinked, comparisons))
    if not unjudged and not discrepancies and comparisons:  # NaN agreeing with NaN (a NaN input) judges nothing
        unjudged = _outcome.nothing_finite(case, results)
        comparisons = [] if unjudged else comparisons
        agreed = "" if unjudged else _agreed_nonfinite(case, results, comparisons)
        if agreed:  # elements NaN/inf in every oracle: left out of the comparison, said (never a silent OK)
            notes.append(agreed)
    verdict = Verdict(case, results, comparisons, discrepancies, skipped, errors, jac, fd_errs.get("finite-differences"),
                      notes, excused, kinds, unjudged, nondiff, claim,
                      unjudged_elements={k: v for k, v in kinked.items() if k in results} if not unjudged else {})
    for explain in _EXPLAINERS if discrepancies else ():
        explain(verdict, kinds)
    return verdict


def _ask_oracles(case: Case, chosen: list) -> tuple:
    """Every oracle's answer on ``case``: (results, skipped, errors, the jacobian, FD error estimates, the
    directional FD oracle (large cases), why the point is not differentiable, the oracles used, the estimates
    of a forward through float32)."""
    results: dict = {}
    skipped: dict = {}
    errors: dict = {}
    jac = None
    fd_errs: dict = {}  # oracle name -> per-leaf error estimates (fd-kind oracles only)
    directional = None
    nondiff = ""
    used = {}
    f32: dict = {}  # estimate name -> its result, where the forward computes in float32 inside
    kinked: dict = {}  # estimate name -> {input element: why it is not compared (its line crosses a kink)}
    for o in chosen:
        if o.name == "jacobian" and o.kind == "exact" and _has_fd_jvp(case):
            # A user op without a declared jvp gets a finite-difference JVP: the jacobian is then
            # an estimate and is compared with its own error estimate, like finite differences.
            from .oracles.fd_jacobian import FDJacobianOracle
            # (a timed copy of gradspec.guard makes its stand-in timed the same: before, the user op's forward
            # that it calls ran under the whole check's bound alone -- 62 s at --case-timeout 1)
            retime = getattr(o, "_gs_retime", None)
            o = FDJacobianOracle() if retime is None else retime(FDJacobianOracle())
        used[o.name] = o
        ok, why = o.available()
        if not ok:
            skipped[o.name] = why
            continue
        try:
            ok, why = o.applies(case)
        except Exception as e:  # an applies() that fails is the oracle's problem, report it
            ok, why = False, f"{o.name}: applies() raised {type(e).__name__}: {e}"
        if not ok:
            skipped[o.name] = why
            continue
        t0 = time.perf_counter()  # (verify_*'s slow-run hint says where a case's time goes: _private.activity)
        try:
            if o.kind == "fd" and case.n_inputs > getattr(o, "full_limit", np.inf):
                directional = o  # compared below, against each exact oracle's gradient
                continue
            if o.kind == "fd":
                res = o.result(case)
                fd_errs[o.name] = res.error
                results[o.name] = res.grads
                if getattr(res, "float32_inside", ""):  # an estimate of a forward through float32
                    f32[o.name] = res
                if getattr(res, "kinks", None):
                    kinked[o.name] = res.kinks
            elif o.name == "jacobian":
                jac = o.jacobian(case)
                results[o.name] = jac.vjp
            else:
                results[o.name] = o.vjp(case)
        except _oracles.NonDifferentiable as e:
            skipped[o.name] = nondiff = str(e)
        except _oracles.OracleError as e:
            skipped[o.name] = str(e)
        except Exception as e:
            errors[o.name] = (type(e).__name__, str(e), traceback.format_exc())
        finally:
            _activity.add(o.name, time.perf_counter() - t0)
    return results, skipped, errors, jac, fd_errs, directional, nondiff, used, f32, kinked


def _compare_pairs(case, leaves, results, kinds, precisions, jac, fd_errs, gated, claim, retry=True) -> tuple[list, list]:
    """Every pair of oracles holding gradients, compared: (comparisons, discrepancies).  ``precisions``: per leaf,
    the precision its gradient is computed at (``_leaf_precisions``); leaves of each precision are compared at its
    tolerance, and a pair's comparison is the worst of them.  ``retry``: measure the rounding noise and compare
    again where a value differs (False: one attempt, ``_check_lazy``'s first look)."""
    m = None if jac is None else _path_scale(jac, quiet=_engine._FP_QUIET)
    names = list(results)
    # A pair where neither side holds a gradient compared nothing ({} vs {} where no leaf requires grad)
    # (an empty leaf's (0, 1) gradient still counts: its shape is compared)
    holds = {n: any(g is not None for g in results[n].values()) for n in names}
    pairs = [(a, b) for a, b in itertools.combinations(names, 2) if holds[a] or holds[b]]
    groups: dict = {}
    for leaf in leaves:
        groups.setdefault(precisions.get(leaf.name, "float64"), []).append(leaf)
    if len(groups) <= 1:
        dtype = next(iter(groups), "float64")
        return _compare_group(case, leaves, names, pairs, results, kinds, dtype, m, None, fd_errs, gated, claim, retry)
    M = None if m is None else _per_leaf(m, leaves)  # (by leaf name: each group is a subset of the leaves)
    comps: dict = {}
    founds: list = []
    for dtype in ("float64", "float32"):
        part, found = _compare_group(case, groups.get(dtype, []), names, pairs, results, kinds, dtype, None, M,
                                     fd_errs, gated, claim, retry)
        founds.extend(found)
        for c in part:
            was = comps.get(c.oracles)
            comps[c.oracles] = c if was is None else Comparison(
                c.oracles, was.agreed and c.agreed, max(was.max_ratio, c.max_ratio))
    return list(comps.values()), founds


def _compare_group(case, leaves, names, pairs, results, kinds, dtype, m, M, fd_errs, gated, claim,
                   retry=True) -> tuple[list, list]:
    """``_compare_pairs`` on ``leaves``, all of one precision ``dtype``.  ``m``: the path scale (flat, in the order
    of ``leaves``) or ``M``: the same by leaf name."""
    noise = None
    opaque = _tol.opaque_claim(claim) if dtype == "float64" and _outcome.has_user_ops(case) else claim
    through = None  # the claim's own scale: |path terms| through the code under test (_check_claim), once
    unsized = ""  # why that scale could not be sized here ({} through): the claim is then not applied (review15 #5)
    for attempt in range(2):
        # The rounding-noise floor only ever loosens a tolerance, and measuring it costs three
        # more backward passes: measure it only when a comparison fails without it (the same for
        # the allowance of code gradspec cannot see inside, tolerances.OPAQUE_RTOL, and for the
        # claim's path scale, a backward pass over absolute values).
        comps, founds = [], []
        claim_now = opaque if attempt else claim
        # (a claim is never applied on the comparison's own scale while its path scale is not sized: that scale
        # counts paths that do not run through the code under test, _private.pairs._claim_allowance)
        use = claim_now if through or not _user_claim(claim_now) else _tol.opaque_part(claim_now)
        fast = _fast_pairs(case, leaves, names, results, kinds, dtype, m if M is None else M, fd_errs, noise, gated,
                           use, through or None)
        if _user_claim(claim_now) and through is None and not all(p in fast for p in pairs):
            through, unsized = _claim_scale_why(case)
            through = through or {}
            if through:
                use = claim_now
                fast = _fast_pairs(case, leaves, names, results, kinds, dtype, m if M is None else M, fd_errs, noise,
                                   gated, use, through)
        if all(p in fast for p in pairs):  # every pair agrees (the common case: the loop below, without its steps)
            return [Comparison(p, True, fast[p]) for p in pairs], []
        for a, b in pairs:
            if (a, b) in fast:
                comps.append(Comparison((a, b), True, fast[(a, b)]))
                continue
            tol = _tol.lookup(dtype, kinds[a].kind, kinds[b].kind)
            if M is None and m is not None:
                M = _per_leaf(m, leaves)
            comp, found = _compare(case, a, b, results[a], results[b], kinds, tol, M, fd_errs, noise, gated,
                                   _pair_claim(use, kinds, a, b), through or None)
            if found and unsized and _pair_claim(claim_now, kinds, a, b) and _compare(
                    case, a, b, results[a], results[b], kinds, tol, M, fd_errs, noise, gated,
                    _pair_claim(claim_now, kinds, a, b), None)[0].agreed:  # agrees only on the unfit own scale
                for d in found:
                    d.unsized = unsized
            comps.append(comp)
            founds.extend(found)
        if not any(d.kind == "value" for d in founds) or attempt or not retry:
            break
        noise = rounding_noise(case, base=_reference_answer(results, kinds))
        if noise is None:
            break
        if isinstance(noise, Unmeasured):  # a few ulps break the computation: nothing to hold it to (_check_rules)
            for d in founds:
                if d.kind == "value":
                    d.edge = (dtype, noise.why)
            break
    return comps, founds


def _user_claim(claim) -> bool:
    """Whether ``claim`` holds an accuracy the code under test declared (not only gradspec's OPAQUE_RTOL)."""
    return bool(claim.user if isinstance(claim, _tol._OpaqueClaim) else claim)


def _reference_answer(results, kinds) -> dict | None:
    """The reference oracle's gradients on this case where they are what ``rounding_noise``'s unjittered run
    would compute: gradspec's own reference engine, run under ignored floating-point errors as that run is
    (``_quiet_fp``: every oracle is gradspec's own; else the caller's numpy error settings may raise there)."""
    got = results.get("reference")
    if got is None or type(kinds.get("reference")) is not _ReferenceOracle or not _engine._FP_QUIET:
        return None
    return got


def _unjudged(case, leaves, kinds, nondiff, comparisons, discrepancies, skipped, excused, notes, kinked=None) -> str:
    """Why nothing on this case is judged ("" when it is): a kink found numerically, no leaf requiring grad,
    a torch Function compared only with itself.  Comparisons (and discrepancies but raises) are dropped then.
    ``kinked``: estimates that located the kinks themselves (elements left out): their findings stand."""
    unjudged = _discount_edge_of_precision(comparisons, discrepancies) or _discount_unsized_claim(
        comparisons, discrepancies) or _discount_numerical_kinks(
        case, kinds, comparisons, discrepancies, set(kinked or ()))
    if nondiff and not unjudged:  # FD found the kink or jump itself: the case is skipped the same way
        comparisons[:] = []
        discrepancies[:] = [d for d in discrepancies if d.kind == "raised"]
        at = _outcome.numerical_kinks(case)  # name the node where one can be named
        where = f"at {'; '.join(at[:3])}{' ...' if len(at) > 3 else ''}" if at else f"({nondiff})"
        unjudged = (f"{_EXCLUDED} detected numerically {where}: not differentiable at this point, so no gradient "
                    "is compared on this case" + _OTHERS)
    if not leaves and not unjudged:
        why = "; ".join(f"{n}: {w}" for n, w in excused.items())  # (torch's own refusal, say)
        unjudged = "no leaf requires grad: nothing to compare" + (f" ({why})" if why else "")
    if not unjudged and not discrepancies and comparisons:
        unjudged = _compared_with_itself(case, comparisons, {**skipped, **excused})
        if unjudged:
            comparisons[:] = []  # no witness: the verdict is inconclusive with this reason, never "agree"
    if not unjudged and comparisons and all(l.value.size == 0 for l in leaves):
        # Shapes and dtypes were compared (an engine returning None or a wrong shape is found), values were not
        notes.append(_outcome.EMPTY_LEAVES + " (" + ", ".join(
            f"{l.name} {tuple(l.value.shape)}" for l in leaves[:4]) + "): the oracles were compared on the gradients' "
            "shapes and dtypes only; there are no values to compare")
    return unjudged


def _f32_note(f32: dict) -> str:
    nodes = sorted({r.float32_inside for r in f32.values()})
    why = "; ".join(sorted({getattr(r, "float32_why", "") or _F32_VALUED for r in f32.values()}))
    return (f"{_f32line.describe(', '.join(nodes), why)}: {' and '.join(sorted(f32))} used a float32-sized "
            "step and a float32 error bound, and gradients are compared at float32 precision")


_F32_VALUED = "its values over a float64 stencil are all float32 numbers"


def _digest(case) -> str:
    """A content hash of the case (graph, values, seeds) without its JSON text: directional FD only runs on
    large cases, where encoding every value as JSON took seconds (16 s for a 9-million-element seed)."""
    h = hashlib.sha1()
    structure = ([(l.name, l.value.dtype.str, l.value.shape, l.requires_grad) for l in case.leaves],
                 [(n.name, n.op, list(n.inputs), sorted(n.params.items())) for n in case.nodes],
                 list(case.roots), [None if s is None else (np.asarray(s).dtype.str, np.shape(s)) for s in case.seeds])
    h.update(repr(structure).encode())
    for a in [l.value for l in case.leaves] + [s for s in case.seeds if s is not None]:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _compare_directional(case, fd, results, kinds, dtype, comparisons, discrepancies, skipped, claim=None,
                         k: int = 16):
    """Large cases: compare <u, g> with FD directional derivatives along k random unit directions."""
    from .oracles.fd import fd_directional

    leaves = case.grad_leaves()
    # Directions derived from the case itself: the same case always gets the same directions.
    rng = np.random.default_rng(int(_digest(case)[:8], 16))
    raw = {l.name: rng.standard_normal((k,) + l.shape) for l in leaves}
    norm = np.sqrt(sum(np.sum(v.reshape(k, -1) ** 2, axis=1) for v in raw.values()))
    dirs = {n: v / norm.reshape((k,) + (1,) * (v.ndim - 1)) for n, v in raw.items()}
    try:
        est, err = fd_directional(case, dirs)
    except Exception as e:
        skipped[fd.name] = f"finite differences (directional): {type(e).__name__}: {e}"
        return
    through, unsized = None, ""
    for name, res in results.items():
        tol = _tol.lookup(dtype, "fd", kinds[name].kind)
        dot = np.zeros(k)
        mag = np.zeros(k)
        for l in leaves:
            g = res.get(l.name)
            g = np.zeros(l.shape) if g is None else np.asarray(g, dtype=np.float64)
            dot += dirs[l.name].reshape(k, -1) @ g.ravel()
            mag += np.abs(dirs[l.name].reshape(k, -1)) @ np.abs(g.ravel())
        allowed = tol.rtol * np.maximum(mag, np.abs(dot)) + tol.fd_factor * err
        claimed = None
        if _pair_claim(claim, kinds, fd.name, name) and np.any(np.abs(dot - est) > allowed):
            # <u, grad> sums over the leaves: so does the claim, over the path terms through the code under test
            if through is None:
                through, unsized = _claim_scale_why(case)
                through = through or {}
            claimed = np.maximum(allowed, _directional_claim(case, claim, dirs, res, through))
            if through:
                allowed, claimed = claimed, None  # (else not applied: the own |grad| stands in, review15 #5)
        ratio = np.abs(dot - est) / np.where(allowed > 0, allowed, np.inf)
        r = float(np.max(ratio, initial=0.0))
        pair = (fd.name, name)
        comparisons.append(Comparison(pair, r <= 1.0, r))
        if r > 1.0:
            j = int(np.argmax(ratio))
            discrepancies.append(
                Discrepancy(
                    "value",
                    pair,
                    f"{fd.name} (directional) vs {name}: direction {j} of {k}: <u, grad> = {float(dot[j])!r} vs finite "
                    f"differences {float(est[j])!r} (abs err {abs(dot[j] - est[j]):.3g}, tolerance {allowed[j]:.3g}) "
                    f"— tolerance: {tol.describe()}{_tol.describe_claim(_pair_claim(claim, kinds, fd.name, name), through)}",
                    case,
                    None,
                    (j,),
                    (est[j], dot[j]),
                    float(abs(dot[j] - est[j])),
                    float(abs(dot[j] - est[j]) / max(abs(dot[j]), 1e-300)),
                    float(allowed[j]),
                    tol.describe() + _tol.describe_claim(_pair_claim(claim, kinds, fd.name, name), through),
                )
            )
            if claimed is not None and unsized and np.all(np.abs(dot - est) <= claimed):
                discrepancies[-1].unsized = unsized  # agrees only on the unfit own scale: inconclusive


def _fd_allowance(fd_errs, a, b, leaf, tol):
    """fd_factor x the error estimates of whichever side(s) of the pair are estimates."""
    total = 0.0
    for name in (a, b):
        if fd_errs and name in fd_errs and leaf in fd_errs[name]:
            total = total + tol.fd_factor * np.asarray(fd_errs[name][leaf], dtype=np.float64)
    return total


def _has_fd_jvp(case) -> bool:
    return _structure.once(case, "fd_jvp", lambda: _fd_jvp(case))


def _fd_jvp(case) -> bool:
    specs = case._node_specs() or [case.spec(n.op) for n in case.nodes]
    return any(getattr(spec, "jvp_source", "declared") != "declared" for spec in specs)


def _compare(case, a, b, ra, rb, kinds, tol, M, fd_errs, noise=None, gated=frozenset(), claim=None, through=None):
    """Pair (a, b) leaf by leaf, explaining what differs; ``through``: per leaf, the claim's path scale or None."""
    found = []
    worst_ratio = 0.0
    both_none_aware = kinds[a].reports_none and kinds[b].reports_none
    for leaf in case.grad_leaves():
        ga, gb = ra.get(leaf.name), rb.get(leaf.name)
        if ga is None or gb is None:
            if ga is None and gb is None:
                continue
            if both_none_aware and leaf.name not in gated:
                has = a if ga is not None else b
                found.append(
                    Discrepancy(
                        "none-vs-zeros",
                        (a, b),
                        f"{a} vs {b}: leaf {leaf.name!r}: .grad is None for {b if has == a else a} but "
                        f"{has} has a gradient",
                        case,
                        leaf.name,
                    )
                )
                continue
            ga = np.zeros(leaf.shape) if ga is None else ga
            gb = np.zeros(leaf.shape) if gb is None else gb
        ga, gb = np.asarray(ga), np.asarray(gb)
        if ga.shape != gb.shape:
            found.append(
                Discrepancy("shape", (a, b), f"{a} vs {b}: leaf {leaf.name!r}: gradient shape {ga.shape} vs {gb.shape} "
                            f"(leaf shape {leaf.shape})", case, leaf.name)
            )
            continue
        fa, fb = ga.astype(np.float64), gb.astype(np.float64)
        pat_a = np.where(np.isnan(fa), 1, np.where(np.isposinf(fa), 2, np.where(np.isneginf(fa), 3, 0)))
        pat_b = np.where(np.isnan(fb), 1, np.where(np.isposinf(fb), 2, np.where(np.isneginf(fb), 3, 0)))
        fd_allowed = _fd_allowance(fd_errs, a, b, leaf.name, tol)
        if np.ndim(fd_allowed) and np.isposinf(fd_allowed).any():  # an estimate's element left out (a kink on its
            out = np.isposinf(fd_allowed)  # line): neither its NaN/Inf pattern nor its value is compared (fin below)
            pat_a, pat_b = np.where(out, -1, pat_a), np.where(out, -1, pat_b)
        if not np.array_equal(pat_a, pat_b):
            idx = tuple(int(i) for i in np.argwhere(pat_a != pat_b)[0])
            found.append(
                Discrepancy("nan-inf-pattern", (a, b), f"{a} vs {b}: leaf {leaf.name!r}[{_ix(idx)}]: "
                            f"{float(fa[idx])!r} vs {float(fb[idx])!r} (NaN/Inf pattern differs)", case, leaf.name, idx,
                            (fa[idx], fb[idx]))
            )
            continue
        fin = pat_a == 0
        if not fin.any():
            continue
        with np.errstate(all="ignore"):
            err = np.where(fin, np.abs(fa - fb), 0.0)
            leaf_scale = float(np.max(np.maximum(np.abs(fa), np.abs(fb)), where=fin, initial=0.0))
            allowed = _allowed(
                tol.rtol, np.maximum(np.abs(fa), leaf_scale), np.abs(fb),
                None if M is None else np.where(np.isfinite(M[leaf.name]), M[leaf.name], 0.0),
                None if noise is None else noise.get(leaf.name), fd_allowed, claim,
                tol.floor, None if through is None else np.where(np.isfinite(through[leaf.name]), through[leaf.name], 0.0),
            )
            # An exactly-zero allowance only happens when both sides are exactly 0 everywhere.
            ratio = np.where(fin, err / np.where(allowed > 0, allowed, np.inf), 0.0)
            ratio = np.where(fin & (allowed == 0) & (err > 0), np.inf, ratio)
        r = float(np.max(ratio, initial=0.0))
        worst_ratio = max(worst_ratio, r)
        if r > 1.0:
            idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape))
            e = float(err[idx])
            denom = max(abs(fb[idx]), abs(fa[idx]))
            rel = e / denom if denom else float("inf")
            nbad = int(np.sum(ratio > 1.0))
            found.append(
                Discrepancy(
                    "value",
                    (a, b),
                    f"{a} vs {b}: leaf {leaf.name!r}[{_ix(idx)}]: {float(fa[idx])!r} vs {float(fb[idx])!r} "
                    f"(abs err {e:.3g}, rel err {rel:.3g}, tolerance {float(allowed[idx]):.3g}; "
                    f"{nbad} of {fa.size} elements outside) — tolerance: {tol.describe()}{_tol.describe_claim(claim, through)}",
                    case,
                    leaf.name,
                    idx,
                    (fa[idx], fb[idx]),
                    e,
                    rel,
                    float(allowed[idx]),
                    tol.describe() + _tol.describe_claim(claim, through),
                )
            )
    return Comparison((a, b), not found, worst_ratio), found
