"""Fuzzing the case loader: random JSON mutations of real case files through ``gradspec replay``.

Every outcome must be an exit code of the contract (0 agree, 1 disagree, 2 refused with a message,
3 inconclusive), never a traceback or an "internal error", never a crash, and the process's peak
memory must stay within what ``--max-elements`` allows (the mutations include shape and param
bombs: 10**9-element expands, (0, 10**9) leaves, huge seeds).  The fuzzing runs in a child process
so its memory is the loader's alone: the peak RSS of each case above the RSS it started from
(``/proc/self/status`` VmHWM, reset before each case); the child prints the outcome counts.
``GRADSPEC_LOADER_FUZZ_EXAMPLES`` raises the number of mutations (the note's run used 2000).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

import gradspec as gs

LIMIT = 2**20  # --max-elements for the fuzz: 8 MiB of float64 per tensor pass

CHILD = textwrap.dedent('''
    import collections, contextlib, io, json, os, sys
    from hypothesis import HealthCheck, given, settings, strategies as st
    from gradspec import cli

    seeds = json.load(open(sys.argv[1]))
    limit, n = int(sys.argv[2]), int(sys.argv[3])
    work = sys.argv[4]
    os.environ["GRADSPEC_REPLAY_IN_PROCESS"] = "1"  # one process: its peak RSS is what the loader used

    def paths(x, p=()):
        yield p
        if isinstance(x, dict):
            for k, v in x.items():
                yield from paths(v, p + (k,))
        elif isinstance(x, list):
            for i, v in enumerate(x):
                yield from paths(v, p + (i,))

    big = st.sampled_from([10**9, 2**31, 2**63, -1, -2**40, 10**30, 0, 1, 3, 1e308, float("nan"), -0.0, 2.5])
    words = st.sampled_from(["object", "<U3", "float64", "int64", "bool", "complex128", "os:abort",
                             "builtins:breakpoint", "evil:x", "", "x", "sum", "expand", "0x1p+1000", "nan",
                             "<script>", "\\u0000", "gradspec-case/1"])
    atoms = st.one_of(st.none(), st.booleans(), big, st.integers(-5, 5), words, st.text(max_size=6))
    hostile = st.recursive(atoms, lambda c: st.one_of(st.lists(c, max_size=4),
                                                      st.dictionaries(words, c, max_size=3)), max_leaves=8)
    # Plausible values too (other dims, sizes, flags, numbers), so that many mutants still load and run:
    # big sizes within reach of the limit, negative dims, other dtypes, hex floats at the range's edge.
    plausible = st.one_of(st.integers(-3, 4), st.lists(st.integers(-2, 6), max_size=3), st.booleans(),
                          st.sampled_from([[2, 3], [3, 2], [1, 2, 3], [512, 512], [4096, 256], [0, 3], "float32",
                                           "int64", "bool", "0x1.fffffffffffffp+1023", "-0x0p+0", "inf", 0.5, -7.25]))
    values = st.one_of(plausible, plausible, hostile)

    hexes = st.sampled_from(["0x1.fffffffffffffp+1023", "-0x1p-1074", "0x0p+0", "-0x0p+0", "0x1p+60", "-0x1.8p+3",
                             "inf", "-inf", "nan", "0x1.921fb54442d18p+1"])

    def same_kind(v):
        if isinstance(v, bool):
            return st.just(not v)
        if isinstance(v, int):
            return st.one_of(st.integers(-4, 8), st.sampled_from([64, 1000, 10**6, 10**9, -10**9]))
        if isinstance(v, float):
            return st.floats(allow_nan=False)
        if isinstance(v, str) and v.startswith(("0x", "-0x")):
            return hexes
        return st.one_of(words, st.text(max_size=4))

    def get(doc, path):
        for k in path:
            doc = doc[k]
        return doc

    def put(doc, path, value, delete):
        if not path:
            return value
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        k = path[-1]
        if delete:
            del parent[k]
        else:
            parent[k] = value
        return doc

    outcomes, bad, peaks = collections.Counter(), [], [0]

    def vm(key):  # kB, from /proc/self/status (Linux)
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith(key + ":"))

    def reset_peak():  # "5" resets the peak RSS (VmHWM) to the current RSS (Linux >= 4.0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    @settings(max_examples=n, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(range(len(seeds))), st.data())
    def mutate(i, data):
        doc = json.loads(json.dumps(seeds[i]))
        for _ in range(data.draw(st.integers(1, 2))):
            ps = list(paths(doc))
            if data.draw(st.booleans()):  # a scalar replaced by one of its own kind: many of these still load
                ps = [p for p in ps if p and not isinstance(get(doc, p), (dict, list))] or ps
                path = data.draw(st.sampled_from(ps))
                doc = put(doc, path, data.draw(same_kind(get(doc, path))), False)
                continue
            path = data.draw(st.sampled_from(ps))
            doc = put(doc, path, data.draw(values), bool(path) and data.draw(st.booleans()))
        text = json.dumps(doc)
        if data.draw(st.integers(0, 19)) == 0:  # now and then, broken text too
            cut = data.draw(st.integers(0, len(text)))
            text = text[:cut]
        path = os.path.join(work, "case.json")
        with open(path, "w") as f:
            f.write(text)
        out, err = io.StringIO(), io.StringIO()
        before = vm("VmRSS")
        reset_peak()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(["replay", path, "--max-elements", str(limit), "--case-timeout", "20",
                           "--oracles", "reference,jacobian,finite-differences"])
        peaks[0] = max(peaks[0], vm("VmHWM") - before)  # this case's peak above where it started
        e = err.getvalue()
        outcomes[rc] += 1
        if rc not in (0, 1, 2, 3) or "Traceback" in e or "internal error" in e or (rc == 2 and "error:" not in e):
            bad.append((rc, e[-600:], text[:400]))

    mutate()
    print(json.dumps({"cases": sum(outcomes.values()), "outcomes": {str(k): v for k, v in sorted(outcomes.items())},
                      "bad": bad[:5], "peak_kib": peaks[0]}))
''')


def _seed_files(tmp_path) -> list[dict]:
    """Real case files, written by gradspec: by the report writer and by Case.to_json."""
    from gradspec import fuzz, report
    from gradspec.oracles import get
    from tests.test_report import _ExpOffByHalf

    cases = [
        gs.Case.build({"x": np.array([[0.5, -1.0, 2.0], [0.25, 1.5, -0.75]]), "w": np.array([1.5, -2.0, 0.5])},
                      [("h", "mul", ["x", "w"], {}), ("y", "exp", ["h"], {})], ["y"],
                      [np.array([[1.0, -2.0, 0.5], [3.0, 1.0, -1.0]])]),
        gs.Case.build({"x": np.array([0.5, 2.0, -1.0])}, [("e", "expand", ["x"], {"size": [2, 3]}),
                                                          ("s", "sum", ["e"], {"dim": [0]}),
                                                          ("y", "norm", ["s"], {})], ["y"]),
        gs.Case.build({"a": np.arange(6.0).reshape(2, 3) / 7, "b": np.ones((3, 2))},
                      [("m", "mm", ["a", "b"], {}), ("r", "reshape", ["m"], {"shape": [4]}),
                       ("y", "softmax", ["r"], {"dim": 0})], ["y"], [np.array([1.0, 0.0, -1.0, 2.0])]),
        gs.Case.build({"x": np.array([0.5, 2.0]), "i": np.array([1, 0])},
                      [("g", "index_select", ["x"], {"dim": 0, "index": [1, 0, 1]}), ("y", "sum", ["g"], {})], ["y"]),
    ]
    docs = [json.loads(c.to_json()) for c in cases]
    verdict = fuzz.guarded_check(cases[0], [get("reference"), get("jacobian"), fuzz.EngineOracle(_ExpOffByHalf())])
    d = next(x for x in verdict.discrepancies if "off-by-half" in x.oracles)
    folder = report.write_discrepancy_report(str(tmp_path / "reports"), d, verdict)
    docs.append(json.loads(open(os.path.join(folder, "case.json")).read()))
    return docs


def test_mutated_case_files_exit_with_a_contract_code_and_bounded_memory(tmp_path):
    seeds = _seed_files(tmp_path)
    (tmp_path / "seeds.json").write_text(json.dumps(seeds))
    n = int(os.environ.get("GRADSPEC_LOADER_FUZZ_EXAMPLES", "150"))
    run = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "seeds.json"), str(LIMIT), str(n),
                          str(tmp_path)], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(run.stdout.strip().splitlines()[-1])
    print(json.dumps({k: v for k, v in res.items() if k != "bad"}))  # the counts, for the record (-s)
    assert not res["bad"], res["bad"]
    assert res["cases"] == n and set(res["outcomes"]) <= {"0", "1", "2", "3"}
    assert res["outcomes"].get("2", 0) > n // 4 and res["outcomes"].get("0", 0) > 0  # both refusals and runs
    # Peak memory of each case above the process's memory before it (VmHWM reset before each case).
    # A check holds PASS_COPIES x the case's elements in its largest pass (at most LIMIT elements,
    # 8 MiB of float64) with the other oracles' copies beside it; 64 MiB bounds that with room for the
    # allocator. The bombs among the mutations ask for 7-30 GiB without the limit.
    assert res["peak_kib"] < 64 * 1024, res
