"""Benchmark `local_geometry` on a 20,000-parameter block network (issue 34's size goal).

Usage: OMP_NUM_THREADS=2 PYTHONPATH=src python benchmarks/bench_local_geometry.py
       [--width 32] [--vocab 64] [--mlp 64] [--tokens 4] [--no-parts] [--degenerate]

The case: a GPT-2-like decoder of 2 layers, stream width d, 4 heads of key and value width
d / 4 with output maps, a gelu MLP of width m, layernorm, a final norm, untied logits over a
vocabulary V, t tokens, causal softmax (d = 32, m = 64, V = 64, t = 4: 20,640 parameters), at a
random point, or with `--degenerate` at one with layer 1 head 1's output map zeroed. Printed: the planner's memory estimate before
any allocation, the route, the bracket, the profile, the families, the parts with an excess,
and seconds per stage and peak resident memory. Figures, not assertions (the goal: at most 10
minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--mlp", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-parts", action="store_true")
    parser.add_argument("--degenerate", action="store_true")
    args = parser.parse_args()

    import torch

    from neuromanifold import Architecture
    from neuromanifold.core.blocks import random_block_weights
    from neuromanifold.dimension import local
    from neuromanifold.dimension.memory import format_bytes

    d = args.width
    arch = Architecture((d, d, d), d // 4, args.tokens, "softmax", heads=4, values=d // 4,
                        residual=True, mlp=args.mlp, activation="gelu", norm="layernorm",
                        causal=True, vocab=args.vocab, final_norm=True)
    blocks = random_block_weights(arch, args.seed)
    if args.degenerate:
        blocks["O_1_1"] = torch.zeros_like(blocks["O_1_1"])
    per_sample = arch.output_width * arch.tokens
    n = int(local.GRAM_ROW_FACTOR * arch.n_params / per_sample) + 2
    est = local.local_estimate(arch, n, True, False)
    print(f"architecture     {arch}")
    print(f"parameters       {arch.n_params}")
    print(f"planned memory   {est.describe()}", flush=True)
    t0 = time.perf_counter()
    g = local.local_geometry(arch, blocks, seed=args.seed, parts=not args.no_parts,
                             progress=lambda m: print(f"  [{time.perf_counter() - t0:7.1f} s] {m}",
                                                      file=sys.stderr, flush=True))
    wall = time.perf_counter() - t0
    print(f"route            {g.route}, N = {g.n_samples}")
    print(f"bracket          {g.lower_bound} <= rank <= {g.upper_bound}: {g.status}, rank {g.rank}, "
          f"float64 {g.float_rank} (gap {g.gap:.1f})")
    print(f"generic          {g.generic_dimension} [{g.generic_status}]; excess {g.excess}")
    print("profile          " + ", ".join(f"{p['tolerance']:g}: {p['effective_dimension']}"
                                          for p in g.profile))
    print(f"tangents         {g.tangent_count} split off (registry {g.registry_count}); deficient "
          f"families: {g.deficient_families() or 'none'}")
    for p in g.parts:
        if p["excess"] or p["causes"]:
            print(f"part             {p['name']}: {p['rank']} / {p['generic_rank']} {p['causes']}")
    print("seconds          " + ", ".join(f"{k} {v:.1f}" for k, v in g.seconds.items())
          + f" (wall {wall:.1f})")
    use = resource.getrusage(resource.RUSAGE_SELF)
    print(f"cpu seconds      {use.ru_utime + use.ru_stime:.1f} (on a shared machine the wall time "
          "also counts other processes' load)")
    peak = use.ru_maxrss * 1024
    print(f"peak memory      {format_bytes(peak)} (planned {format_bytes(est.peak)})")


if __name__ == "__main__":
    main()
