"""The examples in the package's docstrings run and hold (doctest)."""

import doctest
import importlib
import pkgutil

import pytest

import neuromanifold

MODULES = sorted(m.name for m in pkgutil.walk_packages(neuromanifold.__path__, "neuromanifold.")
                 if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    """Every docstring example of the module gives the output it shows."""
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_examples_exist():
    """The public API carries runnable examples (not a suite that silently tests nothing)."""
    finder = doctest.DocTestFinder()
    examples = sum(len(t.examples) for name in MODULES
                   for t in finder.find(importlib.import_module(name)))
    assert examples >= 8
