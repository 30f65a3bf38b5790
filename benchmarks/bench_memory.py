"""Estimated against measured peak memory (issue 13): the estimates must be within 2x.

The 56^3 softmax case takes the eliminated route (dimension.elimination); `--only 56` runs it alone.

Each case runs in a fresh subprocess (`neuromanifold.dimension.api.neuromanifold_dim`), which
reports its own peak resident set size, resource.getrusage(RUSAGE_SELF).ru_maxrss.
Run: .venv/bin/python benchmarks/bench_memory.py [--quick]
"""

import argparse
import json
import subprocess
import sys
import time

from neuromanifold import Architecture
from neuromanifold.dimension.memory import exact_estimate, format_bytes, numerical_estimate

CASES = [  # (widths, keys, tokens, attention, method)
    ((24, 24, 24), (8, 8), 8, "softmax", "numerical"),
    ((48, 48, 48), (8, 8), 16, "softmax", "numerical"),
    ((56, 56, 56), (8, 8), 16, "softmax", "numerical"),   # 4,800 free columns: eliminated route
    ((16, 16, 16), (4, 4), 6, "lightning", "numerical"),
    ((24, 24, 24), (6, 6), 8, "lightning", "numerical"),
    ((24, 24, 24, 24), (8, 8, 8), 8, "lightning", "certified"),
    ((40, 40, 40), (8, 8), 8, "lightning", "certified"),
    ((48, 48, 48, 48), (16, 16, 16), 16, "lightning", "certified"),
]

CHILD = ("import json, sys, resource; from neuromanifold import Architecture; "
         "from neuromanifold.dimension.api import neuromanifold_dim; "
         "w, k, t, att, m = json.loads(sys.argv[1]); "
         "r = neuromanifold_dim(Architecture(tuple(w), tuple(k), t, att), method=m, max_memory='1.0'); "
         "print(json.dumps([r.dimension, r.status, "
         "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024]))")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="only the first three cases")
    parser.add_argument("--only", type=int, default=None, help="only the cases of this first width")
    args = parser.parse_args()
    print(f"{'case':<52} {'estimate':>9} {'measured':>9} {'ratio':>6} {'seconds':>8}  result")
    for widths, keys, t, att, method in CASES[:3] if args.quick else CASES:
        if args.only is not None and widths[0] != args.only:
            continue
        arch = Architecture(widths, keys, t, att)
        est = (numerical_estimate(arch) if method == "numerical"
               else exact_estimate(arch, certify=method == "certified"))
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps([widths, keys, t, att, method])],
                             capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - t0
        try:
            dimension, status, measured = json.loads(out.stdout.strip().splitlines()[-1])
            result = f"{dimension} [{status}]"
        except (ValueError, IndexError):
            measured, result = None, (out.stderr.strip().splitlines() or ["no output"])[-1]
        label = f"{att} {','.join(map(str, widths))} / {','.join(map(str, keys))} t{t} {method}"
        ratio = f"{est.peak / measured:.2f}" if measured else "n/a"
        print(f"{label:<52} {format_bytes(est.peak):>9} "
              f"{format_bytes(measured) if measured else 'failed':>9} {ratio:>6} {seconds:>8.1f}  "
              f"{result}", flush=True)


if __name__ == "__main__":
    main()
