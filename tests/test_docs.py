"""The documentation is checked against the code: worked values, examples, CLI reference, site.

- Every row of the worked-values table (docs/math/worked-values.md) is recomputed.
- Every ```python example in docs/**/*.md and README.md runs (one fresh namespace per file, in a
  scratch folder); quick ```console / ```bash lines that start with `neuromanifold ` (or
  `$ neuromanifold `) run through the CLI in the same folder, in document order. A block preceded
  by the line `<!-- slow -->` is skipped.
- docs/cli.md equals a fresh run of scripts/gen_cli_docs.py.
- `mkdocs build --strict` succeeds.
- No tracked file refers to a path outside the repository.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
WORKED_VALUES = DOCS / "math" / "worked-values.md"
SLOW_MARK = "<!-- slow -->"
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)


# ---------------------------------------------------------------- (a) worked values

def _table_rows(path: Path) -> list[dict[str, str]]:
    """The rows of the first markdown table whose header starts with `| attention |`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| attention |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append(dict(zip(header, cells)))
    return rows


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


WORKED_ROWS = _table_rows(WORKED_VALUES)


def test_worked_values_table_is_not_empty():
    """The worked-values table parses and covers lightning (one and several layers) and softmax."""
    kinds = {(row["attention"], len(_ints(row["keys"])) > 1) for row in WORKED_ROWS}
    assert {("lightning", False), ("lightning", True), ("softmax", False), ("softmax", True)} <= kinds
    assert len(WORKED_ROWS) >= 15


@pytest.mark.parametrize("row", WORKED_ROWS,
                         ids=[f"{r['attention']}-{r['widths']}-{r['keys']}-t{r['t']}" for r in WORKED_ROWS])
def test_worked_value_row(row):
    """A row of docs/math/worked-values.md: parameters, closed form, conjecture, computed dim."""
    from neuromanifold import Architecture, expected_dim, neuromanifold_dim
    from neuromanifold.core.formulas import effective_width

    arch = Architecture(_ints(row["widths"]), _ints(row["keys"]), int(row["t"]), row["attention"])
    assert arch.n_params == int(row["parameters"])
    formula = expected_dim(arch)
    assert (formula.name, formula.value) == (row["closed form"], int(row["value"]))
    assert formula.hypotheses_hold == {"yes": True, "no": False}[row["holds"]]
    assert effective_width(arch).value == int(row["conjecture"])
    method = row["method"]
    result = neuromanifold_dim(arch, method=method, seed=0)
    assert result.dimension == int(row["dimension"])
    assert result.status == {"certified": "certified", "numerical": "settled"}[method]
    assert result.dimension + result.fiber_dim == result.n_params


# ---------------------------------------------------------------- (b) examples

def _example_files() -> list[Path]:
    return sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]


def _blocks(path: Path) -> list[tuple[str, str, bool]]:
    """(language, body, slow) of every fenced block, in document order."""
    text = path.read_text(encoding="utf-8")
    out = []
    for match in _FENCE.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        out.append((match.group(1).lower(), match.group(2), before.strip() == SLOW_MARK))
    return out


def _cli_lines(body: str) -> list[str]:
    """Command lines of a console/bash block that call `neuromanifold` directly."""
    lines = []
    # A shell line continued with a trailing backslash is one command.
    for line in body.replace("\\\n", " ").splitlines():
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:]
        if line.startswith("neuromanifold "):
            lines.append(line.split(" #", 1)[0].strip())
    return lines


def _runnable(path: Path) -> bool:
    return any(lang == "python" or (lang in ("console", "bash", "shell", "sh") and _cli_lines(body))
               for lang, body, _ in _blocks(path))


EXAMPLE_FILES = [p for p in _example_files() if _runnable(p)]


def test_examples_are_found():
    """The example collector sees the tutorial, the home page and the README."""
    names = {p.relative_to(ROOT).as_posix() for p in EXAMPLE_FILES}
    assert {"docs/tutorial.md", "docs/index.md", "README.md"} <= names


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_examples_run(path, tmp_path, monkeypatch):
    """Every python example of the file runs, and its quick CLI lines exit 0, in document order."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs_example_{path.stem}"}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    ran = 0
    for index, (lang, body, slow) in enumerate(_blocks(path)):
        if slow:
            continue
        if lang == "python":
            code = compile(body, f"{path.name}[block {index}]", "exec")
            exec(code, namespace)  # noqa: S102 - the documentation's own examples
            ran += 1
        elif lang in ("console", "bash", "shell", "sh"):
            for line in _cli_lines(body):
                args = shlex.split(line)[1:]
                proc = subprocess.run([sys.executable, "-m", "neuromanifold", *args], cwd=tmp_path,
                                      env=env, capture_output=True, text=True, timeout=300)
                assert proc.returncode == 0, f"{path.name}: `{line}` exited {proc.returncode}:\n{proc.stderr}"
                ran += 1
    assert ran > 0


# ---------------------------------------------------------------- (c) CLI reference

def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_up_to_date():
    """docs/cli.md is exactly what scripts/gen_cli_docs.py generates from the typer app now."""
    expected = _load_generator().render()
    current = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert current == expected, "docs/cli.md is stale: run .venv/bin/python scripts/gen_cli_docs.py"


def test_cli_reference_lists_every_command():
    """Each command registered on the app has a section in docs/cli.md."""
    import typer.main

    from neuromanifold.cli.app import app

    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    for name in typer.main.get_command(app).commands:
        assert f"## `neuromanifold {name}`" in text


# ---------------------------------------------------------------- (d) the site

def test_mkdocs_build_strict(tmp_path):
    """`mkdocs build --strict` succeeds (every page in the nav, links resolve, API renders)."""
    missing = [m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")
               if _find_spec(m) is None]
    if missing:
        pytest.skip(f"the docs extra is not installed ({', '.join(missing)} not importable): "
                    "pip install -e '.[docs]'")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "api" / "index.html").is_file()
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="neuromanifold.dimension.api.neuromanifold_dim"' in api


def _find_spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return None


def test_every_nav_page_exists_and_every_page_is_in_the_nav():
    """mkdocs.yml's nav and docs/ agree (a page outside the nav would not be reachable)."""
    nav = re.findall(r":\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert set(nav) <= pages
    # Other helpers add their own pages for the lead to link; only the maths pages must be in.
    assert {p for p in pages if p.startswith("math/")} <= set(nav)


# ---------------------------------------------------------------- (e) self-contained repository

# Spelt in pieces so that this file does not match itself.
_OUTSIDE = ("../" + "shared", "MATH" + ".md", "/" + "work/")


def _tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True,
                             timeout=60).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the list of committed files is unknown")
    files = []
    for name in out.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file() and path.suffix not in (".png", ".npz", ".whl", ".gz", ".sqlite"):
            files.append(path)
    return files


def test_no_file_refers_to_a_path_outside_the_repository():
    """No committed file names the spec folder outside the repository or an absolute work path."""
    offenders = []
    for path in _tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if any(token in line for token in _OUTSIDE):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_markdown_links_stay_inside_the_repository():
    """Relative links in README.md and docs/ point at files that exist in the repository."""
    link = re.compile(r"\]\(([^)\s]+)\)")
    bad = []
    for path in _example_files() + sorted(DOCS.rglob("*.md")):
        for target in link.findall(path.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            resolved = (path.parent / target.split("#", 1)[0]).resolve()
            if not resolved.exists() or ROOT.resolve() not in resolved.parents:
                bad.append(f"{path.relative_to(ROOT)}: {target}")
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------- citation and changelog

def test_citation_matches_the_package_version_and_cites_the_paper():
    """CITATION.cff is CFF 1.2.0, carries pyproject's version and references the ICLR 2025 paper."""
    import tomllib

    import neuromanifold

    cff = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert re.search(r"^cff-version: 1\.2\.0$", cff, re.M)
    assert re.search(rf"^version: {re.escape(version)}$", cff, re.M)
    assert neuromanifold.__version__ == version
    assert "Geometry of Lightning Self-Attention: Identifiability and Dimension" in cff
    assert re.search(r"^references:$", cff, re.M)


def test_changelog_has_an_unreleased_section():
    """CHANGELOG.md keeps an Unreleased section for the next entries."""
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(r"^## \[Unreleased\]", text, re.M)
    assert "### Changed" in text
