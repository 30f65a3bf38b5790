"""`neuromanifold heads`: dimension against the number of heads of one layer."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..core.checks import bad_value, check_int, check_seed
from ..io.outputs import staged_files
from .common import (EXIT_AMBIGUOUS, METHOD, NETWORK, OUTPUT, check_output_files, err,
                     parse_int_list, print_json)


def heads(
    widths: str = typer.Option("3,3", help="Widths d,d' of the one layer.", rich_help_panel=NETWORK),
    keys: Optional[int] = typer.Option(None, "--keys", help="Per-head key width a (as --keys of "
                                       "dim; default 3).", rich_help_panel=NETWORK),
    values: Optional[int] = typer.Option(None, "--values", help="Per-head value width v (output "
                                         "projection), as --values of dim; 0 for one unfactored "
                                         "value matrix per head (default 3).",
                                         rich_help_panel=NETWORK),
    tokens: int = typer.Option(3, help="Number of tokens t.", rich_help_panel=NETWORK),
    max_heads: int = typer.Option(4, help="Heads H = 1..max-heads.", rich_help_panel=NETWORK),
    seed: int = typer.Option(0, help="Random seed.", rich_help_panel=METHOD),
    out: Path = typer.Option(Path("heads"), help="Folder for the PNG and CSV.",
                             rich_help_panel=OUTPUT),
    force: bool = typer.Option(False, help="Overwrite existing files in --out.",
                               rich_help_panel=OUTPUT),
    as_json: bool = typer.Option(False, "--json", help="JSON list of rows on stdout.",
                                 rich_help_panel=OUTPUT),
    old_key: Optional[int] = typer.Option(None, "--key", hidden=True, rich_help_panel=NETWORK),
    old_value: Optional[int] = typer.Option(None, "--value", hidden=True, rich_help_panel=NETWORK),
) -> None:
    """Dimension vs heads: lightning (exact/certified) and softmax (numerical) side by side."""
    from ..core.architecture import Architecture  # noqa: PLC0415

    check_seed(seed)
    key = _renamed("keys", keys, "key", old_key, 3)
    value = _renamed("values", values, "value", old_value, 3)
    pair = parse_int_list("widths", widths, "3,3")
    if len(pair) != 2:
        raise bad_value("widths", "two widths d,d' (one layer)", widths, "Pass e.g. --widths 3,3.")
    from ..experiments.heads import check_max_heads  # noqa: PLC0415

    check_max_heads(max_heads)
    check_int("values", value, minimum=0, fix="Pass --values 3, or 0 for unfactored values.")
    v = None if value == 0 else value
    Architecture(pair, (key,), tokens, heads=(max_heads,), values=None if v is None else (v,))
    if out.exists() and not out.is_dir():
        raise bad_value("out", "a folder", str(out), "Pass a folder path to --out.")
    png, table = out / "heads.png", out / "heads.csv"
    check_output_files([png, table], force)
    from ..experiments.heads import check_heads_memory, heads_experiment  # noqa: PLC0415

    check_heads_memory(max_heads, pair, key, v, tokens)
    out.mkdir(parents=True, exist_ok=True)
    from ..experiments.plots import plot_heads  # noqa: PLC0415

    rows = heads_experiment(max_heads, widths=pair, key=key, value=v, tokens=tokens, seed=seed,
                            progress=lambda r: err.print(f"  H = {r['heads']}: lightning "
                                                         f"{r['lightning']} [{r['lightning_status']}], "
                                                         f"softmax {r['softmax']} [{r['softmax_status']}]"))
    title = (f"one layer d={pair[0]}, d'={pair[1]}, a={key}, "
             f"{'v=' + str(v) if v else 'unfactored V'}, t={tokens}")
    with staged_files([png, table]) as (png_tmp, table_tmp):
        plot_heads(rows, png_tmp, title)
        fields = list(rows[0])
        table_tmp.write_text(",".join(fields) + "\n" + "".join(
            ",".join("" if r[k] is None else str(r[k]) for k in fields) + "\n" for r in rows))
    if as_json:
        print_json(rows)
    else:
        print(f"Dimension vs heads, {title}; seed {seed}")
        print(f"{'H':>2} {'params':>6} {'lightning':>9} {'status':<12} {'ambient':>7} "
              f"{'softmax':>7} {'status':<10} formula")
        for r in rows:
            formula = "-" if r["formula"] is None else f"{r['formula']} ({r['formula_status']})"
            print(f"{r['heads']:>2} {r['n_params']:>6} {r['lightning']:>9} {r['lightning_status']:<12} "
                  f"{r['ambient'] if r['ambient'] is not None else '-':>7} {r['softmax']:>7} "
                  f"{r['softmax_status']:<10} {formula}")
        print(f"wrote {png} and {table}")
    if any(r["softmax_status"] != "settled" for r in rows):
        raise typer.Exit(EXIT_AMBIGUOUS)


def _renamed(name: str, value: int | None, old: str, old_value: int | None, default: int) -> int:
    """The value of --`name`, also accepted as its spelling before 0.2 (--`old`, hidden; to be
    removed in the next release), with a note on stderr; both at once is bad input."""
    if old_value is None:
        return default if value is None else value
    if value is not None:
        raise bad_value(old, f"left out when --{name} is given (it is the old spelling of --{name})",
                        old_value, f"Pass only --{name} {value}.")
    err.print(f"heads: --{old} is now spelled --{name} (as in `dim`); --{old} goes in the next "
              "release", style="dim")
    return old_value
