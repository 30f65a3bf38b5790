"""Sweeps over architectures: grid files, the SQLite store, kill-and-resume, backends, reports."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neuromanifold.cli import main
from neuromanifold.sweeps.report import CSV_COLUMNS, write_report
from neuromanifold.sweeps.engine import sweep
from neuromanifold.sweeps.grid import item_key, load_grid
from neuromanifold.sweeps.items import compute_item
from neuromanifold.sweeps.store import check_store, read_results

SRC = str(Path(__file__).resolve().parents[2] / "src")

SMALL_GRID = """
widths = [[3, 3, 3], [3, 5, 3], [5, 3, 5], [3, 3]]
keys = [[2, 2], [2]]
tokens = [3]
attention = ["lightning", "softmax"]
method = ["numerical"]
"""

# One quick item (under a second) and one that takes minutes (6720 parameters), so that the
# timeout below separates them by a wide margin even on a loaded machine.
TIMEOUT_GRID = """
widths = [[3, 3, 3], [40, 40, 40, 40]]
keys = [[2, 2], [8, 8, 8]]
tokens = [3]
method = ["numerical"]
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _fingerprint(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def _rows(db: Path) -> list[dict]:
    return read_results(db)


# ---------------------------------------------------------------- grids

def test_grid_is_the_product_with_mismatched_keys_skipped_and_counted(tmp_path):
    """4 widths x 2 keys x 2 attentions: 8 items match their layer count, 8 are skipped."""
    grid = load_grid(_write(tmp_path / "g.toml", SMALL_GRID))
    assert len(grid) == 8
    assert grid.n_skipped == 8
    assert {i["widths"] for i in grid.items} == {(3, 3, 3), (3, 5, 3), (5, 3, 5), (3, 3)}


def test_range_form_expands_to_every_tuple_of_each_layer_count(tmp_path):
    """widths {layers=[1,2], range=[2,3]} gives 2^2 + 2^3 tuples; keys values give 1^1 + 1^2."""
    grid = load_grid(_write(tmp_path / "g.toml", """
widths = {layers = [1, 2], range = [2, 3]}
keys = {layers = [1, 2], values = [2]}
tokens = [2]
"""))
    assert len(grid) == 4 + 8
    assert grid.n_skipped == 4 + 8
    assert all(len(i["keys"]) == len(i["widths"]) - 1 for i in grid.items)


def test_grid_tables_are_a_union_without_duplicates(tmp_path):
    """Two [[grid]] tables that share an item give the union, each item once."""
    grid = load_grid(_write(tmp_path / "g.toml", """
[[grid]]
widths = [[3, 3, 3], [4, 4, 4]]
keys = [[2, 2]]
tokens = [3]
[[grid]]
widths = [[4, 4, 4], [5, 5, 5]]
keys = [[2, 2]]
tokens = [3]
"""))
    assert sorted(i["widths"] for i in grid.items) == [(3, 3, 3), (4, 4, 4), (5, 5, 5)]


def test_item_key_is_canonical_and_includes_the_seed():
    """The key names every axis and the seed; softmax keys carry the temperature."""
    item = {"widths": (5, 3, 5), "keys": (2, 2), "tokens": 3, "attention": "softmax",
            "method": "auto", "temperature": 1.0}
    assert item_key(item, 7) == "softmax;widths=5,3,5;keys=2,2;tokens=3;method=auto;temperature=1.0;seed=7;v=2"
    assert item_key(item, 7) != item_key(item, 8)
    close = dict(item, temperature=1.0000001)
    assert item_key(close, 7) != item_key(item, 7)  # distinct temperatures never collide


def test_shipped_grid_resolves_by_name():
    """`eq14_map` is package data: l = 2 (widths 2..6) and l = 3 (widths 2,4,6), keys 1..4, t = 3."""
    grid = load_grid("eq14_map")
    assert len(grid) == 2 * (5 ** 3 * 4 ** 2 + 3 ** 4 * 4 ** 3)
    assert {i["tokens"] for i in grid.items} == {3}


@pytest.mark.parametrize("text, match", [
    ("widths = [[3, 3, 3]\n", "`grid` must be a valid TOML file"),
    ("widths = 3\nkeys = [[2, 2]]\ntokens = [3]\n", "`widths` in grid .* must be a non-empty list"),
    ("widths = [[3, 3, 3]]\nkeys = [[2, 2]]\ntokens = [3]\ncolour = [1]\n",
     "`colour` in grid .* must be absent \\(unknown key\\)"),
    ("widths = [[3, 0, 3]]\nkeys = [[2, 2]]\ntokens = [3]\n", "`widths` in grid .* positive integers"),
    ("widths = [[3, 3, 3]]\nkeys = [[2, 2]]\ntokens = 3\n", "`tokens` in grid .* must be a non-empty list"),
    ("widths = [[3, 3, 3]]\nkeys = [[2, 2]]\n", "`tokens` in grid .* must be present"),
    ("widths = [[3, 3, 3]]\nkeys = [[2, 2]]\ntokens = [3]\nattention = [\"relu\"]\n",
     "`attention` in grid"),
    ("widths = {layers = [2], range = [4, 2]}\nkeys = [[2, 2]]\ntokens = [3]\n",
     "`widths.range` in grid .* 1 <= low <= high"),
    ("widths = [[3, 3, 3]]\nkeys = [[2]]\ntokens = [3]\n", "at least one item whose keys match"),
])
def test_malformed_grid_is_one_template_error(tmp_path, text, match):
    """Bad TOML, non-list values, unknown keys, bad widths: ValueError/TypeError with the template."""
    with pytest.raises((ValueError, TypeError), match=match):
        load_grid(_write(tmp_path / "g.toml", text))


def test_cli_malformed_grid_exits_2_with_one_line_and_leaves_files(tmp_path, capsys):
    """A malformed grid: exit 2, one stderr line, grid untouched, no store created."""
    grid = _write(tmp_path / "g.toml", "widths = [[3, 3, 3]]\nkeys = [[2, 2]]\ntokens = [3]\nfoo = 1\n")
    before = _fingerprint(grid)
    code = main(["sweep", str(grid), "--db", str(tmp_path / "r.sqlite")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "`foo` in grid" in err
    assert _fingerprint(grid) == before
    assert not (tmp_path / "r.sqlite").exists()


# ---------------------------------------------------------------- store

def test_foreign_files_as_db_exit_2_and_stay_untouched(tmp_path, capsys):
    """A text file or another application's SQLite file as --db: exit 2, one line, same bytes/mtime."""
    grid = _write(tmp_path / "g.toml", SMALL_GRID)
    text = _write(tmp_path / "notes.sqlite", "not a database\n")
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE people (name TEXT)")
    conn.commit()
    conn.close()
    for path, match in ((text, "not an SQLite file"), (other, "another application: tables people")):
        before = _fingerprint(path)
        code = main(["sweep", str(grid), "--db", str(path)])
        err = capsys.readouterr().err
        assert code == 2
        assert err.count("\n") == 1 and match in err and err.startswith("neuromanifold: error: `db` must be")
        assert _fingerprint(path) == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["g.toml", "notes.sqlite", "other.sqlite"]


def test_missing_grid_names_the_shipped_grids(tmp_path):
    """A grid that is neither a file nor a shipped name is a template error listing the names."""
    with pytest.raises(ValueError, match="`grid` must be a TOML grid file or a shipped grid name; "
                       "got .*nope.toml.* one of: .*eq14_map"):
        load_grid(tmp_path / "nope.toml")


def test_check_store_refuses_a_folder(tmp_path):
    """A folder passed as the store is a template ValueError."""
    with pytest.raises(ValueError, match="`db` must be an SQLite file path"):
        check_store(tmp_path)


def test_sweep_writes_one_row_per_item_and_a_rerun_writes_none(tmp_path):
    """Every item once; formula values agree where hypotheses hold; re-running skips all (seeded)."""
    grid = _write(tmp_path / "g.toml", SMALL_GRID)
    db = tmp_path / "r.sqlite"
    first = sweep(grid, db, jobs=2, seed=3)
    assert (first.n_items, first.n_written, first.n_already_done) == (8, 8, 0)
    rows = _rows(db)
    assert len(rows) == 8 and {r["seed"] for r in rows} == {3}
    for r in rows:
        assert r["status"] == "settled"
        if r["hypotheses_hold"]:
            assert r["dimension"] == r["formula"]
    bad = [r for r in rows if r["widths"] == "3,5,3" and r["attention"] == "lightning"][0]
    assert (bad["dimension"], bad["formula"]) == (23, 27)  # docs/math/deep.md: Eq. 14 fails
    again = sweep(grid, db, jobs=2, seed=3)
    assert (again.n_written, again.n_already_done) == (0, 8)
    assert len(_rows(db)) == 8
    other_seed = sweep(grid, db, jobs=1, seed=4, methods=["numerical"])
    assert other_seed.n_written == 8 and len(_rows(db)) == 16


def test_item_past_timeout_is_recorded_and_the_sweep_goes_on(tmp_path, capsys):
    """A slow item becomes status 'timeout' (worker killed), the quick one finishes; exit code 1."""
    grid = _write(tmp_path / "g.toml", TIMEOUT_GRID)
    db = tmp_path / "r.sqlite"
    code = main(["sweep", str(grid), "--db", str(db), "--jobs", "2", "--timeout", "15", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 1  # an item of this run timed out
    by_widths = {r["widths"]: r for r in _rows(db)}
    assert summary["counts"] == {"settled": 1, "timeout": 1}
    assert by_widths["40,40,40,40"]["status"] == "timeout"
    assert by_widths["40,40,40,40"]["dimension"] is None
    assert "process computing it was killed" in by_widths["40,40,40,40"]["message"]
    assert by_widths["3,3,3"]["dimension"] == 23


def test_failing_item_is_a_row_with_status_error(monkeypatch):
    """An exception inside the computation becomes status 'error' with its message, not a crash."""
    import neuromanifold.dimension.api as dimension

    def boom(*_args, **_kwargs):
        raise RuntimeError("solver exploded")

    monkeypatch.setattr(dimension, "neuromanifold_dim", boom)
    item = {"widths": (3, 3, 3), "keys": (2, 2), "tokens": 3, "attention": "lightning",
            "method": "certified", "temperature": 1.0, "seed": 0, "key": "k"}
    row = compute_item(item)
    assert row["status"] == "error" and row["dimension"] is None
    assert row["message"] == "RuntimeError: solver exploded"
    assert row["formula"] == 23 and row["n_params"] == 42


def test_kill_and_resume_loses_nothing_and_writes_nothing_twice(tmp_path):
    """SIGKILL a sweep mid-run, re-run it: exactly one row per grid item, all settled."""
    grid = _write(tmp_path / "g.toml", """
widths = {layers = [3], values = [3, 4, 5]}
keys = [[2, 2, 2]]
tokens = [3]
method = ["numerical"]
""")
    db = tmp_path / "r.sqlite"
    cmd = [sys.executable, "-m", "neuromanifold.cli", "sweep", str(grid), "--db", str(db), "--jobs", "2"]
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    n_at_kill = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists():
            try:
                conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
                n_at_kill = conn.execute("SELECT count(*) FROM results").fetchone()[0]
                conn.close()
            except sqlite3.OperationalError:
                n_at_kill = 0
            if n_at_kill >= 10:
                break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n_items = 3 ** 4
    assert 10 <= len(_rows(db)) < n_items, "the kill must land mid-run"
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = _rows(db)
    keys = [r["item_key"] for r in rows]
    assert len(rows) == n_items and len(set(keys)) == n_items
    assert set(keys) == {item_key(i, 0) for i in load_grid(grid).items}
    assert {r["status"] for r in rows} == {"settled"}


# ---------------------------------------------------------------- dask

def test_dask_local_cluster_streams_rows_to_the_single_writer(tmp_path):
    """A real LocalCluster (2 workers) gives the same dimensions as the local backend (seeded)."""
    grid = _write(tmp_path / "g.toml", """
widths = [[3, 3, 3], [3, 5, 3], [3, 3]]
keys = [[2, 2], [2]]
tokens = [3]
method = ["numerical"]
""")
    summary = sweep(grid, tmp_path / "dask.sqlite", jobs=2, backend="dask", seed=1)
    assert summary.n_written == 3
    sweep(grid, tmp_path / "local.sqlite", jobs=1, seed=1)
    dask_rows = {r["item_key"]: r["dimension"] for r in _rows(tmp_path / "dask.sqlite")}
    local_rows = {r["item_key"]: r["dimension"] for r in _rows(tmp_path / "local.sqlite")}
    assert dask_rows == local_rows == {k: v for k, v in local_rows.items()}
    assert sorted(dask_rows.values()) == [16, 23, 23]


def test_scheduler_without_dask_backend_is_refused(tmp_path):
    """--scheduler only makes sense with --backend dask."""
    with pytest.raises(ValueError, match="`scheduler` must be given only with --backend dask"):
        sweep(_write(tmp_path / "g.toml", SMALL_GRID), tmp_path / "r.sqlite",
              scheduler="tcp://127.0.0.1:8786")


@pytest.mark.slow
def test_dask_timeout_records_timeout(tmp_path):
    """On dask, an item past the timeout runs in a killed child process and is recorded 'timeout'."""
    grid = _write(tmp_path / "g.toml", TIMEOUT_GRID)
    summary = sweep(grid, tmp_path / "r.sqlite", jobs=2, backend="dask", timeout=8, seed=0)
    assert summary.counts == {"settled": 1, "timeout": 1}


# ---------------------------------------------------------------- reports

@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("store")
    grid = _write(path / "g.toml", SMALL_GRID)
    sweep(grid, path / "r.sqlite", jobs=2, seed=0)
    return path / "r.sqlite"


def test_report_writes_csv_with_the_pinned_columns_and_figures(small_store, tmp_path):
    """CSV starts with the pinned columns, one row per result; both PNGs are written."""
    before = _fingerprint(small_store)
    summary = write_report(small_store, tmp_path / "rep")
    with open(tmp_path / "rep" / "results.csv") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    assert reader.fieldnames[:11] == ["widths", "keys", "tokens", "attention", "method", "n_params",
                                      "dimension", "formula", "hypotheses_hold", "status", "seconds"]
    assert list(CSV_COLUMNS) == reader.fieldnames
    assert len(rows) == summary["rows"] == 8
    row = [r for r in rows if r["widths"] == "3,5,3" and r["attention"] == "lightning"][0]
    assert (row["difference"], row["hypotheses_hold"], row["conjecture_difference"]) == ("-4", "False", "0")
    for name in ("measured_vs_formula.png", "difference_heatmap.png"):
        assert (tmp_path / "rep" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _fingerprint(small_store) == before


def test_report_never_overwrites_without_force(small_store, tmp_path, capsys):
    """A second report into the same folder: exit 2, files untouched; --force rewrites them."""
    out = tmp_path / "rep"
    assert main(["report", str(small_store), "--out", str(out)]) == 0
    capsys.readouterr()
    before = _fingerprint(out / "results.csv")
    assert main(["report", str(small_store), "--out", str(out)]) == 2
    assert "`out` must be a folder without earlier report files" in capsys.readouterr().err
    assert _fingerprint(out / "results.csv") == before
    assert main(["report", str(small_store), "--out", str(out), "--force"]) == 0


def test_report_heat_axes_are_validated(small_store, tmp_path):
    """An axis the networks do not have is a template error naming the valid axes."""
    with pytest.raises(ValueError, match=r"`heat-x` must be a grid axis of an l = 2 network \(d0, d1"):
        write_report(small_store, tmp_path / "rep", heat_x="d5")


def test_report_of_a_foreign_file_exits_2(tmp_path, capsys):
    """`report` on a text file: exit 2 and one line."""
    path = _write(tmp_path / "x.sqlite", "hello\n")
    assert main(["report", str(path), "--out", str(tmp_path / "rep")]) == 2
    assert "not an SQLite file" in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()


def test_report_compares_with_the_general_closed_form(tmp_path):
    """The report carries the `general` closed form for the paper's lightning rows (none for
    softmax) and plots measured against it; on certified items it agrees (docs/lightning_dimension.md)."""
    import csv

    from neuromanifold.sweeps.report import write_report

    grid = tmp_path / "g.toml"
    grid.write_text('widths = [[5, 4, 2], [3, 6, 4]]\nkeys = [[1, 2], [2, 3]]\ntokens = [1, 3]\n'
                    'attention = ["lightning", "softmax"]\n')
    db = tmp_path / "g.sqlite"
    sweep(grid, db)
    out = write_report(db, tmp_path / "rep")
    assert any(f.endswith("measured_vs_general.png") for f in out["files"])
    rows = list(csv.DictReader(open(tmp_path / "rep" / "results.csv")))
    light = [r for r in rows if r["attention"] == "lightning" and r["status"] == "certified"]
    assert light and all(r["general"] != "" and int(r["general_difference"]) == 0 for r in light)
    assert all(r["general"] == "" for r in rows if r["attention"] == "softmax")
