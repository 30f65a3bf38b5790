"""`neuromanifold report`: Reports of sweep stores."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..core.checks import check_seed
from .common import print_json


def report_command(
    db: Path = typer.Argument(..., help="SQLite store written by `neuromanifold sweep`."),
    out: Path = typer.Option(..., help="Folder for results.csv and the figures."),
    force: bool = typer.Option(False, help="Overwrite existing report files in --out."),
    heat_x: Optional[str] = typer.Option(None, help="Heat-map x axis: d0..dl, a1..al, h1..hl "
                                         "(heads) or t (default d1, or chosen from the results)."),
    heat_y: Optional[str] = typer.Option(None, help="Heat-map y axis: d0..dl, a1..al, h1..hl or t "
                                         "(default d0, or chosen from the results)."),
    heat_layers: Optional[int] = typer.Option(None, help="Heat map uses networks with this many "
                                              "layers l (default 2, or the l with the most "
                                              "results that have a closed form)."),
    heat_fix: Optional[str] = typer.Option(None, help="Hold axes fixed, e.g. a1=2,a2=2 (others are averaged)."),
    seed: int = typer.Option(0, help="Unused (a report draws nothing at random); echoed."),
    as_json: bool = typer.Option(False, "--json", help="One JSON summary on stdout."),
) -> None:
    """CSV of every result in a sweep store, and figures: measured vs formula, heat map of the difference."""
    check_seed(seed)
    from ..sweeps.report import write_report  # noqa: PLC0415

    summary = write_report(db, out, force=force, heat_x=heat_x, heat_y=heat_y,
                           heat_layers=heat_layers, heat_fix=heat_fix)
    if as_json:
        print_json(dict(summary, db=str(db), seed=seed))
    else:
        print(f"report of {db}: {summary['rows']} results ({summary['heatmap_rows']} in the heat map "
              f"of l = {summary['heat_layers']}, {summary['heat_x']} against {summary['heat_y']})"
              + (f"; {summary['damaged_rows']} damaged rows skipped (bad "
                 + ", ".join(f"{k}: {n}" for k, n in summary["damage"].items()) + ")"
                 if summary["damaged_rows"] else ""))
        if summary["heatmap_note"]:
            print(f"heat map empty: {summary['heatmap_note']}")
        for path in summary["files"]:
            print(f"wrote {path}")
