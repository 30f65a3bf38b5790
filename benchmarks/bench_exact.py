"""Benchmark the certified dimension of lightning networks (exact ranks over F_p, no floats).

Usage: PYTHONPATH=src python benchmarks/bench_exact.py [--sizes 16,32,48] [--seed 0]

Each size runs in its own subprocess so that its peak memory (ru_maxrss) is its own. Printed per
size: the certified dimension and status, seconds for the Jacobian rows and tangents ('jacobian'),
for the exact ranks over F_p including the conversion to flint ('rank'), the total, the peak
resident memory, and total / (P^3 / 3) in nanoseconds, P = n_params: the cost of one dense
Gaussian elimination of a P x P matrix, as a yardstick for how close the whole run is to it.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

# widths d^4 with keys d/3-ish and tokens chosen as in docs/math/method.md.
CASES = {16: (4, 6), 24: (8, 12), 32: (8, 8), 48: (16, 16)}


def run_one(width: int, seed: int) -> dict:
    """Certified dimension of widths (w, w, w, w), keys CASES[w]; figures as a dict."""
    from neuromanifold import Architecture
    from neuromanifold.dimension.exact import exact_dim

    keys, tokens = CASES[width]
    arch = Architecture((width,) * 4, (keys,) * 3, tokens)
    result = exact_dim(arch, certify=True, seed=seed,
                       progress=lambda msg: print(f"  [{width}] {msg}", file=sys.stderr, flush=True))
    return {"arch": str(arch), "n_params": arch.n_params, "dimension": result.dimension,
            "status": result.status, "upper": result.upper_bound, "samples": result.n_samples,
            "formula": result.formula.value, **{k: round(v, 2) for k, v in result.seconds.items()},
            "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20}


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
    parser.add_argument("--convert", default="6528x6141",
                        help="Also time the numpy -> flint conversion of a matrix this size.")
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.one, args.seed)))
        return
    print(f"certified dimension, lightning, widths w^4; exact ranks over F_p (p = 2147483629); "
          f"seed {args.seed}")
    print(f"{'architecture':<46} {'P':>6} {'dim':>6} {'status':>10} {'N':>4} {'jac s':>7} "
          f"{'rank s':>7} {'total s':>8} {'peak GB':>8} {'ns/(P^3/3)':>10}")
    for width in (int(w) for w in args.sizes.split(",")):
        out = subprocess.run([sys.executable, __file__, "--one", str(width), "--seed", str(args.seed)],
                             stdout=subprocess.PIPE, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        per = r["total"] / (r["n_params"] ** 3 / 3) * 1e9
        print(f"{r['arch']:<46} {r['n_params']:>6} {r['dimension']:>6} {r['status']:>10} "
              f"{r['samples']:>4} {r['jacobian']:>7.1f} {r['rank']:>7.1f} {r['total']:>8.1f} "
              f"{r['peak_gb']:>8.2f} {per:>10.3f}", flush=True)
    if args.convert:
        n_rows, n_cols = (int(x) for x in args.convert.split("x"))
        print(f"numpy int64 -> flint nmod_mat conversion of a {n_rows} x {n_cols} matrix "
              f"(part of 'rank s'): {conversion_seconds(n_rows, n_cols):.1f} s (measured)")


if __name__ == "__main__":
    main()
