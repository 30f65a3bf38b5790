#!/usr/bin/env python3
"""Write the real output under every `neuromanifold` command of the ```console blocks of pages.

Usage: .venv/bin/python scripts/fill_doc_outputs.py docs/tutorial.md README.md ...

Each page runs as tests/project/test_docs.py runs it: in a fresh scratch folder, its ```python blocks
and commands in document order (a block after a `<!-- slow -->` line is skipped), so a command
can read the files an earlier block wrote. A command is written `$ .venv/bin/neuromanifold ...`
and the lines after it, up to the next `$ ` line, are replaced by what it prints on stdout.
tests/project/test_docs.py then checks that the pages still show what the tool prints (timings aside).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "project"))
import test_docs  # noqa: E402 - the test's own parsing of the pages

_PROMPT = re.compile(r"^\$ (\.venv/bin/)?neuromanifold ")


def _run(command: str, env: dict[str, str]) -> list[str]:
    args = shlex.split(command.split(" #", 1)[0])[1:]
    proc = subprocess.run([sys.executable, "-m", "neuromanifold", *args], env=env,
                          capture_output=True, text=True)
    print(f"  exit {proc.returncode}: neuromanifold {' '.join(args)}", file=sys.stderr)
    return proc.stdout.rstrip("\n").split("\n")


def _fill_console(body: str, env: dict[str, str]) -> str:
    lines, new, i = body.rstrip("\n").split("\n"), [], 0
    while i < len(lines):
        if not _PROMPT.match(lines[i]):
            new.append(lines[i])
            i += 1
            continue
        command = [_PROMPT.sub("$ .venv/bin/neuromanifold ", lines[i])]
        while command[-1].endswith("\\"):
            i += 1
            command.append(lines[i])
        new += command + _run(" ".join(c.rstrip("\\") for c in command)[2:], env)
        i += 1
        while i < len(lines) and not lines[i].startswith("$ "):
            i += 1
    return "\n".join(new) + "\n"


def fill(path: Path) -> None:
    """Rewrite the console blocks of `path` with the output of their commands."""
    text = path.read_text(encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    here = os.getcwd()
    os.chdir(tempfile.mkdtemp())
    try:
        namespace: dict = {"__name__": f"docs_example_{path.stem}"}
        pieces, pos = [], 0
        for match in test_docs._FENCE.finditer(text):
            lang, body = match.group(1).lower(), match.group(2)
            if text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip() == test_docs.SLOW_MARK:
                continue
            if lang == "python":
                exec(compile(body, str(path), "exec"), namespace)  # noqa: S102 - the page's example
            elif lang == "console":
                pieces += [text[pos:match.start(2)], _fill_console(body, env)]
                pos = match.end(2)
        path.write_text("".join(pieces) + text[pos:], encoding="utf-8")
    finally:
        os.chdir(here)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python scripts/fill_doc_outputs.py PAGE.md [PAGE.md ...]")
    for name in sys.argv[1:]:
        print(name, file=sys.stderr)
        fill(Path(name).resolve())
