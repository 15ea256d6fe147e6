"""The gradspec pytest plugin: Hypothesis profiles, HTML reports of failing gradient checks, campaigns.

Installed through the ``pytest11`` entry point, so any project that has gradspec installed gets:

* ``--gradspec-profile {ci,dev,fuzz}``: the Hypothesis profile (see :mod:`gradspec.profiles`).
  Without the option the profile is ``ci`` when the ``CI`` environment variable is set, else
  ``dev``; ``GRADSPEC_PROFILE`` in the environment works like the option.
* ``--gradspec-report-dir DIR``: every failing ``gs.assert_gradients(case)`` (or the
  ``gradspec_check`` fixture) writes the same HTML report as ``gradspec fuzz`` into DIR; the
  session ends with ``DIR/index.html`` listing them.  Works under ``pytest -n auto`` (the workers
  write their folders atomically; the controller writes the index at the end).
* the fixture ``gradspec_check(case, **kw)``: ``gs.assert_gradients`` with the test's node id in
  the report.  A check that compared nothing (inconclusive: no pair of oracles produced
  gradients, the forward raised) fails the test with the reason, never passes it;
  ``inconclusive="skip"`` makes it an explicit skip with the reason instead.
* the worker side of ``gradspec fuzz --workers K``: in an xdist worker that the controller handed a
  campaign (``workerinput``), the campaign's chunks are the session's items (gradspec.fuzz.workers).
"""

from __future__ import annotations

import os

import pytest

from .profiles import PROFILES, register_profiles

__all__ = ["pytest_addoption", "pytest_configure", "pytest_unconfigure", "gradspec_check"]


def pytest_addoption(parser):
    group = parser.getgroup("gradspec")
    group.addoption(
        "--gradspec-profile",
        default=None,
        choices=list(PROFILES),
        help="Hypothesis profile: ci (derandomized), dev (quick), fuzz (long). "
        "Default: $GRADSPEC_PROFILE, else 'ci' when $CI is set, else 'dev'.",
    )
    group.addoption(
        "--gradspec-report-dir",
        default=None,
        metavar="DIR",
        help="Write an HTML report for every failing gradient check (gs.assert_gradients / gradspec_check) into DIR.",
    )


def pytest_configure(config):
    from hypothesis import settings

    from . import testing

    register_profiles()
    name = (config.getoption("--gradspec-profile") or os.environ.get("GRADSPEC_PROFILE")
            or ("ci" if os.environ.get("CI") else "dev"))
    if name not in PROFILES:
        raise pytest.UsageError(f"GRADSPEC_PROFILE={name!r}: choose one of {', '.join(PROFILES)}")
    config._gradspec_profile_before = settings.get_current_profile_name()
    settings.load_profile(name)
    config._gradspec_profile = name
    report_dir = config.getoption("--gradspec-report-dir")
    config._gradspec_report_dir = None
    config._gradspec_env = {k: os.environ.get(k) for k in (testing.ENV_REPORT_DIR, testing.ENV_SESSION)}
    if report_dir:
        report_dir = os.path.abspath(report_dir)
        if os.path.exists(report_dir) and not os.path.isdir(report_dir):
            raise pytest.UsageError(f"--gradspec-report-dir {report_dir!r} exists and is not a directory")
        config._gradspec_report_dir = report_dir
        # The environment carries it to xdist workers and to gs.assert_gradients calls without the fixture.
        os.environ[testing.ENV_REPORT_DIR] = report_dir
        if not os.environ.get("PYTEST_XDIST_WORKER"):
            testing._session_id()  # one session id, set before xdist starts the workers (they inherit it)


def pytest_unconfigure(config):
    # Leave the environment and the Hypothesis profile as they were (a pytest session run inside another, e.g. with
    # pytester: its default profile, dev, stayed loaded in the outer session, whose later tests then ran randomized
    # and kept saved failures in .hypothesis/ -- under --gradspec-profile ci).
    for k, v in (getattr(config, "_gradspec_env", None) or {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    before = getattr(config, "_gradspec_profile_before", None)
    if before is not None:
        from hypothesis import settings

        settings.load_profile(before)


def pytest_report_header(config):
    lines = [f"gradspec: hypothesis profile {getattr(config, '_gradspec_profile', '?')!r}"]
    if getattr(config, "_gradspec_report_dir", None):
        lines.append(f"gradspec: reports of failing gradient checks go to {config._gradspec_report_dir}")
    return lines


@pytest.fixture
def gradspec_check(request):
    """``gradspec_check(case, oracles=None, engine=None, timeout=None, inconclusive="fail")``: assert that every
    oracle agrees.

    Same as ``gs.assert_gradients``, with the test's node id recorded in the HTML report; an
    inconclusive check fails (or, with ``inconclusive="skip"``, skips) with the reason.
    """
    from .testing import assert_gradients

    def check(case, **kw):
        __tracebackhide__ = True
        kw.setdefault("test", request.node.nodeid)
        return assert_gradients(case, **kw)

    return check


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # The ci profile's seed of a verify_* call without seed= comes from this key, not from the node id:
    # the node id is relative to pytest's rootdir, which moves with the command line and the cwd.
    from ._private.seeds import ENV_TEST_KEY, stable_test_key

    before = os.environ.get(ENV_TEST_KEY)
    try:
        modpath = item.getmodpath() if hasattr(item, "getmodpath") else item.name
        os.environ[ENV_TEST_KEY] = stable_test_key(item.path, modpath)
    except Exception:  # an item without a file: the node id (PYTEST_CURRENT_TEST) decides
        os.environ.pop(ENV_TEST_KEY, None)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV_TEST_KEY, None)
        else:
            os.environ[ENV_TEST_KEY] = before


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session):
    # In an xdist worker of `gradspec fuzz --workers K`: the campaign's chunks come from the
    # controller in workerinput, not from files (gradspec.fuzz.workers).
    if getattr(session.config, "workerinput", None) is None:
        return None
    from .fuzz.workers import worker_collection

    return worker_collection(session)


def pytest_sessionfinish(session, exitstatus):
    if getattr(session.config, "workerinput", None) is not None:
        from .fuzz.workers import worker_sessionfinish

        worker_sessionfinish(session)
    where = getattr(session.config, "_gradspec_report_dir", None)
    if not where or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    os.makedirs(where, exist_ok=True)
    from . import report, testing

    sid = os.environ.get(testing.ENV_SESSION)
    mine = [r for r in report.read_records(where) if sid and r.get("run_id") == sid]
    session.config._gradspec_written = mine
    try:
        # Every session, failures or not: an index left from an earlier session would still list
        # bugs that have been fixed since as failures.
        testing.refresh_index(where)
    except OSError:
        pass


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    mine = getattr(config, "_gradspec_written", None)
    if not mine:
        return
    where = config._gradspec_report_dir
    from ._private.inert import printable

    # an inconclusive run (nothing ran, nothing compared) has a report but is no discrepancy (tryout7 #13f)
    found = [r for r in mine if r.get("kind") != "inconclusive"]
    unsure = [r for r in mine if r.get("kind") == "inconclusive"]
    head = [f"{len(found)} gradient discrepancy report(s)"] if found else []
    head += [f"{len(unsure)} inconclusive run(s)"] if unsure else []
    terminalreporter.write_sep("-", f"gradspec: {', '.join(head)}")
    for r in found + unsure:  # records read back from the report dir: printed inert, as gradspec fuzz's summary
        what = (f"inconclusive: {str(r.get('message') or '')[:200]}" if r in unsure
                else f"{r.get('kind')} ({' vs '.join(map(str, r.get('oracles') or []))})")
        terminalreporter.write_line(printable(f"{os.path.join(where, r['id'], 'index.html')}  {what} {r.get('test') or ''}"))
    terminalreporter.write_line(f"index: {os.path.join(where, 'index.html')}")
