"""tryout6 #11: a report folder copied elsewhere (a colleague's machine) still works.

Every link in every index.html is relative and leads to a file the folder holds (the pytest plugin's index linked
a summary.json it never writes); a finding page's commands use paths relative to its own folder, and the absolute
place it was written at appears only in the one element that says so (id="written-at")."""

from __future__ import annotations

import html as _html
import os
import re
import shlex
import shutil

import pytest

import gradspec as gs
from gradspec import cli, report, search, testing
from tests import _planted as P


@pytest.fixture(scope="module")
def moved(tmp_path_factory):
    """(the folder the reports were written in, where they were moved to): a plugin-style dir and a Result's."""
    mp = pytest.MonkeyPatch()
    mp.setattr(search, "SHRINK_CALLS", 25)  # CI speed: a shorter, still deterministic shrink
    try:
        r = gs.verify_op(P.pl_mean_norm, max_examples=30, seed=0)
    finally:
        mp.undo()
    assert r.discrepancies, str(r)
    base = tmp_path_factory.mktemp("written")
    tests_dir, result_dir = base / "plugin", base / "result"
    report.write_discrepancy_report(str(tests_dir), r.discrepancies[0], info={"test": "test_x.py::test_y",
                                                                              "note": "from test test_x.py::test_y"})
    testing.refresh_index(str(tests_dir))
    r.write_html(str(result_dir))
    dest = tmp_path_factory.mktemp("colleague") / "rep"
    shutil.move(str(base), str(dest))
    return str(base), str(dest)


def _pages(root):
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f == "index.html"]


def test_every_link_is_relative_and_leads_to_a_file_of_the_folder(moved):
    _, dest = moved
    pages = _pages(dest)
    assert len(pages) >= 4, pages  # two run indexes, a finding page in each
    for page in pages:
        text = open(page, encoding="utf-8").read()
        for href in re.findall(r'(?:href|src)="([^"#]+)"', text):
            assert not os.path.isabs(href) and "://" not in href, (page, href)
            assert os.path.exists(os.path.join(os.path.dirname(page), _html.unescape(href))), (page, href)


def test_a_finding_page_names_where_it_was_written_only_where_it_says_so(moved):
    written, dest = moved
    for page in _pages(dest):
        if not os.path.exists(os.path.join(os.path.dirname(page), "case.json")):
            continue  # (a run index)
        text = open(page, encoding="utf-8").read()
        marked = re.search(r'<span id="written-at"[^>]*>.*?</span>', text, re.S)
        assert marked and written in marked.group(0), page
        rest = text.replace(marked.group(0), "")
        assert written not in rest, rest[max(0, rest.index(written) - 300):rest.index(written) + 100]


def test_the_replay_command_of_a_moved_page_runs_in_its_folder(moved, monkeypatch):
    _, dest = moved
    for page in _pages(dest):
        text = open(page, encoding="utf-8").read()
        cmd = re.search(r'<pre id="replay-cmd"[^>]*>(.*?)</pre>', text, re.S)
        if cmd is None:
            continue
        argv = shlex.split(_html.unescape(cmd.group(1)))
        assert argv[:2] == ["gradspec", "replay"], argv
        monkeypatch.chdir(os.path.dirname(page))
        assert cli.main(argv[1:]) == 1, page  # pl_mean_norm's vjp is wrong (by 1.25): the replay still disagrees
