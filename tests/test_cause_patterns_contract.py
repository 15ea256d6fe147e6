"""CONTRACT §8: a wrong-vjp cause's ``.pattern`` is one of six values.  Finer mistakes gradspec recognises (a
transposed block, a result not symmetrised, contributions not accumulated, a mask, the unselected branch of a
select) are ``pattern='other'`` with the finer name in ``.subpattern``: a CI that reads ``.pattern`` sees only
the contract's values, the report and the fix line use the finer name."""

import pytest

from gradspec.causes import CONTRACT_PATTERNS, PATTERNS, Cause
from gradspec.report_cause import fix_direction, headline

FINER = sorted(set(PATTERNS) - set(CONTRACT_PATTERNS))


def test_the_contract_lists_six_patterns():
    assert CONTRACT_PATTERNS == ("sign", "scale", "seed-ignored", "broadcast-reduction", "permuted", "other")
    assert {"transposed", "not-symmetrised", "not-accumulated", "masked", "unselected-branch"} <= set(FINER)


@pytest.mark.parametrize("finer", FINER)
def test_a_finer_pattern_is_other_with_a_subpattern(finer):
    c = Cause("wrong-vjp", "node y = f(x): ...", node="y", op="f", pattern=finer)
    assert (c.pattern, c.subpattern) == ("other", finer)
    back = Cause.from_json(c.to_json())
    assert (back.pattern, back.subpattern) == ("other", finer)
    assert finer in headline(c)["title"]
    assert fix_direction(c) != fix_direction(Cause("wrong-vjp", "s", pattern="other"))


@pytest.mark.parametrize("pattern", CONTRACT_PATTERNS)
def test_a_contract_pattern_has_no_subpattern(pattern):
    c = Cause("wrong-vjp", "s", pattern=pattern)
    assert (c.pattern, c.subpattern) == (pattern, None)


def test_an_old_json_with_a_finer_pattern_reads_back_within_the_contract():
    c = Cause.from_json({"id": "wrong-vjp", "summary": "s", "pattern": "transposed"})
    assert (c.pattern, c.subpattern) == ("other", "transposed")
