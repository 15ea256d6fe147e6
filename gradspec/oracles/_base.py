"""The oracle interface."""

from __future__ import annotations

import numpy as np

__all__ = ["Oracle", "OracleError", "NonDifferentiable"]


class OracleError(RuntimeError):
    """An oracle could not produce a gradient for a case (the message says why)."""


class NonDifferentiable(OracleError):
    """The case sits at (or within a finite-difference step of) a point where the function is not
    differentiable: a kink (one-sided slopes that differ beyond their error), a jump in the forward,
    or a declared kink/domain edge within reach.  No derivative exists to compare there, so the
    case is skipped (with this reason) rather than judged; ``check`` records it in
    ``Verdict.nondifferentiable`` and drops every estimate-based comparison of the case."""


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
