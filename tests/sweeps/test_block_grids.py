"""Sweeps of block networks: grid options, item keys, the schema-2 store and its migration."""

from __future__ import annotations

import csv
import shutil
import sqlite3
from pathlib import Path

import pytest

from neuromanifold.errors import InputError
from neuromanifold.sweeps.engine import sweep
from neuromanifold.sweeps.grid import item_architecture, item_key, load_grid
from neuromanifold.sweeps.report import write_report
from neuromanifold.sweeps.store import STORE_SCHEMA_VERSION, check_store, read_results

V1_STORE = Path(__file__).parent / "data" / "store_v1.sqlite"
# The grid that wrote tests/sweeps/data/store_v1.sqlite (schema 1, before block options existed).
V1_GRID = """
widths = [[3, 3], [3, 2, 3]]
keys = [[2], [2, 2]]
tokens = [3]
attention = ["lightning", "softmax"]
"""
BLOCK_GRID = """
widths = [[3, 3]]
keys = [[3]]
tokens = [3]
heads = [[1], [2]]
values = [[3]]
residual = [false, true]
mlp = [[0], [2]]
"""


def _grid(tmp_path, text, name="grid.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_block_grid_items_and_keys(tmp_path):
    grid = load_grid(_grid(tmp_path, BLOCK_GRID))
    assert len(grid) == 8
    keys = {item_key(i, 0) for i in grid.items}
    assert "lightning;widths=3,3;keys=3;tokens=3;method=auto;heads=2;values=3;residual=true;mlp=2;seed=0;v=2" in keys
    assert all(item_architecture(i).values == (3,) for i in grid.items)


def _v1_copy(tmp_path) -> Path:
    """A copy of the schema-1 store (reading it in place would leave WAL files beside it)."""
    db = tmp_path / "store.sqlite"
    shutil.copy(V1_STORE, db)
    return db


def test_paper_items_keep_their_keys(tmp_path):
    """A grid without block options gives the keys it gave before they existed, but for the
    method version that ends every key now (`;v=2`: a rerun recomputes rows of the old method)."""
    keys = sorted(item_key(i, 0) for i in load_grid(_grid(tmp_path, V1_GRID)).items)
    assert keys == sorted(r["item_key"] + ";v=2" for r in read_results(_v1_copy(tmp_path)))


def test_grid_skips_what_is_not_an_architecture(tmp_path):
    grid = load_grid(_grid(tmp_path, """
widths = [[3, 3], [3, 2]]
keys = [[2]]
tokens = [3]
residual = [true]
mlp = [[2]]
activation = ["relu", "square"]
method = ["auto", "exact"]
"""))
    # widths 3,2 with a residual are skipped; exact of a relu MLP is skipped (the square one has it).
    assert sorted((i["widths"], i["method"], i.get("activation", "square")) for i in grid.items) == [
        ((3, 3), "auto", "relu"), ((3, 3), "auto", "square"), ((3, 3), "exact", "square")]
    assert grid.n_skipped == 5


def test_grid_asking_exact_of_no_polynomial_network_is_refused(tmp_path):
    """method = ["auto", "exact"] where no network of the table is polynomial: refused up front
    (issue 24: a softmax grid asking for exact started instead)."""
    for networks in ('mlp = [[2]]\nactivation = ["relu"]\n', 'attention = ["softmax"]\n'):
        with pytest.raises(InputError, match=r"`method` in grid .*\('exact' has none for softmax"):
            load_grid(_grid(tmp_path, 'widths = [[3, 3]]\nkeys = [[2]]\ntokens = [3]\n'
                            'method = ["auto", "exact"]\n' + networks))


def test_bad_block_options_in_a_grid(tmp_path):
    with pytest.raises(InputError, match="`residual` in grid"):
        load_grid(_grid(tmp_path, 'widths = [[3, 3]]\nkeys = [[2]]\ntokens = [3]\nresidual = ["yes"]\n'))
    with pytest.raises(InputError, match="`norm` in grid"):
        load_grid(_grid(tmp_path, 'widths = [[3, 3]]\nkeys = [[2]]\ntokens = [3]\nnorm = ["batch"]\n'))


def test_v1_store_is_read_and_migrated(tmp_path):
    """A store written by the schema-1 code: read as the paper's model, migrated on write, and a
    re-run of its grid adds rows of the current method version beside the old ones (never over
    them), and block items are added beside both."""
    db = _v1_copy(tmp_path)
    before = read_results(db)
    assert len(before) == 4 and {r["heads"] for r in before} == {"1", "1,1"}
    assert all(r["residual"] == 0 and r["norm"] == "none" for r in before)
    summary = sweep(_grid(tmp_path, V1_GRID), db)
    assert (summary.n_already_done, summary.n_written) == (0, 4)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == STORE_SCHEMA_VERSION == 3
    conn.close()
    check_store(db)
    sweep(_grid(tmp_path, BLOCK_GRID, "blocks.toml"), db)
    after = read_results(db)
    assert len(after) == 16
    assert [(r["item_key"], r["dimension"], r["status"]) for r in after[:4]] == [
        (r["item_key"], r["dimension"], r["status"]) for r in before]
    rerun = {r["item_key"][:-len(";v=2")]: (r["dimension"], r["status"]) for r in after[4:8]}
    assert rerun == {r["item_key"]: (r["dimension"], r["status"]) for r in before}
    mlp = [r for r in after if r["heads"] == "2" and r["mlp"] == "2"]
    assert sorted((r["residual"], r["dimension"], r["status"]) for r in mlp) == [
        (0, 30, "certified"), (1, 42, "certified")]
    out = write_report(db, tmp_path / "report")
    rows = list(csv.DictReader(open(out["files"][0])))
    assert {"heads", "value_widths", "residual", "mlp", "activation", "norm"} <= set(rows[0])
    assert len(rows) == 16


def test_shipped_blocks_map_grid():
    grid = load_grid("blocks_map")
    assert len(grid) == 140 and grid.n_skipped == 0
    assert any(item_architecture(i).residual and item_architecture(i).mlp for i in grid.items)


def test_method_override_skips_non_polynomial_blocks(tmp_path):
    """--method exact on a grid with a relu MLP runs only the polynomial items."""
    grid = _grid(tmp_path, 'widths = [[3, 3]]\nkeys = [[2]]\ntokens = [3]\nmlp = [[2]]\n'
                           'activation = ["square", "relu"]\n')
    summary = sweep(grid, tmp_path / "s.sqlite", methods=["exact"])
    rows = read_results(tmp_path / "s.sqlite")
    assert summary.n_written == 1 and rows[0]["activation"] == "square"
    assert rows[0]["status"] == "lower-bound"
