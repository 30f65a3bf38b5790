"""Benchmark the certified dimension of lightning networks (exact ranks over F_p, no floats).

Usage: PYTHONPATH=src python benchmarks/bench_exact.py [--sizes 16,24,32,48] [--seed 0]
       PYTHONPATH=src python benchmarks/bench_exact.py --sizes 48,72     (the large cases)
(72: the 25,920-parameter network of issue 13, widths 72^4, keys 24^3, t = 16; printed as a
refusal with its memory estimate when that exceeds 80% of the available memory.)

Each size runs in its own subprocess so that its peak memory (ru_maxrss) is its own. Printed per
size: the certified dimension and status, U (the symmetry upper bound: the width of the matrix
the exact rank is taken on), N, seconds for the Jacobian rows and tangents ('jac s'), for the
exact ranks over F_p including the conversion to flint ('rank s'), the total, the peak resident
memory, the F_p elimination rate measured in the same process (an n x n random matrix's rank,
n = --rate-size, counted as n^3 / 3 multiply-adds per second) and total / (U^3 / 3 / rate): how
the whole run compares with one dense elimination of a U x U matrix at that rate.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

# widths d^4 with keys d/3-ish and tokens chosen as in docs/math/method.md.
CASES = {16: (4, 6), 24: (8, 12), 32: (8, 8), 48: (16, 16), 72: (24, 16)}


def run_one(width: int, seed: int, max_memory: str | None = None, rate_size: int = 3000) -> dict:
    """Certified dimension of widths (w, w, w, w), keys CASES[w]; figures as a dict."""
    from neuromanifold import Architecture
    from neuromanifold.dimension.exact import exact_dim

    from neuromanifold.dimension.memory import check_memory, exact_estimate, format_bytes
    from neuromanifold.errors import ResourceError

    keys, tokens = CASES[width]
    arch = Architecture((width,) * 4, (keys,) * 3, tokens)
    estimate = exact_estimate(arch)
    try:  # the run's own memory check (default budget: 80% of the available memory)
        check_memory(estimate, max_memory)
    except ResourceError as exc:
        return {"arch": str(arch), "n_params": arch.n_params, "status": "refused",
                "estimate": format_bytes(estimate.peak), "message": str(exc)}
    result = exact_dim(arch, certify=True, seed=seed,
                       progress=lambda msg: print(f"  [{width}] {msg}", file=sys.stderr, flush=True))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20   # before the rate's matrix
    return {"arch": str(arch), "n_params": arch.n_params, "dimension": result.dimension,
            "status": result.status, "upper": result.upper_bound, "samples": result.n_samples,
            "formula": result.formula.value, **{k: round(v, 2) for k, v in result.seconds.items()},
            "peak_gb": peak, "rate": elimination_rate(rate_size)}


def elimination_rate(n: int) -> float:
    """Multiply-adds per second of flint's exact rank over F_p: n^3 / 3 over the seconds it takes
    on a random n x n matrix (conversion excluded), p the default prime."""
    import time

    import numpy as np

    from neuromanifold.dimension.fp import DEFAULT_PRIME, to_nmod_mat

    matrix = to_nmod_mat(np.random.default_rng(1).integers(0, DEFAULT_PRIME, (n, n), dtype=np.int64),
                         DEFAULT_PRIME)
    start = time.perf_counter()
    matrix.rank()
    return n ** 3 / 3 / (time.perf_counter() - start)


def conversion_seconds(n_rows: int, n_cols: int) -> float:
    """Seconds to turn an n_rows x n_cols int64 residue array into a flint nmod_mat."""
    import time

    import numpy as np

    from neuromanifold.dimension.fp import DEFAULT_PRIME, to_nmod_mat

    matrix = np.random.default_rng(0).integers(0, DEFAULT_PRIME, (n_rows, n_cols), dtype=np.int64)
    start = time.perf_counter()
    to_nmod_mat(matrix, DEFAULT_PRIME)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,24,32,48")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--max-memory", default=None,
                        help="Memory budget per size (default: 80%% of the available memory).")
    parser.add_argument("--rate-size", type=int, default=3000,
                        help="n of the n x n random matrix whose rank measures the F_p rate.")
    parser.add_argument("--convert", default="6528x6141",
                        help="Also time the numpy -> flint conversion of a matrix this size.")
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.one, args.seed, args.max_memory, args.rate_size)))
        return
    print(f"certified dimension, lightning, widths w^4; exact ranks over F_p (p = 2147483629); "
          f"seed {args.seed}")
    print(f"{'architecture':<46} {'P':>6} {'dim':>6} {'status':>10} {'U':>6} {'N':>4} {'jac s':>7} "
          f"{'rank s':>7} {'total s':>8} {'peak GiB':>8} {'Gop/s':>6} {'U^3/3 s':>8} {'ratio':>6}")
    for width in (int(w) for w in args.sizes.split(",")):
        budget = [] if args.max_memory is None else ["--max-memory", args.max_memory]
        out = subprocess.run([sys.executable, __file__, "--one", str(width), "--seed", str(args.seed),
                              "--rate-size", str(args.rate_size), *budget],
                             stdout=subprocess.PIPE, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if r["status"] == "refused":
            print(f"{r['arch']:<46} {r['n_params']:>6} refused before allocating: estimated peak "
                  f"{r['estimate']} ({r['message']})", flush=True)
            continue
        dense = r["upper"] ** 3 / 3 / r["rate"]   # one U x U elimination at the measured rate
        print(f"{r['arch']:<46} {r['n_params']:>6} {r['dimension']:>6} {r['status']:>10} "
              f"{r['upper']:>6} {r['samples']:>4} {r['jacobian']:>7.1f} {r['rank']:>7.1f} "
              f"{r['total']:>8.1f} {r['peak_gb']:>8.2f} {r['rate'] / 1e9:>6.2f} {dense:>8.1f} "
              f"{r['total'] / dense:>6.2f}", flush=True)
    if args.convert:
        n_rows, n_cols = (int(x) for x in args.convert.split("x"))
        print(f"numpy int64 -> flint nmod_mat conversion of a {n_rows} x {n_cols} matrix "
              f"(part of 'rank s'): {conversion_seconds(n_rows, n_cols):.1f} s (measured)")


if __name__ == "__main__":
    main()
