"""What the finite-difference oracle probes before it vouches for an estimate of opaque code: a forward
that resolves its input more coarsely than float64 (a staircase), and a forward that computes in float32
inside (``x.float()`` ... cast back), which it then estimates as a float32 computation.

Code that computes at a lower precision than its dtype is a staircase at FD's float64 step: the
difference quotient over h ~ 6e-6 |x| sees float32's quanta (6e-8 relative), not the slope.  Two answers:

* a user op whose values over the stencil are all float32 numbers (``gradspec._private.fdstep.float32_valued``)
  is named (``float32_node``): FD re-runs with a step sized for float32 rounding (``STEP32``) and an error
  bound at float32 precision (``float32_rounding``), and ``gs.check`` compares its gradients at float32
  precision.  A correct Function through float32 then agrees, and a backward wrong by 1e-3 is found;
* where no value says so because the float32 part is hidden behind float64 arithmetic in the same output
  (``x + tanh(x.float()).double()``: no value is a float32 number), ``hidden_float32`` probes the forward
  on a line a few float32 ulps long (``gradspec._private.float32_line``): a staircase there, steps far
  above the float64 rounding FD's error bound assumes, sends the case down the same float32 path, and the
  note says what was seen.  Only cases with user ops pay for it (one batched evaluation of 16 points);
* a staircase neither test sees (quanta wider than the stencil) still makes FD step aside where the noise
  line's repeats or a farther probe show it (``staircase``, ``flat_or_stairs``), with the reason.

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec.oracles._fd_probes import STEP32
    >>> round(STEP32, 5)  # cbrt(eps32): the float32 step, relative to max(1, |x|)
    0.00492
"""

from __future__ import annotations

import operator

import numpy as np

from .. import tolerances as _tol
from .._private import float32_line as _line
from .._private import structure as _structure
from .._private.fdstep import EPS32, float32_valued, line_sigma, noise_pattern
from ..spec import registry as _registry
from ._base import OracleError
from ._fd_stencil import EPS, ROUNDING_DEPTH

__all__ = ["runs_unmodelled_code",
           "staircase", "flat_or_stairs", "noise_or_feature", "RESOLUTION_FLOORS", "float32_node", "float32_rounding", "STEP32",
           "F32_ROUNDING_DEPTH", "F32_PROBE_POINTS", "F32_PROBE_SPREAD", "F32_PROBE_FACTOR", "float32_probe_offsets",
           "perturbed", "hidden_float32", "user_nodes", "HIDDEN32_NAME_ULPS"]

# staircase: a repeated value counts only where the slope predicts a change of this many value floors
# (VALUE_DEPTH rounding) between neighbouring points of the noise line.
RESOLUTION_FLOORS = 100.0


def staircase(p, r, h0, leaves, along=None) -> None:
    """The noise line (FD_NOISE_POINTS points spanning 15 h / FD_NOISE_SPACING, ~2e-8 |x|) measures
    the forward's noise only where the forward resolves that span.  Code that computes at a lower
    precision than its dtype (a float64 function through float32 inside) is a staircase there: most
    neighbouring points give the very same value (its 4th differences, the noise, come out 0) while
    the step h turns the quantum into an error ~quantum / h far above the estimate's bound.  Float64
    code never repeats a value where the final slope predicts a change of RESOLUTION_FLOORS rounding
    floors between neighbouring points (a kink or pole that close was refused before this), so:
    where half the line's steps repeat a value, FD steps aside, saying why.  A line that crosses the
    gradient at a right angle (its predicted change too small to tell) is laid again along the gradient
    (``along`` = (s_at, args, flat): ``s_at(*args, X)`` is s at each row of a matrix of points X, and
    ``flat`` the inputs; a tuple, not a closure, because this runs on every FD estimate)."""
    line = p.line
    if len(line) < 2 or not len(r):
        return
    # The repeats first (15 float comparisons): the common case, no staircase, costs no numpy call.
    repeats = sum(map(operator.eq, line, line[1:]))
    if 2 * repeats < len(line) - 1:
        return
    # The slope at the first step too: refining into the staircase (every point of a finer stencil
    # equal, x = 1 of tanh through float32) leaves r = 0 there, a zero that predicts no change.
    with np.errstate(all="ignore"):
        r1 = (p.s[0] - p.s[1]) / (2 * h0)
    r = np.asarray(r)
    r = np.where(np.abs(r1) > np.abs(r), r1, r)
    d = noise_pattern(r.size)
    per_step = abs(float(np.dot(r * h0, d[1] - d[0])))
    if per_step <= RESOLUTION_FLOORS * p.vfloor and along is not None:
        # The line may be flat because it crosses the gradient at a right angle (x = [1, 1] of x1^3 + x2^3
        # runs along (1, -1)): then its repeats prove nothing.  A second line along the signs of the
        # estimate has slope sum |r_j h_j| / FD_NOISE_SPACING per step (15 more points, on this rare path).
        along_step = float(np.dot(np.abs(r), h0)) / _tol.FD_NOISE_SPACING
        s_at, args, flat = along
        if along_step <= RESOLUTION_FLOORS * p.vfloor:  # every point so far gave one value: no slope at all
            flat_or_stairs(p, h0, along, len(line))
            return
        u = np.where(r < 0, -1.0, 1.0)
        X = flat + np.outer(np.arange(len(line)) - (len(line) - 1) / 2, u * h0) / _tol.FD_NOISE_SPACING
        line = tuple(s_at(*args, X).tolist())
        repeats = sum(a == b for a, b in zip(line, line[1:]))
        if 2 * repeats < len(line) - 1:
            return
        per_step = along_step
    if per_step > RESOLUTION_FLOORS * p.vfloor:
        raise OracleError(
            f"finite differences: the forward gave the same value at {repeats + 1} of {len(line)} neighbouring "
            f"points where its slope predicts a change of {per_step:.2g} from one to the next: it resolves its "
            f"input more coarsely than {leaves[0].value.dtype} (a computation at lower precision inside, e.g. "
            "through float32), so no estimate can be vouched for here")


def flat_or_stairs(p, h0, along, points: int) -> None:
    """The stencil and the noise line all gave one value: the forward is constant here (relu below 0:
    the estimate 0 is right), or a staircase whose steps are wider than 2 h (tanh through float32 at
    x = 5: 0.99990922 at every point while its slope is 1.8e-4, so FD said 0).  Four points at
    FD_NOISE_SPACING x the step (~2.5e-2 |x|, along the noise line's signs and along all +1) tell them
    apart: a constant is still flat there; a staircase has changed by far more than rounding."""
    s_at, args, flat = along
    u = np.where(noise_pattern(flat.size)[-1] < 0, -1.0, 1.0)
    big = _tol.FD_NOISE_SPACING * h0
    far = s_at(*args, np.stack([flat + big * u, flat - big * u, flat + big, flat - big]))
    # The odd part of the change is the slope's, the even part the curvature's: a smooth function at a
    # stationary point (flat to float64 over 2 h, a log_softmax of large values) changes there too, evenly.
    odd, even = np.abs(far[0::2] - far[1::2]) / 2, np.abs((far[0::2] + far[1::2]) / 2 - p.s0)
    change = float(np.max(np.where(odd > even, odd, 0.0)))
    if change > RESOLUTION_FLOORS * p.vfloor:  # (a NaN there says nothing either way)
        raise OracleError(
            f"finite differences: the forward gave the very same value at all {3 * flat.size + 1 + points} points "
            f"within {2 * float(np.max(h0)):.2g} of the case's inputs but its odd part changes by {change:.2g} at "
            f"{float(np.max(big)):.2g}: a staircase (a computation at lower precision inside, e.g. through "
            "float32) or the edge of a flat region, so its estimate 0 cannot be vouched for here")


def noise_or_feature(p, h0, leaves, along) -> None:
    """Where the noise line's sigma raised FD's floor (FD_NOISE_SIGMAS sigma above the rounding model), is it
    noise?  The same line at 1/FD_FEATURE_SHRINK of its spacing answers (gradspec.tolerances: FD_FEATURE_SHRINK):
    noise is as rough there, a smooth feature narrower than the first line is not (its 4th differences shrink
    as spacing^4).  Such a feature -- a ramp of width 1e-9 with slope 1e9 at x = 0, tryout6's rmsnorm three
    times in a row -- is a change FD's step cannot resolve: the estimate (~1/h, 5000x too small there) and its
    noise-sized error bound would both be wrong, and the bound alone made it a witness.  FD steps aside, saying
    why.  A narrow line that mostly repeats one value (a staircase of quanta between the two spacings) says
    nothing smooth: the noise stays noise.  Only noise above the rounding model is asked about (the narrow line's own rounding is at
most that model's 1/256: a ratio of 16 is then the line's, not rounding's).  ``along`` = (s_at, args, flat),
as in ``staircase``."""
    line = p.line
    # Only noise far above rounding: near a zero of the output (every value ~0, so the VALUE_DEPTH floor is too)
    # FD's floor rises on rounding alone, and the narrow line's values, 64x closer to that zero, round 64x finer.
    if len(line) < 2 or not p.sigma > max(ROUNDING_DEPTH * EPS * max(p.S0 + abs(p.s0), max(map(abs, line))), p.vfloor):
        return
    s_at, args, flat = along
    narrow = s_at(*args, flat + noise_pattern(flat.size) * (h0 / _tol.FD_FEATURE_SHRINK)).tolist()
    if 2 * sum(map(operator.eq, narrow, narrow[1:])) >= len(narrow) - 1:
        return
    fine = line_sigma(narrow)
    if not fine * _tol.FD_FEATURE_RATIO < p.sigma:  # (a NaN says nothing)
        return
    spacing = float(np.min(h0)) / _tol.FD_NOISE_SPACING  # (the inputs nearest 0: their step is STEP)
    raise OracleError(
        f"finite differences: along the noise line around {leaves[0].name if len(leaves) == 1 else 'the inputs'} "
        f"(every input moved together, by up to {(len(line) - 1) * spacing:.2g} at |x| <= 1) the forward changes by "
        f"{max(line) - min(line):.3g}: rough like noise of {p.sigma:.2g} per value, but smooth at "
        f"1/{_tol.FD_FEATURE_SHRINK:g} of that spacing (noise {fine:.2g} there), so it is no noise: a ramp or pole far "
        f"narrower than the step ({float(np.min(h0)):.2g} at |x| <= 1), which central differences cannot "
        "resolve; no estimate can be vouched for here")


# ---------------------------------------------------------------------------------------------
# float32 inside: detection and the error bound of the float32 estimate
# ---------------------------------------------------------------------------------------------
#
# The step.  FD's float64 step h = cbrt(eps) max(1, |x|) balances central differences' truncation
# h^2 |f'''| / 6 against their rounding ~eps |f| / h; a value rounded to float32 carries u32 = eps32 / 2
# = 2^-24 relative error instead, so the same balance gives STEP32 = cbrt(eps32) = 4.9e-3 (relative to
# max(1, |x|)): truncation ~4e-6 |f'''|, rounding ~2.4 x 4 eps32 |f| / 4.9e-3 ~ 2e-4 |f| (see below) --
# the best a float32 forward allows, and still 5x below a backward wrong by 1e-3 of |f|.
STEP32 = EPS32 ** (1 / 3)
# The a-priori rounding of one value s = <seed, f(x)> of a forward through float32, in units of eps32:
# the inputs rounded to float32 move s by <= u32 sum_j |x_j ds/dx_j| (first order), the float32 ops
# round their results by <= 1-2 ulps each (a correctly rounded tanh, exp, product: u32 |f|; a libm within
# 1 ulp: 2 u32 |f|), the cast back is exact.  F32_ROUNDING_DEPTH = 4 eps32 = 8 u32 on (S + sum |x_j r_j|)
# covers an op and its input rounding with a factor 2-4 to spare; float32 reductions of many terms (up to
# n u32 sum |terms|) are covered by the measured term below.  (The float64 floor VALUE_DEPTH eps vmax is
# not carried over at eps32: it assumes every intermediate reaches s with gain 1, which would charge
# tanh(8)'s leaf 8 at float32 precision although tanh is flat there: 2.4 x 16 eps32 x 8 / (STEP32 x 8)
# ~ 9e-4, as large as the bugs to find.)
F32_ROUNDING_DEPTH = 4.0
# The measured rounding: s at F32_PROBE_POINTS random points within F32_PROBE_SPREAD x STEP32 max(1, |x|)
# (~1e-5 |x|, 80-160 float32 ulps: each point's float32 roundings are independent of the others', which an
# evenly spaced line does not give -- its spacing can be a near-integer number of ulps, and then every
# point rounds alike), minus the linear prediction s0 + r . d (its curvature ~|f''| 1e-10 |x|^2 and the
# estimate's error ~1e-4 |r| x 1e-5 |x| are far below float32's 6e-8 |f|).  What is left is rounding:
# the max of 16 samples of a symmetric error bounded by a exceeds a / 2 with probability >= 0.99 (uniform:
# 1 - 2^-16; a sum of two: 1 - (3/4)^16), so F32_PROBE_FACTOR = 2 x that max bounds one value's error.
# It catches what the model does not: a float32 reduction, a float32 op fed by a large float64
# intermediate (sin(x + 1000) rounds x + 1000, not x).
F32_PROBE_POINTS = 16
F32_PROBE_SPREAD = 1 / 512
F32_PROBE_FACTOR = 2.0


def float32_node(case, env) -> str:
    """The name of the first user op whose values over FD's batched pass say it computes in float32 inside
    (``float32_valued``), or "".  FD evaluates every case in float64 (float32 leaves too), so a float32
    number there comes from a cast inside the op.  Only user ops: gradspec's own ops compute in their
    inputs' dtype, so on a graph without user ops this is one attribute test per node.

    Only a node the stencil perturbs (downstream of a leaf requiring grad) counts: a float32 constant (a
    leaf with requires_grad False) through a user op gives float32 numbers at every point of the stencil
    although nothing there rounds at float32 precision, and naming it lowered the whole case to float32
    precision (a 1e-5 bug elsewhere read "agree")."""
    if not _runs_user_code(case):
        return ""
    table = _registry.all_specs()
    moved = None
    for node in case.nodes:
        spec = table.get(node.op)  # (a dict look-up per node: this runs on every FD estimate)
        if spec is None:  # a user op named only by the case (loaded from a case file)
            spec = case.spec(node.op)
        if not spec.user:
            continue
        v = env.get(node.name)
        if v is not None and v.shape[0] > 1 and float32_valued(v):
            if moved is None:  # (rare: only where a user op's values are float32 numbers)
                moved = perturbed(case)
            if node.name in moved:
                return node.op
    return ""


def _runs_user_code(case) -> bool:
    """Whether a node's spec is user code (``spec.user``), asked once per graph structure (a group's sets)."""
    return _structure.once(case, "runs_user_code", lambda: any(_spec(case, node.op).user for node in case.nodes))


def runs_unmodelled_code(case) -> bool:
    """Whether a node runs code whose rounding and continuity gradspec's model does not vouch for: a user op, or
    the engine's ``_cast`` (the one table op that may round to a lower precision than its input's)."""
    return _structure.once(case, "runs_unmodelled_code", lambda: any(
        _spec(case, node.op).user or node.op == "_cast" for node in case.nodes))


def _spec(case, op):
    spec = _registry.all_specs().get(op)
    return case.spec(op) if spec is None else spec  # (a user op named only by the case: loaded from a case file)


def perturbed(case) -> set:
    """The names of the leaves FD perturbs (those requiring grad) and of every node downstream of one."""
    moved = {l.name for l in case.leaves if l.requires_grad}
    for node in case.nodes:  # (graph order: a node's inputs come before it)
        if not moved.isdisjoint(node.inputs):
            moved.add(node.name)
    return moved


def float32_probe_offsets(h, seed: int = 0) -> np.ndarray:
    """(F32_PROBE_POINTS, n) random offsets within F32_PROBE_SPREAD x h (fixed per n: a case always
    gets the same points)."""
    rng = np.random.default_rng(h.size + seed)
    return rng.uniform(-1.0, 1.0, (F32_PROBE_POINTS, h.size)) * (F32_PROBE_SPREAD * h)


def float32_rounding(s0: float, Smax: float, flat, r, s_probe, offsets) -> float:
    """The error bound of one value of s for a forward through float32: the larger of the model
    (F32_ROUNDING_DEPTH eps32 (S + sum |x_j r_j|)) and the measurement (F32_PROBE_FACTOR x the largest
    residual of the probe points from the linear prediction s0 + r . d); see the constants above."""
    with np.errstate(all="ignore"):
        model = F32_ROUNDING_DEPTH * EPS32 * (Smax + float(np.dot(np.abs(flat), np.abs(r))))
        resid = np.abs(np.asarray(s_probe) - s0 - offsets @ np.asarray(r))
        measured = F32_PROBE_FACTOR * float(np.max(resid, initial=0.0))
    if not np.isfinite(measured):
        return model
    return max(model, measured)


# ---------------------------------------------------------------------------------------------
# float32 hidden behind float64 arithmetic (no value is a float32 number)
# ---------------------------------------------------------------------------------------------
#
# Naming the op: a user op's own outputs on the probe line leave the smooth cubic by more than
# HIDDEN32_NAME_ULPS float64 ulps of their largest value (float64 code: a few ulps; a float32 part
# of even 1e-6 of the output: ~eps32 1e-6 |f| = 500 ulps).  The first such op in graph order is the
# source (gradspec's own ops compute in float64 here, so the staircase starts at a user op).
HIDDEN32_NAME_ULPS = 64.0


def user_nodes(case) -> list:
    """(node, spec) for the nodes of ``case`` that run user code (user ops, torch Functions), in graph
    order: the only places where a computation at lower precision can hide.  One dict look-up per node."""
    if not _runs_user_code(case):
        return []
    table = _registry.all_specs()
    out = []
    for node in case.nodes:
        spec = table.get(node.op)
        if spec is None:  # a user op named only by the case (loaded from a case file)
            spec = case.spec(node.op)
        if spec.user:
            out.append((node, spec))
    return out


def hidden_float32(case, parts, flat, probe) -> tuple[str, str]:
    """(the user op, the evidence) where the forward rounds to float32 inside although no value says so,
    else ("", "").  ``parts()`` gives (s0, S0, value floor, noise-line sigma) of FD's pass; ``probe`` = (s_env,
    args): ``s_env(*args, X)`` gives s at each row of X and the batched environment.

    An op known to compute in float32 inside (``float32_seen``: a torch Function's forward was seen casting
    float64 to float32, gradspec.verify.torch_float32) is named at once: where its float32 part is flat over
    every probe (tanh saturated: float32's quanta are 0.3 wide in x at x = 8) nothing local can show it, yet
    its rounding is still there.  What the probes below see is remembered only inside a ``verify_*`` run
    (``float32_line.learning``, reset when the run starts), not by a bare ``gs.check``: one mistaken sighting
    would compare every later case at float32 precision.  Noise the noise line saw
    (``sigma``) raises the floor s's steps must exceed (FD's float64 bound holds that noise) but does not skip
    the probe: small elements' float32 noise hides nothing of a large element's wider steps.  The forward runs on
    ``float32_line``'s probe lines (``float32_line.steps``: 16 points within 8-16 float32 cells of every
    input, the half line, a line inside one cell), and steps are looked for in s (above the rounding bound
    of one value that FD's error estimate assumes, max(ROUNDING_DEPTH eps (S0 + |s0|), the value floor):
    that bound does not hold at the step's scale) and in each user op's outputs (above HIDDEN32_NAME_ULPS
    float64 ulps of its largest output: s alone can miss them where elements cancel -- an odd op at inputs
    symmetric about 0 moved with opposite signs).  Cases without user ops return at once (gradspec's ops
    compute in float64 here)."""
    if not flat.size:
        return "", ""
    users = user_nodes(case)
    if not users:
        return "", ""
    marked = [(node, seen) for node, spec in users if (seen := getattr(spec, "float32_seen", ""))]
    if marked:  # (only a node FD moves: a float32 part fed constants alone rounds the same at every point)
        moved = perturbed(case)
        for node, seen in marked:
            if node.name in moved:
                return node.op, seen
    s0, S0, vfloor, sigma = parts()  # (asked for only here: S and sigma are computed when first needed)
    # Noise the noise line saw is in FD's float64 bound already, so s's steps must stand above it too.  It is no
    # reason to skip the probe: float32 noise of small elements (1e-3, crossing many float32 cells on the noise
    # line) says nothing of a large element's wider steps, which FD's float64 step turned into an error 18x its
    # bound (tryout7 #3).  An ill-conditioned float64 solve's noise is left alone by steps()'s in-cell test.
    s_floor = max(ROUNDING_DEPTH * EPS * (S0 + abs(s0)), vfloor, _tol.FD_NOISE_SIGMAS * sigma)
    s_env, args = probe
    parts_of: list = []  # (node, spec, first column, columns) of the user ops' outputs in the matrix

    envs: list = []  # the line's environment: each user op's own inputs along it (float32_line.cell_aligned)

    def evaluate(offsets):
        s, env = s_env(*args, flat + offsets(flat))
        if offsets is _line.line_offsets:
            envs.append(env)
        cols = [np.asarray(s, dtype=np.float64).reshape(_line.LINE_POINTS, 1)]
        at = 1
        for node, spec in users:
            v = env.get(node.name)
            if v is None or getattr(v, "dtype", None) is None or v.dtype.kind != "f" or v.shape[:1] != (_line.LINE_POINTS,):
                continue
            v = np.asarray(v, dtype=np.float64).reshape(_line.LINE_POINTS, -1)
            if len(parts_of) < len(users) and offsets is _line.line_offsets:
                parts_of.append((node, spec, at, v.shape[1]))
            cols.append(v)
            at += v.shape[1]
        return np.concatenate(cols, axis=1)

    with np.errstate(all="ignore"):
        first = evaluate(_line.line_offsets)
        floor = np.empty(first.shape[1])
        floor[0] = s_floor
        for _, _, a, k in parts_of:
            v = first[:, a : a + k]  # (its size, and the inputs' float64 rounding |x f'| eps: the rise / 16 eps32)
            floor[a : a + k] = HIDDEN32_NAME_ULPS * EPS * (float(np.max(np.abs(v), initial=0.0))
                                                          + (float(np.max(np.ptp(v, axis=0))) if v.size else 0.0) / (2 * _line.LINE_SPAN * EPS32))
    mask, r = _line.steps(lambda o: first if o is _line.line_offsets else evaluate(o), floor, flat.size > 1)
    if not mask.any():
        return "", ""
    for node, spec, a, k in parts_of:
        if mask[a : a + k].any():
            why = _aligned_why(node, spec, envs[0], mask[a : a + k], r[a : a + k], first[:, a : a + k])
            _line.learnt(spec, why)  # (inside a verify_* run: later cases too, if float32 rounding of its inputs)
            return node.op, why
    # s steps, no op's outputs alone do (float32 parts of several ops, summed; or float64 code losing digits)
    return users[0][0].op, _line.COARSE_WHY.replace("its outputs step", "the values step")


def _aligned_why(node, spec, env, mask, r, v) -> str:
    """HIDDEN_WHY where the op's steps (its outputs ``v`` on the line) follow its inputs' float32 cells
    (``float32_line.cell_aligned``, run on the op alone at its own inputs along the line: a table op feeding it
    moves them by float64 amounts) and are no larger than float32 rounding of those inputs could make
    (``float32_line.float32_sized``), else WIDE_WHY or COARSE_WHY (float64 code that resolves its inputs coarsely
    there: 1 + x^2 at x = 1e-6, an underflow, an ill-conditioned solve)."""
    ins = [np.asarray(env[i]) for i in node.inputs]
    try:
        aligned = _line.cell_aligned(lambda b: spec.forward_batched(b, node.params, 1), ins, r)
    except Exception:  # noqa: BLE001 - a forward refusing the probes proves nothing either way
        return _line.COARSE_WHY
    return _line.classify(mask, aligned, _line.float32_sized(v, r, ins))
