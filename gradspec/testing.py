"""Assertions for your own tests: ``gs.assert_gradients(case)``, the ``gradspec_check`` fixture, and
``gs.assert_op`` / ``gs.assert_torch_function`` / ``gs.assert_engine``.

``assert_op(op, **kw)`` (and the other two) run ``gs.verify_op`` (``verify_torch_function``,
``verify_engine``) with the same keywords and return the :class:`gradspec.Result` when every
check agreed.  Otherwise they raise :class:`VerificationFailed` (an ``AssertionError``) whose
message is each finding's cause (``Discrepancy.cause`` when the diagnosis set one, else its
message) and the command that replays it; an *inconclusive* run (no case ran, nothing was
compared) fails too, with the reason (:class:`VerificationInconclusive`), or is skipped with it under
``inconclusive="skip"`` - as in ``assert_gradients``.

``assert_gradients`` runs every applicable oracle on a case (and your engine, if you pass one) and
raises ``AssertionError`` listing the discrepancies.  When a report dir is set - the
``report_dir`` argument, pytest's ``--gradspec-report-dir DIR`` (gradspec's plugin), or the
``GRADSPEC_REPORT_DIR`` environment variable - it also writes the same HTML report as
``gradspec fuzz`` (``DIR/<id>/index.html``, ``case.json``, ``repro.py``) and refreshes
``DIR/index.html``.  Inside a Hypothesis test only the final, shrunk failing example is written
(not every intermediate example Hypothesis tries while shrinking).

With a report dir set, every ``verify_*`` result that is not OK is written there as well (one
folder per test id and finding: two tests failing on the same op keep two reports), whether it
came from an ``assert_*`` or from a bare ``verify_*`` call.

Example::

    >>> import numpy as np, gradspec as gs
    >>> cube = gs.Op("cube_doc", forward=lambda x: x ** 3, vjp=lambda g, x, out: (3 * x ** 2 * g,))
    >>> gs.assert_op(cube, max_examples=5, seed=0).status
    'agree'
    >>> from gradspec.testing import assert_gradients
    >>> case = gs.Case.build({"x": np.array([0.5, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    >>> assert_gradients(case, oracles=["reference", "jacobian", "finite-differences"]).ok
    True
"""

from __future__ import annotations

import hashlib
import html as _html
import json
import os
import re
import time
import uuid

from ._private import result_sink
from ._private.records import make_record_folder
from ._private.seeds import current_test
from .check import Verdict, finding_lines

__all__ = ["assert_gradients", "HeldFixedWarning", "GradientMismatch", "GradientCheckInconclusive", "current_report_dir", "refresh_index",
           "ENV_REPORT_DIR", "ENV_SESSION", "assert_op", "assert_torch_function", "assert_engine", "VerificationFailed",
           "VerificationInconclusive", "write_result", "current_test"]

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
    test = test or current_test()
    if where and not _in_shrinking_hypothesis():
        path = _write(where, verdict, test)
    n = len(verdict.discrepancies)
    lines = [f"gradspec: {n} gradient discrepanc{'y' if n == 1 else 'ies'}"]
    lines += finding_lines(verdict.discrepancies, "  ", kind=True)  # (each with its cause, as gs.check says it)
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
    """Rewrite ``where/index.html``: this session's failing checks first, folders of earlier sessions
    marked as not failing in this one (after each written report, and at the end of every session)."""
    from . import report

    sid = os.environ.get(ENV_SESSION)
    records = report.read_records(where)
    mine = [r for r in records if sid and r.get("run_id") == sid]
    # Reports of earlier sessions stay listed, but not as failures of this one: after a fix they
    # say so instead of reading like current failures.
    previous = [{"id": r["id"], "status": "did not fail in this session"} for r in records if r not in mine]
    summary = {
        "previous": previous,
        "cases": len(mine),
        "seconds": 0.0,
        "engine": "from tests",
        "run_id": sid,
        "reports": mine,
        "source": "tests",
        "config": {"source": "gradspec pytest plugin / gs.assert_gradients", "session": sid or ""},
        "oracles": {},
        "ops": {},
        "tests": sorted({r["test"] for r in mine if r.get("test")}),
    }
    n = len(mine)
    # What the page holds: the failing checks of one session (passing checks write nothing).
    title = f"test report: {n} failing gradient check{'' if n == 1 else 's'}" + (f" in session {sid}" if sid else "")
    return report.write_run_report(where, summary, title=title)


# =============================================================================================
# verify_* as assertions, and their results in the report dir
# =============================================================================================


class HeldFixedWarning(UserWarning):
    """A passing ``gs.assert_torch_function`` held an int/bool tensor argument (an index, a mask, a target) at the
    example's values in every case: a bug that shows only at other values was not searched.  A held number or
    string (a dim, a mode) is listed in ``result.held`` but does not warn (review15 #6).  ``-W
    error::gradspec.testing.HeldFixedWarning`` makes such a test fail."""


def _warn_held(result) -> None:
    from .verify.torch_call import HELD_TENSOR

    held = [h for h in getattr(result, "held", None) or () if f" {HELD_TENSOR} " in h]
    if held:
        import warnings

        warnings.warn(HeldFixedWarning(
            f"gradspec: {result.target} passed with int/bool tensor arguments held fixed in every case: "
            f"{'; '.join(held)} -- a bug that depends on their values (a duplicate index, an empty mask, an ignored "
            "target) was not searched (at= points with other values: at=[(x, idx2, ...)])"), stacklevel=4)


class VerificationFailed(AssertionError):
    """A ``verify_*`` run did not agree; ``.result`` is the :class:`gradspec.Result`, ``.reports``
    the folders written into the report dir (empty without one)."""

    def __init__(self, message: str, result, reports: list):
        super().__init__(message)
        self.result = result
        self.reports = reports


class VerificationInconclusive(VerificationFailed):
    """A ``verify_*`` run under ``assert_*`` compared nothing (``.result.reason`` says why): never a pass."""


def _cause_text(d) -> str:
    cause = getattr(d, "cause", None)
    return cause.describe() if cause is not None else d.message


def failure_message(result, reports=()) -> str:
    """The assertion message for a result that is not OK: each finding's cause and its replay."""
    n = len(result.discrepancies)
    status = getattr(result, "status", "disagree" if n else "agree")
    if status == "inconclusive":
        head = (f"gradspec: verify {result.what} {result.target} was INCONCLUSIVE "
                f"({result.cases_run} cases, seed {result.seed}): {getattr(result, 'reason', '') or 'no reason given'}")
    else:
        head = (f"gradspec: verify {result.what} {result.target}: {n} finding{'' if n == 1 else 's'} "
                f"({result.cases_run} cases, seed {result.seed})")
    lines = [head]
    for i, d in enumerate(result.discrepancies):
        lines.append(f"{i + 1}. [{d.kind}] {_cause_text(d)}")
        if getattr(d, "cause", None) is not None and d.message not in lines[-1]:
            lines.append(f"   message: {d.message}")
        written = _written_replay(reports[i]) if i < len(reports) else None
        replay = written or _replay_in_a_test(d, i)  # the case file already written, else how to write it
        if replay:
            lines.append(f"   replay: {replay}")
    if result.replay:
        lines.append(f"replay the whole run: {result.replay}")
    for r in reports:
        lines.append(f"HTML report: {r}")
    return "\n".join(lines)


def _replay_in_a_test(d, i: int) -> str:
    """A finding's replay as an assertion's reader can follow it.  ``verify_*`` says "result.write_html(DIR), then
    `gradspec replay DIR/<id>/case.json`", but a test has no ``result`` (tryout9 #9): the plugin's report dir (or
    ``report_dir=``) writes the case file, and the raised exception carries the result."""
    replay = getattr(d, "replay", "") or ""
    if getattr(d, "case", None) is None or not replay.startswith(_WRITE_HTML):
        return replay
    command = re.search(r"`(gradspec replay [^`]*)`", replay)
    return (f"run pytest with --gradspec-report-dir DIR (or pass report_dir=DIR) to write this finding's case file, "
            f"then `{command.group(1) if command else 'gradspec replay DIR/<id>/case.json'}`; or "
            f"gs.check(e.result.discrepancies[{i}].case) with the raised exception as e")


_WRITE_HTML = "result.write_html(DIR)"  # how verify_*'s replay of a case finding starts (verify.op, torch_function)


def _written_replay(index_path: str) -> str | None:
    """``gradspec replay <folder>/case.json --allow-import ...`` for a report folder written with a case."""
    from ._private import jsondata
    from .caseio import replay_command

    case = os.path.join(os.path.dirname(str(index_path)), "case.json")
    try:
        d = jsondata.read(case, None, max_depth=None)  # (written by this process; still no FIFO, no link)
        return replay_command(case, d.get("engine"), d.get("user_ops"))
    except (OSError, ValueError, AttributeError):
        return None


def _assert(run, target, kw) -> object:
    __tracebackhide__ = True
    how = kw.pop("inconclusive", "fail")
    if how not in ("fail", "skip"):
        raise ValueError(f"inconclusive={how!r}: choose 'fail' or 'skip'")
    report_dir = kw.pop("report_dir", None)
    test = kw.pop("test", None) or current_test()
    with result_sink.suppressed():  # written below, so the message can name the folders
        result = run(target, **kw)
    status = result.status
    if status == "agree":
        _warn_held(result)  # a green test says what it did not vary (tryout10 F7)
        return result
    if status == "inconclusive" and how == "skip":
        import pytest

        pytest.skip(failure_message(result))
    where = report_dir if report_dir is not None else current_report_dir()
    reports = []
    if where:
        try:
            reports = write_result(result, where, test)
        except OSError as e:
            reports = [f"(could not write the report into {where}: {e.strerror or e})"]
    cls = VerificationInconclusive if status == "inconclusive" else VerificationFailed
    raise cls(failure_message(result, reports), result, reports)


def assert_op(op, **kw):
    """``gs.verify_op(op, **kw)`` as an assertion (see the module docstring); returns the Result."""
    __tracebackhide__ = True
    from .verify import verify_op

    return _assert(verify_op, op, kw)


def assert_torch_function(fn, **kw):
    """``gs.verify_torch_function(fn, **kw)`` as an assertion; returns the Result."""
    __tracebackhide__ = True
    from .verify import verify_torch_function

    return _assert(verify_torch_function, fn, kw)


def assert_engine(engine, **kw):
    """``gs.verify_engine(engine, **kw)`` as an assertion; returns the Result."""
    __tracebackhide__ = True
    from .verify import verify_engine

    return _assert(verify_engine, engine, kw)


def _plain_folder(where: str, key: str, kind: str, title: str, body: str, rec: dict) -> str:
    """A report folder for a finding without a case (an engine rule, an inconclusive run)."""
    from . import report

    rid = "d-" + hashlib.sha1(key.encode()).hexdigest()[:10]
    folder = make_record_folder(where, rid)  # (a link planted at the predictable id is never written through)
    page = ("<!doctype html><html><head><meta charset='utf-8'><title>gradspec: "
            f"{_html.escape(kind)}</title></head><body><p><a href='../index.html'>&larr; test report</a></p>"
            f"<h1>{_html.escape(title)}</h1>{body}</body></html>")
    report.atomic_write(os.path.join(folder, "index.html"), page)
    report.atomic_write(os.path.join(folder, report.RECORD), json.dumps({**rec, "id": rid}, indent=1, default=str))
    return folder


def _append_replay(path: str, d, result) -> None:
    from . import report

    with open(path, encoding="utf-8") as f:
        text = f.read()
    parts = []
    if getattr(d, "snippet", None):
        parts.append(f"<h2>What happened</h2><pre>{_html.escape(d.snippet)}</pre>")
    if getattr(d, "replay", ""):
        parts.append(f"<h2>Replay</h2><pre>{_html.escape(d.replay)}</pre>")
    if result.replay:
        parts.append(f"<h2>The whole run</h2><pre>{_html.escape(result.replay)}</pre>")
    frag = "\n".join(parts)
    text = text.replace("</body>", frag + "\n</body>", 1) if "</body>" in text else text + frag
    report.atomic_write(path, text)


def write_result(result, where: str, test: str | None = None) -> list[str]:
    """Write a ``verify_*`` result that is not OK into the report dir ``where``: one folder per
    finding (scoped by ``test``), an inconclusive run as a folder of its own; refreshes
    ``where/index.html``.  Returns the ``index.html`` paths written."""
    from . import report

    where = os.path.abspath(where)
    os.makedirs(where, exist_ok=True)
    base = {"run_id": _session_id(), "test": test, "found_at": time.time(),
            "note": f"from verify {result.what} {result.target}" + (f" in test {test}" if test else "")}
    paths = []
    for d in result.discrepancies:
        if d.case is not None:
            info = dict(base, engine=getattr(d.case, "engine", None), seed=result.seed)
            try:
                folder = report.write_discrepancy_report(where, d, getattr(d, "verdict", None), info=info)
            except Exception as e:  # noqa: BLE001 - a plain page rather than none
                folder = _plain_case_less(where, d, result, base, f"(the full report failed: {type(e).__name__}: {e})")
        else:
            folder = _plain_case_less(where, d, result, base)
        path = os.path.join(folder, "index.html")
        _append_replay(path, d, result)
        paths.append(path)
    if result.status == "inconclusive":
        key = repr(("inconclusive", result.what, result.target, test))
        rec = dict(base, kind="inconclusive", oracles=[], ops=[], message=result.reason, status="found",
                   first_found=base["found_at"])
        body = (f"<p>{_html.escape(result.reason or '')}</p><p>{result.cases_run} cases, seed {result.seed}.</p>"
                f"<h2>Replay</h2><pre>{_html.escape(result.replay)}</pre>")
        title = f"inconclusive: verify {result.what} {result.target}"
        paths.append(os.path.join(_plain_folder(where, key, "inconclusive", title, body, rec), "index.html"))
    refresh_index(where)
    return paths


def _plain_case_less(where, d, result, base, extra: str = "") -> str:
    key = repr((d.kind, getattr(d, "check_name", None), d.message, base.get("test")))
    rec = dict(base, kind=d.kind, oracles=list(d.oracles), ops=[getattr(d, "check_name", None) or result.target],
               message=d.message, status="found", first_found=base["found_at"],
               discrepancy=d.to_json() if hasattr(d, "to_json") else {})
    title = f"{d.kind}" + (f" ({d.check_name})" if getattr(d, "check_name", None) else "")
    body = f"<p>{_html.escape(_cause_text(d))}</p><pre>{_html.escape(d.message)}</pre>{_html.escape(extra)}"
    return _plain_folder(where, key, d.kind, title, body, rec)


def _write_from_sink(result) -> None:
    where = current_report_dir()
    if where and getattr(result, "status", "agree") != "agree":
        write_result(result, where, current_test())


result_sink.register("gradspec.testing report dir", _write_from_sink)
