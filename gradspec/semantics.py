"""The backward() rules of CONTRACT §5 as named checks on an engine (``verify_engine``).

Each rule is a scenario run on the engine under test and, where torch decides whether a call
must raise, on torch; a broken rule becomes a :class:`gradspec.result.VerifyDiscrepancy` with a
snippet that shows it.

Example::

    >>> import gradspec as gs
    >>> r = gs.verify_engine("reference", max_examples=2, seed=0)
    >>> r.checks["implicit seed where numel() == 1"] if "implicit seed where numel() == 1" in r.checks else "passed"
    'passed'
"""

from __future__ import annotations

import time
import traceback

import numpy as np

from . import engines as _engines
from .case import Case
from .result import Result, VerifyDiscrepancy

__all__: list[str] = []


def _arr(a) -> str:
    a = np.asarray(a)
    return f"np.array({a.tolist()!r})" if a.ndim else f"np.array({float(a)!r})"


class _Semantics:
    """The backward() rules of CONTRACT §5 as checks on the engine (and on torch, where torch
    decides whether a call must raise)."""

    UNARY = ("exp", "tanh", "sin", "mul", "square", "neg", "add", "relu", "abs", "cos", "sigmoid")
    BINARY = ("mul", "add", "sub", "div", "maximum", "minimum", "atan2", "pow")

    def __init__(self, eng, label, result: Result, strict: bool, rng, supported):
        self.eng = eng
        self.label = label
        self.R = result
        self.strict = strict
        self.rng = rng
        self.ops = set(supported)
        self.ref = _engines.get("reference")
        try:
            self.torch = _engines.get("torch-cpu")
            self.torch.supports("add")
        except Exception:  # noqa: BLE001 - torch missing: raise/no-raise decided by the reference engine
            self.torch = None
        self.freeing_cases = {"n": 0, "bad": 0}
        self._freeing_reported = False
        self.t0 = time.perf_counter()

    # -- helpers ------------------------------------------------------------------------------
    def unary(self):
        for op in self.UNARY:
            if op in self.ops:
                return op
        return None

    @staticmethod
    def twice(op) -> str:
        return ", x" if op in ("mul", "add") else ""

    def apply_unary(self, E, op, x):
        return E.apply(op, x, x) if op in ("mul", "add") else E.apply(op, x)

    def values(self, shape, positive=False):
        v = self.rng.uniform(0.3, 1.7, shape) * (1.0 if positive else self.rng.choice([-1.0, 1.0], shape))
        return np.asarray(v, dtype=np.float64)

    def decide_raises(self, scenario) -> tuple[bool, BaseException | None]:
        """Whether torch raises on ``scenario`` (the reference engine where torch is missing)."""
        E = self.torch if self.torch is not None else self.ref
        try:
            scenario(E)
            return False, None
        except Exception as e:  # noqa: BLE001
            return True, e

    def run_engine(self, scenario):
        try:
            return scenario(self.eng), None
        except Exception as e:  # noqa: BLE001
            return None, e

    def fail(self, check: str, kind: str, message: str, snippet: str, correctness: bool) -> None:
        if correctness or self.strict:
            self.R.checks[check] = "failed"
            d = VerifyDiscrepancy(kind, (f"engine:{self.eng.name}", "torch-cpu"),
                                  f"engine {self.eng.name!r}: {message}", None, snippet=snippet,
                                  replay=self.R.replay, check_name=check)
            if d.signature not in {x.signature for x in self.R.discrepancies}:
                self.R.discrepancies.append(d)
                self._first()
        else:
            if self.R.checks.get(check) == "note":
                return  # one note per rule is enough
            if self.R.checks.get(check) != "failed":
                self.R.checks[check] = "note"
            self.R.note(f"{check}: {message} (torch-specific detail; strict=False)")

    def _first(self) -> None:
        if self.R.time_to_first is None:
            self.R.time_to_first = time.perf_counter() - self.t0
            self.R.cases_to_first = self.R.cases_run

    def passed(self, check: str) -> None:
        self.R.checks.setdefault(check, "passed")

    def skip(self, check: str, why: str) -> None:
        self.R.checks.setdefault(check, f"skipped: {why}")

    def grad(self, E, x):
        g = E.grad(x)
        return None if g is None else np.asarray(g, dtype=np.float64)

    def expected(self, build, seeds) -> dict:
        """Gradients from the reference engine for ``build(E) -> (leaves dict, roots list)``."""
        leaves, roots = build(self.ref)
        for k, (r, g) in enumerate(zip(roots, seeds, strict=True)):
            self.ref.backward(r, g, retain_graph=k < len(roots) - 1)
        return {n: self.grad(self.ref, x) for n, x in leaves.items()}

    def close(self, a, b) -> bool:
        if a is None or b is None:
            return a is None and b is None
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if a.shape != b.shape:
            return False
        # Inputs and seeds are O(1) by construction: an absolute floor covers exact zeros (x / x).
        scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)), 1.0)
        return bool(np.all(np.abs(a - b) <= 1e-10 * scale))

    def check_raise(self, check, kind, scenario, snippet, correctness_if_missing=True, after=None):
        """The engine must raise exactly where torch raises (and, strict, the same exception type)."""
        t_raises, t_exc = self.decide_raises(scenario)
        _, e_exc = self.run_engine(scenario)
        e_raises = e_exc is not None
        if t_raises and not e_raises:
            self.fail(check, kind, f"did not raise where torch raises {type(t_exc).__name__}: {t_exc}", snippet,
                      correctness_if_missing)
            return False
        if not t_raises and e_raises:
            self.fail(check, kind, f"raised {type(e_exc).__name__}: {e_exc} where torch does not raise", snippet,
                      correctness_if_missing)
            return False
        if t_raises and e_raises and not isinstance(e_exc, type(t_exc)) and not isinstance(e_exc, RuntimeError):
            self.fail("error types", "error-type",
                      f"raised {type(e_exc).__name__} ({e_exc}) where torch raises {type(t_exc).__name__} ({t_exc})",
                      snippet, False)
        return True

    # -- the checks ----------------------------------------------------------------------------
    def run_all(self) -> None:
        for fn in (self.none_before_backward, self.implicit_seed_numel1, self.implicit_seed_refused,
                   self.seed_shape, self.seed_values, self.accumulate_calls, self.accumulate_roots,
                   self.repeated_arguments, self.fan_out, self.reset, self.retain_graph, self.requires_grad_root):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - a crash of a check is the engine's failure to run it
                name = fn.__name__.replace("_", " ")
                self.fail(name, "raised", f"the check crashed: {type(e).__name__}: {e}",
                          traceback.format_exc(limit=3), True)

    def none_before_backward(self):
        check = "None before the first backward"
        x = self.eng.leaf(self.values((2, 3)))
        g = self.eng.grad(x)
        snippet = f"x = eng.leaf({_arr(np.zeros((2, 3)))})\neng.grad(x)  # -> {g!r}, torch: None"
        if g is not None:
            self.fail(check, "none-before-backward",
                      f"grad(leaf) is {type(g).__name__} before any backward (torch: None)", snippet, False)
        else:
            self.passed(check)

    def implicit_seed_numel1(self):
        check = "implicit seed where numel == 1 (any shape), equal to a seed of ones"
        op = self.unary()
        if op is None:
            return self.skip(check, "the engine supports no elementwise op")
        ok = True
        for shape in [(), (1,), (1, 1), (1, 1, 1)]:
            v = self.values(shape)

            def build(E, v=v):
                x = E.leaf(v)
                return {"x": x}, [self.apply_unary(E, op, x)]

            want = self.expected(build, [np.ones(shape)])
            leaves, roots = build(self.eng)
            snippet = (f"x = eng.leaf({_arr(v)})  # shape {shape}\ny = eng.apply({op!r}, x{self.twice(op)})\n"
                       "eng.backward(y)  # implicit seed: must be allowed (numel 1) and equal a seed of ones")
            try:
                self.eng.backward(roots[0], None)
            except Exception as e:  # noqa: BLE001
                self.fail(check, "implicit-seed", f"backward(y) with the implicit seed raised {type(e).__name__}: {e} "
                          f"for an output of shape {shape} (numel 1: torch accepts it)", snippet, True)
                ok = False
                break
            got = self.grad(self.eng, leaves["x"])
            if not self.close(got, want["x"]):
                self.fail(check, "implicit-seed", f"backward(y) with the implicit seed for shape {shape} gave {got!r}; "
                          f"a seed of ones gives {want['x']!r}", snippet, True)
                ok = False
                break
        if ok:
            self.passed(check)

    def implicit_seed_refused(self):
        check = "implicit seed refused where numel != 1"
        op = self.unary()
        if op is None:
            return self.skip(check, "the engine supports no elementwise op")
        ok = True
        for shape in [(2,), (2, 3), (3, 1), (1, 2), (0,)]:
            v = self.values(shape)

            def scenario(E, v=v):
                x = E.leaf(v)
                E.backward(self.apply_unary(E, op, x), None)
                return x

            snippet = (f"x = eng.leaf({_arr(v)})  # shape {shape}\ny = eng.apply({op!r}, x{self.twice(op)})\n"
                       "eng.backward(y)  # torch: RuntimeError: grad can be implicitly created only for scalar outputs")
            ok &= self.check_raise(check, "implicit-seed", scenario, snippet, True)
            if not ok:
                break
        if ok:
            self.passed(check)

    def seed_shape(self):
        check = "explicit seed of exactly the output's shape (no broadcasting)"
        op = self.unary()
        if op is None:
            return self.skip(check, "the engine supports no elementwise op")
        ok = True
        trials = [((2, 3), (3,)), ((2, 3), (1, 3)), ((2, 3), (2, 1)), ((2, 3), ()), ((2, 3), (3, 2)), ((2, 3), (6,)),
                  ((2, 3), (1, 2, 3)), ((), (1,)), ((1,), ()), ((3,), (1,)), ((2, 3), (2, 3))]
        for out_shape, seed_shape in trials:
            v = self.values(out_shape)
            sd = self.values(seed_shape)

            def scenario(E, v=v, sd=sd):
                x = E.leaf(v)
                E.backward(self.apply_unary(E, op, x), sd)

            snippet = (f"x = eng.leaf({_arr(v)})  # shape {out_shape}\ny = eng.apply({op!r}, x{self.twice(op)})\n"
                       f"eng.backward(y, {_arr(sd)})  # seed shape {seed_shape}: torch raises 'Mismatch in shape' "
                       "unless the shapes are equal")
            ok &= self.check_raise(check, "seed-shape", scenario, snippet, True)
            if not ok:
                break
        if ok:
            self.passed(check)

    def seed_values(self):
        check = "grad = J^T . seed (random seeds)"
        op = self.unary()
        if op is None:
            return self.skip(check, "the engine supports no elementwise op")
        ok = True
        for shape in [(3,), (2, 3), (1,), ()]:
            v, sd = self.values(shape), self.values(shape)

            def build(E, v=v):
                x = E.leaf(v)
                return {"x": x}, [self.apply_unary(E, op, x)]

            want = self.expected(build, [sd])
            leaves, roots = build(self.eng)
            self.eng.backward(roots[0], sd)
            got = self.grad(self.eng, leaves["x"])
            if not self.close(got, want["x"]):
                snippet = (f"x = eng.leaf({_arr(v)})\ny = eng.apply({op!r}, x{self.twice(op)})\n"
                           f"eng.backward(y, {_arr(sd)})\neng.grad(x)  # -> {got!r}, J^T . seed = {want['x']!r}")
                self.fail(check, "value", f"grad after backward(y, seed) is not J^T . seed for shape {shape}",
                          snippet, True)
                ok = False
                break
        if ok:
            self.passed(check)

    def accumulate_calls(self):
        check = "accumulation across backward calls"
        op = self.unary()
        if op is None:
            return self.skip(check, "the engine supports no elementwise op")
        v, g1, g2 = self.values((2, 3)), self.values((2, 3)), self.values((2, 3))

        def build(E):
            x = E.leaf(v)
            return {"x": x}, [self.apply_unary(E, op, x)] * 2

        want = self.expected(build, [g1, g2])
        leaves, roots = build(self.eng)
        try:
            self.eng.backward(roots[0], g1, retain_graph=True)
            self.eng.backward(roots[1], g2)
        except Exception as e:  # noqa: BLE001
            return self.fail(check, "accumulation",
                             f"a second backward with retain_graph=True raised {type(e).__name__}: {e}", "", True)
        got = self.grad(self.eng, leaves["x"])
        if not self.close(got, want["x"]):
            snippet = (f"x = eng.leaf({_arr(v)})\ny = eng.apply({op!r}, x{self.twice(op)})\n"
                       f"eng.backward(y, {_arr(g1)}, retain_graph=True)\neng.backward(y, {_arr(g2)})\n"
                       f"eng.grad(x)  # -> {got!r}; the sum of both calls is {want['x']!r}")
            return self.fail(check, "accumulation", "gradients of two backward calls do not add up in grad(leaf)",
                             snippet, True)
        self.passed(check)

    def accumulate_roots(self):
        check = "accumulation across roots"
        ops = [o for o in self.UNARY if o in self.ops]
        if not ops:
            return self.skip(check, "the engine supports no elementwise op")
        op1, op2 = ops[0], ops[-1] if len(ops) > 1 else ops[0]
        v, g1, g2 = self.values((3,)), self.values((3,)), self.values((3,))

        def build(E):
            x = E.leaf(v)
            return {"x": x}, [self.apply_unary(E, op1, x), self.apply_unary(E, op2, x)]

        want = self.expected(build, [g1, g2])
        leaves, roots = build(self.eng)
        self.eng.backward(roots[0], g1)
        self.eng.backward(roots[1], g2)
        got = self.grad(self.eng, leaves["x"])
        if not self.close(got, want["x"]):
            snippet = (f"x = eng.leaf({_arr(v)})\ny1 = {op1}(x); y2 = {op2}(x)\neng.backward(y1, {_arr(g1)})\n"
                       f"eng.backward(y2, {_arr(g2)})\neng.grad(x)  # -> {got!r}; expected {want['x']!r}")
            return self.fail(check, "accumulation", "gradients from two roots sharing a leaf do not add up",
                             snippet, True)
        self.passed(check)

    def repeated_arguments(self):
        check = "repeated arguments: op(x, x)"
        ops = [o for o in self.BINARY if o in self.ops]
        if not ops:
            return self.skip(check, "the engine supports no binary elementwise op")
        ok = True
        for op in ops:
            v = self.values((2, 3), positive=op in ("pow", "div"))
            sd = self.values((2, 3))

            def build(E, v=v, op=op):
                x = E.leaf(v)
                return {"x": x}, [E.apply(op, x, x)]

            try:
                want = self.expected(build, [sd])
            except Exception:  # noqa: BLE001 - e.g. ties of maximum(x, x) rules; not this check's business
                continue
            if op in ("maximum", "minimum"):
                continue  # x against itself is a tie: torch's split convention is a separate matter
            leaves, roots = build(self.eng)
            self.eng.backward(roots[0], sd)
            got = self.grad(self.eng, leaves["x"])
            if not self.close(got, want["x"]):
                snippet = (f"x = eng.leaf({_arr(v)})\ny = eng.apply({op!r}, x, x)\neng.backward(y, {_arr(sd)})\n"
                           f"eng.grad(x)  # -> {got!r}; both uses add up to {want['x']!r}")
                self.fail(check, "repeated-argument", f"{op}(x, x): the gradients of both arguments do not add up",
                          snippet, True)
                ok = False
                break
        if ok:
            self.passed(check)

    def fan_out(self):
        check = "accumulation across uses of a leaf (fan-out)"
        ops = [o for o in self.UNARY if o in self.ops and o not in ("mul", "add")]
        if "add" not in self.ops or not ops:
            return self.skip(check, "needs add and an elementwise op")
        op1, op2 = ops[0], ops[-1]
        v, sd = self.values((2, 2)), self.values((2, 2))

        def build(E):
            x = E.leaf(v)
            return {"x": x}, [E.apply("add", E.apply(op1, x), E.apply(op2, x))]

        want = self.expected(build, [sd])
        leaves, roots = build(self.eng)
        self.eng.backward(roots[0], sd)
        got = self.grad(self.eng, leaves["x"])
        if not self.close(got, want["x"]):
            snippet = (f"x = eng.leaf({_arr(v)})\ny = add({op1}(x), {op2}(x))\neng.backward(y, {_arr(sd)})\n"
                       f"eng.grad(x)  # -> {got!r}; expected {want['x']!r}")
            return self.fail(check, "accumulation", "a leaf used by two ops does not receive both gradients",
                             snippet, True)
        self.passed(check)

    def reset(self):
        check = "zero_grad resets"
        op = self.unary()
        if op is None:
            return self.skip(check, "the engine supports no elementwise op")
        v, g1, g2 = self.values((3,)), self.values((3,)), self.values((3,))

        def build(E):
            x = E.leaf(v)
            return {"x": x}, [self.apply_unary(E, op, x)]

        want = self.expected(build, [g2])
        leaves, roots = build(self.eng)
        x = leaves["x"]
        self.eng.backward(roots[0], g1, retain_graph=True)
        self.eng.zero_grad(x)
        after = self.grad(self.eng, x)
        self.eng.backward(roots[0], g2)
        got = self.grad(self.eng, x)
        snippet = (f"x = eng.leaf({_arr(v)})\ny = eng.apply({op!r}, x{self.twice(op)})\n"
                   f"eng.backward(y, {_arr(g1)}, retain_graph=True)\neng.zero_grad(x)  # grad(x) -> {after!r}\n"
                   f"eng.backward(y, {_arr(g2)})\neng.grad(x)  # -> {got!r}; expected {want['x']!r}")
        if not self.close(got, want["x"]):
            return self.fail(check, "reset", "after zero_grad, the next backward still adds to the old gradient",
                             snippet, True)
        if after is not None:
            if after.shape == v.shape and not np.any(after):
                self.fail("grad is None after zero_grad", "none-before-backward",
                          "grad(leaf) is zeros after zero_grad (torch: None)", snippet, False)
            else:
                return self.fail(check, "reset", f"grad(leaf) after zero_grad is {after!r}, not None", snippet, True)
        else:
            self.passed("grad is None after zero_grad")
        self.passed(check)

    def retain_graph(self):
        check = "retain_graph=True keeps the graph for another backward"
        op = self.unary()
        if op is None:
            return self.skip(check, "the engine supports no elementwise op")
        v, sd = self.values((3,)), self.values((3,))

        def scenario(E):
            x = E.leaf(v)
            y = self.apply_unary(E, op, x)
            E.backward(y, sd, retain_graph=True)
            E.backward(y, sd, retain_graph=True)
            return self.grad(E, x)

        snippet = (f"x = eng.leaf({_arr(v)})\ny = eng.apply({op!r}, x{self.twice(op)})\n"
                   f"eng.backward(y, {_arr(sd)}, retain_graph=True)\neng.backward(y, {_arr(sd)}, retain_graph=True)")
        got, exc = self.run_engine(scenario)
        if exc is not None:
            return self.fail(check, "retain-graph", f"a second backward after retain_graph=True raised "
                             f"{type(exc).__name__}: {exc}", snippet, True)
        want = scenario(self.ref)
        if not self.close(got, want):
            return self.fail(check, "accumulation", f"two backward calls with retain_graph=True give {got!r}, expected "
                             f"{want!r}", snippet, True)
        self.passed(check)

    def requires_grad_root(self):
        check = "backward on a root that does not require grad raises"
        op = self.unary()
        if op is None:
            return self.skip(check, "the engine supports no elementwise op")
        v = self.values((3,))

        def scenario(E):
            x = E.leaf(v, requires_grad=False)
            E.backward(self.apply_unary(E, op, x), np.ones(3))

        snippet = (f"x = eng.leaf({_arr(v)}, requires_grad=False)\ny = eng.apply({op!r}, x)\n"
                   "eng.backward(y, np.ones(3))  # torch: RuntimeError: element 0 of tensors does not require grad")
        if self.check_raise(check, "requires-grad", scenario, snippet, False):
            self.passed(check)

    # -- freeing, probed on the random graphs --------------------------------------------------
    def freeing_probe(self, case: Case) -> None:
        """Backward over all roots, then the last root again without retain_graph: the engine
        must raise exactly where torch does (a traversed node saved tensors)."""
        if self.torch is None or self.freeing_cases["n"] >= 40:
            return
        if any(not self.torch.supports(n.op) for n in case.nodes):
            return

        def scenario(E):
            env = {}
            for l in case.leaves:
                env[l.name] = E.leaf(np.array(l.value, copy=True), requires_grad=l.differentiable)
            for n in case.nodes:
                env[n.name] = E.apply(n.op, *[env[i] for i in n.inputs], **n.params)
            last = len(case.roots) - 1
            for k, (r, s) in enumerate(zip(case.roots, case.seeds, strict=True)):
                E.backward(env[r], None if s is None else np.array(s, copy=True), retain_graph=k < last)
            r, s = case.roots[-1], case.seeds[-1]
            try:
                E.backward(env[r], None if s is None else np.array(s, copy=True))
            except Exception as e:  # noqa: BLE001
                return e
            return None

        try:
            t_exc = scenario(self.torch)
        except Exception:  # noqa: BLE001 - torch cannot run this case (its own limits): no verdict
            return
        try:
            e_exc = scenario(self.eng)
        except Exception:  # noqa: BLE001 - reported by the value check
            return
        self.freeing_cases["n"] += 1
        if (t_exc is None) == (e_exc is None):
            return
        self.freeing_cases["bad"] += 1
        if self._freeing_reported:
            return
        self._freeing_reported = True
        ops = ", ".join(n.op for n in case.nodes)
        if t_exc is not None:
            msg = (f"a second backward of root {case.roots[-1]!r} without retain_graph did not raise; torch raises "
                   f"({type(t_exc).__name__}: {str(t_exc).split(' (')[0]}) because a node of the graph ({ops}) "
                   "saved tensors that the first backward freed")
        else:
            msg = (f"a second backward of root {case.roots[-1]!r} without retain_graph raised {type(e_exc).__name__}: "
                   f"{e_exc}; torch does not raise here (no node of the graph ({ops}) saves tensors)")
        check = "freeing (second backward without retain_graph, random graphs)"
        if self.strict:
            self.R.checks[check] = "failed"
            d = VerifyDiscrepancy("freeing", (f"engine:{self.eng.name}", "torch-cpu"),
                                  f"engine {self.eng.name!r}: {msg}", case, replay=self.R.replay, check_name=check,
                                  snippet="build the case with eng.leaf/eng.apply, backward every root, then "
                                          "backward the last root again without retain_graph")
            self.R.discrepancies.append(d)
            self._first()
        else:
            self.R.checks[check] = "note"
            self.R.note(f"freeing: {msg} (torch-specific detail; strict=False)")
