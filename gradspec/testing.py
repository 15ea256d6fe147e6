"""Assertions for your own tests: ``gs.assert_gradients(case)`` and the ``gradspec_check`` fixture.

``assert_gradients`` runs every applicable oracle on a case (and your engine, if you pass one) and
raises ``AssertionError`` listing the discrepancies.  When a report dir is set - the
``report_dir`` argument, pytest's ``--gradspec-report-dir DIR`` (gradspec's plugin), or the
``GRADSPEC_REPORT_DIR`` environment variable - it also writes the same HTML report as
``gradspec fuzz`` (``DIR/<id>/index.html``, ``case.json``, ``repro.py``) and refreshes
``DIR/index.html``.  Inside a Hypothesis test only the final, shrunk failing example is written
(not every intermediate example Hypothesis tries while shrinking).

Example::

    >>> import numpy as np, gradspec as gs
    >>> from gradspec.testing import assert_gradients
    >>> case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    >>> assert_gradients(case, oracles=["reference", "jacobian", "finite-differences"]).ok
    True
"""

from __future__ import annotations

import os
import time
import uuid

from .check import Verdict

__all__ = ["assert_gradients", "GradientMismatch", "GradientCheckInconclusive", "current_report_dir", "refresh_index", "ENV_REPORT_DIR",
           "ENV_SESSION"]

ENV_REPORT_DIR = "GRADSPEC_REPORT_DIR"
ENV_SESSION = "GRADSPEC_SESSION_ID"


class GradientMismatch(AssertionError):
    """Oracles disagree on a case; ``.verdict`` has the details, ``.report`` the HTML report (or None)."""

    def __init__(self, message: str, verdict: Verdict, report: str | None):
        super().__init__(message)
        self.verdict = verdict
        self.report = report


class GradientCheckInconclusive(AssertionError):
    """Nothing could be compared (``.verdict.reason`` says why): never a pass (CONTRACT §3)."""

    def __init__(self, message: str, verdict: Verdict):
        super().__init__(message)
        self.verdict = verdict


def current_report_dir() -> str | None:
    """The report dir in effect (``--gradspec-report-dir`` / ``GRADSPEC_REPORT_DIR``), or None."""
    return os.environ.get(ENV_REPORT_DIR) or None


def _session_id() -> str:
    sid = os.environ.get(ENV_SESSION)
    if not sid:
        sid = os.environ[ENV_SESSION] = time.strftime("test-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    return sid


def _in_shrinking_hypothesis() -> bool:
    """True inside a Hypothesis example that is not the final (shrunk) replay of a failure."""
    try:
        from hypothesis.control import _current_build_context
    except ImportError:  # pragma: no cover - very old Hypothesis
        return False
    ctx = _current_build_context.value
    return ctx is not None and not getattr(ctx, "is_final", True)


def assert_gradients(case, *, oracles=None, engine=None, report_dir: str | None = None, test: str | None = None,
                     timeout: float | None = None, inconclusive: str = "fail") -> Verdict:
    """Check ``case`` with every applicable oracle; raise :class:`GradientMismatch` on any discrepancy.

    ``oracles``: names or Oracle objects (default: every available one).  ``engine``: an engine
    under test (``"torch-cpu"``, ``"module:attr"`` or an Engine object), compared with the oracles.
    ``report_dir``: where to write the HTML report of a failure (default: see the module docstring).
    ``test``: a label shown in the report (the fixture passes the pytest node id).
    ``timeout``: seconds before an oracle is cut and reported as a ``timeout`` discrepancy.
    ``inconclusive``: what a check that compared nothing does (no pair of oracles produced
    gradients, or the forward raised): ``"fail"`` (default) raises :class:`GradientCheckInconclusive`
    with the reason -- a test that checked nothing must not look like one that passed;
    ``"skip"`` skips the calling pytest test with the reason (the choice for checks that need
    hardware some CI machines lack, e.g. ``oracles=["torch-cuda", ...]``).
    Returns the :class:`gradspec.Verdict` when everything agrees.
    """
    __tracebackhide__ = True  # pytest shows the user's failing line, not gradspec's internals
    from . import fuzz
    from . import oracles as _oracles

    chosen = None
    if oracles is not None or engine is not None:
        chosen = [o if isinstance(o, _oracles.Oracle) else _oracles.get(o) for o in (oracles or _oracles.names())]
    if engine is not None:
        from . import engines as _engines

        label = engine if isinstance(engine, str) else None
        if isinstance(engine, str) and engine in fuzz.BUILTIN_ENGINES:
            if engine not in [o.name for o in chosen]:
                chosen.append(_oracles.get(engine))
        else:
            obj = _engines.get(engine)
            name = getattr(obj, "name", "engine")
            if name in {o.name for o in chosen}:
                name = f"{name} (engine)"
            chosen.append(fuzz.EngineOracle(obj, name, label))
        if label:
            case.engine = label
    if inconclusive not in ("fail", "skip"):
        raise ValueError(f"assert_gradients(inconclusive={inconclusive!r}): choose 'fail' or 'skip'")
    verdict = fuzz.guarded_check(case, chosen, timeout)
    if verdict.ok:
        return verdict
    if verdict.status == "inconclusive":
        _inconclusive(verdict, inconclusive)
    where = report_dir if report_dir is not None else current_report_dir()
    path = None
    if where and not _in_shrinking_hypothesis():
        path = _write(where, verdict, test)
    n = len(verdict.discrepancies)
    lines = [f"gradspec: {n} gradient discrepanc{'y' if n == 1 else 'ies'}"]
    for d in verdict.discrepancies:
        lines.append(f"  [{d.kind}] {d.message}")
    try:
        lines.append("case:\n" + case.to_text())
    except Exception:
        pass
    if path:
        lines.append(f"HTML report: {path}")
    raise GradientMismatch("\n".join(lines), verdict, path)


def _inconclusive(verdict: Verdict, how: str):
    __tracebackhide__ = True
    text = f"gradspec: gradient check inconclusive: {verdict.reason}"
    if how == "skip":
        import pytest

        pytest.skip(text)
    raise GradientCheckInconclusive(text + "\n(pass inconclusive='skip' to skip such a test with this reason)", verdict)


def _write(where: str, verdict: Verdict, test: str | None) -> str | None:
    from . import fuzz, report

    d = verdict.discrepancies[0]
    info = {
        "run_id": _session_id(),
        "engine": verdict.case.engine,
        "note": f"from test {test}" if test else "from gs.assert_gradients",
        "test": test,
        "covers": sorted({fuzz._sig_key(x.signature) for x in verdict.discrepancies}),
        "found_at": time.time(),
    }
    try:
        folder = report.write_discrepancy_report(where, d, verdict, info=info)
        refresh_index(where)
    except OSError as e:  # the assertion must still fail with the discrepancy itself
        return f"(could not write the report into {where}: {e.strerror or e})"
    return os.path.join(folder, "index.html")


def refresh_index(where: str) -> str:
    """Rewrite ``where/index.html`` listing every discrepancy folder (used after each written report)."""
    from . import report

    sid = os.environ.get(ENV_SESSION)
    records = report.read_records(where)
    mine = [r for r in records if sid and r.get("run_id") == sid]
    summary = {
        "cases": len(mine),
        "seconds": 0.0,
        "engine": "from tests",
        "run_id": sid,
        "reports": mine,
        "source": "tests",
        "config": {"source": "gradspec pytest plugin / gs.assert_gradients", "session": sid or ""},
        "oracles": {},
        "ops": {},
    }
    return report.write_run_report(where, summary, title="test report")
