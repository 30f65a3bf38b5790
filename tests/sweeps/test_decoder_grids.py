"""Sweeps of decoder networks (issue 21): grid options, the schema-3 store's decoder columns and
the migration of schema-2 stores, the shipped features grid and its report figure."""

from __future__ import annotations

import csv
import sqlite3

import pytest

from neuromanifold.errors import InputError
from neuromanifold.sweeps.engine import sweep
from neuromanifold.sweeps.grid import item_architecture, item_key, load_grid
from neuromanifold.sweeps.report import FEATURE_FILE, feature_deficits, feature_of, write_report
from neuromanifold.sweeps.store import (DECODER_COLUMNS, RESULT_COLUMNS, STORE_APPLICATION_ID,
                                        check_store, open_store, read_results)

DECODER_GRID = """
widths = [[3, 3]]
keys = [[2]]
tokens = [2]
heads = [[2]]
residual = [true]
mlp = [[2]]
causal = [false, true]
kv_heads = [[1]]
bias = [true]
mlp_bias = [true]
mlp_kind = ["gated"]
"""


def _grid(tmp_path, text, name="grid.toml"):
    (tmp_path / name).write_text(text)
    return tmp_path / name


def test_decoder_options_in_grids(tmp_path):
    grid = load_grid(_grid(tmp_path, DECODER_GRID))
    assert len(grid) == 2 and grid.n_skipped == 0
    archs = [item_architecture(i) for i in grid.items]
    assert {a.causal for a in archs} == {False, True}
    assert all(a.kv_heads == (1,) and a.bias and a.mlp_bias and a.mlp_kind == "gated" for a in archs)
    assert ("lightning;widths=3,3;keys=2;tokens=2;method=auto;heads=2;residual=true;mlp=2;"
            "causal=true;kv_heads=1;bias=true;mlp_bias=true;mlp_kind=gated;seed=0;v=2"
            in {item_key(i, 0) for i in grid.items})
    # a gate without an MLP is no architecture: skipped and counted, as other such combinations
    grid = load_grid(_grid(tmp_path, 'widths = [[3, 3]]\nkeys = [[2]]\ntokens = [2]\n'
                           'mlp = [[0], [2]]\nmlp_kind = ["gated"]\n', "gate.toml"))
    assert len(grid) == 1 and grid.n_skipped == 1


@pytest.mark.parametrize("line, name", [('mlp_kind = ["swiglu"]', "mlp_kind"),
                                        ('causal = ["yes"]', "causal"),
                                        ("kv_heads = [2]", "kv_heads"),
                                        ('bias = "true"', "bias")])
def test_bad_decoder_options_in_a_grid(tmp_path, line, name):
    with pytest.raises(InputError, match=f"`{name}` in grid"):
        load_grid(_grid(tmp_path, f"widths = [[3, 3]]\nkeys = [[2]]\ntokens = [3]\n{line}\n"))


def test_decoder_rows_fill_the_decoder_columns(tmp_path):
    db = tmp_path / "s.sqlite"
    sweep(_grid(tmp_path, DECODER_GRID.replace("causal = [false, true]", "causal = [true]")), db)
    (row,) = read_results(db)
    assert {c: row[c] for c in DECODER_COLUMNS} == {
        "causal": 1, "positions": "none", "rope_pairs": None, "kv_heads": "1", "bias": 1,
        "mlp_bias": 1, "mlp_kind": "gated", "vocab": None, "tied": 0, "qk_norm": 0,
        "final_norm": 0, "parallel": 0}
    assert feature_of(row) == "causal + kv_heads 1 + bias + mlp bias + gated mlp"


def _v2_store(path, rows):
    """A store as the schema-2 code wrote it: no decoder columns, user_version 2."""
    columns = [c for c in RESULT_COLUMNS if c not in DECODER_COLUMNS]
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE results (" + ", ".join(
        f"{c} TEXT PRIMARY KEY" if c == "item_key" else c for c in columns) + ")")
    for row in rows:
        conn.execute(f"INSERT INTO results ({', '.join(row)}) VALUES "
                     f"({', '.join('?' for _ in row)})", list(row.values()))
    conn.execute(f"PRAGMA application_id = {STORE_APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()


def test_v2_store_is_read_and_migrated(tmp_path):
    """Rows of a schema-2 store get their decoder columns from their item keys, read as they are
    and written by the migration alike; a sweep into it adds rows beside them."""
    db = tmp_path / "v2.sqlite"
    base = {"widths": "4,4", "keys": "4", "tokens": 2, "attention": "lightning", "method": "auto",
            "seed": 0, "status": "certified", "heads": "1", "residual": 0, "mlp": "0",
            "activation": "square", "norm": "none"}
    _v2_store(db, [
        dict(base, item_key="lightning;widths=4,4;keys=4;tokens=2;method=auto;seed=0;v=2",
             dimension=30, n_params=48),
        dict(base, item_key="lightning;widths=4,4;keys=4;tokens=2;method=auto;positions=rope;"
                            "rope_pairs=1;vocab=5;tied=true;seed=0;v=2", dimension=41, n_params=48)])
    check_store(db)
    read = read_results(db)
    assert [feature_of(r) for r in read] == ["none", "rope pairs 1 + vocab 5 tied"]
    assert read[1]["rope_pairs"] == "1" and read[1]["kv_heads"] == "1" and read[0]["causal"] == 0
    open_store(db).close()
    migrated = read_results(db)
    assert [{c: r[c] for c in DECODER_COLUMNS} for r in migrated] == [
        {c: r[c] for c in DECODER_COLUMNS} for r in read]
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == 3


def test_shipped_features_grid_and_its_figure(tmp_path):
    grid = load_grid("features_map")
    assert len(grid) == 64 and grid.n_skipped == 0
    archs = [item_architecture(i) for i in grid.items]
    for on in (lambda a: a.causal, lambda a: a.positions == "rope", lambda a: a.kv_heads,
               lambda a: a.bias, lambda a: a.mlp_bias, lambda a: a.mlp_kind == "gated",
               lambda a: a.vocab and a.tied, lambda a: a.qk_norm, lambda a: a.final_norm,
               lambda a: a.parallel, lambda a: a.positions == "learned"):
        assert sum(bool(on(a)) for a in archs) >= 4
    # a slice of it, swept and reported: the figure is written beside the others
    db = tmp_path / "f.sqlite"
    sweep(_grid(tmp_path, 'widths = [[3, 3]]\nkeys = [[2]]\ntokens = [3]\nheads = [[2]]\n'
                'residual = [true]\nmlp = [[2]]\ncausal = [false, true]\n'), db)
    out = write_report(db, tmp_path / "report")
    assert out["files"][-1].endswith(FEATURE_FILE) and (tmp_path / "report" / FEATURE_FILE).exists()
    rows = list(csv.DictReader(open(out["files"][0])))
    assert sorted(r["feature"] for r in rows) == ["causal", "none"]
    deficits = feature_deficits(read_results(db))
    (by,) = deficits.values()
    assert set(by) == {"none", "causal"}
    assert all(d >= 0 for d, _ in by.values())
