"""Second-order gradients of a torch Function: autograd through its backward (``create_graph=True``)
against central differences of that first-order backward, as ``torch.autograd.gradgradcheck`` does.

A Function whose backward is itself differentiable (written in torch ops, or through another
Function) is used for Hessian-vector products, gradient penalties and meta-learning; a wrong double
backward (a product-rule term forgotten) passes every first-order check.  At fn's node of a few cases,
with a fixed upstream gradient ``g`` and fixed vectors ``v`` (on the first-order gradients) and ``u``
(a direction on the inputs), ``s(x) = <J(x)^T g, v>`` is differentiated along ``u`` twice:

* autograd: ``<grad s(x), u>``, through fn's backward;
* central differences of ``s`` (fn's first-order backward only, already checked) at steps ``t`` and
  ``t/2``, Richardson-extrapolated; their difference estimates the error.

Where the first-order backward is not smooth at the point (the two steps disagree) nothing is decided;
where it is not differentiable at all (computed outside autograd) the result says second-order
gradients were not checked.

Example::

    >>> import torch
    >>> from gradspec.verify.torch_double import directional_second_order
    >>> a, fd, err = directional_second_order(lambda x: x ** 3, [torch.tensor([2.0], dtype=torch.float64)], {})
    >>> abs(a - fd) <= err, err < 1e-6
    (True, True)
    >>> directional_second_order(lambda x: x * x.abs(), [torch.tensor([0.0], dtype=torch.float64)], {}) is None
    True
"""

from __future__ import annotations

import contextlib

import numpy as np

from .. import tolerances as _tol
from .._private.torch_where import FIX as _WHERE_FIX
from .._private.torch_where import backward_traps as _backward_traps
from ..case import Case
from ..causes import Cause
from ..result import VerifyDiscrepancy

__all__ = ["directional_second_order", "DoubleBackwardCheck", "FnRaised"]

# Clean cases per run checked while nothing is found (each costs ~6 forward+backward calls of fn); every
# case once something is found (the shrinker needs the finding to reproduce).
CLEAN_CHECKS = 3
CHECK_NAME = "double backward"
ONCE_DIFFERENTIABLE = "marked with @once_differentiable"  # in torch's DelayedError message for such a backward


def _allowed(err: float, auto: float, fd: float) -> float:
    """What a second-order gradient may differ from its finite differences by (tolerances.DOUBLE_BACKWARD_RTOL)."""
    return 4 * err + _tol.DOUBLE_BACKWARD_RTOL * max(abs(auto), abs(fd))


def _fixed(shape, phase: float) -> np.ndarray:
    # distinct values of both signs (a seed of ones hides terms that cancel)
    k = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    return np.asarray((0.5 + ((k + phase) * 0.618034) % 1.0) * np.where(k % 2 == 0, 1.0, -1.0), dtype=np.float64)


def saved_intermediates(call, xs, params) -> list[str]:
    """The tensors the Function inside ``call`` saved for backward that are neither its inputs nor its
    outputs (computed inside forward, where autograd does not record), each said as ``ctx.saved_tensors[i]``
    with what it is: its double backward treats them as constants, whatever its backward computes from them.

    Besides a tensor that does not require grad, that is a leaf (no grad_fn) that is none of the Function's
    inputs: a view of an input made inside forward (``torch.broadcast_tensors(a, b)[0]``, ``a.expand(...)``)
    is saved as a leaf of its own, so the second-order term through it never reaches the input.
    """
    import torch

    ys = [x.detach().to(torch.float64).requires_grad_(True) for x in xs]
    with torch.enable_grad():
        out = call(*ys, **params)
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            inputs = [getattr(f, "variable", None) for f, _ in node.next_functions]
            try:
                saved = node.saved_tensors
            except RuntimeError:  # nothing saved, or already freed
                return []
            return [f"ctx.saved_tensors[{i}]" + _what_saved(t, inputs) for i, t in enumerate(saved)
                    if not t.requires_grad or (t.grad_fn is None and not any(t is v for v in inputs))]
        todo += [f for f, _ in node.next_functions]
    return []


def _what_saved(t, inputs) -> str:
    base = t._base if t._is_view() else None
    k = next((k for k, v in enumerate(inputs) if v is not None and base is not None and base is v), None)
    if k is not None:
        return (f" (a view of input {k} made inside forward, e.g. by torch.broadcast_tensors or expand: autograd "
                f"saves it as a leaf of its own, cut from input {k})")
    return ""


def directional_second_order(call, xs, params) -> tuple[float | None, float, float] | None:
    """``(autograd, finite differences, their error bound)`` of ``d/dt <J(x + t u)^T g, v>`` at t = 0 for
    ``call(*xs, **params)``, in float64; autograd's is None where the first-order gradient is not
    differentiable (no grad_fn under ``create_graph=True``); the whole is None where the first-order
    gradient is not smooth at x along u (a kink of it: ``x|x|``'s ``2|x|`` at 0, where a central
    difference averages the two sides).  What fn raises (its double backward, say) is raised as :class:`FnRaised`
    (its ``__cause__``: the exception); anything else raised is gradspec's own."""
    import torch

    xs = [x.detach().to(torch.float64) for x in xs]
    with torch.no_grad(), _theirs():
        out = call(*xs, **params)
    g = torch.from_numpy(_fixed(tuple(out.shape), 0.0))
    vs = [torch.from_numpy(_fixed(tuple(x.shape), 0.3)) for x in xs]
    us = [torch.from_numpy(_fixed(tuple(x.shape), 0.7)) for x in xs]

    # Under create_graph the upstream gradient requires grad, as it does wherever fn sits inside a graph being
    # differentiated twice: torch then refuses a @once_differentiable backward (it raises), as in real use.
    g_graph = g.clone().requires_grad_(True)

    def s(shift: float, graph: bool):
        ys = [(x + shift * u).requires_grad_(True) for x, u in zip(xs, us, strict=True)]
        with torch.enable_grad():
            with _theirs():
                hs = torch.autograd.grad(call(*ys, **params), ys, g_graph if graph else g, create_graph=graph,
                                         allow_unused=True)
            terms = [h * v for h, v in zip(hs, vs, strict=True) if h is not None]
            total = sum(t.sum() for t in terms)
        return ys, total, float(sum(t.detach().abs().sum() for t in terms))

    ys, total, size = s(0.0, True)
    auto = None
    if isinstance(total, torch.Tensor) and total.requires_grad:
        with _theirs():
            _leaves_after_refusal(total)
        # A graph that reaches only g (the backward's dependence on x detached: 3 * g * (x * x).detach()) gives 0
        # here, as torch does in real use wherever g requires grad (a gradient penalty): silently, no error
        # (tryout5 #2: this was "not checked ... torch raises", and the wrong double backward passed)
        with _theirs():
            d2 = torch.autograd.grad(total, ys, allow_unused=True)
        auto = float(sum((d * u).sum() for d, u in zip(d2, us, strict=True) if d is not None))
    s0 = float(total.detach()) if isinstance(total, torch.Tensor) else float(total)
    t = 1e-4 * max(1.0, _largest(xs))
    sides = {}
    for h in (t, t / 8):
        sides[h] = ((float(s(h, False)[1]) - s0) / h, (s0 - float(s(-h, False)[1])) / h)
    # rounding of s (its terms' size, 64 ulps) divided by the step: what a difference quotient carries
    eps = float(np.finfo(np.float64).eps)
    noise = 64 * eps * max(size, abs(s0)) / (t / 8)
    gap1, gap2 = (abs(a - b) for a, b in (sides[t], sides[t / 8]))
    # One-sided slopes of a smooth s differ by ~t |s''|: 8-fold less at t/8.  At a kink the gap stays.
    if gap2 > gap1 / 4 + noise:
        return None
    c1, c2 = (sum(sides[h]) / 2 for h in (t, t / 8))
    fd = (64 * c2 - c1) / 63  # Richardson: the t^2 terms cancel
    # rounding of autograd's own second-order sum: its terms are ~ |g| |v| |u| / |x| in size (one derivative
    # more than the first-order terms |g| |v|), summed in another order than anything else here
    terms = float(g.abs().sum()) * _largest(vs) * _largest(us) / max(_largest(xs), 1e-3)
    # (a non-finite autograd sum adds nothing: the bound is finite differences' own, and the NaN is a finding)
    size2 = abs(auto) if auto is not None and np.isfinite(auto) else 0.0
    return auto, fd, abs(c2 - c1) + noise + _tol.EXACT_RTOL["float64"] * (size2 + abs(fd) + terms)


def _largest(ts) -> float:
    """The largest |element| of the tensors ``ts``, 0.0 where they hold none (torch's max() of an empty tensor
    raises: tryout9 #7, a case with a 0-element input lost its second-order check and blamed fn's backward)."""
    return max((float(t.abs().max()) for t in ts if t.numel()), default=0.0)


class FnRaised(Exception):
    """fn's forward or backward (or autograd through them) raised inside the second-order check: ``__cause__``
    is its exception.  Anything else raised there is gradspec's own (never reported as fn's)."""


@contextlib.contextmanager
def _theirs():
    """The code under test runs in the block: what it raises is re-raised as :class:`FnRaised`."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - whatever fn raises is fn's
        raise FnRaised(str(e)) from e


def _leaves_after_refusal(total) -> list:
    """The leaf tensors ``total``'s graph reaches; first raise what torch raises on a double backward through
    a @once_differentiable backward: its outputs hang off an ``Error`` node (torch's DelayedError) whose
    backward raises.  ``autograd.grad`` with respect to fn's inputs never runs that node (its inputs are
    detached copies), so without this the refusal would read as a second-order gradient of zero;
    ``.backward()`` reaches it and raises, as in real use."""
    import torch

    leaves: list = []
    seen, todo = set(), [total.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        nxt = [f for f, _ in node.next_functions if f is not None]
        if hasattr(node, "variable"):
            leaves.append(node.variable)
        if node.name() == "torch::autograd::Error":
            behind = [f.variable for f in nxt if hasattr(f, "variable")]
            if behind:
                torch.autograd.grad(total, behind, retain_graph=True)  # runs the Error node: torch's own message
        todo += nxt
    return leaves


def first_order_agrees(call, xs, params) -> bool:
    """Whether fn's first-order backward, with the same fixed upstream gradient as
    :func:`directional_second_order`, agrees with central differences of its forward along ``u`` there.
    A double backward through a wrong first-order one (autograd differentiates a saved output through the
    Function's own backward) is a symptom of that first-order bug, reported by the first-order checks."""
    import torch

    xs = [x.detach().to(torch.float64) for x in xs]
    ys = [x.clone().requires_grad_(True) for x in xs]
    with torch.enable_grad():
        out = call(*ys, **params)
        g = torch.from_numpy(_fixed(tuple(out.shape), 0.0))
        hs = torch.autograd.grad(out, ys, g, allow_unused=True)
    us = [torch.from_numpy(_fixed(tuple(x.shape), 0.7)) for x in xs]
    auto = float(sum((h * u).sum() for h, u in zip(hs, us, strict=True) if h is not None))
    t = 1e-4 * max(1.0, _largest(xs))

    def f(shift: float) -> float:
        with torch.no_grad():
            return float((call(*[x + shift * u for x, u in zip(xs, us, strict=True)], **params) * g).sum())

    c1, c2 = ((f(h) - f(-h)) / (2 * h) for h in (t, t / 8))
    fd = (64 * c2 - c1) / 63
    noise = 64 * float(np.finfo(np.float64).eps) * max(abs(f(0.0)), float(g.abs().sum())) / (t / 8)
    return abs(auto - fd) <= _allowed(abs(c2 - c1) + noise, auto, fd)


class DoubleBackwardCheck:
    """The per-run state: clean checks left, notes already given, whether something was found."""

    def __init__(self, spec, target: str, replay: str, result) -> None:
        self.spec, self.target, self.replay, self.result = spec, target, replay, result
        self.left = CLEAN_CHECKS
        self.found = False
        self.checked = 0

    def __call__(self, case: Case) -> list:
        node = next((n for n in case.nodes if n.op == self.spec.name), None)
        if node is None or (not self.found and self.left <= 0):
            return []
        if getattr(self.spec, "fn_has_backward", True) is False and not getattr(self.spec, "functions_inside", None):
            return []  # a plain function of torch ops: torch differentiates its own graph, to any order (not so
            # what a Function inside it cut from the graph in its backward: tryout5's twice_buggy)
        if case.meta.get("double_backward") is False:
            return []  # the run opted out (verify_torch_function(..., double_backward=False)); its replays too
        import torch

        try:
            env = case.evaluate()
            xs = [torch.from_numpy(np.array(env[i], dtype=np.float64)) for i in node.inputs]
        except Exception:  # noqa: BLE001 - the forward raised: the case's own check reports or excuses it
            return []
        if not all(x.is_floating_point() for x in xs) or not any(x.numel() for x in xs):
            return []  # (0 elements: nothing to differentiate, and no clean check used up)
        if not self.found:
            self.left -= 1
        try:
            got = directional_second_order(self.spec.torch, xs, node.params)
        except FnRaised as raised:  # once_differentiable, or a double backward that raises
            self.left = 0
            e = raised.__cause__ or raised
            first = str(e).splitlines()[0] if str(e) else ""
            if ONCE_DIFFERENTIABLE in first:
                self.result.note("second-order gradients (double backward) not checked: fn's backward is marked "
                                 "@once_differentiable: torch refuses to differentiate it twice (RuntimeError: "
                                 f"{first}) -- an expected refusal, not a finding; drop @once_differentiable and make "
                                 "its backward differentiable if you need Hessian-vector products or gradient "
                                 "penalties through it")
            else:
                self.result.note(f"second-order gradients (double backward) not checked: autograd through fn's "
                                 f"backward raised {type(e).__name__}: {first}")
            return []
        except Exception as e:  # noqa: BLE001 - gradspec's own code failed: never fn's doing
            first = str(e).splitlines()[0] if str(e) else ""
            self.result.note(f"second-order gradients (double backward) not checked on a case: gradspec's own "
                             f"second-order check failed there ({type(e).__name__}: {first}): a gradspec bug, not your "
                             "code's -- please report it with this case")
            return []
        if got is None:
            return []  # the first-order gradient has a kink here: nothing decided
        auto, fd, err = got
        if not np.isfinite([fd, err]).all():
            return []
        tol = _allowed(err, auto or 0.0, fd)
        if auto is None and abs(fd) <= tol:
            auto = 0.0  # no graph through the backward, and none needed: the second-order term is zero here
        if auto is None:
            if not self._held(xs, node, "no second-order term by autograd"):
                self.left = 0
                self.result.note("second-order gradients (double backward) not checked: fn's backward is not "
                                 "differentiable (its gradients carry no grad_fn under create_graph=True, even with an "
                                 "upstream gradient that requires grad: computed outside autograd, under no_grad or "
                                 "detached); a double backward through it gets no second-order term from fn: torch "
                                 "raises only where nothing else in the graph requires grad, else those terms are "
                                 "silently missing; mark the backward @once_differentiable to make torch refuse, or "
                                 "write it in torch ops")
            return []
        self.checked += 1
        self.result.note("second-order gradients (double backward, create_graph=True) are checked on a few cases per "
                         "run: the directional derivative of <J^T g, v> by autograd through fn's backward vs central "
                         "differences of fn's first-order backward")
        if abs(auto - fd) <= tol:
            return []
        finite = bool(np.isfinite(auto))  # (NaN / inf where the differences are finite: never a saved-constant's doing)
        if finite and self._held(xs, node, f"{auto:.6g} by autograd vs {fd:.6g} by central differences of its "
                                           "first-order backward"):
            return []
        try:
            if not first_order_agrees(self.spec.torch, xs, node.params):
                return []  # the first-order backward is wrong here: the first-order checks report that
        except Exception:  # noqa: BLE001 - cannot tell: nothing decided
            return []
        self.found = True
        return [self._wrong(case, node, auto, fd, err, None if finite else _backward_traps(
            self.spec.torch, xs, node.params, _fixed))]

    def _held(self, xs, node, what: str) -> bool:
        """Note (and True) when fn saves tensors computed inside forward: its double backward is then wrong
        by construction -- right to first order, a design choice torch documents, not a slip: never a failure."""
        try:
            held = saved_intermediates(self.spec.torch, xs, node.params)
        except Exception:  # noqa: BLE001 - cannot tell: treated as none
            held = []
        if held:
            self.left = 0
            self.result.note(
                f"second-order gradients (double backward) through fn's backward are wrong here ({what}): it saves "
                f"{len(held)} tensor(s) computed inside forward (neither inputs nor outputs: {'; '.join(held)}), which autograd treats as "
                "constants when it differentiates the backward -- fine for first-order use; for double backward "
                "(Hessian-vector products, gradient penalties) save the inputs themselves and recompute them in backward "
                "(broadcast there), or return them as outputs")
        return bool(held)

    def _wrong(self, case, node, auto, fd, err, traps=None) -> VerifyDiscrepancy:
        fn = self.spec.name.removeprefix("torch_")
        where = f"node {node.name} = {node.op}({', '.join(node.inputs)})"
        through = f"{fn}.backward"
        if getattr(self.spec, "fn_has_backward", True) is False:  # a plain function: the Functions it runs
            inside = list(getattr(self.spec, "functions_inside", None) or ())[:3]
            through = f"the {' and '.join(f'{c}.backward' for c in inside)} it runs" if inside else through
        why = ("its backward must be differentiable correctly — a product-rule term for an input it depends on "
               "forgotten, a None returned by the backward's own backward, or a detached intermediate?")
        if auto == 0.0:  # no path from the gradient back to fn's inputs: only through the upstream gradient g
            why = (f"autograd finds no path from the result of {through} back to fn's inputs, only to the upstream "
                   "gradient g: what it computes from the inputs is cut from the graph (.detach(), numpy, .item(), "
                   "no_grad), so wherever g requires grad (a gradient penalty, a Hessian-vector product) torch gives "
                   "a wrong second order without an error; compute it in torch ops from the saved inputs, or mark "
                   "the backward @once_differentiable so torch refuses a double backward")
        fix = f"differentiate {through} correctly (every input it uses needs its term)"
        if not np.isfinite(auto):
            why = ("autograd's second-order gradient is not finite where the first-order backward is smooth and "
                   "finite: " + (f"{'; '.join(t.words() for t in traps[:2])} — autograd through that select sends "
                                 "the branch a zero gradient there and the branch's own backward multiplies it by its "
                                 "non-finite values (0 · nan = nan)" if traps else
                                 "a 0 · inf or inf - inf inside the backward's own backward (a where / masked_fill "
                                 "whose unselected branch is NaN or inf, a division by a value that is 0 there?)"))
            fix = _WHERE_FIX if traps else fix
        summary = (f"{where}: the double backward of {fn} (autograd through {through}, create_graph=True) is "
                   f"wrong: along a fixed direction, d/dt <J^T g, v> is {auto:.6g} by autograd but {fd:.6g} by central "
                   f"differences of {fn}'s first-order backward (which agrees with J^T g); {why}")
        rel = abs(auto - fd) / max(abs(auto), abs(fd), 1e-300)
        d = VerifyDiscrepancy("value", ("torch-cpu", "finite-differences"), f"{self.target}: {summary}", case,
                              values=(auto, fd), abs_err=abs(auto - fd), rel_err=rel,
                              tolerance=_allowed(err, auto if np.isfinite(auto) else 0.0, fd),
                              tolerance_why=f"4 x step-difference estimate ({err:.3g}) + "
                                            f"{_tol.DOUBLE_BACKWARD_RTOL:g} relative",
                              replay=self.replay, check_name=CHECK_NAME)
        # The direction moves every input of fn's node, also one the case holds constant for its first-order
        # checks (requires_grad False there): the case file says which (replay perturbs the same).
        case.meta["double_backward_perturbs"] = list(node.inputs)
        d.cause = Cause("wrong-double-backward", summary, node=node.name, op=node.op,
                        evidence=f"autograd {auto!r}, finite differences {fd!r} (error estimate {err:.3g}), "
                                 f"perturbing {', '.join(node.inputs)} (every input of fn, also those the case "
                                 "holds constant for its first-order checks); skip this check with "
                                 "verify_torch_function(..., double_backward=False)",
                        fix=fix)
        return d
