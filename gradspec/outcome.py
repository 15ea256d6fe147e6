"""The verdict rules of CONTRACT §3: which failures are discrepancies, which are excused, and why a
check or a run is inconclusive.  ``gradspec.check`` calls these; nothing here decides tolerances.

Three outcomes: ``agree`` (some pair of oracles produced gradients and every compared pair agreed),
``disagree`` (a discrepancy), ``inconclusive`` (nothing could be compared; ``reason`` says why).

* An oracle that raises is a discrepancy, whichever oracles are left, except:
  - torch raised and the code under test (every other derivative-formula oracle that raised) raised
    too: both refuse the case, which is the rule for engines (CONTRACT §4);
  - the forward itself raises on the case: the code under test never ran (inconclusive, the error
    is the reason);
  - a finite-difference estimate (a witness, not code under test) could not be formed: skipped.
* A leaf whose every path to a root runs through a user op: None and zeros are the same answer
  (whether it is None there is the user's vjp's / the twin's choice, not engine semantics), and torch
  refusing such a graph ("does not require grad") is torch's None for every leaf.
* A user op's torch twin that differs from the op's forward on the case (beyond rounding) is no
  witness there: a ``twin-mismatch`` note, and torch's gradient does not count.

Example::

    >>> from gradspec.outcome import exit_code
    >>> exit_code("agree"), exit_code("disagree"), exit_code("inconclusive")
    (0, 1, 3)
"""

from __future__ import annotations

import math

import numpy as np

from . import _check_nonfinite as _nonfinite
from ._private import case_budget as _case_budget
from ._private import structure as _structure
from ._private import under_test as _under_test
from ._private.fdstep import EPS32 as _EPS32
from ._private.fdstep import float32_valued as _float32_valued
from ._private.fdstep import noise_sigma as _noise_sigma
from ._private.float32_line import forward_steps as _forward_steps
from .ops.user import NOISE_ULPS as _NOISE_ULPS
from .oracles._fd_probes import STEP32 as _STEP32

__all__ = ["AGREE", "DISAGREE", "INCONCLUSIVE", "exit_code", "forward_error", "user_gated_leaves", "settle_errors", "has_user_ops",
           "torch_no_grad_as_none", "twin_mismatches", "precision_mismatches", "forward32_ulps", "is_torch", "TWIN_ULPS", "EMPTY_LEAVES",
           "run_notes", "nothing_finite", "OVERFLOW32", "FORWARD32", "counts_for_run", "SHAPES_ONLY",
           "CONSTANT_INPUTS", "UNUSED", "ZERO_SEEDS", "KINKED_OUT", "UNCOUNTED", "uncounted_reason",
           "run_count", "exercises"]

AGREE, DISAGREE, INCONCLUSIVE = "agree", "disagree", "inconclusive"
EXIT = {AGREE: 0, DISAGREE: 1, INCONCLUSIVE: 3}
NO_GRAD_MESSAGE = "does not require grad"
# Two implementations of one function agree to a few ulps (correct libraries: 1-2 ulps per elementary
# function, a few more for a composite).  A twin whose forward is off by more than 64 ulps of the
# value's magnitude computes another function there (softplus above its threshold: 160000 ulps at
# x = 21).  Erring low only costs torch its say on that case; finite differences and the jacobian
# still judge the op, so a low bar cannot hide a bug.
TWIN_ULPS = 64.0


def exit_code(status: str) -> int:
    """The command line's exit code for a status: 0 agree, 1 disagree, 3 inconclusive."""
    return EXIT[status]


def is_torch(oracle) -> bool:
    return isinstance(oracle, _classes()[0])


_CLASSES: list = []


def _classes() -> list:
    """(TorchOracle, UserOpSpec), imported on first use (the verdict rules run on every check: an
    import statement per call cost more than the test itself)."""
    if not _CLASSES:
        from .ops.user import UserOpSpec
        from .oracles.torch_oracle import TorchOracle

        _CLASSES[:] = [TorchOracle, UserOpSpec]
    return _CLASSES


def _must_match_torch(oracle) -> bool:
    """Oracles that run derivative formulas as an engine does (they raise where torch raises)."""
    return oracle.kind == "exact" and oracle.name != "jacobian" and not is_torch(oracle)


def forward_error(case) -> str | None:
    """``"Type: message"`` when the case's forward raises (the code under test never ran), else None (also when
    the forward was cut by the per-case timeout: it did not raise, it hung, which the oracles' timeouts report)."""

    def run():
        try:
            case.evaluate()
        except Exception as e:  # noqa: BLE001 - any failure of the forward is the answer
            return f"{type(e).__name__}: {e}"
        return None

    return _case_budget.timed_region(run, None)


def _is_user_op(spec) -> bool:
    return isinstance(spec, _classes()[1])


def has_user_ops(case) -> bool:
    """Whether a node of ``case`` runs a user op (code gradspec cannot see inside)."""
    return _structure.once(case, "has_user_ops", lambda: _any_user_op(case))


def _any_user_op(case) -> bool:
    specs = case._node_specs()  # (looked up once per check, for every rule and oracle; None outside one)
    user_op = _classes()[1]
    if specs is not None:
        return any(isinstance(spec, user_op) for spec in specs)
    return any(isinstance(case.spec(n.op), user_op) for n in case.nodes)


def _open_reach(case) -> dict | None:
    """For every leaf and node: the leaves that reach it along edges that do not enter a user op's
    node (None when the case has no user op)."""
    user = set()
    specs = case._node_specs()  # looked up once per check (None outside one)
    if specs is not None:
        user_op = _classes()[1]
        user = {n.name for n, spec in zip(case.nodes, specs) if isinstance(spec, user_op)}
    else:
        for n in case.nodes:
            try:
                if _is_user_op(case.spec(n.op)):
                    user.add(n.name)
            except Exception:  # noqa: BLE001 - an op that cannot be looked up gates nothing
                pass
    if not user:
        return None
    reach = {l.name: {l.name} for l in case.leaves}
    for n in case.nodes:
        reach[n.name] = set() if n.name in user else set().union(*[reach.get(i, set()) for i in n.inputs])
    return reach


def user_gated_leaves(case) -> set:
    """Leaves requiring grad whose every path to a root passes through a user op's node."""
    try:
        if not has_user_ops(case):  # (known once per structure: _open_reach's walk would find no user op)
            return set()
    except Exception:  # noqa: BLE001 - an op that cannot be looked up: _open_reach passes over it
        pass
    reach = _open_reach(case)
    if reach is None:
        return set()
    open_ = set().union(*[reach.get(r, set()) for r in case.roots])
    return {l.name for l in case.grad_leaves()} - open_


def torch_no_grad_as_none(case, results: dict, errors: dict, oracles: dict, gated: set) -> list[str]:
    """Torch refusing a root that depends on the differentiable leaves only through user ops ("does not
    require grad": the twins are not differentiable there) is torch's None for that root: torch's
    gradient is then that of the other roots (None for every leaf when there are none)."""
    if not gated:
        return []
    reach = _open_reach(case)
    wanted = {l.name for l in case.grad_leaves()}
    notes = []
    for name, (etype, msg, _tb) in list(errors.items()):
        if not (is_torch(oracles[name]) and NO_GRAD_MESSAGE in msg):
            continue
        try:
            grads, refused = _torch_vjp_of_differentiable_roots(case, oracles[name].device)
        except Exception:  # noqa: BLE001 - torch's own error stands
            continue
        if not refused or any(reach.get(r, set()) & wanted for r in refused):
            continue  # a root torch refuses although a leaf reaches it through table ops: torch's error stands
        del errors[name]
        results[name] = grads
        notes.append(f"{name} raised {etype}: {msg.splitlines()[0]} -- root(s) {', '.join(refused)} depend on the "
                     "differentiable leaves only through user ops whose torch twins are not differentiable there: "
                     "torch's gradient is taken as None from them (and None is compared as zeros)")
    return notes


def _torch_vjp_of_differentiable_roots(case, device: str) -> tuple[dict, list]:
    import torch

    from .oracles.torch_oracle import build_torch_graph

    env, roots = build_torch_graph(case, device)
    keep, seeds, refused = [], [], []
    for name, r, s in zip(case.roots, roots, case.seeds):
        if r.requires_grad:
            keep.append(r)
            seeds.append(None if s is None else torch.from_numpy(np.array(s, copy=True)).to(device))
        else:
            refused.append(name)
    if keep:  # (into the case's leaves only: a user op's torch code may hold tensors of its own)
        from ._private import torch_grad

        torch_grad.backward(keep, seeds, [env[l.name] for l in case.leaves if l.differentiable],
                            refused=torch_grad.refusing_node(keep) is not None)
    out = {}
    for leaf in case.grad_leaves():
        g = env[leaf.name].grad
        out[leaf.name] = None if g is None else g.detach().cpu().numpy()
    return out, refused


def settle_errors(case, results: dict, errors: dict, oracles: dict) -> tuple[list, dict]:
    """Which raising oracles are discrepancies.  Returns ``(raised, excused)``: ``raised`` is a list of
    ``(culprit, other, message, traceback)``, ``excused`` maps each excused oracle to the reason."""
    if not errors:
        return [], {}
    excused: dict = {}
    fwd = forward_error(case)
    if fwd is not None:
        for name in errors:
            excused[name] = f"the forward raised on this case ({fwd}): no gradient to check"
        return [], excused
    # torch refusing the case itself ("does not require grad", a seed of the wrong shape...): what engines
    # must copy.  Not when torch ran user code that failed (a torch Function under test, a twin, or torch
    # rejecting what a Function's backward returned): with user ops in the graph only the refusal of a
    # graph without gradients counts.
    has_user = _open_reach(case) is not None
    torch_raised = [n for n in errors if is_torch(oracles[n]) and _raised_inside_torch(errors[n][2])
                    and (not has_user or NO_GRAD_MESSAGE in errors[n][1])]
    returned = [n for n in results if _must_match_torch(oracles[n])]
    refused = [n for n in errors if _must_match_torch(oracles[n])]
    raised = []
    for name, (etype, msg, tb) in errors.items():
        o = oracles[name]
        first = msg.splitlines()[0] if msg else ""
        if o.kind == "fd":
            if etype in _PROGRAMMING_ERRORS and _raised_inside_gradspec(tb):
                # not the user's forward (or an op refusing a perturbed point, a ValueError): gradspec's own code
                excused[name] = (f"{name} failed inside gradspec itself ({etype}: {first}): a gradspec bug, not your "
                                 "code's -- please report it with this case; not compared")
            else:
                excused[name] = f"{name} could not estimate the gradient ({etype}: {first})"
            continue
        if torch_raised and not is_torch(o):
            excused[name] = f"{name} raised {etype} ({first}) and so did {torch_raised[0]}: both refuse this case"
            continue
        if name in torch_raised and refused and not returned:
            excused[name] = f"{name} raised {etype} ({first}) and so did {refused[0]}: both refuse this case"
            continue
        others = [n for n in returned if n != name] or [n for n in results if n != name]
        other = others[0] if others else next((n for n in errors if n != name), name)
        text = f"{name} raised {etype}: {msg}"
        if others:
            text += f" while {other} returned gradients"
        raised.append((name, other, text, tb))
    return raised, excused


_PROGRAMMING_ERRORS = frozenset({"AttributeError", "NameError", "UnboundLocalError", "TypeError", "KeyError",
                                 "IndexError", "AssertionError"})


def _innermost_file(tb: str) -> str | None:
    frames = [ln.strip() for ln in (tb or "").splitlines() if ln.strip().startswith('File "')]
    return frames[-1].split('"')[1] if frames else None


def _raised_inside_gradspec(tb: str) -> bool:
    """Whether the innermost Python frame of a formatted traceback is in gradspec's own package (its
    oracles' code, not a user op's forward or numpy called from it)."""
    import os

    path = _innermost_file(tb)
    return path is not None and os.path.abspath(path).startswith(os.path.dirname(os.path.abspath(__file__)) + os.sep)


def _raised_inside_torch(tb: str) -> bool:
    """Whether the innermost Python frame of a formatted traceback is in torch's own package."""
    import os

    import torch

    frames = [ln.strip() for ln in (tb or "").splitlines() if ln.strip().startswith('File "')]
    if not frames:
        return True  # no frames to tell: keep the old reading (torch refused)
    path = frames[-1].split('"')[1]
    return os.path.abspath(path).startswith(os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)


def twin_mismatches(case, dtype: str) -> list:
    """``twin-mismatch`` causes: the first element of each user-op node whose ``torch=`` twin computes
    another value than its forward (beyond rounding) on the case's own inputs, or raises there."""
    from .causes import Cause

    twins = []
    for n in case.nodes:
        spec = case.spec(n.op)
        if _is_user_op(spec) and spec.torch is not None:
            twins.append((n, spec))
    if not twins:
        return []
    try:
        env = case.evaluate()
    except Exception:  # noqa: BLE001 - no forward, no comparison of forwards
        return []
    import torch

    eps = float(np.finfo(np.float32 if dtype == "float32" else np.float64).eps)
    out = []
    for n, spec in twins:
        args = [env[i] for i in n.inputs]
        mine = np.asarray(env[n.name])
        try:
            with torch.no_grad():
                t = spec.torch(*[torch.from_numpy(np.array(a, copy=True)) for a in args], **n.params)
            theirs = t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)
        except Exception as e:  # noqa: BLE001 - a twin that raises where the forward does not is another function
            out.append(Cause("twin-mismatch", f"the torch twin of {n.op!r} raised where its forward did not: torch's "
                             f"gradient does not count on this case", node=n.name, op=n.op,
                             evidence=f"{n.name} = {n.op}({', '.join(n.inputs)}): twin raised {type(e).__name__}: {e}"))
            continue
        cause = _mismatch(n, args, mine, theirs, eps)
        if cause is not None:
            out.append(cause)
    return out


def precision_mismatches(case) -> list[tuple[str, str]]:
    """In a float32 case: each user-op node whose forward on the case's float32 inputs computes another
    function than its forward on the same values in float64 (beyond ``tolerances.FORWARD32_RTOL`` of the
    output's largest value), as ``(op, "node[index] = op(...): v in float32, w in float64 ...")``.  Finite differences
    and the jacobian's finite-difference JVPs evaluate the graph in float64, so at such a node they
    witness the float64 code, not the float32 code whose gradient is judged (an ill-conditioned solve,
    a float32-only branch of the forward)."""
    from . import tolerances as _tol

    nodes = [n for n in case.nodes if _is_user_op(case.spec(n.op))]
    if not nodes:
        return []
    try:
        env = case.evaluate()
    except Exception:  # noqa: BLE001 - no forward, no comparison of forwards
        return []
    out = []
    for n in nodes:
        args = [np.asarray(env[i]) for i in n.inputs]
        if not any(a.dtype == np.float32 for a in args):
            continue
        wide = [a.astype(np.float64) if a.dtype == np.float32 else a for a in args]
        try:
            with np.errstate(all="ignore"):
                ref = np.asarray(case.spec(n.op).forward(*wide, **n.params), dtype=np.float64)
        except Exception as e:  # noqa: BLE001 - raises in float64 only: FD cannot evaluate it either
            out.append((n.op, f"{n.name} = {n.op}({', '.join(n.inputs)}): its float64 forward raised {type(e).__name__}"))
            continue
        mine = np.asarray(env[n.name], dtype=np.float64)
        if ref.shape != mine.shape:
            out.append((n.op, f"{n.name} = {n.op}({', '.join(n.inputs)}): shape {mine.shape} in float32, {ref.shape} in float64"))
            continue
        with np.errstate(all="ignore"):
            same = (np.isnan(mine) & np.isnan(ref)) | (mine == ref)
            diff = np.where(same, 0.0, np.abs(mine - ref))
            fin = np.isfinite(ref) & np.isfinite(mine)
            top = float(np.max(np.maximum(np.abs(ref), np.abs(mine)), where=fin, initial=0.0))
            bad = ~(diff <= _tol.FORWARD32_RTOL * np.maximum(top, np.abs(ref)) + _tol.TINY32)
        if bad.any():
            over = bad & ~np.isfinite(mine) & np.isfinite(ref)  # an overflow first: it is what the user must hear
            idx = tuple(int(i) for i in np.argwhere(over if over.any() else bad)[0])
            at = ", ".join(map(str, idx))
            why = OVERFLOW32 if over.any() else f"the output's largest value {top:.3g}" if top > 0 else ""
            out.append((n.op, f"{n.name}[{at}] = {n.op}({', '.join(n.inputs)}): {float(mine[idx])!r} in float32, "
                               f"{float(ref[idx])!r} in float64" + (f" ({why})" if why else "")))
    return out


def forward32_ulps(case) -> tuple[float, str]:
    """In a float32 case: the largest error of a user op's float32 forward against its float64 forward at the same
    input values, in float32 ulps of that output's largest value (``tolerances.AMPLIFIED32_ULPS``), with the node
    and its values as a sentence; (0.0, "") without user ops fed float32 values or where a forward fails."""
    eps32 = float(np.finfo(np.float32).eps)
    nodes = [n for n in case.nodes if _is_user_op(case.spec(n.op))]
    try:
        env = case.evaluate() if nodes else {}
    except Exception:  # noqa: BLE001 - no forward, nothing measured
        return 0.0, ""
    best, said = 0.0, ""
    for n in nodes:
        args = [np.asarray(env[i]) for i in n.inputs]
        if not any(a.dtype == np.float32 for a in args):
            continue
        try:
            with np.errstate(all="ignore"):
                ref = np.asarray(case.spec(n.op).forward(*[a.astype(np.float64) if a.dtype == np.float32 else a
                                                           for a in args], **n.params), dtype=np.float64)
        except Exception:  # noqa: BLE001 - (precision_mismatches says it)
            continue
        mine = np.asarray(env[n.name], dtype=np.float64)
        with np.errstate(all="ignore"):
            top = float(np.max(np.abs(ref), initial=0.0))
            ulps = float(np.max(np.abs(mine - ref), initial=0.0)) / (eps32 * top) if top > 0 else 0.0
        if np.isfinite(ulps) and ulps > best:
            best, said = ulps, (f"{n.name} = {n.op}({', '.join(n.inputs)}): its float32 forward is off its float64 "
                                f"forward by {ulps:.3g} float32 ulps of its largest value {top:.3g}")
    return best, said


# What precision_mismatches says of a float32 forward that is not finite where the float64 one is (a Result counts
# the cases: tryout7 #13a, an "OK" whose float32 forward overflowed to inf on 7 of 40 cases, said nowhere but a note)
OVERFLOW32 = "not finite in float32 where float64 is: an overflow of the float32 code"
FORWARD32 = "float32 forward vs float64 forward at the same inputs: "


def _mismatch(n, args, mine, theirs, eps):
    from .causes import Cause

    if np.shape(theirs) != np.shape(mine):
        return Cause("twin-mismatch", f"the torch twin of {n.op!r} returns shape {np.shape(theirs)}, the forward "
                     f"{np.shape(mine)}: torch's gradient does not count on this case", node=n.name, op=n.op,
                     evidence=f"{n.name} = {n.op}({', '.join(n.inputs)}): shapes {np.shape(mine)} vs {np.shape(theirs)}")
    a = np.asarray(mine, dtype=np.float64)
    b = np.asarray(theirs, dtype=np.float64)
    with np.errstate(all="ignore"):
        same_nonfinite = (np.isnan(a) & np.isnan(b)) | (a == b)
        diff = np.where(same_nonfinite, 0.0, np.abs(a - b))
        allowed = TWIN_ULPS * eps * np.maximum(np.abs(a), np.abs(b))
        # (NaN at the same position on both sides is the same value: its allowance, ulps of NaN, is NaN)
        bad = ~(same_nonfinite | (diff <= allowed))
        # An infinity is matched only by the same infinity (a == b above): beside anything else its allowance is inf
        # and diff <= inf held, so inf vs -inf or 1.0 vs inf counted as the same function (review16a #3).
        bad |= (np.isinf(a) | np.isinf(b)) & ~same_nonfinite
    if not bad.any():
        return None
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    at = ", ".join(map(str, idx))
    ins = []
    for name, v in zip(n.inputs, args):
        v = np.asarray(v)
        if v.shape == a.shape:
            ins.append(f"{name}[{at}] = {float(v[idx])!r}")
        elif v.size == 1:
            ins.append(f"{name} = {float(v.reshape(())):.17g}")
    top = max(abs(a[idx]), abs(b[idx]))
    rel = float(diff[idx] / top) if top and np.isfinite(top) else float("inf")  # (an infinity on one side: inf)
    return Cause(
        "twin-mismatch",
        f"the torch twin of {n.op!r} is a different function at {n.name}[{at}] (its value differs from the forward's "
        f"beyond rounding): torch's gradient does not count on this case; finite differences and the jacobian judge it",
        node=n.name, op=n.op,
        evidence=(f"{n.name} = {n.op}({', '.join(n.inputs)}) at {n.name}[{at}]"
                  + (f" ({', '.join(ins)})" if ins else "")
                  + f": forward {float(a[idx])!r} vs torch twin {float(b[idx])!r} (relative difference {rel:.3g}, "
                  f"rounding allows {TWIN_ULPS:g} ulps = {TWIN_ULPS * eps:.3g}); {int(bad.sum())} of {a.size} elements differ"),
    )


EMPTY_LEAVES = "every leaf that requires grad has 0 elements"  # the start of check's note on such a case
KINK_ELEMENTS = "input elements not compared at a kink"  # in check's note on a case judged without them


# Why a run does not count a case that compared no value (tryout9 #1: a log1mexp NaN on its whole declared domain left
# only cases where it ran on 0 elements, and verify_* said "agree, 30/30 judged, every pair agreed")
SHAPES_ONLY = ("no gradient value compared: every leaf that requires grad, or every input of the code under test, has 0 "
               "elements (only the gradients' shapes and dtypes were compared)")


def counts_for_run(verdict, op: str | None = None) -> bool:
    """Whether a run (``verify_*``, ``fuzz``) counts this case's comparisons: a disagreement always; an agreement
    only where gradient values were compared through an op whose gradient the case exercised (:func:`run_count`):
    op ``op`` (a verify run's code under test) when given, else any op of the case (fuzz: the engine's ops).
    ``gs.check`` on a case whose leaves that require grad all have 0 elements compares the gradients' shapes and
    dtypes (a wrong one is a finding) and agrees with a note (:data:`EMPTY_LEAVES`); an op that ran on 0 elements
    only computed nothing either.  A run of such cases compared no value and must not read as a checked gradient."""
    return bool(run_count(verdict, op)[0])


def run_count(verdict, op: str | None = None) -> tuple[list, str]:
    """``(ops, why)``: the ops a run counts this case for, and why it counts it for none.  ``ops``: of ``[op]``
    when given, else of the case's ops (in node order), those whose gradient the case exercised (:func:`_unexercised`)
    and compared (:func:`compared_through`); every one on a disagreement (a finding always counts); none on a case
    that did not agree (its own reason says why).  ``why``: one of :data:`UNCOUNTED` when an agreeing case counts
    for no op (the first of :data:`_CASE_REASONS` its ops give), else "".  One mechanism for ``verify_*`` (the op
    under test) and ``fuzz`` (every op: a case whose roots are all seeded with zeros compares only zeros)."""
    case = verdict.case
    nodes = getattr(case, "nodes", None) or ()
    ops = [op] if op is not None else list(dict.fromkeys(n.op for n in nodes))
    if verdict.status == DISAGREE:
        return ops, ""
    if verdict.status != AGREE:
        return [], ""
    if not verdict.comparisons or any(str(n).startswith(EMPTY_LEAVES) for n in verdict.notes):
        return [], SHAPES_ONLY
    if op is None and not nodes:  # (leaves as roots: the values compared are the seeds passed through)
        return [None], ""
    kinked = getattr(verdict, "unjudged_elements", None)
    why = _unexercised_each(case, ops)
    for o in ops:
        if not why[o] and not compared_through(case, verdict.comparisons, kinked, o):
            why[o] = KINKED_OUT
    counted = [o for o in ops if not why[o]]
    return counted, "" if counted else next(r for r in _CASE_REASONS if r in why.values())


def compared_through(case, comparisons, kinked: dict | None, op: str) -> bool:
    """Whether some of a case's ``comparisons`` judged a gradient element with a path through op ``op`` (from the
    graph's structure): always, but where an estimate left elements out at kinks (``kinked``: ``Verdict.unjudged_elements``) and
    compared only elements of leaves that reach no node of ``op`` (review14 #2: another user op's leaves)."""
    if not kinked:
        return True
    from .oracles._fd_refine import element_name

    reach = _under_test.reaching_leaves(case, op)
    leaves = [l for l in case.grad_leaves() if l.name in reach]
    # the elements of those leaves, by name (an estimate names the ones it left out the same way)
    elements = [element_name(leaves, j) for j in range(sum(l.value.size for l in leaves))]
    seen: dict = {}
    for c in comparisons:
        ests = [o for o in c.oracles if o in kinked]
        if all(_compared_moves(case, elements, frozenset(kinked[o]), op, seen) for o in ests):
            return True
    return False


def _compared_moves(case, elements: list, left_out: frozenset, op: str, seen: dict) -> bool:
    """Whether an element of ``elements`` not ``left_out`` moves an input of ``op`` (per element, not per leaf: a
    leaf split by indexing between two user ops reaches each with some of its elements only).  ``seen``: answers by
    ``left_out`` (the estimates of one check usually leave out the same elements)."""
    if left_out not in seen:
        compared = [e for e in elements if e not in left_out]
        seen[left_out] = bool(compared) and (
            len(compared) == len(elements) or _moves(case, compared, op))
    return seen[left_out]


def _moves(case, compared: list, op: str) -> bool:
    from .oracles._fd_refine import moves_op_inputs

    try:
        return moves_op_inputs(case, compared, op)
    except Exception:  # noqa: BLE001 - the forward raising here (it ran in gs.check): judged per leaf, as before
        return True


# Why a verify_* run does not count an agreeing case whose values were compared, but none through the op under test
# (review14 #4: a 100x-wrong vjp agreed on such cases, each counted as a judged case of the op)
CONSTANT_INPUTS = ("the gradient of the code under test was not exercised: no leaf that requires grad reaches its "
                   "inputs")
UNUSED = "the gradient of the code under test was not exercised: it reaches no root (its output is not used)"
ZERO_SEEDS = "the gradient of the code under test was not exercised: every root it reaches is seeded with zeros"
KINKED_OUT = ("no gradient element with a path through the code under test was compared: the ones it reaches sit "
              "at kinks")
UNCOUNTED = (SHAPES_ONLY, CONSTANT_INPUTS, UNUSED, ZERO_SEEDS, KINKED_OUT)  # a run's reasons for not counting a case
# a case that counts for none of its ops (fuzz): the reason of the op nearest to being counted
_CASE_REASONS = (ZERO_SEEDS, KINKED_OUT, UNUSED, CONSTANT_INPUTS, SHAPES_ONLY)


def uncounted_reason(verdict, op: str | None = None) -> str:
    """Why a run does not count an agreeing case (one of :data:`UNCOUNTED`); "" when it counts it or the case did
    not agree (its own reason says why)."""
    return run_count(verdict, op)[1]


def exercises(case, op: str) -> bool:
    """Whether ``case``, by its structure and seeds, exercises op ``op``'s gradient (:func:`_unexercised`): not a case
    whose reason would be :data:`CONSTANT_INPUTS`, :data:`UNUSED` or :data:`ZERO_SEEDS` (an op on 0 elements is:
    its gradients' shapes are compared).  ``verify_*`` draws only such cases (fixrun #4: 8 of 60 were not)."""
    return _unexercised(case, op) not in (CONSTANT_INPUTS, UNUSED, ZERO_SEEDS)


def _unexercised(case, op: str) -> str:
    """Why op ``op``'s gradient was not exercised on ``case`` ("" when it was): :func:`_unexercised_each`."""
    return _unexercised_each(case, [op])[op]


def _unexercised_each(case, ops) -> dict:
    """Per op of ``ops``: "" when some node of the op has elements in its output and in an input that a leaf
    requiring grad (with elements) reaches, and reaches a root whose seed is not all zeros (an implicit seed is 1):
    its vjp ran on a cotangent that reaches a compared gradient (verify_op of sin, 60 cases, seed 3: 5 where it
    feeds no root, 3 where every root it feeds is seeded with zeros).  Else why not (structure and seeds only: a
    cotangent that vanishes on the way, as through floor, is not seen).  The graph is walked once for all ops."""
    try:
        shapes = case.shapes()
    except Exception:  # noqa: BLE001 - shapes that cannot be worked out: the check compared what it compared
        return {op: "" for op in ops}
    fed_names = {l.name for l in case.grad_leaves() if l.value.size}  # names a leaf requiring grad reaches
    for n in case.nodes:  # (nodes come in topological order: a node's inputs before it)
        if any(i in fed_names for i in n.inputs):
            fed_names.add(n.name)
    used = case.ancestors(case.roots)
    live = [r for r, s in zip(case.roots, case.seeds) if s is None or np.any(np.asarray(s) != 0)]
    reached = case.ancestors(live) if live else set()
    out = {}
    for op in ops:
        mine = [n for n in case.nodes if n.op == op and math.prod(shapes[n.name])
                and any(math.prod(shapes[i]) for i in n.inputs)]
        fed = [n for n in mine if any(math.prod(shapes[i]) and i in fed_names for i in n.inputs)]
        out[op] = (SHAPES_ONLY if not mine else CONSTANT_INPUTS if not fed
                   else UNUSED if not any(n.name in used for n in fed)
                   else "" if any(n.name in reached for n in fed) else ZERO_SEEDS)
    return out


def run_notes(notes: list, verdict) -> None:
    """Carry a case's notes into a run's notes, one per op and kind (the first case's evidence)."""
    for n in getattr(verdict, "notes", ()):
        if getattr(n, "id", None) == "twin-mismatch":
            key = f"twin-mismatch on op {n.op!r}:"
            text = (f"{key} its torch twin is another function on some cases, where torch's gradient did not count "
                    f"(finite differences and the jacobian judged the op there); first: {n.evidence}")
        elif str(n).startswith(FORWARD32):  # one run note (its evidence differs from case to case)
            key, text = FORWARD32, f"{FORWARD32}(first case) {str(n)[len(FORWARD32):]}"
        elif KINK_ELEMENTS in str(n):  # one run note: which elements, and how many, differ from case to case
            key = "on some cases, input elements whose finite-difference line crosses a kink were not compared:"
            text = f"{key} the cases' other elements were (first: {n})"
        elif str(n).startswith(_nonfinite.CASE_KEY):  # one run note counting the cases
            _nonfinite.run_note(notes, str(n))
            continue
        elif str(n).startswith(EMPTY_LEAVES):  # one run note, however many such cases (their leaves differ)
            key = "on some cases every leaf that requires grad has 0 elements:"
            text = f"{key} there only the gradients' shapes and dtypes were compared (first: {str(n)[len(EMPTY_LEAVES):]})"
        else:
            text = str(n)
            key = text
        if not any(str(x).startswith(key) for x in notes):
            notes.append(text)


def run_status(cases: int, discrepancies: int, comparisons: int, inconclusive=None, errors=()) -> tuple[str, str]:
    """``(status, reason)`` of a run (fuzz, verify_*): ``disagree`` on any finding; ``inconclusive`` when
    no case ran or no pair of oracles was compared on any case (the most common per-case reasons,
    or the campaign's errors, say why); else ``agree``."""
    if discrepancies:
        return DISAGREE, ""
    if cases and comparisons:
        return AGREE, ""
    why = [f"{r} ({k} case{'s' if k != 1 else ''})" for r, k in dict(inconclusive or {}).items()][:3]
    why += [str(e) for e in errors][:3]
    head = "no case ran" if not cases else f"no pair of oracles was compared in {cases} case{'s' if cases != 1 else ''}"
    return INCONCLUSIVE, head + (": " + "; ".join(why) if why else "")


def numerical_kinks(case, h_rel: float = 1e-6, shrink: float = 8.0) -> list[str]:
    """User ops that declare no ``kink_distance`` but are not differentiable at the case's point,
    detected numerically: ``"node[index] = op(...) (kink|jump)"`` for each such node.

    Along a random direction, the one-sided slopes ``D+(h)`` and ``D-(h)`` of a differentiable
    function differ by ``O(h)``: shrinking ``h`` 8-fold shrinks the gap 8-fold.  At a kink the gap
    stays (the slopes differ), at a jump it grows 8-fold.  A gap that does not shrink and is far
    above the rounding of the differences (1000 eps |f| / h) marks the element.
    """
    out = []
    try:
        env = case.evaluate()
    except Exception:  # noqa: BLE001 - no forward, nothing to probe
        return out
    rng = np.random.default_rng(0)
    eps = float(np.finfo(np.float64).eps)
    for n in case.nodes:
        spec = case.spec(n.op)
        if not _is_user_op(spec) or spec.kink_distance is not None:
            continue
        args = [np.asarray(env[i]) for i in n.inputs]
        floats = [a.dtype.kind == "f" for a in args]
        if not any(floats):
            continue
        x = [np.asarray(a, dtype=np.float64) if f else a for a, f in zip(args, floats)]
        t = [rng.standard_normal(a.shape) * 1e-6 * np.maximum(1.0, np.abs(a)) if f else None
             for a, f in zip(x, floats)]
        try:
            with np.errstate(all="ignore"):
                f0 = np.asarray(spec.forward(*x, **n.params), dtype=np.float64)
                f32 = _float32_inside(spec, x, t, n.params, f0)
                if f32:  # a staircase of float32 quanta at 1e-6 |x| (a "jump"): probe at the float32 step
                    t = [d / 1e-6 * _STEP32 if d is not None else None for d in t]
                gaps = []
                for s in (1.0, 1.0 / shrink):
                    up = np.asarray(spec.forward(*[a + s * d if d is not None else a for a, d in zip(x, t)], **n.params),
                                    dtype=np.float64)
                    dn = np.asarray(spec.forward(*[a - s * d if d is not None else a for a, d in zip(x, t)], **n.params),
                                    dtype=np.float64)
                    gaps.append((np.abs((up - f0) - (f0 - dn)) / s, np.abs(f0) + np.abs(up) + np.abs(dn), s))
        except Exception:  # noqa: BLE001 - a forward that fails off the point says nothing about a kink
            continue
        (g1, _m1, _s1), (g2, m2, s2) = gaps
        noise = 1e3 * (_EPS32 if f32 else eps) * m2 / s2
        with np.errstate(all="ignore"):
            bad = np.isfinite(g2) & (g2 > noise) & (g2 > 0.5 * g1)
            if np.any(bad):
                bad &= g2 > _measured_noise(spec, x, t, n.params, s2) / s2
        if np.shape(bad) and bad.any() or not np.shape(bad) and bool(bad):
            idx = tuple(int(i) for i in np.argwhere(np.atleast_1d(bad))[0]) if np.shape(bad) else ()
            kind = "jump" if float(np.atleast_1d(g2)[idx if idx else 0]) > 2 * float(np.atleast_1d(g1)[idx if idx else 0]) else "kink"
            at = f"{n.name}[{', '.join(map(str, idx))}]" if idx else n.name
            out.append(f"{at} = {n.op}({', '.join(n.inputs)}) ({kind})")
    return out


def _measured_noise(spec, x, t, params, s) -> np.ndarray | float:
    """The floor a gap |f(x + s t) - 2 f(x) + f(x - s t)| must stand above to be a kink or a jump rather than
    noise: an ill-conditioned float64 solve is noisy at every scale (the rounding of A amplified by its
    condition: ~1e-10 |f| at condition 1e6, 1e3 x the eps-based floor above), and noise grows like a jump,
    1 / s, as the step shrinks.  Measured on FD_NOISE_POINTS points spanning s t about x
    (``fdstep.noise_sigma``: the median 4th difference, which ignores the <= 4 of 12 windows a kink or jump
    inside the line spoils), the three values' noise sqrt(6) sigma, FD_NOISE_SIGMAS of it; forward failing
    there: no floor (0)."""
    from . import tolerances as _tol  # (as in float32_mismatch above)

    k = _tol.FD_NOISE_POINTS
    try:
        line = np.stack([np.asarray(spec.forward(*[a + (j - (k - 1) / 2) / k * s * d if d is not None else a
                                                     for a, d in zip(x, t)], **params), dtype=np.float64)
                         for j in range(k)])
    except Exception:  # noqa: BLE001 - no line, no floor: the eps-based one stands
        return 0.0
    return _tol.FD_NOISE_SIGMAS * np.sqrt(6.0) * _noise_sigma(line)


def _float32_inside(spec, x, t, params, f0) -> bool:
    """The op computes in float32 inside: its outputs at x and at x + t (t ~1e-6 |x|: a float64 op's output
    there has bits far below float32's) are all float32 numbers (gradspec._private.fdstep.float32_valued), or
    it computes in float32 behind float64 arithmetic (``float32_seen``: a torch Function seen casting to float32,
    verify.torch_float32; or its outputs step like float32 rounding, _private.float32_line.forward_steps)."""
    if getattr(spec, "float32_seen", "") or _forward_steps(
            spec.name, lambda b: spec.forward_batched(b, params, 1), [np.asarray(a) for a in x], _NOISE_ULPS):
        return True
    if not _float32_valued(f0):
        return False
    up = spec.forward(*[a + d if d is not None else a for a, d in zip(x, t)], **params)
    return _float32_valued(np.asarray(up, dtype=np.float64))


def _holds(got, want) -> bool:
    """A gradient dtype that holds the leaf's: a real float at least as precise (an engine that accumulates
    float32 leaves' gradients in float64 loses nothing; float32 gradients of float64 leaves do)."""
    return got.kind == "f" and got.itemsize >= want.itemsize


def dtype_mismatches(case, results: dict, oracles: dict) -> list[tuple[str, str, str, str]]:
    """``(oracle, leaf, got, want)`` for each gradient an engine-like oracle (the reference, torch, an
    engine under test) returned in a dtype that cannot hold the leaf's gradient: not a real float, or
    less precise than the leaf (CONTRACT §3: a wrong dtype is a discrepancy).  torch's ``.grad`` has the
    leaf's dtype; a more precise one is accepted."""
    want = {l.name: l.value.dtype for l in case.grad_leaves()}
    out = []
    torch_oracle = _classes()[0]
    for name, res in results.items():
        o = oracles.get(name)
        # (_must_match_torch(o) or is_torch(o)), inlined: this runs on every check
        if o is None or not (isinstance(o, torch_oracle) or o.kind == "exact" and o.name != "jacobian"):
            continue
        for leaf, g in res.items():
            dt = getattr(g, "dtype", None)
            w = want.get(leaf)
            # (the leaf's own dtype object, the common case, holds itself: leaves that require grad are floats)
            if g is not None and w is not None and dt is not None and dt is not w and not _holds(dt, w):
                out.append((name, leaf, str(dt), str(w)))
    return out


def nothing_finite(case, results: dict) -> str:
    """Why an agreement judges nothing ("" when it does): every gradient element every oracle gave is NaN or
    infinite (a NaN input: tanh(nan) has gradient nan), and NaN agreeing with NaN proves nothing about the
    rule.  Elements where some oracle is finite are compared as usual (a NaN pattern that differs is found)."""
    if _first_small_finite(results):  # (the common case, without an array call per gradient)
        return ""
    grads = [np.asarray(g) for r in results.values() for g in r.values() if g is not None]
    if not grads or any(g.dtype.kind == "f" and g.size and np.isfinite(g).any() for g in grads):
        return ""
    if not any(g.size for g in grads):
        return ""
    bad = [f"{l.name} holds {_nonfinite_kinds(l.value)}" for l in case.leaves
           if l.value.dtype.kind == "f" and not np.isfinite(l.value).all()]
    where = f" ({'; '.join(bad[:3])})" if bad else ""
    return (f"every gradient is NaN or infinite at this point{where}: the oracles' NaNs agree, which says nothing "
            "about the gradient rules, so nothing is judged; check a point with finite values")


_FINITE_SUM = 32  # elements (larger gradients: numpy's isfinite)


def _first_small_finite(results: dict) -> bool:
    """Whether the first gradient of at most ``_FINITE_SUM`` floats is finite throughout (its Python sum is finite
    only where every element is): then some gradient element is finite."""
    for r in results.values():
        for g in r.values():
            if type(g) is np.ndarray and g.dtype.kind == "f" and 0 < g.size <= _FINITE_SUM:
                return math.isfinite(sum(g.ravel().tolist()))
    return False


def _nonfinite_kinds(v) -> str:
    kinds = [k for k, test in (("NaN", np.isnan), ("inf", np.isinf)) if test(v).any()]
    return " and ".join(kinds)
