"""The numerical rank on a Dask LocalCluster (`dim --backend dask`) against the local path.

Default: the 10,240-parameter softmax case of bench_large_softmax.py (l = 2, delta = 64, a = 8,
t = 16) on a LocalCluster of 2 worker processes with one thread each (torch set to one thread per
worker). Prints the dimension with its gap and N, the time split, the client's peak resident
memory (this process: client and scheduler) and each worker's, and the memory estimates.
Run bench_large_softmax.py with the same options for the local figures.
Run: .venv/bin/python benchmarks/bench_dask_dim.py [--delta 64] [--keys 8] [--tokens 16] [--workers 2]
"""

import resource
import time

from bench_large_softmax import architecture, architecture_options
from distributed import Client, LocalCluster

from neuromanifold import neuromanifold_dim
from neuromanifold.dimension.memory import dask_client_estimate, dask_worker_estimate


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def main() -> None:
    parser = architecture_options(__doc__)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    arch = architecture(args)
    print(f"{arch}: {arch.n_params} parameters; LocalCluster of {args.workers} worker processes, "
          "1 thread each")
    print("estimates: " + dask_client_estimate(arch).describe() + "; "
          + dask_worker_estimate(arch).describe())
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0", silence_logs=40) as cluster, Client(cluster) as client:
        client.run(_one_thread)
        t0 = time.perf_counter()
        r = neuromanifold_dim(arch, method="numerical", backend="dask",
                              scheduler=cluster.scheduler_address,
                              progress=lambda m: print("  " + m, flush=True))
        wall = time.perf_counter() - t0
        workers = client.run(_peak_mib)
    print(f"dimension {r.dimension} [{r.method}, {r.status}, gap {r.gap:.1f} decades, N = {r.n_samples}]")
    print(f"formula {r.formula.name} = {r.formula.value} (hypotheses hold: {r.formula.hypotheses_hold})")
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in r.seconds.items())
          + f" (wall {wall:.1f}); on the workers {r.backend['worker_seconds']:.1f} s in "
          f"{r.backend['chunks']} chunks")
    print(f"peak resident memory: client {_peak_mib():.0f} MiB; workers "
          + ", ".join(f"{v:.0f}" for v in workers.values()) + " MiB")


if __name__ == "__main__":
    main()
