"""The gradspec pytest plugin: Hypothesis profiles and report options.

Installed through the ``pytest11`` entry point, so any project that has gradspec installed gets
``--gradspec-profile {ci,dev,fuzz}`` and ``--gradspec-report-dir DIR``.
"""

from __future__ import annotations

import os

from .profiles import register_profiles

__all__ = ["pytest_addoption", "pytest_configure"]


def pytest_addoption(parser):
    group = parser.getgroup("gradspec")
    group.addoption(
        "--gradspec-profile",
        default=None,
        choices=["ci", "dev", "fuzz"],
        help="Hypothesis profile for gradspec properties (default: 'ci' when CI is set, else 'dev').",
    )
    group.addoption(
        "--gradspec-report-dir",
        default=None,
        help="Write an HTML report for every failing gradient check into this directory.",
    )


def pytest_configure(config):
    from hypothesis import settings

    register_profiles()
    name = config.getoption("--gradspec-profile") or ("ci" if os.environ.get("CI") else "dev")
    settings.load_profile(name)
    config._gradspec_profile = name
    report_dir = config.getoption("--gradspec-report-dir")
    if report_dir:
        os.environ["GRADSPEC_REPORT_DIR"] = os.path.abspath(report_dir)


def pytest_report_header(config):
    return f"gradspec: hypothesis profile {getattr(config, '_gradspec_profile', '?')!r}"
