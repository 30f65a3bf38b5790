"""Certified softmax dimensions: Figure 3 with every point proved, the 96-parameter deep case,
3,5,3 (hidden directions), transformer blocks (heads, residual, MLP, norms), and the largest
Figure 3 widths certified within a time budget.

Run: .venv/bin/python benchmarks/bench_certified_softmax.py [--deltas 3-10] [--largest 20,24,28]
     [--budget 600] [--precision 128] [--no-blocks] [--big-block]
Prints seconds per point (total wall time including the upper bound, the float selection, the
ball Jacobian block and its determinant) and the ball precision that settled it. Timings depend
on the machine and its load: report them with the machine.
"""

import argparse
import time

import torch

from neuromanifold import Architecture
from neuromanifold.dimension.ball_dual import certified_dim
from neuromanifold.experiments.figure3 import parse_int_set


# Block networks: (label, architecture), all softmax, t = 3.
BLOCK_CASES = [
    ("heads 4, d=3 a=v=3", Architecture((3, 3), (3,), 3, "softmax", heads=(4,), values=(3,))),
    ("2 layers, H=2, residual, gelu MLP 4, layernorm",
     Architecture((4, 4, 4), (2, 2), 3, "softmax", heads=(2, 2), residual=True, mlp=(4, 4),
                  activation="gelu", norm="layernorm")),
    ("2 layers, H=2, relu MLP 3, layernorm",
     Architecture((4, 4, 4), (2, 2), 3, "softmax", heads=(2, 2), mlp=(3, 3), activation="relu",
                  norm="layernorm")),
    ("2 layers, H=2, values 3, residual, tanh MLP 5, rmsnorm",
     Architecture((5, 5, 5), (2, 2), 3, "softmax", heads=(2, 2), values=(3, 3), residual=True,
                  mlp=(5, 5), activation="tanh", norm="rmsnorm")),
    ("2 layers of width 6, keys 3, H=2, residual, gelu MLP 6, layernorm",
     Architecture((6, 6, 6), (3, 3), 3, "softmax", heads=(2, 2), residual=True, mlp=(6, 6),
                  activation="gelu", norm="layernorm")),
]
# --big-block: 1,312 parameters, about two minutes.
BIG_BLOCK = ("2 layers of width 8, keys 4, H=4, residual, gelu MLP 8, layernorm",
             Architecture((8, 8, 8), (4, 4), 3, "softmax", heads=(4, 4), residual=True,
                          mlp=(8, 8), activation="gelu", norm="layernorm"))


def run(arch: Architecture, precision: int) -> tuple:
    t0 = time.perf_counter()
    r = certified_dim(arch, precision=precision)
    # the engine that proved it: the verified float64 certificate, or the balls at some bits
    bits = next((n.split()[2] for n in r.notes if n.startswith("ball precision")), "f64")
    return r, time.perf_counter() - t0, bits


def line(label: str, r, seconds: float, bits: str) -> None:
    expected = "-" if r.formula.value is None or not r.formula.hypotheses_hold else r.formula.value
    print(f"{label:<52} {r.n_params:>6} {r.dimension:>6} {expected:>8} {r.status:>11} "
          f"{bits:>5} {seconds:>8.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deltas", default="3-10")
    parser.add_argument("--largest", default="", help="further deltas, largest-first stop at budget")
    parser.add_argument("--budget", type=float, default=600.0, help="seconds per point for --largest")
    parser.add_argument("--precision", type=int, default=128)
    parser.add_argument("--no-blocks", dest="blocks", action="store_false",
                        help="skip the transformer-block cases")
    parser.add_argument("--big-block", action="store_true", help="add the 1,312-parameter block")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"{'case':<52} {'params':>6} {'dim':>6} {'expected':>8} {'status':>11} {'bits':>5} {'seconds':>8}")
    total = 0.0
    for delta in parse_int_set("deltas", args.deltas):
        r, s, bits = run(Architecture((delta,) * 3, (2, 2), 3, "softmax"), args.precision)
        total += s
        line(f"figure3 delta={delta}", r, s, bits)
    print(f"figure3 deltas {args.deltas}: {total:.1f} s in total")
    for widths, keys in (((4, 4, 4, 4), (2, 2, 2)), ((3, 5, 3), (2, 2))):
        r, s, bits = run(Architecture(widths, keys, 3, "softmax"), args.precision)
        line(f"widths {','.join(map(str, widths))} keys {','.join(map(str, keys))}", r, s, bits)
    blocks = (BLOCK_CASES if args.blocks else []) + ([BIG_BLOCK] if args.big_block else [])
    for label, arch in blocks:
        r, s, bits = run(arch, args.precision)
        line(label, r, s, bits)
        print(f"  {arch}: bounds {r.lower_bound}..{r.upper_bound}; " + ", ".join(
            f"{k} {v:.2f}" for k, v in r.seconds.items()))
    largest = None
    for delta in (parse_int_set("largest", args.largest) if args.largest else []):
        r, s, bits = run(Architecture((delta,) * 3, (2, 2), 3, "softmax"), args.precision)
        line(f"figure3 delta={delta}", r, s, bits)
        if s > args.budget:
            print(f"delta={delta} took {s:.0f} s > budget {args.budget:.0f} s: stopping")
            break
        if r.status == "certified":
            largest = (delta, r.n_params, r.dimension, s)
    if largest:
        print(f"largest certified within {args.budget:.0f} s: delta={largest[0]}, "
              f"{largest[1]} parameters, dimension {largest[2]}, {largest[3]:.0f} s")


if __name__ == "__main__":
    main()
