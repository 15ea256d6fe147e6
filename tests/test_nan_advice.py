"""What a forward that is not finite on its own example is told (tryout6 #10): a fully masked attention row (a
softmax over all -inf scores) is NaN whatever the input values, so the advice for code defined on part of the
real line (log, sqrt: domain=) was wrong there; code that is NaN because of its input values keeps that advice."""

from __future__ import annotations

import pytest

import gradspec as gs


def _masked_softmax(q, k):  # tryout6's nan_and_random_op.py: row 0 of every score matrix fully masked
    import torch

    s = q @ k.transpose(-1, -2)
    m = torch.zeros_like(s, dtype=torch.bool)
    m[..., 0, :] = True
    return torch.softmax(s.masked_fill(m, float("-inf")), -1)


def _log(q, k):
    import torch

    return torch.log(q) + k


def _zero_over_zero(q, k):
    return (q * 0) / (k * 0)


ADVICE = {  # id: (fn, example centre, words the error must hold, words it must not)
    "fully-masked-row": (_masked_softmax, 0.0, ["whatever the input values", "nan_to_num"], ["log, sqrt"]),
    "zero-over-zero": (_zero_over_zero, 0.0, ["whatever the input values"], ["log, sqrt"]),
    "log-of-negative-example": (_log, -3.0, ["log, sqrt", "domain="], ["whatever the input values"]),
}


@pytest.mark.parametrize("fn, centre, words, not_words", ADVICE.values(), ids=list(ADVICE))
def test_the_advice_for_a_nan_forward_fits_its_cause(fn, centre, words, not_words):
    import torch

    g = torch.Generator().manual_seed(0)
    q = centre + 0.3 * torch.randn(2, 4, 3, generator=g, dtype=torch.float64)
    with pytest.raises(gs.UserOpError) as e:
        gs.verify_torch_function(fn, example_inputs=(q, q.clone()), max_examples=5, seed=1)
    text = str(e.value)
    assert "rejects its own example_inputs" in text, text
    assert all(w in text for w in words) and not any(w in text for w in not_words), text
