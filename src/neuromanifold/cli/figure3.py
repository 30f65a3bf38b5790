"""`neuromanifold figure3`: The paper's Figure 3."""

from __future__ import annotations

import contextlib
import csv
from pathlib import Path
from typing import Optional


import typer

from ..core.architecture import Architecture
from ..core.checks import check_int, check_seed
from ..io.outputs import staged_files
from . import interrupts
from .common import (EXIT_AMBIGUOUS, METHOD, NETWORK, OUTPUT, RESOURCES, check_output_files, err,
                     print_json)
from ..core.checks import bad_value


def figure3(
    attention: str = typer.Option("softmax", help="softmax or lightning.", rich_help_panel=NETWORK),
    deltas: str = typer.Option("3-10", help="Range a-b or list a,b,c of widths delta.",
                               rich_help_panel=NETWORK),
    method: str = typer.Option("numerical", help="numerical (float64 gap rule) or certified "
                               "(every point proved: F_p for lightning, ball arithmetic for softmax).",
                               rich_help_panel=METHOD),
    samples: int = typer.Option(250, help="Input samples N to start from (the paper's 250); grown "
                                "if needed.", rich_help_panel=METHOD),
    seed: int = typer.Option(0, help="Random seed.", rich_help_panel=METHOD),
    precision: Optional[int] = typer.Option(None, help="Ball-arithmetic bits for certified softmax "
                                            "(default 128).", rich_help_panel=METHOD),
    device: str = typer.Option("cpu", help="cpu, cuda or auto.", rich_help_panel=RESOURCES),
    max_memory: Optional[str] = typer.Option(None, help="Refuse (exit 2) when the estimated peak "
                                             "exceeds this: 16G, 500M, or a fraction such as 0.5 "
                                             "of the available memory (default 0.8).",
                                             rich_help_panel=RESOURCES),
    out: Path = typer.Option(Path("figure3"), help="Folder for the PNG and CSV.",
                             rich_help_panel=OUTPUT),
    force: bool = typer.Option(False, help="Overwrite existing files in --out.",
                               rich_help_panel=OUTPUT),
    as_json: bool = typer.Option(False, "--json", help="JSON list of rows on stdout.",
                                 rich_help_panel=OUTPUT),
) -> None:
    """Reproduce the paper's Figure 3 (l = 2, t = 3, a_i = 2, d_i = delta): estimated vs expected."""
    from ..experiments.figure3 import figure3 as run_figure3, figure3_plans, parse_int_set  # noqa: PLC0415
    from ..experiments.plots import plot_figure3  # noqa: PLC0415

    check_seed(seed)
    attention, device = attention.lower(), device.lower()
    Architecture((3, 3, 3), (2, 2), 3, attention)  # validates `attention` before any work
    check_int("samples", samples, minimum=1, fix="Pass --samples 250 (the paper's N).")
    delta_list = parse_int_set("deltas", deltas)
    if method.lower() != "certified":   # a device torch cannot see: refused before any output
        from ..dimension.numerical import resolve_device  # noqa: PLC0415

        resolve_device(device)
    plans = figure3_plans(delta_list, attention, samples=samples, device=device,
                          max_memory=max_memory)  # every delta, before any work
    if out.exists() and not out.is_dir():
        raise bad_value("out", "a folder", str(out), "Pass a folder path to --out.")
    png, table = out / f"figure3_{attention}.png", out / f"figure3_{attention}.csv"
    partial = out / f"figure3_{attention}.partial.csv"  # the rows as they finish (an interrupted run's)
    check_output_files([png, table, partial], force)

    def report(delta, result):
        how = (f"gap {result.gap:.1f} decades" if result.gap is not None
               else f"{result.lower_bound} <= dim <= {result.upper_bound}")
        err.print(f"  delta = {delta:>3}: estimated {result.dimension:>5} vs expected "
                  f"{result.formula.value:>5}  [{result.status}, {how}, "
                  f"N = {result.n_samples}, {result.seconds['total']:.2f} s]")

    created = [p for p in (out, *out.parents) if not p.exists()]
    with _RowsAsTheyFinish(partial, created) as kept:
        out.mkdir(parents=True, exist_ok=True)  # fail on an unusable --out before computing
        err.print(f"figure3: {attention}, deltas {delta_list}, seed {seed}")
        rows = run_figure3(attention, delta_list, seed=seed, samples=samples, device=device,
                           progress=report, method=method.lower(), precision=precision,
                           plans=plans, on_row=kept.add)
        kept.close()
        with staged_files([png, table]) as (png_tmp, table_tmp):
            with table_tmp.open("w", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
            plot_figure3(rows, png_tmp, attention)
        kept.finished()  # the final CSV holds every row: the partial one goes
    if as_json:
        print_json([{k: r[k] for k in ("delta", "n_params", "estimated", "expected", "gap", "status")}
                    for r in rows])
    else:
        how = ("numerical (float64)" if method.lower() == "numerical"
               else "certified (lower bound meets upper bound at every proved point)")
        print(f"Figure 3, {attention} attention, l = 2, t = 3, a_i = 2; seed {seed}; "
              f"method {how}, expected = {rows[0]['formula']}")
        print(f"{'delta':>5} {'params':>7} {'estimated':>9} {'expected':>8} {'gap':>6}  status")
        for r in rows:
            gap = "-" if r["gap"] is None else f"{r['gap']:.1f}"
            print(f"{r['delta']:>5} {r['n_params']:>7} {r['estimated']:>9} {r['expected']:>8} "
                  f"{gap:>6}  {r['status']}  ({r['seconds']:.2f} s)")
        total = sum(r["seconds"] for r in rows)
        print(f"wrote {png} and {table} ({total:.1f} s)")
    if any(r["status"] not in ("settled", "certified") for r in rows):
        raise typer.Exit(EXIT_AMBIGUOUS)


class _RowsAsTheyFinish:
    """The finished rows of a run, written to `path` (a CSV named partial) one by one as they
    finish, so that a Ctrl-C keeps them; the interrupted line then says where they are
    (`cli.interrupts.note`). Any other failure removes the file: result files are all-or-nothing.
    A run that ends before its first row leaves nothing, and removes the `created` folders (the
    missing --out and its parents, made for it) when they are still empty."""

    def __init__(self, path: Path, created: list[Path]) -> None:
        self.path, self.created = path, created
        self.deltas: list[int] = []
        self.done = False
        self._file = None
        self._writer = None

    def add(self, row: dict) -> None:
        if self._file is None:
            self._file = self.path.open("w", newline="")
            self._writer = csv.DictWriter(self._file, fieldnames=list(row))
            self._writer.writeheader()
        self._writer.writerow(row)
        self._file.flush()
        self.deltas.append(row["delta"])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def finished(self) -> None:
        """The final files are in place: the rows are there, the partial file is removed."""
        self.done = True
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> "_RowsAsTheyFinish":
        return self

    def __exit__(self, kind, _exc, _tb) -> None:
        self.close()
        if kind is None:
            return
        if self.done:  # interrupted once the final files were written: they are kept
            self.path.unlink(missing_ok=True)
            return
        interrupted = issubclass(kind, KeyboardInterrupt)
        if self.deltas and interrupted:
            listed = ", ".join(map(str, self.deltas))
            rows = "row (delta = {}) is" if len(self.deltas) == 1 else "rows (delta = {}) are"
            interrupts.note(f"the finished {rows.format(listed)} in {self.path}; "
                            "no figure and no final CSV were written")
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        for folder in self.created:  # innermost first
            try:
                folder.rmdir()
            except OSError:  # not empty, or already gone: left as it is
                break
        if interrupted:
            interrupts.note("no delta had finished; nothing was written")
