"""``gs.verify_torch_function``: the backward of torch code (typically ``MyFunction.apply``).

``fn`` is wrapped as a user op whose VJP is fn's own backward (``torch.autograd.grad``) and whose
torch twin is fn itself, so the backward is checked both call by call and inside whole torch
graphs (fn called several times, inputs used twice), plus backward twice (accumulation, state
kept between calls).

Example::

    >>> import torch, gradspec as gs
    >>> gs.verify_torch_function(torch.sin, arity=1, max_examples=3, seed=0).ok
    True
"""

from __future__ import annotations

import contextlib
import math
import time

import numpy as np

from .. import domains as _domains
from .._private import determinism as _det
from .._private import draw_tally as _draw_tally
from .._private import float32_line as _f32line
from .._private import opaque_noise as _opaque_noise
from .._private import result_sink, user_warnings
from .._private import torch_cuts as _cuts
from .._private import torch_grad as _torch_grad
from .._private import torch_owned as _owned
from .._private import torch_structs as _structs
from .._private import torchfn_record as _rec
from .._private.casefile import module_not_replayed
from .._private.imports import importable_path
from ..ops.user import Op, UserOpError
from ..result import Result
from ..search import _check_budget, _resolve_seed, _Runner
from ..spec import registry as _registry
from . import fn_draws, fn_shapes, torch_call, torch_double, torch_float32, torch_grad_shapes, torch_layouts, torch_returns, torch_surrogate
from . import numerics as _num
from .op import COMPANIONS, _budget_text, _check_op_case, _count, _op_cases, _wrap
from .torch_call import ARG_PREFIX, CallLayout, InPlace, _decode, blocks, flat, jitter_float32, label_of, outputs, schema_of
from .torch_replay import _not_doubled, _twice_check, replay_checks  # noqa: F401 - cli, tests

__all__ = ["verify_torch_function", "verify_module"]


_TORCH_FN_NAMES: dict = {}


def _torch_fn_name(fn) -> str:
    base = label_of(fn).split("::")[-1].removesuffix(".apply") or "fn"
    base = "".join(ch if ch.isalnum() else "_" for ch in str(base)).strip("_") or "fn"
    if base[0].isdigit():
        base = "f_" + base
    base = f"torch_{base}"
    # ``Cls.apply`` is a new bound method at every attribute access (a new id, the old one possibly reused):
    # bound methods compare and hash by (__self__, __func__), so the same Function keeps its name
    try:
        hash(fn)
        key = fn
    except TypeError:
        key = id(fn)
    taken = {v for k, v in _TORCH_FN_NAMES.items() if k != key}
    name, k = base, 1
    while name in taken or (name in _registry.all_specs() and not _registry.all_specs()[name].user):
        k += 1
        name = f"{base}_{k}"
    _TORCH_FN_NAMES[key] = name
    return name


def _torch_arity(fn, params: dict) -> int | None:
    import inspect

    try:
        import torch

        cls = getattr(fn, "__self__", None)
        if isinstance(cls, type) and issubclass(cls, torch.autograd.Function):
            sig = inspect.signature(cls.forward)
            ps = list(sig.parameters.values())
            base_setup = getattr(torch.autograd.function._SingleLevelFunction, "setup_context", None)
            if getattr(cls, "setup_context", base_setup) is base_setup and ps:
                ps = ps[1:]  # forward(ctx, ...)
            return sum(1 for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                       and p.default is p.empty and p.name not in params) or None
    except (TypeError, ValueError, ImportError):
        pass
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()):
        return None
    n = sum(1 for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            and p.default is p.empty and p.name not in params)
    return n or None


def _torch_wrap(fn, name: str, layout: CallLayout, signature, shape_fn, domain, params, kink_distance=None,
                keep32: bool = True):
    """``fn`` as a user op: numpy in, numpy out; its VJP is fn's own backward.  ``layout`` places
    the tensors and the non-tensor arguments; a tuple of outputs is one flat output (torch_call).
    ``keep32``: float32 inputs run fn's float32 code (else, dtypes=('float64',), everything is float64,
    the generator's float32 draws included)."""
    import torch

    def run(arrays, kw, grad: bool, noisy=None):
        """(the leaves, what fn was given: the leaves or copies of them (in-place code), its outputs, multi)"""
        # each input keeps its dtype (float32 cases run fn's float32 code); anything else as float64
        xs = [torch.from_numpy(np.array(a, dtype=torch_float32.run_dtype(a, keep32))) for a in arrays]
        given = xs
        if grad:
            xs = [x.requires_grad_(True) for x in xs]
            given = inplace.inputs(lambda ts: layout.call(fn, ts, kw), xs)  # (copied outside the jitter)
        with torch.enable_grad() if grad else torch.no_grad(), noisy() if noisy else contextlib.nullcontext():
            outs, multi = outputs(layout.call(fn, given, kw))
        return xs, given, outs, multi

    def forward(*arrays, **kw):
        try:  # (the first float64 calls watched for casts to float32: torch_float32)
            _, _, outs, multi = torch_float32.watch(spec, arrays, lambda: run(arrays, kw, False))
        except Exception as e:  # the first one is shown if fn never runs (an inconclusive run's reason)
            if not forward.errors:
                forward.errors.append(f"fn's forward raised {type(e).__name__}: {e}")
            raise
        y = flat(outs, multi).detach().cpu()
        return y.to(torch.float64).numpy().astype(torch_float32.out_dtype(arrays, keep32), copy=False)

    forward.errors = []

    def vjp(g, *rest, **kw):
        arrays = rest[:-1]
        noise = _opaque_noise.active()
        noisy = None  # check.rounding_noise: fn's own float32 ops (forward and backward) jittered too
        if noise is not None and keep32 and any(np.asarray(a).dtype == np.float32 for a in arrays):
            noisy = lambda: jitter_float32(*noise)  # noqa: E731
        xs, given, outs, multi = run(arrays, kw, True, noisy)
        probe_at[:] = [(arrays, kw)]  # (find_cuts: where a finding's words look, at the latest inputs)
        if not inside:
            inside.extend(functions_in_graph(outs))
        gt = torch.from_numpy(np.array(g, dtype=torch_float32.run_dtype(g, keep32)))
        g0 = gt.clone()
        pairs = _seeded(outs, multi, gt)
        if not pairs:
            if not any(o.requires_grad for o in outs):
                raise RuntimeError("fn's output does not require grad: is the op differentiable?")
            return tuple(np.zeros(np.shape(a)) for a in arrays)
        saved = [x.detach().clone() for x in given]  # (what fn was given, as its forward left it)

        def rebuild():  # (a refusal of .grad() deep in the graph: torch freed what ran before it)
            nonlocal xs, given, saved
            xs, given, outs2, _ = run(arrays, kw, True, noisy)
            saved = [x.detach().clone() for x in given]
            again = _seeded(outs2, multi, gt)
            return [o for o, _ in again], xs, [gi for _, gi in again]

        with noisy() if noisy else contextlib.nullcontext(), _det.DrawWatch(draws):  # (diagnose names a drawing backward)
            grads = _torch_grad.grad([o for o, _ in pairs], xs, [gi for _, gi in pairs], rebuild=rebuild,
                                     used=by_backward)
        if not _unchanged(gt, g0):
            raise ValueError("read-only: fn's backward modified its grad_output in place")
        for i, (x, s0) in enumerate(zip(given, saved, strict=True)):
            if not _unchanged(x.detach(), s0):
                raise ValueError(f"read-only: fn's backward modified input {i} in place")
        return tuple(None if gi is None else gi.detach().numpy().copy() for gi in grads)

    inside: list = []  # the torch.autograd.Functions fn's graph runs (a wrapper's: diagnose names their backward)
    draws: list = []  # [True] once fn's backward drew from torch's generator (determinism.DrawWatch)
    by_backward: list = []  # why fn's backward ran through .backward(), not autograd.grad (a reentrant checkpoint)
    cuts: list = []  # where fn's code leaves the derivative (detach, register_hook, no_grad: _private.torch_cuts)
    probed: list = []
    probe_at: list = []

    def find_cuts() -> list:
        """``cuts``, found once on demand (a diagnosis): fn run again under torch_cuts' pass-through mode, which
        would cost on every op of every call (a torch.compile'd fn: 3 more graphs) if it ran on all of them."""
        if not probed and probe_at:
            probed.append(True)
            with _cuts.recording() as found:
                try:
                    run(*probe_at[0], True)
                except Exception:  # noqa: BLE001 - words only: the finding itself stands
                    pass
            cuts.extend(found)
        return cuts
    inplace = InPlace()  # fn modifies its inputs in place (ctx.mark_dirty): it gets copies of leaves (tryout5 #1)

    def torch_fn(*xs, **kw):
        outs, multi = outputs(layout.call(fn, inplace.inputs(lambda ts: layout.call(fn, ts, kw), list(xs)), kw))
        return flat(outs, multi)

    def torch_direct(*xs, **kw):  # the tensors as given, copied never (diagnose reads identities through them)
        outs, multi = outputs(layout.call(fn, list(xs), kw))
        return flat(outs, multi)

    spec = Op(name, forward=forward, vjp=vjp, torch=torch_fn, arity=layout.arity, signature=signature,
              shape_fn=shape_fn, params=params, domain=domain, kink_distance=kink_distance)
    spec.torch_name = getattr(fn, "__qualname__", repr(fn))
    spec.twin_is_self = True  # type: ignore[attr-defined]  (torch-cpu runs fn's backward too: gs.check knows)
    spec.defining_module = None  # type: ignore[attr-defined]  (replayed through import_path, see _resolve)
    owner = getattr(fn, "__self__", None)
    spec.import_path = importable_path(owner if isinstance(owner, type) else fn)
    spec.fn_has_backward = isinstance(owner, type) and issubclass(owner, torch.autograd.Function)  # (diagnose's words)
    spec.registered_backward = backward_of(fn)  # type: ignore[attr-defined]  (a custom op's: diagnose names it)
    spec.forward_errors = forward.errors  # type: ignore[attr-defined]
    spec.functions_inside = inside  # type: ignore[attr-defined]
    spec.grad_by_backward = by_backward  # type: ignore[attr-defined]
    spec.grad_cuts = cuts  # type: ignore[attr-defined]
    spec.find_cuts = find_cuts  # type: ignore[attr-defined]
    spec.inplace = inplace  # type: ignore[attr-defined]
    spec.torch_direct = torch_direct  # type: ignore[attr-defined]
    spec.state_changes = getattr(fn, "_gs_state", None)  # type: ignore[attr-defined]  (a module's buffers)
    # [True] once fn drew from torch's generator: torch_layouts then leaves input layouts alone (rand_like keeps
    # a transposed input's strides: its draws land on other elements, a correct dropout differs)
    spec.draws_random = layout.drew  # type: ignore[attr-defined]
    spec.backward_draws = draws  # type: ignore[attr-defined]

    def output_blocks(*arrays, **kw):  # where each output sits in the flat one (diagnose names the wrong one)
        _, _, outs, multi = run(arrays, kw, False)
        return blocks(outs) if multi else None

    spec.output_blocks = output_blocks  # type: ignore[attr-defined]
    return spec


def _seeded(outs, multi: bool, gt) -> list:
    """[(output, its upstream gradient)] for the outputs that take part: with several outputs each has its
    own block of the flat seed ``gt``, and one whose block is all zero is not used."""
    import torch

    if not multi:
        return [(outs[0], gt.to(outs[0].dtype))] if outs[0].requires_grad else []
    pairs = [(o, gt[a:b].reshape(shape).to(o.dtype)) for o, (a, b, shape) in zip(outs, blocks(outs), strict=True)]
    return [(o, gi) for o, gi in pairs if o.requires_grad and bool(torch.any(gi != 0))]


def functions_in_graph(outs, limit: int = 2000) -> list:
    """The backwards of the custom ``torch.autograd.Function`` s (``"Cls.backward"``) and of the
    ``torch.library.custom_op`` s (the function given to ``register_autograd``) in the autograd graph of
    ``outs`` (first met first), walking at most ``limit`` graph nodes."""
    seen, todo, names = set(), [getattr(o, "grad_fn", None) for o in outs], []
    while todo and len(seen) < limit:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        cls = getattr(node, "_forward_cls", None)
        name = None if cls is None else _registered_backward(cls) or (
            # torch's own Functions (a reentrant checkpoint's CheckpointFunction) are not "your" code
            None if str(getattr(cls, "__module__", "")).startswith("torch.") else f"{cls.__name__}.backward")
        if name is not None and name not in names:
            names.append(name)
        todo += [f for f, _ in getattr(node, "next_functions", ())]
    return names


def backward_of(fn) -> str | None:
    """The name of the backward a ``torch.library.custom_op`` was given with ``register_autograd``, or None:
    what a finding names (torch's generated class, GeneratedBackwardFor_ns_op_default, is not the user's code)."""
    bwd = getattr(fn, "_backward_fn", None)
    name = getattr(bwd, "__qualname__", None) if callable(bwd) else None
    if not isinstance(name, str):
        return None
    op = getattr(fn, "_qualname", None)
    return f"{name}, registered with register_autograd for {op}" if isinstance(op, str) else name


def _registered_backward(cls) -> str | None:
    """For torch's generated Function of a custom op: its register_autograd backward (held in the closure of
    the generated backward, with the op), else None."""
    for cell in getattr(getattr(cls, "backward", None), "__closure__", None) or ():
        try:
            name = backward_of(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
        if name:
            return name
    return None


def _unchanged(now, before) -> bool:
    """``now`` holds what ``before`` held: NaN where it was NaN (torch.equal says NaN != NaN, and an
    upstream gradient of NaN -- atan2 fed atan2(0, 1) = 0 twice -- read as written in place)."""
    import torch

    return now.shape == before.shape and bool(torch.all((now == before) | (torch.isnan(now) & torch.isnan(before))))


def _torch_function_class() -> type:
    import torch

    return torch.autograd.Function


@fn_shapes.interruptible("torch function")
@_owned.keeping  # (the buffers of modules fn holds: put back as they were when the run ends)
def verify_torch_function(fn, *, arity: int | None = None, signature: str | None = None, shape_fn=None, domain=None,
                          params: dict | None = None, max_examples: int | None = None, seconds: float | None = None,
                          seed: int | None = None, companions=COMPANIONS, example_inputs=None, args: dict | None = None,
                          broadcast: str = "auto", rtol: float | None = None, atol: float | None = None,
                          kink_distance=None, dtypes=None, double_backward: bool = True, surrogate=None,
                          at=None) -> Result:
    """Verify the backward of torch code ``fn`` (typically ``MyFunction.apply``) in float64 and float32.

    Its gradients are compared with finite differences of its own forward, the jacobian oracle
    (a finite-difference JVP of its forward) and torch autograd running it inside whole graphs,
    under random seeds, composed with table ops, with inputs used twice, and with backward run
    twice.  Without ``signature`` / ``shape_fn`` it is taken as elementwise with broadcasting
    over ``arity`` inputs (inferred from ``forward``'s signature when possible).  ``params``:
    name -> Hypothesis strategy, passed to ``fn`` as keyword arguments.

    ``example_inputs``: the arguments of one real call (``(x, A, 3, "mean")``): the float tensors
    are the inputs whose ranks, tied dims, broadcasting and batch dims are learnt by probing fn
    (:mod:`gradspec.verify.fn_shapes`), everything else is passed again at its position.
    ``args``: ``{position: value or strategy}`` for non-tensor positional arguments
    (``Function.apply`` takes no keywords).  ``broadcast``: ``"auto"`` (probe what fn accepts),
    ``"full"``, ``"one-way"`` (loop dims broadcast towards input 0 only) or ``"none"``.  ``fn``
    may return a tuple of tensors: each output gets its own seed (flattened into one output).

    ``dtypes``: the precisions fn runs in, ``("float64", "float32")`` by default: the budget is split
    between them (one precision per case); a float32 case runs fn's float32 code, compared at float32
    precision (finite differences evaluate fn in float64: where fn's float32 forward is another function
    than its float64 one, that case is not judged).  ``("float64",)``: float64 only.

    ``double_backward=False``: skip the second-order check (autograd through fn's backward vs finite
    differences of it) for code only ever differentiated once; the cases record it, so replays skip it too.

    ``surrogate``: a differentiable function of fn's arguments whose derivative IS the gradient fn's backward
    is meant to compute, where that is not the derivative of fn's forward on purpose (a straight-through
    estimator: ``lambda x: x.clamp(-1, 1)``; gradient reversal: ``lambda x: -lam * x``; a stop-gradient:
    ``lambda x: 0 * x``): fn's backward is checked against it instead (:mod:`gradspec.verify.torch_surrogate`).

    ``at``: a list of calls' arguments (each laid out as ``example_inputs``; the first is the example when
    that is not given): fn is checked at exactly those values, one case each, instead of random draws -- a kink,
    a tie, a value you know is hard (:func:`gradspec.verify.fn_shapes.at_cases`).

    ``rtol`` / ``atol``: the accuracy fn claims (see ``verify_op``).  Points where fn is not
    differentiable are detected numerically and skipped (``Result.nondifferentiable``);
    ``kink_distance(*inputs, **params) -> float`` (torch tensors in) says where the kinks are when
    you know: values are drawn away from them and cases within a finite-difference step of one are
    skipped.
    """
    _check_budget(max_examples, seconds)
    claim = _num.accuracy(rtol, atol, "verify_torch_function")
    chosen32, dtypes = dtypes is not None, _num.dtypes_of(dtypes, "verify_torch_function")
    if kink_distance is not None and not callable(kink_distance):
        raise TypeError("verify_torch_function: kink_distance must be callable (*inputs, **params) -> float "
                        f"(the distance from the inputs to the nearest kink), got {type(kink_distance).__name__}")
    if not callable(fn):
        raise TypeError(f"verify_torch_function expects a callable on torch tensors, got {type(fn).__name__}")
    if isinstance(fn, type) and issubclass(fn, _torch_function_class()):  # (calling the class runs no forward)
        raise UserOpError(f"verify_torch_function: {fn.__name__} is a torch.autograd.Function class: pass "
                          f"{fn.__name__}.apply (the call that runs its forward and records its backward)")
    domain = _domains.coerce(domain, "verify_torch_function")  # a name ('positive') or a clear error
    _num.check_drawable(domain, 1, "verify_torch_function")  # (tryout7 #8: a bare ZeroDivisionError)
    if _is_module(fn):  # parameters and inputs as leaves (gs.verify_module)
        return verify_module(fn, example_inputs=example_inputs, max_examples=max_examples, seconds=seconds,
                             seed=seed, domain=domain, broadcast=broadcast, dtypes=dtypes, double_backward=double_backward,
                             surrogate=surrogate)
    if surrogate is not None and not callable(surrogate):
        raise TypeError("verify_torch_function: surrogate must be a callable on torch tensors taking fn's arguments "
                        f"(its derivative is the intended gradient), got {type(surrogate).__name__}")
    params = dict(params or {})
    if at is not None and example_inputs is None and isinstance(at, (list, tuple)) and at:
        example_inputs = at[0]  # (the layout and shapes of fn's calls: at= is checked exactly, no draws)
    layout = _layout(fn, arity, signature, params, example_inputs, args)
    _check_signature_arity(fn, signature, layout)
    if isinstance(domain, (list, tuple)) and len(domain) != layout.arity:  # (was "zip() argument 2 is shorter ...")
        raise UserOpError(f"verify_torch_function: domain= has {len(domain)} entries for fn's {layout.arity} tensor "
                          f"input(s): give one domain for all inputs (domain=gs.domains.positive()) or exactly one per "
                          f"input (a list of {layout.arity})")
    try:
        plan = fn_shapes.plan(fn, layout, example_inputs=example_inputs, signature=signature, shape_fn=shape_fn,
                              params=params, domain=domain, broadcast=broadcast)
    except ValueError as e:
        raise UserOpError(f"verify_torch_function: {e}") from None
    name = _torch_fn_name(fn)
    random32 = bool(layout.drew) and not chosen32 and dtypes != ("float64",)  # (seen drawing while probed)
    if random32:  # a float32 case of random code has no witness (determinism.DREW32_NOTE): float64 takes the budget
        dtypes = ("float64",)
    if plan.domain is not None:  # inferred from the example's values (the plan's note says so)
        domain = plan.domain
    sig, rule = signature, shape_fn
    if plan.model is not None:
        sig, (rule, out_blocks) = None, fn_shapes.out_rules(fn, layout, domain)
    elif rule is not None and layout.positional:
        rule = _positional_rule(rule, layout)
    spec = _torch_wrap(fn, name, layout, sig, rule, domain, {**params, **layout.strategies()},
                       _num.torch_kinks(kink_distance), keep32="float32" in dtypes)
    how = _call_record(layout, plan.model is not None, sig, rule, domain)
    if surrogate is None:  # F.embedding(..., padding_idx=p) in plain code: row p held, as nn.Embedding's in a module
        rows = torch_surrogate.padding_lookups(fn, layout, example_inputs, domain)
        surrogate = torch_surrogate.function_surrogate(fn, rows) if rows else None
    declared = surrogate is not None and not getattr(surrogate, "_gs_auto", False)  # (else recognised: no keyword)
    if surrogate is not None:  # fn's backward checked against the declared gradient (torch_surrogate)
        torch_surrogate.check_example(fn, surrogate, layout, example_inputs)
        torch_surrogate.install(spec, surrogate, layout)
        spec.import_path = None  # a case file cannot carry the surrogate: its replay would compare with the derivative
    if plan.model is not None:
        spec._gs_out_blocks = out_blocks  # type: ignore[attr-defined]
    s = _resolve_seed(seed)
    label = label_of(fn)
    budget = _budget_text(max_examples, seconds) + _num.claim_text(claim) + _num.dtypes_text(dtypes)
    extra = [f"arity={layout.arity}"]
    if signature is not None:
        extra.append(f"signature={signature!r}")
    if shape_fn is not None:
        extra.append("shape_fn=shape_fn")
    if domain is not None:
        extra.append(f"domain={_domains.text(domain, source=True)}")
    if params:
        extra.append("params=params")
    if example_inputs is not None:
        extra.append("example_inputs=example_inputs")
    if args:
        extra.append("args=args")
    if broadcast != "auto":
        extra.append(f"broadcast={broadcast!r}")
    if kink_distance is not None:
        extra.append("kink_distance=kink_distance")
    if not double_backward:
        extra.append("double_backward=False")
    if declared:
        extra.append("surrogate=surrogate")
    run_replay = f"gs.verify_torch_function({label}, seed={s}, {budget}, {', '.join(extra)})"
    # Objects a line cannot spell are passed by name: a pasteable call once those names are bound (tryout4 #14:
    # "example_inputs=<your example>" was no Python)
    objects = [k for k in ("shape_fn", "params", "example_inputs", "args", "kink_distance", "surrogate")
               if f"{k}={k}" in extra]
    if objects:
        run_replay += (f"\n# {', '.join(objects)}: bind {'it' if len(objects) == 1 else 'each'} to the object you "
                       "passed to this call before running the line above")
    result = Result(target=label, what="torch function", seed=s, max_examples=max_examples, budget_seconds=seconds)
    result.replay = run_replay
    result.accuracy = claim
    result.note("fn's backward is checked call by call (torch.autograd.grad of one call, inside gradspec's engine) "
                "and inside whole torch graphs (the torch-cpu oracle); the jacobian oracle uses a finite-difference "
                "JVP of fn's forward (compared with a finite-difference tolerance)")
    result.note(torch_float32.float32_note(example_inputs, dtypes))
    if random32:
        result.note(_det.DREW32_NOTE)
    if layout.held_note():  # non-tensor arguments that never vary (a bug only at other values passes)
        result.note(layout.held_note())
        result.held = layout.held_words() if at is None else []  # (at= points carry their own values)
    if layout.drawn_note() and at is None:
        result.note(layout.drawn_note())  # (gs.strategies.indices: what range each drawn index came from)
    if not double_backward:
        result.note("second-order gradients (double backward) not checked (double_backward=False)")
    for text in (plan.why, plan.warning, plan.model is not None and fn_shapes.spread_note(domain),
                 "fn returns several outputs: they are checked as one flat output (each output its own "
                 "block of the seed; a zero block: that output unused)" if plan.multi else ""):
        if text:
            result.note(text)
    if plan.failure:
        _no_case(result, plan.failure)
        result_sink.emit(result)
        return result
    names = ["reference", "finite-differences", "jacobian", "torch-cpu"]
    if surrogate is not None:  # the derivative of fn's forward is not what its backward means to compute
        names.remove("finite-differences")
        result.note(torch_surrogate.note(surrogate))
        if getattr(surrogate, "_gs_rows", None):
            result.note(torch_surrogate.rows_note(surrogate._gs_rows))
    target = f"torch function {label}"
    module = getattr(fn, "_gs_module", None)
    spec.module_of = module  # type: ignore[attr-defined]  (report: the case file says why it does not replay)
    if surrogate is not None and module is None:
        case_replay = f"re-run the whole check (a case file cannot carry the surrogate): {run_replay}"
        result.note(f"findings of a {'surrogate=' if declared else 'padding-row'} run replay in this process only "
                    "(re-run the check): a saved case.json cannot carry the surrogate, and `gradspec replay` would "
                    "compare fn's backward with the derivative")
    elif module is not None:
        case_replay = (f"gs.check(d.case) while the module's op is registered (it is, in this process); "
                       f"or the whole run: {run_replay.replace('gs.verify_torch_function(', 'gs.verify_module(', 1)}")
        result.note(module_not_replayed(module))
    elif spec.import_path:
        case_replay = (f"result.write_html(DIR), then `gradspec replay DIR/<id>/case.json --allow-import "
                       f"{spec.import_path.partition(':')[0]}`; or the whole run: {run_replay}")
    else:
        case_replay = (f"gs.check(d.case) while {label} is registered (it is, in this process); "
                       f"or the whole run: {run_replay}")
        result.note(f"{label} was defined in __main__ or inside a function: saved case.json files cannot be "
                    "replayed with `gradspec replay` in another process; define it at module level for that")

    def evaluate(case):
        _count(result, case)
        if spec.import_path:  # what lets Case.from_json rebuild the op from the Function (see _resolve)
            case.meta["torch_functions"] = [spec.name]
            case.meta[_rec.KEY] = {spec.name: how}  # the shape rule and call layout, as data (replay)
        _num.tag(case, claim)
        summed(case)  # a wrong-shaped gradient torch sums down: a note (torch_grad_shapes)
        if not double_backward:
            case.meta["double_backward"] = False  # torch_double skips it, here and in replays
        return _check_op_case(case, spec, names, target, case_replay, result,
                              extra=lambda c: _twice_check(c, spec, target, case_replay) or layouts(c) or double(c))

    layouts = torch_layouts.LayoutCheck(spec, target, case_replay, result)  # non-contiguous layouts (torch_layouts)
    double = torch_double.DoubleBackwardCheck(spec, target, case_replay, result)  # second order (torch_double)
    summed = torch_grad_shapes.SummedDownCheck(spec, result)

    runner = _Runner(result, max_examples, seconds, explain=torch_float32.explain_kept)
    if plan.model is not None:
        strategy = fn_shapes.model_cases(spec, plan.model, layout, plan.multi, _wrap)
    else:
        strategy = _op_cases(spec, companions, {})
    strategy = torch_float32.in_dtypes(strategy, dtypes)
    t0 = time.perf_counter()
    # (_f32line: what this run's cases show of float32 inside; _draw_tally: the draws fn's forward is not finite at)
    with _f32line.learning(), _draw_tally.tallying() as drawn:
        if at is not None:  # the user's points, exactly: each is one case (a finding shrinks only to another of them)
            cases = _at_points(spec, layout, at, s, result)
            _Runner(result, len(cases), None, explain=torch_float32.explain_kept).run(_at_strategy(cases), evaluate)
        else:
            _num.run_within_budget(runner, strategy, _num.with_deadline(evaluate, result, seconds, target, run_replay), seconds)
    _num.fold_draws(result, drawn, spec, f"fn {label}")
    for d in result.discrepancies if spec.import_path else ():  # d.case.to_json() replays as the report's case.json
        c = getattr(d, "case", None)  # does (tryout10 F9: it had "user_ops": {} and `gradspec replay` refused it)
        if c is not None and any(n.op == spec.name for n in c.nodes):
            c.user_ops.setdefault(spec.name, spec.import_path)
    floats = [x for x in example_inputs or () if getattr(x, "is_floating_point", lambda: False)()]
    if example_inputs is not None and (domain is None or torch_surrogate.inside_domain(domain, floats)):
        # (fn is never called outside the domain the user declared for it, the example included)
        for text in torch_returns.returns_notes(fn, example_inputs, label):
            result.note(text)  # what its backward returns that torch drops or casts silently (tryout10 F10, F3)
    if spec.inplace.seen:
        result.note(f"{label} modifies its input in place (ctx.mark_dirty): every call was given copies of its tensor "
                    "inputs (non-leaf ones where they require grad), as a caller must (torch refuses an in-place change "
                    "of a leaf that requires grad); a graph node that reads such an input again reads the value it had, "
                    "in every witness alike")
    if spec.inplace.unmarked and not any(getattr(d.cause, "id", None) == "forward-mutates-input" for d in result.discrepancies):
        result.note(torch_call.unmarked_note(label, spec.inplace.unmarked))
    for text in filter(None, (fn_shapes.nonfinite_note(spec), fn_draws.tame_note(spec))):
        result.note(text)
    if spec.grad_by_backward:
        result.note(_torch_grad.backward_note(spec.grad_by_backward[0]))
    if surrogate is None and any(getattr(d.cause, "id", None) == "wrong-vjp" and "not linear in the upstream"
                                 not in d.cause.summary for d in result.discrepancies):  # (no surrogate is that)
        result.note(torch_surrogate.HINT)  # (a trick's gradient and its bug read alike without it: tryout6 #7)
    if not result.cases_run and spec.forward_errors:
        _no_case(result, f"{spec.forward_errors[0]} (on every input tried)")
    elif not result.cases_run and seconds is not None and time.perf_counter() - t0 >= seconds:
        # (not "the shape rules admitted no case": on a loaded machine a 3 s budget can go on drawing and warming up)
        _no_case(result, f"the time budget of {seconds:g} s ran out before a case was checked: give more seconds=")
    elif not result.cases_run:
        _no_case(result, "the shape rules admitted no case in the draws"
                 + ("" if example_inputs is not None else ": pass example_inputs=(...) (one real call's arguments)"))
    if layout.drew and not result.not_a_function:
        result.note(_det.DREW_NOTE)
    _det.set_aside(result)
    user_warnings.note(result, f"fn {label}")  # (fn warned: how often; shown once, below)
    result_sink.emit(result)
    user_warnings.reemit(result)  # after the verdict is complete (-W error raises here)
    return result


def _at_points(spec, layout, at, seed, result) -> list:
    try:
        cases = fn_shapes.at_cases(spec, layout, at, seed)
    except ValueError as e:
        raise UserOpError(f"verify_torch_function: {e}") from None
    result.note(f"checked at the {len(cases)} point(s) given by at= only (no random draws)")
    return cases


def _at_strategy(cases):
    from hypothesis import strategies as st

    return st.sampled_from(cases)


@fn_shapes.interruptible("module")
@_owned.keeping
def verify_module(module, *, example_inputs=None, max_examples: int | None = None, seconds: float | None = None,
                  seed: int | None = None, domain=None, broadcast: str = "auto", dtypes=None, surrogate=None,
                  **kw) -> Result:
    """Verify a ``torch.nn.Module``'s gradients w.r.t. its trainable parameters and its float inputs
    (:mod:`gradspec.verify.torch_module`).  ``example_inputs``: the arguments of one real forward call
    (non-tensor ones passed again as given); ``dtypes`` as in ``verify_torch_function`` (float32 cases
    run a float32 copy of the module); ``surrogate``: a module with the same parameters whose derivative is
    the intended gradient (:mod:`gradspec.verify.torch_surrogate`; an ``nn.Embedding``'s padding row is
    recognised without it); other keywords go to ``verify_torch_function``."""
    from . import torch_module

    fn, example, labels = torch_module.module_function(module, example_inputs)
    surr, pads = torch_module.surrogate_of(module, fn, surrogate)
    with result_sink.suppressed():  # emitted below, once it is labelled as a module
        r = verify_torch_function(fn, example_inputs=example, max_examples=max_examples, seconds=seconds, seed=seed,
                                  domain=domain, broadcast=broadcast, dtypes=dtypes, surrogate=surr, **kw)
    for *_, what in pads:
        r.note(f"{what}: torch gives the padding row no gradient from the lookup by design (documented), so that "
               "lookup's intended gradient is taken as 0 (held constant in the jacobian oracle's JVP); the other rows, "
               "and any other use of the weight, are checked against the derivative")
    torch_module.finish(r, labels, fn)
    result_sink.emit(r)
    return r


def _is_module(fn) -> bool:
    import torch

    return isinstance(fn, torch.nn.Module)


def _no_case(result: Result, why: str) -> None:
    """A run whose shape rules admit no case is inconclusive with this reason (never an OK)."""
    unran = getattr(result, "unran", None)
    if isinstance(unran, list):
        unran.append(why)
    result.note(f"no case ran: {why}")


def _layout(fn, arity, signature, params, example_inputs, args) -> CallLayout:
    if example_inputs is not None:
        nested = _structs.nested_inputs(label_of(fn), example_inputs if isinstance(example_inputs, (tuple, list))
                                        else (example_inputs,))
        if nested:
            raise UserOpError(f"verify_torch_function: {nested}")
        layout = CallLayout.from_example(example_inputs)
        if not layout.tensor_pos:
            raise UserOpError("verify_torch_function: example_inputs holds no floating-point tensor to differentiate")
        if args:
            over = CallLayout.from_args(args, None)
            for k in list(over.fixed) + list(over.drawn):
                if k in layout.tensor_pos:
                    raise UserOpError(f"verify_torch_function: args= gives position {k}, a float tensor in example_inputs")
            layout.fixed.update(over.fixed)
            layout.drawn.update(over.drawn)
            for k in layout.drawn:
                layout.fixed.pop(k, None)
        if arity is not None and arity != layout.arity:
            raise UserOpError(f"verify_torch_function: arity={arity} but example_inputs has {layout.arity} float "
                              "tensor(s)")
        return layout
    if arity is not None:
        _check_arity(fn, arity, len(args or ()), params)
    schema = schema_of(fn)
    if schema is not None and arity is None:
        tensors, others = schema
        if others and not args:
            pos, nm, ty = others[0]
            raise UserOpError(f"verify_torch_function: {label_of(fn)} takes a non-tensor argument {nm!r} ({ty}) at "
                              f"position {pos}: pass example_inputs=(...) (one real call) or args={{{pos}: value}}")
        arity = len(tensors)
    if args:
        if arity is None:
            total = _torch_arity(fn, params)
            arity = None if total is None else total - len(args)
        return CallLayout.from_args(args, arity)
    if arity is None:
        arity = _torch_arity(fn, params)
        if arity is None:
            if signature is not None:
                from .._private.signature import parse_outputs

                arity = len(parse_outputs(signature)[0])
            else:
                raise UserOpError("verify_torch_function: cannot infer fn's number of tensor inputs; pass arity=N "
                                  "or example_inputs=(...)")
    return CallLayout.plain(arity)


def _check_signature_arity(fn, signature, layout: CallLayout) -> None:
    """A signature with another number of inputs than fn's tensors: said here, not as a zip() error later."""
    if not isinstance(signature, str):
        return
    from .._private.signature import SignatureError, parse_outputs

    try:
        n = len(parse_outputs(signature)[0])
    except SignatureError:
        return  # the plan reports a malformed signature with its own message
    if n != layout.arity:
        raise UserOpError(f"verify_torch_function: signature {signature!r} has {n} input(s) but {label_of(fn)} takes "
                          f"{layout.arity} tensor input(s); give one signature block per tensor input "
                          "(e.g. '(m,n),(n,p)->(m,p)' for two) or pass arity=")


def _check_arity(fn, arity: int, n_args: int, params: dict) -> None:
    """An arity fn's forward cannot take is a usage error up front, where its signature can be read:
    before, SoftAbsOK.apply (forward(ctx, x)) with arity=3 raised TypeError on every case and the run
    FAILED on 'backward twice raised TypeError: forward() takes 2 positional arguments but 4 were given'."""
    got = _positional_range(fn, params)
    if got is None:
        return
    lo, hi, where = got
    n = arity + n_args
    if lo <= n <= hi:
        return
    takes = f"{lo}" if lo == hi else f"at least {lo}" if hi == math.inf else f"{lo} to {hi}"
    given = f"arity={arity}" + (f" plus {n_args} fixed argument(s) from args=" if n_args else "")
    fix = f": pass arity={lo - n_args}" if lo == hi and lo - n_args >= 1 else ""
    raise UserOpError(f"verify_torch_function: {given} but {where} takes {takes} positional input(s){fix}")


def _positional_range(fn, params: dict):
    """(fewest, most, what was read) positional inputs fn accepts, or None where no signature can be read."""
    import inspect

    target, skip_ctx, where = fn, False, label_of(fn)
    try:
        import torch

        cls = getattr(fn, "__self__", None)
        if isinstance(cls, type) and issubclass(cls, torch.autograd.Function):
            target, where = cls.forward, f"{cls.__name__}.forward"
            base_setup = getattr(torch.autograd.function._SingleLevelFunction, "setup_context", None)
            skip_ctx = getattr(cls, "setup_context", base_setup) is base_setup  # forward(ctx, ...)
    except ImportError:
        pass
    try:
        ps = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return None
    if skip_ctx and ps:
        ps = ps[1:]
    pos = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in params]
    hi = math.inf if any(p.kind == p.VAR_POSITIONAL for p in ps) else len(pos)
    return sum(p.default is p.empty for p in pos), hi, where


def _positional_rule(shape_fn, layout: CallLayout):
    """A user's shape_fn sees fn's positional layout (shapes where the tensors go)."""

    def rule(*shapes, **params):
        a, kw = layout.shape_args(shapes, params)
        return shape_fn(*a, **kw)

    return rule


def _call_record(layout: CallLayout, learnt: bool, sig, rule, domain) -> dict:
    """How fn is called and its output shaped (:mod:`gradspec._private.torchfn_record`): a learnt
    rule, a tuple output or a user's shape_fn (code, not data) replay as "the shape fn's forward
    returns", which is what the learnt rule is (``fn_shapes.out_rules``)."""
    shape = "forward" if learnt or rule is not None else "signature" if sig is not None else "elementwise"
    try:
        return _rec.record(layout.n_args, layout.tensor_pos, shape, sig, domain)
    except (AttributeError, TypeError):  # a domain object without to_json: values then come from the case
        return _rec.record(layout.n_args, layout.tensor_pos, shape, sig, None)


def _resolve(name: str, obj, node, meta):
    """A case file's user op recorded by ``verify_torch_function`` (listed in its
    ``meta["torch_functions"]``) as a torch Function (``module:QualName``) or a Python function on
    torch tensors: wrapped as ``verify_torch_function`` wraps it.  The layout comes from the node:
    its inputs are the tensors, its ``arg<k>`` params the non-tensor arguments at position k."""
    import types

    listed = meta.get("torch_functions") if isinstance(meta, dict) else None
    if node is None or not isinstance(listed, list) or name not in listed:
        return None
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    if isinstance(obj, type) and issubclass(obj, torch.autograd.Function):
        fn = obj.apply
    elif isinstance(obj, (types.FunctionType, torch.library.CustomOpDef)):
        fn = obj  # (a torch.library.custom_op: called as the user calls it, its registered autograd runs)
    else:
        return None
    rec = _rec.parse(meta, name)
    args = {int(k[len(ARG_PREFIX):]): v for k, v in node.params.items()
            if k.startswith(ARG_PREFIX) and k[len(ARG_PREFIX):].isdigit()}
    if rec is None:  # a case saved before the record existed: positions from the node, shapes from fn
        n = len(node.inputs) + len(args)
        rec = {"n_args": n, "tensor_pos": [i for i in range(n) if i not in args], "shape": "forward",
               "signature": None, "domain": None}
    n, tensors = rec["n_args"], rec["tensor_pos"]
    others = sorted(set(range(n)) - set(tensors))
    if len(node.inputs) != len(tensors) or sorted(args) != others:
        from ..case import CaseError

        raise CaseError(f"node {node.name!r}: torch function {name!r} was recorded with {len(tensors)} tensor(s) at "
                        f"positions {tensors} of {n} arguments (non-tensor ones as params "
                        f"{[ARG_PREFIX + str(k) for k in others]}); the node has {len(node.inputs)} input(s) and "
                        f"params {sorted(node.params)[:8]}")
    for k in others:  # an int/bool tensor argument: rebuilt now, so a bad one is refused before anything runs
        try:
            _decode(args[k])
        except (ValueError, TypeError, RuntimeError) as e:
            from ..case import CaseError

            raise CaseError(f"node {node.name!r}: param {ARG_PREFIX}{k}: {str(e)[:200]}") from None
    layout = CallLayout(n, list(tensors), {k: args[k] for k in others})
    sig, rule = (rec["signature"], None) if rec["shape"] == "signature" else (None, None)
    if rec["shape"] == "forward":
        rule = fn_shapes.out_rules(fn, layout, rec["domain"])[0]
    return _torch_wrap(fn, name, layout, sig, rule, rec["domain"], layout.strategies())


_registry.register_resolver(_resolve)
