"""Report pages a person can act on (issue 14 item 3): the cause's headline at the top (sentence, node, fix),
titles naming the thing under test, "your code" on the oracle that runs the user's backward, roots and the
blamed node marked in the graph, the tolerance derivation once, |difference| / tolerance maps per leaf,
terminal lines cut at word boundaries; rendered in headless Chromium (skipped, with the reason, without it).
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib

import numpy as np
import pytest

import gradspec as gs
from gradspec import report, report_cause, search
from gradspec.causes import Cause
from tests import _planted as P


@pytest.fixture(autouse=True)
def _short_shrinking(monkeypatch):
    monkeypatch.setattr(search, "SHRINK_CALLS", 25)  # CI speed: a shorter, still deterministic shrink


def _page(directory) -> str:
    folders = [f for f in os.listdir(directory) if os.path.isfile(os.path.join(directory, f, "index.html"))]
    assert folders, os.listdir(directory)
    return os.path.join(directory, sorted(folders)[0], "index.html")


@pytest.fixture(scope="module")
def wrong_vjp_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("vjp")
    r = gs.verify_op(P.pl_mean_norm, max_examples=30, seed=0)
    r.write_html(str(out))
    return _page(out), r.discrepancies[0]


@pytest.fixture(scope="module")
def engine_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("engine")
    r = gs.verify_engine(P.NoReset(), max_examples=10, seed=0)  # the reset rule's finding, with its §8 cause
    assert [d.cause.id for d in r.discrepancies] == ["reset-ignored"], str(r)
    r.write_html(str(out))
    return _page(out), r.discrepancies[0]


def test_headline_names_the_cause_node_and_fix(wrong_vjp_page):
    path, d = wrong_vjp_page
    html = open(path, encoding="utf-8").read()
    head = html[html.index('id="headline"'):]
    assert html.index('id="headline"') < html.index('id="message"') < html.index("<h2>The graph")
    assert f"wrong VJP (scale) at node {d.cause.node} = pl_mean_norm" in head
    assert "Fix:</b> multiply the rule by 1/1.25 = 0.8" in head
    assert "<title>verify_op: user op &#39;pl_mean_norm&#39;" in html
    assert '<span class="yours">your code</span>' in html.split('<table id="gradients">')[1].split("</tr>")[0]


def test_graph_marks_roots_and_the_blamed_node(wrong_vjp_page):
    html = open(wrong_vjp_page[0], encoding="utf-8").read()
    svg = html[html.index('<svg'):html.index('</svg>')]
    assert ">root</text>" in svg and ">cause</text>" in svg and 'fill="#f4a6a6"' in svg


def test_tolerance_derivation_appears_once(wrong_vjp_page):
    path, d = wrong_vjp_page
    html = open(path, encoding="utf-8").read()
    assert d.tolerance_why and " — tolerance: " in d.message  # the message carries it...
    assert html.count(report_cause.strip_tolerance(d.message).split(": ")[-1][:40]) >= 1
    assert html.count("— tolerance:") == 0  # ...the page states it once, in its Tolerance section
    assert html.count('<table id="tolerance">') == 1


def test_ratio_heatmap_for_every_leaf(wrong_vjp_page):
    path, d = wrong_vjp_page
    html = open(path, encoding="utf-8").read()
    maps = html[html.index('id="ratio-maps"'):]
    for leaf in d.case.grad_leaves():
        assert f"<b>{leaf.name}</b>" in maps
    ratios = [float(x) for x in re.findall(r"\|difference\| / tolerance = ([0-9.e+-]+|inf)", maps)]
    assert ratios and max(ratios) > 1  # the wrong elements are above their tolerance


def test_escaped_cause_text(tmp_path):
    case = gs.Case.build({"x": np.array([1.0, 2.0])}, [("y", "exp", ["x"], {})], ["y"], [np.ones(2)])
    d = gs.Discrepancy("value", ("reference", "jacobian"), "x <b>bold</b>", case, "x", (0,), (1.0, 2.0), 1.0, 0.5, 1e-12,
                       "why", cause=Cause("wrong-vjp", "<script>alert(1)</script>", node="y", op="exp",
                                          evidence="<img src=x>", pattern="other"))
    html = open(os.path.join(report.write_discrepancy_report(str(tmp_path), d), "index.html"), encoding="utf-8").read()
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x>" not in html and "<b>bold</b>" not in html


@pytest.mark.parametrize("text, width", [
    ("reference vs torch-cpu: leaf 'x'[0]: 0.5403023058681398 vs -0.8414709848078965 (abs err 1.38)", 40),
    ("a" * 50 + " tail", 30), ("short", 80), ("one two three four five six seven", 17),
], ids=["message", "long-word", "short", "words"])
def test_shorten_never_cuts_mid_word(text, width):
    out = report_cause.shorten(text, width)
    assert len(out) <= width
    if out != text:
        kept = out.rstrip("…")
        assert text.startswith(kept)
        rest = text[len(kept):]
        # the cut falls between words (trailing punctuation dropped), unless one word fills the line
        assert rest[:1] in (" ", ",", ";", ":") or " " not in text[width // 2:width], (out, rest)


def _card(path) -> str:
    import html as _h

    text = open(path, encoding="utf-8").read()
    return _h.unescape(text[text.index("<b>Reproduce</b>"):].split("</div>")[0])


def _pages(directory, kind) -> list:
    out = []
    for f in sorted(os.listdir(directory)):
        page = os.path.join(directory, f, "index.html")
        if os.path.isfile(page) and f'<span class="kind">{kind}</span>' in open(page, encoding="utf-8").read():
            out.append(page)
    return out


def test_reproduce_card_names_the_engine_under_test_and_its_replay_runs(tmp_path, monkeypatch):
    from gradspec import cli

    r = gs.verify_engine(P.SumScaled(), max_examples=20, seed=0)
    r.write_html(str(tmp_path))
    (page,) = _pages(tmp_path, "value")
    card = _card(page)
    assert "engine under test 'sum-scaled' (loaded as tests._planted:SumScaled)" in card, card
    assert "engine reference" not in card
    cmd = re.search(r"gradspec replay (\S+) --allow-import tests._planted", card)
    assert cmd, card
    monkeypatch.chdir(os.path.dirname(page))  # (the card's paths are relative to the page's folder: it says so)
    assert cli.main(["replay", cmd.group(1), "--allow-import", "tests._planted"]) == 1  # still disagrees


def test_reproduce_card_of_an_engine_without_import_path_gives_the_session_replay(tmp_path):
    # Mini("seed-mean"): its class path would rebuild Mini(), the correct engine, whose replay passes;
    # the card must say so and give the gs.check that replays the case with the very engine object.
    from tests import _planted_engines as M

    engine = M.seed_mean()
    r = gs.verify_engine(engine, max_examples=20, seed=0)
    assert r.discrepancies and not r.replay.startswith("gs.verify_engine('tests._planted_engines:Mini'"), r.replay
    r.write_html(str(tmp_path))
    pages = _pages(tmp_path, "value")
    assert pages
    for page in pages:
        card = _card(page)
        assert "engine under test 'mini+seed-mean'" in card, card
        code = re.search(r'<pre id="replay-cmd"[^>]*>(.*?)</pre>', card, re.S).group(1)
        assert "gradspec replay" not in code, code
        *head, last = code.splitlines()
        env = {"engine": engine}
        exec("\n".join(head), env)  # noqa: S102 - the page's own code
        assert eval(last, env).status == "disagree", page  # noqa: S307


def test_reproduce_card_of_a_rule_finding_reruns_the_verification(tmp_path):
    # a §5 rule's finding is a sequence of calls; replaying case.json (one backward's values) passes
    r = gs.verify_engine(P.NoAccumulation(), max_examples=10, seed=0)
    r.write_html(str(tmp_path))
    (page,) = _pages(tmp_path, "accumulation")
    card = _card(page)
    assert "engine under test 'no-accumulation'" in card and "sequence of backward() calls" in card, card
    code = re.search(r'<pre id="replay-cmd"[^>]*>(.*?)</pre>', card, re.S).group(1)
    assert code == r.replay and code.startswith("gs.verify_engine('tests._planted:NoAccumulation'"), code
    again = eval(code, {"gs": gs})  # noqa: S307 - the page's own command
    assert "accumulation-overwrite" in {d.cause.id for d in again.discrepancies}


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def _render(tmp_path, page: str, name: str) -> tuple[str, bytes]:
    flags = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
             f"--user-data-dir={tmp_path / ('profile-' + name)}"]
    url = "file://" + page
    dom = subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = tmp_path / f"{name}.png"
    run = subprocess.run(flags + [f"--screenshot={shot}", "--window-size=1280,900", url], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return dom.stdout, shot.read_bytes()


def _headline_text(dom: str) -> str:
    m = re.search(r'<div id="headline" class="headline">(.*?)</div>\s*(?:<pre|$)', dom, re.S) or \
        re.search(r"<div id=\"headline\" class=\"headline\">(.*?)<pre", dom, re.S)
    assert m, dom[:3000]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", m.group(1))).strip()


def _has_headline_colour(png: bytes) -> bool:
    """The headline's border colour (#c03030) appears in the top of the screenshot (decoded PNG rows)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    while pos < len(png):
        n, typ = struct.unpack(">I4s", png[pos:pos + 8])
        body = png[pos + 8:pos + 8 + n]
        if typ == b"IHDR":
            w, _h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6)
            bpp = 3 if ctype == 2 else 4
        elif typ == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp + 1
    prev = bytearray(w * bpp)
    for r in range(min(400, len(raw) // stride)):
        f, line = raw[r * stride], bytearray(raw[r * stride + 1:(r + 1) * stride])
        for i in range(len(line)):  # undo the PNG row filters
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        for i in range(0, len(line), bpp):
            if abs(line[i] - 0xC0) < 12 and abs(line[i + 1] - 0x30) < 12 and abs(line[i + 2] - 0x30) < 12:
                return True
        prev = line
    return False


@pytest.mark.skipif(_chromium() is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)")
@pytest.mark.parametrize("which", ["wrong_vjp_page", "engine_page"])
def test_headline_renders_in_headless_chromium(tmp_path, request, which):
    path, d = request.getfixturevalue(which)
    dom, png = _render(tmp_path, path, which)
    text = _headline_text(dom)
    if which == "wrong_vjp_page":
        assert text.startswith(f"wrong VJP (scale) at node {d.cause.node} = pl_mean_norm"), text
        assert "n/(n-1)" in text and "Fix: multiply the rule by 1/1.25 = 0.8" in text
    else:
        assert text.startswith("reset ignored (engine-level: a backward() rule)"), text
        assert "Fix: make zero_grad set .grad back to None (or zeros)" in text
    assert len(png) > 20_000 and _has_headline_colour(png)  # rendered, with the red headline box on screen


# ---------------------------------------------------------------------------------------------
# the run page of a verify_* result names the run kind and the thing under test (not "fuzz report")
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch_function_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fn")
    r = gs.verify_torch_function(P.MeanNorm.apply, signature="(n)->()", max_examples=15, seed=0)
    assert len(r.discrepancies) == 1, r.summary()
    index = r.write_html(str(out))
    return r, out, open(index, encoding="utf-8").read()


def test_a_verify_run_page_is_titled_by_its_kind_and_target(torch_function_run):
    _, _, text = torch_function_run
    assert re.search(r"<title>[^<]*: 1 discrepancy</title>", text), text[:300]
    h1 = re.sub(r"<[^>]+>", "", re.search(r"<h1>(.*?)</h1>", text, re.S).group(1))
    assert h1 == "gradspec verify_torch_function: MeanNorm.apply", h1
    assert "fuzz report" not in text and "against engine" not in text
    assert "of torch function <code>MeanNorm.apply</code> (its backward" in text


def test_the_agreement_table_says_which_oracles_run_your_code(torch_function_run):
    _, _, text = torch_function_run
    table = text.split("<h2>Agreement per oracle pair</h2>", 1)[1].split("</table>", 1)[0]
    pairs = re.findall(r'<tr><td class="l">(.*?)</td>', table)
    # the Function's backward runs inside gradspec's engine (reference) and inside torch graphs (torch-cpu)
    assert "reference (your code) vs torch-cpu (your code)" in pairs, pairs
    assert "reference (your code) vs finite-differences" in pairs, pairs


def test_the_evidence_names_the_real_twin_of_a_torch_function(torch_function_run):
    r, out, _ = torch_function_run
    ev = r.discrepancies[0].cause.evidence
    # a torch Function has no JVP rule: its twin is finite differences of its forward
    assert "JVP rule or finite differences" not in ev and "finite differences of the forward" in ev, ev


def test_assert_helpers_name_the_case_file_they_wrote(tmp_path):
    """The pytest message of a finding whose report was written gives its replay command with the real path,
    not "result.write_html(DIR), then gradspec replay DIR/<id>/case.json"."""
    with pytest.raises(gs.testing.VerificationFailed) as e:
        gs.assert_torch_function(P.MeanNorm.apply, signature="(n)->()", max_examples=15, seed=0,
                                 report_dir=str(tmp_path))
    case = os.path.join(os.path.dirname(e.value.reports[0]), "case.json")
    assert os.path.exists(case)
    text = str(e.value)
    assert f"replay: gradspec replay {case} --allow-import tests._planted" in text, text
    assert "write_html(DIR)" not in text
