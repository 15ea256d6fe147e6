"""The verdict rules of ``gs.check`` that discount a comparison or a whole case: a witness that is not one
on this case (a torch twin computing another function, an estimate of another precision's forward, an
estimate too shaky where it disagrees), a point found numerically not differentiable, a torch Function
compared only with itself.  Each takes what ``check`` computed and edits it in place, with the reason
as a note or as the case's unjudged reason; none turns a disagreement into an agreement.

Example::

    >>> from gradspec._check_rules import _ix
    >>> _ix((0, 2))
    '0, 2'
"""

from __future__ import annotations

import numpy as np

from . import outcome as _outcome
from . import tolerances as _tol
from ._private import under_test as _under_test
from ._private.kinks import EXCLUDED as _EXCLUDED
from ._private.kinks import OTHERS_UNJUDGED as _OTHERS

__all__: list[str] = []  # (private: gradspec.check's rules)


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



def _discount_numerical_kinks(case, kinds, comparisons, discrepancies, located=frozenset()) -> str:
    """A witness (finite differences, the jacobian, a user op's torch twin) disagreed on a case with user
    ops that declare no kinks: if one of them is not differentiable at this very point (found
    numerically), no oracle's gradient means anything there -- the case is inconclusive with that
    reason (CONTRACT §3).  The twin too: relu's vjp g * (x > 0) and its twin clamp(min=0) (whose
    convention at 0 is 1) are both right at x = 0, and differ there by the whole slope.  ``located``:
    estimates that found the kinks element by element and left those elements out (``_kinked_notes``):
    they compared only elements whose lines cross no kink, so what they found there stands."""
    if not discrepancies:
        return ""
    witnesses = {n for n, o in kinds.items() if o.kind == "fd" or n == "jacobian" or _outcome.is_torch(o)} - located
    if not any(set(d.oracles) & witnesses for d in discrepancies if d.kind != "raised"):
        return ""
    at = _outcome.numerical_kinks(case)
    if not at:
        return ""
    comparisons[:] = []
    excused = next((d for d in discrepancies if d.kind == "value" and d.values is not None and d.leaf is not None), None)
    discrepancies[:] = [d for d in discrepancies if d.kind == "raised"]
    return (f"{_EXCLUDED} detected numerically at {'; '.join(at[:3])}{' ...' if len(at) > 3 else ''}: the op is not "
            "differentiable at this point (one-sided slopes differ), so no gradient is compared on this case"
            + _excused_words(excused) + _OTHERS)


def _excused_words(d) -> str:
    """What a numerical kink leaves unjudged, and why it may not be a kink (tryout11 #13: eigenvalues 1e-6 apart,
    the same forward agreeing with a correct backward, excused an un-symmetrised one): the probe sees the forward
    only, at steps of 1e-6 |x| and 1/8 of it, so a smooth feature narrower than those reads as a kink too."""
    if d is None:
        return ""
    a, b = (float(np.asarray(v).reshape(-1)[0]) for v in d.values)
    ix = f"[{_ix(d.index)}]" if d.index else ""
    return (f" (not judged: {d.oracles[0]} vs {d.oracles[1]} at leaf {d.leaf!r}{ix}, {a:.6g} vs {b:.6g}; the probe compares "
            "the forward's one-sided slopes at steps of 1e-6 |x| and 1/8 of it, so a smooth feature narrower than those -- "
            "eigenvalues within 1e-6, a steep smoothed max -- reads as a kink too: a point moved off it judges the backward)")



def _kinked_notes(case, kinked: dict, comparisons) -> list[str]:
    """What a case judged with some input elements left out says about them (tryout7 #13g): per estimate, how many
    of the elements were not compared and why (their finite-difference lines cross a kink: an average of two slopes
    is no derivative), the first few named.  The exact oracles still compared those elements with each other."""
    n = sum(l.value.size for l in case.grad_leaves())
    out = []
    for name, elems in kinked.items():
        if not any(name in c.oracles for c in comparisons):
            continue
        first = next(iter(elems.values()))
        why = first.split(": ", 1)[1] if first.startswith("finite differences: ") else first
        names = ", ".join(list(elems)[:4]) + (" ..." if len(elems) > 4 else "")
        none = [op for op in _under_test.user_ops(case) if not _outcome.compared_through(case, comparisons, kinked, op)]
        out.append(f"{name}: {len(elems)} of {n} {_outcome.KINK_ELEMENTS} ({names}): no derivative exists along "
                   f"their lines through this point ({why}); the other {n - len(elems)} were compared"
                   + (f"; none of them reaches user op {', '.join(repr(o) for o in none)}: its gradient was not judged "
                      "on this case" if none else ""))
    return out


def _discount_edge_of_precision(comparisons, discrepancies) -> str:
    """Value findings whose rounding noise could not be measured because the case's values off by a few ulps make
    the computation raise (``_check_noise.Unmeasured``, tagged ``edge`` by check's comparison): whether it runs at
    all is decided by rounding there, so its gradient has no precision to be held to (tryout7 #2: torch's own
    Cholesky of X X^T + 1e-6 I in float32, condition 7.5e6 ~ 1/eps32, was called wrong "only in float32").  Where
    they are the case's only findings but raises, the case is unjudged with the reason; never a discrepancy."""
    edge = [d for d in discrepancies if getattr(d, "edge", None)]
    if not edge or any(d.kind != "raised" and d not in edge for d in discrepancies):
        return ""
    dtype, why = edge[0].edge
    comparisons[:] = []
    discrepancies[:] = [d for d in discrepancies if d.kind == "raised"]
    return (f"at the edge of {dtype} precision: the gradients disagreed here ({edge[0].message.split(' — ')[0]}), but "
            f"with its {dtype} values off by {_tol.NOISE_ULPS:g} ulps the computation raises ({why}), so rounding "
            f"decides whether it runs at all (an ill-conditioned matrix, a value at a domain boundary): its gradient "
            f"cannot be held to {dtype} precision on this case, which is not judged")


def _discount_unsized_claim(comparisons, discrepancies) -> str:
    """Value findings that fail without a declared accuracy claim and pass only with it applied on the comparison's
    own scale (tagged ``unsized`` by check's comparison): the claim's scale, the sum of |path terms| through the
    code under test (``gradspec._check_claim``), could not be sized here, and the own scale counts paths that do
    not run through that code (a user op 1000x beyond its claim agreed on it, review15 #5).  Where they are the
    case's only findings but raises, the case is unjudged with the reason; never agree, never a discrepancy."""
    unsized = [d for d in discrepancies if getattr(d, "unsized", None)]
    if not unsized or any(d.kind != "raised" and d not in unsized for d in discrepancies):
        return ""
    comparisons[:] = []
    discrepancies[:] = [d for d in discrepancies if d.kind == "raised"]
    return (f"{unsized[0].unsized}, so it was not applied: the "
            f"gradients disagree beyond gradspec's own tolerance ({unsized[0].message.split(' — ')[0]}) and agree "
            "only on a scale that counts paths not running through the code under test; not judged")


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



AMPLIFIED = "float32 rounding amplified: "  # (the start of the note: tests and run notes find it)


def _discount_amplified_rounding(case, dtype, kinds, comparisons, discrepancies, skipped, notes) -> None:
    """A float32 case on which the estimates (finite differences, the jacobian: float64 evaluations) disagree with the
    code's float32 gradient, within the float32 tolerance scaled by kappa^2 / AMPLIFIED32_ULPS where the float32
    forward is kappa ulps off its float64 one (``outcome.forward32_ulps``): float32 rounding amplified by the case's
    conditioning can reach that far on a correct backward (``tolerances.AMPLIFIED32_ULPS``), so the estimates do not
    witness here and the case is not judged.  Any such disagreement beyond it, or one between two codes under test,
    keeps every discrepancy."""
    if dtype != "float32" or not discrepancies:
        return
    est = {n for n, o in kinds.items() if o.kind == "fd" or n == "jacobian"}
    value = [d for d in discrepancies if d.kind != "raised"]
    if not value or any(not set(d.oracles) & est or d.kind != "value" or d.abs_err is None or d.tolerance is None
                        for d in value):
        return
    kappa, said = _outcome.forward32_ulps(case)
    reach = kappa * kappa / _tol.AMPLIFIED32_ULPS
    if not reach > 1 or not all(d.abs_err <= d.tolerance * reach for d in value):
        return
    worst = max(value, key=lambda d: d.abs_err / d.tolerance)
    notes.append(f"{AMPLIFIED}{said}, so a correct backward through the same matrix can be off its float64 gradient "
                 f"by ~{kappa:.3g}^2 = {kappa * kappa:.3g} ulps ({reach:.3g} x the float32 tolerance's "
                 f"{_tol.AMPLIFIED32_ULPS:g}); the largest disagreement with the float64 estimates is "
                 f"{worst.abs_err / worst.tolerance:.3g} x the tolerance ({worst.oracles[0]} vs {worst.oracles[1]}, leaf "
                 f"{worst.leaf!r}): an ill-conditioned float32 case, not judged (float64 cases judge the formula)")
    why = ("not a witness on this case: it evaluates the graph in float64, and float32 rounding amplified by the "
           "case's conditioning reaches the disagreement (see the note)")
    comparisons[:] = [c for c in comparisons if not set(c.oracles) & est]
    discrepancies[:] = [d for d in discrepancies if d.kind == "raised"]
    for name in sorted(est & set(kinds)):
        skipped[name] = why


def _discount_shaky_estimates(kinds, fd_errs, comparisons, discrepancies, notes, full=None) -> None:
    """An estimate (finite differences, a finite-difference JVP) whose own error estimate exceeds
    FD_SHAKY of its value where it disagrees cannot witness against derivative formulas, nor against
    another estimate of the same forward: that pair becomes a note and counts neither way
    (gradspec.tolerances: FD_SHAKY) -- unless the gap exceeds FD_WITNESS_GAP times the estimate's whole
    error estimate (``full``: rounding included, where ``fd_errs`` holds only the part the shaky test
    judges), more than an error estimate was ever seen to be off by: then the gap is the code's, and the
    pair stays a discrepancy (a solve of condition 1e6 with its outer product transposed: FD off the rule
    by 300-600 x its error estimate of 0.2-0.5% was "too shaky", and the run agreed).  Two estimates: the
    FD-JVP jacobian of a clamp beside values of 5e4 (5674, error estimate 4640: 13 x) against finite
    differences (66999, which the rule matched) was a discrepancy of its own after the jacobian's pair with
    the rule had become this note."""
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
        whole = [float(np.asarray(full[d.oracles[i]][d.leaf])[d.index]) for i in est
                 if full and full.get(d.oracles[i], {}).get(d.leaf) is not None]
        gap = abs(float(d.values[0]) - float(d.values[1]))
        if e > _tol.FD_SHAKY * v and not gap > _tol.FD_WITNESS_GAP * max(whole + [e]):
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



def _discount_shaky_agreement(kinds, fd_errs, results, comparisons, refused, notes) -> None:
    """Where finite differences refused the case (``refused``: their steps do not resolve the forward), an estimate
    left (the FD-JVP jacobian) whose own error estimate exceeds FD_SHAKY of the values it agrees with witnesses
    nothing: its agreeing pairs are dropped, with a note, and the case is judged by what is left (tryout11 #7: a
    correct CG solve at a singular A, where no derivative exists, agreed on reference vs that JVP alone, its
    estimates 20 % off the backward, error estimate 0.12 of the values).  The twin of
    :func:`_discount_shaky_estimates`: so shaky an estimate witnesses neither way."""
    fd = refused.get("finite-differences")
    if not fd or not str(fd).startswith("finite differences:"):  # (a numerical refusal, not "not asked")
        return
    for c in list(comparisons):
        if not c.agreed:
            continue
        for k, name in enumerate(c.oracles):
            other = c.oracles[1 - k]
            if kinds[name].kind != "fd" or name not in fd_errs or kinds[other].kind == "fd":
                continue
            worst = 0.0
            for leaf, e in fd_errs[name].items():
                a, b = results.get(name, {}).get(leaf), results.get(other, {}).get(leaf)
                if e is None or a is None or b is None:
                    continue
                with np.errstate(all="ignore"):
                    scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)))
                    if scale > 0:
                        worst = max(worst, float(np.max(np.abs(np.asarray(e, dtype=np.float64)), initial=0.0)) / scale)
            if worst > _tol.FD_SHAKY:
                comparisons.remove(c)
                notes.append(f"{name} agreed with {other} only within its own error estimate, {worst:.2g} of the "
                             "values (its estimate changes with its step), where finite differences refused the "
                             "case: fn may not be differentiable at these inputs (a singular matrix, a kink), so "
                             "that pair vouches for nothing")
                break


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



def _ix(idx) -> str:
    return ", ".join(str(i) for i in idx)
