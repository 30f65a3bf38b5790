"""`neuromanifold sweep`: Sweeps over grids of architectures."""

from __future__ import annotations

import sys
from typing import Optional
from pathlib import Path

import typer

from ..core.checks import check_seed
from .common import EXIT_AMBIGUOUS, METHOD, OUTPUT, RESOURCES, err, print_json


def sweep_command(
    grid: str = typer.Argument(..., help="Grid TOML file, or a shipped grid name (e.g. eq14_map)."),
    method: Optional[str] = typer.Option(None, help="Override the grid's methods: comma-separated, "
                                         "e.g. numerical.", rich_help_panel=METHOD),
    seed: int = typer.Option(0, help="Random seed for every item (part of each item's key).",
                             rich_help_panel=METHOD),
    jobs: int = typer.Option(1, help="Worker processes (local) or LocalCluster workers (dask).",
                             rich_help_panel=RESOURCES),
    backend: str = typer.Option("local", help="local or dask.", rich_help_panel=RESOURCES),
    scheduler: Optional[str] = typer.Option(None, help="Dask scheduler address (with --backend "
                                            "dask).", rich_help_panel=RESOURCES),
    timeout: Optional[float] = typer.Option(None, help="Seconds per item; slower items are "
                                            "recorded as 'timeout'.", rich_help_panel=RESOURCES),
    max_memory: Optional[str] = typer.Option(None, help="Memory budget of each item: 16G, 500M or a "
                                             "fraction of the available memory (default 0.8); "
                                             "items estimated above it are stored as 'refused'.",
                                             rich_help_panel=RESOURCES),
    db: Path = typer.Option(..., help="SQLite result store (created if new; resumed if ours).",
                            rich_help_panel=OUTPUT),
    as_json: bool = typer.Option(False, "--json", help="One JSON summary on stdout.",
                                 rich_help_panel=OUTPUT),
) -> None:
    """Run every architecture of a grid, writing one row per item to an SQLite store as it finishes.

    Exit 1 when an item of this run ended in `error`, `timeout` or `refused` (recorded all the same).
    """
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,  # noqa: PLC0415
                               TimeElapsedColumn, TimeRemainingColumn)

    from ..sweeps.engine import sweep
    from ..sweeps.grid import load_grid  # noqa: PLC0415

    check_seed(seed)
    methods = None if method is None else [m.strip().lower() for m in method.split(",")]
    loaded = load_grid(grid)
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                   console=err, transient=False)
    task = None

    def progress(event: str, done: int, total: int, counts: dict) -> None:
        nonlocal task
        if event == "start":
            print(f"sweep: {loaded.source}: {total} items to run, {done} already in {db}, "
                  f"{loaded.n_skipped} combinations skipped (keys do not match the layers, or an "
                  f"exact method asked of softmax); backend {backend}, jobs {jobs}, seed {seed}",
                  file=sys.stderr)
            bar.start()
            task = bar.add_task("sweep", total=total)
            return
        text = " ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        bar.update(task, completed=done, description=text)

    try:
        summary = sweep(loaded, db, jobs=jobs, backend=backend.lower(), scheduler=scheduler,
                        timeout=timeout, seed=seed, methods=methods, progress=progress,
                        max_memory=max_memory)
    finally:
        if task is not None:
            bar.stop()
    if as_json:
        print_json(dict(summary.to_dict(), db=str(db), seed=seed))
    else:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(summary.counts.items())) or "nothing new"
        print(f"sweep {loaded.source} -> {db} (seed {seed}): {summary.n_items} items, "
              f"{summary.n_already_done} already done, {summary.n_written} written ({counts}), "
              f"{summary.n_skipped_combinations} combinations skipped, {summary.seconds:.1f} s")
    if summary.counts.get("error") or summary.counts.get("timeout") or summary.counts.get("refused"):
        raise typer.Exit(EXIT_AMBIGUOUS)
