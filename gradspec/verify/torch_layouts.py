"""fn's backward called with a non-contiguous upstream gradient (``grad_output``) of the same values, and fn
called with each input laid out non-contiguously (transposed and strided, or expanded).

Every oracle hands a torch Function a contiguous upstream gradient, but in real use it gets whatever
the layer after it produced: after a ``.transpose()`` / ``.permute()`` / slicing downstream, a
non-contiguous one.  A backward that does ``g.view(-1, n)`` then raises ("view size is not compatible
with input tensor's size and stride"), and one that reads ``g``'s memory directly (``as_strided``, a C
extension that assumes contiguity) returns the wrong numbers, yet both pass every contiguous check.
torch's own tests feed such layouts (``torch.testing.make_tensor(..., noncontiguous=True)``, the
OpInfo samples' non-contiguous copies: a buffer twice as large, every other element); this check does
the same at the Function's node of a few cases: one forward and backward with a contiguous upstream
gradient and one with :func:`noncontiguous_like` of it, then compares.

Inputs too: an input arrives transposed, sliced or expanded (a broadcast bias, a mask: a stride-0 axis)
from the code upstream, and a forward or backward that does ``x.view(...)`` on it (or on what it saved)
raises, one that reads its memory as if contiguous computes with the wrong elements.  Each float input
of two or more elements is given in turn in each of INPUT_LAYOUTS, the others contiguous, and fn's output
and gradients are compared with those for a contiguous copy of the same values (an expanded input has
other values than the case's: its first slice repeated, compared with that slice repeated contiguously).
A difference is a finding with cause ``layout-dependent`` naming the input, the layout and the part
(forward or backward) -- unless it is within the rounding noise of fn's computation at that case: another
layout takes another path through the kernels (BLAS), which rounds otherwise, and an ill-conditioned
computation amplifies that rounding (``logdet(X X^T + 1e-6 I)``: condition 1.5e7, the two layouts' gradients
2.8e-11 apart, where EXACT_RTOL allows 9.1e-13).  Where a difference exceeds EXACT_RTOL the noise is measured
(``_noise``: fn run on the contiguous layout with its inputs and the result of every float op inside
perturbed by NOISE_ULPS ulps, as ``gs.check``'s rounding noise perturbs a graph's values) and a difference
within NOISE_FACTOR times that spread is rounding, said in a note (``LayoutCheck(result=)``); a wrong
stride reads other elements, a difference of the size of the values themselves.

Example::

    >>> import torch
    >>> from gradspec.verify.torch_layouts import noncontiguous_like
    >>> g = torch.arange(6.0).reshape(2, 3)
    >>> h = noncontiguous_like(g)
    >>> bool(torch.equal(g, h)), h.is_contiguous()
    (True, False)
"""

from __future__ import annotations

import numpy as np

from .. import tolerances as _tol
from .._private import torch_grad as _torch_grad
from .._private.fdstep import float32_valued as _float32_valued
from ..case import Case
from ..causes import Cause
from ..result import VerifyDiscrepancy

__all__ = ["noncontiguous_like", "LayoutCheck", "INPUT_LAYOUTS"]

# Cases per run whose Function node is checked this way while nothing was found: the layouts a backward
# breaks on show up on the first case of rank >= 2 (reversed strides) or >= 1 (strided); a few more cover
# shapes with size-1 axes.  After a finding every case is checked (the shrinker needs it to reproduce).
CLEAN_CHECKS = {2: 8, 1: 2}
CHECK_NAME = "non-contiguous grad_output"
INPUT_CHECK_NAME = "non-contiguous input"


def noncontiguous_like(g):
    """A non-contiguous tensor equal to ``g``: its axes' strides reversed (what a ``.transpose()`` /
    ``.permute()`` downstream gives) inside a buffer twice as large (every other element, what slicing
    gives).  None for fewer than two elements (no layout to vary)."""
    import torch

    if g.numel() < 2:
        return None
    buf = torch.zeros(tuple(reversed(g.shape)) + (2,), dtype=g.dtype, device=g.device)
    view = buf[..., 0].permute(*reversed(range(g.dim())))
    view.copy_(g)
    return view


def _expanded(x):
    """``x``'s first slice along its first axis of two or more elements, expanded back to ``x``'s shape (a
    stride-0 axis, what ``.expand`` of a broadcast bias or mask gives), or None where no axis has two."""
    axis = next((i for i, n in enumerate(x.shape) if n > 1), None)
    if axis is None:
        return None
    return x.narrow(axis, 0, 1).expand(x.shape)


# How an input arrives in real use: after a .transpose()/.permute() or slicing (reversed strides inside a
# buffer twice as large: noncontiguous_like), or expanded from a smaller tensor (a stride-0 axis).
INPUT_LAYOUTS = (("transposed and strided", noncontiguous_like), ("expanded", _expanded))


class _Raised(Exception):
    def __init__(self, where: str, error: Exception) -> None:
        super().__init__(where)
        self.where, self.error = where, error


class LayoutCheck:
    """The per-run state of the check (how many clean checks are left, whether it found something)."""

    def __init__(self, spec, target: str, replay: str, result=None) -> None:
        self.spec, self.target, self.replay, self.result = spec, target, replay, result
        self.left = dict(CLEAN_CHECKS)
        self.found = False

    def __call__(self, case: Case) -> list:
        node = next((n for n in case.nodes if n.op == self.spec.name), None)
        if node is None:
            return []
        try:
            env = case.evaluate()
            ins = [np.asarray(env[i]) for i in node.inputs]
            g = self._seed(np.asarray(env[node.name]))
        except Exception:  # noqa: BLE001 - the forward raised: the case's own check reports or excuses it
            return []
        sizes = [g.size] + [a.size for a in ins if a.dtype.kind == "f"]
        rank = min(max([g.ndim] + [a.ndim for a in ins if a.dtype.kind == "f"]), 2)
        if max(sizes) < 2 or (not self.found and self.left.get(rank, 0) <= 0):
            return []
        if not self.found:
            self.left[rank] -= 1
        import torch

        gt = torch.from_numpy(g)
        try:
            want = self._grads(ins, node.params, gt)
        except Exception:  # noqa: BLE001 - raising on a contiguous gradient is the other checks' business
            return []
        found = self._grad_output(case, node, ins, gt, want) if g.size >= 2 else []
        if not getattr(self.spec, "draws_random", None):  # (random draws follow the input's memory layout)
            found = found or self._inputs(case, node, ins, gt)
        self.found = self.found or bool(found)
        return found

    def _grad_output(self, case, node, ins, gt, want) -> list:
        nc = noncontiguous_like(gt)
        try:
            got = self._grads(ins, node.params, nc)
        except Exception as e:  # noqa: BLE001 - the finding
            return [self._raised(case, node, nc, e)]
        bad = _differ(want, got, self._f32())
        if bad is None:
            return []
        try:  # the same layouts again: a backward that differs from call to call is not a layout issue
            if _differ(want, self._grads(ins, node.params, gt), self._f32()) is not None or \
                    _differ(got, self._grads(ins, node.params, noncontiguous_like(gt)), self._f32()) is not None:
                return []
        except Exception:  # noqa: BLE001
            return []
        if self._within_noise(want, got, lambda xs, g: self._grads(xs, node.params, g), ins, gt, "upstream gradient"):
            return []
        return [self._value(case, node, nc, bad, want, got)]

    def _inputs(self, case, node, ins, gt) -> list:
        """Each float input of two or more elements laid out non-contiguously in turn (INPUT_LAYOUTS), the
        others contiguous: fn's forward and backward must give what they give on a contiguous copy of the
        same values."""
        import torch

        xs = [torch.from_numpy(np.array(b)) for b in ins]
        try:
            self._run(xs, node.params, gt)
        except Exception:  # noqa: BLE001 - not a layout issue
            return []
        if any(not np.array_equal(x.detach().numpy(), b, equal_nan=True) for x, b in zip(xs, ins) if b.dtype.kind == "f"):
            return []  # fn writes into its inputs: named by its own check, and every layout run would see other values
        for k, a in enumerate(ins):
            if a.dtype.kind != "f" or a.size < 2:
                continue
            for label, make in INPUT_LAYOUTS:
                nc = make(torch.from_numpy(np.array(a)))
                if nc is None:
                    continue
                plain = [torch.from_numpy(np.array(b)) for b in ins]
                odd = list(plain)
                plain[k], odd[k] = nc.contiguous(), nc
                try:
                    want = self._run(plain, node.params, gt)
                except Exception:  # noqa: BLE001 - these values on a contiguous input: not a layout issue
                    continue
                if any(not np.array_equal(t.numpy(), b, equal_nan=True) for t, b in zip(plain, ins) if t.is_floating_point()):
                    return []  # forward modifies its input in place (mark_dirty or not): not a layout question
                try:
                    got = self._run(odd, node.params, gt)
                except _Raised as e:  # the finding
                    return [self._input_raised(case, node, k, label, nc, e)]
                bad = _differ(want, got, self._f32())
                if bad is None:
                    continue
                try:  # the same calls again: fn that differs from call to call is not a layout issue
                    again = (self._run([t.clone() for t in plain], node.params, gt),
                             self._run([nc if i == k else t for i, t in enumerate(plain)], node.params, gt))
                except Exception:  # noqa: BLE001
                    continue
                if _differ(want, again[0], self._f32()) is not None or _differ(got, again[1], self._f32()) is not None:
                    continue
                run = lambda xs, g: self._run([torch.from_numpy(x) for x in xs], node.params, g)  # noqa: E731
                if not self._within_noise(want, got, run, [t.numpy() for t in plain], gt, f"input {_input_name(node, k)}"):
                    return [self._input_value(case, node, k, label, nc, bad, want, got)]
        return []

    def _within_noise(self, want, got, call, ins, gt, what: str) -> bool:
        """``want`` and ``got`` (fn on a contiguous and a non-contiguous layout) differ by no more than the
        rounding noise of fn's computation there (``_noise``); said in the run's note."""
        noise = self._noise(call, ins, gt, want)
        if isinstance(noise, str):  # a few ulps break it: rounding decides whether it runs at all (check's Unmeasured)
            if self.result is not None:
                self.result.note(
                    f"with a non-contiguous {what} fn's results differ from a contiguous layout's beyond float rounding, "
                    f"but with its values off by {_tol.NOISE_ULPS:g} ulps fn raises ({noise}): at the edge of its "
                    "dtype's precision, another layout's rounding is no evidence -- not judged a layout issue")
            return True
        if noise is None or _differ(want, got, self._f32(), noise) is not None:
            return False
        if self.result is not None:
            k, _ = _differ(want, got, self._f32())
            x, y, n = (np.asarray(a, dtype=np.float64) for a in (want[k], got[k], noise[k]))
            scale = float(np.max(np.abs(x[np.isfinite(x)]), initial=0.0)) or 1.0
            self.result.note(
                f"with a non-contiguous {what} fn's results differ from a contiguous layout's beyond float rounding "
                f"(by {float(np.nanmax(np.abs(x - y))) / scale:.2g} of their largest value), but within the rounding "
                f"noise of fn's computation at those values ({float(np.nanmax(n)) / scale:.2g}: inputs and every float "
                f"op inside perturbed by {_tol.NOISE_ULPS:g} ulps; an ill-conditioned solve amplifies rounding, and "
                "another layout rounds otherwise): not judged a layout issue")
        return True

    def _noise(self, call, ins, gt, base) -> list | str | None:
        """Per result of ``call(inputs, g)`` (the list ``base`` is, None where it is None): the largest change of
        each element when fn runs with its inputs, its upstream gradient and the result of every float op it runs
        (forward and backward) perturbed by up to NOISE_ULPS ulps -- a backward-stable kernel's result is exact
        for inputs that close, so another evaluation order's rounding (another layout's) moves a result by no more
        than that, times the NOISE_FACTOR of gs.check's rounding noise.  NOISE_MORE_RUNS more runs where an
        element moved by NOISE_SATURATED of its size (rounding decides it: see tolerances).  None when a
        perturbed run changes a result's shape (no measure: the difference stands); what it raised (a str) when a
        perturbed run raises: the case is at the edge of its precision (gradspec._check_noise.Unmeasured)."""
        import torch

        from .torch_call import jitter_float32

        rng = np.random.default_rng(0)  # (a fixed stream: the same case is judged alike in a replay)
        ulps = _tol.NOISE_ULPS
        spread = [None if b is None else np.zeros(np.shape(b)) for b in base]
        runs, limit = 0, 2
        while runs < limit:
            runs += 1
            xs = [_perturbed(rng, np.array(a), ulps) for a in ins]
            g = torch.from_numpy(_perturbed(rng, gt.numpy().copy(), ulps))
            try:
                with np.errstate(all="ignore"), jitter_float32(rng, ulps, float64=True):
                    res = call(xs, g)
            except Exception as e:  # noqa: BLE001 - the plain run ran (want): the perturbation broke it
                return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            for k, (b, r) in enumerate(zip(base, res, strict=True)):
                if b is None or r is None:
                    continue
                if np.shape(r) != np.shape(b):
                    return None
                with np.errstate(all="ignore"):
                    moved = np.abs(np.asarray(r, dtype=np.float64) - np.asarray(b, dtype=np.float64))
                spread[k] = np.fmax(spread[k], moved)
                with np.errstate(all="ignore"):
                    if limit == 2 and np.any(moved >= _tol.NOISE_SATURATED * np.abs(np.asarray(b, dtype=np.float64))):
                        limit = 2 + _tol.NOISE_MORE_RUNS
        return spread

    def _run(self, xs, params, g) -> list:
        """[fn's output, then the gradient of each input] (None for inputs that are not floating point) for
        the torch tensors ``xs`` as given (their layouts kept); an exception says whether forward or
        backward raised (``_Raised``)."""
        import torch

        xs = [x.detach().requires_grad_(True) if x.is_floating_point() else x for x in xs]
        need = [x for x in xs if x.is_floating_point()]
        with torch.enable_grad():
            try:
                out = self.spec.torch(*xs, **params)
            except Exception as e:  # noqa: BLE001
                raise _Raised("forward", e) from e
            try:
                res = iter(_torch_grad.grad([out], need, [g.to(out.dtype)],
                                            rebuild=lambda: ([self.spec.torch(*xs, **params)], need, [g.to(out.dtype)])))
            except Exception as e:  # noqa: BLE001
                raise _Raised("backward", e) from e
        grads = [next(res) if x.is_floating_point() else None for x in xs]
        return [out.detach().numpy().copy()] + [None if r is None else r.detach().numpy().copy() for r in grads]

    @staticmethod
    def _seed(out: np.ndarray) -> np.ndarray:
        # fixed values of both signs, all distinct: a backward that reads elements from the wrong places
        # gives other numbers (a seed of ones would hide a permutation)
        k = np.arange(out.size, dtype=np.float64).reshape(out.shape)
        return np.asarray((0.5 + (k * 0.618034) % 1.0) * np.where(k % 2 == 0, 1.0, -1.0),
                          dtype=out.dtype if out.dtype.kind == "f" else np.float64)

    def _grads(self, ins, params, g) -> list:
        import torch

        xs = [torch.from_numpy(np.array(a)) for a in ins]
        need = [x for x in xs if x.is_floating_point()]
        for x in need:
            x.requires_grad_(True)
        with torch.enable_grad():
            out = self.spec.torch(*xs, **params)
            res = iter(_torch_grad.grad([out], need, [g], rebuild=lambda: ([self.spec.torch(*xs, **params)], need, [g])))
        # one per input of the node (None for the ones that are not floating point), so k names node.inputs[k]
        grads = [next(res) if x.is_floating_point() else None for x in xs]
        return [None if r is None else r.detach().numpy().copy() for r in grads]

    def _f32(self) -> bool:
        return bool(getattr(self.spec, "float32_seen", ""))

    def _who(self, part: str) -> str:
        """Whose ``part`` ("forward" / "backward") ran: a plain function of torch ops has no Function of its own
        (tryout7 #1: torch's own logdet was called "your Function's backward (gp_logdet.backward)")."""
        fn = self.spec.name.removeprefix("torch_")
        reg = getattr(self.spec, "registered_backward", None)
        if reg:  # a torch.library.custom_op
            return f"your backward ({reg})" if part == "backward" else f"your op's forward ({fn})"
        if getattr(self.spec, "fn_has_backward", True) is False:
            inside = list(getattr(self.spec, "functions_inside", None) or ())[:3]
            runs = f"; its graph runs your {' and '.join(inside)}" if inside else ": torch's own ops and their backwards"
            return f"{fn}'s {part} (a plain function, no Function of its own{runs})"
        return f"your Function's {part} ({fn}.{part})"

    def _where(self, node) -> str:
        return f"node {node.name} = {node.op}({', '.join(node.inputs)})"

    def _finding(self, kind, case, node, summary, evidence, fix, check_name, **fields) -> VerifyDiscrepancy:
        """One layout finding: the discrepancy (torch against itself, two layouts) and its cause."""
        d = VerifyDiscrepancy(kind, ("torch-cpu", "torch-cpu"), f"{self.target}: {summary}", case, replay=self.replay,
                              check_name=check_name, **fields)
        d.cause = Cause("layout-dependent", summary, node=node.name, op=node.op, evidence=evidence, fix=fix)
        return d

    def _raised(self, case, node, nc, e) -> VerifyDiscrepancy:
        said = f"{type(e).__name__}: {str(e).splitlines()[0].rstrip('.') if str(e) else ''}"
        summary = (f"{self._where(node)}: {self._who('backward')} raised {said} when its upstream gradient "
                   f"(grad_output) is non-contiguous — the same values, strides {tuple(nc.stride())}, as after a "
                   ".transpose()/.permute() or slicing downstream; with a contiguous one it works: use .reshape "
                   "instead of .view on grad_output, or call grad_output.contiguous() first")
        return self._finding("raised", case, node, summary,
                             f"grad_output shape {tuple(nc.shape)}: contiguous -> gradients; strides "
                             f"{tuple(nc.stride())} -> {said}",
                             "use .reshape (not .view) on grad_output, or grad_output.contiguous()", CHECK_NAME)

    def _value(self, case, node, nc, bad, want, got) -> VerifyDiscrepancy:
        k, idx = bad
        name = node.inputs[k] if k < len(node.inputs) else f"input {k}"
        summary = (f"{self._where(node)}: {self._who('backward')} returns other numbers when its upstream "
                   f"gradient (grad_output) is non-contiguous — the same values, strides {tuple(nc.stride())}, as "
                   f"after a .transpose()/.permute() or slicing downstream: input {name}'s gradient "
                   f"{_short(got[k])} vs {_short(want[k])} with a contiguous one; it reads grad_output's memory as if "
                   "it were contiguous (as_strided, .data_ptr() in an extension?): call grad_output.contiguous() first")
        leaf = name if name in {l.name for l in case.leaves} else None
        return self._finding("value", case, node, summary,
                             f"input {name}: non-contiguous grad_output {_short(got[k])}, contiguous {_short(want[k])}",
                             "call grad_output.contiguous() before reading its memory", CHECK_NAME, leaf=leaf,
                             index=idx, values=(float(got[k][idx]), float(want[k][idx])))

    def _input_raised(self, case, node, k, label, nc, e) -> VerifyDiscrepancy:
        name = _input_name(node, k)
        said = f"{type(e.error).__name__}: {str(e.error).splitlines()[0].rstrip('.') if str(e.error) else ''}"
        summary = (f"{self._where(node)}: {self._who(e.where)} raised {said} when input {name} is "
                   f"non-contiguous ({label}: {_describe(nc)}), as inputs arrive after a .transpose()/.permute(), slicing "
                   "or .expand() upstream; with a contiguous copy of the same values it works: use .reshape instead of "
                   ".view on inputs and saved tensors, or call .contiguous() first")
        return self._finding("raised", case, node, summary,
                             f"input {name} {label} ({_describe(nc)}): {e.where} raised {said}; contiguous: ran",
                             "use .reshape (not .view) on inputs and saved tensors, or .contiguous() first",
                             INPUT_CHECK_NAME)

    def _input_value(self, case, node, k, label, nc, bad, want, got) -> VerifyDiscrepancy:
        name = _input_name(node, k)
        j, idx = bad
        what = "output" if j == 0 else f"input {_input_name(node, j - 1)}'s gradient"
        part = "forward" if j == 0 else "backward"
        summary = (f"{self._where(node)}: {self._who(part)} returns other numbers when input {name} is "
                   f"non-contiguous ({label}: {_describe(nc)}), as inputs arrive after a .transpose()/.permute(), slicing "
                   f"or .expand() upstream: its {what} {_short(got[j])} vs {_short(want[j])} for a contiguous copy of the "
                   "same values; it reads the input's memory as if it were contiguous (as_strided, .data_ptr() in an "
                   "extension, a stride taken for granted?): call .contiguous() on it first")
        return self._finding("value", case, node, summary,
                             f"input {name} {label} ({_describe(nc)}): {what} {_short(got[j])}, contiguous {_short(want[j])}",
                             f"call .contiguous() on input {name} before reading its memory", INPUT_CHECK_NAME,
                             leaf=name if j > 0 and name in {l.name for l in case.leaves} else None, index=idx,
                             values=(float(np.asarray(got[j])[idx]), float(np.asarray(want[j])[idx])))


def _input_name(node, k: int) -> str:
    return node.inputs[k] if k < len(node.inputs) else f"input {k}"


def _describe(nc) -> str:
    return f"shape {tuple(nc.shape)}, strides {tuple(nc.stride())}"


def _perturbed(rng, a: np.ndarray, ulps: float) -> np.ndarray:
    """``a`` (float) with each element moved by 1..``ulps`` ulps of its dtype, random sign (``_noise``)."""
    if a.dtype.kind != "f" or not a.size:
        return a
    u = rng.uniform(min(1.0, 1 / ulps), 1, a.shape) * rng.choice((-1.0, 1.0), a.shape)
    return np.asarray(a * (1 + ulps * float(np.finfo(a.dtype).eps) * u), dtype=a.dtype)


def _differ(a: list, b: list, f32: bool = False, noise: list | None = None):
    """``(input k, element index)`` of the first gradient that differs beyond rounding, else None.  ``noise``:
    per gradient, each element's measured rounding noise (``LayoutCheck._noise``), NOISE_FACTOR times it allowed
    on top.  ``f32``: fn
    computes in float32 inside (``float32_seen``): its float32 ops may take another code path for another
    layout (a vectorised exp or sigmoid for contiguous memory, a scalar one for the rest), 1 ulp of float32
    apart, in float64 results that are not float32 numbers (x y + sigmoid((x - y).float()))."""
    for k, (x, y) in enumerate(zip(a, b, strict=True)):
        if (x is None) != (y is None):
            return k, ()
        if x is None:
            continue
        if x.shape != y.shape:
            return k, ()
        # the same math on the same values in another memory order: only the summation order of the
        # reductions inside may change, i.e. rounding of the gradient's dtype (EXACT_RTOL: 2^12 eps64 /
        # 2^9 eps32) relative to the largest element -- times the computation's condition where it is
        # ill-conditioned, which ``noise`` measures
        # (a backward that computes in float32 inside and casts back rounds its sums at eps32: its float64
        # gradients are then float32 numbers, gradspec._private.fdstep.float32_valued)
        f32 = f32 or x.dtype == np.float32 or _float32_valued(x) and _float32_valued(y)
        rtol = _tol.EXACT_RTOL["float32" if f32 else "float64"]
        with np.errstate(all="ignore"):
            scale = float(np.max(np.abs(x[np.isfinite(x)]), initial=0.0))
            err = np.abs(x.astype(np.float64) - y.astype(np.float64))
        same_nan = np.isnan(x) & np.isnan(y)
        allowed = rtol * max(scale, 1e-300) + (0.0 if noise is None or noise[k] is None else _tol.NOISE_FACTOR * noise[k])
        bad = ~same_nan & ~(err <= allowed)
        if np.any(bad):
            return k, tuple(int(i) for i in np.argwhere(bad)[0])
    return None


def _short(a) -> str:
    vals = np.asarray(a, dtype=np.float64).ravel()
    return "[" + ", ".join(f"{v:.4g}" for v in vals[:6]) + (", ..." if vals.size > 6 else "") + "]"
