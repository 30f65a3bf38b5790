"""Sweeps over architectures: grid files, the SQLite result store, and the local worker pool.

A grid file is TOML. Its top-level lists are multiplied out (the grid is their product):

    widths    = [[3, 3, 3], [4, 4, 4], [5, 3, 5]]   # d = (d_0 .. d_l); required
    keys      = [[2, 2], [3, 3]]                    # a = (a_1 .. a_l); required
    tokens    = [2, 3]                              # t; required
    attention = ["lightning", "softmax"]            # default ["lightning"]
    method    = ["auto"]                            # default ["auto"]
    temperature = [1.0]                             # softmax only; default [1.0]
    description = "free text"                       # optional, ignored

Compact range form, for `widths` and `keys` (alone, or as entries of their lists):

    widths = {layers = [2, 3], range = [2, 6]}      # every (d_0..d_l), l in {2, 3}, 2 <= d_i <= 6
    keys   = {layers = [2], values = [1, 2, 4]}     # every (a_1, a_2) with a_i in {1, 2, 4}

`layers` counts attention layers l (a widths tuple has l + 1 entries, a keys tuple l). A file may
instead hold several `[[grid]]` tables, each of the form above; the grid is then their union.
Combinations whose keys do not have one entry per layer are skipped and counted.

The store is one SQLite file (WAL mode) with one row per grid item, keyed by a canonical item key
that includes the seed. A row is inserted once, when its item finishes, inside a transaction, and
only if absent; so re-running a sweep skips what is done, and killing it at any moment loses no
finished result and writes none twice. Only the calling process writes; workers compute.
"""

from __future__ import annotations

import itertools
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import sqlite3
import time
import tomllib
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import InputError
from ..core.architecture import Architecture
from ..dimension.result import STATUSES as RESULT_STATUSES
from ..core.checks import ATTENTION_KINDS, METHODS, bad_value, check_int, check_seed

GRID_KEYS = ("widths", "keys", "tokens", "attention", "method", "temperature", "description")
REQUIRED_GRID_KEYS = ("widths", "keys", "tokens")
# Range forms larger than this are refused (a typo such as range = [2, 60] would never finish).
MAX_GRID_ITEMS = 200_000
STORE_APPLICATION_ID = 0x4E4D5357  # "NMSW"
STORE_SCHEMA_VERSION = 1
RESULT_COLUMNS = (
    "item_key", "widths", "keys", "tokens", "attention", "method", "temperature", "seed",
    "n_params", "dimension", "formula_name", "formula", "hypotheses_hold", "conjecture",
    "conjecture_hypotheses_hold", "status", "method_used", "sv_gap", "n_samples", "seconds",
    "message", "result_json", "finished_at")
# Row statuses: those of DimensionResult, plus the sweep's own.
STATUSES = RESULT_STATUSES + ("error", "timeout")


# ---------------------------------------------------------------- grid files

@dataclass(frozen=True)
class Grid:
    """The items of a sweep: canonical item dicts (without seed) and how many were skipped.

    Invariant: every item builds a valid Architecture; `n_skipped` counts the combinations of the
    product whose keys did not have one entry per layer; items are distinct.
    """

    items: tuple[dict, ...]
    n_skipped: int
    source: str

    def __len__(self) -> int:
        return len(self.items)


def shipped_grids() -> list[str]:
    """Names of the grids shipped with the package (usable in place of a path)."""
    folder = resources.files("neuromanifold.sweeps") / "grids"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def resolve_grid_path(spec: str | os.PathLike) -> Path:
    """A path to an existing grid file, or the shipped grid of that name (e.g. `eq14_map`)."""
    path = Path(spec)
    if path.is_file():
        return path
    name = str(spec)
    if name in shipped_grids():
        return Path(str(resources.files("neuromanifold.sweeps") / "grids" / f"{name}.toml"))
    raise bad_value("grid", "a TOML grid file or a shipped grid name", str(spec),
                    f"Pass a path to an existing file, or one of: {', '.join(shipped_grids())}.")


def _grid_error(source: str, name: str, requirement: str, got: object, fix: str) -> InputError:
    return InputError(f"`{name}` in grid {source} must be {requirement}; got {got!r}. {fix}")


def _int_tuples(source: str, name: str, value: object, min_length: int, example: str) -> list[tuple]:
    """Expand the `widths` or `keys` entry of a grid (explicit lists and range forms)."""
    entries = [value] if isinstance(value, dict) else value
    if not isinstance(entries, list) or not entries:
        raise _grid_error(source, name, "a non-empty list of integer lists or a range table", value,
                          f"Write e.g. {name} = [{example}].")
    out = []
    for entry in entries:
        if isinstance(entry, dict):
            out.extend(_range_tuples(source, name, entry, min_length, example))
            continue
        if (not isinstance(entry, list) or len(entry) < min_length
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in entry)):
            raise _grid_error(source, name, f"a list of lists of at least {min_length} positive "
                              "integers", value, f"Write e.g. {name} = [{example}].")
        out.append(tuple(entry))
    return out


def _range_tuples(source: str, name: str, table: dict, min_length: int, example: str) -> list[tuple]:
    offset = 1 if name == "widths" else 0
    unknown = sorted(set(table) - {"layers", "range", "values"})
    fix = f"Write e.g. {name} = {{layers = [2, 3], range = [2, 6]}}."
    if unknown or "layers" not in table or ("range" in table) == ("values" in table):
        raise _grid_error(source, name, "a table with `layers` and exactly one of `range`, `values`",
                          table, fix)
    layers = table["layers"]
    if (not isinstance(layers, list) or not layers
            or not all(isinstance(v, int) and not isinstance(v, bool) and v + offset >= min_length
                       for v in layers)):
        raise _grid_error(source, f"{name}.layers", "a non-empty list of layer counts l >= 1",
                          layers, fix)
    if "range" in table:
        bounds = table["range"]
        if (not isinstance(bounds, list) or len(bounds) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in bounds)
                or not 1 <= bounds[0] <= bounds[1]):
            raise _grid_error(source, f"{name}.range", "[low, high] with 1 <= low <= high", bounds, fix)
        values = list(range(bounds[0], bounds[1] + 1))
    else:
        values = table["values"]
        if (not isinstance(values, list) or not values
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values)):
            raise _grid_error(source, f"{name}.values", "a non-empty list of positive integers",
                              values, f"Write e.g. {name} = {{layers = [2], values = [2, 4, 6]}}.")
    total = sum(len(values) ** (layer + offset) for layer in layers)
    if total > MAX_GRID_ITEMS:
        raise _grid_error(source, name, f"a range form with at most {MAX_GRID_ITEMS} tuples", table,
                          "Narrow `range` or list fewer `values`.")
    return [t for layer in layers for t in itertools.product(sorted(set(values)), repeat=layer + offset)]


def _scalars(source: str, name: str, value: object, kind: type, check, example: str) -> list:
    if not isinstance(value, list) or not value:
        raise _grid_error(source, name, "a non-empty list", value, f"Write e.g. {name} = {example}.")
    for v in value:
        ok = isinstance(v, kind) and not isinstance(v, bool)
        if kind is float:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        if not ok or not check(v):
            raise _grid_error(source, name, "a non-empty list of valid values", value,
                              f"Write e.g. {name} = {example}.")
    return value


def _product(source: str, table: dict) -> tuple[list[dict], int]:
    if not isinstance(table, dict):
        raise _grid_error(source, "grid", "a table of lists", table, "Write [[grid]] tables.")
    unknown = sorted(set(table) - set(GRID_KEYS))
    if unknown:
        raise _grid_error(source, unknown[0], "absent (unknown key)", unknown[0],
                          f"Use only {', '.join(GRID_KEYS)}.")
    missing = [k for k in REQUIRED_GRID_KEYS if k not in table]
    if missing:
        raise _grid_error(source, missing[0], "present", None,
                          f"Add e.g. {missing[0]} = " + {"widths": "[[3, 3, 3]]", "keys": "[[2, 2]]",
                                                         "tokens": "[3]"}[missing[0]] + ".")
    if "description" in table and not isinstance(table["description"], str):
        raise _grid_error(source, "description", "a string", table["description"],
                          'Write description = "...".')
    widths = _int_tuples(source, "widths", table["widths"], 2, "[3, 3, 3], [5, 3, 5]")
    keys = _int_tuples(source, "keys", table["keys"], 1, "[2, 2], [3, 3]")
    tokens = _scalars(source, "tokens", table["tokens"], int, lambda v: v >= 1, "[2, 3]")
    attention = _scalars(source, "attention", table.get("attention", ["lightning"]), str,
                         lambda v: v in ATTENTION_KINDS, '["lightning", "softmax"]')
    method = _scalars(source, "method", table.get("method", ["auto"]), str,
                      lambda v: v in METHODS, '["auto"] (or "numerical", "exact", "certified")')
    temperature = _scalars(source, "temperature", table.get("temperature", [1.0]), float,
                           lambda v: 0 < v < math.inf, "[1.0]")
    items, skipped = [], 0
    for w, a, t, att, m in itertools.product(widths, keys, tokens, attention, method):
        if len(a) != len(w) - 1:
            skipped += len(temperature) if att == "softmax" else 1
            continue
        if m in ("exact", "certified") and att == "softmax":
            skipped += len(temperature)
            continue
        for temp in (temperature if att == "softmax" else [1.0]):
            items.append({"widths": w, "keys": a, "tokens": t, "attention": att, "method": m,
                          "temperature": float(temp)})
    return items, skipped


def load_grid(spec: str | os.PathLike) -> Grid:
    """Read and expand a grid file (a path, or a shipped grid name); see the module docstring.

    Combinations whose keys do not have one entry per layer, and exact/certified methods asked of
    softmax networks, are skipped and counted in `n_skipped`. Duplicates are dropped.
    """
    path = resolve_grid_path(spec)
    source = str(spec)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise bad_value("grid", "a valid TOML file", source,
                        f"Fix the TOML syntax ({str(exc).splitlines()[0]}).") from None
    if "grid" in data:
        extra = sorted(set(data) - {"grid", "description"})
        if extra or not isinstance(data["grid"], list):
            raise _grid_error(source, "grid", "a list of [[grid]] tables with no other top-level "
                              "lists", sorted(data), "Put every list inside a [[grid]] table.")
        tables = data["grid"]
    else:
        tables = [data]
    items, skipped, seen = [], 0, set()
    for table in tables:
        new, n_skip = _product(source, table)
        skipped += n_skip
        for item in new:
            key = item_key(item, 0)
            if key not in seen:
                seen.add(key)
                items.append(item)
    if len(items) > MAX_GRID_ITEMS:
        raise _grid_error(source, "grid", f"at most {MAX_GRID_ITEMS} items", len(items),
                          "Split the grid into several files.")
    if not items:
        raise _grid_error(source, "grid", "at least one item whose keys match its layers",
                          f"0 items ({skipped} skipped)", "Give key lists with one entry per layer.")
    return Grid(tuple(items), skipped, source)


def item_key(item: dict, seed: int) -> str:
    """Canonical key of a grid item, e.g. 'lightning;widths=3,3,3;keys=2,2;tokens=3;method=auto;seed=0'."""
    parts = [item["attention"], "widths=" + ",".join(map(str, item["widths"])),
             "keys=" + ",".join(map(str, item["keys"])), f"tokens={item['tokens']}",
             f"method={item['method']}"]
    if item["attention"] == "softmax":
        parts.append(f"temperature={float(item['temperature'])!r}")
    parts.append(f"seed={seed}")
    return ";".join(parts)


def estimated_cost(item: dict) -> float:
    """A rough relative cost (for scheduling largest first)."""
    arch = Architecture(item["widths"], item["keys"], item["tokens"], item["attention"])
    return arch.n_params ** 2 * arch.n_layers * (4 if item["attention"] == "softmax" else 1)


# ---------------------------------------------------------------- one item (runs in a worker)

def compute_item(item: dict) -> dict:
    """The store row of one grid item. Never raises: a failure is a row with status `error`."""
    from ..dimension.api import neuromanifold_dim  # noqa: PLC0415  (workers import torch lazily)

    t0 = time.perf_counter()
    row = _base_row(item)
    try:
        arch = Architecture(item["widths"], item["keys"], item["tokens"], item["attention"],
                            item["temperature"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = neuromanifold_dim(arch, method=item["method"], seed=item["seed"])
    except Exception as exc:  # noqa: BLE001  (recorded, the sweep goes on)
        row.update(status="error", message=f"{type(exc).__name__}: {exc}",
                   seconds=time.perf_counter() - t0)
        return row
    data = result.to_dict()
    row.update(dimension=result.dimension, status=result.status, method_used=result.method,
               sv_gap=data.get("gap"), n_samples=result.n_samples,
               seconds=result.seconds.get("total", time.perf_counter() - t0),
               message="; ".join(result.notes), result_json=json.dumps(data, default=str))
    return row


def _base_row(item: dict) -> dict:
    """Row fields known before computing: the item, its parameter count and closed forms."""
    from ..core.formulas import effective_width, expected_dim  # noqa: PLC0415

    arch = Architecture(item["widths"], item["keys"], item["tokens"], item["attention"],
                        item["temperature"])
    formula, conj = expected_dim(arch), effective_width(arch)
    return {"item_key": item["key"], "widths": ",".join(map(str, arch.widths)),
            "keys": ",".join(map(str, arch.keys)), "tokens": arch.tokens,
            "attention": arch.attention, "method": item["method"], "temperature": arch.temperature,
            "seed": item["seed"], "n_params": arch.n_params, "dimension": None,
            "formula_name": formula.name, "formula": formula.value,
            "hypotheses_hold": int(formula.hypotheses_hold), "conjecture": conj.value,
            "conjecture_hypotheses_hold": int(conj.hypotheses_hold), "status": None,
            "method_used": None, "sv_gap": None, "n_samples": None, "seconds": None,
            "message": "", "result_json": None, "finished_at": None}


def timeout_row(item: dict, timeout: float) -> dict:
    """The row recorded for an item that ran past the timeout (its worker was killed)."""
    row = _base_row(item)
    row.update(status="timeout", seconds=float(timeout),
               message=f"exceeded the timeout of {timeout:g} s; the process computing it was killed")
    return row


def error_row(item: dict, message: str, seconds: float | None = None) -> dict:
    """The row recorded for an item whose computation failed outside `compute_item`."""
    row = _base_row(item)
    row.update(status="error", message=message, seconds=seconds)
    return row


# ---------------------------------------------------------------- the store

def _is_sqlite_file(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(16) == b"SQLite format 3\x00"


def check_store(path: str | os.PathLike, *, must_exist: bool = False) -> Path:
    """Validate `path` as a sweep store without touching it: new, empty, or one of ours.

    Raises the template ValueError for a folder, a non-SQLite file, or an SQLite file that is not
    a neuromanifold sweep store (another application's tables).
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
        return path
    if path.stat().st_size == 0:
        if must_exist:
            raise bad_value("db", "a sweep store with results", f"{path} (empty file)",
                            "Pass the --db file a `neuromanifold sweep` wrote.")
        return path
    if not _is_sqlite_file(path):
        raise bad_value("db", "a neuromanifold sweep store (SQLite) or a new path",
                        f"{path} (not an SQLite file)", "Pass a new file name such as results.sqlite.")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = sorted(r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"))
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise bad_value("db", "a readable SQLite file", f"{path} ({exc})",
                        "Pass a new file name such as results.sqlite.") from None
    if app_id != STORE_APPLICATION_ID or "results" not in tables:
        what = f"tables {', '.join(tables)}" if tables else "no tables"
        raise bad_value("db", "a neuromanifold sweep store or a new path",
                        f"{path} (an SQLite file of another application: {what})",
                        "Pass a new file name such as results.sqlite.")
    if version != STORE_SCHEMA_VERSION:
        raise bad_value("db", f"a sweep store of schema version {STORE_SCHEMA_VERSION}",
                        f"{path} (version {version})", "Pass a new file name such as results.sqlite.")
    return path


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
        conn.execute(f"CREATE TABLE IF NOT EXISTS results ({columns})")
        conn.execute(f"PRAGMA application_id = {STORE_APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {STORE_SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return conn


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
    """Every row of a sweep store (opened read-only), in insertion order."""
    path = check_store(path, must_exist=True)
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM results ORDER BY rowid")]
    finally:
        conn.close()


# ---------------------------------------------------------------- the local worker pool

def _worker_main(conn, threads: int | None) -> None:
    """Worker process: import, say ready, then receive items and send rows until told to stop."""
    if threads:
        import torch  # noqa: PLC0415

        torch.set_num_threads(threads)
        torch.set_num_interop_threads(threads)
    from ..dimension import exact, numerical  # noqa: F401, PLC0415  (import before the first deadline starts)

    try:
        conn.send("ready")
    except (BrokenPipeError, OSError):
        return
    while True:
        try:
            item = conn.recv()
        except (EOFError, OSError):
            return
        if item is None:
            return
        row = compute_item(item)
        try:
            conn.send(row)
        except (BrokenPipeError, OSError):
            return


@dataclass
class _Worker:
    process: multiprocessing.Process
    conn: multiprocessing.connection.Connection
    item: dict | None = None
    started: float = 0.0
    ready: bool = False


@dataclass
class _LocalPool:
    """Killable worker processes (spawn): an item past its deadline costs its worker, not the sweep."""

    jobs: int
    timeout: float | None
    workers: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._threads = 1 if self.jobs > 1 else None
        self.workers = [self._start() for _ in range(self.jobs)]

    def _start(self) -> _Worker:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker_main, args=(child, self._threads), daemon=True)
        proc.start()
        child.close()
        return _Worker(proc, parent)

    def _replace(self, worker: _Worker) -> None:
        worker.process.kill()
        worker.process.join()
        worker.conn.close()
        self.workers[self.workers.index(worker)] = self._start()

    def run(self, items: Iterable[dict]) -> Iterator[dict]:
        """Yield one row per item, as items finish (not in order).

        A worker's deadline starts when it is handed an item, after it has said it is ready
        (its imports done), so the timeout measures the computation, not the start-up.
        """
        pending = iter(items)
        exhausted = False
        while True:
            for w in self.workers:
                if w.ready and w.item is None and not exhausted:
                    item = next(pending, None)
                    if item is None:
                        exhausted = True
                        break
                    w.item, w.started = item, time.monotonic()
                    w.conn.send(item)
            busy = [w for w in self.workers if w.item is not None]
            starting = [w for w in self.workers if not w.ready]
            if not busy and (exhausted or not starting):
                return
            wait = None
            if self.timeout is not None and busy:
                now = time.monotonic()
                wait = max(0.0, min(w.started + self.timeout - now for w in busy))
            ready = multiprocessing.connection.wait([w.conn for w in busy + starting], timeout=wait)
            for w in starting:
                if w.conn in ready:
                    try:
                        w.ready = w.conn.recv() == "ready"
                    except (EOFError, OSError):
                        raise RuntimeError(f"a sweep worker process failed to start (exit code "
                                           f"{w.process.exitcode})") from None
            for w in busy:
                if w.conn in ready:
                    try:
                        row = w.conn.recv()
                    except (EOFError, OSError):
                        code = w.process.exitcode
                        row = error_row(w.item, f"worker process died (exit code {code})",
                                        time.monotonic() - w.started)
                        self._replace(w)
                        yield row
                        continue
                    w.item = None
                    yield row
                elif self.timeout is not None and time.monotonic() - w.started >= self.timeout:
                    item = w.item
                    self._replace(w)
                    yield timeout_row(item, self.timeout)

    def close(self) -> None:
        for w in self.workers:
            if w.item is None and w.process.is_alive():
                try:
                    w.conn.send(None)
                except (BrokenPipeError, OSError):
                    pass
        for w in self.workers:
            if w.item is not None:
                w.process.kill()
            w.process.join(timeout=5)
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.conn.close()


def run_local(items: list[dict], *, jobs: int, timeout: float | None) -> Iterator[dict]:
    """Rows of `items` computed by `jobs` killable worker processes, as they finish."""
    pool = _LocalPool(jobs, timeout)
    try:
        yield from pool.run(items)
    finally:
        pool.close()


# ---------------------------------------------------------------- the sweep

@dataclass
class SweepSummary:
    """What a sweep did: counts by status of the rows it wrote, and what it skipped."""

    n_items: int
    n_already_done: int
    n_skipped_combinations: int
    n_written: int = 0
    counts: dict = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"n_items": self.n_items, "n_already_done": self.n_already_done,
                "n_skipped_combinations": self.n_skipped_combinations,
                "n_written": self.n_written, "counts": dict(self.counts),
                "seconds": self.seconds}


def sweep(grid: Grid | str | os.PathLike, db: str | os.PathLike, *, jobs: int = 1,
          backend: str = "local", scheduler: str | None = None, timeout: float | None = None,
          seed: int = 0, methods: list[str] | None = None,
          progress: Callable[[str, int, int, dict], None] | None = None) -> SweepSummary:
    """Run every item of `grid` not yet in the store `db`; write each row as soon as it finishes.

    `backend` is `local` (worker processes on this machine) or `dask` (an existing cluster at
    `scheduler`, or a LocalCluster started and shut down here). `methods` overrides the grid's
    method list. `progress(event, done, total, counts)` is called once with event 'start' (done = items
    already in the store, total = items to run) and after each written row ('row').
    Rows are written only by this process; each insert is its own transaction (INSERT OR IGNORE).
    """
    from ..core.checks import check_choice  # noqa: PLC0415

    backend = check_choice("backend", backend, ("local", "dask"))
    jobs = check_int("jobs", jobs, minimum=1, fix="Pass --jobs 2 (one per core).")
    seed = check_seed(seed)
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise bad_value("timeout", "a positive number of seconds", timeout, "Pass e.g. --timeout 60.")
        timeout = float(timeout)
    if scheduler is not None and backend != "dask":
        raise bad_value("scheduler", "given only with --backend dask", scheduler,
                        "Add --backend dask, or drop --scheduler.")
    if not isinstance(grid, Grid):
        grid = load_grid(grid)
    items = [dict(i) for i in grid.items]
    if methods is not None:
        for m in methods:
            check_choice("method", m, METHODS)
        items = [dict(i, method=m) for i in grid.items for m in methods
                 if not (m in ("exact", "certified") and i["attention"] == "softmax")]
        unique = {item_key(i, seed): i for i in items}
        items = list(unique.values())
    check_store(db)
    for item in items:
        item["seed"] = seed
        item["key"] = item_key(item, seed)
    conn = open_store(db)
    t0 = time.perf_counter()
    try:
        done = done_keys(conn)
        todo = [i for i in items if i["key"] not in done]
        todo.sort(key=estimated_cost, reverse=True)
        summary = SweepSummary(len(items), len(items) - len(todo), grid.n_skipped)
        rows: Iterator[dict] = iter(())
        if todo and backend == "local":
            rows = run_local(todo, jobs=jobs, timeout=timeout)
        elif todo:
            from .dask_backend import run_dask  # noqa: PLC0415  (the one dask importer)

            # Connects before any progress output, so a bad address is one clean error line.
            rows = run_dask(todo, compute_item, scheduler=scheduler, jobs=jobs, timeout=timeout,
                            timeout_row=timeout_row, error_row=error_row)
        if progress:
            progress("start", summary.n_already_done, len(todo), summary.counts)
        try:
            for row in rows:
                if insert_result(conn, row):
                    summary.n_written += 1
                summary.counts[row["status"]] = summary.counts.get(row["status"], 0) + 1
                if progress:
                    progress("row", sum(summary.counts.values()), len(todo), summary.counts)
        finally:
            close = getattr(rows, "close", None)
            if close:
                close()
    finally:
        conn.close()
    summary.seconds = time.perf_counter() - t0
    return summary
