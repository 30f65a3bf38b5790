"""Sweep items on a Dask cluster. With `dimension.dask_rank` (the numerical rank of one network
on Dask, which also holds the connection to a cluster) the only module that imports dask.

Workers compute rows; the rows stream back (as completed) to the caller, the single writer of
the SQLite store. Without a scheduler address a `distributed.LocalCluster` (processes, one thread
each) is started and shut down here. An item with no `max_memory` of its own gets its worker's
budget (`dask_rank.worker_budget`: the worker's memory limit shared by its threads), so an item
too large for the worker it landed on is stored as `refused` instead of killing the worker. With a timeout each item runs in a child process of its
worker (`python -c ...`), killed when the timeout passes, so a runaway item neither blocks the
worker nor is lost; this costs one interpreter start (about 2 s with torch) per item.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator


# The child says "ready" once its imports are done; the timeout counts from then. It unblocks
# SIGINT, which its worker blocks (`dask_rank.connect`), so that a Ctrl-C ends it with the run
# (its traceback goes to the pipe its worker reads, not to the terminal).
_CHILD = ("import json, signal, sys; hasattr(signal, 'pthread_sigmask') and "
          "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
          "from neuromanifold.sweeps.items import compute_item; "
          "import neuromanifold.dimension.api; print('ready', flush=True); "
          "sys.stdout.write(json.dumps(compute_item(json.loads(sys.stdin.read()))))")


def _run_item(item: dict, compute: Callable[[dict], dict], timeout: float | None,
              threads: int | None) -> dict:
    """Runs on a Dask worker: the row of `item`, in a killable child process if `timeout`."""
    from ..dimension.dask_rank import AUTODIFF_LOCK, WORKER_BUDGET, worker_budget  # noqa: PLC0415

    budget = worker_budget() if item.get("max_memory") is None else None
    if budget is not None:
        item = dict(item, max_memory=budget)
    row = _item_row(item, compute, timeout, threads, AUTODIFF_LOCK)
    if budget is not None and row.get("status") == "refused":  # say whose budget it was
        row["message"] = row["message"].replace("(--max-memory)", f"({WORKER_BUDGET})", 1)
    return row


def _item_row(item: dict, compute: Callable[[dict], dict], timeout: float | None,
              threads: int | None, lock) -> dict:
    """The row of `item` computed here (under `lock`), or in a killable child if `timeout`."""
    if timeout is None:
        if threads:
            import torch  # noqa: PLC0415

            torch.set_num_threads(threads)
        with lock:  # one item at a time per worker process (torch.func is not thread-safe)
            return compute(item)
    env = None
    if threads:
        import os  # noqa: PLC0415

        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        ready = proc.stdout.readline().strip() == "ready"
        out, errors = proc.communicate(input=json.dumps(item) if ready else None, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"__timeout__": True}
    if proc.returncode != 0:
        tail = (errors.strip().splitlines() or ["no output"])[-1]
        return {"__error__": f"item process exited with code {proc.returncode}: {tail}"}
    return json.loads(out)


def run_dask(items: list[dict], compute: Callable[[dict], dict], *, scheduler: str | None,
             jobs: int, timeout: float | None, timeout_row: Callable, error_row: Callable
             ) -> Iterator[dict]:
    """Connect (or start a LocalCluster) now; return an iterator of rows as they complete.

    `scheduler` is an address such as tcp://host:8786, or None for a LocalCluster of `jobs`
    single-threaded worker processes. A task that raises, or whose worker dies, yields
    `error_row`; one past `timeout` yields `timeout_row`.
    """
    from ..dimension.dask_rank import connect  # noqa: PLC0415

    client, cluster = connect(scheduler, jobs)
    threads = 1 if (cluster is not None and jobs > 1) else None
    return _Rows(client, cluster,
                 _stream(client, cluster, items, compute, timeout, threads, timeout_row, error_row))


class _Rows:
    """The row stream, closable even before its first row (then the generator's `finally`
    never runs, so the client and any local cluster are closed here)."""

    def __init__(self, client, cluster, rows: Iterator[dict]):
        self._client, self._cluster, self._rows = client, cluster, rows

    def __iter__(self) -> Iterator[dict]:
        return self._rows

    def close(self) -> None:
        import inspect  # noqa: PLC0415

        never_started = inspect.getgeneratorstate(self._rows) == inspect.GEN_CREATED
        self._rows.close()
        if never_started:
            self._client.close()
            if self._cluster is not None:
                self._cluster.close()


def _stream(client, cluster, items, compute, timeout, threads, timeout_row, error_row
            ) -> Iterator[dict]:
    """Submit every item, yield rows as completed; close the client (and cluster) at the end."""
    from distributed import as_completed  # noqa: PLC0415

    futures, item_of = [], {}
    try:
        for item in items:
            fut = client.submit(_run_item, item, compute, timeout, threads, pure=False)
            futures.append(fut)
            item_of[fut.key] = item
        for fut in as_completed(futures):
            item = item_of[fut.key]
            try:
                row = fut.result()
            except Exception as exc:  # noqa: BLE001  (a failed task is a row, not a crash)
                row = error_row(item, f"dask task failed: {type(exc).__name__}: {exc}")
            if row.get("__timeout__"):
                row = timeout_row(item, timeout)
            elif "__error__" in row:
                row = error_row(item, row["__error__"])
            yield row
    finally:
        client.cancel(futures)
        client.close()
        if cluster is not None:
            cluster.close()
