"""Check the `general` closed form against certified dimensions, and time the certified path.

Usage: PYTHONPATH=src python benchmarks/check_general.py --layers 2 [--tokens 1,2,3]
       [--max-width 6] [--max-key 4] [--sample 0] [--seed 0]

Every lightning architecture with `--layers` layers, widths 1..max-width, keys 1..max-key and the
given token counts (or a seeded random `--sample` of them) is certified over F_p (`exact_dim`);
printed: how many were certified, how many agree with `general`, every disagreement and every
uncertified item, and seconds per item (machine load changes these).
"""

from __future__ import annotations

import argparse
import itertools
import random
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--tokens", default="1,2,3")
    parser.add_argument("--max-width", type=int, default=6)
    parser.add_argument("--max-key", type=int, default=4)
    parser.add_argument("--sample", type=int, default=0, help="random sample size (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from neuromanifold import Architecture
    from neuromanifold.core.formulas import general
    from neuromanifold.dimension.exact import exact_dim

    l = args.layers
    archs = [(w, a, t) for w in itertools.product(range(1, args.max_width + 1), repeat=l + 1)
             for a in itertools.product(range(1, args.max_key + 1), repeat=l)
             for t in map(int, args.tokens.split(","))]
    if args.sample:
        random.Random(args.seed).shuffle(archs)
        archs = archs[:args.sample]
    certified = agree = 0
    start = time.perf_counter()
    for w, a, t in archs:
        arch = Architecture(w, a, t)
        r = exact_dim(arch, seed=args.seed)
        g = general(arch).value
        if r.status != "certified":
            print(f"not certified: {arch}: {r.lower_bound} <= dim <= {r.upper_bound} ({r.status})")
            continue
        certified += 1
        if g == r.dimension:
            agree += 1
        else:
            print(f"DISAGREES: {arch}: certified {r.dimension}, general {g}")
    seconds = time.perf_counter() - start
    print(f"l = {l}, widths 1..{args.max_width}, keys 1..{args.max_key}, t in {{{args.tokens}}}: "
          f"{len(archs)} architectures, {certified} certified, general agrees on {agree}/{certified}; "
          f"{seconds:.1f} s ({1000 * seconds / max(1, len(archs)):.1f} ms per item)")


if __name__ == "__main__":
    main()
