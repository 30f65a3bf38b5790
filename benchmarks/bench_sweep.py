"""Benchmark: wall time of a sweep over >= 200 architectures on this machine (prints, asserts nothing).

Grid: l = 2, every widths tuple in 3..8 (216), keys (2, 2) and (3, 3), t = 3, lightning and
softmax, numerical method: 864 architectures. Usage:
    PYTHONPATH=src python benchmarks/bench_sweep.py [--jobs 2] [--backend local|dask]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from neuromanifold.sweeps.engine import sweep
from neuromanifold.sweeps.grid import load_grid

GRID = """
widths = {layers = [2], range = [3, 8]}
keys = [[2, 2], [3, 3]]
tokens = [3]
attention = ["lightning", "softmax"]
method = ["numerical"]
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--backend", default="local")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        grid_path = Path(tmp) / "bench.toml"
        grid_path.write_text(GRID)
        grid = load_grid(grid_path)
        t0 = time.perf_counter()
        summary = sweep(grid, Path(tmp) / "bench.sqlite", jobs=args.jobs, backend=args.backend,
                        seed=args.seed)
        wall = time.perf_counter() - t0
    print(f"bench_sweep: {len(grid)} architectures, backend {args.backend}, jobs {args.jobs}, "
          f"seed {args.seed}, {os.cpu_count()} cores visible: {wall:.1f} s wall "
          f"({wall / len(grid) * 1000:.0f} ms per item); statuses {summary.counts}; "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
