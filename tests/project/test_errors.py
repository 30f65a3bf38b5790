"""One error discipline: every bad input is an InputError with the one message template, every
CLI command turns it into one line and exit 2, and anything else is exit 1 with a --debug hint."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import neuromanifold as nm
from neuromanifold.cli import main
from neuromanifold.errors import InputError

TEMPLATE = re.compile(r"^`[^`]+` must be .+; got .+\. \S.*$")
ARCH = nm.Architecture((4, 3, 5), (2, 3), 3)


def _weights():
    return nm.random_weights(ARCH, seed=1)


BAD_CALLS = {
    "Architecture widths": lambda: nm.Architecture((4, 0, 5), (2, 3), 3),
    "Architecture keys": lambda: nm.Architecture((4, 3, 5), (2,), 3),
    "Architecture attention": lambda: nm.Architecture((4, 3), (2,), 3, "relu"),
    "neuromanifold_dim arch": lambda: nm.neuromanifold_dim("4,3,5"),
    "neuromanifold_dim method": lambda: nm.neuromanifold_dim(ARCH, method="guess"),
    "neuromanifold_dim seed": lambda: nm.neuromanifold_dim(ARCH, seed=-1),
    "neuromanifold_dim samples": lambda: nm.neuromanifold_dim(ARCH, method="numerical", samples=0),
    "neuromanifold_dim device": lambda: nm.neuromanifold_dim(ARCH, method="numerical", device="tpu"),
    "neuromanifold_dim prime": lambda: nm.neuromanifold_dim(ARCH, prime=100),
    "neuromanifold_dim prime numerical": lambda: nm.neuromanifold_dim(ARCH, method="numerical", prime=7),
    "neuromanifold_dim max_memory": lambda: nm.neuromanifold_dim(ARCH, max_memory="lots"),
    "neuromanifold_dim max_memory exceeded": lambda: nm.neuromanifold_dim(ARCH, max_memory="1K"),
    "random_weights arch": lambda: nm.random_weights((4, 3, 5)),
    "random_weights seed": lambda: nm.random_weights(ARCH, seed=-3),
    "random_inputs n_samples": lambda: nm.random_inputs(ARCH, 0),
    "forward arch": lambda: nm.forward(None, _weights(), nm.random_inputs(ARCH, 2)),
    "symmetry_tangents weights": lambda: nm.symmetry_tangents(ARCH, "weights"),
    "expected_dim arch": lambda: nm.expected_dim("arch"),
    "same_function method": lambda: nm.same_function(ARCH, _weights(), _weights(), method="magic"),
    "same_function tolerance": lambda: nm.same_function(ARCH, _weights(), _weights(), tolerance=-1),
    "classify_layer weights": lambda: nm.classify_layer("W.npz"),
    "classify_layer tokens": lambda: nm.classify_layer(nm.random_weights(nm.Architecture((3, 2), (3,), 3)),
                                                       tokens=0),
    "neuromanifold_dim precision lightning": lambda: nm.neuromanifold_dim(ARCH, precision=256),
    "neuromanifold_dim precision softmax": lambda: nm.neuromanifold_dim(
        nm.Architecture((3, 3), (2,), 3, "softmax"), method="certified", precision=4),
    "rank_at_point method": lambda: nm.rank_at_point(ARCH, _weights(), method="exact"),
    "rank_at_point precision": lambda: nm.rank_at_point(ARCH, _weights(), precision=0),
    "functional_dim module": lambda: nm.functional_dim("model", [1.0]),
    "functional_dim no parameters": lambda: nm.functional_dim(__import__("torch").nn.ReLU(), [1.0]),
    "read_weights path": lambda: nm.read_weights("/nonexistent/W.npz"),
    "write_weights weights": lambda: nm.write_weights("/tmp/never-written.npz", [1, 2]),
    "Architecture heads": lambda: nm.Architecture((4, 4), (2,), 3, heads=(0,)),
    "Architecture values": lambda: nm.Architecture((4, 4), (2,), 3, values=(0,)),
    "Architecture residual": lambda: nm.Architecture((4, 3), (2,), 3, residual=True),
    "Architecture activation": lambda: nm.Architecture((4, 4), (2,), 3, mlp=(2,), activation="swish"),
    "Architecture norm": lambda: nm.Architecture((4, 4), (2,), 3, norm="batchnorm"),
    "same_block_function weights": lambda: __import__(
        "neuromanifold.geometry.moves", fromlist=["x"]).same_block_function(
        nm.Architecture((4, 4), (2,), 3, heads=(2,)), "W.npz", {}),
    "read_block_weights path": lambda: __import__(
        "neuromanifold.io.weightfiles", fromlist=["x"]).read_block_weights("/nonexistent/W.npz"),
    "neuromanifold_dim exact of a norm block": lambda: nm.neuromanifold_dim(
        nm.Architecture((4, 4), (2,), 3, norm="rmsnorm"), method="exact"),
}


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_public_functions_raise_the_template(name):
    """Every public function rejects a bad argument with an InputError in the one template."""
    with pytest.raises(InputError) as info:
        BAD_CALLS[name]()
    assert TEMPLATE.match(str(info.value)), str(info.value)


BAD_COMMANDS = [
    ["dim", "--widths", "4,x,5", "--keys", "2,3"],
    ["dim", "--widths", "4,3,5", "--keys", "2,3", "--method", "guess"],
    ["dim", "--widths", "4,3,5", "--keys", "2,3", "--seed", "-1"],
    ["dim", "--widths", "4,3,5", "--keys", "2,3", "--heads", "0,1"],
    ["dim", "--widths", "4,3,5", "--keys", "2,3", "--values", "2,0"],
    ["dim", "--widths", "4,3,5", "--keys", "2,3", "--residual"],
    ["dim", "--widths", "4,4,4", "--keys", "2,3", "--mlp", "2,2", "--activation", "swish"],
    ["dim", "--widths", "4,4,4", "--keys", "2,3", "--mlp", "2,2", "--activation", "relu",
     "--method", "exact"],
    ["figure3", "--deltas", "9-3"],
    ["heads", "--max-heads", "0", "--out", "/tmp/nm-never-made"],
    ["heads", "--widths", "3,3,3", "--out", "/tmp/nm-never-made"],
    ["dim", "--widths", "4,3,5", "--keys", "2,3", "--max-memory", "16Q"],
    ["dim", "--widths", "4,3,5", "--keys", "2,3", "--max-memory", "1K"],
    ["figure3", "--deltas", "3-4", "--max-memory", "-2", "--out", "/tmp/nm-never-made"],
    ["fiber", "--weights", "/nonexistent/a.npz", "--other", "/nonexistent/b.npz"],
    ["classify", "--weights", "/nonexistent/a.npz"],
    ["rank", "--weights", "/nonexistent/a.npz"],
    ["dim", "--widths", "4,3,5", "--keys", "2,3", "--attention", "softmax", "--precision", "8"],
    ["figure1", "--grid", "2", "--out", "/tmp/nm-never-made"],
    ["sweep", "/nonexistent/grid.toml", "--db", "/tmp/nm-never-made.sqlite"],
    ["report", "/nonexistent/store.sqlite", "--out", "/tmp/nm-never-made"],
    ["count", "/nonexistent/config.json"],
    ["count", "--model-type", "t5"],
    ["dim", "--hf-config", "/nonexistent/config.json", "--shrink", "layers=2"],
    ["dim", "--hf-config", "/nonexistent/config.json", "--shrink", "depth=2"],
]


@pytest.mark.parametrize("args", BAD_COMMANDS, ids=lambda a: a[0] + ":" + a[-1])
def test_every_command_gives_one_template_line_and_exit_2(args, capsys):
    """Bad input on any command: exit 2, one stderr line in the template, nothing on stdout."""
    code = main(args)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and captured.out == ""
    assert lines[0].startswith("neuromanifold: error: ")
    assert TEMPLATE.match(lines[0].removeprefix("neuromanifold: error: ")), lines[0]
    assert not Path("/tmp/nm-never-made").exists()


def test_internal_error_exits_1_with_debug_hint(capsys, monkeypatch):
    """An injected bug is not bad input: exit 1, one line that names it and suggests --debug."""
    import neuromanifold.dimension.api as api

    def broken(*_args, **_kwargs):
        raise ZeroDivisionError("injected")

    monkeypatch.setattr(api, "neuromanifold_dim", broken)
    code = main(["dim", "--widths", "4,3,5", "--keys", "2,3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1
    assert "ZeroDivisionError: injected" in err[0] and "--debug" in err[0]
    with pytest.raises(ZeroDivisionError):
        main(["dim", "--widths", "4,3,5", "--keys", "2,3", "--debug"])


def test_import_is_light():
    """`import neuromanifold` loads no torch, python-flint, dask or matplotlib."""
    code = ("import sys, neuromanifold; heavy = [m for m in ('torch', 'flint', 'dask', "
            "'distributed', 'matplotlib') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _module_graph() -> dict[str, set[str]]:
    """Module-level (import-time) relative imports between the package's modules."""
    root = Path(nm.__file__).parent
    graph = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        name = ".".join(p for p in parts if p != "__init__")
        package = parts[:-1]
        deps = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                target = ".".join(base + ([node.module] if node.module else []))
                deps.add(target)
        graph[name] = {d for d in deps if d != name}
        del is_pkg
    return graph


def test_no_import_cycle():
    """The package's import-time graph is acyclic (imports flow one way)."""
    graph = _module_graph()
    state: dict[str, int] = {}

    def visit(node, trail):
        if state.get(node) == 1:
            raise AssertionError("import cycle: " + " -> ".join(trail + [node]))
        if state.get(node) == 2:
            return
        state[node] = 1
        for dep in graph.get(node, ()):
            visit(dep, trail + [node])
        state[node] = 2

    for node in graph:
        visit(node, [])
    assert graph["dimension.api"] >= {"dimension.result"}
