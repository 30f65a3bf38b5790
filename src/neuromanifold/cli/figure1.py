"""`neuromanifold figure1`: The paper's Figure 1."""

from __future__ import annotations

from pathlib import Path

import typer

from ..core.checks import bad_value, check_seed
from ..io.outputs import staged_files
from .common import check_output_files, err, stderr_progress


def figure1(
    out: Path = typer.Option(Path("figure1"), help="Folder for the PNG and the polynomial."),
    force: bool = typer.Option(False, help="Overwrite existing files in --out."),
    seed: int = typer.Option(0, help="Random seed for the interpolation points and the slice."),
    grid: int = typer.Option(110, help="Grid size per axis for sampling the sliced surface."),
) -> None:
    """The paper's Figure 1: d = 2, d' = 1, a = 2; exact defining polynomial and a 3-D slice."""
    check_seed(seed)
    from ..experiments.figure1 import figure1_data  # noqa: PLC0415
    from ..experiments.plots import plot_figure1  # noqa: PLC0415

    if out.exists() and not out.is_dir():
        raise bad_value("out", "a folder", str(out), "Pass a folder path to --out.")
    png, text = out / "figure1.png", out / "figure1_polynomial.txt"
    check_output_files([png, text], force)
    if grid < 4:
        raise bad_value("grid", "an integer >= 4", grid, "Pass e.g. --grid 110.")
    err.print(f"figure1: seed {seed}")
    out.mkdir(parents=True, exist_ok=True)  # fail on an unusable --out before computing
    say = stderr_progress("figure1")
    data = figure1_data(seed=seed, n_grid=grid, progress=say)
    say("drawing the figure")
    with staged_files([png, text]) as (png_tmp, text_tmp):
        text_tmp.write_text(data.report())
        plot_figure1(data, png_tmp)
    print(data.report(), end="")
    print(f"wrote {png} and {text}")
