"""Verifying users' code: ``gs.verify_op``, ``gs.verify_torch_function``, ``gs.verify_engine``.

Each runs a Hypothesis search (random graphs, shapes, values and seeds; failures are shrunk)
within a budget of examples or seconds and returns a :class:`Result`.  Runs are deterministic
for a given ``seed``; when no seed is given one is drawn and recorded, so every result says how
to run it again.

* ``verify_op(op)``: a user op (``gs.Op``) at the root of small graphs, deep inside larger ones
  (fed by fan-out, its output used twice, multiplied by random tensors so that its upstream
  gradient is never all ones), against table ops, with broadcasting where its signature allows
  it (loop dimensions that really broadcast, batch dims of matmul-like ops), with its params
  drawn, big sides (5 to 8) and high ranks (up to 4) in part of the cases, exact zeros and
  repeated values among the inputs.  Every applicable oracle: finite differences of the
  forward, the jacobian oracle (the op's own ``jvp``, or a finite-difference JVP of its forward,
  compared with a finite-difference tolerance), torch (``torch=``).  The VJP's contract (count, exact shape,
  dtype, no writing into its arguments, no exception) is checked on every call.
* ``verify_torch_function(fn)``: ``fn`` (e.g. ``MyFunction.apply``) wrapped as a user op whose
  VJP is fn's own backward (``torch.autograd.grad``) and whose torch twin is fn itself, so the
  backward is checked both call by call and inside whole torch graphs (fn called several times,
  inputs used twice), plus backward twice (accumulation, state kept between calls).
* ``verify_engine(engine)``: an :class:`gradspec.engines.Engine` adapter on random graphs of
  the ops it supports, plus every backward() rule of CONTRACT §5 as a check of its own
  (implicit seeds, seed shapes, J^T seed, accumulation across calls/roots/uses, reset,
  retain_graph, freeing), differential against torch wherever torch decides.

Example::

    >>> import numpy as np, gradspec as gs
    >>> cube = gs.Op("cube", forward=lambda x: x ** 3, vjp=lambda g, x, out: (3 * x ** 2 * g,))
    >>> gs.verify_op(cube, max_examples=5, seed=0).ok
    True
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import html as _html
import json
import math
import os
import random
import time
import traceback
import warnings
from typing import Any, Callable

import numpy as np

from . import engines as _engines
from . import oracles as _oracles
from .case import Case, Leaf, NodeDef
from .check import Discrepancy, _has_fd_jvp, check
from .ops import _registry
from .ops._spec import OpSpec
from .ops.user import ERROR_KINDS, FD_JVP_SOURCE, Op, UserOpError, fd_rounding_noise, fd_step_scale, import_path_of

__all__ = [
    "Result",
    "VerifyDiscrepancy",
    "verify_op",
    "verify_torch_function",
    "verify_engine",
    "fd_jacobian_error",
    "FDJacobianOracle",
    "EngineOracle",
    "DEFAULT_MAX_EXAMPLES",
    "COMPANIONS",
]

DEFAULT_MAX_EXAMPLES = 60  # ~1-4 s for a user op, a few seconds for an engine
SHRINK_CALLS = 120  # shrinking attempts per failure before the smallest case so far is kept (deterministic)
SHRINK_SECONDS = 10.0  # and a safety net in time, for very slow cases
COMPANIONS = ("add", "mul", "sub", "tanh", "exp", "sum", "mean", "matmul", "unsqueeze", "permute")


# =============================================================================================
# results
# =============================================================================================


@dataclasses.dataclass
class VerifyDiscrepancy(Discrepancy):
    """A discrepancy found by a ``verify_*`` run: what ``check()`` reports, plus how to replay it.

    ``kind`` is one of check()'s (``value``, ``shape``, ``none-vs-zeros``, ``nan-inf-pattern``,
    ``raised``), a user-op contract breach (``vjp-raised``, ``vjp-count``, ``vjp-shape``,
    ``vjp-dtype``, ``vjp-writes-input``, ``forward-raised``, ``jvp-raised``), or a backward()
    rule an engine broke (``implicit-seed``, ``seed-shape``, ``accumulation``,
    ``repeated-argument``, ``reset``, ``retain-graph``, ``freeing``, ``none-before-backward``,
    ``error-type``, ``requires-grad``).  ``case`` is the (shrunk) case where there is one;
    ``snippet`` is a few lines of Python that show an engine rule being broken.
    """

    replay: str = ""
    snippet: str | None = None
    check_name: str | None = None
    verdict: Any = dataclasses.field(default=None, repr=False)

    @property
    def signature(self) -> tuple:
        # One finding per kind of failure and oracle pair (or engine rule): the same bug seen in
        # another graph is the same finding, so the search moves on to something new.
        return (self.kind, tuple(sorted(self.oracles)), self.check_name or "")

    def describe(self) -> str:
        lines = [f"[{self.kind}] {self.message}"]
        if self.case is not None:
            lines.append("  case:")
            try:
                lines += ["  " + ln for ln in self.case.to_text().splitlines()]
            except Exception as e:  # noqa: BLE001 - a case that cannot even print is still reported
                lines.append(f"    (cannot list the case: {type(e).__name__}: {e})")
        if self.snippet:
            lines.append("  what happened:")
            lines += ["    " + ln for ln in self.snippet.splitlines()]
        if self.replay:
            lines.append("  replay: " + self.replay.replace("\n", "\n          "))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()


@dataclasses.dataclass
class Result:
    """The outcome of a ``verify_*`` run.

    ``ok`` is true when no discrepancy was found; ``cases_run`` counts generated cases (shrinking
    re-runs excluded); ``discrepancies`` are :class:`VerifyDiscrepancy` s (shrunk cases);
    ``notes`` are observations that do not fail the run (torch-specific details under
    ``strict=False``, oracles that could not run...); ``checks`` maps each named property of an
    engine run to ``"passed"``, ``"failed"``, ``"note"`` or ``"skipped: why"``.
    """

    target: str
    what: str  # "op" | "torch function" | "engine"
    seed: int
    discrepancies: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    cases_run: int = 0
    shrink_runs: int = 0
    seconds: float = 0.0
    time_to_first: float | None = None
    cases_to_first: int | None = None
    max_examples: int | None = None
    budget_seconds: float | None = None
    strict: bool | None = None
    checks: dict = dataclasses.field(default_factory=dict)
    op_counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    pair_counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    pair_agree: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    replay: str = ""

    @property
    def status(self) -> str:
        """``"agree"``, ``"disagree"`` or ``"inconclusive"`` (CONTRACT §3); ``ok`` is True only for agree."""
        if self.discrepancies:
            return "disagree"
        if not self.cases_run:
            return "inconclusive"
        return "agree"

    @property
    def reason(self) -> str:
        """Why the run was inconclusive ("" otherwise)."""
        return "no case ran" if self.status == "inconclusive" else ""

    @property
    def ok(self) -> bool:
        return self.status == "agree"

    @property
    def kinds(self) -> list[str]:
        return [d.kind for d in self.discrepancies]

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def summary(self) -> str:
        n = len(self.discrepancies)
        head = "OK" if self.ok else f"FAILED ({n} discrepanc{'y' if n == 1 else 'ies'})"
        lines = [
            f"gradspec verify {self.what} {self.target}: {head} — {self.cases_run} cases in {self.seconds:.2f} s, "
            f"seed {self.seed}"
        ]
        if self.time_to_first is not None:
            lines.append(f"  first discrepancy after {self.time_to_first:.2f} s ({self.cases_to_first} cases)")
        if self.checks:
            failed = [k for k, v in self.checks.items() if v == "failed"]
            lines.append(f"  backward() rules: {sum(v == 'passed' for v in self.checks.values())} passed"
                         + (f", failed: {', '.join(failed)}" if failed else ""))
        for i, d in enumerate(self.discrepancies):
            lines.append(f"--- discrepancy {i + 1} of {len(self.discrepancies)}")
            lines.append(d.describe())
        if self.notes:
            lines.append("notes:")
            lines += [f"  - {n}" for n in self.notes]
        if not self.ok and self.replay:
            lines.append(f"replay the whole run: {self.replay}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "what": self.what,
            "ok": self.ok,
            "seed": self.seed,
            "cases": self.cases_run,
            "shrink_runs": self.shrink_runs,
            "discrepancies": len(self.discrepancies),
            "seconds": round(self.seconds, 3),
            "time_to_first": None if self.time_to_first is None else round(self.time_to_first, 3),
            "cases_to_first": self.cases_to_first,
            "strict": self.strict,
            "checks": dict(self.checks),
            "notes": list(self.notes),
            "ops": dict(sorted(self.op_counts.items())),
            "oracles": {f"{a} vs {b}": n for (a, b), n in sorted(self.pair_counts.items())},
            "agreement": {f"{a} vs {b}": self.pair_agree[(a, b)] for (a, b) in sorted(self.pair_counts)},
            "skipped": dict(self.skipped.most_common()),
            "replay": self.replay,
            "items": [
                {"kind": d.kind, "oracles": list(d.oracles), "message": d.message, "replay": d.replay,
                 "snippet": d.snippet, "check": d.check_name}
                for d in self.discrepancies
            ],
        }

    def write_html(self, directory: str) -> str:
        """Write ``directory/index.html`` (the run), ``summary.json`` and one folder per
        discrepancy (``index.html``, and for cases ``case.json`` + ``repro.py``); returns the
        path of ``index.html``."""
        from . import report

        os.makedirs(directory, exist_ok=True)
        items = []
        for d in self.discrepancies:
            if d.case is not None:
                try:
                    folder = report.write_discrepancy_report(directory, d, d.verdict)
                except Exception as e:  # noqa: BLE001 - fall back to a plain page rather than no page
                    folder = _write_plain_page(directory, d, f"(the full report failed: {type(e).__name__}: {e})")
                _append_html(os.path.join(folder, "index.html"), _replay_html(d))
                ops = ", ".join(sorted({n.op for n in d.case.nodes}))
            else:
                folder = _write_plain_page(directory, d)
                ops = d.check_name or ""
            items.append({"id": os.path.basename(folder), "kind": d.kind, "oracles": " vs ".join(d.oracles),
                          "ops": ops, "message": d.message})
        s = self.to_json()
        summary = {
            "engine": self.target if self.what == "engine" else "reference",
            "cases": self.cases_run,
            "seconds": self.seconds,
            "seed": self.seed,
            "discrepancies": len(self.discrepancies),
            "interrupted": False,
            "oracles": s["oracles"],
            "agreement": s["agreement"],
            "ops": s["ops"],
            "skipped": s["skipped"],
        }
        index = report.write_run_report(directory, summary, items)
        extra = [f"<h2>gradspec verify {_html.escape(self.what)} <code>{_html.escape(self.target)}</code>: "
                 f"{'OK' if self.ok else 'FAILED'}</h2>"]
        if self.checks:
            extra.append("<h2>backward() rules</h2><table><tr><th class='l'>rule</th><th class='l'>outcome</th></tr>")
            for k, v in self.checks.items():
                cls = "ok" if v == "passed" else "bad" if v == "failed" else ""
                extra.append(f"<tr><td class='l'>{_html.escape(k)}</td><td class='l {cls}'>{_html.escape(v)}</td></tr>")
            extra.append("</table>")
        if self.notes:
            extra.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_html.escape(n)}</li>" for n in self.notes) + "</ul>")
        if self.replay:
            extra.append(f"<h2>Replay</h2><pre>{_html.escape(self.replay)}</pre>")
        _append_html(index, "\n".join(extra))
        report.atomic_write(os.path.join(directory, "summary.json"), json.dumps(s, indent=2, default=str))
        return index


def _append_html(path: str, fragment: str) -> None:
    from .report import atomic_write

    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = text.replace("</body>", fragment + "\n</body>", 1) if "</body>" in text else text + fragment
    atomic_write(path, text)


def _replay_html(d: VerifyDiscrepancy) -> str:
    parts = []
    if d.snippet:
        parts.append(f"<h2>What happened</h2><pre>{_html.escape(d.snippet)}</pre>")
    if d.replay:
        parts.append(f"<h2>Replay</h2><pre>{_html.escape(d.replay)}</pre>")
    return "\n".join(parts)


def _write_plain_page(directory: str, d: VerifyDiscrepancy, extra: str = "") -> str:
    from .report import atomic_write

    did = "d-" + hashlib.sha1(repr((d.kind, d.check_name, d.message)).encode()).hexdigest()[:10]
    folder = os.path.join(directory, did)
    os.makedirs(folder, exist_ok=True)
    body = (
        "<!doctype html><html><head><meta charset='utf-8'><title>gradspec discrepancy</title></head><body>"
        "<p><a href='../index.html'>&larr; run summary</a></p>"
        f"<h1>{_html.escape(d.kind)}{' (' + _html.escape(d.check_name) + ')' if d.check_name else ''}</h1>"
        f"<pre>{_html.escape(d.message)}</pre>{_html.escape(extra)}{_replay_html(d)}</body></html>"
    )
    atomic_write(os.path.join(folder, "index.html"), body)
    return folder


# =============================================================================================
# the search loop (Hypothesis, with a budget, repeated to find distinct failures)
# =============================================================================================


class _Found(Exception):
    pass


class _StopShrinking(BaseException):
    """Raised out of Hypothesis when the shrinking time is up (a BaseException, so Hypothesis
    lets it through at once instead of trying more candidates)."""


class _OutOfBudget(BaseException):
    """Raised out of Hypothesis when the time budget is spent."""


class _Runner:
    """Runs Hypothesis over ``strategy`` calling ``evaluate(case) -> [VerifyDiscrepancy]``."""

    def __init__(self, result: Result, max_examples: int | None, seconds: float | None):
        self.result = result
        self.started = time.perf_counter()
        if max_examples is None and seconds is None:
            max_examples = DEFAULT_MAX_EXAMPLES
        self.max_examples = max_examples
        self.deadline = None if seconds is None else self.started + float(seconds)
        self.found: dict = {}  # signature -> VerifyDiscrepancy
        self.memo: dict = {}

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def out_of_budget(self) -> bool:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            return True
        return self.max_examples is not None and self.result.cases_run >= self.max_examples

    def run(self, strategy, evaluate: Callable[[Case], list]) -> None:
        from hypothesis import HealthCheck, Phase, Verbosity, given, settings
        from hypothesis import seed as hyp_seed
        from hypothesis.errors import Flaky

        R = self.result
        rounds = 0
        while not self.out_of_budget():
            rounds += 1
            state = {"shrinking": False, "since": None, "last": None, "calls": 0, "target": set()}

            def one(case):
                key = _case_key(case)
                if state["shrinking"]:
                    R.shrink_runs += 1
                    state["calls"] += 1
                    if state["calls"] > SHRINK_CALLS or time.perf_counter() - state["since"] > SHRINK_SECONDS:
                        raise _StopShrinking()  # keep the smallest failing case found so far
                    if key in self.memo:
                        new = self.memo[key]
                    else:
                        new = self._new(evaluate(case))
                        self.memo[key] = new
                    # Shrink towards a smaller case of the SAME failure; others wait for a later round.
                    new = [d for d in new if d.signature in state["target"]]
                else:
                    if self.out_of_budget():
                        raise _OutOfBudget()
                    R.cases_run += 1
                    new = self._new(evaluate(case))
                    self.memo[key] = new
                    if new and R.time_to_first is None:
                        R.time_to_first = self.elapsed()
                        R.cases_to_first = R.cases_run
                if new:
                    if not state["shrinking"]:
                        state["shrinking"], state["since"] = True, time.perf_counter()
                        state["target"] = {d.signature for d in new}
                    state["last"] = new
                    raise _Found(new)

            remaining = 10**9 if self.max_examples is None else max(1, self.max_examples - R.cases_run)

            @settings(max_examples=remaining, deadline=None, database=None, derandomize=False,
                      phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck),
                      verbosity=Verbosity.quiet, print_blob=False, report_multiple_bugs=False)
            @given(strategy)
            def prop(case):
                one(case)

            prop = hyp_seed(R.seed + 7919 * rounds)(prop)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    prop()
                break  # a whole round without anything new: done
            except _Found as f:
                self._record(f.args[0])
            except _StopShrinking:
                self._record(state["last"])
            except _OutOfBudget:
                break
            except Flaky:
                if state["last"]:
                    self._record(state["last"])
                else:
                    break
            except Exception as e:  # noqa: BLE001 - e.g. strategies could not build any case
                from hypothesis.errors import Unsatisfiable

                if isinstance(e, Unsatisfiable) or "Unsatisfiable" in type(e).__name__:
                    R.note(f"Hypothesis could not generate cases: {e}")
                    break
                raise
        R.seconds = self.elapsed()

    def _new(self, found: list) -> list:
        return [d for d in found if d.signature not in self.found]

    def _record(self, found: list) -> None:
        for d in found:
            if d.signature not in self.found:
                self.found[d.signature] = d
                self.result.discrepancies.append(d)


def _case_key(case: Case) -> str:
    try:
        return hashlib.sha1(case.to_json(indent=None).encode()).hexdigest()
    except Exception:  # noqa: BLE001
        return repr(id(case))


def _resolve_seed(seed) -> int:
    if seed is None:
        return random.SystemRandom().randrange(2**31)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int or None, got {seed!r}")
    return int(seed)


def _check_budget(max_examples, seconds) -> None:
    if max_examples is not None and (isinstance(max_examples, bool) or not isinstance(max_examples, (int, np.integer))
                                     or max_examples < 1):
        raise ValueError(f"max_examples must be a positive int or None, got {max_examples!r}")
    if seconds is not None and (not isinstance(seconds, (int, float)) or not seconds > 0):
        raise ValueError(f"seconds must be a positive number or None, got {seconds!r}")


# =============================================================================================
# case generation around one op
# =============================================================================================


def _op_cases(spec: OpSpec, companions, user_ops: dict):
    """Cases that contain ``spec``: alone (at the root, chained, x twice), wrapped (its output used
    twice and scaled by a random tensor before a sum, so its upstream gradient is never all
    ones), mixed with table ops (deep inside, fed by fan-out), big (sides 5 to 8), of high rank
    (2 to 4 axes), and, for gufunc-declared ops with several inputs, on inputs whose loop
    dimensions broadcast."""
    from hypothesis import strategies as st

    from . import strategies as gst

    comp = [c for c in companions if c != spec.name and c in _registry.all_specs()]
    alone = gst.cases(ops=[spec], max_nodes=3, max_leaves=3, max_roots=2)
    has = lambda c: spec.name in c.ops  # noqa: E731
    mixed = gst.cases(ops=[spec] + comp, min_nodes=2, max_nodes=6, max_leaves=4).filter(has)
    big = gst.cases(ops=[spec], max_nodes=2, max_leaves=3, max_roots=1, min_dims=1, max_dims=2, min_side=5,
                    max_side=8, max_elements=256)
    deep = gst.cases(ops=[spec], max_nodes=2, max_leaves=3, max_roots=2, min_dims=2, max_dims=4, max_side=3,
                     max_elements=300)
    wrapped = st.tuples(gst.cases(ops=[spec], max_nodes=2, max_leaves=3, max_roots=2), st.integers(0, 2**32 - 1)).map(
        lambda t: _wrap(t[0], t[1])
    )

    def tag(c):
        c.user_ops.update(user_ops)
        return c

    big2 = gst.cases(ops=[spec], max_nodes=2, max_leaves=3, max_roots=2, min_dims=1, max_dims=2, min_side=5,
                     max_side=8, max_elements=256)
    branches = [alone, wrapped, mixed, big, deep, big2]
    if _broadcast_plan(spec) is not None:
        branches += [_broadcast_cases(spec), _broadcast_cases(spec)]  # twice the weight (distinct objects:
        # one_of drops a repeated strategy)
    return st.one_of(*branches).map(tag)


def _broadcast_plan(spec: OpSpec):
    """Core dims per input of a gufunc-declared op with >= 2 inputs (None if not applicable)."""
    if spec.signature is None or spec.shape_fn is not None or (spec.arity or 0) < 2:
        return None
    from ._private.signature import parse

    try:
        return parse(spec.signature)[0]
    except Exception:  # noqa: BLE001
        return None


def _broadcast_cases(spec: OpSpec):
    """The op alone on inputs whose loop dimensions really broadcast (one input has the full loop
    shape, the others drop leading axes or have size-1 axes), under a random seed: the cases where
    a gradient must be summed over broadcast axes, batch dims of matmul included."""
    from hypothesis import strategies as st

    from ._private import values as _values

    cores = _broadcast_plan(spec)
    names = sorted({d for c in cores for d in c if not d.isdigit()})
    doms = spec.domains_for(len(cores))

    @st.composite
    def build(draw):
        sizes = {d: draw(st.integers(1, 4)) for d in names}
        loop = tuple(draw(st.lists(st.integers(2, 3), min_size=1, max_size=2)))
        full = draw(st.integers(0, len(cores) - 1))
        shapes = []
        for i, core in enumerate(cores):
            if i == full:
                lp = loop
            else:
                drop = draw(st.integers(0, len(loop)))
                lp = tuple(1 if draw(st.booleans()) else s for s in loop[drop:])
            shapes.append(lp + tuple(int(d) if d.isdigit() else sizes[d] for d in core))
        params = draw(spec.param_strategy(tuple(shapes))) if spec.param_strategy is not None else {}
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        leaves = {f"x{i}": _values.tame_array(rng, s, [d]) for i, (s, d) in enumerate(zip(shapes, doms, strict=True))}
        out = spec.out_shape(shapes, spec.canonical(shapes, dict(params)))
        from hypothesis import assume

        assume(out is not None)
        seed = rng.uniform(0.5, 1.5, out) * rng.choice([-1.0, 1.0], out)
        try:
            case = Case.build(leaves, [("y", spec.name, list(leaves), params)], ["y"], [seed])
        except Exception:  # noqa: BLE001 - params/shapes the op rejects: not a case
            assume(False)
        case.meta["generator"] = "gradspec.verify (broadcast)"
        return case

    return build()


def _wrap(case: Case, seed: int) -> Case:
    """Add ``sum(root * w)`` for each root (w random) as extra roots; the old roots stay roots,
    so each root's gradient is its own seed plus ``w``."""
    rng = np.random.default_rng(seed)
    shapes = case.shapes()
    env = case.evaluate()
    leaves = [Leaf(l.name, l.value, l.requires_grad) for l in case.leaves]
    nodes = [NodeDef(n.name, n.op, list(n.inputs), dict(n.params)) for n in case.nodes]
    roots, seeds = list(case.roots), list(case.seeds)
    for i, r in enumerate(case.roots):
        if not np.issubdtype(env[r].dtype, np.floating):
            continue
        w = rng.uniform(0.5, 1.5, shapes[r]) * rng.choice([-1.0, 1.0], shapes[r])
        leaves.append(Leaf(f"w{i}", w.astype(env[r].dtype), False))
        nodes.append(NodeDef(f"q{i}", "mul", [r, f"w{i}"], {}))
        nodes.append(NodeDef(f"s{i}", "sum", [f"q{i}"], {}))
        roots.append(f"s{i}")
        seeds.append(None)
    out = Case(leaves, nodes, roots, seeds, user_ops=dict(case.user_ops), meta=dict(case.meta))
    out.canonicalize()
    out.validate()
    return out


# =============================================================================================
# the jacobian oracle over finite-difference JVPs (compared with an FD tolerance)
# =============================================================================================


def fd_jacobian_error(case, jac_vjp: dict | None = None) -> dict:
    """Error estimate of the jacobian oracle's ``J^T seed`` when some op's JVP is a finite
    difference of its forward (user ops without ``jvp``).

    Three witnesses, the largest wins: the same composition at step scales 1.7 and 0.55
    (truncation error: it changes with the step), and with the finite-difference JVPs' rounding
    error injected as random noise of its own size (:func:`gradspec.ops.user.fd_rounding_noise`:
    rounding is what limits a JVP entry that is tiny next to the op's output, e.g. a saturated
    softmax); plus 1e-12 of the leaf's largest gradient."""
    from .oracles.jacobian import jacobian

    base = jac_vjp if jac_vjp is not None else jacobian(case).vjp
    err = {k: np.zeros(np.shape(v)) for k, v in base.items()}
    for s in (1.7, 0.55, None):
        ctx = fd_step_scale(s) if s is not None else fd_rounding_noise(0)
        with ctx:
            other = jacobian(case).vjp
        for k in err:
            with np.errstate(all="ignore"):
                d = np.abs(np.asarray(other[k], dtype=np.float64) - np.asarray(base[k], dtype=np.float64))
            err[k] = np.maximum(err[k], np.where(np.isfinite(d), d, np.inf))
    for k, v in base.items():
        v = np.asarray(v, dtype=np.float64)
        fin = v[np.isfinite(v)]
        err[k] = err[k] + 1e-12 * (float(np.max(np.abs(fin))) if fin.size else 0.0)
    return err


@dataclasses.dataclass
class _FDRes:
    grads: dict
    error: dict


class FDJacobianOracle(_oracles.Oracle):
    """The jacobian oracle for cases with finite-difference JVPs, declared as an ``fd`` oracle so
    that ``check()`` compares it with its own error estimate (:func:`fd_jacobian_error`)."""

    name = "jacobian"
    kind = "fd"
    full_limit = math.inf

    def applies(self, case):
        return _oracles.get("jacobian").applies(case)

    def result(self, case, check_reach: bool = True):
        from .oracles.jacobian import jacobian

        g = jacobian(case).vjp
        return _FDRes(g, fd_jacobian_error(case, g))

    def vjp(self, case):
        return self.result(case).grads


# =============================================================================================
# checking one case for an op (user op or wrapped torch function)
# =============================================================================================


_PAIR_TEXT = {
    "finite-differences": "finite differences of the forward",
    "jacobian": "the jacobian oracle (forward-mode JVPs composed by the chain rule)",
    "torch-cpu": "torch autograd on the op's torch twin",
    "reference": "the op's vjp run by gradspec's engine",
}


def _under_test_oracles(spec) -> set:
    s = {"reference"}
    if spec.torch is not None:
        s.add("torch-cpu")
    if spec.jvp_source != FD_JVP_SOURCE:
        s.add("jacobian")
    return s


def _check_op_case(case: Case, spec: OpSpec, oracle_names: list, target: str, replay: str, result: Result,
                   extra=None) -> list:
    names = [n for n in oracle_names if not (n == "jacobian" and _has_fd_jvp(case))]
    fdjac = "jacobian" in oracle_names and _has_fd_jvp(case)
    found: list[VerifyDiscrepancy] = []
    v = check(case, oracles=names)
    verdicts = [v]
    errors = dict(v.errors)
    ref_failed = "reference" in errors
    if fdjac and not ref_failed:
        try:
            v2 = check(case, oracles=["reference", FDJacobianOracle()])
            verdicts.append(v2)
            for k, e in v2.errors.items():
                errors.setdefault(k, e)
        except Exception as e:  # noqa: BLE001
            errors["jacobian"] = (type(e).__name__, str(e), traceback.format_exc())
    _note_verdicts(result, verdicts)
    under = _under_test_oracles(spec)
    feeds = _leaves_feeding(case, spec.name)
    jac_bad = {d.leaf for vv in verdicts for d in vv.discrepancies if set(d.oracles) == {"reference", "jacobian"}}
    jac_ran = any("jacobian" in vv.results for vv in verdicts)
    for vv in verdicts:
        for d in vv.discrepancies:
            if d.kind == "raised":
                continue  # reported below, from the errors themselves
            if not (set(d.oracles) & under):
                continue
            if d.leaf is not None and d.leaf not in feeds:
                continue  # the op is on no path from this leaf to a root: not the op's doing
            if (d.kind == "value" and set(d.oracles) == {"reference", "finite-differences"} and jac_ran
                    and d.leaf not in jac_bad and d.rel_err is not None and d.rel_err < FD_ONLY_REL):
                result.note(
                    f"finite differences alone disagreed with the vjp by {d.rel_err:.2g} (relative) on a case where "
                    "the jacobian oracle agrees with it; treated as finite-difference rounding (e.g. a step that "
                    "is not exactly representable next to large inputs whose outputs cancel)")
                continue
            found.append(_wrap_disc(d, target, replay, vv, spec))
    ref_msg = errors.get("reference", (None, ""))[1]
    for name, (tname, msg, tb) in errors.items():
        if name != "reference" and ref_msg and msg and msg in ref_msg:
            continue  # the same failure of the same code (fn's backward run by torch): reported once
        kind = ERROR_KINDS.get(tname)
        if kind is None:
            if name == "reference" and "forward raised" in msg:
                kind = "forward-raised"
            elif name == "jacobian":
                kind = "jvp-raised" if spec.jvp_source != FD_JVP_SOURCE else "raised"
            else:
                kind = "raised"
        other = next((n for n in v.results if n != name), "finite-differences")
        found.append(
            VerifyDiscrepancy(
                kind=kind,
                oracles=(name, other),
                message=f"{target}: {name} raised {tname}: {msg}",
                case=case,
                traceback=tb,
                replay=replay,
                verdict=v,
            )
        )
    if extra is not None and not found:
        found += extra(case)
    return _merge(found)


def _merge(found: list) -> list:
    """One discrepancy per kind for a case; the other oracle pairs that saw it are named in it."""
    by_kind: dict = {}
    others: dict = {}
    for d in found:
        first = by_kind.setdefault(d.kind, d)
        if first is not d:
            for o in d.oracles:
                if o not in first.oracles and o not in others.setdefault(d.kind, []):
                    others[d.kind].append(o)
    for kind, names in others.items():
        if names:
            by_kind[kind].message += f" (the same case also disagrees with: {', '.join(names)})"
    return list(by_kind.values())


FD_ONLY_REL = 1e-8  # below this, a disagreement with finite differences alone needs a second witness


def _leaves_feeding(case: Case, op: str) -> set:
    """Leaves from which some path reaches a node of ``op`` (their gradients run through its vjp)."""
    anc: dict = {l.name: {l.name} for l in case.leaves}
    out: set = set()
    for n in case.nodes:
        a = set().union(*[anc.get(i, set()) for i in n.inputs]) if n.inputs else set()
        anc[n.name] = a
        if n.op == op:
            out |= a
    return out & {l.name for l in case.leaves}


def _wrap_disc(d: Discrepancy, target: str, replay: str, verdict, spec) -> VerifyDiscrepancy:
    a, b = d.oracles
    why = f"{_PAIR_TEXT.get(a, a)} disagrees with {_PAIR_TEXT.get(b, b)}"
    msg = f"{target}: {why}: {d.message}"
    if "jacobian" in d.oracles and spec.jvp_source == FD_JVP_SOURCE:
        msg += (f" [the jacobian oracle used a finite-difference JVP of {spec.name!r}'s forward (it declares no jvp); "
                "compared with a finite-difference tolerance]")
    fields = {f.name: getattr(d, f.name) for f in dataclasses.fields(Discrepancy)}
    fields["message"] = msg
    return VerifyDiscrepancy(**fields, replay=replay, verdict=verdict)


def _choose_oracles(spec: OpSpec, oracles) -> list:
    if oracles is None:
        names = ["reference", "finite-differences", "jacobian"]
        if spec.torch is not None:
            names.append("torch-cpu")
        return names
    if isinstance(oracles, str):
        oracles = [oracles]
    names = []
    for o in oracles:
        n = o.name if isinstance(o, _oracles.Oracle) else o
        if n not in _oracles.names():
            raise ValueError(f"unknown oracle {n!r}; known oracles: {', '.join(_oracles.names())}")
        names.append(n)
    if "reference" not in names:
        names.insert(0, "reference")  # the op's own vjp is what is being verified
    return names


def _resolve_op(op) -> OpSpec:
    if isinstance(op, str):
        try:
            return _registry.lookup(op)
        except KeyError as e:
            raise ValueError(str(e.args[0])) from None
    if not isinstance(op, OpSpec):
        raise TypeError(
            f"verify_op expects an op declared with gs.Op(...) (or a table op name), got {type(op).__name__}")
    if op.user and _registry.all_specs().get(op.name) is not op:
        # The same name was declared again since: register this one for the run (cases name ops).
        _registry.register(op)
    return op


def verify_op(op, *, max_examples: int | None = None, seconds: float | None = None, oracles=None,
              seed: int | None = None, companions=COMPANIONS) -> Result:
    """Verify a user op's VJP (and JVP / torch twin, if declared) on random graphs.

    Budget: ``max_examples`` generated cases and/or ``seconds`` (default
    ``DEFAULT_MAX_EXAMPLES`` cases, a few seconds).  Deterministic for a given ``seed``.

    Example::

        >>> import numpy as np, gradspec as gs
        >>> bad = gs.Op("bad_square", forward=lambda x: x * x, vjp=lambda g, x, out: (x * g,))
        >>> r = gs.verify_op(bad, max_examples=20, seed=1)
        >>> r.ok, r.discrepancies[0].kind
        (False, 'value')
    """
    _check_budget(max_examples, seconds)
    spec = _resolve_op(op)
    names = _choose_oracles(spec, oracles)
    s = _resolve_seed(seed)
    target = f"{spec.name!r}"
    path = import_path_of(spec) if spec.user else None
    budget = _budget_text(max_examples, seconds)
    if path:
        mod, _, attr = path.partition(":")
        run_replay = f"from {mod} import {attr}; gs.verify_op({attr}, seed={s}, {budget})"
    else:
        run_replay = f"gs.verify_op({spec.name}, seed={s}, {budget})  # with your op object"
    result = Result(target=target, what="op", seed=s, max_examples=max_examples, budget_seconds=seconds)
    result.replay = run_replay
    if spec.user and spec.jvp_source == FD_JVP_SOURCE and "jacobian" in names:
        result.note(f"op {spec.name!r} declares no jvp: the jacobian oracle composes a finite-difference JVP of its "
                    "forward (4-point central differences + Richardson) and is compared with a finite-difference "
                    "tolerance (its error estimated from three step sizes)")
    if spec.user and path is None:
        result.note(f"op {spec.name!r} was defined in __main__ or inline: saved case.json files cannot be replayed "
                    "with `gradspec replay` in another process; define it in an importable module for that")
    user_ops = {spec.name: path} if path else {}

    def evaluate(case):
        _count(result, case)
        return _check_op_case(case, spec, names, f"op {spec.name!r}", _case_replay(path, s, run_replay), result)

    runner = _Runner(result, max_examples, seconds)
    runner.run(_op_cases(spec, companions, user_ops), evaluate)
    return result


def _budget_text(max_examples, seconds) -> str:
    parts = []
    if max_examples is not None or seconds is None:
        parts.append(f"max_examples={max_examples if max_examples is not None else DEFAULT_MAX_EXAMPLES}")
    if seconds is not None:
        parts.append(f"seconds={seconds}")
    return ", ".join(parts)


def _case_replay(path, seed, run_replay) -> str:
    if path:
        return ("result.write_html(DIR), then `gradspec replay DIR/<id>/case.json`; or gs.check(d.case); "
                f"or the whole run: {run_replay}")
    return f"gs.check(d.case) on this discrepancy's case; or the whole run: {run_replay}"


def _count(result: Result, case: Case) -> None:
    for op in {n.op for n in case.nodes}:
        result.op_counts[op] += 1


def _note_verdicts(result: Result, verdicts) -> None:
    for v in verdicts:
        for comp in v.comparisons:
            result.pair_counts[tuple(comp.oracles)] += 1
            result.pair_agree[tuple(comp.oracles)] += int(comp.agreed)
        for name, why in v.skipped.items():
            result.skipped[f"{name}: {why}"[:100]] += 1


# =============================================================================================
# torch functions
# =============================================================================================


_TORCH_FN_NAMES: dict = {}


def _torch_fn_name(fn) -> str:
    base = getattr(getattr(fn, "__self__", None), "__name__", None) or getattr(fn, "__qualname__", None) or "fn"
    base = "".join(ch if ch.isalnum() else "_" for ch in str(base)).strip("_") or "fn"
    if base[0].isdigit():
        base = "f_" + base
    base = f"torch_{base}"
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


def _torch_wrap(fn, name: str, arity: int, signature, shape_fn, domain, params):
    import torch

    def forward(*arrays, **kw):
        xs = [torch.from_numpy(np.array(a, dtype=np.float64)) for a in arrays]
        with torch.no_grad():
            y = fn(*xs, **kw)
        if not isinstance(y, torch.Tensor):
            raise TypeError(f"{name}: fn returned {type(y).__name__}, expected a torch tensor")
        return y.detach().cpu().numpy().astype(np.float64)

    def vjp(g, *rest, **kw):
        arrays = rest[:-1]
        xs = [torch.from_numpy(np.array(a, dtype=np.float64)).requires_grad_(True) for a in arrays]
        with torch.enable_grad():
            y = fn(*xs, **kw)
        if not isinstance(y, torch.Tensor) or not y.requires_grad:
            raise RuntimeError(f"fn's output does not require grad (got {type(y).__name__}): is the op differentiable?")
        gt = torch.from_numpy(np.array(g, dtype=np.float64))
        g0 = gt.clone()
        saved = [x.detach().clone() for x in xs]
        grads = torch.autograd.grad(y, xs, gt, allow_unused=True)
        if not torch.equal(gt, g0):
            raise ValueError("read-only: fn's backward modified its grad_output in place")
        for i, (x, s0) in enumerate(zip(xs, saved, strict=True)):
            if not torch.equal(x.detach(), s0):
                raise ValueError(f"read-only: fn's backward modified input {i} in place")
        return tuple(None if gi is None else gi.detach().numpy().copy() for gi in grads)

    def torch_fn(*xs, **kw):
        return fn(*xs, **kw)

    spec = Op(name, forward=forward, vjp=vjp, torch=torch_fn, arity=arity, signature=signature, shape_fn=shape_fn,
              params=params, domain=domain)
    spec.torch_name = getattr(fn, "__qualname__", repr(fn))
    spec.defining_module = None  # type: ignore[attr-defined]  (wrapped inline: not importable)
    return spec


def _twice_check(case: Case, spec: OpSpec, target: str, replay: str) -> list:
    """fn's backward run twice on the same graph (retain_graph) must give twice the gradient."""
    import torch

    from .oracles.torch_oracle import build_torch_graph

    if spec.name not in case.ops:
        return []
    try:
        env, roots = build_torch_graph(case)
        seeds = [torch.ones_like(r) if s is None else torch.from_numpy(np.array(s, dtype=np.float64)).to(r.dtype)
                 for r, s in zip(roots, case.seeds, strict=True)]
        torch.autograd.backward(roots, seeds, retain_graph=True)
        first = {l.name: (None if env[l.name].grad is None else env[l.name].grad.detach().numpy().copy())
                 for l in case.grad_leaves()}
        torch.autograd.backward(roots, seeds, retain_graph=True)
    except Exception as e:  # noqa: BLE001
        return [VerifyDiscrepancy("raised", ("torch-cpu", "torch-cpu"),
                                  f"{target}: backward twice (retain_graph=True) raised {type(e).__name__}: {e}",
                                  case, traceback=traceback.format_exc(), replay=replay, check_name="backward twice")]
    for l in case.grad_leaves():
        g1, g2 = first[l.name], env[l.name].grad
        if g1 is None:
            continue
        g2 = g2.detach().numpy()
        scale = float(np.max(np.abs(g1), initial=0.0))
        with np.errstate(all="ignore"):
            err = np.abs(g2 - 2 * g1)
        bad = np.isfinite(g1) & ~(err <= 1e-12 * max(scale, 1e-300) * 2)
        if np.any(bad):
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            return [VerifyDiscrepancy(
                "accumulation", ("torch-cpu", "torch-cpu"),
                f"{target}: the second backward over the same graph (retain_graph=True) did not add the same gradient "
                f"again: leaf {l.name!r}[{', '.join(map(str, idx))}] after one backward {g1[idx]!r}, after two "
                f"{g2[idx]!r} (expected {2 * g1[idx]!r}); does fn's backward keep state between calls or modify "
                "what it saved?", case, l.name, idx, (2 * g1[idx], g2[idx]), replay=replay,
                check_name="backward twice")]
    return []


def _domain_src(d) -> str:
    if isinstance(d, (list, tuple)):
        return "[" + ", ".join(_domain_src(x) for x in d) + "]"
    name = getattr(d, "name", None)
    if name == "away_from":
        return f"gs.domains.away_from({list(d.points)!r}, {d.margin!r})"
    if name == "positive":
        return f"gs.domains.positive({d.margin!r})" if d.margin else "gs.domains.positive()"
    if name == "interval":
        return f"gs.domains.interval({d.lo!r}, {d.hi!r})"
    if name == "real":
        return "gs.domains.real()"
    return repr(d)


def verify_torch_function(fn, *, arity: int | None = None, signature: str | None = None, shape_fn=None, domain=None,
                          params: dict | None = None, max_examples: int | None = None, seconds: float | None = None,
                          seed: int | None = None, companions=COMPANIONS) -> Result:
    """Verify the backward of torch code ``fn`` (typically ``MyFunction.apply``) in float64.

    Its gradients are compared with finite differences of its own forward, the jacobian oracle
    (a finite-difference JVP of its forward) and torch autograd running it inside whole graphs,
    under random seeds, composed with table ops, with inputs used twice, and with backward run
    twice.  Without ``signature`` / ``shape_fn`` it is taken as elementwise with broadcasting
    over ``arity`` inputs (inferred from ``forward``'s signature when possible).  ``params``:
    name -> Hypothesis strategy, passed to ``fn`` as keyword arguments.
    """
    _check_budget(max_examples, seconds)
    if not callable(fn):
        raise TypeError(f"verify_torch_function expects a callable on torch tensors, got {type(fn).__name__}")
    params = dict(params or {})
    if arity is None:
        arity = _torch_arity(fn, params)
        if arity is None:
            if signature is not None:
                from ._private.signature import parse

                arity = len(parse(signature)[0])
            else:
                raise UserOpError("verify_torch_function: cannot infer fn's number of tensor inputs; pass arity=N")
    name = _torch_fn_name(fn)
    spec = _torch_wrap(fn, name, arity, signature, shape_fn, domain, params)
    s = _resolve_seed(seed)
    owner = getattr(fn, "__self__", None)
    label = f"{owner.__name__}.apply" if isinstance(owner, type) else getattr(fn, "__qualname__", name)
    budget = _budget_text(max_examples, seconds)
    extra = [f"arity={arity}"]
    if signature is not None:
        extra.append(f"signature={signature!r}")
    if shape_fn is not None:
        extra.append("shape_fn=<your shape_fn>")
    if domain is not None:
        extra.append(f"domain={_domain_src(domain)}")
    if params:
        extra.append("params=<your params>")
    run_replay = f"gs.verify_torch_function({label}, seed={s}, {budget}, {', '.join(extra)})"
    result = Result(target=label, what="torch function", seed=s, max_examples=max_examples, budget_seconds=seconds)
    result.replay = run_replay
    result.note("fn's backward is checked call by call (torch.autograd.grad of one call, inside gradspec's engine) "
                "and inside whole torch graphs (the torch-cpu oracle); the jacobian oracle uses a finite-difference "
                "JVP of fn's forward (compared with a finite-difference tolerance)")
    names = ["reference", "finite-differences", "jacobian", "torch-cpu"]
    target = f"torch function {label}"
    case_replay = (f"gs.check(d.case) while {label} is registered (it is, in this process); "
                   f"or the whole run: {run_replay}")

    def evaluate(case):
        _count(result, case)
        return _check_op_case(case, spec, names, target, case_replay, result,
                              extra=lambda c: _twice_check(c, spec, target, case_replay))

    runner = _Runner(result, max_examples, seconds)
    runner.run(_op_cases(spec, companions, {}), evaluate)
    return result


# =============================================================================================
# engines
# =============================================================================================


class EngineOracle(_oracles.Oracle):
    """An engine under test as an oracle: builds the case with ``leaf``/``apply``, runs
    ``backward`` per root (retain_graph for all but the last: roots share subgraphs), reads
    ``grad``."""

    kind = "exact"

    def __init__(self, engine, strict: bool = True):
        self.engine = engine
        self.name = f"engine:{engine.name}"
        self.reports_none = strict

    def applies(self, case):
        missing = sorted({n.op for n in case.nodes if not self.engine.supports(n.op)})
        if missing:
            return False, f"{self.name}: does not support {', '.join(missing)}"
        return True, ""

    def vjp(self, case):
        eng = self.engine
        env = {}
        for l in case.leaves:
            env[l.name] = eng.leaf(np.array(l.value, copy=True), requires_grad=l.differentiable)
        for n in case.nodes:
            env[n.name] = eng.apply(n.op, *[env[i] for i in n.inputs], **n.params)
        last = len(case.roots) - 1
        for k, (r, s) in enumerate(zip(case.roots, case.seeds, strict=True)):
            eng.backward(env[r], None if s is None else np.array(s, copy=True), retain_graph=k < last)
        out = {}
        for l in case.grad_leaves():
            g = eng.grad(env[l.name])
            out[l.name] = None if g is None else np.asarray(g)
        return out


def _engine_label(engine_arg, engine) -> str:
    if isinstance(engine_arg, str):
        return engine_arg
    t = type(engine)
    mod = getattr(t, "__module__", "")
    if mod and mod != "__main__":
        return f"{mod}:{t.__qualname__}"
    return "<your engine object>"


def verify_engine(engine, *, max_examples: int | None = None, seconds: float | None = None, seed: int | None = None,
                  strict: bool = True) -> Result:
    """Verify an autodiff engine behind the :class:`gradspec.engines.Engine` protocol.

    Gradient values on random graphs of the ops ``engine.supports``, against the reference
    engine and the jacobian oracle; then every backward() rule of CONTRACT §5 as a named check
    (``Result.checks``), differential against torch wherever torch decides whether a call raises.
    With ``strict=False`` only what decides gradient correctness fails the run (values,
    accumulation, implicit-seed and seed-shape rules, reset, retain_graph); torch-specific
    details (freeing after backward, None before the first backward or for unreached leaves,
    error types, a root that does not require grad) become ``Result.notes``.
    """
    _check_budget(max_examples, seconds)
    label_arg = engine
    eng = _engines.get(engine)
    s = _resolve_seed(seed)
    label = _engine_label(label_arg, eng)
    budget = _budget_text(max_examples, seconds)
    result = Result(target=eng.name, what="engine", seed=s, max_examples=max_examples, budget_seconds=seconds,
                    strict=strict)
    result.replay = f"gs.verify_engine({label!r}, seed={s}, {budget}, strict={strict})"
    started = time.perf_counter()
    from . import strategies as gst

    unusable = gst.unusable_ops()
    supported = []
    for op in _registry.public_names():
        try:
            ok = bool(eng.supports(op))
        except Exception as e:  # noqa: BLE001
            result.note(f"engine.supports({op!r}) raised {type(e).__name__}: {e}; treated as unsupported")
            ok = False
        if ok and op not in unusable:
            supported.append(op)
    if not supported:
        result.note("the engine supports no op of the table: only the semantics checks that need no op could run")
    sem = _Semantics(eng, label, result, strict, np.random.default_rng(s), supported)
    sem.run_all()
    if supported:
        eo = EngineOracle(eng, strict)
        run_replay = result.replay

        def evaluate(case):
            _count(result, case)
            return _check_engine_case(case, eo, result, run_replay, strict, sem)

        strategy = _engine_cases(supported)
        if max_examples is None and seconds is None:
            max_examples = max(DEFAULT_MAX_EXAMPLES, 2 * len(supported))
        left = None if seconds is None else max(0.1, seconds - (time.perf_counter() - started))
        runner = _Runner(result, max_examples, left)
        runner.found.update({d.signature: d for d in result.discrepancies})
        runner.run(strategy, evaluate)
        result.checks["values on random graphs (J^T . seed)"] = (
            "failed" if any(d.check_name == "values" for d in result.discrepancies) else "passed")
        fr = sem.freeing_cases
        if fr["n"]:
            result.checks.setdefault("freeing (second backward without retain_graph, random graphs)",
                                     "passed" if not fr["bad"] else ("failed" if strict else "note"))
    result.seconds = time.perf_counter() - started
    return result


ENGINE_COMPANIONS = ("add", "mul", "sum", "tanh", "exp", "matmul")


def _engine_cases(supported: list):
    """Each case focuses on one supported op (drawn uniformly, so every op gets its share of a
    small budget), mixed with a few simple supported ops, or all supported ops at random."""
    from hypothesis import strategies as st

    from . import strategies as gst

    comp = [c for c in ENGINE_COMPANIONS if c in supported]

    def focused(op):
        return gst.cases(ops=[op] + [c for c in comp if c != op], max_nodes=5).filter(lambda c: op in c.ops)

    return st.one_of(st.sampled_from(supported).flatmap(focused), gst.cases(ops=supported, max_nodes=6))


def _check_engine_case(case: Case, eo: EngineOracle, result: Result, run_replay: str, strict: bool, sem) -> list:
    names = [eo, "reference", "jacobian"]
    v = check(case, oracles=names)
    _note_verdicts(result, [v])
    found = []
    if eo.name in v.errors:
        tname, msg, tb = v.errors[eo.name]
        found.append(VerifyDiscrepancy(
            "raised", (eo.name, "reference"),
            f"engine {eo.engine.name!r}: raised {tname}: {msg} on a valid graph where the reference engine and "
            "torch compute gradients", case, traceback=tb, replay=run_replay, check_name="values", verdict=v))
    else:
        ref_vs_jac_bad = any(set(d.oracles) == {"reference", "jacobian"} for d in v.discrepancies)
        for d in v.discrepancies:
            if eo.name not in d.oracles or d.kind == "raised":
                continue
            if ref_vs_jac_bad:
                result.note(f"reference and jacobian oracles disagree on a case ({d.message[:120]}...): not counted "
                            "against the engine; please report it to gradspec")
                continue
            fields = {f.name: getattr(d, f.name) for f in dataclasses.fields(Discrepancy)}
            fields["message"] = f"engine {eo.engine.name!r}: gradient differs from J^T . seed: {d.message}"
            if d.kind == "none-vs-zeros":
                fields["message"] += (" (torch leaves .grad None for a leaf no gradient reached; strict=False accepts "
                                      "zeros)")
            found.append(VerifyDiscrepancy(**fields, replay=run_replay, check_name="values", verdict=v))
    if not strict and not found:
        ref = v.results.get("reference", {})
        got = v.results.get(eo.name, {})
        for k, g in ref.items():
            if g is None and got.get(k) is not None:
                result.note("the engine reports zeros (not None) for leaves no gradient reached (torch: None)")
                break
    if not found and sem is not None:
        sem.freeing_probe(case)
    return found


# ---------------------------------------------------------------------------------------------
# backward() semantics, one named check each
# ---------------------------------------------------------------------------------------------


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

