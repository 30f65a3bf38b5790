"""A Griffe extension for the API reference (mkdocs.yml loads it): docstrings keep plain Unicode
maths, as the house style asks, and this makes the site show it verbatim instead of letting
Markdown read it.

- `Example:` (the project's spelling) becomes `Examples:`, so that `>>>` lines render as a
  Python console block instead of nested block quotes.
- A paragraph that starts with `Math:` is shown as a plain-text block, character for character.
- Elsewhere, a word with `_` or `^` outside a code span (`A'_i`, `d^2`) becomes a code span, so
  that Markdown cannot turn a pair of underscores into italics.

Only the rendering changes: `help()` and the source show the docstrings unchanged.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.M)
_MATH_WORD = re.compile(r"(?<![`\w])([^\s`]*[A-Za-z0-9)}\]'][_^][^\s`]*)")
# An `Args:` entry's name (`min_gap: ...`, `x (int): ...`): left alone, or the docstring parser
# reads a parameter called `min_gap with its backtick.
_ARG_NAME = re.compile(r"^(\s*[A-Za-z_]\w*(?:\s*\([^)]*\))?:\s)")


def _code_words(line: str) -> str:
    """Wrap the words of `line` that carry `_` or `^`, outside its code spans, in backticks
    (an argument's name at the start of the line excepted)."""
    name = _ARG_NAME.match(line)
    if name:
        return name.group(1) + _code_words(line[name.end():])
    parts = line.split("`")
    for i in range(0, len(parts), 2):  # even pieces are outside code spans
        parts[i] = _MATH_WORD.sub(lambda m: f"`{m.group(1)}`", parts[i])
    return "`".join(parts)


def plain_maths(text: str) -> str:
    """The docstring `text` with Math paragraphs verbatim, `Examples:` spelt so, and maths words
    as code spans (examples and fenced blocks are left alone)."""
    text = _EXAMPLE.sub(r"\1Examples:", text)
    out: list[str] = []
    lines = text.split("\n")
    i, verbatim = 0, False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("```"):
            verbatim = not verbatim
        if verbatim or stripped.startswith(">>>") or stripped.startswith("...") or stripped.startswith("```"):
            out.append(line)
        elif stripped.startswith("Math:"):
            indent = line[: len(line) - len(line.lstrip())]
            block = [stripped[len("Math:"):].strip()]
            while i + 1 < len(lines) and lines[i + 1].strip() and not lines[i + 1].strip().endswith(":"):
                i += 1
                block.append(lines[i].strip())
            out += [f"{indent}Math:", "", f"{indent}```text"] + [f"{indent}{b}" for b in block if b] \
                + [f"{indent}```", ""]
        else:
            out.append(_code_words(line))
        i += 1
    return "\n".join(out)


class PlainMaths(griffe.Extension):
    """Rewrite every docstring with `plain_maths` before mkdocstrings renders it."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:  # noqa: ARG002 (griffe's hook)
        if obj.docstring is not None:
            obj.docstring.value = plain_maths(obj.docstring.value)
