"""One large softmax case (issue 2): l = 2, delta = 64, a = 8, t = 16 (10,240 parameters).

Prints the numerical dimension with its gap, the time split (Jacobian / rank) and peak memory
(max resident set size of this process; on a GPU also torch's peak allocation).
Run: .venv/bin/python benchmarks/bench_large_softmax.py [--delta 64] [--keys 8] [--tokens 16] [--device cpu]
"""

import argparse
import resource
import time

import torch

from neuromanifold import Architecture, numerical_dim


def architecture_options(doc: str) -> argparse.ArgumentParser:
    """The options naming the network (l = 2, widths delta, keys a, t tokens); shared with
    bench_dask_dim.py."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--delta", type=int, default=64)
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--attention", default="softmax")
    return parser


def architecture(args: argparse.Namespace) -> Architecture:
    """The network the options name."""
    return Architecture((args.delta,) * 3, (args.keys,) * 2, args.tokens, args.attention)


def main() -> None:
    parser = architecture_options(__doc__)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    arch = architecture(args)
    print(f"{arch}: {arch.n_params} parameters; torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, device {args.device}")
    t0 = time.perf_counter()
    r = numerical_dim(arch, device=args.device, progress=lambda m: print("  " + m, flush=True))
    wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"dimension {r.dimension} [{r.method}, {r.status}, gap {r.gap:.1f} decades, N = {r.n_samples}]")
    print(f"formula {r.formula.name} = {r.formula.value} (hypotheses hold: {r.formula.hypotheses_hold})")
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in r.seconds.items()) + f" (wall {wall:.1f})")
    print(f"peak resident memory {peak_mb:.0f} MiB")
    if torch.cuda.is_available() and args.device != "cpu":
        print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
