"""The numerical rank on a Dask cluster (`dim --backend dask`): same samples, same rank, U x U on
the client; the workers' memory budgets; the bad-input lines (issue 13)."""

from __future__ import annotations

import contextlib
import io
import sqlite3
import warnings

import dask
import pytest
import torch
from conftest import signed_rows
from distributed import LocalCluster

from neuromanifold import Architecture, neuromanifold_dim
from neuromanifold.cli import main
from neuromanifold.core.seeds import seeded_generator
from neuromanifold.dimension import dask_rank
from neuromanifold.dimension.memory import (dask_client_estimate, dask_fold_rows,
                                            dask_worker_estimate, numerical_estimate)
from neuromanifold.dimension.numerical import LocalRows
from neuromanifold.errors import ResourceError
from neuromanifold.sweeps.engine import sweep

# Dask's own memory policing off, so that a small `memory_limit` is only a number the budget reads.
_NO_POLICING = {"distributed.worker.memory.target": False, "distributed.worker.memory.spill": False,
                "distributed.worker.memory.pause": False,
                "distributed.worker.memory.terminate": False}


@pytest.fixture(scope="module")
def scheduler():
    """The address of a 2-worker, in-process LocalCluster (one thread each)."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0", silence_logs=40) as cluster:
        yield cluster.scheduler_address


@pytest.fixture()
def small_workers():
    """The address of a 2-worker in-process LocalCluster whose workers have 1 GB each."""
    with dask.config.set(_NO_POLICING), LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, memory_limit="1GB",
            dashboard_address=":0", silence_logs=40) as cluster:
        yield cluster.scheduler_address


def _quiet_dim(arch, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return neuromanifold_dim(arch, method="numerical", seed=3, **options)


@pytest.mark.parametrize("widths,keys,t,attention", [((5, 4, 3), (2, 1), 6, "softmax"),
                                                     ((3, 4, 2), (2, 3), 5, "lightning")])
def test_dask_rank_equals_the_local_rank(scheduler, widths, keys, t, attention):
    """Rank, status, N and the rank history on Dask equal the local path's (same seeded samples)."""
    arch = Architecture(widths, keys, t, attention)
    local = _quiet_dim(arch)
    remote = _quiet_dim(arch, backend="dask", scheduler=scheduler)
    assert (remote.dimension, remote.status, remote.n_samples, remote.rank_history) == \
        (local.dimension, local.status, local.n_samples, local.rank_history)
    assert remote.upper_bound == local.upper_bound
    assert abs(remote.gap - local.gap) < 1e-6  # the same samples: the same singular values
    assert abs(remote.sigma_before - local.sigma_before) < 1e-9 * local.sigma_before
    assert remote.backend["name"] == "dask" and remote.backend["workers"] == 2
    assert remote.backend["chunks"] >= 2 and "backend" not in local.to_dict()
    assert any("computed on Dask" in note for note in remote.notes)


def test_combined_factor_has_the_jacobian_singular_values(scheduler):
    """The tree-combined R (two batches; chunks of 4 samples computed 3 at a time) has the
    stacked Jacobian's singular values and column norms to 1e-10 relative, and is at most U x U."""
    arch = Architecture((6, 5, 4), (3, 2), 3, "softmax")
    local = LocalRows(arch, 7, torch.device("cpu"))
    remote = dask_rank.DaskRows(arch, 7, scheduler, lambda _m: None)
    remote.block = 3
    try:
        gen = seeded_generator(7, "inputs")
        for n in (5, 3, 4):  # three batches: the second factor() combines with the first R
            X = torch.randn((n, 6, 3), generator=gen, dtype=torch.float64)
            local.add(X)
            remote.add(X)
            if n == 3:
                remote.factor(lambda _m: None)
        R = remote.factor(lambda _m: None)
    finally:
        remote.close()
    J = local.factor(lambda _m: None)
    assert J.shape == (12 * 3 * 4, arch.n_params - local.split_rank)
    assert R.shape[0] <= R.shape[1] == J.shape[1]
    s_J, s_R = torch.linalg.svdvals(J), torch.linalg.svdvals(R)
    assert float((s_J - s_R).abs().max() / s_J[0]) < 1e-10
    assert torch.allclose(J.norm(dim=0), R.norm(dim=0), rtol=1e-10, atol=0)
    assert remote.split_rank == local.split_rank and remote.backend["chunks"] == 2 + 2


def _factor_of(rows: torch.Tensor, blocks: tuple[int, ...]) -> torch.Tensor:
    """The U x U factor of `rows` added in blocks of the given sizes, as a chunk task adds them."""
    R, m = dask_rank.empty_factor(rows.shape[1]), 0
    for block in torch.split(rows.clone(), list(blocks)):
        m = dask_rank.add_rows_(R, m, block)
    if m < R.shape[1]:
        dask_rank._factor_leading_(R, m)
    assert m == rows.shape[0]
    return R


@pytest.mark.parametrize("m_a,m_b,blocks_a", [(23, 9, (7, 16)), (50, 23, (11, 13, 19, 7)),
                                              (23, 19, (23,)), (41, 41, (40, 1))])
def test_factors_added_and_combined_in_place_equal_the_stacked_qr(m_a, m_b, blocks_a):
    """Rows added to a U x U factor in blocks (copied, factored at U rows, folded after) and two
    factors combined in place (stacked below U rows, folded a block of rows at a time past it)
    give the QR factor of all rows stacked, with exact zero rows past their count; the factor
    folded into is the overwritten one, the other is left unchanged."""
    U = 37
    g = torch.Generator().manual_seed(m_a * m_b)
    J_a, J_b = (torch.randn(m, U, generator=g, dtype=torch.float64) for m in (m_a, m_b))
    A, B = _factor_of(J_a, blocks_a), _factor_of(J_b, (m_b,))
    for R, J in ((A, J_a), (B, J_b)):
        k = min(J.shape[0], U)
        torch.testing.assert_close(signed_rows(R[:k]), signed_rows(torch.linalg.qr(J, mode="r").R),
                                   rtol=0, atol=1e-12)
        assert torch.equal(R, R.triu()) and not R[k:].any()
    B_before = B.clone()
    R = dask_rank.combine_factors_(A, m_a, B, m_b, step=5)  # several blocks of B's rows
    k = min(m_a + m_b, U)
    stacked = torch.linalg.qr(torch.cat([J_a, J_b]), mode="r").R
    assert R.data_ptr() == A.data_ptr() and torch.equal(B, B_before)
    assert torch.equal(R, R.triu()) and not R[k:].any()
    torch.testing.assert_close(signed_rows(R[:k]), signed_rows(stacked), rtol=0, atol=1e-12)


def test_gathered_factors_stay_unchanged_while_the_root_grows(scheduler):
    """On an in-process cluster (where the client receives the workers' own tensors) a factor
    gathered after one batch is not changed by the next batch's tree steps, which overwrite the
    root; the grown factor has the stacked Jacobian's singular values (chunks of 84 and 72 rows
    cross U = 68 inside a block of 36)."""
    arch = Architecture((6, 5, 4), (3, 2), 3, "softmax")
    local = LocalRows(arch, 7, torch.device("cpu"))
    remote = dask_rank.DaskRows(arch, 7, scheduler, lambda _m: None)
    remote.block = 3
    assert remote.in_process and remote.n_cols == 68
    gathered = []
    try:
        gen = seeded_generator(7, "inputs")
        for n in (13, 4, 1):
            X = torch.randn((n, 6, 3), generator=gen, dtype=torch.float64)
            local.add(X)
            remote.add(X)
            R = remote.factor(lambda _m: None)
            gathered.append((R, R.clone()))
    finally:
        remote.close()
    for R, copy in gathered:
        assert torch.equal(R, copy)
    J = local.factor(lambda _m: None)
    assert J.shape == (18 * 12, 68) and R.shape == (68, 68)
    s_J, s_R = torch.linalg.svdvals(J), torch.linalg.svdvals(R)
    assert float((s_J - s_R).abs().max() / s_J[0]) < 1e-10
    assert torch.allclose(J.norm(dim=0), R.norm(dim=0), rtol=1e-10, atol=0)
    assert remote.backend["chunks"] == 2 + 2 + 1


def _cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


DIM = ["dim", "--widths", "5,4,3", "--keys", "2,1", "--tokens", "6", "--attention", "softmax"]


@pytest.mark.parametrize("extra,option", [
    (["--scheduler", "tcp://127.0.0.1:9"], "scheduler"),
    (["--backend", "dask", "--method", "certified"], "method"),
    (["--backend", "dask", "--method", "exact", "--attention", "lightning"], "method"),
    (["--backend", "dask", "--device", "cuda", "--method", "numerical"], "device"),
    (["--backend", "spark"], "backend"),
    (["--backend", "dask", "--heads", "2,2", "--method", "numerical"], "backend"),
    (["--backend", "dask", "--scheduler", "no port here", "--method", "numerical"], "scheduler"),
    (["--backend", "dask", "--hf-config", "config.json"], "backend"),
    (["--backend", "dask", "--method", "numerical", "--prime", "101"], "prime"),
])
def test_bad_dask_options_are_one_line_exit_2(extra, option):
    """Bad --backend/--scheduler combinations: exit 2, one stderr line naming the option."""
    code, out, err = _cli(DIM + extra)
    lines = err.strip().splitlines()
    assert (code, out, len(lines)) == (2, "", 1), err
    assert f"`{option}`" in lines[0] and "Traceback" not in err


def test_unreachable_scheduler_is_exit_2(monkeypatch):
    """An address where no scheduler answers is refused in one line (exit 2) after the wait."""
    monkeypatch.setattr(dask_rank, "CONNECT_SECONDS", 1)
    code, out, err = _cli(DIM + ["--method", "numerical", "--backend", "dask",
                                 "--scheduler", "tcp://127.0.0.1:9"])
    lines = err.strip().splitlines()
    assert (code, out) == (2, "")
    assert lines[-1].startswith("neuromanifold: error: `scheduler` must be the address of a "
                                "running Dask scheduler; got 'tcp://127.0.0.1:9'")


def test_chunks_have_one_per_thread_and_at_most_two_u_rows():
    """A batch is cut into one chunk per worker thread unless that passes 2 U rows."""
    assert dask_rank.chunk_samples(13, 2, 1024, 6016) == 7
    assert dask_rank.chunk_samples(25, 2, 2048, 24064) == 13
    assert dask_rank.chunk_samples(60, 2, 2048, 24064) == 23
    assert dask_rank.chunk_samples(3, 5, 5000, 1000) == 1


def test_dask_client_estimate_is_the_u_by_u_factor():
    """The client's estimate is two U x U matrices plus fixed costs, whatever N; below the local
    full route's of a large network (its factor with two copies, rows and a Jacobian block). A
    worker's is one U x U factor with a block of rows, or a tree step's two factors and a copied
    block of rows."""
    arch = Architecture((64, 64, 64), (8, 8), 16, "softmax")
    U = arch.n_params - (8 * 8 * 2 + 64 * 64)
    client = dask_client_estimate(arch)
    assert client.parts["R factor and its singular values"] == 2 * U * U * 8
    assert client.peak == sum(client.parts.values())
    # The worker's chunk is the largest `chunk_samples` allows (one thread): 11 of 13 samples.
    rows = dask_rank.chunk_samples(13, 1, 16 * 64, U) * 16 * 64
    assert rows == 11 * 1024
    panel = 3 * 64 * U * 8  # the fold's products of a panel of 64 reflectors with the factor
    worker = dask_worker_estimate(arch)
    assert worker.parts["chunk factor (U x U, rows added in place)"] == U * U * 8 + panel
    # A tree step folds U / 16 = 376 rows of one factor into the other at a time.
    assert dask_fold_rows(U) == 376
    assert worker.parts["tree step (two U x U factors, one folded into the other)"] == \
        (2 * U * U + 376 * U) * 8 + panel
    big = Architecture((128, 128, 128), (16, 16), 16, "softmax")
    assert dask_client_estimate(big).peak < 0.6 * numerical_estimate(big, route="full").peak
    worker = dask_worker_estimate(big)
    # 64 MiB of its 24,064 columns are 348 rows (U / 16 would be 1504).
    assert dask_fold_rows(24064) == 348
    assert worker.parts["tree step (two U x U factors, one folded into the other)"] == \
        (2 * 24064 ** 2 + 348 * 24064 + 3 * 64 * 24064) * 8
    assert worker.peak < 10 ** 10 and "one worker thread" in worker.what


def test_dask_client_over_budget_is_refused_before_connecting():
    """A client budget below the U x U estimate is refused before any cluster is reached."""
    arch = Architecture((7, 6, 5), (3, 2), 4, "softmax")
    with pytest.raises(ResourceError, match="on Dask, client"):
        neuromanifold_dim(arch, method="numerical", backend="dask",
                          scheduler="tcp://127.0.0.1:9", max_memory="1M")


def test_a_local_cluster_is_checked_as_client_plus_workers_before_starting():
    """Without --scheduler the client and both workers share this machine: their estimates add
    up, and the 40,960-parameter network is refused up front with a budget each part alone meets."""
    from neuromanifold.dimension import memory
    from neuromanifold.dimension.dask_rank import LOCAL_WORKERS

    arch = Architecture((128, 128, 128), (16, 16), 16, "softmax")
    whole = memory.local_cluster_estimate(arch, LOCAL_WORKERS)
    client, worker = memory.dask_client_estimate(arch), memory.dask_worker_estimate(arch)
    assert whole.peak == client.peak + LOCAL_WORKERS * worker.peak
    budget = max(client.peak, worker.peak) + 2 ** 30
    assert budget < whole.peak
    with pytest.raises(ResourceError, match="on a local Dask cluster"):
        neuromanifold_dim(arch, method="numerical", backend="dask", max_memory=str(budget))


def test_dask_workers_refuse_a_rank_over_their_budget(small_workers):
    """Workers of 1 GB compute a small rank (as the local path does) and refuse the 10,240-
    parameter one, whose one-task estimate (a Jacobian block beside a 6016^2 factor) exceeds
    their budget."""
    small = Architecture((5, 4, 3), (2, 1), 6, "softmax")
    assert _quiet_dim(small, backend="dask", scheduler=small_workers).dimension == \
        _quiet_dim(small).dimension
    big = Architecture((64, 64, 64), (8, 8), 16, "softmax")
    assert dask_worker_estimate(big).peak > 10 ** 9 > dask_worker_estimate(small).peak
    with pytest.raises(ResourceError, match=r"^`scheduler` must give Dask workers at least the "
                       r"estimated peak per thread; got 953.7 MB per thread \(the Dask worker's "
                       r"memory limit shared by its threads\) for .* one worker thread"):
        neuromanifold_dim(big, method="numerical", backend="dask", scheduler=small_workers)


def test_sweep_on_dask_stores_items_over_the_worker_budget_as_refused(small_workers, tmp_path):
    """A sweep item with no --max-memory gets its worker's budget (1 GB here): the small item
    is computed, the 33,536-parameter one (estimate over 1 GB) is stored 'refused'."""
    grid = tmp_path / "g.toml"
    grid.write_text('widths = [[4, 3, 2], [128, 128, 128]]\nkeys = [[2, 1]]\ntokens = [16]\n'
                    'attention = ["softmax"]\nmethod = ["numerical"]\n')
    assert numerical_estimate(Architecture((128, 128, 128), (2, 1), 16, "softmax")).peak > 10 ** 9
    summary = sweep(grid, tmp_path / "r.sqlite", backend="dask", scheduler=small_workers, seed=5)
    assert summary.counts == {"settled": 1, "refused": 1}
    with sqlite3.connect(tmp_path / "r.sqlite") as conn:
        rows = dict(conn.execute("SELECT widths, status || ': ' || message FROM results"))
    assert rows["4,3,2"].startswith("settled")
    assert rows["128,128,128"].startswith("refused: `max_memory` must be at least the estimated "
                                       "peak; got 953.7 MB (the Dask worker's memory limit")


def test_cli_dask_without_scheduler_starts_a_local_cluster():
    """`dim --backend dask` alone runs on a LocalCluster of 2 workers, with the local rank, and
    says so in the JSON and on stderr."""
    import json

    args = ["dim", "--widths", "4,3,2", "--keys", "1,2", "--tokens", "5", "--attention", "softmax",
            "--method", "numerical", "--seed", "4", "--json"]
    code, out, _ = _cli(args)
    code_dask, out_dask, err = _cli(args + ["--backend", "dask"])
    local, remote = json.loads(out), json.loads(out_dask)
    assert code == code_dask == 0
    assert (remote["dimension"], remote["status"], remote["n_samples"]) == \
        (local["dimension"], local["status"], local["n_samples"])
    assert remote["backend"]["workers"] == dask_rank.LOCAL_WORKERS == 2
    assert remote["backend"]["scheduler"] is None
    assert "starting a LocalCluster of 2 workers" in err and "chunk 1/" in err


def test_sweep_on_a_multithreaded_worker_computes_every_item(tmp_path):
    """Three items on one worker with three threads (one process) are all settled, as locally:
    torch.func's autodiff runs one task at a time in a worker process."""
    grid = tmp_path / "g.toml"
    grid.write_text('widths = [[5, 4, 3], [6, 5, 4], [7, 5, 3]]\nkeys = [[2, 1]]\ntokens = [4]\n'
                    'attention = ["softmax"]\nmethod = ["numerical"]\n')
    with LocalCluster(n_workers=1, threads_per_worker=3, processes=False, dashboard_address=":0",
                      silence_logs=40) as cluster:
        summary = sweep(grid, tmp_path / "d.sqlite", backend="dask",
                        scheduler=cluster.scheduler_address, seed=1)
    assert summary.counts == {"settled": 3}
    with sqlite3.connect(tmp_path / "d.sqlite") as conn:
        stored = dict(conn.execute("SELECT widths, dimension FROM results"))
    for widths in ((5, 4, 3), (6, 5, 4), (7, 5, 3)):
        arch = Architecture(widths, (2, 1), 4, "softmax")
        assert stored[",".join(map(str, widths))] == neuromanifold_dim(
            arch, method="numerical", seed=1).dimension
