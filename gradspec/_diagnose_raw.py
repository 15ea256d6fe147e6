"""What the code under test returns at one node, before any check: the raw gradients of a user op's vjp
or of a torch Function's backward (torch's own validation would sum a gradient of the wrong shape down, or
refuse it, before gradspec sees it), and the causes read from them.

Private to :mod:`gradspec.diagnose`.

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec._diagnose_raw import _split_case
    >>> case = gs.Case.build({"x": np.array([1.0, 2.0])}, [("y", "mul", ["x", "x"], {})], ["y"], [np.ones(2)])
    >>> [l.name for l in _split_case(case, case.nodes[0]).leaves]
    ['x__use0', 'x__use1']
"""

from __future__ import annotations

import numpy as np

from . import tolerances as _tol
from ._diagnose_text import _fmt, _is_engine, _is_torch_function, _where, _whose
from ._private.vjp_patterns import shape_pattern
from .case import Case, Leaf, NodeDef
from .causes import Cause
from .oracles import jacobian as _jac

__all__: list = []


def _split_case(mini, node, every: bool = False) -> Case:
    """``node`` with each input position its own leaf ``<input>__use<k>`` (differentiable as in ``mini``, or
    every float input when ``every``): the gradient of each use of a repeated input, apart."""
    leaves, names = [], []
    for k, i in enumerate(node.inputs):
        src = next(l for l in mini.leaves if l.name == i)
        v = np.array(src.value, copy=True)
        leaves.append(Leaf(f"{i}__use{k}", v, (v.dtype.kind == "f") if every else src.differentiable))
        names.append(f"{i}__use{k}")
    return Case(leaves, [NodeDef(node.name, node.op, names, dict(node.params))], [node.name], list(mini.seeds),
                engine=mini.engine, user_ops=dict(mini.user_ops))


def _users_code(spec, suspect) -> bool:
    """The code under test is the user's own op or torch Function (not an engine, not a table op's twin)."""
    return not (_is_engine(str(suspect)) or not spec.user
                or (str(suspect).startswith("torch") and not _is_torch_function(spec)))


def _node_inputs(mini: Case, node: NodeDef) -> tuple[list, np.ndarray]:
    """The node's input values and the upstream gradient of a one-node case (its seed, in float64)."""
    vals = {l.name: np.asarray(l.value) for l in mini.leaves}
    return [vals[i] for i in node.inputs], np.asarray(mini.seeds[0], dtype=np.float64)


def _returned_shapes(mini, node, spec, suspect, hidden: bool = False) -> Cause | None:
    """The cause when the code under test returns gradients of the wrong shapes, named from the arrays it
    returned before any shape check (a user op's vjp called directly; a torch Function's backward called
    through its graph node, which is what torch's own validation would have refused or silently summed)."""
    if not _users_code(spec, suspect):
        return None
    try:
        ins, g = _node_inputs(mini, node)
        raw = _raw_grads(spec, ins, mini.evaluate()[node.name], g, node.params)
        if raw is None or not any(r is not None and np.shape(r) != np.shape(x) for r, x in zip(raw, ins)):
            return None
        split = _split_case(mini, node, every=True)
        right = _jac.jacobian(split).vjp
    except Exception:  # noqa: BLE001 - no raw gradients to name: the caller's cause stands
        return None
    want = [right.get(f"{i}__use{k}") for k, i in enumerate(node.inputs)]
    named = shape_pattern(list(node.inputs), raw, want, reducible=_is_torch_function(spec),
                          out_shape=np.shape(mini.evaluate()[node.name]), g=g)
    if named is None:
        return None
    pattern, detail = named
    if hidden and str(suspect).startswith("torch"):
        detail += ("; torch's autograd summed the gradient of the wrong shape down to the input's shape without a "
                   "word (it is expandable to it), so it showed as wrong values")
    ev = [f"inputs: {'; '.join(f'{i} {np.shape(x)} = {_fmt(x)}' for i, x in zip(node.inputs, ins))}",
          f"upstream g {g.shape} = {_fmt(g)}"]
    ev += [f"{i}: returned {np.shape(r)} {_fmt(r)} vs J^T·g {np.shape(w)} {_fmt(w)}"
           for i, r, w in zip(node.inputs, raw, want) if r is not None and w is not None]
    fix = "return each gradient in its input's shape (reshape to it, or reduce with keepdim=True)" \
        if pattern == "other" else ""
    return Cause("wrong-vjp", f"{_where(node, spec)}: {_whose(spec, suspect)} returns gradients of the wrong shape — "
                 f"{detail}", node=node.name, op=node.op, evidence="; ".join(ev), pattern=pattern, fix=fix)


def _raw_grads(spec, ins: list, out, g: np.ndarray, params: dict) -> list | None:
    """What the code under test returns for each input position at one node, unchecked (None: not known)."""
    got = _raw(spec, ins, out, g, params)
    return None if got is None else got[0]


def _raw(spec, ins: list, out, g: np.ndarray, params: dict, requires: list | None = None) -> tuple[list, set] | None:
    """(what the code returns per input position, unchecked; the positions of inputs that need a gradient for
    which it returned None), or None where that is not known.  ``requires``: which inputs require grad (all by
    default; a case's constants do not, and a backward reading ``ctx.needs_input_grad`` answers to that)."""
    if _is_torch_function(spec) and spec.torch is not None:
        return _torch_raw(spec, ins, g, params, requires)
    fn = getattr(spec, "user_vjp", None)
    if fn is None:
        return None
    with np.errstate(all="ignore"):
        res = fn(np.array(g, copy=True), *[np.array(x, copy=True) for x in ins], np.array(out, copy=True), **params)
    res = (res,) if isinstance(res, np.ndarray) or res is None or np.isscalar(res) else tuple(res)
    if len(res) != len(ins):
        return None
    return [None if r is None else np.asarray(r) for r in res], {j for j, r in enumerate(res) if r is None}


def _torch_raw(spec, ins: list, g: np.ndarray, params: dict, requires: list | None = None,
               keep: bool = False) -> tuple[list, set] | None:
    """``keep``: float32 inputs stay float32 (else every input is float64)."""
    import torch

    # leaves, or non-leaf copies for code that modifies its input in place (torch refuses a leaf there): the
    # Function's graph edges lead to them either way (_edge_leaf)
    requires = [True] * len(ins) if requires is None else requires
    xs = [torch.tensor(np.array(x, dtype=np.float32 if keep and np.asarray(x).dtype == np.float32 else np.float64),
                       requires_grad=bool(r)) for x, r in zip(ins, requires, strict=True)]
    inplace = getattr(spec, "inplace", None)
    given = xs if inplace is None or not inplace.seen else [x.clone() for x in xs]
    with torch.enable_grad():
        y = _direct(spec)(*given, **params)
    fn = getattr(y, "grad_fn", None)
    if not isinstance(y, torch.Tensor) or fn is None or not hasattr(fn, "_forward_cls"):
        return None  # not a custom Function's own output: no unchecked gradients to read
    res = fn.apply(torch.from_numpy(np.array(g, dtype=np.float64).reshape(tuple(y.shape))).to(y.dtype))
    res = res if isinstance(res, tuple) else (res,)
    # The Function's inputs that need a gradient, in order, are the graph edges that lead somewhere.
    needs = [k for k, b in enumerate(fn.needs_input_grad) if b]
    edges = [e for e, _ in fn.next_functions if e is not None]
    out, nones = [None] * len(xs), set()
    for k, e in zip(needs, edges):
        var = _edge_leaf(e)
        j = next((j for j, x in enumerate(xs) if x is var), None)
        if j is not None and k < len(res) and isinstance(res[k], torch.Tensor):
            out[j] = res[k].detach().numpy().copy()
        elif j is not None and (k >= len(res) or res[k] is None):
            nones.add(j)
    return out, nones


def _returned_dtype(mini: Case, node: NodeDef, spec, suspect: str) -> Cause | None:
    """A torch Function's backward that returns a gradient in a lower precision than its input (float32 or
    float16 for a float64 input): torch casts it back silently, so it only shows as that dtype's rounding.
    Named when that rounding is all the error is (tolerances.CAST_ULPS); else the formula's error is the cause."""
    if not _users_code(spec, suspect) or not _is_torch_function(spec) or spec.torch is None:
        return None
    try:
        ins, g = _node_inputs(mini, node)
        got = _torch_raw(spec, ins, g, node.params, keep=True)
        if got is None:
            return None
        right = _jac.jacobian(_split_case(mini, node, every=True)).vjp
    except Exception:  # noqa: BLE001 - no raw gradients to read: the caller's cause stands
        return None
    for k, (r, x) in enumerate(zip(got[0], ins, strict=True)):
        want = right.get(f"{node.inputs[k]}__use{k}")
        if r is None or want is None or r.dtype.kind != "f" or np.shape(r) != np.shape(want):
            continue
        mine = np.dtype(np.float32 if np.asarray(x).dtype == np.float32 else np.float64)
        if r.dtype.itemsize >= mine.itemsize:
            continue
        err = float(np.max(np.abs(r.astype(np.float64) - want), initial=0.0))
        scale = float(np.max(np.abs(want), initial=0.0))
        if not err <= _tol.CAST_ULPS * float(np.finfo(r.dtype).eps) * scale:
            return None  # more than the cast's rounding: the formula is wrong too, and named as such
        name = node.inputs[k]
        summary = (f"{_where(node, spec)}: {_whose(spec, suspect)} returns {r.dtype} for input {k} ({name}), a "
                   f"{mine} input: torch casts it back to {mine} without a word, so the gradient carries {r.dtype}'s "
                   f"rounding (off by up to {err / max(scale, 1e-300):.2g} relative here); return it in the input's "
                   "dtype (drop the .float() / .half(), or .to(x.dtype))")
        return Cause("wrong-vjp", summary, node=node.name, op=node.op, pattern="other",
                     evidence=f"{name} {np.shape(x)} {mine}: returned {r.dtype} {_fmt(r)} vs J^T·g {_fmt(want)}",
                     fix="return each gradient in its input's dtype")
    return None


def _direct(spec):
    """fn called on the tensors as given (a torch Function wrapped by verify_torch_function copies the leaves it
    gets when it modifies them in place: the probes here pass copies themselves, and read identities)."""
    return getattr(spec, "torch_direct", None) or spec.torch


def _edge_leaf(edge):
    """The leaf tensor a graph edge leads to, also through one ``clone()`` (a copy made for in-place code)."""
    var = getattr(edge, "variable", None)
    if var is None and edge is not None and edge.name().startswith("CloneBackward"):
        nxt = [f for f, _ in edge.next_functions if f is not None]
        var = getattr(nxt[0], "variable", None) if len(nxt) == 1 else None
    return var


def _short(a) -> str:
    """A gradient in a summary line: 4 significant digits (the evidence has them all)."""
    vals = np.asarray(a, dtype=np.float64).ravel()
    return "[" + ", ".join(f"{v:.4g}" for v in vals[:6]) + (", ..." if vals.size > 6 else "") + "]"


def _none_returned(mini: Case, node: NodeDef, spec, suspect: str, u: dict, t: dict) -> Cause | None:
    """The code returns None for an input that needs a gradient and reaches the output (J^T·g is not zero
    there): torch, and gradspec's engine, take a None as a gradient of zeros."""
    if not _users_code(spec, suspect):
        return None
    needs = {l.name for l in mini.leaves if l.differentiable}
    try:
        ins, g = _node_inputs(mini, node)
        right = _jac.jacobian(_split_case(mini, node, every=True)).vjp
    except Exception:  # noqa: BLE001 - no J^T·g to hold a None against: the caller's cause stands
        return None
    try:  # called as the case calls it: a backward reading ctx.needs_input_grad sees the case's constants
        got = _raw(spec, ins, mini.evaluate()[node.name], g, node.params, [i in needs for i in node.inputs])
    except Exception:  # noqa: BLE001 - no raw gradients to read
        got = None
    nones = set(got[1]) if got is not None else set()
    if got is None and len(set(node.inputs)) == len(node.inputs) and getattr(spec, "fn_has_backward", True):
        # not read directly (several outputs, one flat tensor to gradspec): the code under test gave no gradient
        # at all for an input that requires grad (torch: nothing reached it; a backward returned None there); a
        # plain function's graph cut by .detach() is said by the caller (_cut_from_graph)
        nones = {k for k, i in enumerate(node.inputs) if i in needs and i in u and u[i] is None}
    want = [right.get(f"{i}__use{k}") for k, i in enumerate(node.inputs)]
    blamed = [k for k in sorted(nones) if node.inputs[k] in needs and want[k] is not None and np.any(want[k] != 0)]
    if not blamed:
        return None
    k, name = blamed[0], node.inputs[blamed[0]]
    also = ", ".join(f"{j} ({node.inputs[j]})" for j in blamed[1:])
    others = [j for j, i in enumerate(node.inputs) if j not in nones and i in needs and u.get(i) is not None
              and t.get(i) is not None and not np.allclose(np.asarray(u[i], dtype=np.float64),
                                                           np.asarray(t[i], dtype=np.float64), rtol=1e-6, atol=0)]
    tail = "".join(f"; the gradient it returns for input {j} ({node.inputs[j]}) differs from J^T·g as well "
                   f"({_short(u[node.inputs[j]])} vs {_short(t[node.inputs[j]])})" for j in others)
    tail += (_needs_input_grad_hint(node, needs, k) + _unused_output_hint(spec, ins, g, node.params)) \
        if _is_torch_function(spec) else ""
    need = f"ctx.needs_input_grad[{_arg_position(node, k)}]" if _is_torch_function(spec) else "the input is a constant"
    summary = (f"{_where(node, spec)}: {_whose(spec, suspect)} returns None for input {k} ({name})"
               f"{' (and for input ' + also + ')' if also else ''}, which requires grad and reaches the output: its "
               f"gradient is treated as zero (torch adds nothing for a None: .grad stays None where nothing else "
               f"reaches the input), but J^T·g there is {_short(want[k])}; return its gradient (None only where "
               f"{need} is False){tail}")
    ev = [f"inputs: {'; '.join(f'{i} {np.shape(x)} = {_fmt(x)}' for i, x in zip(node.inputs, ins))}",
          f"upstream g {g.shape} = {_fmt(g)}"] + [f"{node.inputs[j]}: returned None vs J^T·g {_fmt(want[j])}"
                                                 for j in blamed]
    return Cause("wrong-vjp", summary, node=node.name, op=node.op, evidence="; ".join(ev), pattern="other",
                 fix=f"return a gradient for every input that requires grad (None only where {need} is False)")


def _arg_position(node: NodeDef, k: int) -> int:
    """The position among fn's arguments of the node's input ``k`` (non-tensor arguments travel as params
    ``arg<position>``): what ``ctx.needs_input_grad`` is indexed by."""
    held = {int(p[3:]) for p in node.params if p.startswith("arg") and p[3:].isdigit()}
    tensors = [i for i in range(len(node.inputs) + len(held)) if i not in held]
    return tensors[k] if k < len(tensors) else k


def _needs_input_grad_hint(node: NodeDef, needs: set, k: int) -> str:
    """Where the case's other inputs are constants (requires_grad False): a backward that skips input ``k`` while
    some input does not need a gradient reads ``ctx.needs_input_grad`` at the wrong index, typically."""
    off = [j for j, i in enumerate(node.inputs) if i not in needs]
    if not off:
        return ""
    said = ", ".join(f"[{_arg_position(node, j)}]" for j in off)
    return (f"; here ctx.needs_input_grad{said} {'is' if len(off) == 1 else 'are'} False (input"
            f"{'' if len(off) == 1 else 's'} {', '.join(node.inputs[j] for j in off)} held constant) and "
            f"ctx.needs_input_grad[{_arg_position(node, k)}] True: does the backward test the wrong index?")


def _unused_output_hint(spec, ins: list, g: np.ndarray, params: dict) -> str:
    """Several outputs, some unused here (their block of the upstream gradient zero): torch passes None for
    their gradient to a backward under ``ctx.set_materialize_grads(False)``, a branch a backward often gets wrong."""
    try:
        blocks = spec.output_blocks(*ins, **params)
    except Exception:  # noqa: BLE001 - not known: nothing said
        return ""
    flat = np.ravel(g)
    unused = [k for k, (a, b, _) in enumerate(blocks or ()) if b > a and not np.any(flat[a:b] != 0)]
    if not blocks or not unused:
        return ""
    out = ", ".join(map(str, unused))
    return (f"; here output{'s' if len(unused) > 1 else ''} {out} of {len(blocks)} {'are' if len(unused) > 1 else 'is'} "
            f"unused (a zero upstream gradient: under ctx.set_materialize_grads(False) torch passes None for it): does "
            "the backward give up when one output's gradient is None?")


# =============================================================================================
# a backward that modifies what it saved: one call at the node's inputs, everything ctx holds compared before
# and after it, then a second call
# =============================================================================================


def _mutation(spec, ins: list, g: np.ndarray, params: dict) -> tuple[list, str, str] | None:
    """(what a torch Function's backward changed among what it saved, what the second call did, the two
    gradients for the evidence), from two backward calls on one graph at inputs ``ins``; None when nothing
    it saved changed (or it is not known)."""
    import torch

    xs = [torch.tensor(np.array(x, dtype=np.float64), requires_grad=True) for x in ins]
    with torch.enable_grad():
        y = spec.torch(*xs, **params)
    fn = getattr(y, "grad_fn", None)
    if not isinstance(y, torch.Tensor) or fn is None or not hasattr(fn, "_forward_cls") \
            or str(getattr(fn._forward_cls, "__module__", "")).startswith("torch."):
        return None  # (torch's own Functions -- a reentrant checkpoint, which refuses autograd.grad -- are not watched)
    watched = [(f"ctx.saved_tensors[{i}]", s) for i, s in enumerate(fn.saved_tensors)]
    watched += [(f"ctx.{k}", v) for k, v in vars(fn).items() if isinstance(v, torch.Tensor)]
    watched = [(label + (" (also the Function's output 0)" if _same_storage(s, y) else ""), s, s._version,
                s.detach().clone()) for label, s in watched]
    plain = {k: v for k, v in vars(fn).items() if isinstance(v, (int, float, bool, str, tuple))}
    gt = torch.from_numpy(np.array(g, dtype=np.float64).reshape(tuple(y.shape)))
    first = torch.autograd.grad(y, xs, gt, retain_graph=True, allow_unused=True)
    changed = [label for label, s, ver, before in watched
               if s._version != ver or not torch.equal(torch.isnan(s.detach()), torch.isnan(before))
               or not torch.equal(torch.nan_to_num(s.detach()), torch.nan_to_num(before))]
    changed += [f"ctx.{k} ({v!r} -> {getattr(fn, k, None)!r})" for k, v in plain.items() if getattr(fn, k, None) != v]
    if not changed:
        return None
    # detached: a backward that returns its saved output itself (y.mul_(g)) hands back a tensor that requires grad
    one = "; ".join(_fmt(a.detach()) for a in first if a is not None)
    try:
        second = torch.autograd.grad(y, xs, gt, retain_graph=True, allow_unused=True)
    except RuntimeError as e:
        said = str(e).split(":")[0].split(". Hint")[0]
        return changed, (f"or, where torch checks the saved tensor's version as here, raises RuntimeError "
                         f"'{said}'"), f"first call {one}; second call raised"
    two = "; ".join(_fmt(a.detach()) for a in second if a is not None)
    return changed, f"here {two} where the first gave {one}", f"first call {one}; second call {two}"


def _same_storage(a, b) -> bool:
    return a.shape == b.shape and a.numel() > 0 and a.data_ptr() == b.data_ptr()


def _mutation_cause(case: Case, values: dict | None = None, wrong: str = "") -> Cause | None:
    """The first torch Function node of ``case`` whose backward modifies what it saved (at the node's real
    inputs, upstream gradient ones), named; None when none does.  ``wrong``: how its first call is wrong
    already (it computes from what it modified), said with it."""
    for node in case.nodes:
        spec = case.spec(node.op)
        if not _is_torch_function(spec) or spec.torch is None:
            continue
        try:
            values = case.evaluate() if values is None else values
            out = np.asarray(values[node.name])
            got = _mutation(spec, [np.asarray(values[i]) for i in node.inputs], np.ones(out.shape), node.params)
        except Exception:  # noqa: BLE001 - the probe itself failed: no cause from it
            continue
        if got is None:
            continue
        changed, second, ev = got
        tensors = [c for c in changed if " -> " not in c]
        what = (f"modifies a saved tensor in place ({', '.join(tensors)})" if tensors else
                f"changes what it saved on ctx ({', '.join(changed)})")
        fix = ("; anything else that reads that tensor later sees the new values too; compute out of place (e.g. "
               "y = y * y, not y.mul_(y)), or clone what you modify" if tensors else
               "; leave ctx unchanged in backward (compute into a local name)")
        if wrong:
            what += f", and its gradient is wrong from the first call on ({wrong})"
        return Cause("wrong-vjp", f"{_where(node, spec)}: {_whose(spec, 'torch-cpu')} {what}: a second call gives a "
                     f"different gradient ({second}){fix}",
                     node=node.name, op=node.op, evidence=f"at {', '.join(f'{i} = {_fmt(values[i])}' for i in node.inputs)}"
                     f", upstream g = ones: {ev}", pattern="other",
                     fix="leave what forward saved unchanged in backward: compute out of place (y * y, not y.mul_(y))")
    return None


def _forward_mutation_cause(case: Case, values: dict) -> Cause | None:
    """The first torch Function node whose forward modifies one of its inputs in place (``x.mul_(2)``), named;
    None when none does.  Without ``ctx.mark_dirty`` autograd does not know: a graph that reads that input
    again, or a view of it, is refused (torch: "... is a view and its base ... has been modified inplace") or
    gets gradients computed from the new values.  Found by calling forward on copies of the node's inputs."""
    import torch

    for node in case.nodes:
        spec = case.spec(node.op)
        if not _is_torch_function(spec) or spec.torch is None:
            continue
        try:
            before = [np.array(values[i], copy=True) for i in node.inputs]
            xs = [torch.tensor(np.array(v, dtype=np.float64)) for v in before]
            with torch.no_grad():
                spec.torch(*xs, **node.params)
            changed = [i for i, x, b in zip(node.inputs, xs, before, strict=True)
                       if not np.array_equal(x.numpy(), np.asarray(b, dtype=np.float64), equal_nan=True)]
        except Exception:  # noqa: BLE001 - the probe itself failed: no cause from it
            continue
        if not changed or _marks_dirty(spec, before, node.params):
            continue
        fn = spec.name.removeprefix("torch_")
        names = ", ".join(changed)
        return Cause("forward-mutates-input", f"{_where(node, spec)}: {fn}'s forward modifies its input {names} in "
                     "place without ctx.mark_dirty: autograd does not know, so a graph that uses that tensor again (or "
                     "a view of it) is refused or differentiated at the new values; call ctx.mark_dirty(...) on every "
                     "input forward modifies, or compute out of place (x * 2, not x.mul_(2))", node=node.name,
                     op=node.op, evidence=f"forward at {', '.join(f'{i} = {_fmt(values[i])}' for i in node.inputs)} "
                     f"changed {names} in place", pattern="other",
                     fix="ctx.mark_dirty(x) for each input forward modifies in place, or compute out of place")
    return None


def _marks_dirty(spec, values: list, params: dict) -> bool:
    """Whether fn's forward calls ctx.mark_dirty: then autograd knows of the in-place change and rebases the
    modified input's history onto fn's node (its grad_fn becomes the output's).  Inputs are non-leaf copies
    (torch refuses a leaf modified in place)."""
    import torch

    try:
        with torch.enable_grad():
            xs = [torch.tensor(np.array(v, dtype=np.float64), requires_grad=True).clone() for v in values]
            out = _direct(spec)(*xs, **params)
        node = getattr(out, "grad_fn", None)
        return node is not None and any(x.grad_fn is node for x in xs)
    except Exception:  # noqa: BLE001 - cannot tell: the in-place change alone decides
        return False


def partial_broadcast_words(returned: tuple, shape: tuple, out: tuple, name: str) -> str | None:
    """Words for a gradient returned in ``returned``, a partial reduction of the broadcast of an input of
    ``shape`` to the output's ``out``: every axis, aligned from the right, is the output's or the input's, but
    it is neither (tryout8 F7: a helper that looks the input's size-1 axes up from the left of the un-reduced
    gradient returns (2,) for a (1,) input broadcast to (3, 2)), or it summed axes the input keeps (the same
    helper returns (1, 1) for a (2, 1) input broadcast to (2, 2, 1)); None otherwise."""
    returned, shape, out = tuple(returned), tuple(shape), tuple(out)
    if returned in (shape, out) or not len(shape) <= len(out) or len(returned) > len(out):
        return None
    kept, lost = [], []
    for k in range(1, len(returned) + 1):
        r, o = returned[-k], out[-k]
        s = shape[-k] if k <= len(shape) else None
        if r == s:
            continue
        if r == 1 and s is not None and s == o:  # an axis the input keeps (not broadcast) summed away
            lost.append(-k)
            continue
        if r != o:
            return None
        kept.append(-k)
    if lost and not kept:  # (the same helper on another case: review F7's run, v4 (2, 1) to (2, 2, 1) got (1, 1))
        where = ", ".join(f"axis {a} (size {out[a]}, which {name} keeps)" for a in sorted(lost))
        return (f"returns input {name}'s gradient in shape {returned}: the output's broadcast shape {out} summed "
                f"over the wrong axes, {where}; sum over the broadcast axes only, aligned from the right (the "
                f"leading axes and the size-1 ones), down to {shape} (e.g. sum_to(g, {name}.shape))")
    if not kept or lost:
        return None
    where = ", ".join(f"axis {a} (size {out[a]}{', where ' + name + ' has size 1' if -a <= len(shape) else ''})"
                      for a in sorted(kept))
    return (f"returns input {name}'s gradient in shape {returned}: the output's broadcast shape {out} summed over "
            f"only some of the broadcast axes, {where} kept; sum over every broadcast axis, aligned from the right "
            f"(the leading axes and the size-1 ones), down to {shape} (e.g. sum_to(g, {name}.shape))")


def unselected_branch_words(mini: Case, node: NodeDef, spec) -> str | None:
    """Why a plain torch function's gradient is NaN where J^T·g is finite, when its forward selects with
    ``torch.where`` / ``masked_fill`` from a branch that is NaN or inf where it is not selected (the "where trap",
    tryout9 F3): the words naming the select, its place and the branch; None where no such select runs.  Found by
    running fn once at the node's inputs under a pass-through mode (``_private.torch_where``), never from names."""
    if not _is_torch_function(spec) or getattr(spec, "fn_has_backward", True) is not False:
        return None  # a custom Function's forward runs under no_grad: its own backward is what is checked
    import torch

    from ._private.torch_where import recording

    ins, _ = _node_inputs(mini, node)
    diff = {l.name: l.differentiable for l in mini.leaves}
    try:
        with torch.enable_grad():
            made: dict = {}
            for i, v in zip(node.inputs, ins, strict=True):
                if i not in made:
                    a = np.array(v, copy=True)
                    made[i] = torch.from_numpy(a).requires_grad_(bool(diff.get(i)) and a.dtype.kind == "f")
            with recording() as traps:
                _direct(spec)(*[made[i] for i in node.inputs], **dict(node.params))
    except Exception:  # noqa: BLE001 - the probe failed: no words from it, the finding stands
        return None
    if not traps:
        return None
    said = "; ".join(t.words() for t in traps[:2])
    return (f"{said}: the select sends that branch a zero gradient there, and the branch's backward multiplies it by "
            "the branch's non-finite values (0 · nan = nan, 0 · inf = nan), so the gradient is NaN although the "
            "forward's value is finite")


def masked_in_backward_words(mini: Case, node: NodeDef, spec) -> str:
    """Words for a torch Function whose backward masks non-finite values with ``nan_to_num`` at the node's inputs
    (a where in a backward is not named: one whose unselected branch is NaN gives the same first-order values as
    the double-where, and is common): a finite gradient there is the mask's replacement,
    not a derivative, and beside a wrong value it is the likely cause (x * y / y masked to 0 where y = 0).  ""
    where none is met (``_private.torch_where.backward_traps``, from running the backward, never from names)."""
    if not _is_torch_function(spec) or getattr(spec, "fn_has_backward", True) is False:
        return ""
    import torch

    from ._private.torch_where import backward_traps

    ins, g = _node_inputs(mini, node)
    if not all(np.asarray(v).dtype.kind == "f" for v in ins):
        return ""
    traps = backward_traps(_direct(spec), [torch.from_numpy(np.array(v, dtype=np.float64)) for v in ins],
                           dict(node.params), lambda shape, _phase: np.broadcast_to(g, shape).copy())
    # (nan_to_num only: a where in a backward whose unselected branch is NaN is harmless to first order, common)
    traps = [t for t in traps if t.what.startswith("nan_to_num")]
    if not traps:
        return ""
    return ("; its backward masks non-finite values: " + "; ".join(t.words() for t in traps[:2]) + " — the gradient "
            "there is the mask's replacement, not a derivative: compute it without the 0/0 or inf instead of masking")


def graph_where_trap(case: Case, values: dict) -> Cause | None:
    """The cause of a non-finite gradient that no node explains on its own, where a ``where`` node of the graph does
    not select a branch computed by other nodes that is NaN or inf there: the zero gradient ``where`` sends that
    branch meets its non-finite values in the backward of the nodes computing it (0 · nan = nan), as in torch.
    None where no such node is in the graph (read from the forward's values, never from names of code)."""
    from ._private.torch_where import FIX

    leaves = {l.name for l in case.leaves}
    for node in case.nodes:
        spec = case.spec(node.op)
        if node.op != "where" or spec.user:
            continue
        out = np.shape(values[node.name])
        try:
            cond = np.broadcast_to(np.asarray(values[node.inputs[0]], dtype=bool), out)
        except ValueError:
            continue
        for k, taken in ((1, cond), (2, ~cond)):
            name = node.inputs[k]
            b = np.asarray(values[name])
            if name in leaves or b.dtype.kind != "f":
                continue  # (a leaf's own gradient there is a finite 0: nothing multiplies it)
            bad = ~np.isfinite(np.broadcast_to(b, out)) & ~taken
            if not bad.any():
                continue
            kinds = " / ".join(w for w, m in (("nan", np.isnan), ("inf", np.isinf)) if m(np.broadcast_to(b, out)[bad]).any())
            which = "second" if k == 1 else "third"
            return Cause("not-localised", f"{_where(node, spec)} does not select its {which} input {name} at "
                         f"{int(bad.sum())} element{'s' if bad.sum() > 1 else ''}, where {name} is {kinds}: every node's "
                         f"rule agrees with its twin on its own, but the zero gradient where sends {name} there meets "
                         f"{name}'s non-finite values in the backward of the nodes that compute it (0 · nan = nan, as "
                         "torch does), so the gradient is NaN where J^T·g of the whole graph is finite",
                         node=node.name, op=node.op, pattern="unselected-branch", fix=FIX,
                         evidence=f"{name} = {_fmt(values[name])}; condition = {_fmt(values[node.inputs[0]])}")
    return None


# =============================================================================================
# a forward that stashes a tensor on ctx and then modifies it in place (tryout10 F6): every tensor set on ctx is
# recorded with its version as it is set, forward runs, and a version that moved is the stash modified after it
# =============================================================================================

_CTX_OWN = frozenset({"to_save", "dirty_tensors", "non_differentiable", "saved_for_forward", "materialize_grads"})


def _stash_mutation(spec, ins: list, g: np.ndarray, params: dict, right: list | None = None) -> tuple[list, str] | None:
    """(the ctx attributes a torch Function's forward modified in place after setting them, the gradient its
    backward gives with them as they were set), or None when none was, or putting them back changes nothing, or
    (``right``: J^T·g per input, None where unknown) does not make the gradient right (review15 #3: a stash filled
    in place on purpose, read by a backward wrong for another reason, is not the cause)."""
    import torch

    def call():
        xs = [torch.tensor(np.array(x, dtype=np.float64), requires_grad=True) for x in ins]
        with torch.enable_grad():
            return xs, spec.torch(*xs, **params)

    _, y = call()
    node = getattr(y, "grad_fn", None)
    if not isinstance(y, torch.Tensor) or node is None or not hasattr(node, "_forward_cls") \
            or str(getattr(node._forward_cls, "__module__", "")).startswith("torch."):
        return None
    cls, stashed = type(node), {}

    def watch(self, k, v):  # ctx.k = v in forward: the tensor, its version now, its values now
        if isinstance(v, torch.Tensor) and not k.startswith("_") and k not in _CTX_OWN:
            stashed[k] = (v, v._version, v.detach().clone())
        super(cls, self).__setattr__(k, v)

    had = cls.__dict__.get("__setattr__")
    cls.__setattr__ = watch  # (the Function's own generated ctx class, for one forward call; put back below)
    try:
        xs, y = call()
    finally:
        if had is None:
            del cls.__setattr__
        else:
            cls.__setattr__ = had
    moved = {k: s for k, s in stashed.items() if s[0]._version != s[1]}
    if not moved:
        return None
    gt = torch.from_numpy(np.array(g, dtype=np.float64).reshape(tuple(y.shape)))
    now = torch.autograd.grad(y, xs, gt, retain_graph=True, allow_unused=True)
    with torch.no_grad():
        for v, _, before in moved.values():
            v.copy_(before)
    then = torch.autograd.grad(y, xs, gt, allow_unused=True)
    if all((a is None) == (b is None) and (a is None or torch.equal(a, b)) for a, b in zip(now, then, strict=True)):
        return None  # the backward does not read them (or not so that it matters): not the cause
    if right is not None and not _restored_right(then, right):
        return None  # putting them back does not fix the gradient: the backward is wrong for another reason
    return list(moved), "; ".join(_fmt(a.detach()) for a in then if a is not None)


def _restored_right(then: tuple, right: list) -> bool:
    """Every gradient ``then`` (torch, per input) equals J^T·g where it is known.  rtol 1e-5, atol 1e-7 x the
    largest |J^T·g|: J^T·g from the twin is exact in float64 but for finite differences' truncation and rounding
    (relative ~1e-7 at the step gradspec takes); a backward that a stash put back makes right is right to float64
    rounding, and what is wrong for another reason (a factor, a sign) is off by O(1)."""
    known = [(a, np.asarray(r, dtype=np.float64)) for a, r in zip(then, right, strict=True) if r is not None]
    if not known or any(a is None or tuple(a.shape) != r.shape for a, r in known):
        return False
    top = max(float(np.max(np.abs(r), initial=0.0)) for _, r in known)
    return all(np.allclose(a.detach().numpy(), r, rtol=1e-5, atol=1e-7 * top) for a, r in known)


def _stash_mutation_cause(mini: Case, c: Cause, right: dict | None = None) -> Cause | None:
    """``c`` (a torch Function node's wrong gradient) named as a forward that modified what it stashed on ctx,
    when putting the stash back makes the gradient J^T·g (``right``: the twin's gradients at mini's seed)."""
    node = mini.nodes[0] if len(mini.nodes) == 1 else None
    if node is None:
        return None
    spec = mini.spec(node.op)
    try:
        values = mini.evaluate()
        out = np.shape(values[node.name])
        seed = mini.seeds[0] if mini.seeds and mini.seeds[0] is not None else None
        g = np.ones(out) if seed is None or right is None else np.broadcast_to(np.asarray(seed, dtype=np.float64), out)
        got = _stash_mutation(spec, [np.asarray(values[i]) for i in node.inputs], g, node.params,
                              None if right is None else [right.get(i) for i in node.inputs])
    except Exception:  # noqa: BLE001 - the probe itself failed: no cause from it
        return None
    if got is None:
        return None
    names, then = got
    at = "ones" if seed is None or right is None else _fmt(g)
    attrs = ", ".join(f"ctx.{k}" for k in names)
    fn = spec.name.removeprefix("torch_")
    return Cause(c.id, f"{_where(node, spec)}: {_whose(spec, 'torch-cpu')} is wrong because {fn}'s forward sets "
                 f"{attrs}, then modifies that tensor in place before it returns, so the backward reads the modified "
                 "values (with them as they were set it gives "
                 f"{then} at upstream g = {at}); clone what you stash (ctx.t = t.clone()) or stash it after the last "
                 "in-place change, or compute out of place; ctx.save_for_backward would have made torch refuse the "
                 "change", node=c.node, op=c.op, evidence=f"{c.evidence}; forward modified {attrs} after setting it",
                 pattern=c.named_pattern, factor=c.factor,
                 fix="clone a tensor before stashing it on ctx if forward modifies it afterwards, or save it with "
                     "ctx.save_for_backward")
