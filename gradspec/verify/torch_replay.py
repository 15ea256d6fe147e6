"""The checks ``verify_torch_function`` runs beside ``gs.check`` on a case of a torch Function, as a replay runs them.

A torch Function's backward can be right on one call and wrong on the second (state kept between calls), on a
non-contiguous ``grad_output`` or in its double backward; ``gs.check`` alone sees none of that.  ``replay_checks``
runs the same checks on a saved case, so that ``gradspec replay`` reproduces such a finding.

Example::

    >>> from gradspec.verify.torch_replay import _not_doubled
    >>> import numpy as np
    >>> _not_doubled(np.array([1.0, 2.0]), np.array([2.0, 4.0])) is None, _not_doubled(np.array([1.0, 2.0]), np.array([2.0, 3.0]))
    (True, (1,))
"""

from __future__ import annotations

import traceback
import warnings

import numpy as np

from .. import tolerances as _tol
from .._private import torch_grad as _torch_grad
from ..case import Case
from ..result import VerifyDiscrepancy
from ..spec.opspec import OpSpec
from . import torch_double, torch_layouts

__all__ = ["replay_checks"]

_LAYOUT_WARNING = r"grad and param do not obey the gradient layout contract"


def _twice_check(case: Case, spec: OpSpec, target: str, replay: str) -> list:
    """fn's backward run twice on the same graph (retain_graph) must give twice the gradient."""
    import torch

    from ..oracles.torch_oracle import build_torch_graph

    if spec.name not in case.ops:
        return []
    try:
        env, roots = build_torch_graph(case)
    except Exception:  # noqa: BLE001 - the forward itself raised: the case's own check says so, or excuses it
        return []
    try:
        seeds = [torch.ones_like(r) if s is None else torch.from_numpy(np.array(s, dtype=np.float64)).to(r.dtype)
                 for r, s in zip(roots, case.seeds, strict=True)]
        def rebuild():  # (a reentrant checkpoint refused inputs=: torch_grad.backward runs it without)
            nonlocal env
            env, again = build_torch_graph(case)
            return again, [env[l.name] for l in case.leaves if l.differentiable]

        # gradients into the case's leaves only: never into tensors fn holds of its own (a closure's nn.Linear)
        roots, leaves, refused = _torch_grad.backward(roots, seeds, [env[l.name] for l in case.leaves if l.differentiable],
                                                      retain_graph=True, rebuild=rebuild)
        first = {l.name: (None if env[l.name].grad is None else env[l.name].grad.detach().numpy().copy())
                 for l in case.grad_leaves()}
        with warnings.catch_warnings():  # (gradspec's own second backward: torch's remark on adding into a .grad
            # of another memory layout than the first gradient's is no news to the user, who never ran it)
            warnings.filterwarnings("ignore", message=_LAYOUT_WARNING, category=UserWarning)
            _torch_grad.backward(roots, seeds, leaves, retain_graph=True, refused=refused)
    except Exception as e:  # noqa: BLE001
        return [VerifyDiscrepancy("raised", ("torch-cpu", "torch-cpu"),
                                  f"{target}: backward twice (retain_graph=True) raised {type(e).__name__}: {e}",
                                  case, traceback=traceback.format_exc(), replay=replay, check_name="backward twice")]
    for l in case.grad_leaves():
        g1, g2 = first[l.name], env[l.name].grad
        if g1 is None:
            continue
        g2 = g2.detach().numpy()
        idx = _not_doubled(g1, g2)
        if idx is not None:
            return [VerifyDiscrepancy(
                "accumulation", ("torch-cpu", "torch-cpu"),
                f"{target}: the second backward over the same graph (retain_graph=True) did not add the same gradient "
                f"again: leaf {l.name!r}[{', '.join(map(str, idx))}] after one backward {g1[idx]!r}, after two "
                f"{g2[idx]!r} (expected {2 * g1[idx]!r}); does fn's backward keep state between calls or modify "
                "what it saved?", case, l.name, idx, (2 * g1[idx], g2[idx]), replay=replay,
                check_name="backward twice")]
    return []


class _Notes:
    """What a replay keeps of a check's run notes (the double backward's 'not checked' notes)."""

    def __init__(self) -> None:
        self.notes: list = []

    def note(self, text: str) -> None:
        self.notes.append(text)


def replay_checks(case: Case) -> tuple[list, list]:
    """``(discrepancies, notes)`` of the checks verify_torch_function runs beside ``gs.check`` on a case of a
    torch Function (backward twice, a non-contiguous grad_output, the double backward): ``gradspec replay``
    runs them too, so that a finding of theirs replays (gs.check alone would say the case agrees)."""
    out, notes = [], _Notes()
    for name in case.meta.get("torch_functions", ()):
        spec = case.spec(name)
        target = f"torch function {name.removeprefix('torch_')}"
        layouts = torch_layouts.LayoutCheck(spec, target, "")
        double = torch_double.DoubleBackwardCheck(spec, target, "", notes)
        layouts.found = double.found = True  # one case, checked whatever the run's budget of clean checks
        out += _twice_check(case, spec, target, "") or layouts(case) or double(case)
    return out, notes.notes


def _not_doubled(g1, g2) -> tuple | None:
    """The first element where the second backward did not add g1 again (g2 != 2 g1), or None.

    Only finite elements of g1 are judged, against the largest finite one: NaN where fn is not
    differentiable (hypot's a / h at a = b = 0, as torch's own) says nothing about accumulation, and
    before it made the scale NaN and every threshold fail, so a correctly doubled element was reported.
    """
    finite = np.isfinite(g1)
    scale = float(np.max(np.abs(g1[finite]), initial=0.0))
    # the second backward adds the same path terms again, in another order where a leaf is reached twice:
    # rounding of the gradient's dtype (float32 cases: EXACT_RTOL 6.1e-5, float64: 9.1e-13), never O(1)
    rtol = _tol.EXACT_RTOL["float32" if g1.dtype == np.float32 else "float64"]
    with np.errstate(all="ignore"):
        err = np.abs(g2.astype(np.float64) - 2 * g1.astype(np.float64))
    bad = finite & ~(err <= rtol * max(scale, 1e-300) * 2)
    return tuple(int(i) for i in np.argwhere(bad)[0]) if np.any(bad) else None
