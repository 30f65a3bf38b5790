"""One large softmax case (issue 2): l = 2, delta = 64, a = 8, t = 16 (10,240 parameters).

Prints the numerical dimension with its gap, the time split (symmetries / Jacobian / rank) and
peak memory (max resident set size of this process). With --device cuda it also prints the GPU's
name, the seconds CUDA takes to start (before the timed run), torch's peak allocation and
reservation on the GPU beside the estimate the run was checked against, and one README table row.
With --certified it then proves the same network (`--method certified`, verified float64:
docs/verified.md) in the same process and prints both times and their ratio.
Run: .venv/bin/python benchmarks/bench_large_softmax.py [--delta 64] [--keys 8] [--tokens 16] [--device cpu] [--certified]
     python3 benchmarks/bench_large_softmax.py --device cuda --delta 128 --keys 16   (40,960 params)
     python3 benchmarks/bench_large_softmax.py --device cuda --delta 192 --keys 24   (92,160 params)
"""

import argparse
import resource
import time

import torch

from neuromanifold import Architecture, numerical_dim
from neuromanifold.core import rank as rank_module
from neuromanifold.dimension.memory import format_bytes, numerical_estimate, on_gpu
from neuromanifold.dimension.numerical import resolve_device


def architecture_options(doc: str) -> argparse.ArgumentParser:
    """The options naming the network (l = 2, widths delta, keys a, t tokens); shared with
    bench_dask_dim.py."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delta", type=int, default=64)
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--attention", default="softmax")
    return parser


def architecture(args: argparse.Namespace) -> Architecture:
    """The network the options name."""
    return Architecture((args.delta,) * 3, (args.keys,) * 2, args.tokens, args.attention)


def start_cuda() -> float:
    """Seconds to start CUDA (context, allocator, cuBLAS and cuSOLVER handles), spent here so
    that the run's phase times hold only its own work."""
    t0 = time.perf_counter()
    x = torch.ones((64, 64), dtype=torch.float64, device="cuda")
    torch.linalg.svdvals(x @ x, driver=rank_module.CUDA_SVD_DRIVER)
    torch.linalg.qr(x)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    return time.perf_counter() - t0


def main() -> None:
    parser = architecture_options(__doc__)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--svd-driver", choices=("gesvd", "gesvdj"), default=None,
                        help="cuSOLVER driver of the rank SVDs on a GPU (default: the package's, "
                             f"{rank_module.CUDA_SVD_DRIVER}); to compare speed and gap")
    parser.add_argument("--max-memory", default=None, help="budget, as `dim --max-memory`")
    parser.add_argument("--certified", action="store_true",
                        help="then prove it (method certified, CPU) and print the time ratio")
    args = parser.parse_args()
    if args.svd_driver is not None:
        rank_module.CUDA_SVD_DRIVER = args.svd_driver
    arch = architecture(args)
    print(f"{arch}: {arch.n_params} parameters; torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, device {args.device}")
    on_cuda = resolve_device(args.device).type == "cuda"  # a clear error where torch sees no GPU
    startup = start_cuda() if on_cuda else 0.0
    if on_cuda:
        free, total = torch.cuda.mem_get_info()
        estimate = on_gpu(numerical_estimate(arch))
        print(f"GPU {torch.cuda.get_device_name()} (CUDA {torch.version.cuda}): "
              f"{format_bytes(free)} free of {format_bytes(total)}; CUDA started in {startup:.1f} s; "
              f"rank SVD driver {rank_module.CUDA_SVD_DRIVER}; estimated peak {format_bytes(estimate.peak)}")
    t0 = time.perf_counter()
    r = numerical_dim(arch, device=args.device, max_memory=args.max_memory,
                      progress=lambda m: print(f"  [{time.perf_counter() - t0:7.1f} s] " + m, flush=True))
    wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"dimension {r.dimension} [{r.method}, {r.status}, gap {r.gap:.1f} decades, N = {r.n_samples}] "
          f"on {r.device}")
    print(f"formula {r.formula.name} = {r.formula.value} (hypotheses hold: {r.formula.hypotheses_hold})")
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in r.seconds.items()) + f" (wall {wall:.1f})")
    print(f"peak resident memory {peak_mb:.0f} MiB")
    if on_cuda:
        allocated, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
        print(f"peak GPU memory {allocated / 2**20:.0f} MiB allocated, {reserved / 2**20:.0f} MiB "
              f"reserved (estimate {format_bytes(estimate.peak)})")
        s = r.seconds
        print(f"README row: | softmax {','.join(map(str, arch.widths))} keys "
              f"{','.join(map(str, arch.keys))} t = {arch.tokens} ({arch.n_params:,} params), "
              f"{torch.cuda.get_device_name()} | {r.dimension:,}, {r.status}, gap {r.gap:.1f} decades "
              f"(N = {r.n_samples}) | {s['total']:.1f} s (Jacobian {s['jacobian']:.1f} s, rank "
              f"{s['rank']:.1f} s, {rank_module.CUDA_SVD_DRIVER}), {allocated / 2**30:.2f} GiB GPU peak "
              f"(estimate {format_bytes(estimate.peak)}) |")
    if args.certified:
        certified(arch, wall)


def certified(arch: Architecture, numerical_wall: float) -> None:
    """The certified dimension of `arch` on the CPU, timed against the numerical run's wall."""
    from neuromanifold.dimension.ball_dual import certified_dim  # noqa: PLC0415

    t0 = time.perf_counter()
    c = certified_dim(arch, progress=lambda m: print(f"  [{time.perf_counter() - t0:7.1f} s] " + m,
                                                     flush=True))
    wall = time.perf_counter() - t0
    print(f"certified dimension {c.dimension} [{c.status}, {c.lower_bound} <= dim <= "
          f"{c.upper_bound}, N = {c.n_samples}]")
    print("certified seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in c.seconds.items())
          + f" (wall {wall:.1f})")
    print(f"certified / numerical wall time: {wall:.1f} / {numerical_wall:.1f} = "
          f"{wall / numerical_wall:.2f}x; peak resident memory "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
