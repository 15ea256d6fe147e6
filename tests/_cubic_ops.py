"""A new user's implicit-function op (tryout 2): y with y^3 + y = x, closed form (Cardano) so it is cheap; the
buggy VJP forgets the +1 of dF/dy = 3y^2 + 1, which makes it both a factor off and infinite at y = 0."""

import numpy as np

import gradspec as gs


def _cubic(x):
    r = np.sqrt(x * x / 4 + 1 / 27)
    return np.cbrt(x / 2 + r) + np.cbrt(x / 2 - r)


tc_cubic = gs.Op("tc_cubic", forward=_cubic, vjp=lambda g, x, out: (g / (3 * out ** 2 + 1),))
tc_cubic_bug = gs.Op("tc_cubic_bug", forward=_cubic, vjp=lambda g, x, out: (g / (3 * out ** 2),))
