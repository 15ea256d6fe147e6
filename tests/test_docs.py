"""Every docstring example in the package runs and prints what it says (the public API promises a
runnable example; this keeps the examples honest as the code changes)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import gradspec

MODULES = sorted(m.name for m in pkgutil.walk_packages(gradspec.__path__, "gradspec."))
PUBLIC_WITH_EXAMPLES = ["gradspec.case", "gradspec.check", "gradspec.engine", "gradspec.oracles", "gradspec.strategies"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} docstring examples failed"
    if name in PUBLIC_WITH_EXAMPLES:
        assert result.attempted >= 1, f"{name}: its docstring examples disappeared"
