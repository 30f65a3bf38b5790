"""Every public name of `neuromanifold` is the object its module defines, in every import order:
no public function shares its name with a subpackage (issue 38, item 3)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import neuromanifold as nm

_CHECK = """
import importlib, sys
import neuromanifold as nm
from neuromanifold import _COMPATIBLE, _EXPORTS
first = sys.argv[1].split(",")
for name in first:  # touch these first, the way a notebook might
    getattr(nm, name)
wrong = [name for name, mod in (_EXPORTS | _COMPATIBLE).items()
         if getattr(nm, name) is not getattr(importlib.import_module("neuromanifold." + mod), name)]
print("wrong:", wrong, "degree callable:", callable(nm.degree) and not isinstance(nm.degree, type(nm)))
"""


def test_no_public_name_is_a_subpackage():
    """No name of `__all__` is also a submodule or subpackage of neuromanifold (it would shadow)."""
    modules = {info.name for info in pkgutil.iter_modules(nm.__path__)}
    assert "degrees" in modules  # the degree engines' subpackage, renamed from `degree`
    assert sorted(modules & set(nm.__all__)) == []


@pytest.mark.parametrize("first", ["image_degree", "implicit_equations", "DegreeResult", "structured_degree",
                                   "degree", "image_degree,degree", "degree,implicit_equations"])
def test_degree_is_the_function_in_every_import_order(first):
    """After touching `first` in a fresh interpreter, `nm.degree` is still the function and every
    public name is its module's object (`nm.degree` became the subpackage before)."""
    out = subprocess.run([sys.executable, "-c", _CHECK, first], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "wrong: [] degree callable: True", out.stderr[-2000:]


def test_degree_after_image_degree_computes():
    """`nm.degree(arch)` runs after `nm.image_degree` was touched: the degree of d=(2,1), a=2, t=3
    is 4 (docs/degree.md's table), the value `neuromanifold degree` prints for the same network."""
    code = ("import neuromanifold as nm; nm.image_degree; nm.implicit_equations; "
            "r = nm.degree(nm.Architecture((2, 1), 2, 3), repeats=1); print(r.degree, r.status)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "4"
