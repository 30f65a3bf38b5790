"""ED degrees: this package (msolve over F_p) beside two independent routes in Macaulay2.

Usage: PYTHONPATH=src python benchmarks/bench_ed_m2.py [--runs 10] [--implicit-runs 3]
       [--timeout 300] [--max-paths 20000] [--cases ...]

For each case of docs/degree.md's ED-degree table it prints the closed form where there is one,
this package's ED degree, status and seconds (`image_ed_degree`, two primes, two runs each, on the
very polynomial map given to Macaulay2), then two routes in Macaulay2 (Debian package `macaulay2`)
that share nothing with ours but the map:

* implicit: the prime ideal I of V (the minors of a matrix of variables for the determinantal
  and Segre cases; for the networks `ker` of the ring map, elimination by Groebner bases), over
  ZZ/p with p = 1073741827 (not one of ours). With c = codim I, g = c random combinations of
  the generators, data u and weights lambda random in ZZ/p, the Lagrange system
  I + (lambda_i (u_i - x_i) - sum_j l_j dg_j/dx_i) + (1 - z h), h = det(Jac(g) R) for a random
  M x c matrix R (a combination of the c-minors of Jac(g); it vanishes on Sing V, where
  rank Jac(I) < c, and on a proper closed subset of V), and `degree` of that zero-dimensional
  ideal. At x in V_reg with h(x) != 0 the rows of Jac(g) span the normal space, so the zeros are
  exactly the ED-critical points off V(h); generic u has none on V(h) (the argument of
  docs/degree.md, "Why nothing true is removed"). `--implicit-runs` runs with seeds 1..k.
* numerical: `solveSystem` of NumericalAlgebraicGeometry (total-degree homotopy, floating
  point) on the parametric critical equations J_G^T Lambda (G - u) = 0 with u (and a generic
  Lambda) random complex, G(v) = F(w0 + L v) on a random complex affine chart of dimension
  r = dim V (the Jacobian rank at a random rational point; a chart that fixes coordinates put
  some critical points near infinity, and 1 to 14 of 39 were lost), tracked with tightened
  steps (tStep 0.01, CorrectorTolerance 1e-8, tStepMin 1e-10); regular solutions with J_G of
  full numerical rank are mapped to x = G(v), x = 0 is dropped (the vertex of these cones, a
  singular point of V: without this the lightning layer d=2,d'=1,a=1 counted 11 or 12, the
  extra point being x = 0 reached by solutions whose J_G passed the 1e-8 rank test), and the
  distinct x are counted (so no fiber division is needed; the solution counts are printed).
  `--runs` runs with seeds 1..runs; cases whose Bezout number exceeds --max-paths are skipped.

Network maps are evaluated at N small integer inputs (in [-3, 3], N as in the docs' table,
checked injective on the span of the neurovariety): the ED degree of V_N depends on N, and the
inputs are another generic choice than `ed_degree`'s residues, so the docs' value is printed
beside ours. Every Macaulay2 call has the --timeout (all runs of a route share it): past it the
runs finished so far are reported. When `M2` is not on PATH the script says so and prints
only this package's column. Timings depend on machine load (2 shared cores here); they are
figures, not assertions.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

M2_PRIME = 1073741827            # 2^30 + 3, prime, not one of this package's PRIMES


def product_map(m: int, n: int, r: int):
    """(A, B) -> A B: m x n matrices of rank <= r, row-major entries."""
    def F(w):
        A, B = w[: m * r], w[m * r:]
        return [sum(A[i * r + k] * B[k * n + j] for k in range(r)) for i in range(m) for j in range(n)]
    return F, r * (m + n)


def deep_linear(widths):
    """x -> W_l ... W_1 x: the end-to-end matrix's entries, row-major."""
    def F(w):
        off, P = 0, None
        for i in range(1, len(widths)):
            a, b = widths[i], widths[i - 1]
            W = [[w[off + x * b + y] for y in range(b)] for x in range(a)]
            off += a * b
            P = W if P is None else [[sum(W[i][k] * P[k][j] for k in range(len(P)))
                                      for j in range(len(P[0]))] for i in range(a)]
        return [v for row in P for v in row]
    return F, sum(widths[i] * widths[i - 1] for i in range(1, len(widths)))


def minors_ideal(m: int, n: int, k: int) -> str:
    """Macaulay2 text: the k-minors of the m x n matrix of the coordinates x_(i n + j)."""
    return f"minors({k}, matrix table({m}, {n}, (i, j) -> x_(i*{n}+j)))"


def network_case(widths, keys, tokens, N, seed=0, bound=3):
    """(F, n_params, dimension) of a lightning network at N integer inputs in [-bound, bound],
    redrawn until the evaluation is injective on the span of the neurovariety (both primes)."""
    from neuromanifold import Architecture
    from neuromanifold.degrees.engine import PRIMES
    from neuromanifold.degrees.network import _evaluation_rank, span_dimension
    from neuromanifold.degrees.polymap import network_map, object_array
    from neuromanifold.dimension.api import neuromanifold_dim

    arch = Architecture(widths, keys, tokens)
    spans = [(p,) + span_dimension(arch, p, seed) for p in PRIMES]
    rng = random.Random(f"bench-ed-inputs-{seed}")
    for _ in range(50):
        inputs = object_array((N, widths[0], tokens),
                              [rng.randint(-bound, bound) for _ in range(N * widths[0] * tokens)])
        F = network_map(arch, inputs)
        if all(_evaluation_rank(F, samples, p, None) == s for p, s, samples in spans):
            return F, arch.n_params, neuromanifold_dim(arch, method="certified").dimension
    raise RuntimeError(f"no injective inputs at N = {N}")


# name: (build -> (F, n, dim or None), weights, closed form or None, docs' value, implicit ideal
# as Macaulay2 text in x_0..x_(M-1), or "ker" for elimination)
CASES = {
    "ey2x2r1": (lambda: product_map(2, 2, 1) + (None,), "standard", 2, 2, minors_ideal(2, 2, 2)),
    "ey2x2r1-gen": (lambda: product_map(2, 2, 1) + (None,), "generic", 6, 6, minors_ideal(2, 2, 2)),
    "seg2x3": (lambda: product_map(2, 3, 1) + (None,), "standard", 2, 2, minors_ideal(2, 3, 2)),
    "seg2x3-gen": (lambda: product_map(2, 3, 1) + (None,), "generic", None, 10,
                   minors_ideal(2, 3, 2)),
    "seg3x3": (lambda: product_map(3, 3, 1) + (None,), "standard", 3, 3, minors_ideal(3, 3, 2)),
    "seg3x3-gen": (lambda: product_map(3, 3, 1) + (None,), "generic", None, 39,
                   minors_ideal(3, 3, 2)),
    "det3x3r2": (lambda: product_map(3, 3, 2) + (None,), "standard", 3, 3, minors_ideal(3, 3, 3)),
    "det3x4r1": (lambda: product_map(3, 4, 1) + (None,), "standard", 3, 3, minors_ideal(3, 4, 2)),
    "det4x4r2": (lambda: product_map(4, 4, 2) + (None,), "standard", 6, 6, minors_ideal(4, 4, 3)),
    "deep313": (lambda: deep_linear((3, 1, 3)) + (None,), "standard", 3, 3, minors_ideal(3, 3, 2)),
    "deep3213": (lambda: deep_linear((3, 2, 1, 3)) + (None,), "standard", 3, 3,
                 minors_ideal(3, 3, 2)),
    "deep3223": (lambda: deep_linear((3, 2, 2, 3)) + (None,), "standard", 3, 3,
                 minors_ideal(3, 3, 3)),
    "d2d1a1": (lambda: network_case((2, 1), (1,), 2, 3), "standard", None, 10, "ker"),
    "d2d1a2": (lambda: network_case((2, 1), (2,), 2, 3), "standard", None, 14, "ker"),
    "d2d1a2t3": (lambda: network_case((2, 1), (2,), 3, 3), "standard", None, 14, "ker"),
    "d2d2a1": (lambda: network_case((2, 2), (1,), 2, 3), "standard", None, 68, "ker"),
    "d3d1a1": (lambda: network_case((3, 1), (1,), 2, 9), "standard", None, "stopped", "ker"),
    "deep211": (lambda: network_case((2, 1, 1), (1, 1), 2, 15), "standard", None, "stopped",
                "ker"),
}

RESULT = re.compile(r"RUN (\d+) ED (-?\d+) CPU ([\d.e-]+)(.*)")


def implicit_script(polys, n, M, ideal, weights, runs) -> str:
    """Macaulay2: the Lagrange system on the implicit ideal, `runs` seeds."""
    lam = "apply(M, i -> 1_kk)" if weights == "standard" else "apply(M, i -> random kk)"
    source = ([f"Pw = kk[w_0..w_{n - 1}];", "Fw = {" + ",\n".join(polys) + "};",
               "I = ker map(Pw, S, Fw);"] if ideal == "ker" else [f"I = {ideal};"])
    return "\n".join([
        f"kk = ZZ/{M2_PRIME}; M = {M};",
        "S = kk[x_0..x_(M-1)];",
        "c0 = cpuTime();", *source,
        "c = codim I;",
        'stdio << "IDEAL codim " << c << " generators " << numgens I << " degree " << degree I'
        ' << " CPU " << cpuTime() - c0 << endl << flush;',
        "R = kk[x_0..x_(M-1), l_0..l_(c-1), z];",
        "phi = map(R, S, take(gens R, M));",
        f"for k from 1 to {runs} do (",
        "  setRandomSeed k; c0 = cpuTime();",
        f"  lam = {lam}; u = apply(M, i -> random kk);",
        "  g = apply(flatten entries (gens I * random(kk^(numgens I), kk^c)), f -> phi f);",
        "  Jg = (transpose jacobian matrix{g})_{0..M-1};",
        "  h = det(Jg * random(kk^M, kk^c));",
        "  E = phi I + ideal apply(M, i -> lam_i * (u_i - R_i) - sum(c, j -> R_(M+j) * Jg_(j,i)))"
        " + ideal(1 - z * h);",
        "  stdio << \"RUN \" << k << \" ED \" << (if dim E == 0 then degree E else -1)"
        " << \" CPU \" << cpuTime() - c0 << endl << flush;",
        ");", "exit 0", ""])


def numerical_script(polys, n, M, weights, runs) -> str:
    """Macaulay2: solveSystem on the gauge-fixed parametric critical equations, `runs` seeds."""
    lam = "apply(M, i -> 1_C)" if weights == "standard" else "apply(M, i -> random CC)"
    return "\n".join([
        'needsPackage "NumericalAlgebraicGeometry";',
        f"n = {n}; M = {M};",
        "P = QQ[w_0..w_(n-1)];",
        "F = {" + ",\n".join(polys) + "};",
        "JF = transpose jacobian matrix{F};",
        f"for k from 1 to {runs} do (",
        "  setRandomSeed k; c0 = cpuTime();",
        "  pt = apply(n, i -> (1000 + random 1000)/1000);",
        "  r = rank sub(JF, matrix{pt}); C = CC_53[v_0..v_(r-1)];",
        "  L = random(CC^n, CC^r); w0 = random(CC^n, CC^1);",
        "  phi = map(C, P, flatten entries(sub(w0, C) + sub(L, C) * transpose vars C));",
        "  G = apply(F, f -> phi f); JG = transpose jacobian matrix{G};",
        f"  lam = {lam}; u = apply(M, i -> random CC);",
        "  crit = apply(r, j -> sum(M, i -> lam_i * JG_(i,j) * (G_i - u_i)));",
        "  sols = solveSystem(crit, tStep => 0.01, CorrectorTolerance => 1e-8, tStepMin => 1e-10);",
        "  reg = select(sols, s -> status s === Regular);",
        "  full = select(reg, s -> (sv := first SVD sub(JG, matrix s); min sv > 1e-8 * max sv));",
        "  xs = select(apply(full, s -> sub(matrix{G}, matrix s)), x -> norm x > 1e-8);",
        "  distinct = {};",
        "  scan(xs, x -> if all(distinct, y -> norm(x - y) > 1e-6 * (1 + norm x))"
        " then distinct = append(distinct, x));",
        "  stdio << \"RUN \" << k << \" ED \" << #distinct << \" CPU \" << cpuTime() - c0"
        " << \" solutions \" << #sols << \" regular \" << #reg << \" full-rank \" << #full"
        " << endl << flush;",
        ");", "exit 0", ""])


def run_m2(script: str, timeout: float) -> tuple[list[tuple[int, float, str]], str]:
    """([(value, cpu seconds, rest of line)], header or why it stopped)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ed.m2"
        path.write_text(script)
        why = ""
        try:
            done = subprocess.run(["M2", "--script", str(path)], capture_output=True, text=True,
                                  timeout=timeout, check=False)
            text = done.stdout
            if not RESULT.search(text):
                why = "failed: " + (done.stderr.strip().splitlines() or ["no output"])[-1][:100]
        except subprocess.TimeoutExpired as exc:
            text = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            why = f"stopped at {timeout:.0f} s"
    found = [(int(d), float(s), rest.strip()) for _, d, s, rest in RESULT.findall(text)]
    header = re.search(r"IDEAL (.*)", text)
    return found, "; ".join(x for x in (header and header.group(1), why) if x)


def summary(found, runs: int, ours) -> str:
    values = [d for d, _, _ in found]
    agree = sum(d == ours for d in values) if ours is not None else 0
    counts = ", ".join(f"{v} x{values.count(v)}" for v in sorted(set(values)))
    median = statistics.median(s for _, s, _ in found) if found else float("nan")
    return f"{agree}/{runs} agree [{counts or '-'}] median {median:.2f} s"


def bezout(F, n: int, dim: int) -> int:
    """(2 D - 1)^r, D the largest total degree of the map: the total-degree homotopy's paths."""
    import flint

    ctx = flint.fmpz_mpoly_ctx.get(("w", n))
    D = max(f.total_degree() for f in F(list(ctx.gens())))
    return (2 * D - 1) ** dim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--implicit-runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--max-paths", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()

    import flint

    from neuromanifold.degrees.ed import image_ed_degree

    have_m2 = shutil.which("M2") is not None
    if not have_m2:
        print("Macaulay2 (M2) is not on PATH: install it from the system's packages "
              "(apt-get install macaulay2) to compare; printing this package's ED degrees only.")
    for name in args.cases:
        build, weights, closed, docs, ideal = CASES[name]
        F, n, dim = build()
        start = time.perf_counter()
        ours = image_ed_degree(F, n, dim, weights=weights, seed=args.seed, timeout=args.timeout)
        ours_s = time.perf_counter() - start
        dim = ours.dimension
        print(f"{name}: {weights} metric, {n} parameters, dimension {dim}, {ours.n_outputs} "
              f"coordinates; closed form {closed or '-'}, docs {docs}", flush=True)
        print(f"  ours      {str(ours.ed_degree or '-'):>5s} [{ours.status}] {ours_s:.2f} s", flush=True)
        if not have_m2:
            continue
        ctx = flint.fmpz_mpoly_ctx.get(("w", n))
        polys = [str(f).replace(" ", "").replace("w", "w_") for f in F(list(ctx.gens()))]
        found, head = run_m2(implicit_script(polys, n, ours.n_outputs, ideal, weights,
                                             args.implicit_runs), args.timeout)
        print(f"  implicit  {summary(found, args.implicit_runs, ours.ed_degree)}"
              f"{'  (' + head + ')' if head else ''}", flush=True)
        paths = bezout(F, n, dim)
        if paths > args.max_paths:
            print(f"  numerical skipped: {paths} paths > --max-paths {args.max_paths}", flush=True)
            continue
        found, head = run_m2(numerical_script(polys, n, ours.n_outputs, weights, args.runs),
                             args.timeout)
        detail = "; ".join(sorted({rest for _, _, rest in found}))
        print(f"  numerical {summary(found, args.runs, ours.ed_degree)} ({paths} paths; {detail}"
              f"{'; ' + head if head else ''})", flush=True)


if __name__ == "__main__":
    main()
