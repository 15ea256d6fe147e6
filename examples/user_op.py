"""User ops with params, declared with ``gs.Op`` and verified clean by ``gs.verify_op``.

* ``soft_threshold(x, lam) = sign(x) * max(|x| - lam, 0)``: elementwise, with a param ``lam``
  drawn by Hypothesis.  Its kinks sit at ``x = +-lam`` and move with the param, so the op
  declares ``kink_distance`` (finite differences must not straddle a kink) and keeps away
  from 0, where the sign flips.
* ``weighted_power_sum(x, w, p) = sum(w * |x|^p)`` over the last axis (``"(n),(n)->()"``): a
  reduction whose inputs broadcast over the loop dimensions, so its VJP must sum each gradient
  down to its input's shape (``gradspec.ops.user.sum_to``); ``p`` is a param, and the op
  declares a forward-mode ``jvp`` too (checked against the VJP and finite differences).

Run it::

    python examples/user_op.py        # exit 0 when both ops verify clean
"""

from __future__ import annotations

import sys

import numpy as np
from hypothesis import strategies as st

import gradspec as gs
from gradspec.ops.user import sum_to


def _soft_forward(x, lam):
    return np.sign(x) * np.maximum(np.abs(x) - lam, 0.0)


def _soft_vjp(g, x, out, lam):
    return (g * (np.abs(x) > lam),)


soft_threshold = gs.Op(
    "soft_threshold",
    forward=_soft_forward,
    vjp=_soft_vjp,
    params={"lam": st.floats(0.05, 2.0)},
    domain=gs.domains.away_from([0.0], 1e-3),
    kink_distance=lambda x, lam: float(np.min(np.abs(np.abs(x) - lam), initial=np.inf)),
    torch=lambda x, lam: __import__("torch").nn.functional.softshrink(x, lam),
)


def _wps_forward(x, w, p):
    return (w * np.abs(x) ** p).sum(-1)


def _wps_vjp(g, x, w, out, p):
    gx = g[..., None] * w * p * np.abs(x) ** (p - 1) * np.sign(x)
    gw = g[..., None] * np.abs(x) ** p
    return sum_to(gx, x.shape), sum_to(gw, w.shape)


def _wps_jvp(tangents, x, w, out, p):
    tx, tw = tangents
    return (w * p * np.abs(x) ** (p - 1) * np.sign(x) * tx + np.abs(x) ** p * tw).sum(-1)


weighted_power_sum = gs.Op(
    "weighted_power_sum",
    forward=_wps_forward,
    vjp=_wps_vjp,
    jvp=_wps_jvp,
    signature="(n),(n)->()",
    params={"p": st.sampled_from([1.5, 2.0, 3.0])},
    domain=[gs.domains.away_from([0.0], 1e-2), gs.domains.real()],
)


def main() -> int:
    ok = True
    for op in (soft_threshold, weighted_power_sum):
        result = gs.verify_op(op, max_examples=60, seed=0)
        print(result.summary())
        print(f"{op.name}: {'verified clean' if result.ok else 'DISCREPANCIES'} ({result.cases_run} cases)")
        ok &= result.ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
