"""Reverse-mode Jacobian of a block network, old against new in one run: through the flat
parameter vector (`block_forward_flat` under `jacrev`, the path before 2026-12-04) and in the
blocks themselves (`blocks.block_reverse_jacobian`), per sample as `local_geometry`'s Gram route
takes it, on the 20,640-parameter decoder of bench_local_geometry.py.

Run: OMP_NUM_THREADS=2 PYTHONPATH=src python benchmarks/bench_block_jacobian.py [--width 32]
     [--samples 6] [--repeat 3]

Printed: seconds per call of each (median of --repeat, alternating old and new), their ratio,
and whether the two Jacobians are equal entry for entry. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--samples", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import torch
    from torch.func import jacrev, vmap

    from neuromanifold import Architecture
    from neuromanifold.core.blocks import (block_forward_flat, block_reverse_jacobian,
                                           flatten_blocks, random_block_weights)
    from neuromanifold.core.seeds import seeded_generator
    from neuromanifold.core.tokens import input_stream

    d = args.width
    arch = Architecture((d, d, d), d // 4, 4, "softmax", heads=4, values=d // 4, residual=True,
                        mlp=2 * d, activation="gelu", norm="layernorm", causal=True, vocab=64,
                        final_norm=True)
    params = flatten_blocks(arch, random_block_weights(arch, 0))
    X = input_stream(arch, seeded_generator(0, "inputs"))(args.samples)

    def flat(w, x):
        return block_forward_flat(arch, w, x).reshape(-1)

    def old():
        return vmap(jacrev(flat), in_dims=(None, 0))(params, X).reshape(-1, arch.n_params)

    def new():
        return block_reverse_jacobian(arch, params, X, per_sample=True)

    same = torch.equal(old(), new())          # also the warm-up of both
    times = {"old": [], "new": []}
    for _ in range(args.repeat):
        for name, f in (("old", old), ("new", new)):
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    o, n = statistics.median(times["old"]), statistics.median(times["new"])
    print(f"{arch} ({arch.n_params} parameters), {args.samples} samples, "
          f"{args.samples * arch.output_width * arch.tokens} rows")
    print(f"through the flat vector {o:.3f} s; in the blocks {n:.3f} s; {o / n:.1f}x; "
          f"equal entry for entry: {same}; load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
