"""The local worker pool: killable worker processes that compute items, one at a time."""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from .items import compute_item, error_row, timeout_row

# ---------------------------------------------------------------- the local worker pool

# How often a worker checks that the process that started it is still alive (seconds).
_PARENT_POLL_SECONDS = 0.5


def _die_with_parent(parent_pid: int) -> None:
    """Make this worker end when `parent_pid` ends, however it ends (SIGKILL included).

    On Linux the kernel sends SIGKILL at the parent's death (prctl PR_SET_PDEATHSIG); everywhere
    a daemon thread also polls the parent's pid and exits when the worker has been re-parented.
    """
    import ctypes  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import threading  # noqa: PLC0415

    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # pragma: no cover - no usable libc: the thread remains
            pass

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_POLL_SECONDS)
        os._exit(1)

    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _worker_main(conn, threads: int | None, parent_pid: int | None = None) -> None:
    """Worker process: import, say ready, then receive items and send rows until told to stop.

    SIGINT is ignored (and was blocked from the process's start: `_LocalPool._start`): a Ctrl-C
    at a terminal reaches the whole process group, and the sweep, not its workers, answers it.
    """
    import signal  # noqa: PLC0415

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_pid is not None:
        _die_with_parent(parent_pid)
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


@contextlib.contextmanager
def _sigint_blocked():
    """Block SIGINT in this thread while a worker is started (a Ctrl-C then waits, pending, until
    the block ends: none is lost). The signal mask is inherited by the process started, across
    its exec: the worker is born with SIGINT blocked, before its interpreter or its imports run,
    so that a Ctrl-C at a terminal, which reaches the whole process group, gives no worker
    traceback (issue 39: about 88 interleaved lines of them before the one-line message)."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - Windows: no signal masks
        yield
        return
    from multiprocessing import resource_tracker  # noqa: PLC0415

    # The resource tracker is launched with SIGINT blocked and then unblocks it in the launching
    # thread: launched now, before the mask, it leaves the mask alone.
    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


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
        proc = self._ctx.Process(target=_worker_main, args=(child, self._threads, os.getpid()),
                                 daemon=True)
        with _sigint_blocked():
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
