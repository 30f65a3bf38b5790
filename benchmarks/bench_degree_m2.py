"""Degrees of neurovarieties: this package (msolve over F_p) beside Macaulay2's NumericalImplicitization.

Usage: PYTHONPATH=src python benchmarks/bench_degree_m2.py [--runs 10] [--timeout 600] [--cases ...]

For each case (closed-form determinantal varieties, Figure 1's quartic, single lightning layers,
one deep network) it prints: the known value where there is one, this package's degree, status
and seconds (`image_degree` / `degree`, two primes, two slices each), then Macaulay2's
`numericalImageDegree` (monodromy, floating point) run `--runs` times with seeds 1..runs, how
many runs agree with the exact count, the values it returned (-1: the run raised an error) and
its median CPU seconds over finished runs; runs not finished within --timeout (all ten runs of a
case share it) count as not agreeing. The network maps are written for Macaulay2 as polynomials over CC in the parameters at small integer inputs
whose evaluation is checked injective on the span of the neurovariety (as `degree` does).
Macaulay2 comes from the system's packages (Debian: `apt-get install macaulay2`); when `M2` is
not on PATH the script says so and prints only this package's column. Timings depend on machine
load (2 shared cores here); they are figures, not assertions.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


def product_map(m: int, n: int, r: int):
    """(A, B) -> A B: m x n matrices of rank <= r."""
    def F(w):
        A, B = w[: m * r], w[m * r:]
        return [sum(A[i * r + k] * B[k * n + j] for k in range(r)) for i in range(m) for j in range(n)]
    return F, r * (m + n)


def network_case(widths, keys, tokens, seed=0):
    """(F, n_params, dimension) of a lightning network at small integer inputs (injective on S)."""
    from neuromanifold import Architecture
    from neuromanifold.degrees.engine import PRIMES
    from neuromanifold.degrees.network import evaluation_inputs, span_dimension
    from neuromanifold.degrees.polymap import network_map
    from neuromanifold.dimension.api import neuromanifold_dim

    arch = Architecture(widths, keys, tokens)
    spans = [(p,) + span_dimension(arch, p, seed) for p in PRIMES]
    inputs, _ = evaluation_inputs(arch, spans, seed, bound=3)
    return network_map(arch, inputs), arch.n_params, neuromanifold_dim(arch, method="certified").dimension


CASES = {
    "det3x3r1": (lambda: product_map(3, 3, 1) + (None,), 6),
    "det3x3r2": (lambda: product_map(3, 3, 2) + (None,), 3),
    "det4x4r2": (lambda: product_map(4, 4, 2) + (None,), 20),
    "figure1": (lambda: network_case((2, 1), (2,), 3), 4),
    "d2d2a1": (lambda: network_case((2, 2), (1,), 2), 20),
    "d3d1a2": (lambda: network_case((3, 1), (2,), 2), 108),
    "deep211": (lambda: network_case((2, 1, 1), (1, 1), 2), None),
}


def m2_script(polys: list[str], n: int, runs: int) -> str:
    names = ",".join(f"w{i}" for i in range(n))
    return "\n".join([
        'needsPackage "NumericalImplicitization";',
        f"R = CC[{names}];",
        "F = {" + ",\n".join(polys) + "};",
        f"for k from 1 to {runs} do (",
        "  setRandomSeed k;",
        "  c0 = cpuTime();",
        "  d = try numericalImageDegree(F, ideal 0_R, Verbose => false) else -1;",
        '  stdio << "RUN " | toString k | " DEGREE " | toString d | " CPU " | toString(cpuTime() - c0)'
        ' << endl << flush;',  # flushed: runs finished before a timeout are still counted
        ");",
        "exit 0", ""])


def run_m2(F, n: int, runs: int, timeout: float) -> list[tuple[int, float]] | str:
    import flint

    ctx = flint.fmpz_mpoly_ctx.get(("w", n))
    polys = [str(f).replace(" ", "") for f in F(list(ctx.gens()))]
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "degree.m2"
        script.write_text(m2_script(polys, n, runs))
        try:
            done = subprocess.run(["M2", "--script", str(script)], capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            text = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            found = re.findall(r"RUN (\d+) DEGREE (-?\d+) CPU ([\d.e-]+)", text)
            runs = [(int(d), float(s)) for _, d, s in found]
            return runs + [(None, timeout)] if runs else f"stopped after {timeout:.0f} s"
    found = re.findall(r"RUN (\d+) DEGREE (-?\d+) CPU ([\d.e-]+)", done.stdout)
    if not found:
        return "failed: " + (done.stderr.strip().splitlines() or ["no output"])[0][:120]
    return [(int(d), float(s)) for _, d, s in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()

    from neuromanifold.degrees.engine import image_degree

    have_m2 = shutil.which("M2") is not None
    if not have_m2:
        print("Macaulay2 (M2) is not on PATH: install it from the system's packages "
              "(apt-get install macaulay2) to compare; printing this package's degrees only.")
    print(f"{'case':10s} {'known':>6s} | {'ours':>5s} {'status':27s} {'s':>7s} | "
          f"{'M2 agree':>9s} {'M2 values':30s} {'M2 median s':>11s}")
    for name in args.cases:
        build, known = CASES[name]
        F, n, dim = build()
        start = time.perf_counter()
        ours = image_degree(F, n, dim, seed=args.seed, timeout=args.timeout)
        ours_s = time.perf_counter() - start
        m2 = run_m2(F, n, args.runs, args.timeout) if have_m2 else "not installed"
        if isinstance(m2, str):
            m2_cols = f"{'-':>9s} {m2:30s} {'-':>11s}"
        else:
            values = [d for d, _ in m2]
            agree = sum(d == ours.degree for d in values) if ours.degree is not None else 0
            counts = ", ".join(f"{v} x{values.count(v)}" for v in sorted(set(values) - {None}))
            if None in values:
                counts += f"; stopped after {len(values) - 1} runs"
            m2_cols = (f"{agree:>4d}/{args.runs:<4d} {counts:30s} "
                       f"{statistics.median(s for d, s in m2 if d is not None):11.2f}")
        print(f"{name:10s} {str(known or '-'):>6s} | {str(ours.degree or '-'):>5s} {ours.status:27s} "
              f"{ours_s:7.2f} | {m2_cols}", flush=True)


if __name__ == "__main__":
    main()
