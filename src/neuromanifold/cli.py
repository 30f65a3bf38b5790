"""The `neuromanifold` command line. Thin: parse, build, call one public function, print.

stdout carries results (a table, or JSON with --json); progress goes to stderr.
Exit codes: 0 success, 1 computation failed or ambiguous, 2 bad input (one line on stderr;
`--debug` anywhere on the command line shows the traceback instead).
"""

from __future__ import annotations

import csv
import json
import math
import sqlite3
import sys
from pathlib import Path
from typing import Optional

import typer

from typer import Abort

try:  # recent typer vendors click
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - typer on top of click
    from click.exceptions import UsageError
from rich.console import Console

from .architecture import Architecture
from .checks import NeuromanifoldError, bad_value, check_int
from .dimension import DimensionResult, neuromanifold_dim
from .outputs import staged_files

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Geometry of the function spaces (neuromanifolds) of self-attention networks.")
err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)

EXIT_AMBIGUOUS = 1
EXIT_BAD_INPUT = 2


# ---------------------------------------------------------------- shared helpers (used by commands)

def parse_int_list(name: str, text: str, example: str) -> tuple[int, ...]:
    """'5,3,3,5' -> (5, 3, 3, 5); anything else is a bad-input line."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise bad_value(name, "a comma-separated list of positive integers", text,
                        f"Pass e.g. --{name} {example}.") from None
    return values


def build_architecture(widths: str, keys: str, tokens: int, attention: str,
                       temperature: float = 1.0) -> Architecture:
    """An Architecture from CLI strings (validated by Architecture itself)."""
    return Architecture(parse_int_list("widths", widths, "5,3,3,5"),
                        parse_int_list("keys", keys, "2,2,2"), tokens, attention.lower(), temperature)


def check_output_files(paths: list[Path], force: bool) -> None:
    """Refuse to overwrite existing files unless --force."""
    existing = [str(p) for p in paths if p.exists()]
    if existing and not force:
        raise bad_value("out", "a folder without earlier results", ", ".join(existing),
                        "Pass another --out folder, or --force to overwrite.")


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


def describe_formula(result: DimensionResult) -> str:
    """The closed form's value with whether it may be read as the dimension."""
    f = result.formula
    label = f"{f.name} (conjecture)" if f.conjecture else f.name
    if f.hypotheses_hold:
        if result.status in ("settled", "certified"):
            verdict = "agrees" if f.value == result.dimension else "DISAGREES"
        elif result.upper_bound is not None and result.lower_bound is not None:
            low, high = result.lower_bound, result.upper_bound
            verdict = (f"consistent with {low} <= dim <= {high}" if low <= f.value <= high
                       else f"outside the bounds {low} <= dim <= {high}")
        else:
            verdict = f"not compared: the dimension is {result.status}"
        return f"{label} = {f.value} (hypotheses hold: {f.hypotheses}; {verdict})"
    return (f"{f.name} would give {f.value}, but its hypotheses fail ({f.hypotheses} required): "
            "not the dimension")


def describe_dimension(result: DimensionResult) -> str:
    """'50 [numerical, settled: gap 9.4 decades, N = 12]' and the like."""
    if result.method == "numerical":
        how = (f"numerical, {result.status}: singular-value gap {result.gap:.1f} decades "
               f"(sigma_r = {result.sigma_before:.2e}, sigma_r+1 = {result.sigma_after:.2e}), "
               f"N = {result.n_samples}")
    else:
        how = f"{result.method}, {result.status}"
        if result.lower_bound is not None and result.upper_bound is not None:
            how += f": {result.lower_bound} <= dim <= {result.upper_bound}"
        if result.prime:
            how += f", p = {result.prime}"
            if result.failure_probability is not None and result.status != "certified":
                how += f", P(dim > lower bound) <= {result.failure_probability:.1e}"
        how += f", N = {result.n_samples}"
    return f"{result.dimension}  [{how}]"


# ---------------------------------------------------------------- commands

@app.command()
def dim(
    widths: str = typer.Option(..., help="Widths d_0,...,d_l, e.g. 5,3,3,5."),
    keys: str = typer.Option(..., help="Key widths a_1,...,a_l, e.g. 2,2,2."),
    tokens: int = typer.Option(3, help="Number of tokens t."),
    attention: str = typer.Option("lightning", help="lightning or softmax."),
    temperature: float = typer.Option(1.0, help="Softmax temperature tau in exp(x / tau)."),
    method: str = typer.Option("auto", help="auto, numerical, exact or certified."),
    samples: Optional[int] = typer.Option(None, help="Input samples N (default: grown until the rank saturates)."),
    seed: int = typer.Option(0, help="Random seed for weights and inputs."),
    device: str = typer.Option("cpu", help="cpu, cuda or auto (numerical method)."),
    prime: Optional[int] = typer.Option(None, help="Prime p < 2^31 for the exact and certified methods "
                                        "(default 2147483629)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
) -> None:
    """Dimension of the neuromanifold of one architecture, with how it was obtained."""
    arch = build_architecture(widths, keys, tokens, attention, temperature)
    options = {}
    if prime is not None:
        if method.lower() == "numerical" or (method.lower() == "auto" and not arch.is_polynomial):
            raise bad_value("prime", "given only with --method exact or certified", prime,
                            "Drop --prime, or pass --method certified for a lightning network.")
        from .exact import check_prime  # noqa: PLC0415  (python-flint only when asked for)

        options["prime"] = check_prime("prime", prime)
    progress = None if as_json else (lambda msg: err.print(msg, style="dim"))
    result = neuromanifold_dim(arch, method=method.lower(), samples=samples, seed=seed,
                               device=device, progress=progress, **options)
    if as_json:
        print_json(result.to_dict())
    else:
        lines = [("architecture", str(arch)), ("seed", str(seed)), ("parameters", str(result.n_params)),
                 ("dimension", describe_dimension(result)), ("fiber dimension", str(result.fiber_dim)),
                 ("formula", describe_formula(result))]
        c = result.conjecture
        lines.append(("conjecture", f"{c.name} = {c.value}" + ("" if c.hypotheses_hold else
                                                               " (outside its stated range)")))
        lines += [("notes", n) for n in result.notes]
        lines.append(("seconds", ", ".join(f"{k} {v:.2f}" for k, v in result.seconds.items())))
        width = max(len(k) for k, _ in lines)
        for key, value in lines:
            print(f"{key:<{width}}  {value}")
    # A bare lower bound is what `--method exact` asks for; anywhere else it is not settled.
    done = ("settled", "certified") + (("lower-bound",) if method.lower() == "exact" else ())
    if result.status not in done:
        raise typer.Exit(EXIT_AMBIGUOUS)


@app.command()
def figure3(
    attention: str = typer.Option("softmax", help="softmax or lightning."),
    deltas: str = typer.Option("3-10", help="Range a-b or list a,b,c of widths delta."),
    samples: int = typer.Option(250, help="Input samples N to start from (the paper's 250); grown if needed."),
    seed: int = typer.Option(0, help="Random seed."),
    device: str = typer.Option("cpu", help="cpu, cuda or auto."),
    out: Path = typer.Option(Path("figure3"), help="Folder for the PNG and CSV."),
    force: bool = typer.Option(False, help="Overwrite existing files in --out."),
    as_json: bool = typer.Option(False, "--json", help="JSON list of rows on stdout."),
) -> None:
    """Reproduce the paper's Figure 3 (l = 2, t = 3, a_i = 2, d_i = delta): estimated vs expected."""
    from .experiments import figure3 as run_figure3, parse_int_set  # noqa: PLC0415
    from .plots import plot_figure3  # noqa: PLC0415

    attention = attention.lower()
    Architecture((3, 3, 3), (2, 2), 3, attention)  # validates `attention` before any work
    delta_list = parse_int_set("deltas", deltas)
    if out.exists() and not out.is_dir():
        raise bad_value("out", "a folder", str(out), "Pass a folder path to --out.")
    png, table = out / f"figure3_{attention}.png", out / f"figure3_{attention}.csv"
    check_output_files([png, table], force)
    check_int("samples", samples, minimum=1, fix="Pass --samples 250 (the paper's N).")
    out.mkdir(parents=True, exist_ok=True)  # fail on an unusable --out before computing
    err.print(f"figure3: {attention}, deltas {delta_list}, seed {seed}")

    def report(delta, result):
        err.print(f"  delta = {delta:>3}: estimated {result.dimension:>5} vs expected "
                  f"{result.formula.value:>5}  [{result.status}, gap {result.gap:.1f} decades, "
                  f"N = {result.n_samples}, {result.seconds['total']:.2f} s]")

    rows = run_figure3(attention, delta_list, seed=seed, samples=samples, device=device, progress=report)
    with staged_files([png, table]) as (png_tmp, table_tmp):
        with table_tmp.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        plot_figure3(rows, png_tmp, attention)
    if as_json:
        print_json([{k: r[k] for k in ("delta", "n_params", "estimated", "expected", "gap", "status")}
                    for r in rows])
    else:
        print(f"Figure 3, {attention} attention, l = 2, t = 3, a_i = 2; seed {seed}; "
              f"method numerical (float64), expected = {rows[0]['formula']}")
        print(f"{'delta':>5} {'params':>7} {'estimated':>9} {'expected':>8} {'gap':>6}  status")
        for r in rows:
            print(f"{r['delta']:>5} {r['n_params']:>7} {r['estimated']:>9} {r['expected']:>8} "
                  f"{r['gap']:>6.1f}  {r['status']}")
        total = sum(r["seconds"] for r in rows)
        print(f"wrote {png} and {table} ({total:.1f} s)")
    if any(r["status"] != "settled" for r in rows):
        raise typer.Exit(EXIT_AMBIGUOUS)


@app.command()
def classify(
    weights: Path = typer.Option(..., help="Single-layer .npz with Q_1, K_1, V_1 (or A_1, V_1)."),
    tokens: int = typer.Option(3, help="Number of tokens t (Theorem 3.4 needs t >= 2)."),
    seed: int = typer.Option(0, help="Random seed for the Jacobian's inputs."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
) -> None:
    """Smooth, singular, boundary or critical point of one lightning layer (Thm 3.4), with Jacobian rank."""
    from .geometry import classify_layer  # noqa: PLC0415
    from .weightfiles import read_weights  # noqa: PLC0415

    data = read_weights(weights, tokens=tokens, name="weights")
    if data.arch.n_layers != 1:
        raise bad_value("weights", "a single-layer file for classify (Theorem 3.4 is about one layer)",
                        f"{data.arch.n_layers} layers in {weights}", "Pass a file with Q_1, K_1, V_1 only.")
    result = classify_layer(data.attention_weights, tokens=tokens, seed=seed)
    if as_json:
        print_json({"seed": seed, **result.to_dict()})
    else:
        rank_how = (f"exact over F_p, p = {result.prime}" if result.rank_method == "exact" else
                    f"numerical, gap {result.rank_gap:.1f} decades")
        lines = [("weights", f"{weights} (d = {result.widths[0]}, d' = {result.widths[1]}, a = {result.keys}, "
                  f"t = {tokens})"), ("seed", str(seed)),
                 ("smooth", str(result.smooth)), ("singular", str(result.singular)),
                 ("boundary", str(result.boundary)), ("critical", str(result.critical)),
                 ("jacobian rank", f"{result.jacobian_rank} [{rank_how}; {result.jacobian_parametrisation}, "
                  f"N = {result.n_samples}]"),
                 ("theorem says", f"{result.expected_jacobian_rank} (generic {result.generic_jacobian_rank}); "
                  + ("agrees" if result.agrees else "DISAGREES"))]
        lines += [("notes", n) for n in result.notes]
        width = max(len(k) for k, _ in lines)
        for key, value in lines:
            print(f"{key:<{width}}  {value}")
    if not result.agrees:
        raise typer.Exit(EXIT_AMBIGUOUS)


@app.command()
def fiber(
    weights: Path = typer.Option(..., help="First .npz (Q_i, K_i, V_i or A_i, V_i)."),
    other: Path = typer.Option(..., help="Second .npz of the same architecture."),
    tokens: int = typer.Option(3, help="Number of tokens t."),
    attention: str = typer.Option("lightning", help="lightning or softmax."),
    method: str = typer.Option("auto", help="auto (exact for integer lightning weights), exact or numerical."),
    tolerance: float = typer.Option(1e-8, help="Relative tolerance of the numerical test."),
    seed: int = typer.Option(0, help="Random seed for the test inputs."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
) -> None:
    """Do two weight files define the same function? If so, print the group element relating them."""
    from .fibers import same_function  # noqa: PLC0415
    from .weightfiles import read_weights  # noqa: PLC0415

    first = read_weights(weights, tokens=tokens, attention=attention.lower(), name="weights")
    second = read_weights(other, tokens=tokens, attention=attention.lower(), name="other")
    if first.arch != second.arch:
        raise bad_value("other", f"weights of the same architecture as --weights ({first.arch})",
                        str(second.arch), "Pass two files with the same shapes.")
    result = same_function(first.arch, first.layer_weights, second.layer_weights, method=method.lower(),
                           tolerance=tolerance, seed=seed)
    if as_json:
        print_json({"seed": seed, "architecture": first.arch.to_dict(), **result.to_dict()})
        return
    if result.method == "exact":
        how = (f"exact (rational identity test, P(wrong) <= {result.failure_probability:.1e})"
               if result.same_function else "exact (outputs differ at an input: certain)")
    else:
        how = (
               f"numerical (float64, relative tolerance {result.tolerance:g}, max difference "
               f"{result.max_difference:.2e})")
    print(f"architecture    {first.arch}")
    print(f"seed            {seed}")
    print(f"same function   {result.same_function}  [{how}, {result.n_points} inputs]")
    if result.same_function:
        print(f"fiber           {result.kind}")
        for move in result.witness or []:
            print(f"  witness move  {json.dumps(move)}")
        if result.witness_residual is not None:
            print(f"witness residual {result.witness_residual:.1e} (float64, relative, blockwise)")
    for note in result.notes:
        print(f"note            {note}")


@app.command()
def figure1(
    out: Path = typer.Option(Path("figure1"), help="Folder for the PNG and the polynomial."),
    force: bool = typer.Option(False, help="Overwrite existing files in --out."),
    seed: int = typer.Option(0, help="Random seed for the interpolation points and the slice."),
    grid: int = typer.Option(110, help="Grid size per axis for sampling the sliced surface."),
) -> None:
    """The paper's Figure 1: d = 2, d' = 1, a = 2; exact defining polynomial and a 3-D slice."""
    check_int("seed", seed, minimum=0, fix="Pass a non-negative integer seed.")
    from .figure1 import figure1_data  # noqa: PLC0415
    from .plots import plot_figure1  # noqa: PLC0415

    if out.exists() and not out.is_dir():
        raise bad_value("out", "a folder", str(out), "Pass a folder path to --out.")
    png, text = out / "figure1.png", out / "figure1_polynomial.txt"
    check_output_files([png, text], force)
    err.print(f"figure1: seed {seed}")
    if grid < 4:
        raise bad_value("grid", "an integer >= 4", grid, "Pass e.g. --grid 110.")
    out.mkdir(parents=True, exist_ok=True)  # fail on an unusable --out before computing
    data = figure1_data(seed=seed, n_grid=grid)
    with staged_files([png, text]) as (png_tmp, text_tmp):
        text_tmp.write_text(data.report())
        plot_figure1(data, png_tmp)
    print(data.report(), end="")
    print(f"wrote {png} and {text}")


@app.command("sweep")
def sweep_command(
    grid: str = typer.Argument(..., help="Grid TOML file, or a shipped grid name (e.g. eq14_map)."),
    db: Path = typer.Option(..., help="SQLite result store (created if new; resumed if ours)."),
    jobs: int = typer.Option(1, help="Worker processes (local) or LocalCluster workers (dask)."),
    backend: str = typer.Option("local", help="local or dask."),
    scheduler: Optional[str] = typer.Option(None, help="Dask scheduler address (with --backend dask)."),
    timeout: Optional[float] = typer.Option(None, help="Seconds per item; slower items are recorded as 'timeout'."),
    method: Optional[str] = typer.Option(None, help="Override the grid's methods: comma-separated, e.g. numerical."),
    seed: int = typer.Option(0, help="Random seed for every item (part of each item's key)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON summary on stdout."),
) -> None:
    """Run every architecture of a grid, writing one row per item to an SQLite store as it finishes.

    Exit 1 when an item of this run ended in `error` or `timeout` (recorded all the same).
    """
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,  # noqa: PLC0415
                               TimeElapsedColumn, TimeRemainingColumn)

    from .sweeps import load_grid, sweep  # noqa: PLC0415

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
                        timeout=timeout, seed=seed, methods=methods, progress=progress)
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
    if summary.counts.get("error") or summary.counts.get("timeout"):
        raise typer.Exit(EXIT_AMBIGUOUS)


@app.command("report")
def report_command(
    db: Path = typer.Argument(..., help="SQLite store written by `neuromanifold sweep`."),
    out: Path = typer.Option(..., help="Folder for results.csv and the figures."),
    force: bool = typer.Option(False, help="Overwrite existing report files in --out."),
    heat_x: str = typer.Option("d1", help="Heat-map x axis: d0..dl, a1..al or t."),
    heat_y: str = typer.Option("d0", help="Heat-map y axis: d0..dl, a1..al or t."),
    heat_layers: int = typer.Option(2, help="Heat map uses networks with this many layers l."),
    heat_fix: Optional[str] = typer.Option(None, help="Hold axes fixed, e.g. a1=2,a2=2 (others are averaged)."),
    seed: int = typer.Option(0, help="Unused (a report draws nothing at random); echoed."),
    as_json: bool = typer.Option(False, "--json", help="One JSON summary on stdout."),
) -> None:
    """CSV of every result in a sweep store, and figures: measured vs formula, heat map of the difference."""
    from .reports import write_report  # noqa: PLC0415

    summary = write_report(db, out, force=force, heat_x=heat_x, heat_y=heat_y,
                           heat_layers=heat_layers, heat_fix=heat_fix)
    if as_json:
        print_json(dict(summary, db=str(db), seed=seed))
    else:
        print(f"report of {db}: {summary['rows']} results ({summary['heatmap_rows']} in the heat map)")
        for path in summary["files"]:
            print(f"wrote {path}")


# ---------------------------------------------------------------- entry point

def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: one line and exit 2 on bad input, unless --debug."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"] or ["--help"]
    try:
        code = app(args=args, prog_name="neuromanifold", standalone_mode=False)
    except UsageError as exc:
        if debug:
            raise
        hint = exc.format_message().replace("\n", " ")
        print(f"neuromanifold: error: {hint} (see --help)", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (Abort, KeyboardInterrupt):
        print("neuromanifold: aborted", file=sys.stderr)
        return 130
    except (ValueError, TypeError, OSError, sqlite3.Error) as exc:
        if debug:
            raise
        text = str(exc).replace("\n", " ")
        print(f"neuromanifold: error: {text}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NeuromanifoldError as exc:
        if debug:
            raise
        print(f"neuromanifold: {exc}", file=sys.stderr)
        return EXIT_AMBIGUOUS
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
