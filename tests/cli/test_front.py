"""The front door of the API and CLI (issue 25): broadcasting, choices, spellings, reprs, tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import neuromanifold
from neuromanifold import Architecture, InputError
from neuromanifold.cli.app import main

ROOT = Path(__file__).resolve().parents[2]


def run(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ---------------------------------------------------------------- architectures: broadcasting

def test_scalar_keys_broadcast_over_layers():
    """keys=2 for a three-layer network is keys=(2, 2, 2); heads, values and mlp likewise."""
    arch = Architecture((5, 3, 3, 5), 2, 3)
    assert arch.keys == (2, 2, 2) and arch == Architecture((5, 3, 3, 5), (2, 2, 2), 3)
    block = Architecture((4, 4, 4), 3, 2, heads=2, values=3, mlp=5, residual=True)
    assert (block.heads, block.values, block.mlp) == ((2, 2), (3, 3), (5, 5))
    assert block.n_params == Architecture((4, 4, 4), (3, 3), 2, heads=(2, 2), values=(3, 3),
                                          mlp=(5, 5), residual=True).n_params


def test_missing_tokens_is_one_clear_line():
    """Architecture((3, 2, 3), (2, 2)) names the missing tokens and the fix (no bare TypeError)."""
    with pytest.raises(TypeError, match=r"^`tokens` must be given .*; got None\. Pass e\.g\. "
                       r"Architecture\(\(3, 2, 3\), keys=2, tokens=3\)\.$") as info:
        Architecture((3, 2, 3), (2, 2))
    assert isinstance(info.value, InputError)
    with pytest.raises(TypeError, match=r"^`keys` must be given"):
        Architecture((3, 2, 3))


def test_a_bool_is_not_a_scalar_key():
    """True is refused as keys, not broadcast as 1."""
    with pytest.raises(TypeError, match=r"`keys` must be a sequence of integers; got True"):
        Architecture((3, 3, 3), True, 3)


def test_wrong_length_still_refused_with_the_scalar_fix():
    """Three key widths for two layers: refused, and the fix mentions the one-width spelling."""
    with pytest.raises(ValueError, match=r"`keys` must be one key width per layer \(2 for widths "
                       r"\[3, 3, 3\]\); got \[2, 2, 2\]\. Pass 2 comma-separated key widths, e\.g\. "
                       r"2,2, or one width for every layer\."):
        Architecture((3, 3, 3), (2, 2, 2), 3)


# ---------------------------------------------------------------- choices ignore case

def test_choices_ignore_case_in_python():
    """attention='Softmax', activation='ReLU', norm='LayerNorm' are the lower-case choices."""
    arch = Architecture((3, 3), 2, 3, "Softmax", heads=2, mlp=2, activation="ReLU",
                        norm=" LayerNorm ")
    assert (arch.attention, arch.activation, arch.norm) == ("softmax", "relu", "layernorm")
    with pytest.raises(ValueError, match=r"`attention` must be one of 'lightning', 'softmax'; "
                       r"got 'Relu'\. Use for example 'lightning'\."):
        Architecture((3, 3), 2, 3, "Relu")


def test_method_and_device_ignore_case():
    """neuromanifold_dim(method='Certified', device='CPU') is the certified CPU computation."""
    from neuromanifold import neuromanifold_dim

    r = neuromanifold_dim(Architecture((3, 3, 3), 2, 3), method="Certified", device="CPU")
    assert (r.method, r.status, r.dimension) == ("certified", "certified", 23)


def test_grid_choices_ignore_case(tmp_path):
    """A grid file may write attention = ["Softmax"]: the item is the softmax one."""
    from neuromanifold.sweeps.grid import load_grid

    path = tmp_path / "g.toml"
    path.write_text('[[grid]]\nwidths = [[3, 3]]\nkeys = [[2]]\ntokens = [3]\n'
                    'attention = ["Softmax"]\nmethod = ["Numerical"]\n')
    (item,) = load_grid(str(path)).items
    assert (item["attention"], item["method"]) == ("softmax", "numerical")


# ---------------------------------------------------------------- CLI consistency

def test_cli_scalar_keys_and_case(capsys):
    """dim --keys 2 broadcasts over both layers and --attention Lightning is lightning: Eq. 14, 23."""
    code, out, _ = run(capsys, "dim", "--widths", "3,3,3", "--keys", "2", "--attention",
                       "Lightning", "--method", "Certified")
    assert code == 0
    assert "keys=2,2" in out and "attention=lightning" in out and "23  [certified" in out


def test_cli_space_separated_list_hint(capsys):
    """`dim --widths 3 2 3` says to write 3,2,3 (template line, exit 2, nothing on stdout)."""
    code, out, err = run(capsys, "dim", "--widths", "3", "2", "3", "--keys", "2,2")
    assert (code, out) == (2, "")
    assert err == ("neuromanifold: error: `widths` must be one comma-separated list; got '3 2 3'. "
                   "Pass --widths 3,2,3 (commas, no spaces).\n")


def test_cli_other_extra_arguments_keep_the_parser_message(capsys):
    """An extra word that is not a spaced list keeps the parser's own message."""
    code, _, err = run(capsys, "dim", "--widths", "3,3", "--keys", "2", "extra")
    assert code == 2 and "unexpected extra argument" in err and "comma-separated" not in err


def test_cli_version(capsys):
    """--version prints the package version and exits 0."""
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out == f"neuromanifold {neuromanifold.__version__}\n"


def test_cli_help_shows_debug_version_and_no_bool_metavar(capsys):
    """The root help lists --version and --debug; no help shows a `<bool>` metavar."""
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "--version" in out and "--debug" in out and "<bool>" not in out
    code, out, _ = run(capsys, "heads", "--help")
    assert code == 0 and "<bool>" not in out and "--force" in out


@pytest.mark.parametrize("command", ["dim", "figure3", "heads", "classify", "fiber", "figure1",
                                     "sweep", "report", "rank", "count"])
def test_every_command_help_has_an_example(capsys, command):
    """Each command's help ends with an example that calls that command."""
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    assert "Example: neuromanifold " + command in " ".join(out.replace("│", " ").split())


PANELS = ["Network", "Decoder options", "Method", "Resources", "Output"]


def _help_at(width: int, *args: str) -> str:
    """`neuromanifold ARGS --help` as a terminal of `width` columns shows it."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("TERMINAL_WIDTH", "FORCE_COLOR")}
    env.update(COLUMNS=str(width), PYTHONPATH=str(ROOT / "src"), NO_COLOR="1")
    proc = subprocess.run([sys.executable, "-m", "neuromanifold", *args, "--help"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_dim_help_groups_its_options_in_panels():
    """`dim --help` (issue 39 item 7): its options in panels, network first, then decoder
    options, method, resources and output; the default box keeps only --help; nothing is cut
    off at 80 columns (the --shrink example whole)."""
    out = _help_at(80, "dim")
    titles = [line.split("─ ", 1)[1].split(" ─", 1)[0] for line in out.splitlines()
              if line.startswith("╭─ ")]
    assert titles == ["Options"] + PANELS
    default_box = out.split("╭─ Options ", 1)[1].split("╰", 1)[0]
    assert [w for w in default_box.split() if w.startswith("--")] == ["--help"]
    assert "…" not in out
    assert "layers=2,heads=4,vocab=7" in out and "required unless --hf-config" in out


def _click_commands() -> dict:
    """The click command of every `neuromanifold` command, by name, in --help's order."""
    import typer.main

    from neuromanifold.cli.app import app

    return dict(typer.main.get_command(app).commands)


def _options(click_command) -> list:
    """A command's options, --help aside (hidden ones included: they too need a panel)."""
    return [p for p in click_command.params if p.param_type_name == "option" and p.name != "help"]


# More than 8 visible options: one box of them is hard to read, so each sits in a panel.
LONG_COMMANDS = [name for name, c in _click_commands().items()
                 if len([p for p in _options(c) if not p.hidden]) > 8]


def test_the_long_commands_are_those_of_issue_39():
    """dim, rank, fiber and the degree commands, and since issue 39 item 7 figure3, heads, sweep,
    count and track, have more than 8 options; the others (report's 8 and fewer) do not."""
    assert sorted(LONG_COMMANDS) == sorted(["dim", "figure3", "heads", "fiber", "sweep", "rank",
                                            "count", "degree", "equations", "ed-degree", "track"])


@pytest.mark.parametrize("command", LONG_COMMANDS)
def test_every_option_of_the_long_commands_has_a_panel(command):
    """Each option of the commands with many options sits in one of the five panels (a new option
    without one would land in a box of its own), the panels in the same order everywhere."""
    options = _options(_click_commands()[command])
    homeless = [p.opts[0] for p in options if getattr(p, "rich_help_panel", None) not in PANELS]
    assert not homeless, f"{command}: options without a panel: {homeless}"
    order = list(dict.fromkeys(p.rich_help_panel for p in options))
    assert order == [panel for panel in PANELS if panel in order]


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("command", [None, *_click_commands()])
def test_help_is_whole_at_80_and_120_columns(capsys, monkeypatch, command, width):
    """`neuromanifold [COMMAND] --help` in a terminal of 80 or 120 columns: no line wider, no
    ellipsis, and every visible option's and argument's help whole (the words in order, across
    the wrapped lines; a `[...]` that rich took for markup would be missing)."""
    import re

    for name in ("TERMINAL_WIDTH", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setenv("NO_COLOR", "1")
    code, out, _ = run(capsys, *([command] if command else []), "--help")
    assert code == 0
    assert [line for line in out.splitlines() if len(line) > width] == [] and "…" not in out
    flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", out).split())
    if command is None:
        import typer.main

        from neuromanifold.cli.app import app

        params = typer.main.get_command(app).params
    else:
        params = _click_commands()[command].params
    cut = [p.name for p in params if not getattr(p, "hidden", False) and getattr(p, "help", None)
           and " ".join(p.help.split()) not in flat]
    assert cut == []


def test_heads_takes_keys_and_values_like_dim(capsys, tmp_path):
    """heads --keys/--values (dim's spelling) and the hidden old --key/--value give the same rows."""
    new = run(capsys, "heads", "--widths", "2,2", "--keys", "1", "--values", "2", "--max-heads",
              "1", "--out", str(tmp_path / "a"), "--json")
    old = run(capsys, "heads", "--widths", "2,2", "--key", "1", "--value", "2", "--max-heads",
              "1", "--out", str(tmp_path / "b"), "--json")
    import json

    rows_new, rows_old = json.loads(new[1]), json.loads(old[1])
    for rows in (rows_new, rows_old):
        for row in rows:
            row.pop("seconds", None)
    assert new[0] == old[0] == 0 and rows_new == rows_old
    # one head, d = d' = 2, a = 1, v = 2: r (2 d - r) + v (d + d' - v) - 1 = 3 + 4 - 1 = 6
    assert (rows_new[0]["heads"], rows_new[0]["lightning"]) == (1, 6)
    assert "--key is now spelled --keys" in old[2] and "now spelled" not in new[2]
    code, out, _ = run(capsys, "heads", "--help")
    assert "--keys" in out and "--key " not in out and "--value " not in out


def test_heads_old_and_new_spelling_together_refused(capsys, tmp_path):
    """--key with --keys is bad input (exit 2, template line), nothing written."""
    code, out, err = run(capsys, "heads", "--keys", "2", "--key", "3", "--out", str(tmp_path / "h"))
    assert (code, out) == (2, "")
    assert err == ("neuromanifold: error: `key` must be left out when --keys is given (it is the old "
                   "spelling of --keys); got 3. Pass only --keys 2.\n")
    assert not (tmp_path / "h").exists()


def test_help_stays_light():
    """`neuromanifold --help` imports neither pandas, torch nor matplotlib."""
    code = ("import sys\nfrom neuromanifold.cli.app import main\ntry:\n    main(['--help'])\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in ('pandas', 'torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT / "src")}).stdout
    assert out.strip().splitlines()[-1] == "[]"


# ---------------------------------------------------------------- the top-level namespace

def test_dir_shows_only_public_names():
    """dir(neuromanifold) has no TYPE_CHECKING, annotations or import_module."""
    names = dir(neuromanifold)
    assert not {"TYPE_CHECKING", "annotations", "import_module"} & set(names)
    assert set(neuromanifold.__all__) <= set(names)


def test_names_the_docs_use_are_in_all():
    """Every name the docs import from neuromanifold, or document at the top level, is in __all__."""
    import re

    texts = [p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]]
    used = set()
    for text in texts:
        for group in re.findall(r"from neuromanifold import (\([\w\s,]+\)|[\w, ]+)", text):
            used |= {n.strip(" \n()") for n in group.split(",") if n.strip(" \n()")}
    assert {"random_fiber_point", "act_keys", "Architecture", "neuromanifold_dim"} <= (
        used | set(neuromanifold.__all__))
    assert used <= set(neuromanifold.__all__), used - set(neuromanifold.__all__)
    for name in ("random_fiber_point", "act_keys", "apply_witness", "canonical_form"):
        assert name in neuromanifold.__all__ and callable(getattr(neuromanifold, name))


# ---------------------------------------------------------------- notebook-friendly objects

@pytest.fixture(scope="module")
def certified_result():
    from neuromanifold import neuromanifold_dim

    return neuromanifold_dim(Architecture((3, 3, 3), 2, 3), method="certified")


def test_architecture_repr_is_short_and_evaluates_back():
    """repr(Architecture) names only non-default options and evaluates to an equal object."""
    arch = Architecture((4, 4), 2, 3, "softmax", heads=2, mlp=3, activation="relu")
    assert repr(Architecture((3, 3, 3), 2, 3)) == "Architecture(widths=(3, 3, 3), keys=(2, 2), tokens=3)"
    assert repr(arch) == ("Architecture(widths=(4, 4), keys=(2,), tokens=3, attention='softmax', "
                          "heads=(2,), mlp=(3,), activation='relu')")
    assert eval(repr(arch), {"Architecture": Architecture}) == arch  # noqa: S307
    html = Architecture((3, 3, 3), 2, 3)._repr_html_()
    assert "42 parameters" in html and "<table>" in html


def test_dimension_result_repr_str_and_html(certified_result):
    """repr is one short line with the value and its provenance; str is the wrapped table (no
    line over 100 columns, every summary value present); _repr_html_ a table of the same lines."""
    r = certified_result
    assert repr(r) == ("<DimensionResult 23 [certified] of 42 parameters: widths=3,3,3 keys=2,2 "
                       "tokens=3 attention=lightning>")
    text = str(r)
    assert max(len(line) for line in text.splitlines()) <= 100 < max(
        len(line) for line in r.summary().splitlines())
    assert " ".join(text.split()) == " ".join(r.summary().split())
    html = r._repr_html_()
    assert html.count("<tr>") == len(r.summary_lines()) and "23 &lt;= dim &lt;= 23" in html


def test_numerical_repr_carries_the_gap():
    """A numerical result's repr says numerical, its status and the gap in decades."""
    from neuromanifold import neuromanifold_dim

    r = neuromanifold_dim(Architecture((3, 3, 3), 2, 3, "softmax"), method="numerical")
    assert repr(r).startswith(f"<DimensionResult {r.dimension} [numerical, {r.status}, gap "
                              f"{r.gap:.1f} decades] of 42 parameters")


def test_fiber_witness_shown_to_six_digits_kept_in_full():
    """str(FiberResult) shows witness floats to 6 significant digits; to_dict keeps them all."""
    from neuromanifold import random_fiber_point, random_weights, same_function

    arch = Architecture((3, 3, 3), 2, 3)
    W = random_weights(arch, seed=1)
    result = same_function(arch, W, random_fiber_point(arch, W, seed=2))
    scale = result.witness[0]["scale"]
    assert result.witness[0]["move"] == "rescale" and len(repr(scale)) > 12
    assert f'"scale": {float(f"{scale:.6g}")}' in str(result) and repr(scale) not in str(result)
    assert result.to_dict()["witness"][0]["scale"] == scale
    assert repr(result) == "<FiberResult same function, generic fiber [numerical], 5 witness moves>"
    assert max(len(line) for line in str(result).splitlines()) <= 100


def test_label_table_wraps_under_the_value_column():
    """Long values continue on lines indented to the value column; short ones stay one line."""
    from neuromanifold.core.display import label_table

    text = label_table([("a", "x " * 60), ("bb", "short")], width=40)
    lines = text.splitlines()
    assert lines[0].startswith("a   x") and all(l.startswith("    x") for l in lines[1:-1])
    assert lines[-1] == "bb  short" and max(len(l) for l in lines) <= 40


# ---------------------------------------------------------------- tables and figures

def test_results_frame_of_results(certified_result):
    """results_frame of DimensionResults: one row each, dimension + fiber_dim == n_params."""
    from neuromanifold import neuromanifold_dim, results_frame

    other = neuromanifold_dim(Architecture((2, 2, 2), 2, 3), method="certified")
    frame = results_frame([certified_result, other])
    assert list(frame["widths"]) == ["3,3,3", "2,2,2"]
    assert list(frame["dimension"]) == [23, other.dimension]
    assert list(frame["dimension"] + frame["fiber_dim"]) == [42, other.n_params]
    assert list(frame["formula"]) == [23, other.formula.value]


def test_results_frame_refuses_a_dict():
    """A single dict is not a list of results: the template TypeError."""
    from neuromanifold import results_frame

    with pytest.raises(TypeError, match=r"^`results` must be a sweep store path, a list of row "
                       r"dicts or a list of results; got 'dict'\. Pass e\.g\."):
        results_frame({"dimension": 3})


def test_results_frame_without_pandas(monkeypatch):
    """Without pandas, one line saying to install it (no traceback from deep inside)."""
    from neuromanifold import results_frame

    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ModuleNotFoundError, match=r"^`results_frame` needs pandas, which is not "
                       r"installed.*pip install pandas"):
        results_frame([])


def test_plots_return_the_figure_and_write_only_when_asked(tmp_path):
    """plot_heads returns a matplotlib Figure; it writes a PNG only when given a path."""
    from matplotlib.figure import Figure

    from neuromanifold.experiments.plots import plot_heads

    rows = [{"heads": h, "n_params": 20 * h, "ambient": 54, "lightning": 17 * h, "softmax": 17 * h,
             "lightning_status": "certified", "softmax_status": "settled"} for h in (1, 2)]
    fig = plot_heads(rows, title="t")
    assert isinstance(fig, Figure) and list(tmp_path.iterdir()) == []
    line = fig.axes[0].lines[0]
    assert list(line.get_ydata()) == [20, 40]
    fig2 = plot_heads(rows, tmp_path / "h.png", "t")
    assert isinstance(fig2, Figure)
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- report of the blocks_map grid

@pytest.fixture(scope="module")
def blocks_store(tmp_path_factory):
    """A store with the shipped blocks_map grid's kinds of rows: one-layer heads with a closed form
    (proved H = 1, conjectured H > 1), one outside the formula's hypotheses (no closed form), and a
    two-layer residual block (no closed form)."""
    from neuromanifold.sweeps.engine import sweep

    path = tmp_path_factory.mktemp("blocks")
    grid = path / "g.toml"
    grid.write_text('[[grid]]\nwidths = [[3, 3]]\nkeys = [[1], [3]]\ntokens = [3]\n'
                    'heads = [[1], [2]]\nvalues = [[3]]\n\n'
                    '[[grid]]\nwidths = [[4, 4]]\nkeys = [[2]]\ntokens = [3]\nheads = [[2]]\n'
                    'values = [[3]]\n\n'
                    '[[grid]]\nwidths = [[3, 3, 3]]\nkeys = [[2, 2]]\ntokens = [3]\n'
                    'heads = [[2, 2]]\nvalues = [[3, 3]]\nresidual = [true]\n')
    sweep(grid, path / "b.sqlite", jobs=1, seed=0)
    return path / "b.sqlite"


def test_report_formula_column_empty_without_closed_form(blocks_store, tmp_path):
    """Rows without a closed form leave `formula` and `conjecture` empty (the store holds the
    parameter count there); rows with one keep its value."""
    import csv

    from neuromanifold.sweeps.report import write_report

    write_report(blocks_store, tmp_path / "rep")
    rows = list(csv.DictReader(open(tmp_path / "rep" / "results.csv")))
    none = [r for r in rows if r["formula_name"] == "no closed form for this block network"]
    assert len(none) == 2 and all(r["formula"] == r["conjecture"] == r["difference"] == ""
                                  for r in none)
    one_head = [r for r in rows if r["heads"] == "1" and r["keys"] == "3"]
    # one head, d = d' = v = 3, a = 3: r (2 d - r) + v (d + d' - v) - 1 = 9 + 9 - 1 = 17
    assert [(r["formula"], r["dimension"], r["status"]) for r in one_head] == [("17", "17", "certified")]


def test_report_chooses_heat_axes_that_exist(blocks_store, tmp_path):
    """No l = 2 row has a closed form: the heat map is of l = 1, heads against keys, not blank."""
    from neuromanifold.sweeps.report import write_report

    summary = write_report(blocks_store, tmp_path / "rep")
    assert (summary["heat_layers"], summary["heat_x"], summary["heat_y"]) == (1, "h1", "a1")
    assert summary["heatmap_rows"] == 4 and summary["heatmap_note"] is None


def test_report_says_why_a_chosen_heat_map_is_empty(blocks_store, tmp_path, capsys):
    """--heat-layers 2 on this store: the map is empty and the report says which l to pass."""
    code = main(["report", str(blocks_store), "--out", str(tmp_path / "rep"), "--heat-layers", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert ("heat map empty: no settled or certified result with a closed form has l = 2 and these "
            "axes; such results have l = 1 (pass --heat-layers 1)") in out


def test_report_counts_results_without_closed_form_apart(blocks_store):
    """The measured-vs-formula title counts certified rows without a closed form as such, not as
    'lower-bound, ambiguous, error or timeout'."""
    from neuromanifold.experiments.plots import plot_measured_vs_formula
    from neuromanifold.sweeps.report import report_rows
    from neuromanifold.sweeps.store import read_results

    rows = report_rows(read_results(blocks_store))
    statuses = sorted(r["status"] for r in rows if r["difference"] is None)
    title = plot_measured_vs_formula(rows).axes[0].get_title()
    assert statuses == ["certified", "certified"]
    assert title == ("Measured vs formula: 4 settled or certified results\n"
                     "(not shown: 2 certified without a closed form)")


def test_results_frame_of_a_sweep_store(blocks_store):
    """results_frame(store) has the report's columns; no closed form is <NA>, not n_params."""
    import pandas

    from neuromanifold import results_frame
    from neuromanifold.sweeps.report import CSV_COLUMNS

    frame = results_frame(blocks_store)
    assert list(frame.columns) == list(CSV_COLUMNS) and len(frame) == 6
    none = frame[frame["formula_name"] == "no closed form for this block network"]
    assert len(none) == 2 and none["formula"].isna().all() and none["dimension"].notna().all()
    assert str(frame["dimension"].dtype) == "Int64"
    assert (frame["dimension"] - frame["formula"]).dropna().tolist() == frame["difference"].dropna().tolist()
    assert isinstance(frame, pandas.DataFrame)


def test_dim_wraps_to_a_terminal_only(capsys, monkeypatch):
    """On a terminal of 80 columns `dim` wraps its long lines (same words); piped output keeps
    one line per value."""
    import os
    import shutil

    import neuromanifold.cli.common as common

    def words(text: str) -> str:  # everything but the timings
        return " ".join(text.split("\nseconds")[0].split())

    args = ("dim", "--widths", "3,3,3", "--keys", "2", "--method", "certified")
    code, piped, _ = run(capsys, *args)
    assert code == 0 and max(len(line) for line in piped.splitlines()) > 80
    monkeypatch.setattr(common.sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(shutil, "get_terminal_size", lambda *a: os.terminal_size((80, 24)))
    code, wrapped, _ = run(capsys, *args)
    assert code == 0 and max(len(line) for line in wrapped.splitlines()) <= 80
    assert words(wrapped) == words(piped)
