"""Check the `general` closed form against certified dimensions, and time the certified path.

Usage: PYTHONPATH=src python benchmarks/check_general.py --layers 2 [--tokens 1,2,3]
       [--max-width 6] [--max-key 4] [--sample 0] [--seed 0] [--jobs 1] [--shard K/M]

Every lightning architecture with `--layers` layers, widths 1..max-width, keys 1..max-key and the
given token counts (or a seeded random `--sample` of them) is certified over F_p (`exact_dim`);
printed: how many were certified, how many agree with `general`, every disagreement and every
uncertified item, and seconds per item (machine load changes these). `--jobs J` runs J worker
processes over the list; `--shard K/M` takes every M-th architecture from the K-th
(K = 0..M-1), so M separate processes (or machines) can cover one grid. A progress line goes to
stderr every 2,000 items of a worker.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import random
import sys
import time


# Grids larger than this are sampled by index instead of listed and shuffled.
_LIST_LIMIT = 30_000_000


def _decode(index: int, l: int, max_width: int, max_key: int, tokens: list[int]):
    """The architecture at `index` of the grid in `itertools.product` order (widths, keys, t)."""
    index, t = divmod(index, len(tokens))
    keys = []
    for _ in range(l):
        index, k = divmod(index, max_key)
        keys.append(k + 1)
    widths = []
    for _ in range(l + 1):
        index, w = divmod(index, max_width)
        widths.append(w + 1)
    return tuple(reversed(widths)), tuple(reversed(keys)), tokens[t]


def architectures(args: argparse.Namespace) -> list[tuple[tuple[int, ...], tuple[int, ...], int]]:
    """The grid (or its seeded sample, or this shard of it), in a fixed order."""
    l = args.layers
    tokens = [int(t) for t in args.tokens.split(",")]
    size = args.max_width ** (l + 1) * args.max_key ** l * len(tokens)
    if args.sample and size > _LIST_LIMIT:
        # Too large to list (l = 5, widths 1..8: 805 million): draw distinct indices and decode.
        picks = random.Random(args.seed).sample(range(size), min(args.sample, size))
        archs = [_decode(i, l, args.max_width, args.max_key, tokens) for i in picks]
    else:
        archs = [(w, a, t) for w in itertools.product(range(1, args.max_width + 1), repeat=l + 1)
                 for a in itertools.product(range(1, args.max_key + 1), repeat=l)
                 for t in tokens]
        if args.sample:
            random.Random(args.seed).shuffle(archs)
            archs = archs[:args.sample]
    k, m = map(int, args.shard.split("/"))
    return archs[k::m]


def check(job: tuple[list, int, int]) -> tuple[int, int, int, list[str]]:
    """Certify each architecture of one worker's share: (items, certified, agree, findings)."""
    archs, seed, worker = job
    import torch

    from neuromanifold import Architecture
    from neuromanifold.core.formulas import general
    from neuromanifold.dimension.exact import exact_dim

    torch.set_num_threads(1)
    certified = agree = 0
    findings = []
    start = time.perf_counter()
    for done, (w, a, t) in enumerate(archs):
        if done and done % 2000 == 0:
            print(f"worker {worker}: {done}/{len(archs)} items, {time.perf_counter() - start:.0f} s",
                  file=sys.stderr, flush=True)
        arch = Architecture(w, a, t)
        r = exact_dim(arch, seed=seed)
        g = general(arch).value
        if r.status != "certified":
            findings.append(f"not certified: {arch}: {r.lower_bound} <= dim <= {r.upper_bound} "
                            f"({r.status})")
            continue
        certified += 1
        if g == r.dimension:
            agree += 1
        else:
            findings.append(f"DISAGREES: {arch}: certified {r.dimension}, general {g}")
    return len(archs), certified, agree, findings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--tokens", default="1,2,3")
    parser.add_argument("--max-width", type=int, default=6)
    parser.add_argument("--max-key", type=int, default=4)
    parser.add_argument("--sample", type=int, default=0, help="random sample size (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--shard", default="0/1", help="K/M: this process takes items K, K+M, ...")
    args = parser.parse_args()

    archs = architectures(args)
    start = time.perf_counter()
    jobs = [(archs[j::args.jobs], args.seed, j) for j in range(args.jobs)]
    if args.jobs == 1:
        results = [check(jobs[0])]
    else:
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            results = pool.map(check, jobs)
    items = certified = agree = 0
    for n, c, g, findings in results:
        items, certified, agree = items + n, certified + c, agree + g
        for line in findings:
            print(line)
    seconds = time.perf_counter() - start
    print(f"shard {args.shard}: l = {args.layers}, widths 1..{args.max_width}, keys 1..{args.max_key}, "
          f"t in {{{args.tokens}}}{f', sample {args.sample} (seed {args.seed})' if args.sample else ''}: "
          f"{items} architectures, {certified} certified, general agrees on {agree}/{certified}; "
          f"{seconds:.1f} s ({1000 * seconds / max(1, items):.1f} ms per item, {args.jobs} jobs)")


if __name__ == "__main__":
    main()
