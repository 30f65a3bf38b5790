"""The paper's Figure 1: one lightning layer with d = 2, d' = 1, a = 2 (docs/math/single-layer.md).

Math: phi(X) = V X X^T A X is linear in the tensor T = V (x) A (T_krs = V_k A_rs, 8 entries),
and only the part of T symmetric in (k, r) is seen (the Theorem 3.2 swap of alpha and gamma), so
the linear span of M is 6-dimensional with coordinates
  y = (V1 A11, V1 A12, V1 A21 + V2 A11, V1 A22 + V2 A12, V2 A21, V2 A22).
This is checked exactly: the kernel over Q of T -> (phi(X_1), ..., phi(X_N)) equals the kernel
of T -> y. M (dim 5, Eq. 7) is a hypersurface of the span; its defining polynomial F is found
exactly by interpolation: evaluate y at random integer (A, V) and take the kernel over Q of
the matrix of homogeneous monomials of degree D = 1, 2, ... until it is non-zero.
The singular locus (rank A <= 1, since d' = 1 makes rank V <= 1 always; Theorem 3.4) is the set
y(alpha beta^T, gamma^T), which meets a generic 3-dimensional affine slice in a curve.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from fractions import Fraction
from math import gcd

import numpy as np
import sympy

from ..errors import ComputationError
from ..core.seeds import seeded_rng
from ..core.architecture import Architecture
from ..dimension.fp import nullspace_rational, rank_rational
from ..core.maps import forward_attention
from ..core.parameters import AttentionWeights

ARCH = Architecture((2, 1), (2,), 3)
N_COORDS = 6
SYMBOLS = sympy.symbols("y1:7")


def span_coordinates(A, V) -> list:
    """y(A, V) in the 6-dimensional span of M (module docstring); exact for integer entries."""
    v1, v2 = V[0][0], V[0][1]
    return [v1 * A[0][0], v1 * A[0][1], v1 * A[1][0] + v2 * A[0][0],
            v1 * A[1][1] + v2 * A[0][1], v2 * A[1][0], v2 * A[1][1]]


def _tensor_to_coordinates() -> list[list[int]]:
    """The 6 x 8 matrix B with y = B vec(T), T_krs = V_k A_rs in the order (k, r, s)."""
    rows = []
    for index in range(8):
        k, r, s = index // 4, (index // 2) % 2, index % 2
        A = [[0, 0], [0, 0]]
        A[r][s] = 1
        V = [[1 if k == 0 else 0, 1 if k == 1 else 0]]
        rows.append(span_coordinates(A, V))
    return [list(col) for col in zip(*rows)]


def _tensor_columns(inputs: np.ndarray) -> list[list]:
    """phi at the 8 unit tensors T = e_k (x) E_rs, each flattened (the columns of T -> phi)."""
    columns = []
    for index in range(8):
        k, r, s = index // 4, (index // 2) % 2, index % 2
        A = np.zeros((2, 2), dtype=object)
        A[r, s] = 1
        V = np.zeros((1, 2), dtype=object)
        V[0, k] = 1
        columns.append(list(forward_attention(ARCH, AttentionWeights((A,), (V,)), inputs).reshape(-1)))
    return columns


def span_dimension_exact() -> int:
    """dim span(M), exactly over Q from phi's coefficients (no input samples, so no cap).

    Math: phi(X) = sum_j T_j phi_j(X) with phi_j = phi at the j-th unit tensor; span(M) is the
    span of the phi_j in the space of polynomial maps, so its dimension is the rank over Q of
    the 8 coefficient vectors of phi_j in the input monomials (X a symbolic 2 x 3 matrix).
    """
    import flint  # noqa: PLC0415 - python-flint is the exact-arithmetic dependency

    from ..degrees.polymap import object_array  # noqa: PLC0415

    ctx = flint.fmpz_mpoly_ctx.get(("x", 2 * ARCH.tokens))
    X = object_array((2, ARCH.tokens), ctx.gens())
    polys = _tensor_columns(X)
    keys = sorted({(i, mono) for col in polys for i, poly in enumerate(col)
                   if not isinstance(poly, int) for mono in poly.to_dict()})
    rows = [[int(col[i].to_dict().get(mono, 0)) if not isinstance(col[i], int) else 0
             for col in polys] for i, mono in keys]
    return rank_rational(rows)


def check_span_coordinates(n_inputs: int = 6, seed: int = 0) -> tuple[int, bool]:
    """(dimension of the span, whether y are coordinates on it), exactly over Q.

    Math: the dimension is `span_dimension_exact` (phi's coefficients, never capped by a
    sample count). y is a coordinate system iff T -> phi and T -> y have the same kernel; the
    kernel of T -> phi is that of T -> (phi(X_1..X_N)) once the evaluation's rank reaches
    dim span(M), so with M the evaluation and B the matrix of y: rank [M; B] = rank M = rank B
    = dim span(M). Fewer inputs than that can show (rank <= 3 N) is refused, not reported.
    """
    from ..core.checks import bad_value, check_int  # noqa: PLC0415

    n_inputs = check_int("n_inputs", n_inputs, minimum=1, fix="Pass n_inputs=6.")
    dimension = span_dimension_exact()
    rng = seeded_rng(seed, "figure1-span")
    inputs = [np.array(rng.integers(-9, 10, size=(2, ARCH.tokens)).tolist(), dtype=object)
              for _ in range(n_inputs)]
    columns = [[int(x) for X in inputs for x in _tensor_columns(X)[j]] for j in range(8)]
    M = [list(row) for row in zip(*columns)]
    rank_M = rank_rational(M)
    if rank_M != dimension:
        raise bad_value("n_inputs", f"enough inputs for the evaluation to reach the span's "
                        f"dimension {dimension} (rank at most 3 per input)",
                        f"{n_inputs} (evaluation rank {rank_M})", "Pass n_inputs=6.")
    B = _tensor_to_coordinates()
    rank_B, rank_both = rank_rational(B), rank_rational(M + B)
    return dimension, rank_M == rank_B == rank_both


def _random_point(rng, low: int = -9, high: int = 10) -> list[int]:
    A = rng.integers(low, high, size=(2, 2)).tolist()
    V = rng.integers(low, high, size=(1, 2)).tolist()
    return span_coordinates(A, V)


def _evaluate_monomial(point: list[int], mono: tuple[int, ...]) -> int:
    out = 1
    for i in mono:
        out *= point[i]
    return out


def defining_polynomial(seed: int = 0, max_degree: int = 6) -> tuple[sympy.Expr, int]:
    """The defining polynomial of M in the span (exact, primitive integer coefficients).

    Math: kernel over Q of [m(y(A_j, V_j))]_{j, m} over homogeneous monomials m of degree D,
    for the least D with a non-zero kernel; rows = #monomials + 12 random integer points.
    Returns (F as a sympy expression in y1..y6, D).
    """
    rng = seeded_rng(seed, "figure1-interpolation")
    for degree in range(1, max_degree + 1):
        monos = list(itertools.combinations_with_replacement(range(N_COORDS), degree))
        points = [_random_point(rng) for _ in range(len(monos) + 12)]
        rows = [[_evaluate_monomial(p, m) for m in monos] for p in points]
        kernel = nullspace_rational(rows)
        if kernel:
            if len(kernel) != 1:
                raise ComputationError(f"expected a one-dimensional kernel at degree {degree}; "
                                   f"got {len(kernel)}")
            coeffs = kernel[0]
            lcm = 1
            for c in coeffs:
                lcm = lcm * c.denominator // gcd(lcm, c.denominator)
            ints = [int(c * lcm) for c in coeffs]
            g = 0
            for c in ints:
                g = gcd(g, c)
            ints = [c // g for c in ints]
            if next(c for c in ints if c != 0) < 0:
                ints = [-c for c in ints]
            expr = sympy.Add(*[c * sympy.Mul(*[SYMBOLS[i] for i in m]) for c, m in zip(ints, monos) if c])
            return sympy.expand(expr), degree
    raise ComputationError(f"no defining polynomial of degree <= {max_degree}")


def evaluate_exact(F: sympy.Expr, point: list) -> sympy.Rational:
    """F at a rational point of the span, exactly."""
    return F.subs(dict(zip(SYMBOLS, [sympy.Rational(Fraction(x).numerator, Fraction(x).denominator)
                                      for x in point])))


@dataclass
class Figure1Data:
    """Everything the Figure 1 plot and report need (polynomial exact; slice and samples float64)."""

    polynomial: sympy.Expr
    degree: int
    span_dim: int
    span_ok: bool
    n_manifold_checks: int
    vanishes_on_manifold: bool
    n_span_checks: int
    nonzero_on_span: int
    origin: np.ndarray
    directions: np.ndarray
    sliced: sympy.Expr
    surface_points: np.ndarray
    singular_points: np.ndarray
    extent: float
    seed: int
    notes: list = field(default_factory=list)

    def report(self) -> str:
        """The text written beside the PNG."""
        lines = [
            "Figure 1: one lightning layer, d = 2, d' = 1, a = 2 (t = 3)",
            f"seed {self.seed}",
            "span coordinates: y1 = V1 A11, y2 = V1 A12, y3 = V1 A21 + V2 A11, y4 = V1 A22 + V2 A12, "
            "y5 = V2 A21, y6 = V2 A22",
            f"linear span of M: dimension {self.span_dim} (exact over Q); y are coordinates on it: "
            f"{self.span_ok}",
            f"defining polynomial F (degree {self.degree}, exact over Q, primitive integer coefficients):",
            f"  F = {self.polynomial}",
            f"check: F = 0 exactly at {self.n_manifold_checks} random integer points of M: "
            f"{self.vanishes_on_manifold}",
            f"check: F != 0 at {self.nonzero_on_span} of {self.n_span_checks} random integer points of the span",
            "slice: y = o + s1 u1 + s2 u2 + s3 u3 (float64, seeded), o = "
            + np.array2string(self.origin, precision=3, separator=", "),
            "  u = " + np.array2string(self.directions.T, precision=3, separator=", ").replace("\n", " "),
            f"  sliced polynomial f(s1, s2, s3) = {sympy.N(self.sliced, 4)}",
            f"surface points plotted: {len(self.surface_points)}; singular-curve points "
            f"(rank A <= 1): {len(self.singular_points)}",
        ]
        lines += self.notes
        return "\n".join(lines) + "\n"


def _surface_samples(f: sympy.Expr, s: tuple, extent: float, n_grid: int) -> np.ndarray:
    """Real roots of f along each axis over an n_grid^2 grid of the other two (a dense point cloud)."""
    points = []
    grid = np.linspace(-extent, extent, n_grid)
    for axis in range(3):
        others = [s[j] for j in range(3) if j != axis]
        poly = sympy.Poly(f, s[axis])
        coeff_fns = [sympy.lambdify(others, c, "numpy") for c in poly.all_coeffs()]
        U, W = np.meshgrid(grid, grid, indexing="ij")
        coeffs = [np.broadcast_to(np.asarray(fn(U, W), dtype=float), U.shape) for fn in coeff_fns]
        for idx in np.ndindex(U.shape):
            c = [float(cf[idx]) for cf in coeffs]
            while c and abs(c[0]) < 1e-14:
                c = c[1:]
            if len(c) < 2:
                continue
            for root in np.roots(c):
                if abs(root.imag) < 1e-9 and abs(root.real) <= extent:
                    p = [0.0, 0.0, 0.0]
                    p[axis] = root.real
                    p[[j for j in range(3) if j != axis][0]] = U[idx]
                    p[[j for j in range(3) if j != axis][1]] = W[idx]
                    points.append(p)
    return np.array(points)


def _singular_curve(origin: np.ndarray, directions: np.ndarray, n_grid: int,
                    say=None) -> np.ndarray:
    """Slice coordinates of points y(alpha beta^T, gamma^T) in the affine slice (rank A <= 1).

    Math: alpha = (cos t, sin t), gamma = (cos u, sin u), y = M(t, u) beta is linear in beta;
    with N spanning the normal space of the slice, N^T M beta = N^T o is solvable iff
    det [N^T M | N^T o] = 0; its zero set on a (t, u) grid is traced by sign changes.
    """
    q, _ = np.linalg.qr(np.column_stack([directions, np.eye(N_COORDS)]))
    normal = q[:, 3:6]
    ts = np.linspace(0, np.pi, n_grid, endpoint=False)

    def M(t, u):
        alpha, gamma = (np.cos(t), np.sin(t)), (np.cos(u), np.sin(u))
        cols = []
        for b in ((1.0, 0.0), (0.0, 1.0)):
            A = [[alpha[0] * b[0], alpha[0] * b[1]], [alpha[1] * b[0], alpha[1] * b[1]]]
            cols.append(span_coordinates(A, [list(gamma)]))
        return np.array(cols).T

    rhs = normal.T @ origin
    T, Uu = np.meshgrid(ts, ts, indexing="ij")

    def M_batch(t, u):
        # y(alpha e_b^T, gamma^T) for b = 1, 2 as the two columns, batched over (t, u).
        a1, a2, g1, g2 = np.cos(t), np.sin(t), np.cos(u), np.sin(u)
        zero = np.zeros_like(t)
        col1 = np.stack([g1 * a1, zero, g1 * a2 + g2 * a1, zero, g2 * a2, zero], -1)
        col2 = np.stack([zero, g1 * a1, zero, g1 * a2 + g2 * a1, zero, g2 * a2], -1)
        return np.stack([col1, col2], -1)

    Mg = M_batch(T, Uu)
    reduced = np.einsum("ck,...cb->...kb", normal, Mg)
    det = np.linalg.det(np.concatenate([reduced, np.broadcast_to(rhs[:, None], reduced.shape[:-1] + (1,))],
                                       axis=-1))
    found = []
    step = np.pi / n_grid
    last = time.perf_counter()
    for direction, (di, dj) in enumerate(((1, 0), (0, 1))):
        other = np.roll(det, (-di, -dj), axis=(0, 1))
        hits = np.argwhere(det * other < 0)
        for count, (i, j) in enumerate(hits):
            if say is not None and time.perf_counter() - last > 5.0:
                last = time.perf_counter()
                say(f"singular curve: sign change {count + 1} of {len(hits)} along axis "
                    f"{direction + 1} of 2")
            w = det[i, j] / (det[i, j] - other[i, j])
            t, u = ts[i] + w * step * di, ts[j] + w * step * dj
            Mt = M(t, u)
            beta, *_ = np.linalg.lstsq(normal.T @ Mt, rhs, rcond=None)
            y = Mt @ beta
            s, *_ = np.linalg.lstsq(directions, y - origin, rcond=None)
            if np.linalg.norm(origin + directions @ s - y) < 1e-6 * max(1.0, np.linalg.norm(y)):
                found.append(s)
    return np.array(found)


def figure1_data(seed: int = 0, n_grid: int = 110, extent: float = 2.0,
                 progress=None) -> Figure1Data:
    """Polynomial, checks, a generic 3-dimensional affine slice and its sampled surface and curve.

    `progress(message)` hears each phase as it starts (the interpolation and the sampling take
    most of the time)."""
    say = progress or (lambda _msg: None)
    say("span coordinates of the function space (exact rank over Q)")
    span_dim, span_ok = check_span_coordinates(seed=seed)
    say("defining polynomial by exact interpolation (degrees up to 6, over Q)")
    F, degree = defining_polynomial(seed=seed)
    say(f"checking it exactly at 40 points (degree {degree}), slicing it in 3 dimensions")
    rng = seeded_rng(seed, "figure1-slice")
    on_manifold = [_random_point(rng, -50, 51) for _ in range(20)]
    vanishes = all(evaluate_exact(F, p) == 0 for p in on_manifold)
    on_span = [rng.integers(-50, 51, size=N_COORDS).tolist() for _ in range(20)]
    nonzero = sum(evaluate_exact(F, p) != 0 for p in on_span)
    # The slice passes through a point of M (so it cuts the surface) in generic directions.
    A0, V0 = rng.standard_normal((2, 2)), rng.standard_normal((1, 2))
    origin = np.array(span_coordinates(A0.tolist(), V0.tolist()), dtype=float)
    origin = origin / np.linalg.norm(origin)
    directions, _ = np.linalg.qr(rng.standard_normal((N_COORDS, 3)))
    s = sympy.symbols("s1:4")
    y_of_s = [sum(sympy.Float(float(x), 17) * v for x, v in zip(row, (1, *s)))
              for row in np.column_stack([origin, directions])]
    sliced = sympy.expand(F.subs(dict(zip(SYMBOLS, y_of_s))))
    say(f"sampling the sliced surface on a {n_grid}^3 grid")
    surface = _surface_samples(sliced, s, extent, n_grid)
    say("tracing the singular curve")
    curve = _singular_curve(origin, directions, max(200, 18 * n_grid), say)
    if len(curve):
        curve = curve[np.all(np.abs(curve) <= extent, axis=1)]
    notes = ["surface: the real zero set of F in the slice, i.e. the slice of M's Zariski closure; by "
             "the proof of Corollary A.6 the closure adds to M only points y(alpha beta^T, nu gamma^T) "
             "with alpha, gamma complex conjugate (on the singular curve; the paper draws them dotted)",
             "red: y(alpha beta^T, gamma^T) with real alpha, beta, gamma, i.e. the singular locus rank A "
             "<= 1 inside M (Theorem 3.4); the closure-only part of the curve is not drawn"]
    return Figure1Data(F, degree, span_dim, span_ok, len(on_manifold), vanishes, len(on_span), nonzero,
                       origin, directions, sliced, surface, curve, extent, seed, notes)
