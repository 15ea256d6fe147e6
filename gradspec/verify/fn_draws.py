"""Draws of a learnt-shape case (``fn_shapes``) skipped because fn's forward was not finite even at tame float values:
then what makes it so is something else drawn, its int/bool arguments (``gs.strategies.indices``: a mask with an
all-False row, where a masked mean divides 0 by 0).  Such a draw is rejected (no gradient is defined there, and finite
differences cannot witness the rest of it), so it is counted and the run says so (``tame_note``), naming the output
elements and the arguments of the first one; before, it was rejected silently (session 15: MaskedMeanNoClamp).

Example::

    >>> import numpy as np
    >>> class Spec: pass
    >>> spec = Spec()
    >>> tame_skipped(spec, {"arg1": {"__tensor__": [[True], [False]], "dtype": "bool"}}, [np.array([0.5, np.nan])])
    >>> print(tame_note(spec)[:59])
    1 draw(s) skipped, not checked: fn's forward was not finite
"""

from __future__ import annotations

from .. import _check_nonfinite as _nonfinite
from .torch_call import ARG_PREFIX

__all__ = ["tame_skipped", "tame_note"]


def tame_skipped(spec, params: dict, outs: list) -> None:
    """Count a draw skipped because fn's forward was not finite even at tame float values (its drawn int/bool
    arguments: a mask with an all-False row, 0/0 in a masked mean); the first one's words kept."""
    seen = getattr(spec, "_gs_tame_nonfinite", None)
    if seen is None:
        seen = spec._gs_tame_nonfinite = [0, ""]
    seen[0] += 1
    if not seen[1]:
        args = [f"position {k[len(ARG_PREFIX):]} = {_arg_text(v)}" for k, v in sorted(params.items())
                if k.startswith(ARG_PREFIX)]
        seen[1] = f"{_nonfinite.outputs_words(outs)}{' with ' + ', '.join(args) if args else ''}"


def _arg_text(v) -> str:
    v = v.get("__tensor__") if isinstance(v, dict) and "__tensor__" in v else v
    text = repr(v)
    return text if len(text) <= 120 else text[:117] + "..."


def tame_note(spec) -> str:
    """The note for draws skipped because fn's forward was not finite at tame float values (so at what else was
    drawn: its int/bool arguments), or "" when there were none (tryout10: MaskedMeanNoClamp's all-False rows)."""
    n, first = getattr(spec, "_gs_tame_nonfinite", None) or (0, "")
    if not n:
        return ""
    how = _nonfinite.made_how("NaN" if "NaN" in first else "inf").replace("its forward", "fn's forward")
    return (f"{n} draw(s) skipped, not checked: fn's forward was not finite there even at tame float values (first: "
            f"{first}): {how}; no gradient is defined at those elements, and the draw's other elements were not "
            "checked either: guard the forward (clamp the count, torch.where) if callers can meet such arguments")
