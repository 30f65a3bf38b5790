"""Benchmark the certified dimension of a transformer block network (exact ranks over F_p).

Usage: PYTHONPATH=src python benchmarks/bench_blocks.py [--width 8] [--mlp 8] [--seed 0]

The case: 2 lightning layers of width d, 4 heads each with key and value width d, output
projections, residual connections and an MLP of width m (square activation), t = 3 tokens
(d = 8, m = 8: 2,304 parameters). Printed: parameters, the certified dimension and status, the
per-family symmetry ranks, and seconds for the symmetry tangents, the Jacobian mod p, the exact
ranks and the total. Timings depend on machine load; they are figures, not assertions.
"""

from __future__ import annotations

import argparse
import resource
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--mlp", type=int, default=8)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from neuromanifold import Architecture
    from neuromanifold.dimension.exact import exact_dim

    d = args.width
    arch = Architecture((d, d, d), (d, d), 3, heads=(args.heads,) * 2, values=(d, d), residual=True,
                        mlp=(args.mlp,) * 2)
    result = exact_dim(arch, certify=True, seed=args.seed,
                       progress=lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
    print(f"architecture     {arch}")
    print(f"parameters       {arch.n_params}")
    print(f"dimension        {result.dimension} ({result.status}; upper bound {result.upper_bound})")
    print("symmetries       " + ", ".join(f"{k} {v}" for k, v in result.symmetries.items() if v))
    print("seconds          " + ", ".join(f"{k} {v:.1f}" for k, v in result.seconds.items()))
    print(f"peak memory      {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20:.2f} GB")


if __name__ == "__main__":
    main()
