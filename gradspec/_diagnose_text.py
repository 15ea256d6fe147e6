"""Wording shared by the diagnosis modules: where a node is, whose code ran, numbers in a line.

Private to :mod:`gradspec.diagnose` and its helpers (``_diagnose_*``); the engine oracles under test
are known here (:data:`ENGINES`, set by the diagnosis while it runs) so every module names them alike.

Example::

    >>> from gradspec._diagnose_text import _fmt, _clip
    >>> _fmt([1.0, 2.5])
    '[1, 2.5]'
    >>> _clip("one two three", 7)[:3]
    'one'
"""

from __future__ import annotations

import contextvars

import numpy as np

from ._private.skips import word_cut
from .case import NodeDef

__all__ = ["ENGINES"]

# The names of the oracles that run an engine under test, while a diagnosis runs (diagnose sets it).
ENGINES: contextvars.ContextVar = contextvars.ContextVar("gradspec_engine_oracles", default=frozenset())


def _is_engine(name: str) -> bool:
    return name.startswith("engine:") or name in ENGINES.get()


def _is_torch_function(spec) -> bool:
    """A ``verify_torch_function`` op: its torch twin is the user's Function itself, the code under test."""
    return bool(spec.user and getattr(spec, "torch_name", None) and spec.name.startswith("torch_"))


def _where(node: NodeDef, spec) -> str:
    return f"node {node.name} = {node.op}({', '.join(node.inputs)})"


def _twin_label(spec, twin) -> str:
    """What the twin that decided a node's VJP is, for the evidence (a torch Function has no JVP rule)."""
    if twin == "finite-differences":
        return "finite differences"
    if twin == "jacobian" and getattr(spec, "surrogate", None):
        return f"J^T·g of the surrogate {spec.surrogate} (finite differences of its forward, JVP)"
    if twin == "jacobian" and getattr(spec, "jvp_source", None) not in (None, "declared"):
        return "J^T·g from finite differences of the forward (JVP)"
    if twin == "jacobian":
        return "J^T·g from your jvp" if spec.user else f"J^T·g from the JVP rule of {spec.name!r}"
    return "J^T·g from the twin (JVP rule or finite differences)"


def _whose(spec, suspect: str) -> str:
    if _is_engine(str(suspect)):
        return f"the engine's backward for {spec.name!r}"
    if _is_torch_function(spec) and getattr(spec, "registered_backward", None):
        # a torch.library.custom_op: its register_autograd backward (torch runs it through a generated class,
        # GeneratedBackwardFor_..., that was named before: not the user's code)
        return f"your backward ({spec.registered_backward})"
    if _is_torch_function(spec) and getattr(spec, "fn_has_backward", True) is False:
        # a plain function (or module) on torch tensors: torch's autograd computes its gradient
        inside = list(getattr(spec, "functions_inside", None) or ())
        runs = (f" (whose graph runs your {' and '.join(inside[:3])}: torch's own ops "
                "rarely err, so look there first)") if inside else ""
        find = getattr(spec, "find_cuts", None)
        cuts = list(find() if callable(find) and not inside else ())
        if cuts and not inside:  # its own detach / hook / no_grad, not torch, shapes that gradient (tryout6 #7)
            return (f"{spec.name[6:]}'s gradient, shaped by its {' and '.join(cuts[:3])} (torch's autograd applies "
                    "that as written, so look there),")
        return f"the gradient torch's autograd computes through {spec.name[6:]}{runs}"
    if spec.user and getattr(spec, "torch_name", None) and spec.name.startswith("torch_"):
        return f"your backward ({spec.name[6:]}.backward)"
    if spec.user:
        return "your vjp"
    if str(suspect).startswith("torch"):
        return f"torch's backward for {spec.name!r}"
    return f"gradspec's VJP rule for {spec.name!r}"


def _clip(text: str, n: int) -> str:
    """``text`` in at most ``n`` characters, cut between words (a summary is printed as a terminal line)."""
    return word_cut(" ".join(str(text).split()), n)


def _fmt(a, n: int = 6) -> str:
    try:
        vals = np.asarray(a, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        return str(a)
    body = ", ".join(f"{v:.10g}" for v in vals[:n])  # 10 digits: 1 + 1e-06 must not read as 1
    return "[" + body + (", ..." if vals.size > n else "") + "]"


def _evidence(mini, leaves, u, t, g, suspect, twin="J^T·g from the twin (JVP rule or finite differences)") -> str:
    parts = ["inputs: " + "; ".join(f"{l.name} = {_fmt(l.value)}" for l in mini.leaves), f"upstream g = {_fmt(g)}"]
    for l in leaves:
        parts.append(f"{l.name}: {suspect} {_fmt(u[l.name])} vs {twin} {_fmt(t[l.name])}{_unshown(u[l.name], t[l.name])}")
    return "; ".join(parts)


def _unshown(u, t, n: int = 6, most: int = 3) -> str:
    """Where ``u`` and ``t`` differ most, by index, when that is past the first ``n`` elements ``_fmt`` shows: a
    4 x 4 gradient wrong on its last row listed six right elements and none of the wrong ones (tryout5 #6)."""
    try:
        a, b = np.asarray(u, dtype=np.float64), np.asarray(t, dtype=np.float64)
    except (TypeError, ValueError):
        return ""
    if a.shape != b.shape or a.size <= n:
        return ""
    with np.errstate(invalid="ignore"):
        err = np.where(np.isnan(a) != np.isnan(b), np.inf, np.nan_to_num(np.abs(a - b), nan=0.0))
    top = np.argsort(-err.ravel(), kind="stable")[:most]
    top = [int(k) for k in top if err.ravel()[k] > 0]
    if not top or min(top) < n:
        return ""
    at = "; ".join(f"[{', '.join(map(str, np.unravel_index(k, a.shape)))}] {a.ravel()[k]:.10g} vs {b.ravel()[k]:.10g}"
                   for k in top)
    return f" (differing most at {at})"


def _cut_from_graph(mini, node, spec, u: dict, t: dict) -> str | None:
    """The summary for a plain torch function (no backward of its own) that gives no gradient (None) for
    inputs where J^T·g is not zero: its output is cut from them in torch's autograd graph."""
    if not _is_torch_function(spec) or getattr(spec, "fn_has_backward", True) is not False:
        return None
    cut = [l.name for l in mini.grad_leaves() if u.get(l.name) is None and t.get(l.name) is not None
           and np.any(np.asarray(t[l.name]) != 0)]
    if not cut:
        return None
    want = "; ".join(f"{n}: {_fmt(t[n])}" for n in cut)
    return (f"{_where(node, spec)}: no gradient flows through {spec.name[6:]} to {', '.join(cut)} — torch's autograd "
            f"gives None, so its output is cut from that input (a .detach(), .item(), .numpy(), torch.no_grad() or "
            f"a new tensor built from values inside?), but J^T·g there is {want}; keep the computation in torch "
            "operations on the input tensors")
