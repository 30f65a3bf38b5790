"""`sweep`: run every item of a grid not yet in the store, writing rows as they finish."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..core.checks import METHODS, bad_value, check_choice, check_int, check_seed
from ..core.limits import check_jobs
from .grid import Grid, estimated_cost, item_architecture, item_key, load_grid
from .items import compute_item, error_row, timeout_row
from .store import check_store, done_keys, insert_result, open_store
from .workers import run_local

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
          seed: int = 0, methods: list[str] | None = None, max_memory: str | int | None = None,
          progress: Callable[[str, int, int, dict], None] | None = None) -> SweepSummary:
    """Run every item of `grid` not yet in the store `db`; write each row as soon as it finishes.

    `backend` is `local` (worker processes on this machine) or `dask` (an existing cluster at
    `scheduler`, or a LocalCluster started and shut down here). `methods` overrides the grid's
    method list. `progress(event, done, total, counts)` is called once with event 'start' (done = items
    already in the store, total = items to run) and after each written row ('row').
    Rows are written only by this process; each insert is its own transaction (INSERT OR IGNORE).
    `max_memory` is each item's memory budget (`dimension.memory`); an item whose estimated peak
    exceeds it is stored with status `refused`.
    """
    from ..core.scheduler import check_backend  # noqa: PLC0415

    backend = check_backend(backend, scheduler)
    jobs = check_jobs(check_int("jobs", jobs, minimum=1, fix="Pass --jobs 2 (one per core)."))
    seed = check_seed(seed)
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise bad_value("timeout", "a positive number of seconds", timeout, "Pass e.g. --timeout 60.")
        timeout = float(timeout)
    if not isinstance(grid, Grid):
        grid = load_grid(grid)
    items = [dict(i) for i in grid.items]
    if methods is not None:
        for m in methods:
            check_choice("method", m, METHODS)
        items = [dict(i, method=m) for i in grid.items for m in methods
                 if not (m in ("exact", "certified") and not item_architecture(i).is_polynomial)]
        if "exact" in methods and not any(i["method"] == "exact" for i in items):
            raise bad_value("method", "a method with an answer for at least one network of the "
                            "grid ('exact' has none for softmax networks and other "
                            "non-polynomial ones)", ",".join(methods),
                            "Pass --method numerical or certified (ball arithmetic) for softmax "
                            "grids.")
        unique = {item_key(i, seed): i for i in items}
        items = list(unique.values())
    if max_memory is not None:
        from ..dimension.memory import parse_memory  # noqa: PLC0415

        max_memory = parse_memory(max_memory)  # bytes, so every worker applies the same budget
    for item in items:
        item["seed"] = seed
        if max_memory is not None:
            item["max_memory"] = max_memory
        item["key"] = item_key(item, seed)
    if backend == "dask" and scheduler is not None:
        from ..core.scheduler import probe_scheduler  # noqa: PLC0415

        probe_scheduler(scheduler)  # before the store is created or changed
    check_store(db)
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
