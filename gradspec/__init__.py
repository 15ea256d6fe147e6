"""gradspec: property-based verification of gradients (``backward(gradient)`` = ``J^T . gradient``).

Example::

    >>> import numpy as np, gradspec as gs
    >>> x = gs.tensor(np.ones((2, 3)), requires_grad=True)
    >>> out = x @ gs.tensor(np.ones((3, 4)))
    >>> out.backward(np.array([[1., 2, 3, 4], [5, 6, 7, 8]]))
    >>> x.grad.numpy()
    array([[10., 10., 10.],
           [26., 26., 26.]])
"""

from __future__ import annotations

from . import (
    _cli_entry,  # noqa: F401  (first: a Ctrl-C while the rest imports ends the gradspec command quietly)
    domains,
    engines,
    ops,
    oracles,
)
from . import diagnose as _diagnose  # noqa: E402,F401  (registers the localisation with check())
from . import functional as _functional
from . import guard as _guard  # noqa: E402,F401  (registers guarded_check with check(timeout=))
from ._private.version import __version__  # noqa: E402,F401  (gs.__version__)
from .case import Case, CaseError
from .check import Discrepancy, Verdict, check
from .engine import (
    Tensor,
    backward,
    enable_grad,
    grad,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
    tensor,
)
from .functional import *  # noqa: F401,F403  (gs.<op> for every table op)
from .ops import Op, UserOpError


def __getattr__(name):
    # gs.strategies imports Hypothesis's strategy machinery: load it on first use only.
    if name == "strategies":
        import importlib

        return importlib.import_module(".strategies", __name__)
    raise AttributeError(f"module 'gradspec' has no attribute {name!r}")


__all__ = [
    "Tensor",
    "tensor",
    "backward",
    "grad",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    "ops",
    "domains",
    "strategies",  # noqa: F405  (resolved lazily by __getattr__)
    "oracles",
    "engines",
    "Op",
    "UserOpError",
    "Case",
    "CaseError",
    "check",
    "Verdict",
    "Discrepancy",
    *_functional.__all__,
]

# -- verifying users' code (gradspec.verify) --------------------------------------------------
from . import result_html as _result_html  # noqa: E402,F401  (installs Result.write_html's writer)
from .result import VerifyInterrupted  # noqa: E402
from .verify import Result, verify_engine, verify_module, verify_op, verify_torch_function  # noqa: E402

__all__ += ["Result", "VerifyInterrupted", "verify_op", "verify_torch_function", "verify_engine", "verify_module"]

# -- assertions for users' own tests (gradspec.testing) ---------------------------------------
from .testing import assert_engine, assert_gradients, assert_op, assert_torch_function  # noqa: E402

__all__ += ["assert_gradients", "assert_op", "assert_torch_function", "assert_engine"]

# -- what backward(gradient) computes, element by element (gradspec.explain) ------------------
from .explain import explain  # noqa: E402

__all__ += ["explain"]
