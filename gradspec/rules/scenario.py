"""A backward() scenario: a small graph plus a sequence of calls, run on any Engine.

The §5 rules (``gradspec.rules``) and the engine diagnosis (``gradspec.rules.diagnosis``) talk
about the same thing: an engine builds a graph with ``leaf``/``apply``, then a sequence of
``backward(root, seed, retain_graph)`` and ``zero_grad(leaf)`` calls runs, and every leaf's
``grad`` is read back before the first call and after each one.  A :class:`Trace` is what was
observed; two traces (engine and reference) are compared call by call.

Example::

    >>> import numpy as np
    >>> from gradspec.engines import ReferenceEngine
    >>> from gradspec.rules.scenario import Scenario, Step, run
    >>> sc = Scenario({"x": np.array([1.0, 2.0])}, [("y", "mul", ("x", "x"), {})],
    ...               [Step("backward", "y", np.ones(2)), Step("zero_grad", "x")])
    >>> t = run(sc, ReferenceEngine())
    >>> t.obs[0].grads["x"], t.obs[1].grads["x"], t.obs[2].grads["x"]
    (None, array([2., 4.]), None)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .. import tolerances as _tol
from ..case import Case

__all__ = ["Step", "Scenario", "Obs", "Trace", "run", "timed_out", "ScenarioTimeout", "raise_reason", "close", "first_difference", "fmt",
           "steps_from_json"]


@dataclasses.dataclass
class Step:
    kind: str  # "backward" | "zero_grad"
    target: str  # a root (node or leaf name) for backward, a leaf for zero_grad
    seed: np.ndarray | None = None  # None: the implicit seed (backward(y) with no gradient)
    retain: bool = True

    def text(self) -> str:
        if self.kind == "zero_grad":
            return f"eng.zero_grad({self.target})"
        seed = "" if self.seed is None else ", " + fmt(self.seed)
        keep = ", retain_graph=True" if self.retain else ""
        return f"eng.backward({self.target}{seed}{keep})"


@dataclasses.dataclass
class Scenario:
    """``leaves``: name -> value; ``nodes``: (name, op, input names, params) in creation order."""

    leaves: dict
    nodes: list
    steps: list
    rule: str = ""
    requires_grad: dict = dataclasses.field(default_factory=dict)  # leaf -> bool (default True)
    _cache: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def rg(self, leaf: str) -> bool:
        return self.requires_grad.get(leaf, True) and np.asarray(self.leaves[leaf]).dtype.kind == "f"

    def shapes(self) -> dict:
        """Shape of every leaf and node (from the reference forward)."""
        if "shapes" not in self._cache:
            vals = forward_values(self)
            self._cache["shapes"] = {k: tuple(np.shape(v)) for k, v in vals.items()}
        return self._cache["shapes"]

    def grad_leaves(self) -> list[str]:
        return [n for n in self.leaves if self.rg(n)]

    def code(self) -> str:
        """The scenario as the Engine-protocol calls that run it."""
        lines = []
        for n, v in self.leaves.items():
            rg = "" if self.rg(n) else ", requires_grad=False"
            lines.append(f"{n} = eng.leaf({fmt(v)}{rg})  # shape {tuple(np.shape(v))}")
        for name, op, ins, params in self.nodes:
            p = "".join(f", {k}={v!r}" for k, v in params.items())
            lines.append(f"{name} = eng.apply({op!r}, {', '.join(ins)}{p})")
        lines += [s.text() for s in self.steps]
        return "\n".join(lines)

    def to_case(self) -> Case:
        """The graph as a gs.Case (each root once, with its first valid seed; ones where the scenario's
        seed is what torch refuses); ``meta["scenario"]`` keeps the exact calls."""
        shapes = self.shapes()
        roots, seeds = [], []
        for s in self.steps:
            if s.kind != "backward" or s.target in roots:
                continue
            shape = shapes[s.target]
            ok = (s.seed is None and int(np.prod(shape, dtype=np.int64)) == 1) or (
                s.seed is not None and tuple(np.shape(s.seed)) == tuple(shape))
            roots.append(s.target)
            seeds.append(s.seed if ok else np.ones(shape))
        if not roots:
            last = self.nodes[-1][0] if self.nodes else next(iter(self.leaves))
            roots, seeds = [last], [np.ones(shapes[last])]
        case = Case.build(leaves=dict(self.leaves), nodes=[(n, op, list(i), dict(p)) for n, op, i, p in self.nodes],
                          roots=roots, seeds=seeds, requires_grad={k: self.rg(k) for k in self.leaves})
        case.meta["scenario"] = self.code()
        # The calls as data, so that `gradspec replay` re-runs the rule's scenario and not only the
        # values (a rule finding's values alone usually agree): see steps_from_json.
        case.meta["scenario_steps"] = [_step_json(s) for s in self.steps]
        if self.rule:
            case.meta["rule"] = self.rule
        return case

    @classmethod
    def from_rule_case(cls, case: Case) -> "Scenario":
        """The scenario a rule finding's case was written from (``meta["scenario_steps"]``); ValueError
        names what is wrong with a hand-edited or foreign file."""
        steps = steps_from_json(case.meta.get("scenario_steps"), {l.name for l in case.leaves},
                                {l.name for l in case.leaves} | {n.name for n in case.nodes})
        return cls({l.name: np.array(l.value, copy=True) for l in case.leaves},
                   [(n.name, n.op, tuple(n.inputs), dict(n.params)) for n in case.nodes], steps,
                   str(case.meta.get("rule", "")), {l.name: l.differentiable for l in case.leaves})

    @classmethod
    def from_case(cls, case: Case) -> "Scenario":
        """The calls the engine oracle makes for a case: every root once, retain_graph except the last."""
        k = len(case.roots)
        steps = [Step("backward", r, None if s is None else np.array(s, copy=True), j < k - 1)
                 for j, (r, s) in enumerate(zip(case.roots, case.seeds, strict=True))]
        return cls({l.name: np.array(l.value, copy=True) for l in case.leaves},
                   [(n.name, n.op, tuple(n.inputs), dict(n.params)) for n in case.nodes], steps, "values",
                   {l.name: l.differentiable for l in case.leaves})


@dataclasses.dataclass
class Obs:
    """What one call did: the exception it raised (or None) and every leaf's grad afterwards."""

    raised: BaseException | None
    grads: dict  # leaf -> float64 array | None


@dataclasses.dataclass
class Trace:
    """``build``: an exception while building the graph; ``obs[0]`` is before the first call."""

    build: BaseException | None
    obs: list
    dtype: str = "float64"
    build_at: tuple | None = None  # (name, op) of the leaf or node whose leaf()/apply() raised ("leaf" for a leaf)


def _step_json(s: Step) -> dict:
    seed = None if s.seed is None else {"shape": list(np.shape(s.seed)), "dtype": str(np.asarray(s.seed).dtype),
                                        "values": np.asarray(s.seed, dtype=np.float64).ravel().tolist()}
    return {"kind": s.kind, "target": s.target, "seed": seed, "retain": bool(s.retain)}


def steps_from_json(raw, leaves: set, names: set) -> list:
    """``meta["scenario_steps"]`` back into :class:`Step` objects.  A case file is data: every field is
    checked (known call kinds, names of the case, numeric seeds of a sane size) before anything runs."""
    if not isinstance(raw, list) or not raw:
        raise ValueError("meta.scenario_steps must be a non-empty list of calls")
    steps = []
    for k, st in enumerate(raw):
        where = f"meta.scenario_steps[{k}]"
        if not isinstance(st, dict) or st.get("kind") not in ("backward", "zero_grad"):
            raise ValueError(f"{where}: kind must be 'backward' or 'zero_grad'")
        target = st.get("target")
        if target not in (names if st["kind"] == "backward" else leaves):
            raise ValueError(f"{where}: target {target!r} is not a {'node or leaf' if st['kind'] == 'backward' else 'leaf'} "
                             "of the case")
        seed = st.get("seed")
        if seed is not None:
            try:
                shape = tuple(int(d) for d in seed["shape"])
                dtype = np.dtype(seed.get("dtype", "float64"))
                if dtype.kind != "f" or any(d < 0 for d in shape) or int(np.prod(shape, dtype=np.int64)) > 1 << 20:
                    raise ValueError("a float seed of at most 2**20 elements")
                seed = np.array([float(v) for v in seed["values"]], dtype=dtype).reshape(shape)
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{where}: seed must be {{'shape': [...], 'dtype': 'float64'|'float32', "
                                 f"'values': [...]}} ({e})") from None
        steps.append(Step(st["kind"], target, seed, bool(st.get("retain", True))))
    return steps


def forward_values(sc: Scenario) -> dict:
    from .. import engine as E

    with E.no_grad():
        env = {n: E.tensor(np.array(v, copy=True)) for n, v in sc.leaves.items()}
        for name, op, ins, params in sc.nodes:
            env[name] = E.call(op, *[env[i] for i in ins], **params)
    return {k: np.asarray(v.numpy()) for k, v in env.items()}


def _read(eng, t) -> np.ndarray | None:
    g = eng.grad(t)
    if g is None:
        return None
    a = np.asarray(g)
    if a.dtype.kind not in "fiub":
        raise TypeError(f"grad() returned {type(g).__name__} of dtype {a.dtype}, not a real array")
    return a


class ScenarioTimeout(Exception):
    """A scenario ran past its timeout (raised inside the engine's code, so its traceback shows where)."""


def run(sc: Scenario, eng, timeout: float | None = None) -> Trace:
    """Run the scenario on ``eng``; every exception is recorded, none escapes.  With ``timeout``
    (main thread only: a SIGALRM timer) an engine that hangs is cut and :class:`ScenarioTimeout`
    recorded where it was."""
    import signal
    import threading

    if not timeout or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return _run(sc, eng)
    from .._private import isolate

    if isolate.enabled():  # --isolate: a child the watchdog kills also cuts a hang in C code
        kind, value, _step, seconds = isolate.run(lambda report: _alarmed(sc, eng, timeout), budget=timeout + 0.5,
                                                   between=timeout + 0.5)
        if kind == "verdict":
            return value
        if kind == "killed":
            return Trace(ScenarioTimeout(f"the scenario exceeded its timeout of {timeout:g} s; cut by the watchdog "
                                         f"(--isolate: the process running it was killed after {seconds:.3g} s)"), [])
        return Trace(RuntimeError(f"the process running the scenario (--isolate) {value}"), [])
    return _alarmed(sc, eng, timeout)


def _scenario_alarm(timeout: float):
    """The SIGALRM handler of one scenario: raises ScenarioTimeout, re-armed so that whatever runs next
    is cut as well; inside a gc / weakref callback (where a raise is lost, or escapes as an unraisable
    error: test_timeouts under load) it waits a moment instead, as guard's alarms do."""
    import signal

    from ..guard import _in_callback

    def on_alarm(signum, frame):
        if _in_callback(frame):
            signal.setitimer(signal.ITIMER_REAL, 0.01)
            return
        signal.setitimer(signal.ITIMER_REAL, timeout)
        raise ScenarioTimeout(f"the scenario exceeded its timeout of {timeout:g} s")

    return on_alarm


def _alarmed(sc: Scenario, eng, timeout: float) -> Trace:
    import signal

    previous = signal.signal(signal.SIGALRM, _scenario_alarm(timeout))
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        return _run(sc, eng)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def timed_out(trace: Trace) -> bool:
    return isinstance(trace.build, ScenarioTimeout) or any(isinstance(o.raised, ScenarioTimeout) for o in trace.obs)


def _run(sc: Scenario, eng) -> Trace:
    env: dict[str, Any] = {}
    at = None
    try:
        for n, v in sc.leaves.items():
            at = (n, "leaf")
            env[n] = eng.leaf(np.array(v, copy=True), requires_grad=sc.rg(n))
        for name, op, ins, params in sc.nodes:
            at = (name, op)
            env[name] = eng.apply(op, *[env[i] for i in ins], **params)
    except Exception as e:  # noqa: BLE001 - the engine's failure is what is recorded, with the call that raised
        return Trace(e, [], build_at=at)
    dtypes = set()

    def snapshot() -> dict:
        out = {}
        for n in sc.leaves:
            a = _read(eng, env[n])
            if a is not None:
                dtypes.add(a.dtype.name)
                a = a.astype(np.float64)
            out[n] = a
        return out

    try:
        obs = [Obs(None, snapshot())]
    except Exception as e:  # noqa: BLE001
        return Trace(e, [])
    for s in sc.steps:
        raised = None
        try:
            if s.kind == "backward":
                eng.backward(env[s.target], None if s.seed is None else np.array(s.seed, copy=True), retain_graph=s.retain)
            else:
                eng.zero_grad(env[s.target])
        except Exception as e:  # noqa: BLE001
            raised = e
        try:
            grads = snapshot()
        except Exception as e:  # noqa: BLE001 - a grad() that raises: recorded on this call
            raised = raised or e
            grads = {}
        obs.append(Obs(raised, grads))
    return Trace(None, obs, "float32" if dtypes == {"float32"} or "float16" in dtypes else "float64")


def raise_reason(sc: Scenario, k: int) -> str:
    """Why torch refuses call ``k`` when it does: 'no-grad' (the root does not require grad),
    'implicit', 'shape', else 'freeing' (static)."""
    s = sc.steps[k]
    if s.kind != "backward":
        return "other"
    if not _requires_grad(sc, s.target):
        return "no-grad"
    shape = sc.shapes()[s.target]
    if s.seed is None:
        return "implicit" if int(np.prod(shape, dtype=np.int64)) != 1 else "freeing"
    return "shape" if tuple(np.shape(s.seed)) != tuple(shape) else "freeing"


def _requires_grad(sc: Scenario, name: str) -> bool:
    if name in sc.leaves:
        return sc.rg(name)
    ins = {n: i for n, _op, i, _p in sc.nodes}
    return any(_requires_grad(sc, i) for i in ins[name])


def close(a, b, scale=None, dtype: str = "float64", none_is_zeros: bool = False) -> bool:
    """Two leaf gradients agree: same presence (or None ~ zeros when allowed), shape and values
    within the exact-oracle tolerance of tolerances.py, relative to ``scale`` (the sum of the
    absolute path terms, |J|^T |seed|, when known) or the larger of the two."""
    if a is None or b is None:
        if a is None and b is None:
            return True
        other = b if a is None else a
        return none_is_zeros and not np.any(other)
    if a.shape != b.shape:
        return False
    with np.errstate(invalid="ignore", over="ignore"):
        same_nan = np.isnan(a) == np.isnan(b)
        if not np.all(same_nan):
            return False
        a, b = np.nan_to_num(a, nan=0.0), np.nan_to_num(b, nan=0.0)
        if not np.all(np.isinf(a) == np.isinf(b)) or np.any(np.isinf(a) & (a != b)):
            return False
        a, b = np.where(np.isinf(a), 0.0, a), np.where(np.isinf(b), 0.0, b)
        big = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)))
        s = np.maximum(big, 0.0 if scale is None else np.asarray(scale))
        rtol = _tol.EXACT_RTOL["float32" if dtype == "float32" else "float64"]
        return bool(np.all(np.abs(a - b) <= rtol * s + _tol.SUBNORMAL_FLOOR))


def first_difference(sc: Scenario, got: Trace, want: Trace, scales=None, none_is_zeros=False, types=False):
    """(call index, what differs, leaf) of the first difference, or None; index 0 is 'before any call'.
    With ``types``, an engine that raises where torch raises must raise torch's exception type (or a
    RuntimeError, which is what torch raises for every backward() rule)."""
    if got.build is not None or want.build is not None:
        if (got.build is None) != (want.build is None):
            return (-1, "build", None)
        return None
    # The lower precision of the two sides, and of the leaf itself: an engine that computes float32 leaves
    # in float64 is held to what torch's float32 gradients can promise, and so is the float32 leaf of a
    # graph that also has float64 ones (both traces read 'float64' there).
    low = "float32" in (got.dtype, want.dtype)
    dtypes = {leaf: "float32" if low or np.asarray(v).dtype == np.float32 else "float64" for leaf, v in sc.leaves.items()}
    for k, (g, w) in enumerate(zip(got.obs, want.obs)):
        if (g.raised is None) != (w.raised is None):
            return (k, "raised", None)
        if types and g.raised is not None and not isinstance(g.raised, (type(w.raised), RuntimeError)):
            return (k, "error-type", None)
        if w.raised is not None and k > 0 and raise_reason(sc, k - 1) == "freeing":
            return None  # a failing backward is not atomic in torch: nothing after it is compared
        for leaf in sc.leaves:
            sc_ = None if scales is None else scales[k].get(leaf)
            if not close(g.grads.get(leaf), w.grads.get(leaf), sc_, dtypes[leaf], none_is_zeros):
                return (k, "grad", leaf)
    return None


def fmt(a, n: int = 8) -> str:
    """An array as short literal-ish text (np.array(...) for a reader to paste)."""
    if a is None:
        return "None"
    a = np.asarray(a)
    if a.size > n:
        flat = ", ".join(f"{v:.4g}" for v in a.ravel()[:n])
        return f"np.array([{flat}, ...]).reshape{tuple(a.shape)}"
    body = np.array2string(a, separator=", ", precision=4, floatmode="maxprec", suppress_small=False)
    return f"np.array({body})" if a.ndim else f"np.array({float(a):.6g})"
