"""summary.json stays small on a long campaign (tryout6 #12): `gradspec fuzz --ops myops:ste` wrote 0.68 MB after
15 s and 2.1 MB after 120 s, one "skipped" entry per case, because each reason carries measured numbers ("flat
within 0.0148 ... changes by 0.5 at 64 x that step").  Reasons that differ only in their numbers are one entry,
with the kind's whole count; the case counts still add up."""

from __future__ import annotations

import json
import re
import subprocess
import sys

# a number standing alone (not part of a name such as x0 or float32), written out here rather than taken from
# the code under test
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?(?![\w.])")


def test_skip_reasons_differing_only_in_numbers_are_one_entry(tmp_path):
    out = tmp_path / "r"
    proc = subprocess.run([sys.executable, "-m", "gradspec.cli", "fuzz", "--ops", "tests._steep_code:ste",
                           "--max-examples", "120", "--oracles", "reference,finite-differences,jacobian", "--seed", "1",
                           "--report-dir", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    s = json.loads((out / "summary.json").read_text())
    for field in ("skipped", "inconclusive_reasons"):
        kinds = [NUMBER.sub("#", k) for k in s[field]]
        assert len(kinds) == len(set(kinds)), json.dumps(s[field], indent=1)[:3000]
    # every case skipped the jacobian's FD-JVP or finite differences at least once: the counts were kept
    assert sum(s["skipped"].values()) >= s["cases"] > 0, (s["cases"], s["skipped"])
