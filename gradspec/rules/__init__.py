"""The backward() rules of CONTRACT §5, each checked as a property over drawn graphs, shapes and calls.

Every rule is a Hypothesis search of its own: scenarios (a small graph of the engine's ops plus
a sequence of ``backward`` / ``zero_grad`` calls) are drawn, run on the engine and on the
reference engine (which reproduces torch, call by call), and compared after every call.  A
failure is diagnosed at once (:mod:`gradspec.rules.diagnosis`: which known wrong
semantics reproduces the engine's numbers exactly) and the cause's id is what makes it
distinct: the search shrinks it, records it, and goes on looking for a failure with another
cause, on other shapes, until its budget is spent.  So an engine that refuses the implicit
seed for shape ``(1, 1)`` and never fills the gradient of 0-d leaves gets two findings, and
the same bug seen by three rules is one finding.

Used by ``gs.verify_engine`` and by ``gradspec fuzz --engine`` (CONTRACT §6).

Example::

    >>> import gradspec as gs
    >>> from gradspec.rules import check_rules
    >>> res = check_rules("reference", max_examples=3, seed=0, rules=["implicit-seed-scalar"])
    >>> res.status["implicit-seed-scalar"]["status"], res.findings
    ('passed', [])
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from .. import engines as _engines
from ..causes import Cause, crash_type
from . import diagnosis as _ws
from .scenario import Scenario, ScenarioTimeout, Step, Trace, first_difference, run, timed_out

__all__ = ["RULES", "RuleFinding", "RulesResult", "check_rules", "DEFAULT_EXAMPLES", "diagnose_case", "KIND",
           "STRICT_ONLY", "explain_engine_finding", "OWNS", "OTHER_BUG", "owner",
           "replay_rule_case"]

DEFAULT_EXAMPLES = 40  # per rule: every planted broken rule is found within ~10 (tests/test_engine_rules.py)
# The discrepancy kind (gs.Result.kinds, report titles) of each cause a rule search can give.
KIND = {"implicit-seed-non-scalar": "implicit-seed", "implicit-seed-refused": "implicit-seed",
        "seed-shape-accepted": "seed-shape", "seed-ignored": "value", "seed-misapplied": "value",
        "accumulation-overwrite": "accumulation", "uses-overwrite": "accumulation", "backward-order": "accumulation",
        "stale-intermediate-grads": "accumulation",
        "root-grad-assigned": "accumulation", "grad-not-updated": "accumulation", "reset-ignored": "reset",
        "no-freeing": "freeing", "repeated-input-dropped": "repeated-argument", "none-vs-zeros": "none-vs-zeros",
        "error-type": "error-type", "wrong-vjp": "value", "unexplained": "value", "grad-on-constant": "requires-grad",
        "retain-graph-ignored": "freeing", "backward-raises": "error-type",
        "forward-mutates-input": "value", "backward-mutates-values": "value"}
# torch-specific details: failures with strict=True, notes with strict=False
STRICT_ONLY = {"no-freeing", "none-vs-zeros", "error-type"}
# The causes each rule is about.  A rule's scenarios can fail for another rule's reason (an engine that drops
# one use's gradient fails the 'reset' and 'freeing' scenarios too, whose calls use a tensor twice): such a
# finding is filed under the rule its cause breaks, and the rule that only met it reads "passed apart from"
# that bug (status OTHER_BUG) -- it was not blamed for a bug in code it does not test.
_ACCUMULATION = {"accumulation-overwrite", "stale-intermediate-grads", "root-grad-assigned", "grad-not-updated"}
OWNS = {"implicit-seed-scalar": {"implicit-seed-refused"}, "implicit-seed-non-scalar": {"implicit-seed-non-scalar"},
        "seed-shape": {"seed-shape-accepted"}, "seed-values": {"seed-ignored", "seed-misapplied", "grad-not-updated"},
        "accumulate-calls": _ACCUMULATION, "accumulate-roots": _ACCUMULATION,
        "accumulate-uses": {"accumulation-overwrite", "uses-overwrite", "grad-not-updated", "backward-order"}, "reset": {"reset-ignored"},
        "freeing": {"no-freeing"}, "repeated-arguments": {"repeated-input-dropped"}, "requires-grad-root": set(),
        "constant-leaves": {"grad-on-constant"}}
ANY_RULE = {"error-type", "none-vs-zeros", "unexplained", "wrong-vjp", "backward-raises"}  # a failure of whichever rule meets it
OTHER_BUG = "other-bug"  # a rule status: its only failures were another rule's cause (see OWNS)


def owner(rule: str, cause_id: str) -> str:
    """The rule a finding of ``rule``'s search with cause ``cause_id`` is filed under."""
    if cause_id in ANY_RULE or rule not in OWNS or cause_id in OWNS[rule]:
        return rule
    return next((r for r, ids in OWNS.items() if cause_id in ids), rule)
SHRINK_CALLS = 80
SHRINK_SECONDS = 3.0

UNARY = ("exp", "tanh", "sin", "sigmoid", "square", "neg", "cos", "softplus", "erf")
BINARY = ("mul", "add", "sub")
REDUCE = ("sum", "mean")
NUMEL1 = [(), (1,), (1, 1), (1, 1, 1), (1, 1, 1, 1)]
NOT_NUMEL1 = [(2,), (0,), (3, 1), (1, 2), (2, 3), (0, 3), (2, 1, 1), (1, 0)]
SHAPES = [(), (1,), (2,), (3,), (2, 3), (1, 3), (2, 1), (1, 1)]


@dataclasses.dataclass
class RuleFinding:
    """One distinct failure: the rule whose search found it, its cause, the (shrunk) scenario."""

    rule: str
    cause: Cause
    scenario: Scenario
    engine_trace: Trace
    reference_trace: Trace
    examples: int  # scenarios this rule's search ran until it was found
    seconds: float
    also: list = dataclasses.field(default_factory=list)  # other rules that failed with this cause

    @property
    def key(self) -> tuple:
        c = self.cause
        if c.id == "error-type" and c.op:  # a crash of one op is that op's finding, one per exception type
            return (c.id, c.op, crash_type(c)) if crash_type(c) else (c.id, c.op)
        if c.id == "wrong-vjp":
            return (c.id, c.op)
        if c.id == "unexplained":
            return (c.id, self.rule)
        return (c.id,)

    def message(self, engine_name: str) -> str:
        return (f"engine {engine_name!r} breaks the §5 rule '{RULES[self.rule].title}': {self.cause.summary} "
                f"[{self.cause.id}]")

    def snippet(self) -> str:
        return self.scenario.code() + "\n# " + self.cause.evidence.split("\n")[0]


@dataclasses.dataclass
class RulesResult:
    status: dict  # rule -> {"status": passed|failed|skipped, "reason", "examples", "causes"}
    findings: list
    seconds: float = 0.0
    hung: tuple | None = None  # (rule, Scenario) the engine ran past the per-scenario timeout on

    def to_json(self) -> dict:
        return {"rules": self.status, "findings": [
            {"rule": f.rule, "cause": f.cause.to_json(), "examples": f.examples, "seconds": round(f.seconds, 3),
             "also": f.also} for f in self.findings], "seconds": round(self.seconds, 3)}


@dataclasses.dataclass
class Rule:
    name: str
    title: str
    strategy: Callable  # (vocab) -> SearchStrategy[Scenario] | None (None: cannot run on these ops)
    strict_only: bool = False
    needs: str = "an elementwise op of the table (exp, tanh, sin, sigmoid, square, neg, ...)"


# ---------------------------------------------------------------------------------------------
# drawing scenarios
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Vocab:
    unary: list
    binary: list
    reduce: list

    @property
    def any(self) -> bool:
        return bool(self.unary or self.binary)


def _values(rng, shape, lo=0.3, hi=1.5):
    return rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)


def _graph(draw, V: Vocab, shape, *, min_depth=1, max_nodes=4, n_leaves=None, fan_out=False, repeated=False,
           reduce=False):
    """(leaves, nodes): every tensor has ``shape`` (a last sum/mean to () when ``reduce``)."""
    from hypothesis import strategies as st

    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    n_leaves = n_leaves if n_leaves is not None else draw(st.integers(1, 2))
    leaves = {f"x{i}": _values(rng, shape) for i in range(n_leaves)}
    names = list(leaves)
    nodes = []
    n = draw(st.integers(min_depth, max(min_depth, max_nodes)))
    for k in range(n):
        last = nodes[-1][0] if nodes else names[0]
        name = f"h{k + 1}"
        want_bin = V.binary and (not V.unary or draw(st.booleans()) or (repeated and k == 0) or (fan_out and k == 1))
        if want_bin:
            op = draw(st.sampled_from(V.binary))
            if repeated and k == 0:
                a = b = last
            elif fan_out and k == 1:
                a, b = "x0", last
            else:
                a = last if k < min_depth else draw(st.sampled_from(names))
                b = draw(st.sampled_from(names))
            ins = (a, b)
        else:
            op = draw(st.sampled_from(V.unary))
            ins = ("x0",) if fan_out and k == 1 else (last if k < min_depth else draw(st.sampled_from(names)),)
        nodes.append((name, op, ins, {}))
        names.append(name)
    if fan_out and len(nodes) >= 2 and not any("x0" in ins for _n, _o, ins, _p in nodes[1:]):
        nodes.append((f"h{len(nodes) + 1}", V.binary[0] if V.binary else V.unary[0],
                      ("x0", nodes[-1][0]) if V.binary else ("x0",), {}))
    if reduce and V.reduce:
        nodes.append((f"h{len(nodes) + 1}", draw(st.sampled_from(V.reduce)), (nodes[-1][0],), {}))
    _assume_well_conditioned(leaves, nodes)
    return leaves, nodes, rng


def _assume_well_conditioned(leaves, nodes) -> None:
    """Reject graphs whose saturating ops see |x| > 3: there (tanh(8)' = 1 - t^2 ~ 3e-7) the
    derivative formula cancels and two correct engines differ by far more than the exact-oracle
    tolerance of tolerances.py, which assumes O(1) condition (at |x| <= 3, tanh' >= 0.0099: a
    relative error of at most ~eps / 0.01 = 2e-14, inside 2^12 eps)."""
    from hypothesis import assume

    from .scenario import forward_values

    vals = forward_values(Scenario(leaves, nodes, []))
    for _name, op, ins, _p in nodes:
        if op in _SATURATING and any(np.any(np.abs(vals[i]) > 3.0) for i in ins):
            assume(False)
    assume(all(np.all(np.abs(v) < 1e3) for v in vals.values()))


_SATURATING = {"tanh", "sigmoid", "exp", "sin", "cos", "softplus", "erf"}


def _seed(rng, shape):
    return rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


def _seed_or_implicit(draw, rng, shape):
    """A random seed, or (numel 1) sometimes the implicit one: engines whose backward() without a
    seed takes another path (micrograd's root.backward() assigns the root's gradient) show it here."""
    from hypothesis import strategies as st

    if int(np.prod(shape, dtype=np.int64)) == 1 and draw(st.booleans()):
        return None
    return _seed(rng, shape)


def _s_implicit_scalar(V):
    from hypothesis import strategies as st

    @st.composite
    def draw(draw):
        if V.reduce and draw(st.booleans()):
            shape = draw(st.sampled_from(SHAPES[1:]))
            leaves, nodes, _ = _graph(draw, V, shape, max_nodes=2, reduce=True)
        else:
            shape = draw(st.sampled_from(NUMEL1))
            leaves, nodes, _ = _graph(draw, V, shape, max_nodes=3)
        return Scenario(leaves, nodes, [Step("backward", nodes[-1][0], None, False)], "implicit-seed-scalar")

    return draw()


def _s_implicit_nonscalar(V):
    from hypothesis import strategies as st

    @st.composite
    def draw(draw):
        shape = draw(st.sampled_from(NOT_NUMEL1))
        leaves, nodes, _ = _graph(draw, V, shape, max_nodes=2)
        return Scenario(leaves, nodes, [Step("backward", nodes[-1][0], None, False)], "implicit-seed-non-scalar")

    return draw()


def _wrong_shapes(shape) -> list:
    out = {(), (1,), (1,) + tuple(shape), tuple(shape) + (1,), tuple(reversed(shape)), (int(np.prod(shape)) + 1,)}
    if len(shape) >= 1:
        out |= {tuple(shape[1:]), (1,) + tuple(shape[1:]), tuple(shape[:-1]) + (1,)}
    return sorted((s for s in out if s != tuple(shape)), key=lambda s: (len(s), s))


def _s_seed_shape(V):
    from hypothesis import strategies as st

    @st.composite
    def draw(draw):
        shape = draw(st.sampled_from(SHAPES + [(2, 2, 3)]))
        leaves, nodes, rng = _graph(draw, V, shape, max_nodes=2)
        bad = draw(st.sampled_from(_wrong_shapes(shape)))
        root = nodes[-1][0]
        return Scenario(leaves, nodes, [Step("backward", root, _seed(rng, bad), True),
                                        Step("backward", root, _seed(rng, shape), False)], "seed-shape")

    return draw()


def _s_seed_values(V):
    from hypothesis import strategies as st

    @st.composite
    def draw(draw):
        shape = draw(st.sampled_from(SHAPES))
        leaves, nodes, rng = _graph(draw, V, shape, min_depth=draw(st.integers(1, 2)), max_nodes=4)
        return Scenario(leaves, nodes, [Step("backward", nodes[-1][0], _seed(rng, shape), False)], "seed-values")

    return draw()


def _s_calls(V):
    from hypothesis import strategies as st

    @st.composite
    def draw(draw):
        shape = draw(st.sampled_from(NUMEL1[:3] + SHAPES))  # one-element roots: implicit seeds too
        leaves, nodes, rng = _graph(draw, V, shape, min_depth=2, max_nodes=4)
        root = nodes[-1][0]
        n = draw(st.integers(2, 3))
        steps = [Step("backward", root, _seed_or_implicit(draw, rng, shape), True) for _ in range(n)]
        return Scenario(leaves, nodes, steps, "accumulate-calls")

    return draw()


def _s_roots(V):
    from hypothesis import strategies as st

    @st.composite
    def draw(draw):
        # one-element roots half the time: their implicit seed is where engines take another path
        shape = draw(st.sampled_from(NUMEL1[:3] + SHAPES))
        leaves, nodes, rng = _graph(draw, V, shape, min_depth=2, max_nodes=4)
        # roots: the last node, maybe a node it uses (a root used again inside the graph), maybe a leaf
        others = []
        if len(nodes) > 1 and draw(st.booleans()):
            others.append(draw(st.sampled_from([n for n, *_ in nodes[:-1]])))
        if not others or draw(st.booleans()):
            others.append(draw(st.sampled_from(list(leaves))))
        roots = draw(st.permutations([nodes[-1][0]] + others))
        steps = [Step("backward", r, _seed_or_implicit(draw, rng, shape), True) for r in roots]
        return Scenario(leaves, nodes, steps, "accumulate-roots")

    return draw()


def _s_uses(V):
    from hypothesis import strategies as st

    @st.composite
    def draw(draw):
        shape = draw(st.sampled_from(SHAPES))
        leaves, nodes, rng = _graph(draw, V, shape, min_depth=2, max_nodes=4, fan_out=True)
        return Scenario(leaves, nodes, [Step("backward", nodes[-1][0], _seed(rng, shape), False)], "accumulate-uses")

    return draw()


def _s_reset(V):
    from hypothesis import strategies as st

    @st.composite
    def draw(draw):
        shape = draw(st.sampled_from(NUMEL1[:3] + SHAPES))  # one-element roots: implicit seeds too
        leaves, nodes, rng = _graph(draw, V, shape, min_depth=draw(st.integers(1, 2)), max_nodes=3)
        root = nodes[-1][0]
        reset = draw(st.lists(st.sampled_from(list(leaves)), min_size=1, unique=True))
        steps = [Step("backward", root, _seed_or_implicit(draw, rng, shape), True)] + [Step("zero_grad", x) for x in reset]
        steps.append(Step("backward", root, _seed_or_implicit(draw, rng, shape), False))
        return Scenario(leaves, nodes, steps, "reset")

    return draw()


def _s_freeing(V):
    from hypothesis import strategies as st

    @st.composite
    def draw(draw):
        shape = draw(st.sampled_from(SHAPES))
        leaves, nodes, rng = _graph(draw, V, shape, max_nodes=3)
        root = nodes[-1][0]
        return Scenario(leaves, nodes, [Step("backward", root, _seed(rng, shape), False),
                                        Step("backward", root, _seed(rng, shape), False)], "freeing")

    return draw()


def _s_repeated(V):
    from hypothesis import strategies as st

    @st.composite
    def draw(draw):
        shape = draw(st.sampled_from(SHAPES))
        leaves, nodes, rng = _graph(draw, V, shape, min_depth=draw(st.integers(1, 2)), max_nodes=3, repeated=True)
        return Scenario(leaves, nodes, [Step("backward", nodes[-1][0], _seed(rng, shape), False)], "repeated-arguments")

    return draw()


def _s_no_grad_root(V):
    from hypothesis import strategies as st

    @st.composite
    def draw(draw):
        shape = draw(st.sampled_from(SHAPES))
        leaves, nodes, rng = _graph(draw, V, shape, max_nodes=2, n_leaves=1)
        return Scenario(leaves, nodes, [Step("backward", nodes[-1][0], _seed(rng, shape), False)], "requires-grad-root",
                        {"x0": False})

    return draw()


def _s_constant_leaves(V):
    """Trainable and constant leaves in one graph (x0 requires grad, c does not; an op takes both): after every
    backward c's grad stays None, as torch leaves it (an engine that stores a gradient for every input of
    the backward, whatever requires_grad says, passes every other rule: tryout8 F3)."""
    from hypothesis import strategies as st

    @st.composite
    def draw(draw):
        shape = draw(st.sampled_from(SHAPES))
        leaves, nodes, rng = _graph(draw, V, shape, max_nodes=3)
        leaves["c"] = _values(rng, shape)
        # c joins the chain (first or second operand) at a drawn place: the op then has one input of each kind
        at = draw(st.integers(0, len(nodes)))
        prev = nodes[at - 1][0] if at else "x0"
        pair = (prev, "c") if draw(st.booleans()) else ("c", prev)
        name = f"h{len(nodes) + 1}"
        nodes.insert(at, (name, draw(st.sampled_from(V.binary)), pair, {}))
        if at < len(nodes) - 1:  # the next node takes the new one in place of the one it replaced
            n2, op2, ins2, p2 = nodes[at + 1]
            nodes[at + 1] = (n2, op2, tuple(name if i == prev else i for i in ins2), p2)
        _assume_well_conditioned(leaves, nodes)
        root = nodes[-1][0]
        n = draw(st.integers(1, 2))
        steps = [Step("backward", root, _seed(rng, shape), j < n - 1) for j in range(n)]
        return Scenario(leaves, nodes, steps, "constant-leaves", {"c": False})

    return draw()


def _needs_binary(fn):
    return lambda V: fn(V) if V.binary else None


RULES: dict[str, Rule] = {r.name: r for r in [
    Rule("implicit-seed-scalar", "implicit seed accepted where numel == 1 (any shape), equal to a seed of ones",
         _s_implicit_scalar),
    Rule("implicit-seed-non-scalar", "implicit seed refused where numel != 1 (numel 0 included)", _s_implicit_nonscalar),
    Rule("seed-shape", "an explicit seed must have exactly the output's shape (no broadcasting)", _s_seed_shape),
    Rule("seed-values", "grad = J^T . seed", _s_seed_values),
    Rule("accumulate-calls", "gradients accumulate across backward calls", _s_calls),
    Rule("accumulate-roots", "gradients accumulate across roots (also a root used inside the graph, or a leaf)",
         _s_roots),
    Rule("accumulate-uses", "gradients accumulate across every use of a leaf", _needs_binary(_s_uses),
         needs="a binary elementwise op (mul, add or sub)"),
    Rule("reset", "zero_grad resets the gradient (to None)", _s_reset),
    Rule("freeing", "a second backward through freed buffers raises (retain_graph=False)", _s_freeing,
         strict_only=True),
    Rule("repeated-arguments", "op(x, x) counts both uses of x", _needs_binary(_s_repeated),
         needs="a binary elementwise op (mul, add or sub)"),
    Rule("requires-grad-root", "backward on a root that does not require grad raises", _s_no_grad_root,
         strict_only=True),
    Rule("constant-leaves", "a leaf that does not require grad never gets a gradient (its grad stays None)",
         _needs_binary(_s_constant_leaves), needs="a binary elementwise op (mul, add or sub)"),
]}


# ---------------------------------------------------------------------------------------------
# the searches
# ---------------------------------------------------------------------------------------------


class _Found(Exception):
    pass


class _Stop(BaseException):
    """Out of Hypothesis at once: shrinking or the time budget is spent."""


class _Hung(BaseException):
    """The engine ran past the per-scenario timeout: no rule can be trusted to finish."""


def vocab(eng, ops=None) -> Vocab:
    def ok(op):
        if ops is not None and op not in ops:
            return False
        try:
            return bool(eng.supports(op))
        except Exception:  # noqa: BLE001 - a supports() that raises: treated as unsupported
            return False

    return Vocab([o for o in UNARY if ok(o)], [o for o in BINARY if ok(o)], [o for o in REDUCE if ok(o)])


class _Search:
    """One rule's search: rounds of Hypothesis, each ending at a failure with a new cause."""

    def __init__(self, rule: Rule, eng, ctx, known: dict, strict: bool, budget: int, deadline, seed: int,
                 timeout: float | None = None):
        self.rule, self.eng, self.ctx, self.known, self.strict = rule, eng, ctx, known, strict
        self.timeout = timeout
        self.budget, self.deadline, self.seed = budget, deadline, seed
        self.ref = _engines.ReferenceEngine()
        self.examples = 0
        self.causes: list = []
        self.t0 = time.perf_counter()
        self.errors: list = []

    def evaluate(self, sc: Scenario) -> RuleFinding | None:
        got, want = run(sc, self.eng, self.timeout), run(sc, self.ref)
        if timed_out(got):
            raise _Hung(sc)
        if want.build is not None:
            return None  # the drawn graph is not valid for the reference either: not a scenario
        if first_difference(sc, got, want, none_is_zeros=not self.strict, types=self.strict) is None:
            return None
        try:
            cause = _ws.diagnose(sc, got, want, self.ctx, strict=self.strict)
        except ScenarioTimeout:
            raise _Hung(sc) from None
        if cause is None:
            return None
        return RuleFinding(self.rule.name, cause, sc, got, want, self.examples, time.perf_counter() - self.t0)

    def run(self, strategy) -> list:
        from hypothesis import HealthCheck, Phase, Verbosity, given, settings
        from hypothesis import seed as hseed

        found = []
        rnd = 0
        while self.examples < self.budget and not self._late():
            rnd += 1
            st = {"target": None, "last": None, "shrinks": 0, "until": None}

            @hseed(self.seed * 1000 + rnd)
            @settings(max_examples=max(1, self.budget - self.examples), deadline=None, database=None,
                      phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck),
                      verbosity=Verbosity.quiet, report_multiple_bugs=False, print_blob=False)
            @given(strategy)
            def prop(sc):
                if st["target"] is None:
                    if self._late():
                        raise _Stop()
                    self.examples += 1
                else:
                    st["shrinks"] += 1
                    if st["shrinks"] > SHRINK_CALLS or time.perf_counter() > st["until"] or self._late():
                        raise _Stop()  # (the time budget bounds the shrinking too: review M5)
                f = self.evaluate(sc)
                if f is None:
                    return
                if f.cause.id not in self.causes:
                    self.causes.append(f.cause.id)
                if f.key in self.known and f.key != st["target"]:
                    first = self.known[f.key]  # the same bug, already reported by another rule
                    if self.rule.name != first.rule and self.rule.name not in first.also:
                        first.also.append(self.rule.name)
                    return
                if st["target"] is None:
                    st["target"], st["until"] = f.key, time.perf_counter() + SHRINK_SECONDS
                if f.key != st["target"]:
                    return
                st["last"] = f
                raise _Found()

            try:
                prop()
            except (_Found, _Stop):
                pass
            except _Hung:
                raise
            except Exception as e:  # noqa: BLE001 - Hypothesis itself gave up (flaky engine, health)
                if st["last"] is None:
                    self.errors.append(f"{self.rule.name}: Hypothesis stopped: {type(e).__name__}: {str(e)[:200]}")
                    break
            if st["last"] is None:
                break  # a whole round without a new cause: the budget is spent or nothing more to find
            f = st["last"]
            self.known[f.key] = f
            self.ctx.known_ids.add(f.cause.id)
            found.append(f)
        return found

    def _late(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline


def check_rules(engine, *, max_examples: int | None = None, seconds: float | None = None, seed: int | None = 0,
                strict: bool = True, rules=None, on_finding: Callable | None = None, ops=None,
                timeout: float | None = None) -> RulesResult:
    """Run every §5 rule's search on ``engine`` (an Engine, a built-in name or ``"module:attr"``).

    ``max_examples`` is per rule (default :data:`DEFAULT_EXAMPLES`); ``seconds`` bounds the whole
    run.  With ``strict=False`` torch-specific details (freeing, None vs zeros) are not checked.
    ``on_finding(finding)`` is called for every distinct finding as soon as it is shrunk.  ``ops``
    restricts the ops scenarios may use; ``timeout`` (seconds) cuts an engine that hangs on a
    scenario, and the rules left are skipped with the reason.
    """
    t0 = time.perf_counter()
    eng = _engines.get(engine)
    V = vocab(eng, None if ops is None else set(ops))
    hung = hung_on = None
    deadline = None if seconds is None else t0 + float(seconds)
    budget = DEFAULT_EXAMPLES if max_examples is None else max(1, int(max_examples))
    ctx = _ws.Context(eng, V.unary + V.binary + V.reduce, timeout)
    known: dict = {}
    status: dict = {}
    findings: list = []
    for name in rules or RULES:
        rule = RULES[name]
        if rule.strict_only and not strict:
            status[name] = {"status": "skipped", "reason": "strict=False: a torch-specific detail, not checked"}
            continue
        strategy = rule.strategy(V) if V.any else None
        if strategy is None:
            status[name] = {"status": "skipped", "reason": f"the engine supports no {rule.needs}"}
            continue
        if deadline is not None and time.perf_counter() > deadline:
            status[name] = {"status": "skipped", "reason": "the time budget was spent before this rule ran"}
            continue
        if hung is not None:
            status[name] = {"status": "skipped", "reason": f"the engine hung on a scenario of rule {hung} "
                            f"(timeout {timeout:g} s)"}
            continue
        s = _Search(rule, eng, ctx, known, strict, budget, deadline, int(seed or 0) + 7919 * len(status), timeout)
        try:
            new = s.run(strategy)
        except _Hung as h:
            hung, hung_on = name, (name, h.args[0] if h.args else None)
            status[name] = {"status": "skipped", "reason": f"the engine ran past the per-scenario timeout of "
                            f"{timeout:g} s (cut; nothing concluded)", "title": rule.title}
            continue
        for f in new:
            f.rule = owner(f.rule, f.cause.id)
            findings.append(f)
            if on_finding is not None:
                on_finding(f)
        st = {"status": "failed" if s.causes else "passed", "examples": s.examples, "causes": sorted(set(s.causes)),
              "title": rule.title}
        if s.errors:
            st["errors"] = s.errors
        if not s.causes and s.examples == 0:
            st = {"status": "skipped", "reason": "no scenario ran (time budget)", "title": rule.title}
        status[name] = st
    _file_by_owner(status, findings)
    return RulesResult(status, findings, time.perf_counter() - t0, hung_on)


def _file_by_owner(status: dict, findings: list) -> None:
    """A rule that failed only with other rules' causes gets OTHER_BUG (and ``owners``: cause -> rule); a
    rule a finding is filed under is failed with that cause, whatever its own search met."""
    for name, st in status.items():
        causes = st.get("causes") or []
        if st.get("status") == "failed" and causes and all(owner(name, c) != name for c in causes):
            st["status"], st["owners"] = OTHER_BUG, {c: owner(name, c) for c in causes}
    for f in findings:
        st = status.get(f.rule)
        if st is not None and st.get("status") in ("passed", OTHER_BUG) and f.cause.id not in ANY_RULE:
            st["status"] = "failed"
            st["causes"] = sorted(set(st.get("causes") or []) | {f.cause.id})
            st.pop("owners", None)


def explain_engine_finding(engine, d, timeout: float | None = None) -> None:
    """Set ``d.cause`` (a value discrepancy of ``engine`` on a case) to the engine-level cause that
    reproduces the engine's numbers exactly on this case and on the probes, when there is one; it
    replaces a cheaper guess (an ambiguous case: a leaf root's gradient replaced is both 'overwrite'
    and 'root assigned' until a probe tells them apart); otherwise ``d.cause`` is left as it is."""
    if getattr(d, "case", None) is None:
        return
    if d.kind in ("timeout", "crash"):
        return
    c = getattr(d, "cause", None)
    if d.kind == "raised" and c is not None and (c.id == "shared-broadcast-reduction" or c.pattern == "broadcast-reduction"):
        return  # a wrongly shaped gradient made a later backward raise (review F7): that is what the raise says
    cause = diagnose_case(engine, d.case, timeout)
    if cause is not None:
        d.cause = cause


def diagnose_case(engine, case, timeout: float | None = None) -> Cause | None:
    """The engine-level cause of an engine's wrong gradients on a value case (the calls the engine
    oracle makes), or None when no known wrong semantics reproduces them exactly (then the
    disagreement is about values: a node's VJP, for the localisation to find)."""
    eng = _engines.get(engine)
    sc = Scenario.from_case(case)
    try:
        got, want = run(sc, eng, timeout), run(sc, _engines.ReferenceEngine())
        if timed_out(got):
            return None
        cause = _ws.diagnose(sc, got, want, _ws.Context(eng, [n.op for n in case.nodes], timeout), strict=False)
    except Exception:  # noqa: BLE001 - a case the simulator cannot take (e.g. too large): no engine-level cause
        return None
    if cause is None or cause.id in ("unexplained", "wrong-vjp"):
        return None
    return cause


def replay_rule_case(engine, case, *, strict: bool = True, timeout: float | None = None) -> tuple[Cause | None, str]:
    """Re-run the calls of a §5 rule finding (``case.meta["scenario_steps"]``, written by
    :meth:`Scenario.to_case`) on ``engine`` and on the reference: ``(cause, text)`` with the cause when
    the engine still departs from torch's rules (None when it now behaves), and the calls as text.  ValueError: the file's calls are not valid."""
    sc = Scenario.from_rule_case(case)
    eng = _engines.get(engine)
    got, want = run(sc, eng, timeout), run(sc, _engines.ReferenceEngine())
    if want.build is not None:
        raise ValueError(f"the reference engine cannot build this scenario's graph: {want.build}")
    if timed_out(got):
        return Cause("unexplained", f"the engine ran past the timeout of {timeout:g} s on the scenario",
                     evidence=str(got.build)), sc.code()
    # The same two steps as a rule search's (_Search.evaluate): a difference, then its diagnosis.
    if first_difference(sc, got, want, none_is_zeros=not strict, types=strict) is None:
        return None, sc.code()
    return _ws.diagnose(sc, got, want, _ws.Context(eng, [n[1] for n in sc.nodes], timeout), strict=strict), sc.code()
