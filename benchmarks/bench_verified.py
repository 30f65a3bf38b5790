"""The verified float64 certificate against the ball engine alone, side by side in one run.

Run: .venv/bin/python benchmarks/bench_verified.py [--deltas 3,4,8,16,24,32] [--cap 120]
     [--blocks] [--large]

For each network: `certified_dim` as it is now (the verified float64 proof first, the ball
determinant where floats cannot separate) and with the ball engine alone (the old path:
`ball_dual.block_evaluator` without its `.verified`), each with its value, status and wall
seconds; an old run past `--cap` seconds is stopped (SIGALRM) and printed as `> cap`. Both
rows of a network use the same rational point, so their values must agree wherever both
certify. `--large` adds bench_large_softmax.py's 10,240-parameter network (new engine only,
beside its numerical time). Timings depend on the machine and its load: report them with both.
"""

from __future__ import annotations

import argparse
import signal
import time

from neuromanifold import Architecture
from neuromanifold.dimension import ball_dual
from neuromanifold.dimension.ball_dual import certified_dim
from neuromanifold.experiments.figure3 import figure3_architecture, parse_int_set

BLOCKS = [
    ("2 layers width 8, H=4, residual, gelu MLP 8, layernorm",
     Architecture((8, 8, 8), (4, 4), 3, "softmax", heads=(4, 4), residual=True, mlp=(8, 8),
                  activation="gelu", norm="layernorm")),
    ("decoder: 2 layers width 16, H=4 on 2 kv groups, causal, rope, rmsnorm, gated silu 24",
     Architecture((16, 16, 16), (4, 4), 3, "softmax", heads=(4, 4), kv_heads=(2, 2),
                  values=(4, 4), residual=True, mlp=(24, 24), activation="silu",
                  mlp_kind="gated", norm="rmsnorm", causal=True, positions="rope")),
]


class Capped(Exception):
    pass


def _alarm(_signum, _frame):
    raise Capped


def timed(arch: Architecture, old: bool, cap: float | None):
    real = ball_dual.block_evaluator
    if old:
        ball_dual.block_evaluator = (lambda a, b, X, progress=None:  # noqa: ARG005 (its signature)
                                     lambda rows, cols: ball_dual.ball_block_jacobian(a, b, X, rows, cols))
    previous = signal.signal(signal.SIGALRM, _alarm)
    if cap:
        signal.setitimer(signal.ITIMER_REAL, cap)
    t0 = time.perf_counter()
    try:
        r = certified_dim(arch, seed=0)
        return r, time.perf_counter() - t0
    except Capped:
        return None, time.perf_counter() - t0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        ball_dual.block_evaluator = real


def row(label: str, arch: Architecture, cap: float | None, old: bool = True) -> None:
    new, t_new = timed(arch, False, None)
    text = f"{label:<58} {arch.n_params:>7} {new.dimension:>6} {new.status:>11} {t_new:>8.1f}"
    if old:
        prev, t_old = timed(arch, True, cap)
        if prev is None:
            text += f" {'-':>6} {'stopped':>11} {'> ' + format(cap, 'g'):>8}"
        else:
            text += f" {prev.dimension:>6} {prev.status:>11} {t_old:>8.1f}"
            if new.status == prev.status == "certified" and new.dimension != prev.dimension:
                text += "  DISAGREE"
    print(text, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deltas", default="3,4,5,6,7,8,9,10,16,24,32")
    parser.add_argument("--cap", type=float, default=120.0, help="seconds for each old run")
    parser.add_argument("--blocks", action="store_true")
    parser.add_argument("--large", action="store_true")
    args = parser.parse_args()
    print(f"{'network':<58} {'params':>7} {'new':>6} {'status':>11} {'s':>8} {'old':>6} "
          f"{'status':>11} {'s':>8}")
    t0 = time.perf_counter()
    for delta in parse_int_set("deltas", args.deltas):
        row(f"figure 3 softmax, delta = {delta}", figure3_architecture(delta, "softmax"), args.cap)
    print(f"figure 3 rows: {time.perf_counter() - t0:.1f} s in all (new and old)")
    if args.blocks:
        for label, arch in BLOCKS:
            row(label, arch, args.cap)
    if args.large:
        from neuromanifold.dimension.numerical import numerical_dim

        arch = Architecture((64, 64, 64), (8, 8), 16, "softmax")
        t1 = time.perf_counter()
        num = numerical_dim(arch)
        print(f"softmax 64,64,64 keys 8,8 t=16: numerical {num.dimension} [{num.status}] "
              f"{time.perf_counter() - t1:.1f} s", flush=True)
        row("softmax 64,64,64 keys 8,8, t = 16 (certified)", arch, None, old=False)


if __name__ == "__main__":
    main()
