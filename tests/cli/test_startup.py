"""Start-up of the command line (issue 39): what `--help` and a small answer import."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_help_skips_markdown_and_pygments_yet_shows_every_command():
    """`--help` renders typer's rich help without importing rich.markdown's markdown-it or
    pygments, lists every command, and leaves the real modules importable afterwards."""
    code = ("import sys; from neuromanifold.cli import main; main(['--help']); "
            "print(sorted(m for m in ('markdown_it', 'pygments', 'torch') if m in sys.modules)); "
            "import rich.markdown, rich.traceback; "
            "print(hasattr(rich.markdown, 'MarkdownContext'), hasattr(rich.traceback, 'Frame'))")
    lines = _run(code).splitlines()
    assert lines[-2:] == ["[]", "True True"]
    text = "\n".join(lines)
    for command in ("dim", "figure3", "count", "rank", "sweep", "degree", "equations"):
        assert f" {command} " in text


def test_stand_in_builds_the_real_object():
    """A stand-in class, once called, returns an instance of the real rich class."""
    code = ("import sys; from neuromanifold.cli import app; "
            "cls = app._stand_in('rich.markdown', 'Markdown'); m = cls('*x*'); "
            "import rich.markdown; print(type(m) is rich.markdown.Markdown)")
    assert _run(code).strip() == "True"


def test_version_imports_neither_torch_nor_typers_help():
    """`--version` prints the version without torch or the rich help module."""
    code = ("import sys; from neuromanifold.cli import main; main(['--version']); "
            "print('torch' in sys.modules, 'typer.rich_utils' in sys.modules)")
    lines = _run(code).splitlines()
    assert lines[0].startswith("neuromanifold ") and lines[-1] == "False False"
