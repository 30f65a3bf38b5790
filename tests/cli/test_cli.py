"""The `dim` and `figure3` commands through the CLI runner (issue 2)."""

import csv
import json
import os
import subprocess
import sys

import pytest

from neuromanifold.cli import main


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_dim_json_keys(capsys):
    """`dim --json` prints one JSON object with the documented keys."""
    code, out, _ = run(capsys, "dim", "--widths", "5,3,3,5", "--keys", "2,2,2", "--tokens", "3",
                       "--attention", "softmax", "--method", "numerical", "--seed", "3", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["n_params"] == 35 + 21 + 27
    assert d["dimension"] == 53 and d["method"] == "numerical" and d["seed"] == 3
    assert d["fiber_dim"] == d["n_params"] - d["dimension"]
    assert d["formula"] == {**d["formula"], "name": "Eq. 16", "value": 53, "hypotheses_hold": True}


def test_dim_text_says_formula_fails(capsys):
    """Where Eq. 14's hypotheses fail the text output says so instead of calling it the dimension."""
    code, out, _ = run(capsys, "dim", "--widths", "3,5,3", "--keys", "2,2", "--method", "numerical")
    assert code == 0
    assert "23  [numerical, settled" in out
    assert "Eq. 14 would give 27, but its hypotheses fail" in out and "not the dimension" in out


def test_dim_text_formula_agrees(capsys):
    """Where the hypotheses hold the text output shows the formula agreeing."""
    code, out, _ = run(capsys, "dim", "--widths", "4,3", "--keys", "6", "--method", "numerical")
    assert code == 0 and "Eq. 7 (proved) = 27 (hypotheses hold" in out and "agrees" in out


@pytest.mark.parametrize("args,match", [
    (["--widths", "3,0,3", "--keys", "2,2"], "`widths` must be a list of integers >= 1"),
    (["--widths", "3,-1,3", "--keys", "2,2"], "`widths` must be a list of integers >= 1"),
    (["--widths", "3,x,3", "--keys", "2,2"], "`widths` must be a comma-separated list"),
    (["--widths", "3,2.5,3", "--keys", "2,2"], "`widths` must be a comma-separated list"),
    (["--widths", "3,3,3", "--keys", "2,2,2"], "`keys` must be one key width per layer"),
    (["--widths", "3,3,3", "--keys", "2,2", "--tokens", "0"], "`tokens` must be an integer >= 1"),
    (["--widths", "3,3,3", "--keys", "2,2", "--attention", "relu"], "`attention` must be one of"),
    (["--widths", "3,3,3", "--keys", "2,2", "--samples", "2", "--method", "numerical"],
     "`samples` must be at least 5"),
    (["--widths", "3,3,3", "--keys", "2,2", "--tokens", "abc"], "Invalid value for '--tokens'"),
    (["--widths", "3,3,3"], "`widths` must be given with --keys"),
    (["--widths", "3,3", "--keys", "2", "--attention", "softmax", "--method", "exact"],
     "Softmax networks are not polynomial"),
])
def test_dim_bad_input_one_line_exit_2(capsys, args, match):
    """Bad input: exit code 2, one line on stderr naming the problem, nothing on stdout."""
    code, out, err = run(capsys, "dim", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and match in err


def test_figure3_writes_table_png_csv(capsys, tmp_path):
    """figure3: estimated == expected at each delta; writes PNG and CSV; --json rows."""
    code, out, _ = run(capsys, "figure3", "--attention", "lightning", "--deltas", "3,5", "--out",
                       str(tmp_path), "--json")
    assert code == 0
    rows = json.loads(out)
    assert [(r["delta"], r["estimated"], r["expected"]) for r in rows] == [(3, 23, 23), (5, 55, 55)]
    png, table = tmp_path / "figure3_lightning.png", tmp_path / "figure3_lightning.csv"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with table.open() as fh:
        assert [int(r["estimated"]) for r in csv.DictReader(fh)] == [23, 55]


def test_figure3_refuses_to_overwrite(capsys, tmp_path):
    """figure3 never overwrites silently: exit 2 and the old file is untouched."""
    (tmp_path / "figure3_softmax.csv").write_text("old")
    code, out, err = run(capsys, "figure3", "--deltas", "3", "--out", str(tmp_path))
    assert code == 2 and "Pass another --out folder, or --force" in err
    assert (tmp_path / "figure3_softmax.csv").read_text() == "old"


@pytest.mark.parametrize("deltas", ["10-3", "x", "3,,4"])
def test_figure3_bad_deltas(capsys, tmp_path, deltas):
    """Malformed --deltas: exit 2, one line, nothing written."""
    code, _, err = run(capsys, "figure3", "--deltas", deltas, "--out", str(tmp_path / "o"))
    assert code == 2 and "`deltas` must be" in err
    assert not (tmp_path / "o").exists()


def test_console_script_exit_code():
    """The installed entry point returns 2 on bad input without a traceback."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "neuromanifold.cli", "dim", "--widths", "3,0",
                           "--keys", "2"], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("neuromanifold: error: `widths` must be")


def test_failed_plot_leaves_no_files(capsys, tmp_path, monkeypatch):
    """A failure while writing outputs leaves neither the CSV nor temporaries behind."""
    import neuromanifold.experiments.plots as plots

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(plots, "plot_figure3", broken)
    code, _, err = run(capsys, "figure3", "--deltas", "3", "--out", str(tmp_path))
    assert code == 1 and "disk full" in err and "--debug" in err
    assert list(tmp_path.iterdir()) == []
