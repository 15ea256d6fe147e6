"""The diagnosis that matches an engine to known wrong backward() semantics.

Each *flag* of :mod:`gradspec.rules.simulation` is one way engines get CONTRACT §5 wrong, and
:func:`simulate` (re-exported here) replays a scenario under a set of flags with every node's local
Jacobian taken from the reference engine, so the numbers a wrong engine would produce on the very
same calls are known exactly.  :func:`diagnose` compares the engine's trace with every single
flag, then every pair (micrograd is two at once), and names the CONTRACT §8 cause that reproduces the engine's numbers, with the numbers.

Example (an engine whose second backward replaces ``.grad``)::

    >>> import numpy as np
    >>> from gradspec.engines import ReferenceEngine
    >>> from gradspec.rules.diagnosis import diagnose, simulate
    >>> from gradspec.rules.scenario import Scenario, Step, run
    >>> sc = Scenario({"x": np.array([1.0, 2.0])}, [("y", "mul", ("x", "x"), {})],
    ...               [Step("backward", "y", np.ones(2)), Step("backward", "y", np.ones(2))])
    >>> ref = run(sc, ReferenceEngine())
    >>> wrong = simulate(sc, {"overwrite"}, ref)          # what such an engine reads back
    >>> wrong.obs[2].grads["x"], ref.obs[2].grads["x"]
    (array([2., 4.]), array([4., 8.]))
    >>> diagnose(sc, wrong, ref).id
    'accumulation-overwrite'
"""

from __future__ import annotations

import itertools

import numpy as np

from .._private.skips import word_cut
from ..causes import Cause
from .scenario import Scenario, Step, Trace, close, first_difference, fmt, raise_reason
from .simulation import FLAGS, VALUE_FLAGS, TooBig, grad_scales, jacobians, matches, simulate

__all__ = ["FLAGS", "simulate", "diagnose", "jacobians", "TooBig"]

# ---------------------------------------------------------------------------------------------
# diagnosis
# ---------------------------------------------------------------------------------------------

_EXCLUSIVE = [{"seed-ignored", "seed-mean"}, {"overwrite", "overwrite-clears", "overwrite-edge-last", "overwrite-edge-first",
               "overwrite-edge-dfs", "uses-overwrite-last", "uses-overwrite-dfs", "uses-overwrite-first"},
              {"overwrite-inner-last", "overwrite-inner-dfs"},
              {"not-updated", "not-updated-0d", "not-updated-numel1"}, {"repeated-drop-first", "repeated-drop-second"},
              {"root-assigned", "root-assigned-implicit"}]
_PAIRS = [p for p in itertools.combinations(VALUE_FLAGS, 2) if not any(set(p) <= g for g in _EXCLUSIVE)]
UNARY = ("exp", "tanh", "sin", "sigmoid", "square", "cos", "neg")
BINARY = ("mul", "add", "sub")


class Context:
    """What a diagnosis may run besides the failing scenario: the engine itself (discriminating
    probes, cached per engine) and the reference engine."""

    def __init__(self, engine, ops, timeout: float | None = None) -> None:
        from ..engines import ReferenceEngine

        self.engine = engine
        self.timeout = timeout
        self.ref = ReferenceEngine()
        self.ops = set(ops)
        self._probes: list | None = None
        self.recent: list = []  # flag sets that explained earlier failures: tried first (one search per bug)
        self.known_ids: set = set()  # causes already reported (a pair names the other one first)

    def _supported(self) -> set:
        """The probe ops the engine supports besides the failing case's own (the probes need a unary op)."""
        out = set()
        for op in UNARY + BINARY:
            try:
                if self.engine.supports(op):
                    out.add(op)
            except Exception:  # noqa: BLE001 - a supports() that raises: treated as unsupported
                continue
        return out

    def trace(self, sc):
        from .scenario import ScenarioTimeout, run, timed_out

        got = run(sc, self.engine, self.timeout)
        if timed_out(got):
            raise ScenarioTimeout("the engine hung on a diagnosis probe")
        return got, run(sc, self.ref)

    def backward_always_raises(self) -> tuple | None:
        """(the graphs, their calls) when backward() raises on one-node graphs of every probe op (a unary and a
        binary one where supported, shape (2,), an explicit seed) where the reference runs, else None; cached."""
        if "_always" not in self.__dict__:
            self._always = None
            ops = self.ops | self._supported()
            picks = [o for o in (next((u for u in UNARY if u in ops), None), next((b for b in BINARY if b in ops), None))
                     if o is not None]
            rng = np.random.default_rng(11)
            scs = [Scenario({f"x{i}": rng.uniform(0.5, 1.5, 2) for i in range(1 if op in UNARY else 2)},
                            [("y", op, ("x0",) if op in UNARY else ("x0", "x1"), {})],
                            [Step("backward", "y", rng.uniform(0.5, 1.5, 2), False)], "probe") for op in picks]
            from .scenario import ScenarioTimeout

            try:
                runs = [self.trace(sc) for sc in scs]
            except ScenarioTimeout:
                raise
            except Exception:  # noqa: BLE001 - a probe that cannot run tells nothing
                runs = []
            if len(runs) == 2 and all(g.build is None and r.build is None and g.obs[1].raised is not None
                                      and r.obs[1].raised is None for g, r in runs):
                self._always = (" and ".join(f"{op}(x, ...)" for op in picks), scs[0].code())
        return self._always

    def probes(self) -> list:
        """Small fixed scenarios that tell the wrong semantics apart: (scenario, engine, reference)."""
        if self._probes is None:
            self._probes = []
            for sc in _probe_scenarios(self.ops | self._supported()):
                from .scenario import ScenarioTimeout

                try:
                    got, want = self.trace(sc)
                    same_raises = [o.raised is None for o in got.obs] == [o.raised is None for o in want.obs]
                    if got.build is None and want.build is None and same_raises:  # values only
                        self._probes.append((sc, got, want))
                except ScenarioTimeout:
                    raise
                except Exception:  # noqa: BLE001 - a probe that cannot run tells nothing
                    continue
        return self._probes


def _probe_scenarios(ops) -> list:
    """The probes, built from ``ops``: a failing case of only ``add`` and ``sum`` still gets probes when the
    engine supports a unary op (the context adds every supported one), else none (nothing tells flags apart)."""
    u = next((o for o in UNARY if o in ops), None)
    b = next((o for o in BINARY if o in ops), None)
    if u is None:
        return []
    rng = np.random.default_rng(7)

    def v(shape):
        return rng.uniform(0.4, 1.2, shape) * rng.choice([-1.0, 1.0], shape)

    B = lambda r, shape, retain=True: Step("backward", r, v(shape), retain)  # noqa: E731
    out = [
        Scenario({"a": v(()), "b": v((1,)), "c": v((2, 3))}, [("ya", u, ("a",), {}), ("yb", u, ("b",), {}),
                                                           ("yc", u, ("c",), {})],
                 [B("ya", ()), B("yb", (1,)), B("yc", (2, 3)), B("yc", (2, 3))], "probe"),
        Scenario({"x": v((2,))}, [("h", u, ("x",), {}), ("y", u, ("h",), {})],
                 [B("y", (2,)), B("y", (2,)), Step("zero_grad", "x"), B("y", (2,))], "probe"),
        Scenario({"x": v((3,))}, [("y", u, ("x",), {})], [B("y", (3,)), B("x", (3,)), B("y", (3,))], "probe"),
    ]
    if b is not None:
        out.append(Scenario({"x": v((2,))}, [("h1", u, ("x",), {}), ("h2", b, ("x", "h1"), {}), ("y", b, ("h2", "h2"), {})],
                            [B("y", (2,))], "probe"))
    imp = lambda r: Step("backward", r, None, True)  # noqa: E731
    out.append(Scenario({"x": v((1,))}, [("h", u, ("x",), {}), ("y", u, ("h",), {})],
                        [imp("y"), imp("y"), imp("x"), B("y", (1,))], "probe"))
    return out


def _who(flags) -> str:
    return " + ".join(FLAGS[f][0] for f in flags)


def _obs_text(sc, trace, k, leaf) -> str:
    o = trace.obs[k] if k < len(trace.obs) else None
    if o is None:
        return "(not run)"
    if o.raised is not None:
        return f"raised {type(o.raised).__name__}: {word_cut(str(o.raised).splitlines()[0], 120) if str(o.raised) else ''}"
    return fmt(o.grads.get(leaf))


def _where(sc, k) -> str:
    return "before any call" if k == 0 else f"after call {k} ({sc.steps[k - 1].text()})"


def diagnose(sc: Scenario, got: Trace, ref: Trace, ctx: Context | None = None, strict: bool = True) -> Cause | None:
    """The cause of ``got`` (the engine's trace) differing from ``ref`` (the reference's), or None
    when they agree.  Never None for a disagreement: when no known semantics reproduces the
    engine's numbers the cause says so and carries the numbers."""
    if got.build is not None:
        if ref.build is not None:
            return None
        # the call that raised names the bug: two ops crashing are two findings (tryout8 F5), keyed by the op
        name, op = got.build_at or (None, None)
        call = f": {'eng.leaf' if op == 'leaf' else f'eng.apply({op!r}, ...)'} for {name}" if name else ""
        return Cause("error-type", f"the engine raised {type(got.build).__name__} while building the graph{call}, where "
                     "torch builds it", evidence=f"{type(got.build).__name__}: {got.build}\n{sc.code()}",
                     node=name, op=op)
    mutated = _forward_mutation(sc, ctx)
    if mutated is not None:  # every later number is off for that reason: no backward() rule is to blame
        return mutated
    scales = grad_scales(sc, ref, [frozenset()])
    diff = first_difference(sc, got, ref, scales, none_is_zeros=True, types=strict)
    if diff is not None and diff[1] == "error-type":
        k = diff[0]
        e, t = got.obs[k].raised, ref.obs[k].raised
        return Cause("error-type", f"{sc.steps[k - 1].text()} raised {type(e).__name__} where torch raises "
                     f"{type(t).__name__}: raise RuntimeError (or torch's type) for backward() rule violations",
                     evidence=f"engine: {type(e).__name__}: {e}; torch: {type(t).__name__}: {t}\n{sc.code()}")
    if diff is None:
        diff = first_difference(sc, got, ref, scales, none_is_zeros=False)
        if diff is None or not strict:
            return None
        k, _what, leaf = diff
        for f in VALUE_FLAGS:  # e.g. a leaf never updated, where torch has zeros
            if f not in ("seed-ignored", "seed-mean") and matches(sc, got, ref, {f}, strict=True):
                sim = simulate(sc, {f}, ref)
                return Cause(FLAGS[f][0], FLAGS[f][1], evidence=f"{_where(sc, k)}: engine {leaf}.grad = "
                             f"{_obs_text(sc, got, k, leaf)}; torch: {_obs_text(sc, ref, k, leaf)}; with {_who([f])}: "
                             f"{_obs_text(sc, sim, k, leaf)} (matches every call exactly)\n{sc.code()}")
        e, t = _obs_text(sc, got, k, leaf), _obs_text(sc, ref, k, leaf)
        return Cause("none-vs-zeros", f"grad({leaf}) is {'zeros' if t == 'None' else 'None'} {_where(sc, k)} where "
                     f"torch has {'None (no gradient yet, or reset by zero_grad)' if t == 'None' else 'zeros'}",
                     evidence=f"engine: {e}; torch: {t}\n{sc.code()}")
    k, what, leaf = diff
    constant = _constant_grad(sc, got, ref, k) if what == "grad" else None
    if constant is not None:
        return constant
    if what == "raised":
        return _raise_cause(sc, got, ref, k, ctx)
    if strict:
        typed = first_difference(sc, got, ref, scales, none_is_zeros=True, types=True)
        if typed is not None and typed[1] == "error-type" and typed[0] <= k:
            e, t = got.obs[typed[0]].raised, ref.obs[typed[0]].raised
            return Cause("error-type", f"{sc.steps[typed[0] - 1].text()} raised {type(e).__name__} where torch raises "
                         f"{type(t).__name__}: raise RuntimeError (or torch's type) for backward() rule violations",
                         evidence=f"engine: {type(e).__name__}: {e}; torch: {type(t).__name__}: {t}\n{sc.code()}")
    return _value_cause(sc, got, ref, k, leaf, ctx)


def _forward_mutation(sc, ctx) -> Cause | None:
    """The first tensor whose value (``to_numpy``) changes while the forward goes on: compared with what the
    engine itself read back right after making it (a float32 engine's leaves are rounded from the start: not a
    change, review F7), different after a later ``apply`` -- that op wrote into a buffer another tensor owns (an
    add reusing its input's array), corrupting what the backward saved.  One cause at the op that ran (tryout8
    F2: it read as seven 'unexplained' rule findings); None when every value stays put (or the forward cannot
    be re-run).  The reference values only decide which nodes are watched: a node wrong when made is a forward
    bug, not a mutation.  A float32 engine's nodes are held to float32's tolerance, from its own (rounded) leaves:
    at float64's, no node of it was ever watched (session 14)."""
    if ctx is None:
        return None
    from .scenario import Scenario, forward_values

    eng, env, own = ctx.engine, {}, {}
    low: set = set()  # the tensors the engine keeps in float32
    try:
        want = forward_values(sc)

        def now(n) -> np.ndarray:
            raw = np.asarray(eng.to_numpy(env[n]))
            if raw.dtype == np.float32:
                low.add(n)
            return np.array(raw, dtype=np.float64, copy=True)

        def changed(n) -> bool:
            a = now(n)
            return a.shape != own[n].shape or not np.array_equal(a, own[n], equal_nan=True)

        for n, v in sc.leaves.items():
            env[n] = eng.leaf(np.array(v, copy=True), requires_grad=sc.rg(n))
            own[n] = now(n)
        if low:  # what the graph's nodes should be, from the leaves the engine holds
            want = forward_values(Scenario({n: own[n] if n in low else v for n, v in sc.leaves.items()}, sc.nodes, []))
        for name, op, ins, params in sc.nodes:
            env[name] = eng.apply(op, *[env[i] for i in ins], **params)
            hit = next((m for m in own if changed(m)), None)
            if hit is not None:
                call = f"{name} = {op}({', '.join(ins)})"
                return Cause("forward-mutates-input", f"{hit}'s value changed when {call} ran: the engine's {op} "
                             f"wrote into a buffer {hit} owns (an in-place result), and whatever saved {hit} "
                             "for the backward now holds other numbers", node=name, op=op,
                             evidence=f"{hit} = {fmt(own[hit])} when made; after {call}: "
                                      f"{fmt(eng.to_numpy(env[hit]))}\n{sc.code()}",
                             fix=f"give {op} a fresh output array (never write into an input's buffer)")
            a = now(name)
            if a.shape == np.shape(want[name]) and close(a, np.asarray(want[name], dtype=np.float64),
                                                         dtype="float32" if low else "float64"):
                own[name] = a  # (a node wrong when made is a forward bug, not a mutation: not watched)
        return _backward_mutation(sc, eng, env, own, changed)
    except Exception:  # noqa: BLE001 - an engine or a graph the check cannot run: the rules decide
        return None


def _backward_mutation(sc, eng, env, own, changed) -> Cause | None:
    """The scenario's calls run on the graph :func:`_forward_mutation` built: the first tensor whose value changes
    during a call (a VJP computed in place into a saved forward array: the next backward through the kept graph
    reads other numbers), against the engine's own value when made (``own``)."""
    ops = {n: op for n, op, _i, _p in sc.nodes}
    for s in sc.steps:
        if s.kind == "backward":
            try:
                eng.backward(env[s.target], None if s.seed is None else np.array(s.seed, copy=True),
                             retain_graph=s.retain)
            except Exception:  # noqa: BLE001 - a call that raises changes nothing to look at; the rules judge it
                continue
        else:
            eng.zero_grad(env[s.target])
        hit = next((m for m in own if changed(m)), None)
        if hit is not None:
            what = f"{hit} = {ops[hit]}(...)" if hit in ops else f"leaf {hit}"
            saved = f", e.g. {ops[hit]}'s output" if hit in ops else ""
            return Cause("backward-mutates-values", f"the value of {what} changed when {s.text()} ran: the engine's "
                         f"backward wrote into a buffer of the forward (a gradient computed in place into a saved "
                         f"tensor{saved}), so a later backward through the graph reads other numbers",
                         evidence=f"{hit} = {fmt(own[hit])} when made; after {s.text()}: "
                                  f"{fmt(eng.to_numpy(env[hit]))}\n{sc.code()}",
                         fix="compute gradients into fresh arrays (never in place into a tensor the forward saved)")
    return None


def _constant_grad(sc, got, ref, k) -> Cause | None:
    """A leaf created with requires_grad=False that reads back a nonzero gradient after call ``k`` (torch
    never gives it one: its grad stays None); a gradient of zeros there is the none-vs-zeros question."""
    for n in sc.leaves:
        g = got.obs[k].grads.get(n)
        if sc.rg(n) or g is None or not np.any(g != 0) or ref.obs[k].grads.get(n) is not None:
            continue
        used = [f"{name} = {op}({', '.join(ins)})" for name, op, ins, _p in sc.nodes if n in ins]
        return Cause("grad-on-constant", f"leaf {n} was created with requires_grad=False, yet the engine gives it a "
                     f"gradient ({'used by ' + '; '.join(used[:2]) if used else 'a leaf'}); torch never does: its grad "
                     "stays None", evidence=f"{_where(sc, k)}: engine {n}.grad = {_obs_text(sc, got, k, n)}; torch: "
                     f"None\n{sc.code()}",
                     fix="store gradients only for inputs that require grad (skip a leaf created with "
                         "requires_grad=False in the backward pass)")
    return None


def _raise_cause(sc, got, ref, k, ctx=None) -> Cause:
    step = sc.steps[k - 1]
    why = raise_reason(sc, k - 1)
    t_exc = ref.obs[k].raised
    ev = f"{_where(sc, k)}: engine {word_cut(_obs_text(sc, got, k, next(iter(sc.leaves))), 160)}; torch " + (
        f"raises {type(t_exc).__name__}: {word_cut(str(t_exc).splitlines()[0], 120)}" if t_exc is not None else "does not raise")
    if t_exc is not None:  # the engine accepted what torch refuses
        if why == "no-grad":
            return Cause("error-type", "backward on a root that does not require grad (no leaf of its graph requires "
                         "grad) did not raise; torch raises 'element 0 of tensors does not require grad'",
                         evidence=ev + "\n" + sc.code())
        idle = _idle_leaves(sc, got, k)
        if why in ("implicit", "shape") and idle:
            # nothing was computed for these leaves (e.g. tinygrad's 0-d leaves are constants): the engine
            # had no gradient to check the seed against; that, not the seed rule, is the bug
            zero_d = all(sc.shapes()[n] == () for n in idle)
            f = "not-updated-0d" if zero_d else "not-updated"
            return Cause(FLAGS[f][0], FLAGS[f][1], evidence=ev + f"\nthe call computed no gradient at all: "
                         f"{', '.join(idle)} {'is' if len(idle) == 1 else 'are'} unchanged, so the engine had nothing "
                         "to check the seed against\n" + sc.code())
        flag = {"implicit": "implicit-any-shape", "shape": "seed-broadcast", "freeing": "no-freeing"}[why]
        cid, summary = FLAGS[flag]
        sim = simulate(sc, {flag}, ref)
        same = first_difference(sc, got, sim, none_is_zeros=True) is None
        leaf = next(iter(sc.leaves))
        ev += (f"\nwhat the engine computed instead: {leaf}.grad = {_obs_text(sc, got, k, leaf)}"
               + (f" (exactly what {'a seed of ones' if why == 'implicit' else 'the broadcast seed' if why == 'shape' else 'a retained graph'} gives)"
                  if same and why != "freeing" else ""))
        return Cause(cid, summary, evidence=ev + "\n" + sc.code())
    whole = _engine_raise(sc, got, k, ctx) if step.kind == "backward" else None
    if whole is not None:  # backward() itself raises, or the earlier calls freed what retain_graph kept
        return whole
    own = _own_node_raise(sc, got, k, ctx) if step.kind == "backward" else None
    if own is not None:  # an op's backward raises whatever the seed: the op, not a backward() rule
        return own
    seeded, fresh = _still_raises(sc, k, ctx) if step.kind == "backward" else (None, None)
    if step.kind == "backward" and step.seed is None and why != "implicit" and seeded is not True:
        cid, summary = ("implicit-seed-refused", f"backward(y) without a seed raised for an output of shape "
                        f"{sc.shapes()[step.target]} (numel 1); torch accepts an implicit seed of ones for any shape "
                        "with one element")
    elif step.kind == "backward" and any(s.kind == "backward" for s in sc.steps[:k - 1]) and fresh is not True:
        cid, summary = "error-type", ("a second backward raised although the graph was kept (retain_graph=True) or "
                                      "nothing in it needed freed buffers; torch does not raise here")
    else:
        cid, summary = "error-type", f"{step.text()} raised where torch does not" + (
            " (given an explicit seed of ones, as the only call on a fresh graph, too: neither the implicit seed nor "
            "an earlier call is the reason; no single op's backward raises on its own)" if fresh else "")
    return Cause(cid, summary, evidence=ev + "\n" + sc.code())


def _still_raises(sc, k, ctx) -> tuple:
    """Whether backward call ``k`` still raises where torch does not given its seed explicitly (np.ones where it
    had none), after the same earlier calls; and as the only call on a fresh graph.  Each True / False / None
    (cannot tell, or no ``ctx``).  An engine that raises either way refuses the graph, not the implicit seed nor
    a second call (a raise misread as implicit-seed-refused: session 14)."""
    if ctx is None:
        return None, None
    explicit = _explicit(sc, k)
    seeded = _raises_alone(ctx, Scenario(sc.leaves, sc.nodes, explicit.steps[:k], sc.rule, sc.requires_grad))
    fresh = _raises_alone(ctx, Scenario(sc.leaves, sc.nodes, [explicit.steps[k - 1]], sc.rule, sc.requires_grad))
    return seeded, fresh


def _explicit(sc, k) -> Scenario:
    """``sc`` with call ``k``'s implicit seed given explicitly (np.ones of the root's shape)."""
    step = sc.steps[k - 1]
    seed = np.ones(sc.shapes()[step.target]) if step.seed is None else step.seed
    return Scenario(sc.leaves, sc.nodes, [Step(s.kind, s.target, seed, s.retain) if i == k - 1 else s
                                          for i, s in enumerate(sc.steps)], sc.rule, sc.requires_grad)


def _raises_alone(ctx, sc) -> bool | None:
    """Whether the engine raises on ``sc``'s last call where the reference does not (None: cannot tell)."""
    try:
        g, r = ctx.trace(sc)
    except Exception:  # noqa: BLE001 - a hang or a probe the simulator cannot take: no answer
        return None
    if g.build is not None or r.build is not None or len(g.obs) < len(sc.steps) + 1 or r.obs[-1].raised is not None:
        return None
    return g.obs[-1].raised is not None


def _engine_raise(sc, got, k, ctx) -> Cause | None:
    """Call ``k`` (a backward the engine raised on, torch not) explained by the engine as a whole, before a seed
    rule or one op is blamed: backward() raises on every graph, even a one-node one with an explicit seed
    (``backward-raises``), or the call runs on a fresh graph and raised only after earlier calls that asked to
    keep the graph (``retain-graph-ignored``).  None when the call runs with an explicit seed (the implicit
    seed is what it refuses) or neither holds."""
    if ctx is None:
        return None
    step, e = sc.steps[k - 1], got.obs[k].raised
    explicit = _explicit(sc, k)
    if step.seed is None and not _raises_alone(ctx, Scenario(sc.leaves, sc.nodes, explicit.steps[:k], sc.rule,
                                                             sc.requires_grad)):
        return None
    said = f"{type(e).__name__}: {word_cut(str(e).splitlines()[0] if str(e) else '', 160)}"
    always = ctx.backward_always_raises()
    if always is not None:
        return Cause("backward-raises", f"backward() raises on every call, even on a one-node graph with an explicit "
                     f"seed ({always[0]}): the engine's backward itself, not one op's rule or the seed",
                     evidence=f"{_where(sc, k)}: engine raised {said}\non one node:\n{always[1]}\n"
                              f"the graph where it showed:\n{sc.code()}",
                     fix="make backward() run: it raises before any op's rule is reached")
    earlier = [s for s in sc.steps[:k - 1] if s.kind == "backward"]
    kept = [s for s in earlier if s.retain]
    if not kept or _raises_alone(ctx, Scenario(sc.leaves, sc.nodes, [explicit.steps[k - 1]], sc.rule,
                                               sc.requires_grad)) is not False:
        return None
    return Cause("retain-graph-ignored", f"{step.text()} raised after an earlier backward() through this graph asked "
                 f"to keep it ({kept[-1].text()}): the engine freed its buffers although retain_graph=True; the same "
                 "call on a fresh graph runs", evidence=f"{_where(sc, k)}: engine raised {said}; torch does not "
                 f"raise\n{sc.code()}", fix="free the saved tensors only when retain_graph is False")


def _own_node_raise(sc, got, k, ctx) -> Cause | None:
    """The first node whose backward raises on its own (a one-node graph with the same inputs, a random seed,
    given explicitly) where torch computes gradients: an engine whose matmul backward raises for 1-D @ 1-D raises
    on backward() with or without a seed, and that is its matmul's fault, not the implicit seed's.  None when
    the call runs given an explicit seed (then the seed is the reason) or no node raises on its own."""
    if ctx is None:
        return None
    from .scenario import forward_values

    step = sc.steps[k - 1]
    try:
        if step.seed is None:  # the same calls with the implicit seed given explicitly: a refusal of it runs then
            shape = np.shape(forward_values(sc)[step.target])
            steps = [Step(s.kind, s.target, np.ones(shape), s.retain) if i == k - 1 else s for i, s in enumerate(sc.steps)]
            explicit = Scenario(sc.leaves, sc.nodes, steps, sc.rule, sc.requires_grad)
            g1, r1 = ctx.trace(explicit)
            if len(g1.obs) <= k or g1.obs[k].raised is None or r1.obs[k].raised is not None:
                return None
        vals = forward_values(sc)
    except Exception:  # noqa: BLE001 - cannot tell: the seed rules decide
        return None
    e = got.obs[k].raised
    rng = np.random.default_rng(0)
    for name, op, ins, params in sc.nodes:
        one = _one_node(sc, vals, (name, op, ins, params), rng.uniform(0.5, 1.5, np.shape(vals[name])))
        try:
            g1, r1 = ctx.trace(one)
        except Exception:  # noqa: BLE001 - a hang on the probe: not this node's answer
            continue
        if g1.build is None and len(g1.obs) > 1 and g1.obs[1].raised is not None and r1.obs[1].raised is None:
            own = g1.obs[1].raised
            said = word_cut(str(own).splitlines()[0] if str(own) else "", 160)
            return Cause("wrong-vjp", f"node {name} = {op}({', '.join(ins)}): the engine's backward of {op} raises "
                         f"{type(own).__name__} ({said}) on its own, at the node's inputs "
                         f"({', '.join(str(np.shape(vals[i])) for i in ins)}), with or without a seed, where torch "
                         "computes gradients", node=name, op=op, pattern="other",
                         evidence=f"{_where(sc, k)}: engine raised {type(e).__name__}: {word_cut(str(e), 160)}; "
                                  f"alone:\n{one.code()}\nthe graph where it showed:\n{sc.code()}",
                         fix=f"make {op}'s backward handle inputs of these shapes")
    return None


def _idle_leaves(sc, got, k) -> list:
    """Leaves the accepted call ``k`` should have reached (torch's rule: the root's graph) whose
    grad the engine left unchanged: every one of them, or [] when anything moved."""
    from .scenario import _requires_grad

    step = sc.steps[k - 1]
    inputs = {n: i for n, _op, i, _p in sc.nodes}
    reach, todo = set(), [step.target]
    while todo:
        n = todo.pop()
        if n in sc.leaves:
            if sc.rg(n):
                reach.add(n)
            continue
        todo.extend(i for i in inputs[n] if _requires_grad(sc, i))
    before, after = got.obs[k - 1].grads, got.obs[k].grads
    same = [n for n in sorted(reach) if (before.get(n) is None and after.get(n) is None) or (
        before.get(n) is not None and after.get(n) is not None and np.array_equal(before[n], after[n]))]
    return same if reach and len(same) == len(reach) else []


def _raise_flags(sc, got, ref) -> set:
    """The raise-rule flags that explain every call the engine accepted where torch refuses."""
    out = set()
    for k, (g, w) in enumerate(zip(got.obs[1:], ref.obs[1:])):
        if w.raised is not None and g.raised is None:
            why = raise_reason(sc, k)
            if why in ("implicit", "shape", "freeing"):
                out.add({"implicit": "implicit-any-shape", "shape": "seed-broadcast", "freeing": "no-freeing"}[why])
    return out


def _own_raise(got, ref, k) -> int | None:
    """The first call after ``k`` the engine raised on where torch does not (e.g. a second backward it
    wrongly thinks freed): the calls from there on are another finding's (error-type), not this value's."""
    return next((i for i in range(k + 1, min(len(got.obs), len(ref.obs)))
                 if got.obs[i].raised is not None and ref.obs[i].raised is None), None)


def _value_cause(sc, got, ref, k, leaf, ctx) -> Cause:
    cut = _own_raise(got, ref, k)
    if cut is not None:  # explain the calls before the engine's own raise; that raise is reported on its own
        sc = Scenario(sc.leaves, sc.nodes, sc.steps[:cut - 1], sc.rule, sc.requires_grad)
        got, ref = Trace(got.build, got.obs[:cut], got.dtype), Trace(ref.build, ref.obs[:cut], ref.dtype)
    base = (f"{_where(sc, k)}: engine {leaf}.grad = {_obs_text(sc, got, k, leaf)}; torch semantics "
            f"(J^T . seed, accumulated) give {_obs_text(sc, ref, k, leaf)}")
    probes = ctx.probes() if ctx is not None else []

    extra = _raise_flags(sc, got, ref)  # e.g. no freeing, on a later call than this value difference

    def explaining(cands) -> list:
        # Only an explanation that also reproduces the engine on every probe counts: a single flag
        # or a pair can match one graph's numbers by coincidence, the probes tell them apart.
        return [c for c in cands if matches(sc, got, ref, set(c) | extra) and all(_probe_ok(p, c) for p in probes)]

    try:
        found = explaining(ctx.recent if ctx is not None else [])[:1]
        if not found:
            found = explaining([(f,) for f in VALUE_FLAGS])
        if not found:
            found = explaining(_PAIRS)
    except TooBig as e:
        return Cause("unexplained", f"no known cause matches (not simulated: {e}); here are the numbers", evidence=base)
    if found:
        flags = found[0]
        if ctx is not None and flags not in ctx.recent:
            ctx.recent.append(flags)
        primary = flags[0]
        if len(flags) > 1:
            # a pair: both are at work here.  Name one not reported yet (so the second bug gets its own
            # finding), else the one that alone explains the engine the longest (its first failure).
            known = ctx.known_ids if ctx is not None else set()
            matter = [f for f in flags if not matches(sc, got, ref, (set(flags) - {f}) | extra)] or list(flags)
            primary = max(matter, key=lambda f: (FLAGS[f][0] not in known, _agrees_until(sc, got, ref, f)))
        cid, summary = FLAGS[primary]
        sim = simulate(sc, set(flags) | extra, ref)
        ev = base + f"; with {_who(flags)}: {_obs_text(sc, sim, k, leaf)} (matches every call exactly)"
        if len(flags) > 1:
            other = [f for f in flags if f != primary][0]
            ev += f"\ntogether with {FLAGS[other][0]}: {FLAGS[other][1]}"
        others = sorted({_who(c) for c in found[1:]} - {_who(flags)})
        if others:
            ev += "\nequally consistent with: " + "; ".join(others)
        return Cause(cid, summary, evidence=ev + "\n" + sc.code())
    return _unmatched(sc, got, ref, k, leaf, ctx, base)


def _agrees_until(sc, got, ref, flag) -> float:
    d = first_difference(sc, got, simulate(sc, {flag}, ref), none_is_zeros=True)
    return float("inf") if d is None else d[0]


def _probe_ok(probe, flags) -> bool:
    sc, got, ref = probe
    try:
        return matches(sc, got, ref, set(flags))
    except Exception:  # noqa: BLE001
        return True


def _unmatched(sc, got, ref, k, leaf, ctx, base) -> Cause:
    if ctx is not None:
        ones = Scenario(sc.leaves, sc.nodes, [Step(s.kind, s.target, None if s.seed is None else np.ones(np.shape(s.seed)),
                                                    s.retain) for s in sc.steps], sc.rule, sc.requires_grad)
        if any(s.seed is not None and np.any(s.seed != 1) for s in sc.steps):
            g1, r1 = ctx.trace(ones)
            if first_difference(ones, g1, r1, none_is_zeros=True) is None:
                return Cause("seed-misapplied", FLAGS["seed-mean"][1].split(" instead")[0].replace(
                    "uses the mean of the seed for every element", "uses the seed, but not as J^T . seed") +
                    ": with a seed of ones the same calls give the right gradients",
                    evidence=base + "\n" + sc.code())
        confirmed = _confirmed(sc, got, ref, ctx)
        if confirmed is not None:
            return confirmed
        node = _wrong_node(sc, ctx)
        if node is not None:
            return node
    return Cause("unexplained", "no known cause matches; here are the numbers", evidence=base + "\n" + sc.code())


_ACROSS_CALLS = {"stale", "overwrite", "overwrite-clears", "reset-ignored", "root-assigned", "root-assigned-implicit"}


def _confirmed(sc, got, ref, ctx) -> Cause | None:
    """A wrong semantics carried across calls that the probes reproduce exactly, when this graph's
    numbers cannot be: the engine builds some of this graph's ops from several internal nodes
    (micrograd's sub is x + (-1 * y), its sum a chain of adds), each keeping its own stale gradient,
    which a node-level simulation does not see.  Blamed only when the first call is right and a
    later one is wrong, which is what carried-over state does."""
    if "confirmed" not in ctx.__dict__:
        ctx.confirmed = None
        probes = ctx.probes()
        broken = [p for p in probes if first_difference(p[0], p[1], p[2], none_is_zeros=True) is not None]
        if broken:
            for c in [(f,) for f in VALUE_FLAGS] + _PAIRS:
                if set(c) & _ACROSS_CALLS and all(_probe_ok(p, c) for p in probes):
                    ctx.confirmed = c
                    break
    c = ctx.confirmed
    calls = [k for k, s in enumerate(sc.steps, 1) if s.kind == "backward"]
    if c is None or len(calls) < 2:
        return None
    if first_difference(Scenario(sc.leaves, sc.nodes, sc.steps[:calls[0]], sc.rule, sc.requires_grad),
                        Trace(None, got.obs[:calls[0] + 1]), Trace(None, ref.obs[:calls[0] + 1]),
                        none_is_zeros=True) is not None:
        return None
    primary = next((f for f in c if f in ("stale",)), c[0])
    probe = next(p for p in ctx.probes() if first_difference(p[0], p[1], p[2], none_is_zeros=True) is not None)
    return Cause(FLAGS[primary][0], FLAGS[primary][1],
                 evidence=f"the first backward is right, a later one is not; on this graph the numbers are not "
                          f"reproduced exactly (the engine builds some of its ops from several internal nodes), but "
                          f"{_who(c)} reproduces the engine exactly on a probe:\n{probe[0].code()}\n"
                          f"engine: {_obs_text(probe[0], probe[1], len(probe[0].steps), next(iter(probe[0].leaves)))}; "
                          f"torch: {_obs_text(probe[0], probe[2], len(probe[0].steps), next(iter(probe[0].leaves)))}"
                          f"\nthis graph: {_where(sc, len(sc.steps))}\n{sc.code()}")


def _wrong_node(sc, ctx) -> Cause | None:
    """The first node whose VJP is wrong on its own (a one-node graph with the same input values)."""
    from .scenario import forward_values

    vals = forward_values(sc)
    rng = np.random.default_rng(0)
    for name, op, ins, params in sc.nodes:
        one = _one_node(sc, vals, (name, op, ins, params), rng.uniform(0.5, 1.5, np.shape(vals[name])))
        got, want = ctx.trace(one)
        d = first_difference(one, got, want, none_is_zeros=True)
        if d is not None and d[1] == "grad":
            flag = next((f for f in VALUE_FLAGS if matches(one, got, want, {f})), None)
            if flag is not None:  # not the op: a wrong semantics shows even on one node
                return Cause(FLAGS[flag][0], FLAGS[flag][1], evidence=f"on one node: engine "
                             f"{_obs_text(one, got, 1, d[2])}; torch: {_obs_text(one, want, 1, d[2])}; with "
                             f"{_who([flag])}: the same\n{one.code()}\nthe graph where it showed:\n{sc.code()}")
            a, b = got.obs[-1].grads.get(d[2]), want.obs[-1].grads.get(d[2])
            pattern, factor = "other", None
            if a is not None and b is not None and a.shape == b.shape and np.all(b != 0):
                r = a / b
                if np.allclose(r, r.flat[0], rtol=1e-9):
                    factor = float(r.flat[0])
                    pattern = "sign" if np.isclose(factor, -1.0) else "scale"
            rel = "" if a is None or b is None or a.shape != b.shape else \
                f"; max relative difference {float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300))):.3g}"
            return Cause("wrong-vjp", f"node {name} = {op}({', '.join(ins)}): the engine's VJP of {op} is wrong on "
                         "its own (a one-node graph with the same inputs and a random seed)", node=name, op=op,
                         pattern=pattern, factor=factor,
                         evidence=f"engine: {fmt(a)}; J^T . seed: {fmt(b)}{rel}\n{one.code()}")
    return None


def _one_node(sc, vals: dict, node: tuple, seed) -> Scenario:
    """Node ``node`` of ``sc`` alone: a one-node scenario whose leaves hold its inputs' values, one backward."""
    name, op, ins, params = node
    leaves, names = {}, []
    for j, i in enumerate(ins):
        nm = f"in{j}" if i not in names else names[list(ins).index(i)]
        if i not in ins[:j]:
            leaves[nm] = np.array(vals[i], copy=True)
        names.append(nm)
    return Scenario(leaves, [(name, op, tuple(names), params)], [Step("backward", name, seed, False)], "node",
                    {n: sc.rg(i) if i in sc.leaves else True for n, i in zip(names, ins)})
