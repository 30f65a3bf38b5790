"""The numerical rank on a Dask cluster: workers compute the Jacobian rows and reduce them to
triangular factors, so that the caller only ever holds U x U matrices.

Besides `sweeps.dask_backend` (which ships whole sweep items) this is the one module that
imports dask / distributed: the dimension layer cannot import the sweep layer (imports flow
sweeps -> dimension), so the connection to a cluster lives here and the sweep backend uses it.

NOTE: [Reduction of row blocks] For row blocks J_1, J_2 with QR factors J_i = Q_i R_i,
[J_1; J_2] = diag(Q_1, Q_2) [R_1; R_2], and a QR [R_1; R_2] = Q R gives [J_1; J_2] = Q' R with
Q' = diag(Q_1, Q_2) Q orthonormal, so R^T R = J^T J for the stacked J: R has J's singular values
and J's column norms (the column scaling of the rank rule sees the same matrix). Every factor is
held in one U x U buffer (U the columns kept: the gauge's free columns or the complement of the
symmetry tangents) with the number of rows m it stands for: below U rows its first m rows are
the triangular factor and the rest are exact zeros; from U rows on it is the U x U factor. Each
worker copies its chunk's rows into such a buffer as they come, factors the first U in place
and folds the later ones in (`fold.fold_rows_`); a tree step of two factors works in the storage
of the one with more rows: it stacks the other's rows under it and factors them in place while
they are at most U, and otherwise folds the other's rows into it (NOTE [Folding a triangular
factor]). A tree step thus holds its two inputs and a block of rows, 2 U^2 floats and a little,
where a QR of the stacked pair held 5 U^2. The caller gathers the root and reads the rank from
its singular values by the one rank rule (`core.rank`). A new batch of samples is a new
subtree whose root is combined with the previous R.

NOTE: [Folding a triangular factor] Rows r0..r1 of an upper triangular (or trapezoidal) factor B
are zero left of column r0. In the QR of [A; K] with A upper triangular and K zero in its first
r0 columns, the reflectors of those columns are the identity (nothing below the diagonal to
annihilate), so A's first r0 rows stay and the fold is that of K's other columns into A's
trailing block A[r0:, r0:], itself upper triangular. Folding B into A a block of rows at a time
that way costs about 2/3 U^3 operations (what LAPACK's tpqrt does), where a generic QR of the
stacked 2U x U pair costs 10/3 U^3.

NOTE: [In-place tree steps] A tree step overwrites one input, the factor it folds into, and only
reads the other (its blocks of rows are copied before being folded). This is safe because
nothing reads an input after its tree step:
- `DaskRows.factor` puts each chunk's future and the previous root into `level` once, and each
  round pairs every entry with one neighbour or carries it alone to the next round, so every
  future has exactly one consuming task. Two entries of `level` never share a tensor: a tree
  step returns its overwritten input inside a new result, and the input's own future is in no
  later round (it may stay in memory until the client drops it, read by no one).
- The client gathers only the root (`factor`), and before the next batch's tree step that will
  overwrite it is even submitted. Over TCP the client receives a deserialised copy; on an
  in-process cluster (`inproc://`) it receives the worker's own tensor, so `factor` copies it
  there. `as_completed` waits for the chunks without gathering them.
- A worker that fetches an input from another worker overwrites its own copy (a separate object
  except in-process), and a fetched input is sent only to its one consumer. Dask steals only
  tasks not yet running, so no second copy of the consumer reads the input while it is
  overwritten. If that worker dies, the lost results are recomputed from the chunk tasks, whose
  inputs (the samples) are never written.
- A tree step that fails midway leaves its target half folded; the computation fails with it
  (no retries are requested), so no one reads that target.
`tests/dimension/test_dask_rank.py` checks that a gathered factor stays unchanged while later batches are
combined with the root, and that the grown rank equals the local one.

The workers receive the architecture, the seed and the input samples X of their chunk (N x d_0 x t
floats, drawn by the caller from the same seeded stream and in the same blocks as the local path,
so the samples are bit for bit the local ones; a batch is cut into one chunk per worker thread);
each worker rebuilds the weights and the symmetry split from the seed, once per (architecture,
seed), and computes its rows a local block at a time with the local path's code.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
import warnings

import torch

from ..core.architecture import Architecture
from ..errors import InputError, ResourceError
from .fold import fold_rows_
from .memory import LOCAL_WORKERS, NUMERICAL_ROW_BLOCK_BYTES, dask_fold_rows
from .result import Progress

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
        # The scheduler serves HTTP (no dashboard) on 8787 or, where another cluster holds that
        # port, on another one with a warning about a port that no one here uses.
        warnings.filterwarnings("ignore", message=r"Port \d+ is already in use",
                                category=UserWarning)
        # Its workers' logs are silenced: a failed task is reported once, by the caller.
        cluster = _without_sigint(lambda: LocalCluster(
            n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None,
            silence_logs=logging.CRITICAL))
        return Client(cluster), cluster
    from ..core.scheduler import probe_scheduler  # noqa: PLC0415

    probe_scheduler(scheduler, CONNECT_SECONDS)  # a silent or foreign server: one line, bounded
    try:
        return Client(scheduler, timeout=CONNECT_SECONDS), None
    except (OSError, TimeoutError, ValueError) as exc:
        raise InputError(f"`scheduler` must be the address of a running Dask scheduler; got "
                         f"{scheduler!r} ({exc}). Start one with `dask scheduler`, or drop "
                         "--scheduler to use a local cluster.") from None


def _without_sigint(start):
    """`start()` (a LocalCluster's construction) run in a thread that blocks SIGINT; its result.

    A Ctrl-C at a terminal sends SIGINT to the whole foreground process group, worker processes
    included, and each worker then printed its own KeyboardInterrupt traceback after the CLI's one
    line. A thread's signal mask is inherited by the threads it starts (the cluster's event loop,
    the nannies' process starters) and by the processes they fork, across exec: started from this
    thread, the workers never receive SIGINT, and this process (whose main thread keeps SIGINT)
    tears them down when it is interrupted. The caller waits interruptibly; interrupted while the
    cluster starts, it leaves the starting thread to close the cluster once it is up (the exit
    waits for that thread).
    """
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks
        return start()
    from multiprocessing import resource_tracker  # noqa: PLC0415

    out: dict = {}
    interrupted = threading.Event()

    def run() -> None:
        # multiprocessing launches its resource tracker with SIGINT blocked and then unblocks it
        # in the launching thread: launched now, before the mask, it leaves the mask alone.
        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            out["value"] = start()
        except BaseException as exc:  # noqa: BLE001  (re-raised by the caller)
            out["error"] = exc
            return
        if interrupted.is_set():  # the caller is gone: close the cluster before the exit
            with contextlib.suppress(BaseException):
                out["value"].close()

    # Not a daemon: the interpreter's exit waits for it, so that the cluster is closed before
    # the exit handlers run (a daemon thread closing it raced with them).
    thread = threading.Thread(target=run, name="neuromanifold: LocalCluster start")
    thread.start()
    try:
        thread.join()
    except BaseException:
        interrupted.set()
        raise
    if "error" in out:
        raise out["error"]
    return out["value"]


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
            from .gauge import symmetry_split  # noqa: PLC0415

            weights = random_weights(arch, seed)
            _PREPARED.clear()
            _PREPARED[key] = (flatten(weights), symmetry_split(arch, weights))
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


def empty_factor(n_cols: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A U x U factor of no rows (zeros, U = `n_cols`), column-major so that LAPACK factors its
    leading rows in place (NOTE [Reduction of row blocks])."""
    return torch.zeros((n_cols, n_cols), dtype=dtype).T


def _factor_leading_(R: torch.Tensor, m: int) -> None:
    """Replace the first m rows of the column-major U x U `R` (m <= U) in place by their
    triangular factor (LAPACK geqrf on the leading rows, with R's leading dimension); the rows
    from m on are left as they are."""
    if m == 0:
        return
    head = R[:m]
    tau = torch.empty(min(m, R.shape[1]), dtype=R.dtype)
    torch.geqrf(head, out=(head, tau))
    head.triu_()  # clears the reflectors stored below the diagonal


def add_rows_(R: torch.Tensor, m: int, K: torch.Tensor) -> int:
    """Add the rows `K` (k x U) to the factor `R` (U x U) of `m` rows; returns the new count.

    Below U rows, R's first m rows are the rows themselves (raw, not yet factored) and the rest
    are zeros: K's rows are copied under them, and the block that brings the count to U has the
    U rows factored in place; later rows are folded in (`fold.fold_rows_`, which overwrites K).
    A caller that stops below U rows factors them with `_factor_leading_(R, m)`.
    """
    U = R.shape[1]
    if m < U:
        take = min(U - m, K.shape[0])
        R[m: m + take] = K[:take]
        m += take
        K = K[take:]
        if m == U:
            _factor_leading_(R, U)
    if K.shape[0]:
        fold_rows_(R, K)
        m += K.shape[0]
    return m


def combine_factors_(A: torch.Tensor, m_a: int, B: torch.Tensor, m_b: int,
                     step: int | None = None) -> torch.Tensor:
    """The factor of the rows of the factors A (m_a rows) and B (m_b rows), both U x U, built in
    A's storage: A is overwritten and returned, B is only read (NOTE [Reduction of row blocks]).

    While m_a + m_b <= U, B's rows are stacked under A's and factored in place (the rows past
    m_a + m_b stay exact zeros); past U, B's rows are folded into A a block at a time, each into
    A's trailing block only (NOTE [Folding a triangular factor]), `step` rows at a time
    (default `memory.dask_fold_rows`). Working set: A, B and one copied block of B's rows with
    the fold's panel (`memory.dask_tree_step_bytes`).
    """
    U = A.shape[1]
    if m_a + m_b <= U:
        A[m_a: m_a + m_b] = B[:m_b]
        _factor_leading_(A, m_a + m_b)
        return A
    step = step or dask_fold_rows(U)
    for r0 in range(0, min(m_b, U), step):
        r1 = min(m_b, U, r0 + step)
        # A copy, never a view: fold_rows_ overwrites its rows, and B is only read here.
        K = B[r0:r1, r0:].clone(memory_format=torch.contiguous_format)
        fold_rows_(A[r0:, r0:], K)
    return A


def chunk_samples(n_samples: int, parts: int, rows_per_sample: int, n_cols: int) -> int:
    """Samples per chunk of a batch of `n_samples`: one chunk per worker thread, but at most
    2 U rows (U = `n_cols`), so that a lost worker or a slow chunk costs at most that; at least
    one sample. A chunk's memory does not grow with its rows (they are folded as they come)."""
    per = -(-n_samples // parts)
    return max(1, min(per, (2 * n_cols) // rows_per_sample))


def _chunk_task(arch: Architecture, seed: int, X: torch.Tensor, block: int,
                threads: int | None) -> dict:
    """On a worker: the rows J Q2 of the samples X, computed `block` samples at a time as the
    local path computes them, and added to a U x U triangular factor as they come (`add_rows_`);
    with the rows it stands for, the tangent leak and the seconds spent."""
    t0 = time.perf_counter()
    params, split = _prepared(arch, seed, threads)
    R, m, leak = None, 0, 0.0
    for sub in torch.split(X, block):
        with AUTODIFF_LOCK:
            reduced, sub_leak = split.rows(arch, params, sub)
        if R is None:
            R = empty_factor(reduced.shape[1], reduced.dtype)
        m = add_rows_(R, m, reduced)
        del reduced
        leak = max(leak, sub_leak)
    if m < R.shape[1]:
        _factor_leading_(R, m)
    return {"R": R, "rows": m, "leak": leak, "seconds": time.perf_counter() - t0}


def _combine_task(a: dict, b: dict) -> dict:
    """On a worker: the factor of two factors' rows, built in the storage of the one with more
    rows, which is overwritten (NOTE [In-place tree steps])."""
    t0 = time.perf_counter()
    if b["rows"] > a["rows"]:
        a, b = b, a
    R = combine_factors_(a["R"], a["rows"], b["R"], b["rows"])
    return {"R": R, "rows": a["rows"] + b["rows"], "leak": max(a["leak"], b["leak"]),
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
        self.block = max(1, NUMERICAL_ROW_BLOCK_BYTES // (self.rows_per_sample * arch.n_params * 8))

    def add(self, X: torch.Tensor) -> None:
        """Keep the samples X (N x d_0 x t floats) for the batch `factor` sends."""
        self.waiting.append(X.cpu())

    def scaled_factor(self, say: Progress) -> torch.Tensor:
        """`factor()` with unit columns, scaled in place (the client's own copy; the root stays on
        the cluster for the next batch), so that the client holds one U x U matrix."""
        from ..core.rank import unit_scaled  # noqa: PLC0415

        return unit_scaled(self.factor(say), dim=0, inplace=True)

    def factor(self, say: Progress) -> torch.Tensor:
        """Wait for the chunks, reduce them (and the previous R) by a tree on the workers, and
        gather the root: a triangular factor with the singular values of every row so far (its
        first min(rows, U) rows: the others are zeros), the client's own copy."""
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
        R = out["R"][: out["rows"]]
        if self.in_process:  # the worker's own tensor, which the next tree step overwrites
            R = R.clone()
        self.leak = out["leak"]
        self.backend["chunks"] += total
        self.backend["worker_seconds"] = out["seconds"]
        self.seconds_jacobian += time.perf_counter() - t0
        return R

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
