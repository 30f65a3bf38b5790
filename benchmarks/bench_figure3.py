"""Time the whole Figure 3 sweep (l = 2, t = 3, a_i = 2, delta = 3..10, N = 250), per point and total.

Run: .venv/bin/python benchmarks/bench_figure3.py [--deltas 3-10] [--attention softmax] [--device cpu]
"""

import argparse
import time

import torch

from neuromanifold.experiments.figure3 import figure3, parse_int_set


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deltas", default="3-10")
    parser.add_argument("--attention", default="softmax")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, device {args.device}")
    t0 = time.perf_counter()
    rows = figure3(args.attention, parse_int_set("deltas", args.deltas), device=args.device)
    total = time.perf_counter() - t0
    print(f"{'delta':>5} {'params':>7} {'estimated':>9} {'expected':>8} {'gap':>5} {'N':>5} {'seconds':>8}")
    for r in rows:
        print(f"{r['delta']:>5} {r['n_params']:>7} {r['estimated']:>9} {r['expected']:>8} "
              f"{r['gap']:>5.1f} {r['n_samples']:>5} {r['seconds']:>8.2f}")
    ok = all(r["estimated"] == r["expected"] and r["status"] == "settled" for r in rows)
    print(f"total {total:.2f} s; all points settled and equal to the formula: {ok}")


if __name__ == "__main__":
    main()
