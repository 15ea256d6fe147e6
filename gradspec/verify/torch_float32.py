"""A torch Function's precisions: float32 seen inside it, and its float32 cases.

Finite differences see float32 inside from the values (``gradspec.oracles._fd_probes``): all float32 numbers,
or a staircase on a line a few float32 ulps long.  Where the float32 part is flat over every step FD takes
(``x + tanh(x.float()).double()`` at x = 8: float32's tanh changes once every 0.3 in x there), no value can
show it, and a float64 comparison accuses the Function's correct float32 rule (1 - t*t from a float32 t is
2.4e-7 where the slope is 1.9e-7: both right to float32 precision).  A torch Function's forward can be
watched instead: a torch dispatch mode sees every aten op it runs, and an op that takes a float64 tensor and
returns a float32 (or half) one -- ``x.float()``, ``.to(torch.float32)`` -- is a computation at lower
precision.  Its spec then says so (``float32_seen``, which FD and the FD-JVPs read: float32 step, float32
error bound, comparison at float32 precision).  The first WATCHED_CALLS forward calls on float64 inputs are
watched (the dtype a Function computes in rarely depends on the values); later calls run as before.

``verify_torch_function(dtypes=...)``'s float32 runs live here too: the dtype fn runs each input in
(``run_dtype``), a case cast to one precision (``as_dtype``, ``in_dtypes``), the run's note on what was
checked in which precision (``float32_note``), and the check that a float32 finding is float32 only (the
same case cast to float64 agrees: ``float32_only``, said on the finding through check's explainer).

Example::

    >>> import torch
    >>> from gradspec.verify.torch_float32 import downcasts
    >>> with downcasts() as seen:
    ...     _ = torch.tanh(torch.ones(2, dtype=torch.float64).float())
    >>> seen
    ['aten._to_copy.default (float64 -> float32)']
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..case import Case, Leaf, NodeDef

__all__ = ["downcasts", "watch", "WATCHED_CALLS", "FLOAT32_ONLY", "float32_note", "run_dtype", "out_dtype", "as_dtype",
           "in_dtypes", "float32_only", "explain_kept"]

WATCHED_CALLS = 4


@contextlib.contextmanager
def downcasts():
    """A torch dispatch mode, as a context manager yielding the list of the ops seen casting a float64
    tensor to float32 / float16 / bfloat16 inside the block (one entry per op name)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    low = (torch.float32, torch.float16, torch.bfloat16)
    seen: list = []

    class _Downcasts(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            ins = [t.dtype for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            if torch.float64 in ins:
                outs = [t.dtype for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
                to = next((d for d in outs if d in low), None)
                if to is not None:
                    text = f"{func} (float64 -> {str(to).replace('torch.', '')})"
                    if text not in seen:
                        seen.append(text)
            return out

    with _Downcasts():
        yield seen


def watch(spec, arrays, call):
    """``call()`` (fn's forward on ``arrays``), watched while the spec has had fewer than WATCHED_CALLS
    float64 calls and nothing was seen yet; a downcast found sets ``spec.float32_seen`` (the evidence)."""
    import numpy as np

    n = getattr(spec, "_f32_watched", 0)
    if n >= WATCHED_CALLS or getattr(spec, "float32_seen", "") or not arrays or not all(
            np.asarray(a).dtype == np.float64 for a in arrays):
        return call()
    spec._f32_watched = n + 1
    with downcasts() as seen:
        out = call()
    if seen:
        spec.float32_seen = (f"on float64 inputs its forward casts to lower precision: {', '.join(seen[:2])}, "
                             "seen by a torch dispatch mode")
    return out


def float32_note(example_inputs, dtypes: tuple = ("float64",)) -> str:
    """What ran in which precision (and what did not): a backward wrong only in float32 passes a
    float64-only run, and a float32 case's finite differences run fn's float64 code."""
    import torch

    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    low = sorted({str(a.dtype).replace("torch.", "") for a in (example_inputs or ())
                  if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype != torch.float64
                  and not (a.dtype == torch.float32 and "float32" in dtypes)})
    if "float32" not in dtypes:
        text = ("float32 was not checked (dtypes=('float64',)): fn runs on float64 inputs (every input, drawn or from "
                "example_inputs, is cast to float64, where gradspec can bound the rounding of fn's forward and "
                "backward); a backward that is wrong only in float32 (a float32-only branch, a cast, a float32 "
                "accumulation) passes this run")
    else:
        both = "float64" in dtypes
        text = (("cases are split between float64 and float32" if both else "every case is float32")
                + ": in a float32 case fn's forward and backward run on float32 tensors (its float32 code, called by "
                "gradspec's engine and inside torch graphs) and are compared at float32 precision (where a "
                "comparison fails, the rounding noise is measured with fn's own float32 ops jittered); the finite "
                "differences and the jacobian oracle's finite-difference JVPs evaluate fn in float64 (its float64 "
                "code at the same float32 input values), so they witness the true derivative of fn's float64 "
                "forward -- where fn's float32 forward computes another function than its float64 one (beyond "
                "float32 rounding), they do not count on that case (inconclusive, never a finding)")
        if not both:
            text += "; float64 was not checked (dtypes=('float32',))"
    if low:
        text += f"; your example_inputs are {', '.join(low)}: they ran as float64" + (
            " and float32" if "float32" in dtypes else "")
    return text


def run_dtype(a, keep32: bool = True):
    """The dtype fn runs an input in: float32 stays float32 (a float32 case), anything else float64."""
    return np.float32 if keep32 and np.asarray(a).dtype == np.float32 else np.float64


def out_dtype(arrays, keep32: bool = True):
    """fn's output as the engine holds it: float32 where every input is float32, else float64."""
    return np.float32 if keep32 and arrays and all(np.asarray(a).dtype == np.float32 for a in arrays) else np.float64


def as_dtype(case: Case, dtype: str) -> Case:
    """``case`` with every float leaf and seed in ``dtype`` (float32 and mixed draws too: fn runs in one
    precision per case, so a float32 case runs fn's float32 code throughout)."""
    want = np.dtype(dtype)
    other = np.dtype(np.float32 if want == np.float64 else np.float64)
    if not any(l.value.dtype == other for l in case.leaves) and not any(
            sd is not None and np.asarray(sd).dtype == other for sd in case.seeds):
        case.meta["dtype"] = dtype
        return case
    leaves = [Leaf(l.name, l.value.astype(want) if l.value.dtype == other else l.value, l.requires_grad)
              for l in case.leaves]
    seeds = [None if sd is None else np.asarray(sd, dtype=want) if np.asarray(sd).dtype == other else sd
             for sd in case.seeds]
    out = Case(leaves, [NodeDef(n.name, n.op, list(n.inputs), dict(n.params)) for n in case.nodes], list(case.roots),
               seeds, engine=case.engine, user_ops=dict(case.user_ops), meta={**case.meta, "dtype": dtype})
    out.canonicalize()
    out.validate()
    return out


def in_dtypes(strategy, dtypes: tuple):
    """Each case in one of ``dtypes`` (a draw of its own, shrinking towards the first), the budget split
    between them, not multiplied.  Cast after the draw, so the draws (exact zeros, ties...) stay those
    of the generic mix; one precision per case (a float32 case runs fn's float32 code throughout,
    and the torch twin graph is the same float32 graph, so both round alike)."""
    if len(dtypes) == 1:
        return strategy.map(lambda c: as_dtype(c, dtypes[0]))
    from hypothesis import strategies as st

    return st.tuples(strategy, st.sampled_from(dtypes)).map(lambda t: as_dtype(t[0], t[1]))


# A float32-only wrong backward: the same case cast to float64 agrees.
FLOAT32_ONLY = ("in float32 only: the same case cast to float64 agrees (fn's float32 code computes another gradient "
                "than its float64 code)")


def float32_only(case, oracles: dict) -> bool:
    """A float32 case of a torch Function whose same values cast to float64 agree (the same oracles)."""
    if not any(l.value.dtype == np.float32 for l in case.leaves):
        return False
    if not any(getattr(case.spec(n.op), "twin_is_self", False) for n in case.nodes):
        return False
    from ..check import check

    try:
        return check(as_dtype(case, "float64"), oracles=list(oracles.values())).status == "agree"
    except Exception:  # noqa: BLE001 - a float64 twin case that cannot run says nothing either way
        return False


def _say_float32_only(found) -> None:
    import dataclasses

    for d in found:
        if FLOAT32_ONLY not in d.message:
            d.message += f" [{FLOAT32_ONLY}]"
        if d.cause is not None and "float32" not in d.cause.summary:  # (the diagnosis may say it already)
            d.cause = dataclasses.replace(d.cause, summary=f"{d.cause.summary}; {FLOAT32_ONLY}")


def _explain_float32_only(verdict, oracles) -> None:
    """``check()``'s explainer (after the diagnosis): a float32 case of a torch Function that disagrees
    on values is checked again cast to float64; where that agrees, each value finding and its cause say
    the backward is wrong in float32 only (``gradspec replay`` of a saved case says it too).  Skipped
    where the diagnosis left causes unset (a search shrinking: ``explain_kept`` does it once, on the
    finding kept)."""
    found = [d for d in verdict.discrepancies if d.kind in ("value", "nan-inf-pattern")]
    if found and all(d.cause is not None for d in found) and float32_only(verdict.case, oracles):
        _say_float32_only(found)


def explain_kept(d) -> None:
    """The search's hook on a kept finding (its cause is set by then)."""
    v = getattr(d, "verdict", None)
    if d.kind in ("value", "nan-inf-pattern") and d.case is not None and v is not None and FLOAT32_ONLY not in d.message:
        if float32_only(d.case, getattr(v, "oracles", None) or {}):
            _say_float32_only([d])


def _register_explainer() -> None:
    from ..check import register_explainer

    register_explainer(_explain_float32_only)


_register_explainer()
