"""`neuromanifold track`: the local geometry of every checkpoint of a training run."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Optional

import typer

from ..core.checks import bad_value
from ..io.outputs import staged_files
from .common import (EXIT_AMBIGUOUS, METHOD, NETWORK, OUTPUT, check_output_files, err, print_json,
                     text_width)

OUT_SUFFIXES = (".csv", ".json")
TABLE_COLUMNS = ("step", "status", "lower_bound", "upper_bound", "rank", "float_rank", "gap",
                 "generic_dimension", "excess")


def _check_paths(out: Path | None, figure: Path | None, force: bool) -> list[Path]:
    """--out (.csv or .json) and --figure (.png): refused before any work, never overwritten
    without --force."""
    if out is not None and out.suffix.lower() not in OUT_SUFFIXES:
        raise bad_value("out", "a .csv or .json file name", str(out),
                        "Pass e.g. --out rows.csv or --out rows.json.")
    if figure is not None and figure.suffix.lower() != ".png":
        raise bad_value("figure", "a .png file name", str(figure), "Pass e.g. --figure track.png.")
    paths = [p for p in (out, figure) if p is not None]
    for p in paths:
        if p.is_dir():
            raise bad_value("out" if p is out else "figure", "a file name", f"{p} (a folder)",
                            f"Pass a file name inside it, such as {p / ('track' + p.suffix)}.")
        if not p.parent.exists():
            raise bad_value("out" if p is out else "figure", "a path in an existing folder",
                            str(p), f"Create the folder {p.parent} first.")
    check_output_files(paths, force)
    return paths


def write_rows(rows: list[dict], document: dict, path: Path) -> None:
    """The rows as CSV (flat: `experiments.track.flat_rows`) or JSON (the document), by suffix."""
    from ..experiments.track import flat_rows  # noqa: PLC0415

    if path.suffix.lower() == ".json":
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        return
    flat = flat_rows(rows)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(flat[0]) if flat else ["step"])
        writer.writeheader()
        writer.writerows(flat)


def _table(rows: list[dict], title: str):
    """The rich table of stdout: the row columns, the effective dimensions, the batch rank on
    --inputs where the rows have one, and the seconds ('-' for a value the analysis did not
    give, or a rank that is not settled)."""
    from rich.table import Table  # noqa: PLC0415

    from ..experiments.track import flat_rows  # noqa: PLC0415

    flat = flat_rows(rows)
    keys = list(flat[0]) if flat else []
    columns = TABLE_COLUMNS + tuple(k for k in keys if k.startswith("eff@")) + tuple(
        k for k in ("batch:status", "batch:rank", "batch:float_rank") if k in keys) + ("seconds",)
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, justify="left" if column.endswith("status") else "right")
    for r in flat:
        cells = []
        for column in columns:
            value = r.get(column)
            if value is None:
                cells.append("-")
            elif isinstance(value, float) and column in ("gap", "seconds"):
                cells.append(f"{value:.1f}")
            else:
                cells.append(str(value))
        table.add_row(*cells)
    return table


def track_command(
    run_dir: Path = typer.Argument(..., help="A training run's folder: checkpoint-<step>/ "
                                   "folders (transformers' Trainer) or entries with a step in "
                                   "their name (docs/tracking.md states the rule)."),
    tokens: int = typer.Option(3, help="Number of tokens t of the sequences the function is "
                               "read on.", rich_help_panel=NETWORK),
    hidden_state: bool = typer.Option(False, "--hidden-state", help="The base model's last "
                                      "hidden state instead of the language-model head's "
                                      "logits.", rich_help_panel=NETWORK),
    method: str = typer.Option("auto", help="auto, numerical or certified (as `rank`).",
                               rich_help_panel=METHOD),
    seed: int = typer.Option(0, help="Random seed of the analysis' inputs (part of the store's "
                             "options).", rich_help_panel=METHOD),
    inputs: Optional[Path] = typer.Option(None, help="Token ids (.npy or .pt, shape (N, t)): "
                                          "also the batch functional dimension on them.",
                                          rich_help_panel=METHOD),
    out: Optional[Path] = typer.Option(None, help="Write the rows to this .csv or .json file "
                                       "(by its suffix), all at once when every step is done.",
                                       rich_help_panel=OUTPUT),
    figure: Optional[Path] = typer.Option(None, help="Write the figure (PNG): the bracket and "
                                          "the effective dimensions against the step, and the "
                                          "per-layer excess.", rich_help_panel=OUTPUT),
    store: Optional[Path] = typer.Option(None, help="SQLite store of the rows, written as each "
                                         "checkpoint finishes (a rerun skips stored steps). "
                                         "Default: beside --out (rows.sqlite), else "
                                         "RUN_DIR/.neuromanifold-track.sqlite.",
                                         rich_help_panel=OUTPUT),
    force: bool = typer.Option(False, help="Overwrite existing --out and --figure files.",
                               rich_help_panel=OUTPUT),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout.",
                                 rich_help_panel=OUTPUT),
) -> None:
    """One row per checkpoint of a training run: the rank bracket, effective dimensions, excess.

    Exit 1 when a step's rank is not settled or certified (its row is written all the same).
    """
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,  # noqa: PLC0415
                               TimeElapsedColumn)

    from ..experiments import track as tracking  # noqa: PLC0415
    from ..io.runs import default_store  # noqa: PLC0415

    output = "hidden" if hidden_state else "logits"
    options = tracking.track_options(tokens, output, method, seed, inputs)
    paths = _check_paths(out, figure, force)
    store_path = store if store is not None else default_store(run_dir, out)
    checkpoints = tracking.plan_track(run_dir, options, store_path)
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=err, transient=False)
    task = None
    said = "default" if store is None else "--store"

    def progress(event: str, step, done: int, total: int) -> None:
        nonlocal task
        if event == "start":
            first, last = checkpoints[0][0], checkpoints[-1][0]
            skipped = f"{done} already stored, skipped" if done else "none stored yet"
            print(f"track: {run_dir}: {total} checkpoints (steps {first}..{last}); store "
                  f"{store_path} ({said}; {skipped}); tokens {options['tokens']}, output "
                  f"{output}, method {options['method']}, seed {options['seed']}",
                  file=sys.stderr, flush=True)
            bar.start()
            task = bar.add_task("track", total=total, completed=done)
        elif event == "step":
            bar.update(task, completed=done, description=f"track: step {step}")
        elif event == "done":
            bar.update(task, completed=done, description=f"track: step {step} done")

    def analysis_progress(message: str) -> None:
        if task is not None:
            bar.update(task, description=f"track: {message}"[:70])

    try:
        result = tracking.track(run_dir, options["tokens"], output=output, inputs=inputs,
                                method=options["method"], seed=options["seed"],
                                store=store_path, progress=progress,
                                analysis_progress=analysis_progress)
    finally:
        if task is not None:
            bar.stop()
    document = result.to_dict()
    if paths:
        from ..experiments.plots import plot_track  # noqa: PLC0415

        with staged_files(paths) as temps:
            staged = dict(zip(paths, temps, strict=True))
            if out is not None:
                write_rows(result.rows, document, staged[out])
            if figure is not None:
                plot_track(result.rows, staged[figure], title=f"{run_dir.name}: t = "
                           f"{options['tokens']}, {output}, method {options['method']}, "
                           f"seed {options['seed']}")
    if result.not_in_run:
        err.print(f"track: {len(result.not_in_run)} stored steps are no longer in {run_dir} "
                  f"(kept in the store, left out here): {result.not_in_run}")
    if as_json:
        print_json(document)
    else:
        title = (f"track {run_dir} (t = {options['tokens']}, {output}, method "
                 f"{options['method']}, seed {options['seed']}): {len(result.computed)} "
                 f"analysed, {len(result.reused)} read from {store_path}")
        Console(width=text_width() or 200, soft_wrap=False).print(_table(result.rows, title))
        for p in paths:
            print(f"wrote {p}")
    if not result.is_settled:
        raise typer.Exit(EXIT_AMBIGUOUS)
