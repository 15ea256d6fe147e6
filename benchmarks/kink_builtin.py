"""How often gs.check judges a user op that sits behind a built-in kinked op with one element at (or near) its kink.

    python benchmarks/kink_builtin.py [--points 100] [--seed 0]

The built-in ops relu, abs, clamp(-1, 1) and maximum declare a ``kink_distance``; finite differences refuse a whole
case when any input element of such a node is within 4x their step of a kink (``oracles._fd_reach.check_reach``), and
step aside entirely at an exact kink (``_private.kinks.exclusion``), while a user op's kinks found numerically are left
out element by element (``FDResult.kinks``, ``Verdict.unjudged_elements``).  (Since helper kinkbuiltin, session 15: for
these ops FD leaves out only the elements whose stencil moves a position within 4x of its kink, ``oracles/_fd_kinkpos.py``.)
Here the code under test is a smooth user
op ``u = exp(y)`` (its vjp right, or 1.01x: a bug on every element) behind the built-in ``y = op(x, ...)``; 2 to 6
elements, each put on a kink with probability 0.4 ("exact") or 1e-9 from it ("near"), else drawn from N(0, 1.5^2).
Also with a sum (``u = exp(sum(y))``) or a matmul (``u = exp(reshape(y, (1, n)) @ W)``) between the two ("relu
sum", "relu mm": every partial then couples to the kink element's, review15b #1).  Prints, per built-in op and
placement: the correct op's agree / inconclusive / false alarms, and the buggy op's found (disagree) / missed
(agree) / inconclusive, among points where the bug shows (an element off every kink with a
nonzero slope through the built-in).  Run with PYTHONPATH=<a checkout> to measure that checkout (before/after).
"""

from __future__ import annotations

import collections
import sys

import numpy as np
from kink_elements import table_main  # (the table both kink benchmarks print; run as a script, from benchmarks/)

import gradspec as gs

GOOD = gs.Op("bkb_exp", forward=np.exp, vjp=lambda g, y, out: (g * out,))
BAD = gs.Op("bkb_exp_bug", forward=np.exp, vjp=lambda g, y, out: (1.01 * g * out,))

# name: (table op, its params, kinks, arity, slope of the built-in at x: where the user op's bug can show)
BUILTIN = {
    "relu": ("relu", {}, np.array([0.0]), 1, lambda x: x > 0),
    "abs": ("abs", {}, np.array([0.0]), 1, lambda x: x != 0),
    "clamp": ("clamp", {"min": -1.0, "max": 1.0}, np.array([-1.0, 1.0]), 1, lambda x: (x > -1) & (x < 1)),
    "maximum": ("maximum", {}, None, 2, lambda x: np.ones(x.shape, dtype=bool)),
}


def _point(rng, kinks, arity, near: bool):
    n = int(rng.integers(2, 7))
    x = rng.normal(0.0, 1.5, n)
    on = rng.uniform(size=n) < 0.4
    off = 1e-9 if near else 0.0
    if kinks is not None:
        x[on] = rng.choice(kinks, size=int(on.sum())) + off
    if arity == 1:
        return [x], on
    b = rng.normal(0.0, 1.5, n)
    b[on] = x[on] + off  # a tie of maximum (or within 1e-9 of one)
    return [x, b], on


def _nodes(op, params, names, user, post, n):
    """The graph: the built-in, then the user op elementwise (``post`` "") or after a sum or a matmul."""
    first = [("y", op, names, params)]
    if post == "":
        return first + [("u", user.name, ["y"], {})]
    if post == "sum":
        return first + [("s", "sum", ["y"], {}), ("u", user.name, ["s"], {})]
    return first + [("y2", "reshape", ["y"], {"shape": (1, n)}), ("s", "mm", ["y2", "W"], {}), ("u", user.name, ["s"], {})]


def run(points: int, seed: int) -> dict:
    out = {}
    for post in ("", "sum", "mm"):  # (each group its own draws: the elementwise rows are those of session 15)
        rng = np.random.default_rng(seed + {"": 0, "sum": 1000, "mm": 2000}[post])
        for name, (op, params, kinks, arity, slope) in BUILTIN.items():
            for near in (False, True):
                counts = collections.Counter()
                for _ in range(points):
                    args, on = _point(rng, kinks, arity, near)
                    n = args[0].size
                    leaves = {f"x{i}": a for i, a in enumerate(args)}
                    if post == "mm":
                        leaves["W"] = rng.normal(0.0, 1.0, (n, 2))
                    seed_ = rng.normal(size={"": n, "sum": (), "mm": (1, 2)}[post])
                    for user, tag in ((GOOD, "correct"), (BAD, "bug")):
                        case = gs.Case.build(leaves, _nodes(op, params, [f"x{i}" for i in range(arity)], user, post, n),
                                             ["u"], [np.asarray(seed_)])
                        if tag == "bug" and not np.any(slope(args[0]) & ~on):
                            continue  # the bug cannot show: every element with a slope sits on a kink
                        counts[f"{tag} {gs.check(case).status}"] += 1
                out[f"{name}{' ' + post if post else ''} {'near' if near else 'exact'}"] = dict(counts)
    return out


def main(argv=None) -> int:
    return table_main(run, 100, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
