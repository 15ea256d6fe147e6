"""Finite differences' error bound computed when first asked for (``gradspec.oracles._fd_lazy``,
``gradspec._check_lazy``) changes no answer: the same estimates, the same error bounds once read, and
``gs.check`` gives the same verdict -- status, notes, skips, discrepancies, every comparison's ratio to
the last bit -- as with the bound computed at once (the lazy path switched off).  The lower bound that
the first comparison uses never exceeds the bound itself.  (The estimates and refusals against the old
oracle verbatim: ``tests/test_fd_fast.py``, which reads every error bound.)
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import gradspec as gs
from gradspec._private.sampling import sample
from gradspec.check import Comparison
from gradspec.oracles import fd
from tests._mutants import MUTANT_VJPS, planted

CPU = ["reference", "finite-differences", "jacobian", "torch-cpu"]


def _overflowing_S():
    """s = x0 - x1 is finite and small, S = |x0| + |x1| overflows: the forced error bound is inf, which sends
    every pair of the full comparison down check._compare (the reason for _check_lazy.MARGIN)."""
    x = np.array([0.9e308, 0.9e308])
    return gs.Case.build({"x": x}, [("y", "neg", ["x"], {})], ["y"], [np.array([1.0, -1.0])])


@pytest.fixture(scope="module")
def corpus():
    cases = sample(gs.strategies.cases(), 120, 11)
    cases += sample(gs.strategies.cases(dtype="float32"), 30, 11)
    cases += sample(gs.strategies.cases(min_dims=2, min_side=4, max_side=12, max_elements=1000), 10, 11)
    return cases + [_overflowing_S()]


def _eager(monkeypatch):
    """The error bound computed at once: nothing counts as settled, so fd takes its eager path."""
    monkeypatch.setattr(fd, "_settled_small", lambda *a: None)
    monkeypatch.setattr(fd, "_settled", lambda *a: None)


def _sig(v) -> dict:
    arrays = lambda d: None if d is None else {k: (str(np.asarray(a).dtype), np.asarray(a).tolist()) for k, a in d.items()}
    return {
        "status": v.status, "reason": v.reason, "skipped": sorted(v.skipped.items()), "excused": sorted(v.excused.items()),
        "errors": sorted((k, e[0], e[1]) for k, e in v.errors.items()), "notes": [str(n) for n in v.notes],
        "discrepancies": [(d.kind, d.oracles, d.message, repr(d.abs_err), repr(d.tolerance)) for d in v.discrepancies],
        "comparisons": [(c.oracles, c.agreed, repr(float(c.max_ratio))) for c in v.comparisons],
        "results": {k: arrays(r) for k, r in v.results.items()}, "fd_error": arrays(v.fd_error),
    }


def _checks(cases, oracles=CPU):
    return [gs.check(c, oracles=oracles) for c in cases]


def test_lower_bound_is_below_the_error_bound_and_the_lazy_path_is_taken(corpus):
    lazy = 0
    for case in corpus:
        try:
            res = fd.fd_gradient(case)
        except Exception:  # noqa: BLE001 - a refusal has no bound
            continue
        if getattr(res.error, "pending", False):
            lazy += 1
            low = res.error.lower
            for k, e in res.error.items():
                with np.errstate(invalid="ignore"):
                    bad = ~(low[k] <= e) & ~np.isnan(e)  # (an error bound of NaN bounds nothing: compared as NaN)
                assert not bad.any(), (case.ops, k, low[k], e)
    assert lazy >= len(corpus) // 2, lazy  # (most estimates are settled: the lazy path is the common one)


def test_check_gives_the_same_verdicts_as_with_the_error_bound_computed_at_once(corpus, monkeypatch):
    lazy_verdicts = _checks(corpus)
    pending = sum(getattr(v.fd_error, "pending", False) for v in lazy_verdicts)
    got = [_sig(v) for v in lazy_verdicts]  # (reads every ratio and error bound: the deferred ones now)
    _eager(monkeypatch)
    want = [_sig(v) for v in _checks(corpus)]
    diffs = [f"case {i} {c.ops}: " + "; ".join(f"{k}: {a[k]} vs {b[k]}" for k in a if a[k] != b[k])
             for i, (c, a, b) in enumerate(zip(corpus, got, want)) if a != b]
    assert not diffs, "\n".join(diffs[:5])
    assert pending >= len(corpus) // 2, pending


def test_the_overflowing_bound_gives_the_same_ratios(monkeypatch):
    case = _overflowing_S()
    v = gs.check(case, oracles=CPU)
    assert getattr(v.fd_error, "pending", False)  # settled: the first look agreed without the (infinite) bound
    got = _sig(v)
    assert np.isinf(v.fd_error["x"]).all()
    _eager(monkeypatch)
    assert got == _sig(gs.check(case, oracles=CPU))


@pytest.mark.parametrize("name", sorted(MUTANT_VJPS), ids=sorted(MUTANT_VJPS))
def test_planted_bugs_give_the_same_verdicts(corpus, name, monkeypatch):
    op, vjp = MUTANT_VJPS[name]
    cases = [c for c in corpus if op in c.ops][:12]
    with planted(op, vjp):
        got = [_sig(v) for v in _checks(cases)]
        _eager(monkeypatch)
        want = [_sig(v) for v in _checks(cases)]
    assert got == want


def test_a_lazy_verdict_pickles_and_copies_as_plain_values():
    case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    v = gs.check(case, oracles=CPU)
    assert v.fd_error.pending
    comps, err = pickle.loads(pickle.dumps((v.comparisons, v.fd_error)))
    assert type(err) is dict and all(type(c) is Comparison for c in comps)
    assert comps == v.comparisons and err.keys() == v.fd_error.keys()
    assert repr(comps) == repr(v.comparisons)  # (the lazy subclass prints as the plain comparison)


_INF, _NAN, _BIG = np.inf, np.nan, 1e308
_SP, _SM, _S2 = [1.00001, 1.00002, 1.00003], [0.99999, 0.99998, 0.99997], [1.00002, 1.00004, 1.00006]  # s0 + f h g


def _with(row: int, j: int, v: float):
    s = [list(_SP), list(_SM), list(_S2)]
    s[row][j] = v
    return s


# (s rows, s0, h): a smooth function's values (settled), a coarse one (not), a value that is not finite in each
# of the three rows, in the centre and in a step, and finite values whose correction overflows
SETTLED = {
    "smooth": ([_SP, _SM, _S2], 1.0, [1e-5] * 3),
    "coarse": ([[1.1, 2.0, 3.0], [0.9, 2.0, 3.0], [1.5, 2.0, 3.0]], 1.0, [0.1] * 3),
    "inf in s+": (_with(0, 1, _INF), 1.0, [1e-5] * 3),
    "inf in s-": (_with(1, 2, -_INF), 1.0, [1e-5] * 3),
    "inf in s2": (_with(2, 0, _INF), 1.0, [1e-5] * 3),
    "inf in every row": ([[_INF] + _SP[1:], [_INF] + _SM[1:], [_INF] + _S2[1:]], 1.0, [1e-5] * 3),
    "nan in s": (_with(0, 2, _NAN), 1.0, [1e-5] * 3),
    "s overflows": ([[_BIG, -_BIG, 1.0], [-_BIG, _BIG, 1.0], [_BIG, _BIG, 1.0]], 1.0, [1e-5] * 3),
    "inf centre": ([_SP, _SM, _S2], _INF, [1e-5] * 3),
    "inf step": ([_SP, _SM, _S2], 1.0, [1e-5, _INF, 1e-5]),
    "nan step": ([_SP, _SM, _S2], 1.0, [1e-5, _NAN, 1e-5]),
}


@pytest.mark.parametrize("name", list(SETTLED), ids=list(SETTLED))
def test_settled_on_arrays_is_settled_on_floats(name):
    # settled() tests the stencil's values through the largest truncation term alone (a value of s that is not
    # finite makes its element's correction inf or NaN) and the steps through their sum: None exactly where
    # settled_small, which tests every value, says None; else the same estimate and lower bound, bit for bit
    from gradspec.oracles import _fd_lazy

    s, s0, h = SETTLED[name]
    with np.errstate(all="ignore"):
        got = _fd_lazy.settled(np.array(s), s0, np.array(h), 1e-15)
        want = _fd_lazy.settled_small(s, s0, h, 1e-15)
    if not np.isfinite(np.array([*np.ravel(s), s0, *h])).all() or name in ("coarse", "s overflows"):
        assert got is None and want is None
        return
    assert got is not None and want is not None
    for a, b in zip(got[:2], want[:2]):
        assert np.array_equal(np.asarray(a).view(np.int64), np.asarray(b).view(np.int64))
