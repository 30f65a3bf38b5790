"""One tree step of the numerical rank on Dask (`dimension.dask_rank`) on a LocalCluster of 2
worker processes: two U x U factors, one on each worker, combined on the first (the other is
fetched), by the in-place fold (`_combine_task`) and by the stacked QR it replaced (a 2U x U
column-major stack factored in place and its triangle copied out).

Prints, for each, the worker's resident memory before the step (holding its own factor), its
peak during the step (`VmHWM`, reset just before), the step's seconds, and the working set it
implies (the peak above the resident memory before, plus the factor held) against the model of
`memory.dask_worker_estimate`; and the largest difference between the two results' singular
values. The cluster runs one torch thread per worker.
Run: .venv/bin/python benchmarks/bench_dask_tree_step.py [--cols 3000]
"""

import argparse
import time

import torch
from distributed import Client, LocalCluster, wait

from neuromanifold.dimension import dask_rank
from neuromanifold.dimension.memory import dask_fold_rows, dask_tree_step_bytes

MIB = 2 ** 20


def _one_thread() -> None:
    torch.set_num_threads(1)


def _status(field: str) -> int:
    """A field of /proc/self/status in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> int:
    """Reset this process's peak resident memory to its current one (Linux); the current one."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return _status("VmRSS")


def _peak() -> int:
    return _status("VmHWM")


def _random_factor(n_cols: int, seed: int) -> dict:
    """A chunk task's result for n_cols + 7 random rows (factored at U rows, 7 folded in)."""
    g = torch.Generator().manual_seed(seed)
    R = dask_rank.empty_factor(n_cols)
    m = dask_rank.add_rows_(R, 0, torch.randn(n_cols + 7, n_cols, generator=g, dtype=torch.float64))
    return {"R": R, "rows": m, "leak": 0.0, "seconds": 0.0}


def _stacked_task(a: dict, b: dict) -> dict:
    """The tree step before the fold: [R_a; R_b] stacked column-major, geqrf in place, the
    triangle copied out."""
    t0 = time.perf_counter()
    U = a["R"].shape[1]
    stack = torch.empty((U, 2 * U), dtype=torch.float64).T
    stack[:U], stack[U:] = a["R"], b["R"]
    tau = torch.empty(U, dtype=torch.float64)
    torch.geqrf(stack, out=(stack, tau))
    R = stack[:U].triu()
    return {"R": R, "rows": a["rows"] + b["rows"], "leak": 0.0,
            "seconds": time.perf_counter() - t0}


def _step(client: Client, workers: list[str], task, n_cols: int, seed: int) -> tuple[dict, int, int]:
    """(result, resident bytes before, peak bytes during) of `task` on the first worker."""
    fa = client.submit(_random_factor, n_cols, seed, workers=workers[:1], pure=False)
    fb = client.submit(_random_factor, n_cols, seed + 1, workers=workers[1:], pure=False)
    wait([fa, fb])
    before = client.run(_reset_peak, workers=workers[:1])[workers[0]]
    out = client.submit(task, fa, fb, workers=workers[:1], pure=False).result()
    peak = client.run(_peak, workers=workers[:1])[workers[0]]
    del fa, fb
    return out, before, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cols", type=int, default=3000, help="U, the factors' size")
    args = parser.parse_args()
    U = args.cols
    factor = U * U * 8
    model = dask_tree_step_bytes(U)
    print(f"U = {U}: a factor is {factor / MIB:.0f} MiB; model of the fold step "
          f"{model / MIB:.0f} MiB (2 U^2 and {dask_fold_rows(U)} rows), of the stacked step "
          f"{5 * factor / MIB:.0f} MiB (5 U^2)")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0", silence_logs=40) as cluster, Client(cluster) as client:
        client.run(_one_thread)
        workers = sorted(client.nthreads())
        results = {}
        for name, task in (("fold", dask_rank._combine_task), ("stacked", _stacked_task)):
            out, before, peak = _step(client, workers, task, U, seed=11)
            results[name] = out["R"]
            print(f"{name:8s}: {out['seconds']:6.1f} s; worker resident {before / MIB:.0f} MiB "
                  f"before, peak {peak / MIB:.0f} MiB; working set {(peak - before + factor) / MIB:.0f}"
                  f" MiB (the peak above 'before', plus the factor held before)")
    torch.set_num_threads(1)  # as the workers (several threads on a busy machine are far slower)
    s_fold, s_stacked = (torch.linalg.svdvals(R) for R in results.values())
    print(f"largest singular-value difference, relative to the largest: "
          f"{float((s_fold - s_stacked).abs().max() / s_stacked[0]):.1e}")


if __name__ == "__main__":
    main()
