"""The SQLite result store of a sweep.

The store is one SQLite file (WAL mode) with one row per grid item, keyed by a canonical item key
that includes the seed. A row is inserted once, when its item finishes, inside a transaction, and
only if absent; so re-running a sweep skips what is done, and killing it at any moment loses no
finished result and writes none twice. Only the calling process writes; workers compute.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from ..core.checks import bad_value
from ..core.limits import check_output_folder
from ..errors import InputError
from ..dimension.result import STATUSES as RESULT_STATUSES

STORE_APPLICATION_ID = 0x4E4D5357  # "NMSW"
STORE_SCHEMA_VERSION = 3
# Version 2 added the transformer-block columns (docs/blocks.md); `value_widths` because
# `values` is an SQL keyword. Version 3 added the decoder-feature columns
# (docs/decoder_features.md). Older stores are migrated when opened for writing (their rows'
# decoder columns filled from their item keys, which name every non-default option) and read
# with the same values.
BLOCK_COLUMNS = ("heads", "value_widths", "residual", "mlp", "activation", "norm")
DECODER_COLUMNS = ("causal", "positions", "rope_pairs", "kv_heads", "bias", "mlp_bias",
                   "mlp_kind", "vocab", "tied", "qk_norm", "final_norm", "parallel")
RESULT_COLUMNS = (
    "item_key", "widths", "keys", "tokens", "attention", "method", "temperature", "seed",
    "n_params", "dimension", "formula_name", "formula", "hypotheses_hold", "conjecture",
    "conjecture_hypotheses_hold", "status", "method_used", "sv_gap", "n_samples", "seconds",
    "message", "result_json", "finished_at") + BLOCK_COLUMNS + DECODER_COLUMNS
MIGRATABLE_VERSIONS = (1, 2)
# Row statuses: those of DimensionResult, plus the sweep's own ('refused': over the memory budget).
STATUSES = RESULT_STATUSES + ("error", "timeout", "refused")



# ---------------------------------------------------------------- the store

def _is_sqlite_file(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(16) == b"SQLite format 3\x00"


def _read_only_uri(path: Path) -> str:
    """URI that opens `path` for reading without creating anything beside it.

    A store whose write-ahead log is absent holds all its rows in the main file (a sweep's last
    connection checkpoints and removes the log), and so does any store on storage this user
    cannot write: those are opened `immutable=1`, which creates no -wal or -shm file. A store
    with a log beside it (a sweep running, or one killed) is opened `mode=ro` through that log,
    whose files already exist.
    """
    wal = path.with_name(path.name + "-wal")
    writable = os.access(path.parent, os.W_OK) and os.access(path, os.W_OK)
    immutable = not wal.exists() or not writable
    return f"{path.resolve().as_uri()}?mode=ro" + ("&immutable=1" if immutable else "")


def _damaged(path: Path, detail: str) -> InputError:
    return bad_value("db", "an undamaged neuromanifold sweep store", f"{path} ({detail})",
                     "Restore the store from a copy, or pass a new file name such as results.sqlite.")


def check_store(path: str | os.PathLike, *, must_exist: bool = False,
                for_writing: bool = True) -> Path:
    """Validate `path` as a sweep store without changing it: new, empty, or one of ours, intact.

    Raises the template InputError for a folder, a non-SQLite file, an SQLite file that is not a
    neuromanifold sweep store (another application's tables), a store whose pages fail SQLite's
    `quick_check` or whose `results` table lacks a column, and (with `for_writing`) a store or
    folder this user cannot write, proved by creating and removing a probe file beside it.
    """
    path = Path(path)
    if path.is_dir():
        raise bad_value("db", "an SQLite file path", str(path), "Pass a file name such as results.sqlite.")
    if not path.exists():
        if must_exist:
            raise bad_value("db", "an existing sweep store", str(path),
                            "Pass the --db file a `neuromanifold sweep` wrote.")
        if not path.parent.exists():
            raise bad_value("db", "a path in an existing folder", str(path),
                            f"Create the folder {path.parent} first.")
        check_output_folder("db", path.parent)
        return path
    if path.stat().st_size == 0:
        if must_exist:
            raise bad_value("db", "a sweep store with results", f"{path} (empty file)",
                            "Pass the --db file a `neuromanifold sweep` wrote.")
        if for_writing:
            _check_writable(path)
        return path
    if not _is_sqlite_file(path):
        raise bad_value("db", "a neuromanifold sweep store (SQLite) or a new path",
                        f"{path} (not an SQLite file)", "Pass a new file name such as results.sqlite.")
    try:
        conn = sqlite3.connect(_read_only_uri(path), uri=True)
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = sorted(r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"))
            if app_id == STORE_APPLICATION_ID and "results" in tables:
                problems = [r[0] for r in conn.execute("PRAGMA quick_check")]
                columns = {r[1] for r in conn.execute("PRAGMA table_info(results)")}
            else:
                problems, columns = ["ok"], set()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise _damaged(path, f"SQLite cannot read it: {exc}") from None
    if app_id != STORE_APPLICATION_ID or "results" not in tables:
        what = f"tables {', '.join(tables)}" if tables else "no tables"
        raise bad_value("db", "a neuromanifold sweep store or a new path",
                        f"{path} (an SQLite file of another application: {what})",
                        "Pass a new file name such as results.sqlite.")
    if version != STORE_SCHEMA_VERSION and version not in MIGRATABLE_VERSIONS:
        raise bad_value("db", f"a sweep store of schema version {STORE_SCHEMA_VERSION}",
                        f"{path} (version {version})", "Pass a new file name such as results.sqlite.")
    if problems != ["ok"]:
        raise _damaged(path, f"SQLite's quick_check fails: {problems[0]}")
    # an older store, migrated on write: only the columns of its version
    added = {1: BLOCK_COLUMNS + DECODER_COLUMNS, 2: DECODER_COLUMNS}.get(version, ())
    expected = tuple(c for c in RESULT_COLUMNS if c not in added)
    missing = [c for c in expected if c not in columns]
    if missing:
        raise _damaged(path, f"the results table lacks column {missing[0]}")
    if for_writing:
        _check_writable(path)
    return path


def _check_writable(path: Path) -> None:
    """Refuse a store file, or its folder, that this user cannot write (SQLite needs both)."""
    if not os.access(path, os.W_OK):
        raise bad_value("db", "a store this user can write", f"{path} (read-only file)",
                        "Make the file writable, or pass a new file name in a folder you own.")
    check_output_folder("db", path.parent)


def open_store(path: str | os.PathLike) -> sqlite3.Connection:
    """Open (creating if new) a sweep store for writing, after `check_store`."""
    path = check_store(path)
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode = WAL")
    # NORMAL is durable across a killed process (SIGKILL) in WAL mode; FULL only adds power-loss safety.
    conn.execute("PRAGMA synchronous = NORMAL")
    columns = ", ".join(
        f"{c} TEXT PRIMARY KEY" if c == "item_key" else c for c in RESULT_COLUMNS)
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version in MIGRATABLE_VERSIONS:
            _migrate(conn, version)
        conn.execute(f"CREATE TABLE IF NOT EXISTS results ({columns})")
        conn.execute(f"PRAGMA application_id = {STORE_APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {STORE_SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return conn


def v1_defaults(row: dict) -> dict:
    """Block columns of a row written before version 2: the paper's model."""
    layers = len(str(row["keys"]).split(","))
    return {"heads": ",".join(["1"] * layers), "value_widths": None, "residual": 0,
            "mlp": ",".join(["0"] * layers), "activation": "square", "norm": "none"}


def v2_defaults(row: dict) -> dict:
    """Decoder columns of a row written before version 3, from its item key (which names every
    non-default option: positions, rope_pairs, vocab, tied, qk_norm, final_norm, parallel) and
    its keys and heads columns."""
    named = dict(part.split("=", 1) for part in str(row["item_key"]).split(";") if "=" in part)
    keys = [int(a) for a in str(row["keys"]).split(",")]
    positions = named.get("positions", "none")
    pairs = named.get("rope_pairs") or (",".join(str(a // 2) for a in keys)
                                        if positions == "rope" else None)
    heads = row.get("heads") or ",".join(["1"] * len(keys))
    return {"causal": 0, "positions": positions, "rope_pairs": pairs, "kv_heads": heads,
            "bias": 0, "mlp_bias": 0, "mlp_kind": "plain",
            "vocab": int(named["vocab"]) if "vocab" in named else None,
            **{flag: int(named.get(flag) == "true")
               for flag in ("tied", "qk_norm", "final_norm", "parallel")}}


def _migrate(conn: sqlite3.Connection, version: int) -> None:
    """Version 1 or 2 -> 3 inside the caller's transaction: add and fill the new columns."""
    present = {r[1] for r in conn.execute("PRAGMA table_info(results)")}
    added = (BLOCK_COLUMNS if version == 1 else ()) + DECODER_COLUMNS
    for column in added:
        if column not in present:
            conn.execute(f"ALTER TABLE results ADD COLUMN {column}")
    for key, keys in conn.execute("SELECT item_key, keys FROM results").fetchall():
        row = {"item_key": key, "keys": keys}
        if version == 1:
            row.update(v1_defaults(row))
        else:
            row["heads"] = conn.execute("SELECT heads FROM results WHERE item_key = ?",
                                        (key,)).fetchone()[0]
        values = {**row, **v2_defaults(row)}
        conn.execute("UPDATE results SET " + ", ".join(f"{c} = ?" for c in added)
                     + " WHERE item_key = ?", [values[c] for c in added] + [key])


def done_keys(conn: sqlite3.Connection) -> set[str]:
    """Item keys already in the store."""
    return {r[0] for r in conn.execute("SELECT item_key FROM results")}


def insert_result(conn: sqlite3.Connection, row: dict) -> bool:
    """Insert `row` in one transaction unless its item key is present; True if it was inserted."""
    row = dict(row, finished_at=row.get("finished_at") or time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                         time.gmtime()))
    placeholders = ", ".join("?" for _ in RESULT_COLUMNS)
    conn.execute("BEGIN IMMEDIATE")
    try:
        cur = conn.execute(f"INSERT OR IGNORE INTO results ({', '.join(RESULT_COLUMNS)}) "
                           f"VALUES ({placeholders})", [row.get(c) for c in RESULT_COLUMNS])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return cur.rowcount == 1


def read_results(path: str | os.PathLike) -> list[dict]:
    """Every row of a sweep store, in insertion order; opened read-only, nothing left beside it."""
    path = check_store(path, must_exist=True, for_writing=False)
    conn = sqlite3.connect(_read_only_uri(path), uri=True)
    try:
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute("SELECT * FROM results ORDER BY rowid")]
    finally:
        conn.close()
    # A version-1 store read without migrating: its rows are the paper's model; a version-2
    # store's decoder columns come from the item keys.
    rows = [row if "heads" in row else dict(row, **v1_defaults(row)) for row in rows]
    return [row if "causal" in row else dict(row, **v2_defaults(row)) for row in rows]
