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

ROOT = Path(__file__).resolve().parents[2]
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


_COMMAND = re.compile(r"^(?:\$ )?(?:\.venv/bin/)?neuromanifold ")
# What varies between runs of the same command: timings and measured memory.
_VARYING = re.compile(r"\d+(?:\.\d+)?\s?(?:ms|s|min|KiB|MiB|GiB)\b")
_ROUNDOFF = re.compile(r"\d(?:\.\d+)?e-(?:1\d|[2-9]\d)\b")
_DIGITS = re.compile(r"(\d\.\d{6})\d+")
# A certificate's determinant ball: which r x r block the float64 selection picks (hence the
# ball's value and sign) can change with the BLAS thread count where blocks tie (heads of one
# key/value group are interchangeable); any block with a ball excluding 0 is the same proof.
_DETERMINANT = re.compile(r"determinant \[[^\]]*\]")


def _console_steps(body: str, lang: str) -> list[tuple[str, list[str] | None]]:
    """(command, the output the page shows) for each `neuromanifold` command of a block.

    In a ```console block a command starts with `$ ` and its output is every line up to the next
    `$ ` line; a ```bash block shows commands only (output None). A shell line continued with a
    trailing backslash is one command; a trailing ` # comment` is dropped.
    """
    steps: list[tuple[str, list[str] | None]] = []
    output: list[str] | None = None
    for line in body.replace("\\\n", " ").splitlines():
        stripped = line.strip()
        if lang == "console" and not stripped.startswith("$ "):
            if output is not None:
                output.append(line.rstrip())
            continue
        output = None
        if _COMMAND.match(stripped):
            command = _COMMAND.sub("neuromanifold ", stripped).split(" #", 1)[0].strip()
            output = [] if lang == "console" else None
            steps.append((command, output))
    return steps


def _cli_lines(body: str, lang: str = "bash") -> list[str]:
    """Command lines of a console/bash block that call `neuromanifold` directly."""
    return [command for command, _ in _console_steps(body, lang)]


def _same_output(shown: list[str], printed: str) -> bool:
    """Whether the page's output equals the printed one, timings and memory aside; a line `...`
    on the page stands for any number of printed lines."""
    def norm(lines):
        out, timing = [], False
        for line in lines:
            line = _DETERMINANT.sub("determinant <ball>", _VARYING.sub("<varies>", line.rstrip()))
            # round-off: residuals below 1e-10, and digits past the sixth decimal
            line = _ROUNDOFF.sub("<round-off>", _DIGITS.sub(r"\1", line))
            # the `seconds` row of a table, or the "seconds": {...} object of --json
            timing = timing or line.startswith("seconds ") or '"seconds": {' in line
            out.append(re.sub(r"\d+\.\d+(e-?\d+)?", "<varies>", line) if timing else line)
            timing = timing and not line.startswith("seconds ") and not line.strip().startswith("}")
        return out

    pattern = "\n".join(re.escape(line) if line != "..." else "(?:.*\n)*?.*"
                         for line in norm(shown)).replace("(?:.*\n)*?.*\n", "(?:.*\n)*?")
    return re.fullmatch(pattern, "\n".join(norm(printed.rstrip("\n").split("\n")))) is not None


def _runnable(path: Path) -> bool:
    return any(lang == "python" or (lang in ("console", "bash", "shell", "sh") and _cli_lines(body, lang))
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
            for line, shown in _console_steps(body, lang):
                args = shlex.split(line)[1:]
                proc = subprocess.run([sys.executable, "-m", "neuromanifold", *args], cwd=tmp_path,
                                      env=env, capture_output=True, text=True, timeout=300)
                assert proc.returncode == 0, f"{path.name}: `{line}` exited {proc.returncode}:\n{proc.stderr}"
                if shown is not None:
                    assert _same_output(shown, proc.stdout), (
                        f"{path.name}: `{line}` printed something else than the page shows:\n"
                        f"{proc.stdout}\n--- the page shows ---\n" + "\n".join(shown))
                ran += 1
    assert ran > 0


def test_output_comparison():
    """Console output matches line for line, timings aside, with `...` standing for any lines."""
    assert _same_output(["a 1", "b (0.78 s)"], "a 1\nb (2.04 s)\n")
    assert _same_output(["seconds  rank 0.05, total 0.11", "x 1.5"], "seconds  rank 0.07, total 0.2\nx 1.5")
    assert _same_output(["has determinant [1.5779 +/- 6.32e-6] (ball"], "has determinant [-1.5779 +/- 6.32e-6] (ball")
    assert not _same_output(["seconds  rank 0.05", "x 1.5"], "seconds  rank 0.07\nx 1.6")
    assert _same_output(['{"seconds": {', '  "total": 2.0', "},", '"gap": 8.5}'],
                        '{"seconds": {\n  "total": 3.1\n},\n"gap": 8.5}')
    assert not _same_output(["a 1", "b"], "a 2\nb\n")
    assert _same_output(["residual 3.7e-15, x 1.32772252095"], "residual 2.1e-16, x 1.32772251\n")
    assert not _same_output(["residual 3.7e-05"], "residual 2.1e-05\n")
    assert _same_output(["a", "...", "z"], "a\nb\nc\nz\n") and _same_output(["a", "...", "z"], "a\nz")
    assert not _same_output(["a", "...", "z"], "a\nb\ny\n")
    steps = _console_steps("$ .venv/bin/neuromanifold dim --widths 3,4 \\\n  --keys 2\nout 1\n\nout 2\n"
                           "$ ls\nx\n", "console")
    assert [(shlex.split(c), shown) for c, shown in steps] == [
        (["neuromanifold", "dim", "--widths", "3,4", "--keys", "2"], ["out 1", "", "out 2"])]


def test_every_console_example_shows_its_output_and_runs_after_setup():
    """Each `neuromanifold` command in a ```console block of the site or the README is followed
    by its output (which test_examples_run compares), and is spelt `.venv/bin/neuromanifold`:
    the command scripts/setup installs (a bare `neuromanifold` is not on the PATH)."""
    problems = []
    for path in _example_files():
        for lang, body, _slow in _blocks(path):
            if lang not in ("console", "bash", "shell", "sh"):
                continue
            for line in body.splitlines():
                if re.match(r"^(\$ )?neuromanifold ", line.strip()):
                    problems.append(f"{path.relative_to(ROOT)}: bare command `{line.strip()}`")
            if lang == "console":
                problems += [f"{path.relative_to(ROOT)}: `{command}` shows no output"
                             for command, shown in _console_steps(body, lang)
                             if not any(line.strip() for line in shown or [])]
    assert not problems, "\n".join(problems)


def _quick_start() -> list[str]:
    """The README's two quick-start commands (the first line of its first two ```bash blocks)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [body.strip().splitlines()[0] for lang, body in _FENCE.findall(section) if lang == "bash"][:2]


def test_ci_runs_exactly_the_readme_test_command():
    """.ci/run runs the README's second quick-start command, character for character: set up,
    ruff (before the tests), the tests; pytest-xdist (the README's faster `-n 2`) is pinned."""
    run, test = _quick_start()
    assert run.startswith("scripts/setup && .venv/bin/neuromanifold ")
    assert test == ("scripts/setup && .venv/bin/ruff check src tests benchmarks scripts examples"
                    " && .venv/bin/python -m pytest -q")
    assert "pytest-xdist==" in (ROOT / "constraints.txt").read_text(encoding="utf-8")
    assert '"pytest-xdist' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test in ci


def test_readme_quick_start_runs_twice_in_a_row(tmp_path):
    """The README's first command succeeds twice in the same folder (a newcomer reruns it): the
    second run replaces its own two files because the command says so, and leaves others alone."""
    run, _ = _quick_start()
    args = shlex.split(run.split("&&", 1)[1])[1:]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    (tmp_path / "figure3").mkdir()
    (tmp_path / "figure3" / "notes.txt").write_text("mine")
    for attempt in (1, 2):
        proc = subprocess.run([sys.executable, "-m", "neuromanifold", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"run {attempt} exited {proc.returncode}: {proc.stderr}"
        assert "delta =  10" in proc.stderr + proc.stdout
    assert sorted(p.name for p in (tmp_path / "figure3").iterdir()) == [
        "figure3_softmax.csv", "figure3_softmax.png", "notes.txt"]
    assert (tmp_path / "figure3" / "notes.txt").read_text() == "mine"
    # Without the flag the same command refuses to overwrite (exit 2), as every command does.
    bare = [a for a in args if a != "--force"]
    proc = subprocess.run([sys.executable, "-m", "neuromanifold", *bare], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "--force" in proc.stderr


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

@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built once by `mkdocs build --strict` (skipped without the docs extra)."""
    missing = [m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python",
                           "pymdownx.arithmatex", "mkdocs_jupyter")
               if _find_spec(m) is None]
    if missing:
        pytest.skip(f"the docs extra is not installed ({', '.join(missing)} not importable): "
                    "pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    # not --quiet: it hides the warnings that --strict counts (griffe's among them)
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_mkdocs_build_strict(site):
    """`mkdocs build --strict` succeeds (every page in the nav, links resolve, API renders)."""
    assert (site / "api" / "index.html").is_file()
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="neuromanifold.dimension.api.neuromanifold_dim"' in api


# Pages whose every formula must be typeset: no ASCII subscripts or powers left in their prose.
# (lightning_dimension.md and hidden_directions.md are partly typeset: not in this list yet.)
TYPESET_PAGES = ("math/",)
_EXCLUDED = re.compile(r"<(pre|code|script|style)\b.*?</\1>|"
                       r"<(span|div) class=\"arithmatex\">.*?</\2>", re.S)
_RAW_TEX = re.compile(r"\\[A-Za-z]+|[_^]\{|\$")
_ASCII_MATHS = re.compile(r"\b[A-Za-z]+'?_[A-Za-z0-9({]|[A-Za-z0-9)\]}]\^[A-Za-z0-9({-]")
_EATEN = re.compile(r"[\w'})\]]<(em|strong)>")


def _article(html: str) -> str:
    """The page's own content (material's <article>), without code, scripts and maths spans."""
    start, end = html.find("<article"), html.rfind("</article>")
    return _EXCLUDED.sub(" ", html[start:end] if start >= 0 else html)


def _prose_problems(html: str, strict: bool) -> list[str]:
    """Raw TeX, eaten underscores and (if strict) ASCII maths in a page's prose."""
    content = _article(html)
    problems = [f"emphasis glued to a word (an underscore eaten by Markdown): "
                f"...{content[max(0, m.start() - 40):m.end() + 40]}..." for m in _EATEN.finditer(content)]
    text = re.sub(r"<[^>]+>", " ", content).replace("&#39;", "'").replace("&amp;", "&")
    patterns = [_RAW_TEX] + ([_ASCII_MATHS] if strict else [])
    for pattern in patterns:
        problems += [f"untypeset maths: ...{text[max(0, m.start() - 40):m.end() + 40]}..."
                     for m in pattern.finditer(text)]
    return problems


def _pages(site: Path) -> dict[str, str]:
    """Built page (its source name, e.g. math/deep.md) -> HTML, for every Markdown page."""
    pages = {}
    for source in sorted(DOCS.rglob("*.md")):
        rel = source.relative_to(DOCS).with_suffix("")
        if rel.parent.name == "katex":
            continue
        html = site / ("index.html" if rel.as_posix() == "index" else f"{rel.as_posix()}/index.html")
        if html.is_file():
            pages[source.relative_to(DOCS).as_posix()] = html.read_text(encoding="utf-8")
    return pages


def test_prose_checker_catches_untypeset_maths():
    """The checker flags an eaten underscore, raw TeX and ASCII maths, and passes typeset maths."""
    eaten = '<article><p>A\'<em>i = P</em>{i-1}^T A_i</p></article>'
    assert any("eaten" in p for p in _prose_problems(eaten, strict=False))
    assert any("untypeset" in p for p in _prose_problems("<article>r \\min(a, d)</article>", False))
    assert _prose_problems("<article><p>widths d_0 &gt;= d_1</p></article>", strict=False) == []
    assert _prose_problems("<article><p>widths d_0 &gt;= d_1</p></article>", strict=True)
    good = ('<article><p>Let <span class="arithmatex">\\(P_{i-1}^\\top\\)</span> be '
            '<em>generic</em>; <code>n_params</code></p></article>')
    assert _prose_problems(good, strict=True) == []


def test_maths_is_typeset_on_every_page(site):
    """No page shows raw TeX or emphasis made of a formula's underscores; maths pages have no
    ASCII maths left and contain typeset formulas."""
    pages = _pages(site)
    assert {"math/deep.md", "math/notation.md", "index.md"} <= set(pages)
    problems = []
    for name, html in pages.items():
        strict = name.startswith(TYPESET_PAGES)
        problems += [f"{name}: {p}" for p in _prose_problems(html, strict)]
        if strict and 'class="arithmatex"' not in html:
            problems.append(f"{name}: a maths page with no typeset formula")
    assert not problems, "\n".join(problems[:400]) + f"\n({len(problems)} in all)"


def test_site_renders_offline(site):
    """The site loads KaTeX and every script or stylesheet from its own files: nothing from a CDN."""
    for rel in ("assets/katex/katex.min.js", "assets/katex/katex.min.css",
                "assets/katex/fonts/KaTeX_Main-Regular.woff2", "javascripts/katex.js"):
        assert (site / rel).is_file(), rel
    remote = re.compile(r"<(script|link|img)\b[^>]*\b(src|href)=\"(https?:)?//", re.I)
    # a script's own imports too (nbconvert's notebook template imported mermaid from cdnjs)
    imported = re.compile(r"""\bimport\(\s*["'](https?:)?//[^"']*|["'](https?:)?//[^"'\s]*"""
                          r"""(cdnjs|jsdelivr|unpkg)[^"'\s]*["']""", re.I)
    offenders = []
    for html in sorted(site.rglob("*.html")):
        text = html.read_text(encoding="utf-8")
        offenders += [f"{html.relative_to(site)}: {m.group(0)}" for m in remote.finditer(text)]
        offenders += [f"{html.relative_to(site)}: {m.group(0)}" for m in imported.finditer(text)]
        if "katex.min.js" not in text and html.name == "index.html" and "404" not in html.parts:
            offenders.append(f"{html.relative_to(site)}: KaTeX not loaded")
    for css in sorted(site.rglob("*.css")):
        offenders += [f"{css.relative_to(site)}: @import of a remote file"
                      for _ in re.finditer(r"@import\s+url\((\"|')?https?:", css.read_text(encoding="utf-8"))]
    assert not offenders, "\n".join(offenders[:20])


def test_notebook_pages_load_no_mermaid_from_a_cdn(site):
    """The notebook pages (issue 39 item 10) carry no mermaid loader, and the hook that removes
    it refuses a page whose diagram would need one instead of leaving it broken offline."""
    pages = sorted((site / "notebooks").glob("*/index.html"))
    assert len(pages) >= 4
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "jupyter-wrapper" in text and "mermaid" not in text, page
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    loader = ('<script type="module">\n  document.addEventListener("DOMContentLoaded", async () => {'
              '\n    const diagrams = document.querySelectorAll(".jp-Mermaid > pre.mermaid");\n'
              '    const mermaid = (await import("https://cdnjs.cloudflare.com/ajax/libs/mermaid/'
              '11.10.0/mermaid.esm.min.mjs")).default;\n</script>\n<style></style>\n'
              '<!-- End of mermaid configuration -->')
    assert hooks.strip_mermaid_loader(f"<head>{loader}</head><p>x</p>") == "<head></head><p>x</p>"
    with pytest.raises(Exception, match="has a mermaid diagram"):
        hooks.strip_mermaid_loader(f'{loader}<div class="jp-Mermaid"><pre class="mermaid">'
                                   "graph TD; A-->B</pre></div>", "notebooks/x.ipynb")


def test_vendored_notes_are_no_page_of_the_site(site):
    """docs/assets/katex/README.md (how the KaTeX files were vendored) is excluded from the build,
    not a page outside the navigation; the files it describes are still shipped."""
    assert (ROOT / "docs" / "assets" / "katex" / "README.md").is_file()
    # mkdocs builds a README.md as its folder's index page
    assert not (site / "assets" / "katex" / "index.html").exists()
    assert not (site / "assets" / "katex" / "README.md").exists()
    assert (site / "assets" / "katex" / "katex.min.js").is_file()
    assert "assets/katex/" not in (site / "sitemap.xml").read_text(encoding="utf-8")


def test_katex_parses_every_formula(site, tmp_path):
    """Every formula of the site is valid KaTeX: the shipped katex.min.js renders each one with
    throwOnError (needs node; skipped without it)."""
    import json
    import shutil

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the formulas are not test-rendered")
    span = re.compile(r"<(span|div) class=\"arithmatex\">(.*?)</\1>", re.S)
    formulas = []
    for name, html in _pages(site).items():
        for match in span.finditer(html):
            tex = match.group(2).strip()
            display = tex.startswith("\\[")
            tex = tex[2:-2]
            for entity, char in (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&#39;", "'"), ("&amp;", "&")):
                tex = tex.replace(entity, char)
            formulas.append({"page": name, "tex": tex, "display": display})
    assert len(formulas) > 100
    (tmp_path / "formulas.json").write_text(json.dumps(formulas))
    script = (
        "const katex = require(process.argv[2]); const fs = require('fs');\n"
        "const bad = [];\n"
        "for (const f of JSON.parse(fs.readFileSync(process.argv[3], 'utf8'))) {\n"
        "  try { katex.renderToString(f.tex, {displayMode: f.display, throwOnError: true}); }\n"
        "  catch (e) { bad.push(f.page + ': ' + f.tex + ' -> ' + e.message); }\n"
        "}\n"
        "console.log(bad.join('\\n')); process.exit(bad.length ? 1 : 0);\n")
    (tmp_path / "check.js").write_text(script)
    proc = subprocess.run([node, str(tmp_path / "check.js"), str(DOCS / "assets" / "katex" / "katex.min.js"),
                           str(tmp_path / "formulas.json")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


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


def test_api_docstrings_keep_argument_names_and_guard_maths_words():
    """The API pages' griffe extension wraps maths words (`d_0`) in code spans but leaves the
    names of `Args:` entries alone (a backticked `min_gap` is no parameter: strict builds fail)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from griffe_docstrings import plain_maths
    finally:
        sys.path.pop(0)
    text = plain_maths("Args:\n    min_gap: decades of gap for d_0.\n    x (int): width d_1.")
    assert text == "Args:\n    min_gap: decades of gap for `d_0.`\n    x (int): width `d_1.`"
