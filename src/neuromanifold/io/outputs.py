"""Writing result files all-or-nothing."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def staged_files(paths: list[Path]) -> Iterator[list[Path]]:
    """Yield hidden temporary paths beside `paths`; move them into place only if the block succeeds.

    A failure (an exception, a full disk, a plotting error) removes the temporaries and leaves
    every target as it was: nothing is written half-way.
    """
    temps = [p.with_name(f".{p.stem}.partial{p.suffix}") for p in paths]  # keep the suffix: it sets the format
    try:
        yield temps
    except BaseException:
        for t in temps:
            with contextlib.suppress(FileNotFoundError):
                t.unlink()
        raise
    for t, p in zip(temps, paths):
        os.replace(t, p)
