"""Deterministic samples from a Hypothesis strategy (fixed corpora for benchmarks and tests).

``strategy.example()`` is for interactive use only; this draws through a derandomized
``@given`` run instead, so the same (strategy, n, seed) always gives the same list.
"""

from __future__ import annotations


def sample(strategy, n: int, seed: int = 0) -> list:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hyp_seed

    out: list = []

    @hyp_seed(seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(x):
        out.append(x)

    collect()
    return out[:n]
