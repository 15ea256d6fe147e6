"""The oracle interface."""

from __future__ import annotations

import numpy as np

__all__ = ["Oracle", "OracleError"]


class OracleError(RuntimeError):
    """An oracle could not produce a gradient for a case (the message says why)."""


class Oracle:
    """Computes ``{leaf name: J^T . seed}`` for a case.

    ``kind`` is ``"exact"`` for oracles that evaluate derivative formulas (their results agree
    to rounding error) and ``"fd"`` for finite differences (agreement to their error estimate).
    ``reports_none`` is true for oracles that distinguish "no gradient" (None) from zeros.
    """

    name: str = "oracle"
    kind: str = "exact"
    reports_none: bool = False

    def available(self) -> tuple[bool, str]:
        """(True, "") if the oracle can run on this machine, else (False, reason)."""
        return True, ""

    def applies(self, case) -> tuple[bool, str]:
        """(True, "") if the oracle can judge ``case``, else (False, reason)."""
        return True, ""

    def vjp(self, case) -> dict[str, np.ndarray | None]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<oracle {self.name}>"
