"""Finite differences of ``s(x) = sum_r <seed_r, f_r(x)>`` in float64.

All perturbed points go through ONE batched numpy evaluation of the graph (every op's forward
takes a leading batch axis), not a Python loop per element.

Step size: ``h_j = eps**(1/3) * max(1, |x_j|)`` (≈ 6e-6 relative) balances the O(h²)
truncation error of central differences against the O(eps/h) rounding error.  Each element is
evaluated at ±h and ±2h, giving two central differences ``D1 = D(h)``, ``D2 = D(2h)``:

* the estimate is the Richardson extrapolation ``R = (4 D1 - D2) / 3`` (error O(h⁴));
* ``|D1 - D2|`` estimates the truncation error of D1 (≈ 3·c·h²), a generous bound on R's;
* rounding: each ``s`` value carries about ``rounding_depth * eps * S`` absolute error, with
  ``S = sum_r <|seed_r|, |f_r(x)|>``; R combines four values with weights summing to 1.5/h.

Those two terms, per element, are the oracle's error estimate; the comparison tolerance is
built from them (``gradspec.tolerances``).

The oracle refuses a case when an input of some op is within its perturbation reach of a
point where the op is not differentiable (a kink, a tie, a domain edge): the reach is measured
on the actual perturbed intermediate values, so it accounts for amplification through the graph.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ._base import Oracle, OracleError

__all__ = ["FiniteDifferences", "FDResult", "fd_gradient", "fd_directional"]

EPS = np.finfo(np.float64).eps
STEP = EPS ** (1 / 3)
ROUNDING_DEPTH = 64.0  # error of one evaluation of s, in units of eps * S (graphs of <= ~10 ops)
MAX_BATCH_ELEMENTS = 4_000_000  # cap on (batch size) x (elements of the largest tensor) per pass


@dataclasses.dataclass
class FDResult:
    grads: dict[str, np.ndarray]
    error: dict[str, np.ndarray]  # per-element error estimate (truncation + rounding)
    steps: dict[str, np.ndarray]
    evaluations: int


def _as64(case):
    return {l.name: (l.value.astype(np.float64) if np.issubdtype(l.value.dtype, np.floating) else l.value) for l in case.leaves}


def _s_batched(case, leaf_batches: dict, nb: int, seeds64, roots) -> tuple[np.ndarray, np.ndarray, dict]:
    """s and S = <|seed|, |f|> at each of nb points; also all node values (for the reach check)."""
    env = case.evaluate(leaf_batches, nbatch=1)
    s = np.zeros(nb)
    S = np.zeros(nb)
    for r, seed in zip(roots, seeds64):
        v = np.asarray(env[r], dtype=np.float64)
        v = np.broadcast_to(v, (nb,) + seed.shape).reshape(nb, -1)
        sv = seed.ravel()
        with np.errstate(all="ignore"):
            s += v @ sv
            S += np.abs(v) @ np.abs(sv)
    return s, S, env


def _points(case, x64, leaves, idx_chunk, factors, h):
    """Leaf batches for perturbing the elements idx_chunk (global indices) by factors * h."""
    k = len(idx_chunk)
    nb = k * len(factors)
    batches = {}
    offsets = {}
    off = 0
    for l in leaves:
        offsets[l.name] = off
        off += l.value.size
    for name, v in x64.items():
        batches[name] = np.broadcast_to(v, (nb,) + np.shape(v))
    for l in leaves:
        lo, size = offsets[l.name], l.value.size
        g = np.asarray(idx_chunk)
        js = np.nonzero((g >= lo) & (g < lo + size))[0]
        if js.size == 0:
            continue
        arr = np.array(np.broadcast_to(x64[l.name], (nb,) + l.shape)).reshape(nb, size)
        es = g[js] - lo
        for fi, f in enumerate(factors):
            arr[fi * k + js, es] += f * h[g[js]]
        batches[l.name] = arr.reshape((nb,) + l.shape)
    return batches, nb


def fd_gradient(case, *, check_reach: bool = True) -> FDResult:
    """Full central-difference gradient of every differentiable leaf (2 step sizes, 4n points)."""
    leaves = case.grad_leaves()
    x64 = _as64(case)
    center = case.evaluate(x64)
    seeds64 = [np.asarray(s, dtype=np.float64) for s in case.seed_arrays(center)]
    n = int(sum(l.value.size for l in leaves))
    flat = np.concatenate([x64[l.name].ravel() for l in leaves]) if leaves else np.zeros(0)
    h = STEP * np.maximum(1.0, np.abs(flat))
    factors = (1.0, -1.0, 2.0, -2.0)
    biggest = max([np.size(v) for v in center.values()] + [1])
    chunk = max(1, int(MAX_BATCH_ELEMENTS // (len(factors) * biggest)))
    s_vals = np.zeros((len(factors), n))
    S_max = np.zeros(n)
    reach: dict[str, np.ndarray] = {}
    evaluations = 0
    for start in range(0, n, chunk):
        idx = list(range(start, min(n, start + chunk)))
        batches, nb = _points(case, x64, leaves, idx, factors, h)
        s, S, env = _s_batched(case, batches, nb, seeds64, case.roots)
        evaluations += nb
        k = len(idx)
        s_vals[:, start : start + k] = s.reshape(len(factors), k)
        S_max[start : start + k] = S.reshape(len(factors), k).max(axis=0)
        if check_reach:
            for name, v in env.items():
                c = np.asarray(center[name], dtype=np.float64) if np.issubdtype(np.asarray(center[name]).dtype, np.floating) else None
                if c is None or not np.size(c):
                    continue
                with np.errstate(all="ignore"):
                    dev = np.max(np.abs(np.asarray(v, dtype=np.float64) - c), axis=0)
                reach[name] = np.maximum(reach.get(name, 0.0), dev)
    d1 = (s_vals[0] - s_vals[1]) / (2 * h)
    d2 = (s_vals[2] - s_vals[3]) / (4 * h)
    r = (4 * d1 - d2) / 3
    rounding = ROUNDING_DEPTH * EPS * (S_max + np.abs(s_vals).max(axis=0, initial=0.0)) * 1.5 / h
    err = np.abs(d1 - d2) + rounding
    if check_reach:
        _check_reach(case, center, reach)
    grads, errors, steps = {}, {}, {}
    off = 0
    for l in leaves:
        sz = l.value.size
        grads[l.name] = r[off : off + sz].reshape(l.shape)
        errors[l.name] = err[off : off + sz].reshape(l.shape)
        steps[l.name] = h[off : off + sz].reshape(l.shape)
        off += sz
    return FDResult(grads, errors, steps, evaluations)


def _check_reach(case, center, reach) -> None:
    """Refuse if any op input is within (4x) its perturbation reach of a non-differentiable point."""
    for node in case.nodes:
        spec = case.spec(node.op)
        args = [center[i] for i in node.inputs]
        d = spec.singular_distance(args, node.params)
        if not np.isfinite(d):
            continue
        r = max((float(np.max(reach[i], initial=0.0)) for i in node.inputs if i in reach), default=0.0)
        if d <= 4 * r:
            raise OracleError(
                f"finite differences: an input of node {node.name!r} ({node.op}) is {d:.3g} from a point where "
                f"{node.op} is not differentiable (kink, tie or domain edge), within 4x the perturbation reach {r:.3g}"
            )


def fd_directional(case, directions: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(s(x+hu) - s(x-hu)) / 2h`` (Richardson-extrapolated) for each direction u; with error estimates.

    ``directions``: leaf name -> array (k, *leaf.shape) of k directions (jointly unit-norm).
    """
    leaves = case.grad_leaves()
    x64 = _as64(case)
    center = case.evaluate(x64)
    seeds64 = [np.asarray(s, dtype=np.float64) for s in case.seed_arrays(center)]
    k = next(iter(directions.values())).shape[0]
    scale = max([1.0] + [float(np.max(np.abs(x64[l.name]), initial=0.0)) for l in leaves])
    h = STEP * scale
    factors = (1.0, -1.0, 2.0, -2.0)
    batches = {}
    nb = k * len(factors)
    for name, v in x64.items():
        batches[name] = np.broadcast_to(v, (nb,) + np.shape(v))
    for l in leaves:
        u = directions[l.name]
        pts = [x64[l.name][None] + f * h * u for f in factors]
        batches[l.name] = np.concatenate(pts, axis=0)
    s, S, _ = _s_batched(case, batches, nb, seeds64, case.roots)
    s = s.reshape(len(factors), k)
    d1 = (s[0] - s[1]) / (2 * h)
    d2 = (s[2] - s[3]) / (4 * h)
    r = (4 * d1 - d2) / 3
    err = np.abs(d1 - d2) + ROUNDING_DEPTH * EPS * (S.reshape(len(factors), k).max(axis=0) + np.abs(s).max(axis=0)) * 1.5 / h
    return r, err


class FiniteDifferences(Oracle):
    name = "finite-differences"
    kind = "fd"
    full_limit = 1000  # above this many input elements the comparison switches to directional mode

    def applies(self, case):
        nonfinite = [l.name for l in case.leaves if np.issubdtype(l.value.dtype, np.floating) and not np.all(np.isfinite(l.value))]
        if nonfinite:
            return False, f"finite differences: leaf values of {', '.join(nonfinite)} are not finite"
        try:
            center = case.evaluate()
        except Exception as e:  # pragma: no cover - evaluation errors are reported by other oracles
            return False, f"finite differences: forward failed: {e}"
        for name, v in center.items():
            if np.issubdtype(np.asarray(v).dtype, np.floating) and not np.all(np.isfinite(v)):
                return False, f"finite differences: {name} is not finite at the case's inputs"
        return True, ""

    def result(self, case, check_reach: bool = True) -> FDResult:
        return fd_gradient(case, check_reach=check_reach)

    def vjp(self, case):
        res = fd_gradient(case)
        return {k: v.astype(next(l.value.dtype for l in case.leaves if l.name == k)) for k, v in res.grads.items()}
