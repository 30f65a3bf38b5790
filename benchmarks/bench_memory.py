"""Estimated against measured peak memory (issue 13): the estimates must be within 2x.

The 56^3 softmax case takes the eliminated route (dimension.elimination); `--only 56` runs it alone.
`--blocks` runs networks beyond the paper's model instead (heads, values, residual, MLP, norms and
the decoder options), estimated by `dimension.plan`.

Each case runs in a fresh subprocess (`neuromanifold.dimension.api.neuromanifold_dim`), which
reports its own peak resident set size, resource.getrusage(RUSAGE_SELF).ru_maxrss.
Run: .venv/bin/python benchmarks/bench_memory.py [--quick | --blocks]
"""

import argparse
import json
import subprocess
import sys
import time

from neuromanifold import Architecture
from neuromanifold.dimension.memory import exact_estimate, format_bytes, numerical_estimate
from neuromanifold.dimension.plan import exact_plan, numerical_plan

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

BLOCK_CASES = [  # (label, Architecture keywords, method)
    ("2 heads softmax 24^3 a6 t8", dict(widths=(24, 24, 24), keys=6, tokens=8,
                                         attention="softmax", heads=2), "numerical"),
    ("2 heads, values 4, lightning 24^3 a6 t8", dict(widths=(24, 24, 24), keys=6, tokens=8,
                                                     heads=2, values=4), "numerical"),
    ("residual, MLP 32, layernorm, softmax 16^3 t8",
     dict(widths=(16, 16, 16), keys=4, tokens=8, attention="softmax", residual=True, mlp=32,
          norm="layernorm"), "numerical"),
    ("decoder: V12, causal, rope, 2/1 heads, biases, gated, rmsnorm",
     dict(widths=(12, 12, 12), keys=4, tokens=3, attention="softmax", heads=2, kv_heads=1,
          residual=True, mlp=16, mlp_kind="gated", bias=True, mlp_bias=True, causal=True,
          positions="rope", norm="rmsnorm", final_norm=True, vocab=12), "numerical"),
    ("decoder: V10 tied, qk-norm, parallel, softmax",
     dict(widths=(12, 12, 12), keys=4, tokens=4, attention="softmax", heads=2, residual=True,
          mlp=12, norm="rmsnorm", qk_norm=True, parallel=True, vocab=10, tied=True), "numerical"),
    ("decoder: V10 causal, learned positions, lightning",
     dict(widths=(12, 12, 12), keys=4, tokens=3, heads=2, residual=True, mlp=12, vocab=10,
          causal=True, positions="learned"), "numerical"),
    ("3 layers, 2 heads, residual, MLP 16, rmsnorm, softmax 14^4 t6",
     dict(widths=(14, 14, 14, 14), keys=4, tokens=6, attention="softmax", heads=2, residual=True,
          mlp=16, norm="rmsnorm"), "numerical"),
    ("2 heads, residual, MLP 16, lightning 12^3 t4 exact",
     dict(widths=(12, 12, 12), keys=3, tokens=4, heads=2, residual=True, mlp=16), "exact"),
]

BLOCK_CHILD = ("import json, sys, resource; from neuromanifold import Architecture; "
               "from neuromanifold.dimension.api import neuromanifold_dim; "
               "kw, m = json.loads(sys.argv[1]); "
               "r = neuromanifold_dim(Architecture(**kw), method=m, max_memory='1.0'); "
               "print(json.dumps([r.dimension, r.status, "
               "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024]))")

CHILD = ("import json, sys, resource; from neuromanifold import Architecture; "
         "from neuromanifold.dimension.api import neuromanifold_dim; "
         "w, k, t, att, m = json.loads(sys.argv[1]); "
         "r = neuromanifold_dim(Architecture(tuple(w), tuple(k), t, att), method=m, max_memory='1.0'); "
         "print(json.dumps([r.dimension, r.status, "
         "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024]))")


def measure(child: str, argument: object) -> tuple[int | None, str, float]:
    """(peak bytes or None, result or the error's last line, seconds) of one child process."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", child, json.dumps(argument)],
                         capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    try:
        dimension, status, measured = json.loads(out.stdout.strip().splitlines()[-1])
        return measured, f"{dimension} [{status}]", seconds
    except (ValueError, IndexError):
        return None, (out.stderr.strip().splitlines() or ["no output"])[-1], seconds


def report(label: str, estimate: int, measured: int | None, seconds: float, result: str) -> None:
    """One line of the table."""
    ratio = f"{estimate / measured:.2f}" if measured else "n/a"
    print(f"{label:<64} {format_bytes(estimate):>9} "
          f"{format_bytes(measured) if measured else 'failed':>9} {ratio:>6} {seconds:>8.1f}  "
          f"{result}", flush=True)


def blocks(only: str | None) -> None:
    """The networks beyond the paper's model, estimated by their engine's plan (`only`: the
    cases whose label contains it)."""
    print(f"{'case':<64} {'estimate':>9} {'measured':>9} {'ratio':>6} {'seconds':>8}  result")
    for label, kwargs, method in BLOCK_CASES:
        if only is not None and only not in label:
            continue
        arch = Architecture(**kwargs)
        plan = numerical_plan(arch) if method == "numerical" else exact_plan(arch)
        measured, result, seconds = measure(BLOCK_CHILD, [kwargs, method])
        report(f"{label} ({arch.n_params} P, {method})", plan.estimate.peak, measured, seconds,
               result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="only the first three cases")
    parser.add_argument("--only", type=int, default=None, help="only the cases of this first width")
    parser.add_argument("--blocks", action="store_true",
                        help="networks beyond the paper's model (heads, MLPs, decoder options)")
    parser.add_argument("--case", default=None, help="with --blocks: the cases whose label has this")
    args = parser.parse_args()
    if args.blocks:
        blocks(args.case)
        return
    print(f"{'case':<64} {'estimate':>9} {'measured':>9} {'ratio':>6} {'seconds':>8}  result")
    for widths, keys, t, att, method in CASES[:3] if args.quick else CASES:
        if args.only is not None and widths[0] != args.only:
            continue
        arch = Architecture(widths, keys, t, att)
        est = (numerical_estimate(arch) if method == "numerical"
               else exact_estimate(arch, certify=method == "certified"))
        measured, result, seconds = measure(CHILD, [widths, keys, t, att, method])
        label = f"{att} {','.join(map(str, widths))} / {','.join(map(str, keys))} t{t} {method}"
        report(label, est.peak, measured, seconds, result)


if __name__ == "__main__":
    main()
