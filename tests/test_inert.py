"""Reports are inert: every string from user code reaches HTML escaped and ``repro.py`` as data.

Hostile names (engine, oracle, leaf, node), messages and tracebacks carry payloads that mark the
page when they run (``data-pwned`` on <body>, a ``pwned`` element, the text PWNED from a template
expression); headless Chromium renders the pages and the dumped DOM must show none of them.
The generated ``repro.py`` is run with an engine name that tries to close its docstring.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import gradspec as gs
from gradspec import fuzz, report
from gradspec.engines import ReferenceEngine
from gradspec.oracles import get
from tests.test_report import _chromium

MARK = "document.body.setAttribute('data-pwned', 1)"
PAYLOADS = [
    f"<script>{MARK}</script>",
    f"</textarea></pre></code><script>{MARK}</script>",
    f"\"><img src=x onerror=\"{MARK}\">",
    f"'><svg onload='{MARK}'>",
    "{{ 'PW' ~ 'NED' }}{% if true %}PW{{ 'NED' }}{% endif %}",
    "x\"\"\"\nline two <pwned></pwned>\n'''",
]
HOSTILE = " ".join(PAYLOADS)


def _offbyhalf(name):
    class Engine(ReferenceEngine):
        def apply(self, op, *args, **params):
            from gradspec import engine as E

            y = E.call(op, *args, **params)
            if op == "exp":
                y = y + (args[0] - args[0].detach()) * 0.5
            return y

    e = Engine()
    e.name = name
    return e


class _Raises(ReferenceEngine):
    name = "raises " + HOSTILE

    def apply(self, op, *args, **params):
        raise ValueError("raised " + HOSTILE)


def _pages(out) -> list[str]:
    """Report pages with every hostile string in every place one can go."""
    leaf, node = "x " + PAYLOADS[0], "h " + PAYLOADS[2]
    case = gs.Case.build({leaf: np.array([0.5, -1.0, 2.0])}, [(node, "exp", [leaf], {}), ("y", "mul", [node, node], {})],
                         ["y"], [np.array([1.0, -2.0, 0.5])])
    case.engine = "pkg:" + HOSTILE
    pages = []
    for engine in (_offbyhalf("engine " + HOSTILE), _Raises()):
        verdict = fuzz.guarded_check(case, [get("reference"), get("jacobian"), fuzz.EngineOracle(engine)])
        d = next(x for x in verdict.discrepancies if engine.name in x.oracles)
        folder = report.write_discrepancy_report(str(out), d, verdict, info={"note": HOSTILE, "test": HOSTILE})
        pages.append(os.path.join(folder, "index.html"))
    summary = {"cases": 1, "seconds": 1.0, "engine": HOSTILE, "reports": [], "ops": {"exp": 1},
               "oracles": {f"reference vs {HOSTILE}": 1}, "agreement": {f"reference vs {HOSTILE}": 0},
               "config": {"command": f"gradspec fuzz --engine '{HOSTILE}'"}, "errors": [HOSTILE]}
    pages.append(report.write_run_report(str(out), summary))
    from gradspec.result import Result, VerifyDiscrepancy

    res = Result(target=HOSTILE, what="engine", seed=0, cases_run=1, notes=[HOSTILE], checks={HOSTILE: HOSTILE},
                 replay=HOSTILE)
    res.discrepancies.append(VerifyDiscrepancy("seed-shape", (HOSTILE, "torch"), HOSTILE, None, replay=HOSTILE,
                                               snippet=HOSTILE, check_name=HOSTILE))
    vdir = out / "verify"
    index = res.write_html(str(vdir))
    pages.append(index)
    pages += [str(p) for p in vdir.glob("d-*/index.html")]
    return pages


def test_every_page_escapes_what_user_code_wrote(tmp_path):
    for path in _pages(tmp_path):
        html = open(path, encoding="utf-8").read()
        for raw in ("<script", "<img", "<svg onload", "onerror=\"", "<pwned", "PWNED"):
            assert raw not in html.lower() if raw.startswith("<") else raw not in html, (raw, path)


@pytest.mark.skipif(_chromium() is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)")
def test_no_script_runs_in_a_browser(tmp_path):
    pages = _pages(tmp_path / "r")
    flags = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=2000"]
    # Control: the same payload in a page that does not escape it does run (the check can fail).
    control = tmp_path / "control.html"
    control.write_text(f"<!doctype html><html><body>{PAYLOADS[0]}<p>x</p></body></html>")
    for page, hostile in [(str(control), True)] + [(p, False) for p in pages]:
        dom = subprocess.run(flags + ["--dump-dom", "file://" + page], capture_output=True, text=True, timeout=120)
        assert dom.returncode == 0, dom.stderr[-2000:]
        ran = re.search(r"<body[^>]*data-pwned", dom.stdout) is not None
        assert ran == hostile, (page, dom.stdout[:3000])
        if not hostile:
            assert "<pwned" not in dom.stdout and "PWNED" not in dom.stdout, page
            assert "&lt;script&gt;" in dom.stdout, page  # the payload is there, as text


def test_repro_script_keeps_hostile_names_as_data(tmp_path):
    marker = tmp_path / "MARKER"
    evil = f'x"""\nopen({str(marker)!r}, "w").write("ran")\n"""'
    case = gs.Case.build({"x": np.array([0.5, -1.0])}, [("h", "exp", ["x"], {})], ["h"], [np.array([1.0, 2.0])])
    verdict = fuzz.guarded_check(case, [get("reference"), get("jacobian"), fuzz.EngineOracle(_offbyhalf(evil))])
    d = next(x for x in verdict.discrepancies if evil in x.oracles)
    folder = report.write_discrepancy_report(str(tmp_path / "r"), d, verdict)
    run = subprocess.run([sys.executable, os.path.join(folder, "repro.py")], capture_output=True, text=True,
                         timeout=120)
    assert not marker.exists(), run.stdout + run.stderr
    assert run.returncode == 1, run.stdout + run.stderr  # it still shows the planted disagreement
    assert "recorded when the report was written: reference vs " + evil in run.stdout
    assert "DISAGREEMENT (recorded, exit 1)" in run.stdout  # the engine object cannot run again: the record speaks


def test_repro_params_are_data_even_their_keys():
    from gradspec._private.inert import literal

    params = {"dim": (0, -1), "p": float("inf"), "a=__import__('os').system('id'),b": 1}
    assert eval(literal(params), {"np": np}) == params  # noqa: S307 - the point: it evaluates back to the data
    assert literal(np.array([1, 2], dtype=np.int32)) == "np.array([1, 2], dtype='int32')"
