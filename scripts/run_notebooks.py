#!/usr/bin/env python3
"""Execute the notebooks of the gallery (docs/notebooks/*.ipynb) and store their outputs.

Usage: .venv/bin/python scripts/run_notebooks.py [NOTEBOOK.ipynb ...]

Each notebook runs top to bottom in a fresh Python kernel (nbclient; the `python3` kernel of
this environment, from ipykernel), in a scratch folder, and is written back with its outputs, so
the site (mkdocs-jupyter, which does not execute them) shows what they print. Every notebook
asserts its own results; tests/project/test_notebooks.py executes them again without writing.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
GALLERY = ROOT / "docs" / "notebooks"


def execute(path: Path, timeout: int = 600) -> nbformat.NotebookNode:
    """The notebook at `path` executed in a scratch folder (raises CellExecutionError on failure)."""
    notebook = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as scratch:
        NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": scratch}}).execute()
    return notebook


if __name__ == "__main__":
    paths = [Path(p) for p in sys.argv[1:]] or sorted(GALLERY.glob("*.ipynb"))
    for path in paths:
        start = time.perf_counter()
        notebook = execute(path)
        for cell in notebook.cells:   # execution metadata (timestamps) would churn every rerun
            cell.get("metadata", {}).pop("execution", None)
        nbformat.write(notebook, path)
        print(f"{path.name}: executed in {time.perf_counter() - start:.1f} s", file=sys.stderr)
