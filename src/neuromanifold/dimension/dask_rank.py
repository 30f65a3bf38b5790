"""The numerical rank on a Dask cluster: workers compute the Jacobian rows and reduce them to
triangular factors, so that the caller only ever holds U x U matrices.

Besides `sweeps.dask_backend` (which ships whole sweep items) this is the one module that
imports dask / distributed: the dimension layer cannot import the sweep layer (imports flow
sweeps -> dimension), so the connection to a cluster lives here and the sweep backend uses it.

NOTE: [Reduction of row blocks] For row blocks J_1, J_2 with QR factors J_i = Q_i R_i,
[J_1; J_2] = diag(Q_1, Q_2) [R_1; R_2], and a QR [R_1; R_2] = Q R gives [J_1; J_2] = Q' R with
Q' = diag(Q_1, Q_2) Q orthonormal, so R^T R = J^T J for the stacked J: R has J's singular values
and J's column norms (the column scaling of the rank rule sees the same matrix). Each worker
factors its chunk of rows (R_i has min(m_i, U) x U entries, U the columns kept: the gauge's free
columns or the complement of the symmetry tangents); pairs of factors are stacked and factored
again in a binary tree on the workers; the caller gathers the root and reads the rank from its
singular values by the one rank rule (`dimension.rank`). A new batch of samples is a new subtree
whose root is combined with the previous R.

The workers receive the architecture, the seed and the input samples X of their chunk (N x d_0 x t
floats, drawn by the caller from the same seeded stream and in the same blocks as the local path,
so the samples are bit for bit the local ones; a batch is cut into one chunk per worker thread);
each worker rebuilds the weights and the symmetry split from the seed, once per (architecture,
seed), and computes its rows a local block at a time with the local path's code.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import torch

from ..core.architecture import Architecture
from ..errors import InputError, ResourceError
from .numerical import _ROW_BLOCK_BYTES
from .result import Progress

# Workers of the LocalCluster started when no scheduler address is given (one thread each).
LOCAL_WORKERS = 2
# Seconds to wait for a scheduler to answer before the address is refused.
CONNECT_SECONDS = 10
# Where a worker's budget comes from, in refusals.
WORKER_BUDGET = "the Dask worker's memory limit shared by its threads"

_PREPARED: dict = {}  # on a worker: (architecture, seed) -> (params, split); the latest one
_LOCK = threading.Lock()
# torch.func keeps its forward-mode levels in process-global state: two threads of one worker
# running jvp at once corrupt each other ("invalid forward AD level"), so the autodiff of one
# worker process runs one task at a time (torch's own threads still work inside it).
AUTODIFF_LOCK = threading.Lock()


def connect(scheduler: str | None, n_workers: int = LOCAL_WORKERS):
    """(client, cluster): a client of the scheduler at `scheduler`, or of a new LocalCluster of
    `n_workers` single-threaded worker processes (then `cluster` is it, to be closed after).

    An address that is malformed or where no scheduler answers within CONNECT_SECONDS is an
    InputError (exit 2): the fix is the caller's (start a scheduler, or correct the address).
    """
    from distributed import Client, LocalCluster  # noqa: PLC0415

    if scheduler is None:
        # Its workers' logs are silenced: a failed task is reported once, by the caller.
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=logging.CRITICAL)
        return Client(cluster), cluster
    try:
        return Client(scheduler, timeout=CONNECT_SECONDS), None
    except (OSError, TimeoutError, ValueError) as exc:
        raise InputError(f"`scheduler` must be the address of a running Dask scheduler; got "
                         f"{scheduler!r} ({exc}). Start one with `dask scheduler`, or drop "
                         "--scheduler to use a local cluster.") from None


def worker_budget() -> int | None:
    """On a Dask worker: the memory budget of one of its threads (its memory limit shared by its
    threads, at most the default share of the available memory); None off a worker or when the
    worker has no memory limit."""
    from distributed import get_worker  # noqa: PLC0415

    from .memory import DEFAULT_FRACTION, available_memory  # noqa: PLC0415

    try:
        worker = get_worker()
    except ValueError:
        return None
    limit = getattr(worker.memory_manager, "memory_limit", None)
    if not limit:
        return None
    return int(min(limit / max(1, worker.state.nthreads), DEFAULT_FRACTION * available_memory()))


def _prepared(arch: Architecture, seed: int, threads: int | None):
    """(params, split) on this worker, built from the seed once per (architecture, seed)."""
    if threads:
        torch.set_num_threads(threads)
    key = (arch, seed)
    with _LOCK:
        if key not in _PREPARED:
            from ..core.parameters import flatten, random_weights  # noqa: PLC0415
            from .numerical import _symmetry_split  # noqa: PLC0415

            weights = random_weights(arch, seed)
            _PREPARED.clear()
            _PREPARED[key] = (flatten(weights), _symmetry_split(arch, weights))
        return _PREPARED[key]


def _split_task(arch: Architecture, seed: int, samples: int | None, threads: int | None,
                option: str) -> tuple[int, float]:
    """On a worker: check the worker's memory budget, build the split; (its rank, seconds).
    `option` names what chose the workers (`scheduler`, or `backend` for our LocalCluster)."""
    from .memory import dask_worker_estimate, format_bytes  # noqa: PLC0415

    budget = worker_budget()
    estimate = dask_worker_estimate(arch, samples)
    if budget is not None and estimate.peak > budget:
        raise ResourceError(
            f"`{option}` must give Dask workers at least the estimated peak per thread; got "
            f"{format_bytes(budget)} per thread ({WORKER_BUDGET}) for {estimate.describe()}. "
            f"{estimate.advice}.")
    t0 = time.perf_counter()
    _, split = _prepared(arch, seed, threads)
    return split.rank, time.perf_counter() - t0


def stacked_factor(blocks: list[torch.Tensor]) -> torch.Tensor:
    """The triangular factor R (min(m, U) x U) of the rows of `blocks` stacked (m x U in all):
    R^T R = S^T S for their stack S. The stack is built column-major and factored in place
    (LAPACK geqrf), so the working set is the stack and R: a tree step holds 5 U^2 floats with
    its two inputs, where torch.linalg.qr's copy of the stack would make it 7."""
    m, U = sum(b.shape[0] for b in blocks), blocks[0].shape[1]
    stack = torch.empty((U, m), dtype=blocks[0].dtype).T  # column-major m x U
    start = 0
    for b in blocks:
        stack[start: start + b.shape[0]] = b
        start += b.shape[0]
    tau = torch.empty(min(m, U), dtype=stack.dtype)
    torch.geqrf(stack, out=(stack, tau))
    return stack[: min(m, U)].triu()


def chunk_samples(n_samples: int, parts: int, rows_per_sample: int, n_cols: int) -> int:
    """Samples per chunk of a batch of `n_samples`: one chunk per worker thread, but at most
    2 U rows (U = `n_cols`) so that a chunk's rows, their stack and R stay within a tree step's
    5 U^2 floats; at least one sample."""
    per = -(-n_samples // parts)
    return max(1, min(per, (2 * n_cols) // rows_per_sample))


def _chunk_task(arch: Architecture, seed: int, X: torch.Tensor, block: int,
                threads: int | None) -> dict:
    """On a worker: the rows J Q2 of the samples X, computed `block` samples at a time as the
    local path computes them, reduced to their triangular factor R; with the tangent leak and
    the seconds spent."""
    t0 = time.perf_counter()
    params, split = _prepared(arch, seed, threads)
    rows, leak = [], 0.0
    with AUTODIFF_LOCK:
        for sub in torch.split(X, block):
            reduced, sub_leak = split.rows(arch, params, sub)
            rows.append(reduced)
            leak = max(leak, sub_leak)
    R = stacked_factor(rows)
    del rows
    return {"R": R, "leak": leak, "seconds": time.perf_counter() - t0}


def _combine_task(a: dict, b: dict) -> dict:
    """On a worker: the triangular factor of two stacked factors (NOTE [Reduction of row blocks])."""
    t0 = time.perf_counter()
    R = stacked_factor([a["R"], b["R"]])
    return {"R": R, "leak": max(a["leak"], b["leak"]),
            "seconds": a["seconds"] + b["seconds"] + time.perf_counter() - t0}


def _note_task(arch: Architecture, seed: int, leak: float, threads: int | None) -> str:
    """On a worker: how the split read the rank, for the result's notes."""
    return _prepared(arch, seed, threads)[1].note(leak)


class DaskRows:
    """The rows of `numerical._grow_and_read` computed and reduced on a Dask cluster (the row-source
    interface of `numerical.LocalRows`). The samples of a batch are cut into one chunk per worker
    thread (`chunk_samples`): few leaves, so few U x U tree steps."""

    def __init__(self, arch: Architecture, seed: int, scheduler: str | None, say: Progress,
                 samples: int | None = None):
        self.arch, self.seed = arch, seed
        if scheduler is None:  # with an address, a refusal must stay the only line
            say(f"dask: starting a LocalCluster of {LOCAL_WORKERS} workers")
        self.client, self.cluster = connect(scheduler)
        try:
            nthreads = self.client.nthreads()
            self.parts = max(1, sum(nthreads.values()))
            # Our own LocalCluster shares this machine's cores between its workers.
            self.threads = (max(1, (os.cpu_count() or 1) // LOCAL_WORKERS)
                            if self.cluster is not None else None)
            address = self.client.scheduler.address
            self.in_process = address.startswith("inproc://")
            say(f"dask: {len(nthreads)} workers, {self.parts} threads at {address}; "
                "building the symmetry split on a worker")
            self.split_rank, self.seconds_split = self.client.submit(
                _split_task, arch, seed, samples, self.threads,
                "scheduler" if scheduler else "backend", pure=False).result()
        except BaseException:
            self.close()
            raise
        self.backend = {"name": "dask", "scheduler": address if scheduler else None,
                        "workers": len(nthreads), "threads": self.parts, "chunks": 0,
                        "worker_seconds": 0.0}
        self.root, self.waiting, self.leak, self.seconds_jacobian = None, [], 0.0, 0.0
        self.n_cols = arch.n_params - self.split_rank
        self.rows_per_sample = arch.tokens * arch.widths[-1]
        # The local path's block of samples, whose full Jacobian rows a worker computes at once.
        self.block = max(1, _ROW_BLOCK_BYTES // (self.rows_per_sample * arch.n_params * 8))

    def add(self, X: torch.Tensor) -> None:
        """Keep the samples X (N x d_0 x t floats) for the batch `factor` sends."""
        self.waiting.append(X.cpu())

    def scaled_factor(self, say: Progress) -> torch.Tensor:
        """`factor()` with unit columns, scaled in place (the client's copy; the root stays on
        the cluster for the next batch), so that the client holds one U x U matrix."""
        from .rank import unit_scaled  # noqa: PLC0415

        R = self.factor(say)
        if self.in_process:  # the result is the worker's own object, not a copy: keep the root
            R = R.clone()
        return unit_scaled(R, dim=0, inplace=True)

    def factor(self, say: Progress) -> torch.Tensor:
        """Wait for the chunks, reduce them (and the previous R) by a tree on the workers, and
        gather the root: a triangular factor with the singular values of every row so far."""
        from distributed import as_completed  # noqa: PLC0415

        t0 = time.perf_counter()
        X = torch.cat(self.waiting)
        self.waiting = []
        per = chunk_samples(X.shape[0], self.parts, self.rows_per_sample, self.n_cols)
        pending = [self.client.submit(_chunk_task, self.arch, self.seed, piece, self.block,
                                      self.threads, pure=False) for piece in torch.split(X, per)]
        total = len(pending)
        say(f"dask: {X.shape[0]} samples sent to the workers in {total} chunks of at most {per}")
        for done, _ in enumerate(as_completed(pending), 1):
            say(f"dask: chunk {done}/{total} of Jacobian rows factored on a worker")
        level = ([self.root] if self.root is not None else []) + pending
        while len(level) > 1:
            paired = [self.client.submit(_combine_task, level[k], level[k + 1], pure=False)
                      for k in range(0, len(level) - 1, 2)]
            level = paired + level[len(paired) * 2:]
        self.root = level[0]
        say(f"dask: {total} chunk factors combined by a tree on the workers; gathering R")
        out = self.root.result()
        self.leak = out["leak"]
        self.backend["chunks"] += total
        self.backend["worker_seconds"] = out["seconds"]
        self.seconds_jacobian += time.perf_counter() - t0
        return out["R"]

    def note(self) -> str:
        """The split's note (built on a worker) and where the rows were computed."""
        split_note = self.client.submit(_note_task, self.arch, self.seed, self.leak, self.threads,
                                        pure=False).result()
        b = self.backend
        return (f"{split_note}; Jacobian rows computed on Dask ({b['workers']} workers, "
                f"{b['threads']} threads, {b['chunks']} chunks) and reduced there to one "
                "triangular factor with the same singular values")

    def close(self) -> None:
        """Close the client, and the LocalCluster if this started one."""
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
