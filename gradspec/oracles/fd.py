"""Finite differences of ``s(x) = sum_r <seed_r, f_r(x)>`` in float64.

All perturbed points go through ONE batched numpy evaluation of the graph (every op's forward
takes a leading batch axis), not a Python loop per element.  While the batch is small (up to
1024 rows, bounded by the shape rules) the centre is row 0 of that same pass; larger cases
evaluate the centre once and the stencil in chunks of at most MAX_BATCH_ELEMENTS.

Step size: ``h_j = eps**(1/3) * max(1, |x_j|)`` (about 6e-6 relative) balances the O(h^2)
truncation error of central differences against the O(eps/h) rounding error.  Each element is
evaluated at ``x + h``, ``x - h`` and ``x + 2h`` (3n points, plus the centre once):

* ``D = (s(x+h) - s(x-h)) / 2h`` is the central difference; its error is ``h^2 f''' / 6 + O(h^4)``;
* the third difference ``T = (s(x+2h) - 3 s(x+h) + 3 s(x) - s(x-h)) / h^3`` estimates ``f'''``
  per element, so the estimate is the corrected ``R = D - h^2 T / 6``, and ``|h^2 T / 6|`` (the
  size of the correction, far larger than R's remaining error) is its truncation-error estimate;
* rounding: each ``s`` value carries about ``ROUNDING_DEPTH * eps * S`` absolute error, with
  ``S = sum_r <|seed_r|, |f_r(x)|>``, and at least ``VALUE_DEPTH * eps * max|value| * sum|seed|``
  where an op cancels internally; D and the correction amplify it by about 2.4/h (1/h from D,
  8/6 h from the third difference).  A near-cancelling third difference can make the truncation
  term look tiny by luck, so the rounding term must stand on its own.

3n points rather than the 4n of a two-step Richardson scheme: a per-element error estimate
for n evaluations more than plain central differences, not 2n.  The comparison tolerance is
built from the two error terms (``gradspec.tolerances``).

The oracle refuses a case when an input of some op is within its perturbation reach of a
point where the op is not differentiable (a kink, a tie, a domain edge): the reach is measured
on the actual perturbed intermediate values, so it accounts for amplification through the graph
(``gradspec.oracles._fd_reach``) -- except for gradspec's own relu, leaky_relu, elu, abs, clamp,
maximum and minimum, whose kinks are per position: there the elements whose stencil moves a position near its kink are
left out and the others compared (``gradspec.oracles._fd_kinkpos``, session 15), at an exact kink
too (``FiniteDifferences.applies`` then does not step aside for the whole case).

Cost (issue 15: at most 2x plain central differences on the same graph): apart from the batched
pass, the work is a few dozen small operations per case, so they are kept few: the arithmetic
after the pass on Python floats for n <= SMALL_N, reductions as direct ufunc calls, the leaves'
reach from their stencil offsets, one fancy-indexed stencil.  Each fast path performs the same
float operations in the same order as the straightforward code (tests/test_fd_fast.py compares
both on a few hundred cases: the same floats, the same refusals).

For black-box code (user ops, torch Functions) three more things (issue 13; the numbers and their
reasons are in ``gradspec.tolerances``):

* the forward's own noise is measured on 16 extra points of the same pass (an ill-conditioned
  solve inside the user's code rounds at kappa eps, not a few ulps) and enters the rounding term,
  and a line of those points that repeats its values (a staircase: lower precision inside) or a
  stencil that gave one value everywhere (probed farther, ``_fd_probes.flat_or_stairs``) makes FD
  step aside -- only where a node runs such code (``_user_code``: a user op, or the engine's
  ``_cast``; session 15, issue 15, see "Graphs of gradspec's own ops" below);
* where the step stays too coarse, steps down to h/4096 are tried (a pole or kink at distance d
  spoils every step above ~d) before the oracle refuses, with the reason;
* a kink (one-sided slopes whose difference does not shrink with the step) or a jump (values
  whose difference does not) raises :class:`NonDifferentiable`: ``gs.check`` then skips every
  estimate of that case (``Verdict.nondifferentiable``) instead of judging an average of slopes --
  except where only kinks were found and at some elements only: those elements' estimates get an
  infinite error bound and are named (``FDResult.kinks``), and the other elements, whose lines
  cross no kink, are compared (tryout7 #13g; ``Verdict.unjudged_elements``).

Graphs of gradspec's own ops (no user op, no ``_cast``) take neither the noise line nor the staircase
probes (session 15: 16 of FD's 3n + 17 rows, and at a constant output one more forward of 4 points, for
FD <= 2x plain central differences).  Why the error bound stays sound without them: the three exist for
rounding that no model of the graph predicts -- an ill-conditioned computation inside opaque code (kappa
eps), or a computation at a lower precision than its dtype (a staircase).  The table's ops are numpy
closed forms that compute in their inputs' dtype, float64 here (``_fd_probes.float32_node`` rests on the
same fact; ``tests/test_fd_noise_scope.py`` checks it on drawn graphs), so each value of s carries the
rounding the model bounds: ``ROUNDING_DEPTH eps (S + |s|)``, and at least ``VALUE_DEPTH eps max|value|
sum|seed|`` with max|value| over every node (an input absorbed into a large intermediate, or cancelling
inside an op, is covered by that intermediate's size).  That model is what bounds every other estimate
of such a graph, before the noise line existed (issue 13) and since.  On these graphs:

* sigma: the floor was ``max(vfloor, FD_NOISE_SIGMAS sigma)``; for float64 closed forms sigma ~ eps |s|
  (``gradspec.tolerances``), and where 10 sigma stood above the floor it measured the line's own 4th
  differences of a smooth function near a zero of s, not noise (``_noise_blocked``'s docstring).  The
  bound is now the model's: tighter there by that margin, the same elsewhere (``floor`` = ``vfloor``).
* staircase: exact repeats along the line where the slope predicts a change of RESOLUTION_FLOORS rounding
  floors do not occur in code the model bounds (``_fd_probes.staircase``); the test detected lower
  precision inside, which these ops do not have.
* a constant output (every stencil value of s the same float): the estimate is 0 and its true error is
  |g_j| itself.  With each s value within delta (the rounding bound) of the exact one, s(x + h e_j) =
  s(x - h e_j) gives |2 h_j g_j + h_j^3 f'''/3| <= 2 delta, so |g_j| <= delta / h_j + h_j^2 |f'''| / 6; the
  third difference (0 here too, its four values within delta each) bounds h_j^3 |f'''| by 8 delta, so |g_j|
  <= (1 + 8/6) delta / h_j = 2.33 delta / h_j: within the estimate's bound 2.4 delta / h_j (the same 1/h + 8/6h).
  The far probe looked for a staircase wider than 2 h (float32 tanh at x = 5): lower precision again.
  Where the output is constant because the graph is flat there (relu below 0) the estimate 0 is exact,
  and the probe could only refuse it (a flat region's edge within 2.5e-2 |x|: "the edge of a flat region").
* noise_or_feature ran only where sigma raised the floor: never on these graphs.
Tighter bounds and fewer refusals only, and user code keeps every test bit for bit.  The stencil rows are
the same floats; an estimate moves only through refinement, whose "too coarse" test (trunc > 0.5 err, with
trunc > COARSE max(|r|, scale)) now sees the model's err: an element whose truncation term sat between half
of it and half of the noise-raised one is refined at h / 16 (kept where that lowers its bound).
``benchmarks/README.md`` (session 15, fdline) lists the verdicts that moved (estimates only, no status).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import tolerances as _tol
from .._private import float32_line as _f32line
from .._private import structure as _structure
from .._private.kinks import center_kink_distances, exclusion
from .._private.prologue import oracle_call
from ..spec import registry as _registry
from . import _fd_even as _even
from . import _fd_kinkpos as _kinkpos
from . import _fd_probes as _probes
from ._base import NonDifferentiable, Oracle, OracleError
from ._fd_lazy import LazyErrors
from ._fd_lazy import Pass as _Pass
from ._fd_lazy import Rounding as _Rounding
from ._fd_lazy import error as _lazy_error
from ._fd_lazy import error_small as _error_small
from ._fd_lazy import settled as _settled
from ._fd_lazy import settled_small as _settled_small
from ._fd_reach import check_reach as _check_reach
from ._fd_reach import watch_plan as _watch_plan
from ._fd_reach import watched as _watched
from ._fd_refine import element_name as _element_name
from ._fd_refine import refine as _refine
from ._fd_stencil import (
    _FACTORS,
    COARSE,
    EPS,
    FACTORS,
    SMALL_N,
    _combine,
    _combine_all,
    _estimate_small,
    _leaf_batches,
    _noise_rows,
    _range_points,
    _repeat,
    _stencil,
)
from ._fd_values import (
    _as64,
    _at_center,
    _batch_seeds64,
    _center_scale,
    _finite_center_scale,
    _floor,
    _inputs,
    _row0_scale,
    _S_only,
    _s_only,
    _s_values,
    _scale,
    _seeds64,
)

__all__ = ["FiniteDifferences", "FDResult", "fd_gradient", "fd_directional"]

STEP = EPS ** (1 / 3)
# Cap on (batch size) x (elements of the largest tensor) per batched pass: 2**17 float64 = 1 MiB per
# array.  Larger passes are slower, not faster: their arrays miss the caches, and glibc serves them
# with fresh pages (mmap, or heap memory it trimmed after the previous call), so every call
# page-faults its whole working set.  Measured on sum(tanh(x * w)) (benchmarks/README.md): with a
# cap of 4e6, FD at n = 340 took 3.1 ms, at n = 1000 15 ms; with 2**17, 0.46 ms and 3.1 ms.  Below
# 2**16 the per-chunk Python cost takes over again.
MAX_BATCH_ELEMENTS = 2**17
_FACTORS_COL = _FACTORS[:, None]
# The reductions as ufunc calls: ``a.max()`` / ``a.sum()`` / ``a.all()`` go through a Python wrapper
# (numpy/_core/_methods.py) that costs about a microsecond more than the reduction on FD's small arrays.
_MAX, _ALL, _ANY = np.maximum.reduce, np.logical_and.reduce, np.logical_or.reduce
_F64 = np.dtype(np.float64)  # (a dtype compares with a dtype faster than with the scalar type, which it converts first)


@dataclasses.dataclass
class FDResult:
    grads: dict[str, np.ndarray]
    error: dict[str, np.ndarray]  # per-element error estimate (truncation + rounding)
    steps: dict[str, np.ndarray]
    evaluations: int
    # the user op that computes in float32 inside ("" for float64 code): the estimate used a float32 step
    # and a float32 error bound, and gs.check compares at float32 precision
    float32_inside: str = ""
    # the part of ``error`` the shaky test judges (None: all of it): for a float32 estimate the truncation
    # part -- its rounding part is a bound at float32 precision, not an estimate that can be off
    judged: dict | None = None
    # how float32 showed (the note's words): all values float32 numbers, or a staircase behind float64 arithmetic
    float32_why: str = "its values over a float64 stencil are all float32 numbers"
    # input element ("x[0]") -> why its estimate is not compared: its line crosses a kink (_finer); error is inf there
    kinks: dict = dataclasses.field(default_factory=dict)


def _reach(batch, center):
    """How far each element of a tensor moves over the perturbed points (max over the batch axis).

    On large batches ``max |b - c| = max(max b - c, c - min b)``: ``b -> fl(b - c)`` is monotone
    and rounding is symmetric, so this is bit for bit ``np.abs(batch - center).max(axis=0)`` in
    float64 (NaN and inf included; the final ``abs`` turns the -0.0 that ``max`` may pick into
    0.0), with two reductions over the batch instead of three passes and a temporary of its size
    (a third of FD's own work on graphs of a few hundred elements).  On small ones the three
    calls of the direct form cost less than six."""
    if batch.size <= _REACH_DIRECT:  # (the reduction as a ufunc call: ``.max`` adds ~1 us of Python)
        if batch.dtype != _F64:
            batch = batch.astype(np.float64)
        return _MAX(np.abs(batch - center), axis=0)
    hi = np.subtract(batch.max(axis=0), center, dtype=np.float64)
    lo = np.subtract(center, batch.min(axis=0), dtype=np.float64)
    return np.abs(np.maximum(hi, lo, out=hi), out=hi)


_REACH_DIRECT = 2048



def _leaf_reach(leaves, flat, h, watch) -> dict:
    """``_reach`` of the watched differentiable leaves without their batches: element j of a leaf
    moves only in its own three stencil rows, to ``x_j + f h_j`` (the same float as in the batch),
    and stays exactly at ``x_j`` in every other row, so the max over the batch of ``|b - x_j|`` is
    the max over f of ``|(x_j + f h_j) - x_j|`` -- O(n) instead of O(rows x leaf size), which was
    most of FD's own work on graphs that only move data at a few hundred inputs."""
    out, off, moved = {}, 0, None
    for l in leaves:
        size = l.value.size
        if l.name in watch and size:
            if moved is None:
                moved = _MAX(np.abs((flat + _FACTORS_COL * h) - flat), axis=0)
            out[l.name] = moved[off : off + size].reshape(l.shape)
        off += size
    return out


def _leaf_reach_small(leaves, flat, hl, watch, tops) -> dict:
    """``_leaf_reach`` on Python floats for a few elements with finite steps (``hl``: h as a list),
    and the largest reach of each watched leaf in ``tops`` (what a kink test takes).  The same
    operations (``f h``, ``x + f h``, ``- x``, ``abs``, the max of three): with x and h finite no
    NaN arises, so Python's max is numpy's.

    Where |x| < REACH_2H_BELOW the max of the three is the third, |(x + 2h) - x|, and only it is computed: each
    difference is its exact value f h off by at most u (|x| + |f| h) (u = 2^-53: one rounding in the sum, one in
    the difference, both relative), and h = STEP max(1, |x|) >= 6e-6 |x| makes 2h - 3u (|x| + 2h) > h + 2u (|x| +
    h): the 2h point is strictly the farthest (``tests/test_fd_fast.py`` checks it on the edges).  Near float64's
    largest values x - h or x + 2h may overflow, and an inf can come from either side: there all three."""
    out, off, moved = {}, 0, None
    for l in leaves:
        size = l.value.size
        if l.name in watch and size:
            if moved is None:
                moved = []
                for x, hj in zip(flat.tolist(), hl):
                    if -REACH_2H_BELOW < x < REACH_2H_BELOW:
                        moved.append(abs((x + 2.0 * hj) - x))
                        continue
                    a, b, c = abs((x + hj) - x), abs((x + -1.0 * hj) - x), abs((x + 2.0 * hj) - x)
                    if b > a:
                        a = b
                    moved.append(c if c > a else a)
            mine = moved[off : off + size]
            out[l.name] = np.array(mine).reshape(l.value.shape)
            tops[l.name] = max(mine)
        off += size
    return out


REACH_2H_BELOW = 1e300  # |x| below this: x + 2h is the stencil's farthest point from x (_leaf_reach_small)


# Up to this many stencil rows the centre is evaluated in the same batched pass: below 64 rows no
# tensor of the graph can be large enough for the batch to matter; up to 1024 rows only when the
# shape rules say the largest tensor times the rows stays under MAX_BATCH_ELEMENTS.
INLINE_ROWS = 64
INLINE_ROWS_CHECKED = 1024


def _largest(case, specs) -> int:
    """The number of elements of the case's largest tensor, from the shape rules: ``max(prod(s) for s
    in case.shapes().values())``, with each node's output shape remembered per (op spec, input
    shapes, params).  Shape rules without a declared rule run the op on ones (~3 us a node, up to
    ~15% of FD on graphs of 20 to 100 inputs); graphs repeat their ops' signatures all the time."""
    shapes = {l.name: l.value.shape for l in case.leaves}
    top = max([l.value.size for l in case.leaves] + [1])
    get, prod = _OUT_SHAPES.get, math.prod
    for node, spec in zip(case.nodes, specs):
        ins = tuple([shapes[i] for i in node.inputs])  # (shapes are tuples: the leaves' and out_shape's)
        params = node.params
        try:
            key = (spec, ins, tuple([(p, type(v), v) for p, v in params.items()]) if params else ())
            out = get(key)
        except TypeError:  # a parameter that cannot be hashed (an array): no memo
            key = out = None
        if out is None:
            out = tuple(spec.out_shape(ins, node.params))
            if key is not None:
                if len(_OUT_SHAPES) > 4096:  # user ops made afresh in a loop: keep the memo bounded
                    _OUT_SHAPES.clear()
                _OUT_SHAPES[key] = out
        shapes[node.name] = out
        size = prod(out)
        if size > top:
            top = size
    return top


_OUT_SHAPES: dict = {}  # (spec, input shapes, params) -> output shape (_largest)


def _largest_of(case, specs) -> int:
    return _structure.once(case, "fd_largest", lambda: _largest(case, specs))  # (a group's sets share it)



class _RowZero(dict):
    """name -> row 0 (the centre) of a batched environment, taken when first asked for: the
    estimate needs the centre of the roots and of the watched inputs, not of every node."""

    def __init__(self, env):
        super().__init__()
        self.env = env

    def __missing__(self, name):
        v = self[name] = self.env[name][0]
        return v

    def __bool__(self):  # ``case.seed_arrays(values)`` falls back to a fresh evaluation on an empty mapping
        return True


def _inline_pass(case, x64, leaves, flat, h, n, watch, hl, specs, user=True) -> _Pass:
    """Small n: the centre is row 0 of the one batched pass, the noise line its last rows (the fixed
    cost of a second evaluation would dominate a graph of a few elements).  ``hl``: the steps as
    Python floats, given for n <= SMALL_N when every step is finite (the small forms' condition)."""
    X = _stencil(flat, h, n, hl is not None, user)
    rows = X.shape[0]
    env = case._forward(_leaf_batches(case, x64, leaves, X), 1, specs)  # (_evaluate's batched path)
    f32 = _probes.float32_node(case, env) if n and user else ""
    vmax = _row0_scale(env)
    if vmax is None:  # something is not finite at the centre: the general form finds what, and says so
        vmax, bad = _scale([(name, v[0]) for name, v in env.items() if v.dtype.kind == "f" and v.size])
        if bad is not None:
            raise OracleError(f"finite differences: {bad} is not finite at the case's inputs")
    center = _RowZero(env)
    seeds64, abs_seeds, l1 = _batch_seeds64(case, env, center)
    s, roots = _s_only(env, case.roots, seeds64, rows)
    m = len(FACTORS) * n + 1
    tops: dict = {}
    if hl is not None and n:  # the stencil's factors are FACTORS = (1, -1, 2): asserted at the module's end
        reach = _leaf_reach_small(leaves, flat, hl, watch, tops)
    else:
        reach = _leaf_reach(leaves, flat, h, watch) if n else {}
    for name in watch if n else ():  # n = 0: the centre alone, nothing moves
        v = env[name]
        if name not in reach and v.dtype.kind == "f" and v.size:
            reach[name] = rv = _reach(v[1:m], v[0])
            if v.ndim == 1:  # a scalar: its largest reach is itself (a kink test's, check_reach's max of one)
                tops[name] = float(rv)
    small = n <= SMALL_N
    if small:  # one conversion of s for the centre, the noise line and the small estimate
        sl = s.tolist()
        line, s0 = sl[m:], sl[0]
        sl = [sl[1 : n + 1], sl[n + 1 : 2 * n + 1], sl[2 * n + 1 : m]]
    else:
        line, s0, sl = s[m:].tolist(), float(s[0]), None

    def S_of():  # (the rounding model's S, when the error bound or a probe asks: _fd_lazy)
        S = _S_only(roots, seeds64, abs_seeds)
        if not small:
            return S[1:m].reshape(len(FACTORS), n), float(S[0]), None
        Sl = S[:m].tolist()
        return S[1:m].reshape(len(FACTORS), n), Sl[0], [Sl[1 : n + 1], Sl[n + 1 : 2 * n + 1], Sl[2 * n + 1 :]]

    return _Pass(center, _floor(vmax, seeds64, abs_seeds, l1), seeds64, s0, s[1:m].reshape(len(FACTORS), n), reach,
                 rows, _Rounding(S_of, line if n else ()), tuple(line), sl, tops, f32)


def _chunked_pass(case, x64, leaves, flat, h, n, watch, specs, user=True) -> _Pass:
    """Large n: the centre once, the stencil in chunks under MAX_BATCH_ELEMENTS, the noise line apart."""
    nf = len(FACTORS)
    center = case._forward(x64, 0, specs)
    vmax = _finite_center_scale(center)
    seeds64 = _seeds64(case, center)
    s0, S0 = _at_center(case, center, seeds64)
    biggest = max([np.size(v) for v in center.values()] + [1])
    chunk = max(1, int(MAX_BATCH_ELEMENTS // (nf * biggest)))
    s_vals, S_vals = np.empty((nf, n)), np.empty((nf, n))
    reach = _leaf_reach(leaves, flat, h, watch)
    watched = [(name, np.asarray(center[name])) for name in watch if name not in reach]
    watched = [(name, c) for name, c in watched if c.size and c.dtype.kind == "f"]
    evaluations = 1
    f32 = ""
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        batches, nb = _range_points(x64, leaves, start, stop, h)
        env = case._forward(batches, 1, specs)
        if start == 0 and user:
            f32 = _probes.float32_node(case, env)
        s, S = _s_values(env, case.roots, seeds64, nb)
        evaluations += nb
        s_vals[:, start:stop] = s.reshape(nf, -1)
        S_vals[:, start:stop] = S.reshape(nf, -1)
        for name, c in watched:
            rc = _reach(env[name], c)
            reach[name] = np.maximum(reach[name], rc) if name in reach else rc
    if n and user:  # (the noise line only where a node runs user code: _run_pass)
        noise = _noise_rows(flat, h)
        sn = _s_values(case._forward(_leaf_batches(case, x64, leaves, noise), 1, specs), case.roots, seeds64, len(noise))[0]
        evaluations += len(noise)
    line = sn.tolist() if n and user else ()
    return _Pass(center, _floor(vmax, seeds64), seeds64, s0, s_vals, reach, evaluations,
                 _Rounding(S=(S_vals, S0, None), line=line), tuple(line), f32=f32)


@oracle_call
def fd_gradient(case, *, check_reach: bool = True) -> FDResult:
    """Full finite-difference gradient of every differentiable leaf (3n + 1 points, one batched pass per chunk)."""
    leaves, x64, flat = _inputs(case)
    n = flat.size
    h, hl = _steps(flat, n)
    specs = _specs(case)
    # (the value sets of a group share the plan: nodes of one structure, each case's alike)
    plan = _structure.once(case, "fd_watch", lambda: _watch_plan(case, specs)) if check_reach else []
    user = _user_code(specs)
    p = _run_pass(case, x64, leaves, flat, h, n, plan, hl, specs, user)
    if p.f32:  # a user op computes in float32 inside: estimate it as a float32 computation
        return _float32_gradient(case, x64, leaves, flat, plan, check_reach, p)
    try:
        out = _float64_gradient(case, leaves, x64, flat, h, plan, hl, p, check_reach)
    except NonDifferentiable:
        raise  # (a kink or jump the float64 steps found wins: a float32 staircase never passes for one)
    except OracleError as e:
        out = e
    if getattr(out, "kinks", None) and not _kinkpos.declared_only(out.kinks):  # (kinks it found win too, as above;
        return out  # elements left out beside a declared kink are no finding: the float32 probes still run)
    # float32 hidden behind float64 arithmetic (no value is a float32 number): probed where a user op runs
    f32, why = _probes.hidden_float32(case, lambda: (p.s0, p.S0, p.vfloor, p.sigma), flat,
                                      (_s_env, (case, x64, leaves, p.seeds64))) if user else ("", "")
    if f32:
        res = _float32_gradient(case, x64, leaves, flat, plan, check_reach, p.with_f32(f32), why)
        res.float32_why = why
        return res
    if isinstance(out, OracleError):
        raise out
    return out


def _float64_gradient(case, leaves, x64, flat, h, plan, hl, p: _Pass, check_reach: bool) -> FDResult:
    """The estimate at float64 steps from the first pass ``p`` (refined where too coarse).  Where no element is too
    coarse (``_fd_lazy.settled``) the error bound is left to be computed when first asked for."""
    n = flat.size
    small_s = (p.sl if p.sl is not None else p.s.tolist()) if n <= SMALL_N else None
    # elements whose corrected estimate the even part of s may spoil beyond its bound (_fd_even): the eager path
    even = _even.suspects(p.s, p.s0, h, rows=small_s)
    # elements whose stencil moves a position of relu/abs/clamp/maximum/... near its kink (_fd_kinkpos): where
    # the reach check would refuse the case for such ops alone, those elements are left out, the others compared
    near = _kinkpos.near_kinks(case, x64, leaves, h, plan, p) if check_reach and p.reach else _kinkpos.NONE
    got = None
    if not even.size and not near.size:
        got = _settled_small(small_s, p.s0, hl, p.vfloor) if small_s is not None else _settled(p.s, p.s0, h, p.vfloor)
    if got is not None:  # the steps of _estimate_small's path with refine False, or _refine's with nothing to refine
        r, lower, kept = got
        _probes.staircase(p, r, h, leaves, (_s_at, (case, x64, leaves, p.seeds64), flat))
        if small_s is not None:
            r, lower = np.array(r), np.array(lower)
        return _result(leaves, r, _deferred_error(leaves, p, h, hl, small_s, lower, kept), h, p.evaluations)
    floor = float(max(p.vfloor, _tol.FD_NOISE_SIGMAS * p.sigma))
    small = None
    if n <= SMALL_N:
        small = _estimate_small(small_s, p.lists[1] if p.lists is not None else p.S.tolist(), p.s0, p.S0, hl, floor)
    if small is not None and small[0] == "not finite":
        _not_finite(small[1], h)
    if small is None and not _ALL(np.isfinite(p.s), axis=None):
        _not_finite(int(np.argwhere(~np.isfinite(p.s))[0][1]), h)
    if small is not None and not small[3] and not even.size and not near.size:
        if floor > p.vfloor:
            _noise_blocked(case, x64, leaves, flat, h, p, *(np.array(a) for a in small[:3]))
        _probes.staircase(p, small[0], h, leaves, (_s_at, (case, x64, leaves, p.seeds64), flat))
        return _result(leaves, np.array(small[0]), np.array(small[1]), h, p.evaluations)
    if small is not None:
        r, err, trunc = (np.array(a) for a in small[:3])
    else:
        r, err, trunc = _combine_all(p.s, p.s0, p.S, p.S0, h, floor)
    spent = _even.mirror(case, x64, leaves, p, h, floor, even, (r, err, trunc)) if even.size else 0
    if near.size:  # nothing is compared there: no refinement, no noise test
        err[near], trunc[near] = np.inf, 0.0
    if floor > p.vfloor:
        _noise_blocked(case, x64, leaves, flat, h, p, r, err, trunc)
    kinks: dict = {}
    h_final, more = _refine(case, x64, leaves, p, h, floor, (r, err, trunc), kinks)
    more += spent
    if near.size:
        more += _kinkpos.leave_out(case, x64, leaves, p, near, h, err, floor, kinks)
    _probes.staircase(p, r, h, leaves, (_s_at, (case, x64, leaves, p.seeds64), flat))  # (h: the noise line's steps)
    out = _result(leaves, r, err, h_final, p.evaluations + more)
    out.kinks = kinks
    return out


def _noise_blocked(case, x64, leaves, flat, h, p: _Pass, r, err, trunc) -> None:
    """The noise line's sigma raised the floor (``p``); where that alone kept an element from refinement -- too
    coarse by COARSE, with truncation above the rounding model's share of the error but not above the noise's --
    the noise decides the estimate, so ask whether it is noise (``_fd_probes.noise_or_feature``: a ramp narrower
    than the line is not, and FD steps aside).  Elsewhere the "noise" changes nothing FD reports: a smooth
    function's 4th differences near a zero of the output, where the VALUE_DEPTH floor is ~0, raise the floor
    to ~1e-12 beside derivatives of 1e6."""
    scale = max(float(_MAX(np.abs(r), axis=None, initial=0.0)), 1e-300)
    with np.errstate(all="ignore"):
        err0 = _combine(p.s, p.s0, _MAX(p.S, axis=0), p.S0, h, p.vfloor)[1]
        blocked = (trunc > COARSE * np.maximum(np.abs(r), scale)) & (trunc <= 0.5 * err) & (trunc > 0.5 * err0)
    if _ANY(blocked, axis=None):
        _probes.noise_or_feature(p, h, leaves, (_s_at, (case, x64, leaves, p.seeds64), flat))


def _specs(case) -> list:
    """The nodes' op specs, looked up once for the watch plan, the shape rules and the forward (three
    ``case.spec`` calls per node were ~5% of FD on graphs of ten nodes): the op table's entry, as
    ``case.spec`` gives it, else ``case.spec`` itself (a user op named by the case, or the error)."""
    specs = case._node_specs()
    if specs is None:
        get = _OP_TABLE.get
        specs = [get(node.op) or case.spec(node.op) for node in case.nodes]
    return specs


_OP_TABLE = _registry.all_specs()  # (the table itself: ops registered later are in it too)


def _user_code(specs) -> bool:
    """Whether a node runs code whose rounding the model does not bound: user code (``_fd_probes``' float32 tests
    look only there; ``_fd_probes._runs_user_code`` asks the structure memo, which outside a check scope computes
    it afresh) or the engine's ``_cast``, the one table op that may round to a lower precision than its input's.
    Where this is False, FD takes no noise line and no staircase probe (the module's docstring says why)."""
    for spec in specs:
        if getattr(spec, "user", True) or spec.name == "_cast":
            return True
    return False


def _steps(flat, n):
    """The steps ``h = STEP max(1, |x|)``, and as Python floats for n <= SMALL_N (the small estimate's;
    else None).  Up to _STEPS_PY elements on Python floats where every input is finite (Python's
    ``max`` would not keep a NaN as ``np.maximum`` does): the same products of the same values, in
    half the time of three numpy calls and a conversion."""
    if n <= _STEPS_PY:
        xs = flat.tolist()
        if math.isfinite(sum(xs)):
            hl = [STEP * (a if a > 1.0 else 1.0) for a in map(abs, xs)]
            return np.array(hl), hl
    h = STEP * np.maximum(1.0, np.abs(flat))
    return h, (h.tolist() if n <= SMALL_N else None)


_STEPS_PY = 6  # elements (measured: numpy's fixed ~3 us is cheaper from ~8 on)


def _run_pass(case, x64, leaves, flat, h, n, plan, hl=None, specs=None, user=True) -> _Pass:
    """The batched evaluation of the stencil at steps ``h``: inline (the centre and the noise line in the
    same pass) where the batch is small, else in chunks.  ``specs``: the nodes' op specs, if known; ``user``:
    False where none of them runs user code (no float32-inside test then: ``_user_code``)."""
    if specs is None:
        specs = _specs(case)
    rows = len(FACTORS) * n + 1 + (_tol.FD_NOISE_POINTS if n and user else 0)
    inline = rows * max([l.value.size for l in case.leaves]) <= MAX_BATCH_ELEMENTS and (
        rows <= INLINE_ROWS or rows <= INLINE_ROWS_CHECKED and rows * _largest_of(case, specs) <= MAX_BATCH_ELEMENTS)
    if inline:
        return _inline_pass(case, x64, leaves, flat, h, n, _watched(plan), hl if hl and math.isfinite(sum(hl)) else None,
                            specs, user)
    return _chunked_pass(case, x64, leaves, flat, h, n, _watched(plan), specs, user)


def _s_at(case, x64, leaves, seeds64, X):
    """s at each row of a (points, n) matrix of inputs (the probes' view of the forward)."""
    return _s_values(case._evaluate(_leaf_batches(case, x64, leaves, X), 1), case.roots, seeds64, len(X))[0]


def _s_env(case, x64, leaves, seeds64, X):
    """``_s_at`` and the batched environment (which op the probes blame)."""
    env = case._evaluate(_leaf_batches(case, x64, leaves, X), 1)
    return _s_values(env, case.roots, seeds64, len(X))[0], env


def _float32_gradient(case, x64, leaves, flat, plan, check_reach, first: _Pass, why: str = "") -> FDResult:
    """The gradient of a forward that computes in float32 inside (``first.f32`` names the op whose values
    over the float64 stencil were all float32 numbers): the same stencil, estimate and reach check at the
    float32 step ``STEP32 max(1, |x|)``, each value's rounding bounded at float32 precision
    (``_fd_probes.float32_rounding``: a model and a measurement on random points).  No refinement: a finer
    step only trades truncation for float32 rounding, which dominates already.  The result says so
    (``float32_inside``), and ``gs.check`` compares it at float32 precision."""
    n = flat.size
    h = _probes.STEP32 * np.maximum(1.0, np.abs(flat))
    p = _run_pass(case, x64, leaves, flat, h, n, plan)
    if not _ALL(np.isfinite(p.s), axis=None):
        _not_finite(int(np.argwhere(~np.isfinite(p.s))[0][1]), h)
    if check_reach and p.reach:  # the float32 step reaches farther: a kink within it refuses the case
        _check_reach(plan, p.center, p.reach, p.tops, center_kink_distances(case))
    floor = float(max(p.vfloor, _tol.FD_NOISE_SIGMAS * p.sigma))
    r, err, trunc = _combine_all(p.s, p.s0, p.S, p.S0, h, floor)
    offsets = _probes.float32_probe_offsets(h)
    s_probe = _s_at(case, x64, leaves, p.seeds64, flat + offsets)
    delta = _probes.float32_rounding(p.s0, float(max(p.S0, _MAX(p.S, axis=None))), flat, r, s_probe, offsets)
    # the rounding part at float32 precision: 2.4 delta / h (1/h from D, 8/6h from the third difference)
    err = np.maximum(err, trunc + 2.4 * delta / h)
    # The truncation estimate |h^2 T / 6| holds where h resolves the function; a float32 step is ~800x the
    # float64 one and can exceed its scale (sin(x) at x = 1000: h = 4.9, the period 6.3).  A second estimate
    # at h / 4 must agree within the two error bounds, else FD steps aside (no refinement: finer float32 steps
    # only trade truncation for rounding).
    q = _run_pass(case, x64, leaves, flat, h / 4, n, [])
    r4, err4, trunc4 = _combine_all(q.s, q.s0, q.S, q.S0, h / 4, floor)
    err4 = np.maximum(err4, trunc4 + 2.4 * delta / (h / 4))
    with np.errstate(all="ignore"):
        off = ~(np.abs(r - r4) <= err + err4)
    if _ANY(off, axis=None):
        j = int(np.argmax(off))
        raise OracleError(
            f"finite differences: {_element_name(leaves, j)} {_what32(why)} ({first.f32}) and its "
            f"estimates at the float32 step {h[j]:.3g} and at a quarter of it differ by {abs(r[j] - r4[j]):.3g}, more "
            f"than their error bounds ({err[j]:.3g}, {err4[j]:.3g}): the function varies too fast for a float32-sized "
            "step there, so no estimate can be vouched for")
    out = _result(leaves, r, err, h, first.evaluations + p.evaluations + q.evaluations + len(offsets))
    out.float32_inside = first.f32
    out.judged = _result(leaves, trunc, trunc, h, 0).error
    return out


def _not_finite(j: int, h):
    raise OracleError(
        f"finite differences: the function is not finite at a perturbed point (input element {j} moved by "
        f"{h[j]:.3g}): the case sits at the edge of float64's range"
    )


def _result(leaves, r, err, h, evaluations) -> FDResult:
    """The flat estimate, error (or a ``LazyErrors``, kept as it is) and steps as per-leaf arrays."""
    lazy = isinstance(err, LazyErrors)
    if len(leaves) == 1:  # the whole vectors, as the slices below would give them
        l = leaves[0]
        shape = l.value.shape
        if r.shape == shape == h.shape and (lazy or err.shape == shape):  # a vector leaf: the arrays themselves
            return FDResult({l.name: r}, err if lazy else {l.name: err}, {l.name: h}, evaluations)
        return FDResult({l.name: r.reshape(shape)}, err if lazy else {l.name: err.reshape(shape)},
                        {l.name: h.reshape(shape)}, evaluations)
    grads, errors, steps = {}, {}, {}
    off = 0
    for l in leaves:
        v = l.value
        end = off + v.size
        shape = v.shape  # (Leaf.shape's tuple, without the property call)
        grads[l.name] = r[off:end].reshape(shape)
        if not lazy:
            errors[l.name] = err[off:end].reshape(shape)
        steps[l.name] = h[off:end].reshape(shape)
        off = end
    return FDResult(grads, err if lazy else errors, steps, evaluations)


def _deferred_error(leaves, p: _Pass, h, hl, small_s, lower, kept) -> LazyErrors:
    """The error bound of a settled estimate (``_fd_lazy.settled``), computed when first asked for: the values
    ``_estimate_small`` or ``_combine_all`` give on the eager path (where neither refinement nor the noise test
    changes anything), per leaf as ``_result`` lays them out, with ``lower`` (flat) as its lower bound.  Holds the
    pass's s and rounding inputs, not the pass (its centre keeps every node's batched values)."""
    rnd, s, s0, vfloor = p.rounding, p.s, p.s0, p.vfloor

    def error() -> dict:
        S, S0, Sl = rnd.S()
        floor = float(max(vfloor, _tol.FD_NOISE_SIGMAS * rnd.sigma()))
        if small_s is None:
            return _split(leaves, _lazy_error(kept, S, S0, h, floor))
        err = _error_small(kept, Sl if Sl is not None else S.tolist(), S0, hl, floor)
        return _split(leaves, np.array(err) if err is not None else _combine_all(s, s0, S, S0, h, floor)[1])

    return LazyErrors(error, _split(leaves, lower))


def _split(leaves, flat) -> dict:
    """A flat vector in leaf order as per-leaf arrays, as ``_result`` lays them out."""
    if len(leaves) == 1:
        l = leaves[0]
        return {l.name: flat if flat.shape == l.value.shape else flat.reshape(l.value.shape)}
    out, off = {}, 0
    for l in leaves:
        v = l.value
        end = off + v.size
        out[l.name] = flat[off:end].reshape(v.shape)
        off = end
    return out



@oracle_call
def fd_directional(case, directions: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Directional derivatives ``<u, grad s>`` for k directions, with error estimates (3k + 1 points).

    ``directions``: leaf name -> array (k, *leaf.shape); together, one unit vector per row.
    """
    leaves = case.grad_leaves()
    x64 = _as64(case)
    center = case._evaluate(x64, 0)
    seeds64 = _seeds64(case, center)
    k = next(iter(directions.values())).shape[0]
    h = STEP * max([1.0] + [float(np.max(np.abs(x64[l.name]), initial=0.0)) for l in leaves])
    nf = len(FACTORS)
    s, S = np.empty((nf, k)), np.empty((nf, k))
    # Directions in chunks, like the full gradient's stencil: the graph's largest tensor times the
    # rows of one pass stays under MAX_BATCH_ELEMENTS (one chunk unless tensors exceed ~2700 elements).
    per_pass = max(1, MAX_BATCH_ELEMENTS // (nf * max([v.size for v in center.values()] + [1])))
    for a in range(0, k, per_pass):
        b = min(k, a + per_pass)
        nb = nf * (b - a)
        batches = {name: _repeat(v, nb) for name, v in x64.items()}
        for l in leaves:
            u = directions[l.name][a:b]
            batches[l.name] = np.concatenate([x64[l.name][None] + f * h * u for f in FACTORS], axis=0)
        env = case._evaluate(batches, 1)
        f32 = _probes.float32_node(case, env) if a == 0 else ""
        if f32:  # (the full gradient re-estimates such code at a float32 step; these k directions have no such bound)
            raise OracleError(f"{f32} computes in float32 inside (its values over a float64 stencil are all float32 "
                              "numbers) and directional finite differences have no float32 error bound: not compared")
        sc, Sc = _s_values(env, case.roots, seeds64, nb)
        s[:, a:b], S[:, a:b] = sc.reshape(nf, b - a), Sc.reshape(nf, b - a)
    s0, S0 = _at_center(case, center, seeds64)
    floor = _floor(_center_scale(center)[0], seeds64)  # a non-finite centre shows up in the estimate
    flat = np.concatenate([x64[l.name].ravel() for l in leaves]) if leaves else np.zeros(0)
    f32, why = _probes.hidden_float32(case, lambda: (s0, S0, floor, 0.0), flat, (_s_env, (case, x64, leaves, seeds64)))
    if f32:  # float32 hidden behind float64 arithmetic: the same answer as above
        raise OracleError(f"{_f32line.describe(f32, why)} and directional finite differences have no "
                          "float32 error bound: not compared")
    return _combine(s, s0, S.max(axis=0), S0, h, floor)[:2]


def _what32(why: str) -> str:
    """What the probes said of the op (``float32_line.describe``'s verb): "" (its values are float32 numbers)
    and hidden float32 rounding say float32; steps off the inputs' float32 cells do not."""
    return "computes in float32 inside" if not why or _f32line.claims_float32(why) else "resolves its inputs more coarsely than float64"


def _all_finite(v) -> bool:
    """``np.isfinite(v).all()`` for a float array: a few elements' Python sum first (finite only where
    every element is; one that is not, or an overflow, goes to the element-wise test), larger arrays
    through the ufunc reduction without ``.all()``'s Python wrapper."""
    if v.size <= _FINITE_SUM:
        if math.isfinite(sum(v.ravel().tolist())):
            return True
    return bool(_ALL(np.isfinite(v), axis=None))


_FINITE_SUM = 32  # elements


class FiniteDifferences(Oracle):
    name = "finite-differences"
    kind = "fd"
    full_limit = 1000  # above this many input elements, check() compares in directional mode

    def applies(self, case):
        nonfinite = [l.name for l in case.leaves if l.value.dtype.kind == "f" and not _all_finite(l.value)]
        if nonfinite:
            return False, f"finite differences: leaf values of {', '.join(nonfinite)} are not finite"
        why = exclusion(case, "finite differences")
        if why and case.n_inputs <= self.full_limit and _kinkpos.exact_only_at_own(case):
            why = None  # (fd_gradient's reach check leaves out the elements that move those positions: _fd_kinkpos)
        return (False, why) if why else (True, "")

    def result(self, case, check_reach: bool = True) -> FDResult:
        return fd_gradient(case, check_reach=check_reach)

    def vjp(self, case):
        res = fd_gradient(case)
        dtypes = {l.name: l.value.dtype for l in case.leaves}
        return {k: v.astype(dtypes[k]) for k, v in res.grads.items()}


assert FACTORS == (1.0, -1.0, 2.0), "_leaf_reach_small writes the stencil's factors out"
