"""Degrees with structure first: the structured route (`structured_degree`) beside the direct count.

Usage: PYTHONPATH=src nice -n 10 python benchmarks/bench_degree_structure.py [--timeout 600]
       [--cases NAME ...] [--no-direct]

For each case it prints one line per method: the structured route (deg W / e_L, every hypothesis
checked: docs/degree.md, "Degree with structure first") and the direct count (`degree`: slices of
the gauge-fixed network map), each with its degree, status and wall-clock seconds, each under its
own `--timeout`, and whether the two agree where both finish. Issue 37's targets are the first
five cases. Timings depend on the machine's load (2 shared cores here): figures, not assertions.
"""

from __future__ import annotations

import argparse
import time

CASES = {
    # issue 37's targets
    "d3d2a2": ((3, 2), (2,)),
    "d3d3a1": ((3, 3), (1,)),
    "d3d3a2": ((3, 3), (2,)),
    "deep221k11": ((2, 2, 1), (1, 1)),
    "deep211k21": ((2, 1, 1), (2, 1)),
    # where the direct count is known to finish (cross-checks)
    "d2d1a1": ((2, 1), (1,)),
    "d2d2a1": ((2, 2), (1,)),
    "d3d1a2": ((3, 1), (2,)),
    "deep211k11": ((2, 1, 1), (1, 1)),
    "d3d2a1": ((3, 2), (1,)),
    "deep222k11": ((2, 2, 2), (1, 1)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--tokens", type=int, default=2)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--no-direct", action="store_true", help="skip the direct counts")
    args = parser.parse_args()

    from neuromanifold import Architecture
    from neuromanifold.degrees.network import degree
    from neuromanifold.degrees.structure import structured_degree

    print(f"{'case':<12} {'method':<10} {'degree':>7} {'status':<27} {'s':>8}  detail", flush=True)
    for name in args.cases:
        widths, keys = CASES[name]
        arch = Architecture(widths, keys, args.tokens)
        t0 = time.perf_counter()
        s = structured_degree(arch, timeout=args.timeout)
        e = sorted({r.e_L for r in s.runs if r.e_L is not None})
        print(f"{name:<12} {'structure':<10} {str(s.degree):>7} {s.status:<27} "
              f"{time.perf_counter() - t0:8.1f}  deg W {s.product_degree}, e_L {e}, "
              f"{len(s.runs)} runs", flush=True)
        if args.no_direct:
            continue
        t0 = time.perf_counter()
        d = degree(arch, timeout=args.timeout)
        counts = sorted({(r.slice_count.n_distinct if r.slice_count.status == "finite"
                          else r.slice_count.status,
                          r.fiber_count.n_distinct if r.fiber_count else None)
                         for r in d.runs}, key=str)
        agree = ("agree" if d.degree == s.degree else "DISAGREE") if None not in (
            d.degree, s.degree) else "no cross-check"
        print(f"{name:<12} {'direct':<10} {str(d.degree):>7} {d.status:<27} "
              f"{time.perf_counter() - t0:8.1f}  slice/fiber {counts}, {agree}", flush=True)


if __name__ == "__main__":
    main()
