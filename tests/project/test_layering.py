"""The package's layers only point down: no import cycle between modules or folders, no private
name imported across modules, and the architecture needs no torch (scripts/draw_layers.py)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("draw_layers", ROOT / "scripts" / "draw_layers.py")
layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layers)


def test_no_module_imports_itself_back():
    """No cycle of imports among the package's modules (function-level imports count)."""
    assert layers.module_cycles(layers.module_graph()) == []


def test_no_folder_imports_itself_back():
    """core, dimension, geometry, ..., cli: no two folders import each other, even indirectly."""
    _floors, bad = layers.floors(layers.folder_graph()[0])
    assert bad == []


def test_the_network_is_the_ground_floor_of_the_engines():
    """core imports no engine (dimension, geometry, degrees) and no application layer."""
    arrows = layers.folder_graph()[0]
    assert arrows["core"] <= {"errors"}
    assert not arrows["dimension"] & {"geometry", "degrees", "models", "sweeps", "experiments", "cli"}


def test_no_private_name_crosses_a_module():
    """`from x import _name` never appears in src/ (a name another module needs is public)."""
    offenders = []
    for path in layers.PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                offenders += [f"{path.name}: {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    assert offenders == []


def test_cycle_finder_finds_a_cycle():
    """The cycle check can fail: a two-module loop is reported."""
    assert layers.module_cycles({"a.x": {"a.y"}, "a.y": {"a.x"}}) == [["a.x", "a.y", "a.x"]]


def test_architecture_counts_and_layout_import_no_torch():
    """A block network's n_params and parameter layout are arithmetic: torch is not imported."""
    code = ("import sys; from neuromanifold import Architecture; "
            "a = Architecture((4, 4, 4), 2, 3, heads=2, values=3, residual=True, mlp=5, "
            "norm='layernorm', attention='softmax'); "
            "assert a.n_params == sum(s[0] * s[1] for _, s, _ in a.param_layout()) == 256, a.n_params; "
            "assert 'torch' not in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
