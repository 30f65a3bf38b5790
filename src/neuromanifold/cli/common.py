"""Helpers shared by the command modules: parsing, output checks, JSON and the stderr console."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from rich.console import Console

from ..core.architecture import Architecture
from ..core.checks import bad_value
from ..core.limits import check_output_folder

err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)

EXIT_AMBIGUOUS = 1
EXIT_BAD_INPUT = 2


def parse_int_list(name: str, text: str, example: str) -> tuple[int, ...]:
    """'5,3,3,5' -> (5, 3, 3, 5); anything else is a bad-input line."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise bad_value(name, "a comma-separated list of positive integers", text,
                        f"Pass e.g. --{name} {example}.") from None
    return values


def parse_per_layer(name: str, text: str, example: str) -> int | tuple[int, ...]:
    """'2,2' -> (2, 2); a single '2' -> 2, which Architecture gives to every layer."""
    values = parse_int_list(name, text, example)
    return values[0] if len(values) == 1 else values


def build_architecture(widths: str, keys: str, tokens: int, attention: str,
                       temperature: float = 1.0) -> Architecture:
    """An Architecture from CLI strings (validated by Architecture itself)."""
    return Architecture(parse_int_list("widths", widths, "5,3,3,5"),
                        parse_per_layer("keys", keys, "2,2,2"), tokens, attention.lower(), temperature)


def build_block_architecture(widths: str, keys: str, tokens: int, attention: str,
                             temperature: float = 1.0, *, heads: str | None = None,
                             values: str | None = None, residual: bool = False,
                             mlp: str | None = None, activation: str = "square",
                             norm: str = "none") -> Architecture:
    """An Architecture with the transformer-block options, from CLI strings."""
    return Architecture(
        parse_int_list("widths", widths, "5,3,3,5"), parse_per_layer("keys", keys, "2,2,2"), tokens,
        attention.lower(), temperature,
        heads=None if heads is None else parse_per_layer("heads", heads, "2,2"),
        values=None if values is None else parse_per_layer("values", values, "2,2"),
        residual=residual, mlp=None if mlp is None else parse_per_layer("mlp", mlp, "3,3"),
        activation=activation.lower(), norm=norm.lower())


def check_output_files(paths: list[Path], force: bool) -> None:
    """Refuse, before any work, to overwrite existing files (unless --force) or to write where
    the folder cannot be created or written."""
    existing = [str(p) for p in paths if p.exists()]
    if existing and not force:
        raise bad_value("out", "a folder without earlier results", ", ".join(existing),
                        "Pass another --out folder, or --force to overwrite.")
    for folder in sorted({p.parent for p in paths}):
        check_output_folder("out", folder)


def print_json(obj) -> None:
    """One JSON document on stdout (non-finite floats become null)."""
    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x
    sys.stdout.write(json.dumps(clean(obj), indent=2) + "\n")




def text_width() -> int | None:
    """The terminal's width when stdout is one (long table values wrap to it), else None: piped
    output keeps one line per value, for grep and for scripts."""
    import shutil  # noqa: PLC0415

    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def stderr_progress(command: str):
    """A progress callback printing '<command>: <phase> (<elapsed> s)' lines on stderr (always,
    whatever the output format: stdout carries only results)."""
    import time  # noqa: PLC0415

    start = time.perf_counter()

    def say(message: str) -> None:
        err.print(f"{command}: {message} [{time.perf_counter() - start:.1f} s]", style="dim")
    return say
