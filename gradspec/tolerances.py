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

__all__ = ["Tolerance", "TOLERANCES", "lookup", "EXACT_RTOL", "NOISE_ULPS", "NOISE_FACTOR", "NOISE_SATURATED", "NOISE_MORE_RUNS", "FD_NOISE_POINTS",
           "FD_NOISE_SPACING", "FD_NOISE_SIGMAS", "FD_FEATURE_SHRINK", "FD_FEATURE_RATIO", "TINY32", "underflow_floor",
           "FD_FINER_STEPS", "FD_EVEN_SHARE", "KINK_PERSISTS", "KINK_ROUNDING", "FD_SHAKY",
           "MIN_JUDGED_CASES", "FD_WITNESS_GAP",
           "claimed_allowance", "accuracy_claim", "describe_claim", "OPAQUE_RTOL", "opaque_claim", "opaque_part",
           "DOUBLE_BACKWARD_RTOL", "FORWARD32_RTOL", "CAST_ULPS",
           "AMPLIFIED32_ULPS"]

EPS64 = float(np.finfo(np.float64).eps)
EPS32 = float(np.finfo(np.float32).eps)
# Rounding noise of the case itself (gradspec.check.rounding_noise): saved intermediate values
# are perturbed by up to NOISE_ULPS ulps (correct libraries agree to 1-2 ulps on exp, tanh, ...)
# and the resulting spread of the gradient, times NOISE_FACTOR, is added to every tolerance.
# This is what keeps ill-conditioned derivative formulas (1 - tanh(x)^2 near saturation) from
# raising false alarms without loosening the tolerance for well-conditioned cases.
SUBNORMAL_FLOOR = 1e-300  # absolute; see check._compare
# Below the smallest normal number of a dtype, values are subnormal: their spacing is absolute
# (1.4e-45 in float32), so they carry no relative precision, and a few ops on them (or a library
# that flushes them to zero) move a gradient of 9e-40 by dozens of spacings.  Differences below the
# smallest normal float32 (1.2e-38) are therefore no evidence in a float32 comparison (measured: a
# correct float32 graph gave -9.0598e-40 vs -9.0607e-40 in a 20,000-case soak).
TINY32 = float(np.finfo(np.float32).tiny)


def underflow_floor(dtype: str) -> float:
    """The absolute floor of every comparison in ``dtype`` (see TINY32)."""
    return TINY32 if dtype == "float32" else SUBNORMAL_FLOOR
NOISE_ULPS = 4.0
NOISE_FACTOR = 4.0
# NOISE_FACTOR assumes the gradient responds linearly to the jitter (a single dominant term moves by
# 1..4 ulps x its amplification, |u| in [1/4, 1]: 4 x the spread of any run covers the worst).  Where a
# jittered run moves an element by NOISE_SATURATED of its own size, rounding decides that element (cos
# of a float32 phase of 7e7, whose ulp is 8 radians: -sin(v) is anything in [-1, 1]); two runs can then
# both land near the unjittered value (P ~ 0.09 near a trough of sin), so NOISE_MORE_RUNS more runs
# measure the range (all eight near it: P ~ (1/3)^8 ~ 1.5e-4).  Only cases whose comparison already
# failed pay for them (check.check measures the noise only then).
NOISE_SATURATED = 0.125
NOISE_MORE_RUNS = 6
EXACT_RTOL = {"float64": 2**12 * EPS64, "float32": 2**9 * EPS32}


@dataclasses.dataclass(frozen=True)
class Tolerance:
    rtol: float
    fd_factor: float
    why: str
    floor: float = SUBNORMAL_FLOOR  # absolute (underflow_floor of the dtype)

    def describe(self) -> str:
        s = f"rtol={self.rtol:.3g} x max(|a|, |b|, sum of |path terms|, leaf max) + {NOISE_FACTOR:g} x rounding noise"
        if self.fd_factor:
            s += f" + {self.fd_factor:g} x FD error estimate"
        return f"{s} ({self.why})"


TOLERANCES: dict[tuple[str, str, str], Tolerance] = {
    ("float64", "exact", "exact"): Tolerance(EXACT_RTOL["float64"], 0.0, "float64 rounding: 2^12 eps"),
    ("float32", "exact", "exact"): Tolerance(EXACT_RTOL["float32"], 0.0, "float32 rounding: 2^9 eps32", TINY32),
    ("float64", "fd", "exact"): Tolerance(EXACT_RTOL["float64"], 4.0, "FD error estimate x4 + float64 rounding"),
    ("float32", "fd", "exact"): Tolerance(EXACT_RTOL["float32"], 4.0, "FD error estimate x4 + float32 rounding", TINY32),
}


@functools.lru_cache(maxsize=None)  # called for every oracle pair of every case
def lookup(dtype: str, kind_a: str, kind_b: str) -> Tolerance:
    kinds = tuple(sorted((kind_a, kind_b), key=lambda k: k != "fd"))  # fd first
    if kinds == ("fd", "fd"):
        kinds = ("fd", "exact")
    dt = "float32" if dtype == "float32" else "float64"
    return TOLERANCES[(dt, *kinds)]


# ---------------------------------------------------------------------------------------------
# Finite differences that know when they cannot be trusted (gradspec.oracles.fd)
# ---------------------------------------------------------------------------------------------
#
# Measured forward noise.  FD's rounding model (ROUNDING_DEPTH eps S in fd.py) assumes each op
# rounds like an ordinary float op.  Black-box code can be far noisier: a solve with condition
# number kappa returns x with relative error ~kappa eps (backward-stable LU: exact for A + dA,
# |dA| ~ eps |A|; Higham, Accuracy and Stability of Numerical Algorithms, thm 7.2), so
# s = <seed, f> carries ~kappa eps |s| of noise that no model of the graph can predict when the
# ill-conditioned matrix is internal to the user's code.  It is measured instead: FD_NOISE_POINTS
# extra evaluations of s on a line x + t (h / FD_NOISE_SPACING) u (t = -7.5 .. 7.5, u random
# signs), in the same batched pass.  4th differences of those values cancel the smooth part (a
# cubic exactly; the rest is O((h/4096)^4 f''''), far below the FD truncation term estimated anyway)
# and leave noise of variance 70 sigma^2; sigma = median |4th difference| / (0.6745 sqrt 70).  The
# median, not an RMS, because a kink or jump inside the line spoils up to 4 of the 12 windows and
# must not pass for noise (it would hide itself behind a large error estimate).  Simulated on
# Gaussian and uniform noise (1e5 lines each), that estimate is >= 0.32 sigma_true in 99% and
# >= 0.20 sigma_true in 99.9% of lines.  Each s value's error is then bounded by FD_NOISE_SIGMAS
# sigma: 10 x 0.32 = 3.2 sigma_true (a value beyond that: P = 1.4e-3 for Gaussian noise) in 99% of
# cases, 2 sigma_true in 99.9%, and the comparison's fd_factor 4 on top (the allowance is then
# >= 4 x 2.4 x 2 sigma / h, ~27 standard deviations of the central difference's noise, 0.7 sigma / h).
# For ordinary code sigma ~ eps |s|, far below the ROUNDING_DEPTH model: no loss of sensitivity
# where FD was trustworthy already.  The spacing h/4096 (~1.5e-9 |x|, still ~7e6 ulps: rounding
# patterns are uncorrelated from one point to the next) keeps the line 4096x narrower than the
# stencil: a pole or kink that the stencil straddles is not inside the line, where it would pass
# for noise and hide behind a large error estimate.
# Only where a node runs user code or the engine's _cast (session 15): gradspec's own ops compute in
# float64 on FD's float64 inputs, whose rounding the ROUNDING_DEPTH / VALUE_DEPTH model bounds; there
# sigma only raised the floor by a smooth function's own 4th differences (gradspec.oracles.fd's
# docstring, "Graphs of gradspec's own ops", has the argument; tests/test_fd_noise_scope.py the premise).
FD_NOISE_POINTS = 16
FD_NOISE_SPACING = 4096.0
FD_NOISE_SIGMAS = 10.0
# Noise or a feature?  Where the noise line's sigma raises FD's floor, the same line is laid again at
# 1/FD_FEATURE_SHRINK of its spacing (16 more points, only on that path).  Noise (rounding of an
# ill-conditioned solve, a random forward) is as rough at any spacing: the two median-based sigmas agree
# within a factor ~2 (each is >= 0.2 sigma_true in 99.9% of lines, above; the narrow one below
# sigma / FD_FEATURE_RATIO needs 6 of its 12 |4th differences| under ~1/8 of their typical size: P < 1e-5).
# A smooth feature narrower than the first line (a ramp of width 1e-9 at x = 0: tryout6's rmsnorm three
# times in a row, slope 1e9) is not noise: its 4th differences shrink as spacing^4, 64^4 ~ 2e7-fold, and
# what looked like noise of sigma was a change FD's step (4096x the spacing) cannot resolve: FD steps aside.
FD_FEATURE_SHRINK = 64.0
FD_FEATURE_RATIO = 16.0
# Steps tried, in units of the refused step, when the ordinary refinement (steps of h/16 that
# must each lower the error estimate) leaves an element too coarse: a kink or a pole at distance
# d from x spoils every step above ~d, so FD goes on down to h/16^3 (~1.5e-9 |x|, where rounding
# costs ~2.4 x 256 eps / 1.5e-9 ~ 1e-4 relative: still a usable estimate) before it refuses.
FD_FINER_STEPS = (1 / 16, 1 / 256, 1 / 4096)
# The even part's leak into the corrected estimate (gradspec.oracles._fd_even): where a model of the function's
# scale (Cauchy's estimate, rho from the stencil's own f' / f'' and f' / f''') predicts a leak h^3 |f''| / rho^2 above
# this fraction of the element's error estimate, the element gets the symmetric 5-point estimate (one more point),
# whose error does not contain the leak.  1/4: the comparison allows 4x the estimate (fd_factor), so a leak the model
# clears is below 1/4 of the estimate (1/16 of the allowance) and, added to an error the estimate bounds, stays within
# the allowance even where the model under-predicts it 12x (on tryout10's constant LayerNorm row it over-predicts 6x).
# Mostly cost rides on it: a flagged element costs one evaluation and gets a more accurate estimate (its bound is
# widened, by the predicted leak, only where s(x - 2h) is not finite).
FD_EVEN_SHARE = 0.25
# Non-differentiable points.  With D+ = (s(x+h) - s(x))/h and D- = (s(x) - s(x-h))/h, a smooth
# function has D+ - D- = h f'' + O(h^3): it shrinks 4096-fold from h to h/4096.  A kink at (or
# within h/4096 of) x keeps D+ - D- at the jump in slope, whatever h; a jump of the forward keeps
# s(x+h) - s(x-h) at the size of the jump, whatever h.  KINK_PERSISTS: the finest step's value
# must stay within a factor 4 of the coarsest's (smooth: 1/4096 of it, kink or jump: ~1, a function
# oscillating faster than the step: anything -- three orders of magnitude decide, not a threshold
# near the data).  KINK_ROUNDING: and it must stand 4x above
# the rounding error of that difference at the finest step (4 delta / h for D+ - D-, 2 delta for
# s(x+h) - s(x-h); delta the per-value error bound), so that noise is never taken for a kink.
KINK_PERSISTS = 0.25
KINK_ROUNDING = 4.0
# An FD estimate is "shaky" where its own error estimate exceeds this fraction of the values
# compared (the larger of the two: an estimate of 0 where the rule says 1 is the finding, not shaky):
# FD then cannot witness alone against the code under test (inconclusive, with the reason,
# instead of a discrepancy).  1e-3: a trustworthy FD estimate is accurate to ~1e-10 relative
# (fd.py), and the bugs gradspec must find (1e-6 relative and up) are visible to FD only where its
# error is well below them; an estimate worse than 1e-3 could only witness an O(1) bug, and then
# its disagreement is still reported as a note.
# For an estimate of code that computes in float32 inside (gradspec.oracles._fd_probes) the test judges only
# the truncation part of the error estimate: its rounding part is a bound at float32 precision (4 eps32 x the
# values' scale, and measured), ~2e-4 of |f| / |f'| relative -- above FD_SHAKY wherever tanh saturates, where
# a backward wrong by 1e-3 is plainest -- and not an estimate that can be off; the truncation estimate can.
FD_SHAKY = 1e-3
# A shaky estimate still witnesses where it disagrees by more than FD_WITNESS_GAP x its whole error estimate:
# the estimate would then be off by more than any error estimate was seen to be on correct code.  Measured
# (the gap / error-estimate ratio of every shaky pair): the clamp's FD-JVP beside values of 5e4
# (tests/test_false_alarms.py), 13, is the largest on correct code; at 100 every correct-code test of
# test_false_alarms, test_numerics, test_float32_inside, test_float32_hidden still agrees, so do tryout4's
# correct ill-conditioned and kinked Functions (solve, Cholesky, log-det, inverse at condition 1e2..1e8,
# clustered eigh, simplex, soft-threshold, clip, sort, cummax, max-pool, interp, variance; 2 torch seeds)
# and soak.py --cases 5000 --seed 3 has no shaky pair at all.  The planted bugs it must keep: tryout4's
# solves and log-det at condition 1e6..1e8 (transposed outer product, transposed adjoint, missing
# transpose) disagree by 260 x their error estimate at the median (1% below 6, 10% below 43: those stay
# notes, and the runs are found by their other cases).
FD_WITNESS_GAP = 100.0
# A verify_* run that agrees but judged fewer than MIN_JUDGED_CASES cases -- most of its cases skipped (at
# non-differentiable points, oracles stepping aside, a forward that raised) -- is inconclusive, with the
# counts: a bug on a fraction p of the differentiable inputs escapes n judged cases with probability
# (1 - p)^n, and 10 is the fewest that find a bug on a quarter of the inputs with probability 0.94
# ((3/4)^10 = 0.056; 5 cases: 0.24; a bug on a tenth escapes 10 cases with probability 0.35, 30 with 0.04).
# Only where most cases went unjudged: a run the user kept small on purpose (max_examples=5, every case
# judged) says what it was asked to.
MIN_JUDGED_CASES = 10


def claimed_allowance(rtol, atol, scale):
    """``atol + rtol * scale``: the accuracy the code under test claims (``verify_*(rtol=, atol=)``,
    ``gradspec fuzz --rtol/--atol``, recorded in ``case.meta["accuracy"]``), element-wise.

    A comparison allows the larger of this and gradspec's own tolerance (CONTRACT §3), only for
    pairs in which a side runs the code under test (``gradspec.check``).  ``scale`` is the sum of
    |path terms| through the code under test (``gradspec._check_claim``), computed where a comparison
    fails without the claim: a claimed relative accuracy of the op's derivative carries through the
    chain rule, each path through the op off by at most rtol of its own size, whatever other paths add
    (|J|^T |seed| alone sums J's entries, already summed over the paths inside each root), and paths
    that never run through it carry none of its error (gradspec's own scale, max(|a|, |b|, |J|^T |seed|,
    leaf max), let a user op 0.1 off at a claim of 1e-4 agree beside another element's gradient of
    1.6e6: ``_private.pairs._claim_allowance``).  Where the path scale cannot be sized, the claim is not
    applied, and a comparison that agrees only with it on that own scale is inconclusive, with the reason
    (``gradspec._check_rules._discount_unsized_claim``): never agree on a scale that would hide the bug.
    """
    return atol + rtol * scale


def accuracy_claim(meta) -> tuple[float, float] | None:
    """(rtol, atol) from a case's ``meta["accuracy"]``, or None; ValueError for a malformed claim."""
    claim = (meta or {}).get("accuracy")
    if not claim:
        return None
    try:
        rtol, atol = float(claim.get("rtol") or 0.0), float(claim.get("atol") or 0.0)
    except (TypeError, ValueError, AttributeError):
        raise ValueError(f"case meta 'accuracy' must be {{'rtol': float, 'atol': float}}, got {claim!r}") from None
    if not (rtol >= 0 and atol >= 0 and np.isfinite(rtol) and np.isfinite(atol)):
        raise ValueError(f"rtol and atol must be finite and >= 0, got rtol={rtol!r}, atol={atol!r}")
    return (rtol, atol) if rtol or atol else None


# Code gradspec cannot see inside (a user op's forward and vjp, a torch Function's backward) is held by
# EXACT_RTOL to the rounding of a few ordinary ops.  Opaque code may solve or invert: a backward-stable
# solve of condition kappa is accurate to ~kappa eps only (Higham, thm 7.2), and a backward that solves
# with A^T is the exact adjoint of another nearby matrix than the forward's solve with A, so a correct
# backward and the finite differences of its forward differ by that much.  Measured: a Function solving
# with a fixed matrix of condition 1e6 was off by 9.5e-12 and 1.8e-11 relative (3 of 6 verify runs of 60
# cases reported it).  Opaque code may also iterate: an implicit backward (dy/dx of the exact fixed point)
# beside a forward stopped at a tolerance differs from the derivative of the forward as computed by about
# that tolerance -- a new user's fixed-point solve stopped at steps below 1e-9 was off by 1.5e-9 relative,
# a 30-step Kepler solve by 2.4e-9 (tests/_planted_real.py), both correct.  OPAQUE_RTOL = sqrt(eps64) =
# 1.5e-8: half of float64's digits (scipy's root finders stop at this xtol by default), condition numbers
# up to ~1e8 (kappa eps), and still 67x below the smallest bug gradspec must find (1e-6 relative); less
# accurate code declares its accuracy (rtol=).  float64 only: in float32 such conditioning
# leaves no digit to compare (a torch Function's float32 code has its rounding measured instead: check.rounding_noise
# jitters its own float32 ops, verify.torch_call.jitter_float32; a float32 forward that is another function
# than its float64 one is not judged, FORWARD32_RTOL below).  gs.check applies it only to a case with user ops, to pairs in which a
# side runs their rules (as a claim), and only after a comparison failed without it.
OPAQUE_RTOL = float(np.sqrt(EPS64))

# Second-order gradients of a torch Function (gradspec.verify.torch_double: autograd through fn's backward vs
# central differences of that backward, on top of 4x their step-difference estimate).  A wrong double backward
# (a product-rule term dropped) is off by O(1); fn's first-order backward may hold an iterative solve whose
# finite differences carry ~1e-8 relative noise, and float32 inside ~1e-4 after the division by the step: only
# a relative error above this decides.
DOUBLE_BACKWARD_RTOL = 1e-3

# A backward that returns its gradient in a lower precision than its input's (``(g * y).float()`` for a float64
# input; torch casts it back without a word): its error is that dtype's rounding when the formula is right.  A
# cast rounds each element to half an ulp of the returned dtype and arithmetic done in that dtype before it adds
# a few ulps more; 8 ulps of the gradient's largest element bound both for a short formula.  A larger error is a
# wrong formula (named as such), the dtype then said beside it is not the cause (gradspec._diagnose_raw).
CAST_ULPS = 8.0


# A float32 case runs the user's code in float32 while finite differences (and the jacobian's finite-difference
# JVPs) evaluate it in float64: they witness the derivative of the float64 code.  Where a user op's float32
# forward differs from its float64 forward at the same input values by more than the float32 comparison's
# own tolerance (EXACT_RTOL["float32"], norm-wise over the op's output), the two are different functions at
# the resolution compared -- a float32-only branch of the forward, or conditioning that float32 cannot carry
# (a solve of condition 1e6 is off by ~0.1 in float32) -- and those witnesses do not count on that case
# (gradspec.outcome.precision_mismatches).  A correct float32 forward is within a few ulps (x the
# conditioning of its own formula) of its float64 one: 512 ulps of the output's largest value leaves
# headroom; erring low only costs the case its finite-difference witnesses, never a false report.
FORWARD32_RTOL = EXACT_RTOL["float32"]

# Below FORWARD32_RTOL the float32 forward is the same function, but its error still says how much this case
# amplifies float32 rounding.  The float32 comparison's tolerance (EXACT_RTOL["float32"]: 512 ulps of the compared
# scale) assumes the backward amplifies its rounding by at most ~512.  A forward off its float64 value by kappa ulps
# of its largest output (measured at the case's own float32 values: outcome.forward32_ulps) shows float32 rounding
# amplified by the conditioning of its computation (a backward-stable solve errs by ~cond x u).  A backward that
# solves with the same matrix (A^T: the same condition) and multiplies by the forward's output errs by ~2 kappa;
# one through the normal equations ((A^T A)^-1 g = R^-1 R^-T g: condition cond^2) by ~kappa^2.  So rounding alone
# can put a correct backward kappa^2 ulps off the float64 gradient: where kappa^2 exceeds AMPLIFIED32_ULPS (the
# tolerance's 512), an estimate's disagreement within tolerance x kappa^2 / 512 cannot be told from rounding and
# the case is not judged (gradspec._check_rules: _discount_amplified_rounding, inconclusive with a note); beyond it
# it is still a finding.  tryout11 #2: least squares at condition 884, kappa = 48 (2.3e3), the backward 1.2e3-1.5e3
# ulps off (1.26 x the tolerance).  Forwards within sqrt(512) = 23 ulps (every well-conditioned one) are unaffected.
AMPLIFIED32_ULPS = EXACT_RTOL["float32"] / EPS32


class _OpaqueClaim(tuple):
    """(rtol, atol) raised to OPAQUE_RTOL; ``user`` is the claim of the code under test, or None."""

    user: tuple | None = None


def opaque_claim(claim):
    """``claim`` (or none) with its rtol raised to OPAQUE_RTOL (see there)."""
    c = _OpaqueClaim((max(OPAQUE_RTOL, claim[0] if claim else 0.0), claim[1] if claim else 0.0))
    c.user = claim
    return c


def opaque_part(claim):
    """``claim`` without the accuracy the code under test declared: gradspec's OPAQUE_RTOL alone where ``claim``
    is an :func:`opaque_claim`, else None."""
    if isinstance(claim, _OpaqueClaim):
        c = _OpaqueClaim((OPAQUE_RTOL, 0.0))
        c.user = None
        return c
    return None


def describe_claim(claim, through=None) -> str:
    """The words for a claim's allowance; ``through``: the sum of |path terms| through the code under test was
    part of its scale (``gradspec._check_claim``)."""
    if not claim:
        return ""
    scale = "the sum of |path terms| through the code under test" if through else "the same scale"
    if isinstance(claim, _OpaqueClaim) and not (claim.user and claim.user[0] >= OPAQUE_RTOL):
        said = f" (it claims atol={claim.user[1]:.3g} + rtol={claim.user[0]:.3g})" if claim.user else ""
        return (f"; the larger of that and rtol={claim[0]:.3g} x {scale}{' + atol=' + format(claim[1], '.3g') if claim[1] else ''}"
                f" for code gradspec cannot see inside (a user op's rules, a torch Function's backward: OPAQUE_RTOL){said}")
    return (f"; the larger of that and the accuracy the code under test claims: atol={claim[1]:.3g} + "
            f"rtol={claim[0]:.3g} x {scale}")
