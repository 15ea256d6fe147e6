"""``gs.check(case)``: run every applicable oracle on a case and compare every pair.

Example::

    >>> import numpy as np, gradspec as gs
    >>> case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.array([1.0, -1.0])])
    >>> v = gs.check(case, oracles=["reference", "jacobian", "finite-differences"])
    >>> v.ok, len(v.comparisons)
    (True, 3)
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import traceback

import numpy as np

from . import engine as _engine
from . import oracles as _oracles
from . import outcome as _outcome
from . import tolerances as _tol
from ._private import opaque_noise as _opaque_noise
from ._private import percase as _percase
from ._private.kinks import EXCLUDED as _EXCLUDED
from ._private.pairs import _allowed, _fast_pairs, _pair_claim, _path_scale, _per_leaf
from ._private.threads import oracle_threads
from .case import Case, CaseError
from .causes import Cause

__all__ = ["check", "Verdict", "Discrepancy", "Comparison", "register_explainer"]

# Called with (verdict, {oracle name: oracle}) on every disagreement, to set Discrepancy.cause:
# gradspec.diagnose (same layer; it runs check() itself on one-node cases, so check() cannot import it)
# registers itself when the package is imported.
_EXPLAINERS: list = []


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
        if c is not None and c.id != "twin-mismatch":
            # An engine-level cause names no op: the failing side (one-sided kinds) and the culprit
            # op tell two such findings apart (an oracle raising is not the engine raising).
            who = self.oracles[0] if self.kind in ("raised", "timeout", "crash", "check-error") else ""
            # An engine-level cause (seed ignored, stale gradients...) is one bug whichever op the
            # case it showed on had: the culprit op does not split it (one bug, one report).
            where = (c.op,) if c.op else ((self.culprit,) if self.culprit and not c.is_engine_level else ())
            # A wrong VJP is one bug per op whatever pattern each case shows (a factor that depends on
            # the input reads as 'scale' on a one-element case and 'other' on a larger one).
            return (c.id, ("" if c.id == "wrong-vjp" else c.pattern or who,), where)
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
        for d in self.discrepancies:
            lines.append("  " + d.message.replace("\n", "\n  "))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _case_dtype(case: Case) -> str:
    return "float32" if any(l.value.dtype == _F32 for l in case.leaves) else "float64"


_F32 = np.dtype(np.float32)  # (comparing with a dtype object skips numpy's conversion of the type)


def check(case: Case, oracles=None) -> Verdict:
    """Run the oracles (default: every available and applicable one) on ``case``; compare all pairs."""
    # torch's intra-op threads cost more than the oracles' tiny calls do; the case's forward, op specs
    # and kinks are computed once for all the oracles and rules (gradspec._private.percase)
    if oracles is None:
        chosen = _oracles.all_oracles()
    else:
        chosen = [o if isinstance(o, _oracles.Oracle) else _oracles.get(o) for o in oracles]
    if len({l.value.dtype for l in case.leaves}) > 1:
        why = unpromoted(case)
        if why:  # not a program torch runs: no oracle is asked (numpy would promote and compute)
            return Verdict(case, {}, [], [], {}, {}, None, None, [], {}, {o.name: o for o in chosen}, why, "", None)
    with oracle_threads(), _percase.scope(case), _quiet_fp(chosen):
        return _check(case, chosen)


def refuse_unpromoted(case: Case) -> None:
    """Raise ``CaseError`` if torch refuses the case's forward (see :func:`unpromoted`): a case file's fault."""
    why = unpromoted(case)
    if why:
        raise CaseError(why)


def unpromoted(case: Case) -> str | None:
    """Why torch refuses to run the case's forward, or None: an op that does not promote dtypes
    (``OpSpec.same_dtype``: mm, matmul, linear, conv1d, einsum) gets inputs of different dtypes (an int64
    constant next to a float64 leaf in ``mm``, say). numpy would promote and compute, so finite differences
    and the jacobian would return gradients and torch's refusal would read as a bug in torch."""
    if not any(case.spec(n.op).same_dtype for n in case.nodes):
        return None
    env = {l.name: _engine.Tensor(l.value) for l in case.leaves}
    with _engine.no_grad():
        for n in case.nodes:
            try:
                env[n.name] = _engine.apply(case.spec(n.op), [env[i] for i in n.inputs], n.params)
            except _engine.DtypeMismatchError as e:
                return f"node {n.name!r} = {n.op}({', '.join(n.inputs)}): torch refuses this case's forward: {e}"
            except Exception:  # noqa: BLE001 - any other failure is the oracles' to report, case by case
                return None
    return None


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
    results: dict = {}
    skipped: dict = {}
    errors: dict = {}
    jac = None
    fd_errs: dict = {}  # oracle name -> per-leaf error estimates (fd-kind oracles only)
    directional = None
    nondiff = ""
    used = {}
    f32: dict = {}  # estimate name -> its result, where the forward computes in float32 inside
    for o in chosen:
        if o.name == "jacobian" and o.kind == "exact" and _has_fd_jvp(case):
            # A user op without a declared jvp gets a finite-difference JVP: the jacobian is then
            # an estimate and is compared with its own error estimate, like finite differences.
            from .oracles.fd_jacobian import FDJacobianOracle
            o = FDJacobianOracle()
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
    if nondiff:
        _drop_estimates(results, fd_errs, skipped, used, chosen, nondiff)
        directional = None

    discrepancies: list[Discrepancy] = []
    comparisons: list[Comparison] = []
    dtype = _case_dtype(case)
    f32 = {k: v for k, v in f32.items() if k in results}
    if f32 and dtype == "float64":  # the code computes in float32 inside: so is every gradient compared
        dtype = "float32"
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
    m = None if jac is None else _path_scale(jac, quiet=_engine._FP_QUIET)
    M = None  # m per leaf, for the leaf-by-leaf comparison of pairs the fast path did not settle
    names = list(results)
    noise = None
    # A pair where neither side holds a gradient compared nothing ({} vs {} where no leaf requires grad)
    pairs = [(a, b) for a, b in itertools.combinations(names, 2) if _holds_elements(results[a], results[b])]
    opaque = _tol.opaque_claim(claim) if dtype == "float64" and _outcome.has_user_ops(case) else claim
    for attempt in range(2):
        # The rounding-noise floor only ever loosens a tolerance, and measuring it costs three
        # more backward passes: measure it only when a comparison fails without it (the same for
        # the allowance of code gradspec cannot see inside, tolerances.OPAQUE_RTOL).
        comps, founds = [], []
        claim_now = opaque if attempt else claim
        fast = _fast_pairs(case, leaves, names, results, kinds, dtype, m, fd_errs, noise, gated, claim_now)
        for a, b in pairs:
            if (a, b) in fast:
                comps.append(Comparison((a, b), True, fast[(a, b)]))
                continue
            tol = _tol.lookup(dtype, kinds[a].kind, kinds[b].kind)
            if M is None and m is not None:
                M = _per_leaf(m, leaves)
            comp, found = _compare(case, a, b, results[a], results[b], kinds, tol, M, fd_errs, noise, gated,
                                   _pair_claim(claim_now, kinds, a, b))
            comps.append(comp)
            founds.extend(found)
        if not any(d.kind == "value" for d in founds) or attempt:
            break
        noise = rounding_noise(case)
        if noise is None:
            break
    comparisons.extend(comps)
    discrepancies.extend(founds)
    if directional is not None and results:
        _compare_directional(case, directional, results, kinds, dtype, comparisons, discrepancies, skipped, claim)
    _discount_mismatched_twins(case, dtype, kinds, comparisons, discrepancies, errors, excused, notes)
    _discount_other_precision(case, dtype, kinds, comparisons, discrepancies, skipped, notes)
    judged = {k: (f32[k].judged if k in f32 and f32[k].judged is not None else v) for k, v in fd_errs.items()}
    _discount_shaky_estimates(kinds, judged, comparisons, discrepancies, notes)
    unjudged = _discount_numerical_kinks(case, kinds, comparisons, discrepancies)
    if nondiff and not unjudged:  # FD found the kink or jump itself: the case is skipped the same way
        comparisons[:] = []
        discrepancies[:] = [d for d in discrepancies if d.kind == "raised"]
        at = _outcome.numerical_kinks(case)  # name the node where one can be named
        where = f"at {'; '.join(at[:3])}{' ...' if len(at) > 3 else ''}" if at else f"({nondiff})"
        unjudged = (f"{_EXCLUDED} detected numerically {where}: not differentiable at this point, so no gradient "
                    "is compared on this case")
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
    verdict = Verdict(case, results, comparisons, discrepancies, skipped, errors, jac, fd_errs.get("finite-differences"),
                      notes, excused, kinds, unjudged, nondiff, claim)
    for explain in _EXPLAINERS if discrepancies else ():
        explain(verdict, kinds)
    return verdict


# The twin of a torch Function (verify_torch_function) is the Function itself: the reference oracle runs its
# backward inside gradspec's engine and torch-cpu inside torch, so that pair agreeing vouches for nothing
# about the backward.  A case where no other pair was compared (finite differences and the jacobian both
# stepped aside, say at a float32 staircase) is inconclusive, never "agree".
_SAME_CODE = frozenset({"reference", "torch-cpu", "torch-cuda"})


def _compared_with_itself(case, comparisons, why: dict) -> str:
    """Why nothing independent was compared on a case of a torch Function ("" when something was)."""
    if any(set(c.oracles) - _SAME_CODE for c in comparisons):
        return ""
    fns = []
    for n in case.nodes:
        try:
            spec = case.spec(n.op)
        except Exception:  # noqa: BLE001
            continue
        name = f"{spec.name.removeprefix('torch_')}.backward"
        if getattr(spec, "twin_is_self", False) and name not in fns:
            fns.append(name)
    if not fns:
        return ""
    reasons = "; ".join(f"{k}: {w}" for k, w in why.items() if k in ("finite-differences", "jacobian"))
    return (f"only {', '.join(fns)} was compared with itself (reference and torch-cpu both run it): "
            "no independent oracle ran" + (f" ({reasons})" if reasons else ""))


def _f32_note(f32: dict) -> str:
    nodes = sorted({r.float32_inside for r in f32.values()})
    return (f"{', '.join(nodes)} computes in float32 inside (its values over a float64 stencil are all float32 "
            f"numbers): {' and '.join(sorted(f32))} used a float32-sized step and a float32 error bound, and "
            "gradients are compared at float32 precision")


def _holds_elements(*grads) -> bool:
    # (an empty leaf's (0, 1) gradient still counts: its shape is compared)
    return any(g is not None for r in grads for g in r.values())


def _discount_numerical_kinks(case, kinds, comparisons, discrepancies) -> str:
    """A witness (finite differences, the jacobian, a user op's torch twin) disagreed on a case with user
    ops that declare no kinks: if one of them is not differentiable at this very point (found
    numerically), no oracle's gradient means anything there -- the case is inconclusive with that
    reason (CONTRACT §3).  The twin too: relu's vjp g * (x > 0) and its twin clamp(min=0) (whose
    convention at 0 is 1) are both right at x = 0, and differ there by the whole slope."""
    if not discrepancies:
        return ""
    witnesses = {n for n, o in kinds.items() if o.kind == "fd" or n == "jacobian" or _outcome.is_torch(o)}
    if not any(set(d.oracles) & witnesses for d in discrepancies if d.kind != "raised"):
        return ""
    at = _outcome.numerical_kinks(case)
    if not at:
        return ""
    comparisons[:] = []
    discrepancies[:] = [d for d in discrepancies if d.kind == "raised"]
    return (f"{_EXCLUDED} detected numerically at {'; '.join(at[:3])}{' ...' if len(at) > 3 else ''}: the op is not "
            "differentiable at this point (one-sided slopes differ), so no gradient is compared on this case")


def _discount_mismatched_twins(case, dtype, kinds, comparisons, discrepancies, errors, excused, notes) -> None:
    """Torch disagreed: if a user op's torch twin computes another forward on this case, torch is no
    witness here (issue 11 item 7) -- a ``twin-mismatch`` note, and its pairs do not count."""
    if not discrepancies:
        return
    torch_names = {n for n, o in kinds.items() if _outcome.is_torch(o)}
    if not any(set(d.oracles) & torch_names for d in discrepancies):
        return
    causes = _outcome.twin_mismatches(case, dtype)
    if not causes:
        return
    notes.extend(causes)
    comparisons[:] = [c for c in comparisons if not set(c.oracles) & torch_names]
    discrepancies[:] = [d for d in discrepancies if not set(d.oracles) & torch_names]
    for name in torch_names & set(errors):
        excused[name] = f"its twin is another function on this case ({causes[0].evidence})"


def _discount_other_precision(case, dtype, kinds, comparisons, discrepancies, skipped, notes) -> None:
    """A float32 case on which an estimate disagreed (finite differences, the jacobian's finite-difference
    JVPs: both evaluate the graph in float64): where a user op's float32 forward computes another function
    than its float64 one (``outcome.precision_mismatches``), they witness other code than the float32
    code judged -- their pairs do not count and each is skipped with the reason (never a discrepancy)."""
    if dtype != "float32" or not discrepancies:
        return
    est = {n for n, o in kinds.items() if o.kind == "fd" or n == "jacobian"}
    if not any(set(d.oracles) & est for d in discrepancies if d.kind != "raised"):
        return
    at = _outcome.precision_mismatches(case)
    if not at:
        return
    ops = ", ".join(dict.fromkeys(repr(op) for op, _ in at))
    why = (f"not a witness on this case: it evaluates the graph in float64, and the float32 forward of {ops} "
           "computes another function than its float64 forward here (beyond float32 rounding)")
    notes.append("float32 forward vs float64 forward at the same inputs: " + "; ".join(e for _, e in at[:3])
                 + (" ..." if len(at) > 3 else ""))
    comparisons[:] = [c for c in comparisons if not set(c.oracles) & est]
    discrepancies[:] = [d for d in discrepancies if d.kind == "raised" or not set(d.oracles) & est]
    for name in sorted(est & set(kinds)):
        skipped[name] = why


def _discount_shaky_estimates(kinds, fd_errs, comparisons, discrepancies, notes) -> None:
    """An estimate (finite differences, a finite-difference JVP) whose own error estimate exceeds
    FD_SHAKY of its value where it disagrees cannot witness against derivative formulas, nor against
    another estimate of the same forward: that pair becomes a note and counts neither way
    (gradspec.tolerances: FD_SHAKY).  Two estimates: the FD-JVP jacobian of a clamp beside values of
    5e4 (5674, error estimate 4640) against finite differences (66999, which the rule matched) was a
    discrepancy of its own after the jacobian's pair with the rule had become this note."""
    shaky = []
    for d in discrepancies:
        if d.kind != "value" or d.leaf is None or d.index is None or d.values is None:
            continue
        est = [i for i, n in enumerate(d.oracles) if kinds[n].kind == "fd" and n in fd_errs]
        if not est or len(est) == 1 and kinds[d.oracles[1 - est[0]]].kind == "fd":
            continue
        errs = [(float(np.asarray(fd_errs[d.oracles[i]][d.leaf])[d.index]), i) for i in est
                if fd_errs[d.oracles[i]].get(d.leaf) is not None]
        if not errs:
            continue
        # relative to the size of what is compared (an estimate of 0 where the rule says 1 is no shaky
        # estimate: it is the finding)
        (e, k), v = max(errs), max(abs(float(d.values[0])), abs(float(d.values[1])))
        if e > _tol.FD_SHAKY * v:
            shaky.append(d)
            notes.append(f"{d.oracles[k]} disagreed with {d.oracles[1 - k]} at {d.leaf}[{_ix(d.index)}] "
                         f"({d.oracles[0]} {float(d.values[0])!r} vs {d.oracles[1]} {float(d.values[1])!r}) but its "
                         f"own error estimate there is {e:.3g}, {e / max(v, 1e-300):.2g} of the values: too shaky to "
                         "witness alone")
    if shaky:
        pairs = {tuple(d.oracles) for d in shaky}
        discrepancies[:] = [d for d in discrepancies if d not in shaky]
        still = {tuple(d.oracles) for d in discrepancies}
        comparisons[:] = [c for c in comparisons if tuple(c.oracles) not in pairs - still]


def _drop_estimates(results, fd_errs, skipped, used, chosen, why) -> None:
    """A non-differentiable point: no derivative exists to estimate, so every estimate-based oracle
    (finite differences, the jacobian over finite-difference JVPs) is dropped with the reason (and the
    case is then unjudged, like ``_discount_numerical_kinks``: inconclusive with that reason)."""
    kinds = {**{o.name: o for o in chosen}, **used}
    for name in list(results):
        if kinds[name].kind == "fd":
            del results[name]
            fd_errs.pop(name, None)
            skipped[name] = f"not compared: the case is at a non-differentiable point ({why})"


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
        if _pair_claim(claim, kinds, fd.name, name):
            allowed = np.maximum(allowed, _tol.claimed_allowance(*claim, np.maximum(mag, np.abs(dot))))
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
                    f"— tolerance: {tol.describe()}{_tol.describe_claim(_pair_claim(claim, kinds, fd.name, name))}",
                    case,
                    None,
                    (j,),
                    (est[j], dot[j]),
                    float(abs(dot[j] - est[j])),
                    float(abs(dot[j] - est[j]) / max(abs(dot[j]), 1e-300)),
                    float(allowed[j]),
                    tol.describe() + _tol.describe_claim(_pair_claim(claim, kinds, fd.name, name)),
                )
            )


def _saturated(grads, leaves) -> bool:
    """Some gradient element moved by NOISE_SATURATED of its own size in the jittered runs (see there)."""
    for l in leaves:
        base = grads[0][l.name]
        if base is None:
            continue
        b = np.abs(np.asarray(base.numpy(), dtype=np.float64))
        for g in grads[1:]:
            if g[l.name] is not None:
                with np.errstate(all="ignore"):
                    d = np.abs(np.asarray(g[l.name].numpy(), dtype=np.float64) - np.asarray(base.numpy(), np.float64))
                if np.any(d > _tol.NOISE_SATURATED * b):
                    return True
    return False


def rounding_noise(case, runs: int = 2, ulps: float = _tol.NOISE_ULPS) -> dict | None:
    """How much the gradient moves when every value the backward pass touches is off by a few ulps.

    Two correct libraries compute exp, tanh, sums... to within an ulp or two of each other, and
    derivative formulas can amplify that enormously: ``1 - tanh(x)**2`` near saturation, or
    log_softmax's ``g - p * sum(g)`` when p is almost one-hot (the result is 1e-13 while its
    terms are 2).  Re-running the reference backward with each node's saved output, each
    incoming gradient and each VJP result perturbed by up to ``ulps`` ulps measures that
    amplification for this very case: the spread is the noise floor below which exact oracles
    cannot be told apart.
    """
    from . import engine as E
    from .oracles.reference import build_engine_graph

    leaves = case.grad_leaves()
    rng = np.random.default_rng(0)

    def jitter(t):
        if not isinstance(t, E.Tensor) or not np.issubdtype(t.data.dtype, np.floating) or not t.data.size:
            return t
        eps = np.finfo(t.data.dtype).eps
        # At least one eps relative (|u| >= 1 / ulps): a value's spacing is at most eps x |value|, so the
        # perturbation always survives rounding back to the dtype.  With |u| drawn from [0, 1], about one
        # element in ten rounded back to itself; when that element was erf(x) = -1 of float32 gelu at
        # x = -8 (whose derivative then cancels 1 + erf to 0), both runs missed the noise there.
        u = rng.uniform(min(1.0, 1 / ulps), 1, t.data.shape) * rng.choice((-1.0, 1.0), t.data.shape)
        return E.Tensor((t.data * (1 + ulps * eps * u)).astype(t.data.dtype))

    original = E._call_vjp
    original_apply = E.apply

    def noisy_vjp(node, g, create_graph):
        return [jitter(x) for x in original(node, jitter(g), create_graph)]

    def noisy_apply(spec, inputs, params):
        # Every op evaluated inside a VJP rule too (gelu's inner tanh, softmax's sum...).
        out = original_apply(spec, inputs, params)
        if spec.kink_distance is None:
            out.data = jitter(out).data
        return out

    def run(jittered):
        env, roots = build_engine_graph(case, jitter=jitter if jittered else None)
        seeds = [None if s is None else E.Tensor(np.array(s, copy=True)) for s in case.seeds]
        E._call_vjp = noisy_vjp if jittered else original
        E.apply = noisy_apply if jittered else original_apply
        try:
            # code gradspec cannot see inside (a torch Function's float32 backward) jitters its own ops too
            with np.errstate(all="ignore"), _opaque_noise.jittering(rng, ulps) if jittered else _NOTHING:
                E.backward(roots, seeds)
        finally:
            E._call_vjp = original
            E.apply = original_apply
        return {l.name: env[l.name]._grad for l in leaves}

    try:
        grads = [run(k > 0) for k in range(runs + 1)]
        if _saturated(grads, leaves):
            grads += [run(True) for _ in range(_tol.NOISE_MORE_RUNS)]
    except Exception:
        return None  # the reference engine fails on this case; that is reported elsewhere
    out = {}
    for l in leaves:
        base = grads[0][l.name]
        if base is None:
            continue
        b = np.asarray(base.numpy(), dtype=np.float64)
        spread = np.zeros(l.shape)
        for g in grads[1:]:
            if g[l.name] is not None:
                with np.errstate(all="ignore"):
                    d = np.abs(np.asarray(g[l.name].numpy(), dtype=np.float64) - b)
                spread = np.maximum(spread, np.where(np.isfinite(d), d, 0.0))
        out[l.name] = spread
    return out


def _fd_allowance(fd_errs, a, b, leaf, tol):
    """fd_factor x the error estimates of whichever side(s) of the pair are estimates."""
    total = 0.0
    for name in (a, b):
        if fd_errs and name in fd_errs and leaf in fd_errs[name]:
            total = total + tol.fd_factor * np.asarray(fd_errs[name][leaf], dtype=np.float64)
    return total


def _has_fd_jvp(case) -> bool:
    specs = case._node_specs() or [case.spec(n.op) for n in case.nodes]
    return any(getattr(spec, "jvp_source", "declared") != "declared" for spec in specs)


def _compare(case, a, b, ra, rb, kinds, tol, M, fd_errs, noise=None, gated=frozenset(), claim=None):
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
                None if noise is None else noise.get(leaf.name), _fd_allowance(fd_errs, a, b, leaf.name, tol), claim,
                tol.floor,
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
                    f"{nbad} of {fa.size} elements outside) — tolerance: {tol.describe()}{_tol.describe_claim(claim)}",
                    case,
                    leaf.name,
                    idx,
                    (fa[idx], fb[idx]),
                    e,
                    rel,
                    float(allowed[idx]),
                    tol.describe() + _tol.describe_claim(claim),
                )
            )
    return Comparison((a, b), not found, worst_ratio), found


def _ix(idx) -> str:
    return ", ".join(str(i) for i in idx)
