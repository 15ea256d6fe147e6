"""Comparison tolerances, as data keyed by (dtype, oracle kind, oracle kind).

Two gradients ``a`` (oracle A) and ``b`` (oracle B) of one leaf agree element-wise when

    |a_j - b_j| <= rtol * scale_j + fd_factor * fd_error_j

with ``scale_j = max(|a_j|, |b_j|, M_j, leaf_scale)``: ``M_j = (|J|^T |seed|)_j`` is the sum of
the absolute values of every path's contribution to element j (known when the jacobian oracle
ran), which bounds the rounding error of any evaluation order of the same sum; ``leaf_scale``
is ``max(|a|, |b|)`` over the leaf (norm-wise, so a tiny element of a large gradient is not
held to a relative standard it cannot meet).  ``fd_error_j`` is the finite-difference oracle's
own per-element error estimate (truncation |D(h) - D(2h)| plus rounding), zero for exact pairs.

Why these numbers:

* float64, exact vs exact: each op's rounding error is a few eps (2.2e-16) relative to ``M``;
  graphs have at most ~10 ops, each VJP/JVP step a few more; ``2**12 eps ≈ 9.1e-13`` covers
  that with 100x headroom, and is still 6 orders of magnitude below the smallest derivative
  bug gradspec must catch (relative errors of 1e-6).
* float32, exact vs exact: the same reasoning with eps32 = 1.19e-7; ``2**9 eps32 ≈ 6.1e-5``
  (float32 graphs accumulate a few hundred ulp in depth-10 graphs with reductions).
* finite differences vs an exact oracle: the FD estimate's own error bound, times 4 for
  safety (the bound is an estimate, not a guarantee), plus the exact side's rtol.  With
  h ≈ 6e-6 the FD error is typically 1e-10 relative: bugs of 1e-6 relative stand out.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

__all__ = ["Tolerance", "TOLERANCES", "lookup", "EXACT_RTOL", "NOISE_ULPS", "NOISE_FACTOR"]

EPS64 = float(np.finfo(np.float64).eps)
EPS32 = float(np.finfo(np.float32).eps)
# Rounding noise of the case itself (gradspec.check.rounding_noise): saved intermediate values
# are perturbed by up to NOISE_ULPS ulps (correct libraries agree to 1-2 ulps on exp, tanh, ...)
# and the resulting spread of the gradient, times NOISE_FACTOR, is added to every tolerance.
# This is what keeps ill-conditioned derivative formulas (1 - tanh(x)^2 near saturation) from
# raising false alarms without loosening the tolerance for well-conditioned cases.
SUBNORMAL_FLOOR = 1e-300  # absolute; see check._compare
NOISE_ULPS = 4.0
NOISE_FACTOR = 4.0
EXACT_RTOL = {"float64": 2**12 * EPS64, "float32": 2**9 * EPS32}


@dataclasses.dataclass(frozen=True)
class Tolerance:
    rtol: float
    fd_factor: float
    why: str

    def describe(self) -> str:
        s = f"rtol={self.rtol:.3g} x max(|a|, |b|, sum of |path terms|, leaf max) + {NOISE_FACTOR:g} x rounding noise"
        if self.fd_factor:
            s += f" + {self.fd_factor:g} x FD error estimate"
        return f"{s} ({self.why})"


TOLERANCES: dict[tuple[str, str, str], Tolerance] = {
    ("float64", "exact", "exact"): Tolerance(EXACT_RTOL["float64"], 0.0, "float64 rounding: 2^12 eps"),
    ("float32", "exact", "exact"): Tolerance(EXACT_RTOL["float32"], 0.0, "float32 rounding: 2^9 eps32"),
    ("float64", "fd", "exact"): Tolerance(EXACT_RTOL["float64"], 4.0, "FD error estimate x4 + float64 rounding"),
    ("float32", "fd", "exact"): Tolerance(EXACT_RTOL["float32"], 4.0, "FD error estimate x4 + float32 rounding"),
}


@functools.lru_cache(maxsize=None)  # called for every oracle pair of every case
def lookup(dtype: str, kind_a: str, kind_b: str) -> Tolerance:
    kinds = tuple(sorted((kind_a, kind_b), key=lambda k: k != "fd"))  # fd first
    if kinds == ("fd", "fd"):
        kinds = ("fd", "exact")
    dt = "float32" if dtype == "float32" else "float64"
    return TOLERANCES[(dt, *kinds)]
