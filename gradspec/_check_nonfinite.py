"""Gradient elements that every compared oracle gives as NaN or infinite: not compared, and said (CONTRACT §3: a
NaN where the others are finite is a discrepancy; a NaN every oracle agrees on is no evidence either way).

``gs.check`` compares only finite elements (``check._compare``: equal NaN/inf patterns pass, the finite rest is held
to the tolerance).  Where some elements are non-finite in every oracle, the case's verdict carries a note naming them
and why, from the case's forward: a non-finite input there, the first node whose output is NaN or infinite while its
inputs are finite (a 0/0 or an overflow made inside the forward: a masked mean over a row with no element counted),
or, with the forward finite, a derivative that is itself infinite or undefined there.  A case where every element is
so is inconclusive (``outcome.nothing_finite``).  A run (``verify_*``) counts the cases (``run_note``).

Example::

    >>> import numpy as np, gradspec as gs
    >>> case = gs.Case.build({"x": np.array([np.nan, 1.0])}, [("y", "tanh", ["x"], {})], ["y"], [np.ones(2)])
    >>> [str(n) for n in gs.check(case).notes if CASE_KEY in str(n)][0][:60]
    'gradient elements NaN or infinite in every oracle, not compa'
"""

from __future__ import annotations

import math
import re

import numpy as np

__all__ = ["CASE_KEY", "RUN_KEY", "agreed_nonfinite", "run_note", "made_how", "outputs_words"]

CASE_KEY = "gradient elements NaN or infinite in every oracle, not compared"
RUN_KEY = "gradient elements NaN or infinite in every oracle were not compared on"
_SHOWN = 4  # elements named per note (the count says how many there are)


def _finite(g) -> bool:
    """Whether every element of ``g`` is finite (a Python sum for small arrays: finite only where every term is;
    an overflowing sum of finite values falls through to numpy's test)."""
    if g.size <= 32 and math.isfinite(sum(g.ravel().tolist())):
        return True
    return bool(np.isfinite(g).all())


def agreed_nonfinite(case, results: dict, comparisons) -> str:
    """The note for the elements every compared oracle gives as NaN or infinite, or "" where there are none.
    Called on a case without discrepancies: every compared pair had equal NaN/inf patterns."""
    names = [n for n in dict.fromkeys(o for c in comparisons for o in c.oracles) if n in results]
    masks: dict = {}
    for leaf in case.grad_leaves():
        grads = [results[n].get(leaf.name) for n in names]
        grads = [np.asarray(g) for g in grads if g is not None]
        if not grads or any(g.dtype.kind != "f" or g.shape != grads[0].shape or _finite(g) for g in grads):
            continue  # (a None gradient is zeros: finite; a shape mismatch is a finding elsewhere)
        bad = np.logical_and.reduce([~np.isfinite(g) for g in grads])
        if bad.any():
            masks[leaf.name] = bad
    if not masks:
        return ""
    where = "; ".join(_elements(name, m) for name, m in masks.items())
    return (f"{CASE_KEY} ({where}): NaN agreeing with NaN says nothing about the gradient rules, the other elements "
            f"were compared; {_why(case, masks)}")


def _elements(name: str, bad: np.ndarray) -> str:
    at = np.argwhere(bad)
    if bad.ndim == 0:
        return f"{name} (1 of 1)"
    rows = bad.ndim > 1 and all(bad[tuple(ix[:-1])].all() for ix in at)
    if rows:  # whole rows along the last axis: named as rows
        seen = list(dict.fromkeys(tuple(int(i) for i in ix[:-1]) for ix in at))
        shown = [f"{name}[{', '.join(map(str, r))}, :]" for r in seen[:_SHOWN]]
    else:
        shown = [f"{name}[{', '.join(str(int(i)) for i in ix)}]" for ix in at[:_SHOWN]]
    more = ", ..." if len(at) > _SHOWN and (not rows or len(seen) > _SHOWN) else ""
    return f"{', '.join(shown)}{more}: {len(at)} of {bad.size} elements"


def _why(case, masks: dict) -> str:
    """Why those elements are not finite, from the case's values and forward."""
    held = [f"{l.name} holds {_kinds(np.asarray(l.value)[masks[l.name]])} there" for l in case.leaves
            if l.name in masks and np.asarray(l.value).dtype.kind == "f"
            and np.asarray(l.value).shape == masks[l.name].shape and not np.isfinite(np.asarray(l.value)[masks[l.name]]).all()]
    if held:
        return "; ".join(held) + ": check a point with finite values"
    try:
        env = case.evaluate()
    except Exception:  # noqa: BLE001 - no forward to read: the elements are named, the cause is not
        return "the forward could not be re-run to tell why"
    for n in case.nodes:
        out = env.get(n.name)
        if not isinstance(out, np.ndarray) or out.dtype.kind != "f" or _finite(out):
            continue
        ins = [env.get(i) for i in n.inputs]
        if any(isinstance(a, np.ndarray) and a.dtype.kind == "f" and not _finite(a) for a in ins):
            continue  # (a non-finite input: an earlier node or leaf made it)
        at = [", ".join(str(int(i)) for i in ix) for ix in np.argwhere(~np.isfinite(out))[:_SHOWN]]
        kind = _kinds(out[~np.isfinite(out)])
        outside = _outside_domain(n, ins, ~np.isfinite(out)) if "NaN" in kind else ""
        how = outside or made_how(kind)
        return (f"the forward is {kind} from node {n.name} = {n.op}({', '.join(n.inputs)}) on (output "
                f"{'; '.join(f'[{a}]' for a in at)}), its inputs finite: {how}")
    return ("the forward is finite: every oracle finds the derivative infinite or undefined at this point (e.g. sqrt "
            "or x/0 at 0)")


def _outside_domain(node, ins: list, bad: np.ndarray) -> str:
    """Words for a NaN made where a finite input of ``node`` lies outside its op's real domain (sqrt(-1), log(-1),
    pow(-1, 0.5): review16a #4, once said to be a 0/0), or "" (the declared domains: ``ops.get(op).domains_for``;
    an edge or a kink point is inside: log(0) is no domain error)."""
    try:
        from .ops import get

        doms = get(node.op).domains_for(len(ins))
    except Exception:  # noqa: BLE001 - an op the table does not know: no domain to read
        return ""
    for name, a, d in zip(node.inputs, ins, doms):
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f" or d is None:
            continue
        try:
            at = np.broadcast_to(a, bad.shape)[bad]  # the input's values at the NaN outputs
        except ValueError:  # (not elementwise: any of its values)
            at = a.ravel()
        off = at[(at < d.lo) | (at > d.hi)]
        if off.size:
            return (f"{name} = {float(off[0])!r} there is outside {node.op}'s real domain [{d.lo:g}, {d.hi:g}] (a "
                    "value where it is not defined): keep its argument inside the domain")
    return ""


def made_how(kind: str) -> str:
    """What makes a NaN (or an inf) from finite inputs inside a forward."""
    return ("a 0/0, inf-inf or 0·inf made inside its forward (e.g. a division by a count or a norm that is 0 there: a "
            "mean over a row with no element kept)" if "NaN" in kind else "an overflow or an x/0 made inside its forward")


def outputs_words(outs: list) -> str:
    """Which elements of the outputs ``outs`` are not finite: "output [1] NaN" (up to _SHOWN per output)."""
    words = []
    for k, o in enumerate(outs):
        o = np.asarray(o)
        if o.dtype.kind != "f" or _finite(o):
            continue
        at = [", ".join(str(int(i)) for i in ix) for ix in np.argwhere(~np.isfinite(o))]
        name = "output" if len(outs) == 1 else f"output {k}"
        words.append(f"{name} {'; '.join(f'[{a}]' for a in at[:_SHOWN])}{', ...' if len(at) > _SHOWN else ''} "
                     f"{_kinds(o[~np.isfinite(o)])} ({len(at)} of {o.size} elements)")
    return "; ".join(words)


def _kinds(v) -> str:
    return " and ".join(k for k, test in (("NaN", np.isnan), ("inf", np.isinf)) if test(v).any()) or "non-finite"


_COUNT = re.compile(re.escape(RUN_KEY) + r" (\d+) case\(s\)")


def run_note(notes: list, text: str) -> None:
    """Carry a case's note into a run's notes: one note counting the cases (the first case's words kept)."""
    for i, n in enumerate(notes):
        m = _COUNT.match(str(n))
        if m:
            notes[i] = f"{RUN_KEY} {int(m.group(1)) + 1} case(s){str(n)[m.end():]}"
            return
    notes.append(f"{RUN_KEY} 1 case(s) (first: {text[len(CASE_KEY):].lstrip()})")
