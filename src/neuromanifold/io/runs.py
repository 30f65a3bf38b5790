"""A training run's checkpoints, and the SQLite store of a trajectory over them.

The listing rule (`list_checkpoints`, docs/tracking.md), applied to the entries directly inside
RUN_DIR:
- entries whose name starts with "." (hidden files, the store itself) or "tmp-" (the staging
  folder `tmp-checkpoint-<step>` transformers' Trainer writes before renaming it) are ignored;
- a folder names a step when its whole name is an optional word prefix (letters, words joined by
  "-" or "_"), an optional "-" or "_", then the digits of the step: `checkpoint-500` (Trainer),
  `step-100`, `step_100`, `ckpt100`, `global_step100`, `000100`;
- a file names a step when its suffix is a weight file's (.safetensors, .bin, .pt, .pth) and its
  stem follows the same rule: `000100.safetensors`, `step_100.pt`;
- everything else (config.json, logs, `runs/`, `model-00001-of-00002.safetensors`) is not a step;
- the steps are the integers (`checkpoint-0100` is step 100), listed in increasing order; two
  entries naming the same step are refused.

The store is one SQLite file (WAL mode), like a sweep's (sweeps/store.py): the options the
trajectory was computed with (tokens, output, method, seed, inputs) in a table `options`, and
one row per step in `rows`, inserted in its own transaction as soon as that checkpoint's
analysis finishes, so an interrupted run loses no finished row and a rerun computes only the
rest. A store made with other options is refused (one line naming the option).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from pathlib import Path

from ..core.checks import bad_value
from ..core.limits import check_output_folder

STEP_NAME = re.compile(r"^(?:[A-Za-z]+(?:[-_][A-Za-z]+)*[-_]?)?([0-9]+)$")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
IGNORED_PREFIXES = (".", "tmp-")
# a folder "has weights" when it holds one of these (a save_pretrained folder, sharded or not)
INDEX_SUFFIXES = (".index.json",)

TRACK_STORE_ID = 0x4E4D5452  # "NMTR"
TRACK_STORE_VERSION = 1
DEFAULT_STORE_NAME = ".neuromanifold-track.sqlite"


# ---------------------------------------------------------------- the listing

def step_of(entry: Path) -> int | None:
    """The step an entry of a run folder names under the listing rule (module docstring), or
    None."""
    name = entry.name
    if name.startswith(IGNORED_PREFIXES):
        return None
    if entry.is_dir():
        stem = name
    elif entry.is_file() and name.endswith(WEIGHT_SUFFIXES):
        stem = name[: -len(next(s for s in WEIGHT_SUFFIXES if name.endswith(s)))]
    else:
        return None
    match = STEP_NAME.match(stem)
    return int(match[1]) if match else None


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """The (step, path) pairs of a training run's checkpoints, sorted by step.

    The rule is the module docstring's. Raises the template InputError (exit 2) for a path that
    is not a folder, a folder without any step-named entry, and two entries of the same step.
    """
    run = Path(run_dir)
    if not run.exists():
        raise bad_value("run_dir", "an existing folder of checkpoints", str(run),
                        "Pass the output_dir of the training run (its checkpoint-<step> folders).")
    if not run.is_dir():
        raise bad_value("run_dir", "a folder of checkpoints", f"{run} (a file)",
                        "Pass the folder that holds checkpoint-<step>/ folders; for one "
                        "checkpoint use `neuromanifold rank PATH`.")
    found: dict[int, Path] = {}
    for entry in sorted(run.iterdir()):
        step = step_of(entry)
        if step is None:
            continue
        if step in found:
            raise bad_value("run_dir", "one checkpoint per step", f"{found[step].name} and "
                            f"{entry.name} in {run} both name step {step}",
                            "Move one of them out of the folder.")
        found[step] = entry
    if not found:
        what = "an empty folder" if not any(run.iterdir()) else "no step-named entry"
        raise bad_value("run_dir", "a folder with checkpoint-<step>/ folders (or entries named "
                        "step-100, step_100, ckpt100, 000100.safetensors)", f"{run} ({what})",
                        "Pass the output_dir of a training run; for one checkpoint use "
                        "`neuromanifold rank PATH`.")
    return sorted(found.items())


def check_has_weights(step: int, path: Path) -> None:
    """Refuse (before any work) a checkpoint folder that holds no weight file at all."""
    if path.is_dir() and not any(
            p.is_file() and p.name.endswith(WEIGHT_SUFFIXES + INDEX_SUFFIXES)
            for p in path.iterdir()):
        raise bad_value("run_dir", "checkpoint folders with weights (model.safetensors, "
                        "pytorch_model.bin or a shard index)",
                        f"{path} (step {step}: no weight file)",
                        "Remove the folder, or finish writing the checkpoint first.")


# ---------------------------------------------------------------- the store

def default_store(run_dir: Path, out: Path | None) -> Path:
    """Where a trajectory is stored when --store is not given: beside --out (rows.csv ->
    rows.sqlite), else RUN_DIR/.neuromanifold-track.sqlite (hidden: not a step)."""
    if out is not None:
        return out.with_suffix(".sqlite")
    return Path(run_dir) / DEFAULT_STORE_NAME


def _refuse(path: Path, what: str) -> Exception:
    return bad_value("store", "a new path or a neuromanifold track store", f"{path} ({what})",
                     "Pass another --store file name such as track.sqlite.")


def check_track_store(path: str | os.PathLike) -> Path:
    """Validate `path` as a track store without changing it: new, empty, or one of ours."""
    path = Path(path)
    if path.is_dir():
        raise bad_value("store", "an SQLite file path", str(path),
                        "Pass a file name such as track.sqlite.")
    if not path.exists():
        if not path.parent.exists():
            raise bad_value("store", "a path in an existing folder", str(path),
                            f"Create the folder {path.parent} first.")
        check_output_folder("store", path.parent)
        return path
    if path.stat().st_size == 0:
        check_output_folder("store", path.parent)
        return path
    with path.open("rb") as fh:
        if fh.read(16) != b"SQLite format 3\x00":
            raise _refuse(path, "not an SQLite file")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise _refuse(path, f"SQLite cannot read it: {exc}") from None
    if app_id != TRACK_STORE_ID:
        raise _refuse(path, "an SQLite file of another application")
    if version != TRACK_STORE_VERSION:
        raise _refuse(path, f"track store version {version}, this is {TRACK_STORE_VERSION}")
    if not os.access(path, os.W_OK):
        raise bad_value("store", "a store this user can write", f"{path} (read-only file)",
                        "Make the file writable, or pass another --store.")
    check_output_folder("store", path.parent)
    return path


def stored_options(path: Path) -> dict | None:
    """The options a track store was made with (None for a new or empty file)."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM options")}
    except sqlite3.OperationalError:
        return None
    finally:
        conn.close()


def stored_entry_names(path: Path) -> dict[int, str]:
    """step -> the entry name its stored row came from (empty for a new store); read-only."""
    if not path.exists() or path.stat().st_size == 0:
        return {}
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return dict(conn.execute("SELECT step, checkpoint FROM rows"))
    except sqlite3.OperationalError:
        return {}
    finally:
        conn.close()


def check_same_run(path: Path, checkpoints: list[tuple[int, Path]]) -> None:
    """Refuse a store whose row of a step came from an entry of another name (another run)."""
    names = stored_entry_names(path)
    for step, entry in checkpoints:
        if step in names and names[step] != entry.name:
            raise bad_value("store", f"a store of this run (its step {step} is {names[step]})",
                            f"{path} with {entry.name} in {entry.parent}",
                            "Pass a new --store for this run.")


def check_same_options(path: Path, options: dict) -> None:
    """Refuse a store whose options differ from `options` (one line naming the first that does)."""
    stored = stored_options(path)
    if stored is None:
        return
    for key in sorted(set(stored) | set(options)):
        if stored.get(key) != options.get(key):
            raise bad_value("store", f"a store made with the same options ({key} "
                            f"{stored.get(key)!r} in {path})", f"{key} {options.get(key)!r}",
                            f"Pass the same options as that run, or a new --store for {key} "
                            f"{options.get(key)!r}.")


def open_track_store(path: str | os.PathLike, options: dict) -> sqlite3.Connection:
    """Open (creating if new) a track store made with `options`, after checking it."""
    path = check_track_store(path)
    check_same_options(path, options)
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS options (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("CREATE TABLE IF NOT EXISTS rows (step INTEGER PRIMARY KEY, "
                     "checkpoint TEXT, row_json TEXT, finished_at TEXT)")
        conn.executemany("INSERT OR IGNORE INTO options VALUES (?, ?)",
                         [(k, json.dumps(v)) for k, v in options.items()])
        conn.execute(f"PRAGMA application_id = {TRACK_STORE_ID}")
        conn.execute(f"PRAGMA user_version = {TRACK_STORE_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return conn


def stored_rows(conn: sqlite3.Connection) -> dict[int, tuple[str, dict]]:
    """step -> (checkpoint entry name, row) for every row in the store."""
    return {step: (name, json.loads(row)) for step, name, row in
            conn.execute("SELECT step, checkpoint, row_json FROM rows ORDER BY step")}


def insert_row(conn: sqlite3.Connection, step: int, checkpoint: str, row: dict) -> bool:
    """Insert one step's row in its own transaction unless present; True if it was inserted."""
    finished = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conn.execute("BEGIN IMMEDIATE")
    try:
        cur = conn.execute("INSERT OR IGNORE INTO rows VALUES (?, ?, ?, ?)",
                           (step, checkpoint, json.dumps(row), finished))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return cur.rowcount == 1
