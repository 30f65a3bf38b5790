#!/usr/bin/env python3
"""Draw the package's layers from its own imports: docs/figures/layers.svg.

Every module of src/neuromanifold is parsed (never imported); each import of another module of
the package, at module level or inside a function, is an arrow from the importer's folder (a
subpackage, or a top-level module such as `errors`) to the imported one's. A folder stands one
floor above the highest folder it imports, so arrows should only point down; an arrow that
points up or sideways, or folders that import each other, are drawn in red and listed on stdout.

Usage: `.venv/bin/python scripts/draw_layers.py [--png PREVIEW.png]` (writes the figure, and a
PNG preview where asked) or `... --check` (exit 1 when a folder-level import cycle exists;
writes nothing).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "neuromanifold"
TARGET = ROOT / "docs" / "figures" / "layers.svg"


def module_name(path: Path) -> str:
    """'neuromanifold.core.blocks' for src/neuromanifold/core/blocks.py (packages: their folder)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, name: str) -> set[str]:
    """The package modules `path` imports anywhere in its body (relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("neuromanifold")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("neuromanifold"):
                found.add(target)
                found |= {f"{target}.{alias.name}" for alias in node.names}
    return found


def module_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (module-level and function-level imports)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for target in imported_modules(path, name):
            while target and target not in modules:  # `from pkg import name`: the module pkg
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def module_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles among modules (each as a path that returns to its start), ignoring
    imports of a package's own __init__ (they only hand names on)."""
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for other in sorted(graph.get(node, ())):
            if other == "neuromanifold" or other == node.rpartition(".")[0]:
                continue
            if state.get(other) == "open":
                found.append(path[path.index(other):] + [other])
            elif other not in state:
                visit(other, path + [other])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def folder_of(module: str, modules: dict[str, Path]) -> str | None:
    """The folder (layer) a module belongs to: its subpackage, or the top-level module itself
    (None for the package's own __init__ and names it defines, such as `__version__`)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] == "__main__" or f"neuromanifold.{parts[1]}" not in modules:
        return None
    return parts[1]


def folder_graph() -> tuple[dict[str, set[str]], dict[str, int], dict[str, str]]:
    """(arrows folder -> folders it imports, lines per folder, first docstring line per folder)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    arrows: dict[str, set[str]] = defaultdict(set)
    lines: dict[str, int] = defaultdict(int)
    about: dict[str, str] = {}
    for name, path in modules.items():
        folder = folder_of(name, modules)
        if folder is None:
            continue
        lines[folder] += len(path.read_text().splitlines())
        if path.name == "__init__.py" or "." not in name.partition(".")[2]:
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            about.setdefault(folder, doc.split(".")[0].replace("\n", " "))
        for target in imported_modules(path, name):
            other = folder_of(target, modules)
            if other and other != folder:
                arrows[folder].add(other)
        arrows.setdefault(folder, set())
    return dict(arrows), dict(lines), about


def floors(arrows: dict[str, set[str]]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Floor of each folder (1 + the highest floor it imports; 0 for none) and the arrows that
    do not point down (cycles)."""
    floor: dict[str, int] = {}
    visiting: set[str] = set()
    bad: list[tuple[str, str]] = []

    def visit(node: str) -> int:
        if node in floor:
            return floor[node]
        visiting.add(node)
        best = 0
        for other in sorted(arrows.get(node, ())):
            if other in visiting:
                bad.append((node, other))
                continue
            best = max(best, visit(other) + 1)
        visiting.discard(node)
        floor[node] = best
        return best

    for node in sorted(arrows):
        visit(node)
    return floor, bad


def draw(arrows, lines, about, floor, bad, png: str | None = None) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("svg")
    matplotlib.rcParams["svg.hashsalt"] = "neuromanifold-layers"
    from matplotlib.figure import Figure  # noqa: PLC0415
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: PLC0415

    rows: dict[int, list[str]] = defaultdict(list)
    for node in sorted(floor, key=lambda n: (-lines.get(n, 0), n)):
        rows[floor[node]].append(node)
    top = max(rows)
    width = max(len(r) for r in rows.values())
    fig = Figure(figsize=(2.6 * width + 0.6, 1.25 * (top + 1) + 0.5))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 2.6 * width + 0.6)
    ax.set_ylim(-0.4, 1.25 * (top + 1))
    ax.axis("off")
    centre = {}
    for level, names in rows.items():
        offset = (width - len(names)) * 1.3
        for k, node in enumerate(names):
            x, y = 0.3 + offset + 2.6 * k, 1.25 * level
            ax.add_patch(FancyBboxPatch((x + 0.1, y), 2.2, 0.8, boxstyle="round,pad=0.02",
                                        facecolor="#e8eef6", edgecolor="#3b5a80"))
            text = about.get(node, "")
            text = text if len(text) <= 38 else text[:36] + "..."
            ax.text(x + 1.2, y + 0.55, f"{node}/" if node not in ("errors",) else node,
                    ha="center", va="center", fontsize=10, weight="bold")
            ax.text(x + 1.2, y + 0.3, f"{lines.get(node, 0)} lines", ha="center", va="center",
                    fontsize=7, color="#555555")
            ax.text(x + 1.2, y + 0.1, text, ha="center", va="center", fontsize=5.5,
                    color="#333333")
            centre[node] = (x + 1.2, y)
    bad_set = set(bad)
    for node, targets in sorted(arrows.items()):
        for other in sorted(targets - {"errors"}):  # every folder imports errors: said once

            (x0, y0), (x1, y1) = centre[node], centre[other]
            up = (node, other) in bad_set or floor[other] >= floor[node]
            ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1 + 0.8), arrowstyle="-|>",
                                         mutation_scale=8, lw=0.6, alpha=0.7,
                                         color="#c0392b" if up else "#7f8c8d",
                                         connectionstyle="arc3,rad=0.05"))
    ax.text(0.2, -0.25, "arrows: imports (every folder also imports errors); red: an import that "
            "does not point down", fontsize=7, color="#555555")
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(TARGET, metadata={"Date": None})
    if png:  # a preview for a reader without an SVG viewer
        fig.savefig(png, dpi=110)


def main(argv: list[str]) -> int:
    arrows, lines, about = folder_graph()
    floor, bad = floors(arrows)
    for node, other in bad:
        print(f"cycle: {node}/ imports {other}/, which imports it back")
    if "--check" in argv:
        return 1 if bad else 0
    png = argv[argv.index("--png") + 1] if "--png" in argv else None
    draw(arrows, lines, about, floor, bad, png)
    for level in sorted(set(floor.values()), reverse=True):
        print(f"floor {level}: " + ", ".join(sorted(n for n in floor if floor[n] == level)))
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
