"""Is the code under test a function of its inputs?  Two calls on the same inputs must give the same outputs.

Every oracle assumes it: finite differences call a forward dozens of times, the reference engine and torch
once each, and compare.  A forward that draws fresh random numbers at every call (dropout, noise injection)
or keeps state that changes between calls (a buffer updated in forward, a global call counter) is a
different function at every call: finite differences then estimate noise, their error estimate grows with
it and so does the tolerance, so a backward wrong by 1.3x was said to agree (tryout6 #1); an EMA buffer
read as a wrong torch autograd (#4), a call counter as a jump (#8).

Two mechanisms:

* :class:`TorchSeeded`: every call of torch code under test (``verify_torch_function`` / ``verify_module``:
  ``torch_call.CallLayout.call``) runs with torch's default generator at one fixed state (:data:`SEED`),
  the caller's state restored after; random torch code (``F.dropout(training=True)``, ``torch.rand_like``
  masks) is then a function of its inputs, and a backward that forgets dropout's ``1 / (1 - p)`` is found.
  A backward runs outside the call (autograd runs it later) and keeps drawing from the caller's stream:
  a backward that draws its own mask is still found.
* :func:`probe`: for each user-op node of a case, the forward called twice on copies of the inputs the case's
  forward gave it; outputs that differ beyond rounding (:func:`differ`) mean the op is not a function of
  its inputs there: ``gs.check`` then compares nothing and says so (never agree, never a discrepancy).

Example::

    >>> import numpy as np
    >>> differ(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-15]))
    ''
    >>> differ(np.array([1.0, 2.0]), np.array([1.0, 2.1]))
    'element [1]: 2.0 then 2.1 (|difference| 0.1, the outputs reach 2.1)'
"""

from __future__ import annotations

import numpy as np

from .. import tolerances as _tol
from . import case_budget

__all__ = ["NOT_A_FUNCTION", "not_a_function_among", "SEED", "TorchSeeded", "DrawWatch", "drawing_backward", "DRAWING_BACKWARD", "probe", "differ",
           "why_not_a_function", "HINT", "DREW_NOTE", "DREW32_NOTE", "set_aside"]

SEED = 0  # torch's generator state every call of torch code under test starts from
NOT_A_FUNCTION = "is not a function of its inputs"  # the words of every such reason (a campaign looks for them)

HINT = ("make it one for the check: seed its random draws inside the call (a numpy Generator or torch.Generator "
        "created with a fixed seed per call), or put the module in eval mode, or leave out the state it updates "
        "(check the update on its own)")

DREW_NOTE = ("fn draws random numbers from torch's generator (dropout, rand_like): every call of fn ran with torch's "
             f"default generator at the same state (seeded with {SEED}; your generator's state restored after each "
             "call), so the same inputs get the same draws and fn is checked as that function of its inputs; a "
             "backward that draws its own numbers draws from your stream, not the forward's, and is still caught; "
             "inputs are not given in other memory layouts (rand_like keeps a transposed input's strides: the same "
             "draws land on other elements)")

DREW32_NOTE = ("float32 cases were not drawn (the default dtypes split): fn draws random numbers, and torch draws other "
               "numbers for a float32 tensor than for a float64 one from the same state, so finite differences and the "
               "jacobian, which evaluate fn in float64, witness no float32 case of it (such cases were inconclusive); "
               "pass dtypes=('float64', 'float32') to run them anyway")


class TorchSeeded:
    """``with TorchSeeded(flag):`` runs a call with torch's default CPU generator (and, once CUDA is in use,
    each device's) seeded with :data:`SEED`, and restores the caller's generator state afterwards.
    ``flag`` (a list, or None) gets ``True`` appended once a call was seen to draw from the generator
    (what a run's note says).  A class, not a generator context manager: it wraps every call of fn."""

    __slots__ = ("_flag", "_cpu", "_cuda")
    _seeded = None  # the CPU generator's state after manual_seed(SEED) (torch.manual_seed costs ~0.2 ms)

    def __init__(self, flag: list | None = None) -> None:
        self._flag = flag

    def __enter__(self):
        import torch

        gen = torch.default_generator
        if TorchSeeded._seeded is None:
            TorchSeeded._seeded = torch.Generator().manual_seed(SEED).get_state()
        self._cpu = gen.get_state()
        gen.set_state(TorchSeeded._seeded)
        self._cuda = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # (no GPU here: untested on a device)
            self._cuda = torch.cuda.get_rng_state_all()
            torch.cuda.manual_seed_all(SEED)
        return self

    def __exit__(self, *exc) -> bool:
        import torch

        gen = torch.default_generator
        if self._flag is not None and not self._flag:
            # bytes, not torch.equal (7 us): the state is 5 kB; checked until a draw was seen once
            if gen.get_state().numpy().tobytes() != TorchSeeded._seeded.numpy().tobytes():
                self._flag.append(True)
        gen.set_state(self._cpu)
        if self._cuda is not None:
            torch.cuda.set_rng_state_all(self._cuda)
        return False


class DrawWatch:
    """``with DrawWatch(flag):`` around a backward: ``True`` appended to ``flag`` when torch's default generator
    moved while it ran (the backward drew random numbers of its own; a checkpoint's recompute puts the state
    back, ``preserve_rng_state``).  Watched until seen once (then free)."""

    __slots__ = ("_flag", "_before")

    def __init__(self, flag: list) -> None:
        self._flag = flag

    def __enter__(self):
        import torch

        self._before = None if self._flag else torch.default_generator.get_state().numpy().tobytes()
        return self

    def __exit__(self, *exc) -> bool:
        import torch

        if self._before is not None and torch.default_generator.get_state().numpy().tobytes() != self._before:
            self._flag.append(True)
        return False


DRAWING_BACKWARD = ("draws random numbers of its own (torch's generator moved while it ran), so it is not the "
                    "backward of the forward's draws: J^T·g holds the forward's mask or noise, and a fresh one gives "
                    "other numbers at every call")


def drawing_backward(case):
    """The first node of ``case`` whose code's backward was seen drawing random numbers (``spec.backward_draws``,
    set by ``verify_torch_function``'s VJP through :class:`DrawWatch`), or None."""
    return next((n for n in case.nodes if getattr(case.spec(n.op), "backward_draws", None)), None)


def differ(a, b) -> str:
    """Where two outputs of the same call differ beyond rounding, or "" where they do not.

    A deterministic forward run twice in one process gives the same bits; code whose reductions run in
    another order from call to call (threads) differs by a few ulps per term.  Allowed: the dtype's
    exact-comparison rounding (``tolerances.EXACT_RTOL``: 2^12 eps in float64, 2^9 eps32 in float32) of the
    output's largest magnitude.  The noise gradspec cannot allow for is far above it: 1e-10 of the output
    already moves a finite-difference slope by ~1e-6 of it, beyond what the comparisons allow."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return f"an output of shape {a.shape} then one of shape {b.shape}"
    if a.dtype.kind not in "fc" or b.dtype.kind not in "fc" or not a.size:
        return "" if np.array_equal(a, b) else "integer outputs that differ"
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        gap = np.abs(a64 - b64)
        same_nan = np.isnan(a64) & np.isnan(b64)
        same_inf = np.isinf(a64) & (a64 == b64)
        gap = np.where(same_nan | same_inf, 0.0, np.where(np.isnan(gap), np.inf, gap))
        finite = np.isfinite(a64) & np.isfinite(b64)
        scale = float(np.max(np.maximum(np.abs(a64), np.abs(b64))[finite], initial=0.0))
    dtype = "float32" if np.float32 in (a.dtype, b.dtype) else "float64"
    allowed = _tol.EXACT_RTOL[dtype] * scale
    if not np.any(gap > allowed):
        return ""
    k = np.unravel_index(int(np.argmax(gap)), gap.shape)
    where = f"element [{', '.join(map(str, k))}]" if gap.ndim else "the output"
    return (f"{where}: {float(a64[k])!r} then {float(b64[k])!r} (|difference| {float(gap[k]):.3g}, the outputs reach "
            f"{scale:.3g})")


def probe(case) -> str:
    """Why a user op of ``case`` is not a function of its inputs here, or "".  Each user-op node's forward called
    twice more on copies of the inputs the case's forward gave it; a forward that raises says nothing here (the
    oracles report it).
    A spec may carry ``state_changes() -> str`` (a module's buffers that changed): the reason names them."""
    if _LAST[0] is case:  # the same case object checked again (verify_op's second check, with the FD-JVP)
        return _LAST[1]
    # (a user forward that hangs here is cut after the per-case timeout inside a guarded check, and the oracles
    # report the hang: before, the whole check's bound of 62 s at a 1 s timeout cut it, case after case)
    _LAST[:] = [case, why := case_budget.timed_region(lambda: _probe(case), "")]
    return why


_LAST: list = [None, ""]  # the last case probed and its answer (identity: a new case is probed afresh)


def _probe(case) -> str:
    nodes = [n for n in case.nodes if getattr(case.spec(n.op), "user", False)]
    if not nodes:
        return ""
    try:  # a forward of its own, not the per-case memo's: filled now, before the oracles, the memo would hold
        # values of leaves that a torch Function writing into its input (x.mul_) changes while torch-cpu runs, and
        # the verdict rules that read it would see another case (the test of forward-mutates-input)
        env = case.evaluate(values={})
    except Exception:  # noqa: BLE001 - the forward raised: the oracles say so
        return ""
    for n in nodes:
        spec = case.spec(n.op)
        try:  # two calls on fresh copies: a forward that writes into its input is not taken for one with state
            with np.errstate(all="ignore"):
                once, again = (spec.forward(*[np.array(env[i], copy=True) for i in n.inputs], **n.params)
                               for _ in range(2))
        except Exception:  # noqa: BLE001
            continue
        where = differ(once, again)
        if where:
            return why_not_a_function(n, spec, where)
    return ""


def why_not_a_function(node, spec, where: str) -> str:
    """The reason a case (and a run) is inconclusive, naming the node, what differed and what to do."""
    state = getattr(spec, "state_changes", None)
    seen = state() if callable(state) else ""
    torch_code = getattr(spec, "twin_is_self", False)
    if seen:
        what = f"its forward updates state that its output reads ({seen})"
    elif torch_code:
        what = ("it keeps state that changes between calls (a buffer or attribute updated in forward, a global "
                "counter) or draws random numbers gradspec does not seed (numpy, Python's random, a "
                "torch.Generator of its own; torch's default generator is seeded the same for every call)")
    else:
        what = ("it draws random numbers or keeps state that changes between calls (class attributes, globals, "
                "a counter)")
    name = spec.name.removeprefix("torch_") if torch_code else spec.name
    return (f"{name!r} {NOT_A_FUNCTION} (its output changes between calls): two calls on the same "
            f"inputs at node {node.name} = {node.op}({', '.join(node.inputs)}) gave different outputs, "
            f"{where}; {what}; no gradient can be checked against a function that changes at every call: {HINT}")


def set_aside(result) -> None:
    """A run that met code that is not a function of its inputs (``result.not_a_function``): findings from
    cases before it was seen are not evidence (finite differences estimated a moving target); they go into a
    note, and the run is inconclusive with that reason (``Result``)."""
    if not getattr(result, "not_a_function", "") or not result.discrepancies:
        return
    first = result.discrepancies[0]
    result.note(f"{len(result.discrepancies)} finding(s) set aside, not judged: the code under test is not a "
                f"function of its inputs (first: [{first.kind}] {str(first.message).splitlines()[0][:300]})")
    result.discrepancies.clear()


def not_a_function_among(reasons) -> str:
    """The first per-case reason (``{reason: cases}``, a campaign's inconclusive tally) saying the code under
    test is not a function of its inputs, or "": a campaign whose other cases agreed is not an OK then."""
    return next((f"{r} ({k} case{'' if k == 1 else 's'})" for r, k in dict(reasons).items() if NOT_A_FUNCTION in r), "")
