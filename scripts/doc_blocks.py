"""The block of a docs page between two markers, read and rewritten (the table scripts)."""

from __future__ import annotations

from pathlib import Path


def read_block(page: Path, begin: str, end: str) -> str:
    """The text between `begin` and `end` on `page`, as the page has it (outer newlines off)."""
    return page.read_text().split(begin)[1].split(end)[0].strip("\n")


def write_block(page: Path, begin: str, end: str, text: str) -> None:
    """Replace the text between `begin` and `end` on `page` by `text`."""
    head, rest = page.read_text().split(begin)
    page.write_text(f"{head}{begin}\n{text}\n{end}{rest.split(end, 1)[1]}")


def print_or_write(page: Path, begin: str, end: str, text: str, argv: list[str]) -> None:
    """A table script's main: print `text`, and with `--write` in `argv` put it on `page`."""
    if "--write" in argv:
        write_block(page, begin, end, text)
    print(text)
