"""The degree of one lightning layer through its structure: a finite linear image of a Segre product.

Math (docs/degree.md, "Degree with structure first"). One plain lightning layer is
phi(X) = V X (X^T A X), A = Q^T K, linear in the tensor T = V (x) A. So its neurovariety is
L(C), where C is the affine cone over the Segre product P^{d'd-1} x D_r (D_r: the d x d matrices
of rank <= r = min(a, d), all of P^{d^2-1} when r = d) and L: T -> (coefficients of phi) is
linear. If L has no base locus on C (C meets ker L only in 0), L: P(C) -> P(V) is a finite
morphism, and deg P(C) = e_L deg P(V), with e_L its generic degree. Then

    deg V = binom(m_X + m_Y, m_X) * deg D_r / e_L,   m_X = d'd - 1,  m_Y = dim D_r - 1.

The route checks, per run, every piece that is not a theorem:
- no base locus: proved for t >= 2 (docs), and checked: the bilinear system
  v X_n X_n^T A X_n = 0 (n = 1..N random inputs), l_1(v) = 1, l_2(A) = 1 in the unknowns
  v in K^d, A in K^{d x d} (any A, a stronger statement; one row of V suffices since row i of
  phi is v_i X X^T A X) must have no zero over the algebraic closure of F_p (msolve: `empty`);
- deg D_r: measured by the degree engine on (Q, K) -> Q^T K and compared with its closed form;
- e_L: the generic fiber of the gauge-fixed network map G (the degree engine's fiber) divided
  by the fiber of the same gauge-fixed parametrisation P of C, (V, Q, K) -> V (x) Q^T K
  (G = E o L o P with E the evaluation, injective on the span): at a generic point the fiber of
  G is the union over the e_L points of C above it of e_P points each;
- dim V (exact engine) equals dim C (L finite keeps the dimension).
Each measured number comes from zero-dimensional radical systems over two primes; any failed
check gives `ambiguous`, a time limit `stopped`. The direct count (`network.degree`) is the
cross-check where both finish.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

from ..core.architecture import Architecture
from ..core.checks import bad_value, check_int, check_seed
from ..core.seeds import purpose_seed
from ..dimension.fp import rank_mod_p
from .budget import Deadline, DegreeStopped
from .engine import (AMBIGUOUS, DEFAULT_TIMEOUT, EXACT, PRIMES, STOPPED, as_polys, check_timeout,
                     count_text, failure_reason, gauge_fixed_map, image_degree, jacobian_at,
                     poly_ring)
from .msolve import SolveCount, count_solutions
from .polymap import blocks_from_flat, check_polynomial, network_map, object_array


def determinantal_degree(m: int, n: int, r: int) -> int:
    """Degree of the m x n matrices of rank <= r (closed form; 1 when r >= min(m, n)).

    Math: deg = prod_{i=0}^{n-r-1} binom(m+i, r) / binom(r+i, r) for n <= m (Harris,
    Algebraic Geometry, Example 19.10). 3 x 3 rank 1: 6 (Segre P2 x P2); rank 2: 3 (det).
    """
    m, n = max(m, n), min(m, n)
    if r >= n:
        return 1
    value = Fraction(1)
    for i in range(n - r):
        value *= Fraction(math.comb(m + i, r), math.comb(r + i, r))
    assert value.denominator == 1
    return int(value)


def segre_degree(dims: list[int], degrees: list[int]) -> int:
    """Degree of the Segre product of projective varieties of dimensions `dims`, degrees `degrees`.

    Math: the multinomial (sum dims)! / prod dims! times the product of the degrees (the top
    power of h_1 + ... + h_k on the product).
    """
    value = math.factorial(sum(dims))
    for k in dims:
        value //= math.factorial(k)
    return value * math.prod(degrees)


@dataclass(frozen=True)
class Factor:
    """One factor X_i of the product: its name, projective dimension m_i, the degree k_i of its
    embedding (Segre 1, Veronese 3) and, for a determinantal factor, (d, r) to measure deg X_i."""

    name: str
    m: int
    k: int
    rank: tuple[int, int] | None = None     # (d, r): d x d matrices of rank <= r, r < d

    @property
    def closed_form(self) -> int:
        """deg X_i by its closed form (1 for a projective space)."""
        return 1 if self.rank is None else determinantal_degree(self.rank[0], self.rank[0],
                                                                self.rank[1])


@dataclass(frozen=True)
class Route:
    """A structure of the neurovariety: V = L(W), W the cone over the Segre-Veronese product of
    `factors` (embedded by O(k_1, ..., k_s)), L linear; `param` maps the network's flat weights to
    coordinates of W (G = E o L o param exactly); `base_locus(p, rng, timeout)` is the msolve check
    that L has no base locus on W; `proved` says where the hypothesis is also proved."""

    name: str
    factors: tuple[Factor, ...]
    param: Callable
    base_locus: Callable
    proved: str = ""

    @property
    def dimension(self) -> int:
        """dim W (affine cone)."""
        return sum(f.m for f in self.factors) + 1


def product_degree(factors: list[Factor] | tuple[Factor, ...], degrees: list[int]) -> int:
    """deg P(W) for the Segre-Veronese product: (sum m_i)! / prod m_i! * prod k_i^{m_i} deg X_i.

    Math: the embedding by O(k_1..k_s) pulls the hyperplane class back to sum k_i h_i, whose top
    power on X_1 x ... x X_s is the multinomial times prod k_i^{m_i} deg X_i (h_i^{m_i} = deg X_i).
    """
    return segre_degree([f.m for f in factors], degrees) * math.prod(f.k ** f.m for f in factors)


def _matrix_factor(d: int, r: int, k: int, what: str) -> Factor:
    r = min(r, d)
    if r >= d:
        return Factor(f"{what}: all {d} x {d} matrices, P^{d * d - 1}", d * d - 1, k)
    return Factor(f"{what}: {d} x {d} matrices of rank <= {r}", r * (2 * d - r) - 1, k, (d, r))


def _cubic_monomials(entries: list) -> list:
    """The degree-3 monomials of `entries` (sorted index triples): the Veronese coordinates."""
    n = len(entries)
    return [entries[i] * entries[j] * entries[k]
            for i in range(n) for j in range(i, n) for k in range(j, n)]


def _plain(arch: Architecture) -> bool:
    return arch.tokens >= 2 and arch == Architecture(arch.widths, arch.keys, arch.tokens)


def route_for(arch: Architecture) -> Route | None:
    """The structure the degree can be computed through (docs/degree.md), or None.

    - one plain layer (t >= 2): W = Segre(P^{d'd-1} x D_r), T = V (x) A;
    - two plain layers with d_1 = d_2 = 1: phi = c z |z|^2 with z the first layer's output, cubic
      in z, so linear in (v_1 (x) A_1)^{(x) 3}: W = Veronese_3 of Segre(P^{d_0-1} x D_{r_1});
    - two plain layers with d_1 >= d_0: the virtual weights u = V_2 V_1, B = V_1^T A_2 V_1 are
      free, and phi = u X M M^T X^T B X M with M = X^T A_1 X is linear in u (x) B (x) A_1^{(x) 3}:
      W = P^{d_2 d_0 - 1} x D_{r_2} x D_{r_1}, embedded by O(1, 1, 3).
    """
    if not _plain(arch):
        return None
    t = arch.tokens
    if arch.n_layers == 1:
        d, d1 = arch.widths
        return Route("segre: V (x) A", (Factor(f"P^{d1 * d - 1} (the values V)", d1 * d - 1, 1),
                                        _matrix_factor(d, arch.keys[0], 1, "A = Q^T K")),
                     segre_map(arch), lambda p, rng, s: base_locus_check(d, t, p, rng, s),
                     "proved for t >= 2 (docs/degree.md)")
    if arch.n_layers != 2:
        return None
    d0, d1, d2 = arch.widths
    a1, a2 = arch.keys
    if d1 == 1 and d2 == 1:
        return Route("veronese: (v_1 (x) A_1)^3, phi = c z |z|^2",
                     (Factor(f"P^{d0 - 1} (the first values v_1)", d0 - 1, 3),
                      _matrix_factor(d0, a1, 3, "A_1")),
                     _scalar_top_map(arch),
                     lambda p, rng, s: _norm_base_locus(d0, min(a1, d0), t, p, rng, s))
    if d1 >= d0:
        return Route("virtual weights: u (x) B (x) A_1^3, u = V_2 V_1, B = V_1^T A_2 V_1",
                     (Factor(f"P^{d2 * d0 - 1} (u = V_2 V_1)", d2 * d0 - 1, 1),
                      _matrix_factor(d0, a2, 1, "B = V_1^T A_2 V_1"),
                      _matrix_factor(d0, a1, 3, "A_1")),
                     _virtual_map(arch), lambda p, rng, s: _virtual_base_locus(
                         d0, min(a1, d0), min(a2, d0), t, p, rng, s))
    return None


def _why_not(arch: Architecture) -> str:
    if arch.tokens < 2:
        return "t = 1 (the map then sees only the symmetric part of A: a base locus)"
    if not _plain(arch):
        return "heads, values, residual, MLP or decoder options (the routes cover plain layers)"
    if arch.n_layers > 2:
        return f"{arch.n_layers} layers (the routes cover one or two layers)"
    return ("two layers with d_0 > d_1 and not d_1 = d_2 = 1 (the virtual weights are not free)")


@dataclass(frozen=True)
class StructuredRun:
    """One repetition: the fibers of the gauge-fixed network map and of the Segre parametrisation."""

    prime: int
    run: int
    network_fiber: SolveCount
    factor_fiber: SolveCount | None
    e_L: int | None
    degree: int | None
    note: str = ""

    def to_dict(self) -> dict:
        """A JSON-serialisable description."""
        return {"prime": self.prime, "run": self.run,
                "network_fiber": self.network_fiber.to_dict(),
                "segre_fiber": self.factor_fiber and self.factor_fiber.to_dict(),
                "e_L": self.e_L, "degree": self.degree, "note": self.note}


@dataclass
class StructuredDegreeResult:
    """The degree of a neurovariety through its structure V = L(W), with every check printed.

    status: `exact (mod p, randomised)` when every hypothesis check passed and every run gave the
    same e_L; `stopped` when the time limit passed; `ambiguous` when a check failed.
    factors: (name, m_i, k_i, measured degree or None, closed form) per factor of W.
    """

    degree: int | None
    status: str
    dimension: int | None
    n_params: int
    route: str
    factors: list[tuple[str, int, int, int | None, int]]
    product_degree: int | None
    base_locus: list[SolveCount]
    runs: list[StructuredRun]
    seconds: float
    notes: list[str] = field(default_factory=list)
    label: str = ""
    seed: int = 0
    cross_check: object = None

    @property
    def agree(self) -> bool:
        """True when every run gave the same degree."""
        values = {run.degree for run in self.runs}
        return len(values) == 1 and None not in values

    def to_dict(self) -> dict:
        """A JSON-serialisable description."""
        return {"label": self.label, "degree": self.degree, "status": self.status,
                "route": self.route, "dimension": self.dimension, "n_params": self.n_params,
                "factors": [{"name": n, "dimension": m, "embedding_degree": k,
                             "degree_measured": got, "degree_closed_form": want}
                            for n, m, k, got, want in self.factors],
                "product_degree": self.product_degree,
                "base_locus": [c.to_dict() for c in self.base_locus],
                "runs_agree": self.agree, "runs": [r.to_dict() for r in self.runs],
                "seconds": round(self.seconds, 3), "seed": self.seed, "notes": list(self.notes),
                "cross_check": self.cross_check and self.cross_check.to_dict()}

    def __str__(self) -> str:
        value = "-" if self.degree is None else str(self.degree)
        dimension = "-" if self.dimension is None else str(self.dimension)
        lines = [self.label,
                 f"degree {value}  [{self.status}]  dimension {dimension}, "
                 f"{self.n_params} parameters, {self.seconds:.1f} s, seed {self.seed}",
                 f"  route: {self.route}"]
        for name, m, k, got, want in self.factors:
            measured = "" if got is None and want == 1 else \
                f", measured {'-' if got is None else got}"
            lines.append(f"  factor {name}: dimension {m}, embedded by O({k}), degree "
                         f"{want} (closed form{measured})")
        if self.product_degree is not None:
            lines.append(f"  deg W = {self.product_degree} (the product's multidegree formula)")
        for p, c in zip(PRIMES, self.base_locus):
            lines.append(f"  hypothesis, no base locus (L finite on W), p = {p}: "
                         + ("checked, no zero" if c.status == "empty" else
                            f"FAILED: {count_text(c)}") + f" ({c.seconds:.2f} s)")
        for run in self.runs:
            lines.append(
                f"  p = {run.prime}, run {run.run}: network fiber {count_text(run.network_fiber)}"
                + (f", W fiber {count_text(run.factor_fiber)}" if run.factor_fiber else "")
                + (f" -> e_L {run.e_L}" if run.e_L is not None else "")
                + (f", degree {run.degree}" if run.degree is not None else "")
                + (f" ({run.note})" if run.note else ""))
        if self.runs:
            lines.append(f"  runs agree: {'yes' if self.agree else 'no'} ({len(self.runs)} runs)")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(line for line in lines if line)


def _rank_map(d: int, r: int) -> Callable:
    """(Q, K) -> Q^T K, Q and K r x d row-major: the d x d matrices of rank <= r."""
    def F(w):
        Q, K = w[: r * d], w[r * d:]
        return [sum(Q[k * d + i] * K[k * d + j] for k in range(r))
                for i in range(d) for j in range(d)]
    return F


def segre_map(arch: Architecture) -> Callable:
    """The parametrisation P: flat weights (block order) -> entries of V (x) Q^T K of the cone C."""
    def F(values):
        blocks = blocks_from_flat(arch, values)
        Q, K, V = blocks["Q_1_1"], blocks["K_1_1"], blocks["V_1_1"]
        A = Q.T.dot(K)
        return [v * x for v in V.reshape(-1) for x in A.reshape(-1)]
    return F


def _scalar_top_map(arch: Architecture) -> Callable:
    """Weights -> c * (cubic monomials of v_1 (x) A_1), c = V_2 Q_2^T K_2 (d_1 = d_2 = 1)."""
    def F(values):
        b = blocks_from_flat(arch, values)
        A1 = b["Q_1_1"].T.dot(b["K_1_1"])
        c = b["V_2_1"].dot(b["Q_2_1"].T.dot(b["K_2_1"]))[0, 0]
        T = [v * x for v in b["V_1_1"].reshape(-1) for x in A1.reshape(-1)]
        return [c * m for m in _cubic_monomials(T)]
    return F


def _virtual_map(arch: Architecture) -> Callable:
    """Weights -> u (x) B (x) (cubic monomials of A_1), u = V_2 V_1, B = V_1^T A_2 V_1."""
    def F(values):
        b = blocks_from_flat(arch, values)
        A1 = b["Q_1_1"].T.dot(b["K_1_1"])
        V1 = b["V_1_1"]
        u = b["V_2_1"].dot(V1)
        B = V1.T.dot(b["Q_2_1"].T.dot(b["K_2_1"])).dot(V1)
        cubic = _cubic_monomials(list(A1.reshape(-1)))
        return [x * y * m for x in u.reshape(-1) for y in B.reshape(-1) for m in cubic]
    return F


def _locus(shapes: list[tuple[str, int, int]], equations: Callable, n_inputs: int, d: int,
           tokens: int, p: int, rng: random.Random, timeout: float) -> SolveCount:
    """msolve on `equations(factors, X)` at n_inputs random inputs X (d x t), each factor
    normalised nonzero by one random affine form of its entries = 1.

    shapes: per factor ('vector', n, 0): n unknowns; ('matrix', d, r): a d x d matrix of rank
    <= r, as Q^T K with Q, K r x d unknowns when r < d (every such matrix over an algebraically
    closed field), else d^2 unknowns.
    """
    sizes = [n if kind == "vector" else (2 * r * n if r < n else n * n) for kind, n, r in shapes]
    total = sum(sizes)
    ctx = poly_ring(total, p, "u")
    gens = list(ctx.gens())
    one = ctx.from_dict({(0,) * total: 1})
    factors, at = [], 0
    for (kind, n, r), size in zip(shapes, sizes):
        g = gens[at:at + size]
        at += size
        if kind == "vector":
            factors.append(object_array((1, n), g))
        elif r < n:
            Q, K = object_array((r, n), g[:r * n]), object_array((r, n), g[r * n:])
            factors.append(Q.T.dot(K))
        else:
            factors.append(object_array((n, n), g))
    polys = []
    for _ in range(n_inputs):
        X = object_array((d, tokens), [rng.randrange(p) for _ in range(d * tokens)])
        polys += as_polys(list(equations(factors, X)), ctx)
    for f in factors:
        polys.append(sum((rng.randrange(1, p) * x for x in f.reshape(-1)), -one))
    return count_solutions(polys, ctx.names(), p, timeout)


def base_locus_check(d: int, tokens: int, p: int, rng: random.Random, timeout: float,
                     n_inputs: int | None = None) -> SolveCount:
    """Zeros of v X_n X_n^T A X_n = 0 (n = 1..N), l_1(v) = 1, l_2(A) = 1 over the closure of F_p.

    `empty` proves (over that field) that no nonzero v (x) A with any A lies in ker L, hence that
    L has no base locus on the cone (fewer equations than the full identity in X only enlarge the
    zero set; any A, not only rank <= a, is a stronger statement). One row v of V suffices: row
    i of phi is v_i X X^T A X.
    """
    def eqs(f, X):
        v, A = f
        return v.dot(X).dot(X.T.dot(A).dot(X)).reshape(-1)
    n = d + d * d
    return _locus([("vector", d, 0), ("matrix", d, d)], eqs, n_inputs or n, d, tokens, p, rng,
                  timeout)


def _norm_base_locus(d: int, r: int, tokens: int, p: int, rng: random.Random, timeout: float,
                     n_inputs: int | None = None) -> SolveCount:
    """Zeros of |z|^2 = sum_s z_s^2 = 0, z = v X X^T A X (1 x t), rank A <= r, with v, A
    normalised nonzero: empty means c z |z|^2 vanishes only at 0 on W (z = 0 is among these)."""
    def eqs(f, X):
        v, A = f
        z = v.dot(X).dot(X.T.dot(A).dot(X)).reshape(-1)
        return [sum(zs * zs for zs in z)]
    return _locus([("vector", d, 0), ("matrix", d, r)], eqs, n_inputs or d + d * d, d, tokens,
                  p, rng, timeout)


def _virtual_base_locus(d: int, r1: int, r2: int, tokens: int, p: int, rng: random.Random,
                        timeout: float, n_inputs: int | None = None) -> SolveCount:
    """Zeros of u X M M^T X^T B X M = 0, M = X^T A X, with u (one row: row i of phi reads only
    u_i), B (rank <= r2), A (rank <= r1) normalised nonzero."""
    def eqs(f, X):
        u, B, A = f
        M = X.T.dot(A).dot(X)
        return u.dot(X).dot(M).dot(M.T).dot(X.T).dot(B).dot(X).dot(M).reshape(-1)
    return _locus([("vector", d, 0), ("matrix", d, r2), ("matrix", d, r1)], eqs,
                  n_inputs or d + 2 * d * d, d, tokens, p, rng, timeout)


def _fiber(G: list, ctx, point: list[int], deadline: Deadline) -> SolveCount:
    r = len(point)
    at = [int(g(*point)) for g in G]
    polys = [g - ctx.from_dict({(0,) * r: value}) for g, value in zip(G, at)]
    return count_solutions(polys, ctx.names(), ctx.modulus(), deadline.left())


def _one_run(F_net: Callable, F_seg: Callable, n: int, r: int, deg_C: int, p: int, seed: int,
             run: int, deadline: Deadline, say: Callable[[str], None],
             divisor: Callable[[int, int], int] | None = None) -> StructuredRun:
    """Gauge from the network map's Jacobian; fibers of G and of the gauge-fixed P at one point."""
    from ..dimension.fp import pivot_columns_mod_p  # noqa: PLC0415

    rng = random.Random(purpose_seed(seed, f"segre-run-{p}-{run}"))
    say(f"p = {p}, run {run}: the gauge of the network map")
    ctx_n = poly_ring(n, p)
    net = as_polys(F_net(list(ctx_n.gens())), ctx_n)
    w0 = [rng.randrange(1, p) for _ in range(n)]
    free = pivot_columns_mod_p(jacobian_at(net, w0, n, p, deadline), p)
    none = SolveCount("not run", None, None, 0.0)
    if len(free) != r:
        return StructuredRun(p, run, none, None, None, None,
                             f"Jacobian rank {len(free)} mod p at the gauge point, not {r}")
    ctx, G = gauge_fixed_map(F_net, free, w0, p)
    ctx_s, S = gauge_fixed_map(F_seg, free, w0, p)
    rank_s = rank_mod_p(jacobian_at(S, [w0[j] for j in free], r, p, deadline), p)
    if rank_s != r:
        return StructuredRun(p, run, none, None, None, None,
                             f"the gauge-fixed Segre map has Jacobian rank {rank_s}, not {r}")
    w1 = [rng.randrange(1, p) for _ in range(r)]
    say(f"p = {p}, run {run}: fiber of the network map ({r} unknowns)")
    e_G = _fiber(G, ctx, w1, deadline)
    if e_G.status != "finite" or not e_G.radical:
        return StructuredRun(p, run, e_G, None, None, None, failure_reason(e_G, "network fiber"))
    say(f"p = {p}, run {run}: fiber of the Segre parametrisation")
    e_P = _fiber(S, ctx_s, w1, deadline)
    if e_P.status != "finite" or not e_P.radical:
        return StructuredRun(p, run, e_G, e_P, None, None, failure_reason(e_P, "Segre fiber"))
    if e_G.n_distinct % e_P.n_distinct:
        return StructuredRun(p, run, e_G, e_P, None, None,
                             "the Segre fiber does not divide the network fiber")
    e_L = (divisor or (lambda g, s: g // s))(e_G.n_distinct, e_P.n_distinct)
    if e_L < 1 or deg_C % e_L:
        return StructuredRun(p, run, e_G, e_P, e_L, None,
                             f"e_L = {e_L} does not divide the Segre degree {deg_C}")
    return StructuredRun(p, run, e_G, e_P, e_L, deg_C // e_L)


def structured_degree(arch: Architecture, *, seed: int = 0, timeout: float = DEFAULT_TIMEOUT,
                      repeats: int = 2, progress: Callable[[str], None] | None = None,
                      max_memory: object | None = None, cross_check: bool = False,
                      _divisor: Callable[[int, int], int] | None = None
                      ) -> StructuredDegreeResult:
    """The degree of a neurovariety through its structure V = L(W) (`route_for`; module docstring).

    deg V = binom(m_X + m_Y, m_X) deg D_r / e_L, with deg D_r measured (and compared with its
    closed form), the base locus of L checked empty over both primes, e_L measured as the ratio
    of two fibers in `repeats` independent runs per prime. With `cross_check`, the direct count
    (`network.degree`) runs on the time left and must agree when it finishes.

    Raises:
        ValueError: a network that is not one plain lightning layer with t >= 2 (one line), or
            one that is not polynomial.

    Example:
        >>> structured_degree(Architecture((2, 2), (1,), 2)).degree   # Segre P3 x P1 x P1
        20
    """
    check_polynomial(arch)
    seed = check_seed(seed)
    timeout = check_timeout(timeout)
    repeats = check_int("repeats", repeats, minimum=1, fix="Pass --repeats 1 or more.")
    route = route_for(arch)
    if route is None:
        raise bad_value("route", "one plain lightning layer, or two with d_1 = d_2 = 1 or "
                        "d_1 >= d_0, t >= 2, for the structured route", _why_not(arch),
                        "Use --route direct.")
    from ..dimension.api import neuromanifold_dim  # noqa: PLC0415
    from .network import degree, degree_estimates, evaluation_inputs, span_basis  # noqa: PLC0415

    degree_estimates(arch, max_memory)
    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    deadline = Deadline.after(timeout)
    notes: list[str] = []
    factors = [(f.name, f.m, f.k, None, f.closed_form) for f in route.factors]
    result = StructuredDegreeResult(None, STOPPED, None, arch.n_params, route.name, factors, None,
                                    [], [], 0.0, notes, str(arch), seed)

    def finish(status: str, degree_value: int | None, why: str | None = None):
        result.status, result.degree = status, degree_value
        if why:
            notes.append(why)
        result.seconds = time.perf_counter() - start
        return result

    try:
        dim_result = neuromanifold_dim(arch, method="certified", seed=seed, max_memory=max_memory)
        r = result.dimension = dim_result.dimension
        notes.append(f"dimension {r} from the exact engine ({dim_result.status})")
        if r != route.dimension:
            return finish(AMBIGUOUS, None, f"dim V = {r} differs from dim W = {route.dimension}: "
                          "L is not finite on W, the route does not apply")
        measured: dict[tuple[int, int], int] = {}
        degrees = []
        for i, f in enumerate(route.factors):
            if f.rank is None:
                degrees.append(1)
                continue
            if f.rank not in measured:
                d_f, r_f = f.rank
                say(f"the factor {f.name}: its degree by the degree engine")
                fac = image_degree(_rank_map(d_f, r_f), 2 * r_f * d_f, f.m + 1, seed=seed,
                                   timeout=max(deadline.left(), 1e-3), repeats=repeats,
                                   deadline=deadline, label="rank map")
                if fac.status != EXACT:
                    return finish(fac.status, None, f"the degree of {f.name} is {fac.status}")
                measured[f.rank] = fac.degree
            got = measured[f.rank]
            factors[i] = (f.name, f.m, f.k, got, f.closed_form)
            if got != f.closed_form:
                return finish(AMBIGUOUS, None, f"the measured degree {got} of {f.name} differs "
                              f"from its closed form {f.closed_form}")
            degrees.append(got)
        deg_W = result.product_degree = product_degree(route.factors, degrees)
        for p in PRIMES:
            say(f"no base locus: the check over p = {p}")
            deadline.check("the base-locus check")
            c = route.base_locus(p, random.Random(purpose_seed(seed, f"base-{p}")),
                                 deadline.left())
            result.base_locus.append(c)
            if c.status == "stopped":
                return finish(STOPPED, None, "the base-locus check was stopped: the route is "
                              "not used (raise --timeout)")
            if c.status != "empty":
                return finish(AMBIGUOUS, None, f"the base-locus system over p = {p} is "
                              f"{c.status}: L may not be finite on W; no degree by this route")
        notes.append("no base locus: checked by msolve over both primes (no zero with every "
                     "factor nonzero)" + (f"; {route.proved}" if route.proved else ""))
        spans = []
        for p in PRIMES:
            span = span_basis(arch, p, seed, deadline, say)
            if not span.complete:
                return finish(STOPPED, None, "the span is still growing at the sample cap")
            spans.append((p, span.dimension, span.samples))
        if len({s for _, s, _ in spans}) != 1:
            return finish(AMBIGUOUS, None, "the span has different dimensions over the primes")
        inputs, N = evaluation_inputs(arch, spans, seed, deadline=deadline, say=say)
        notes.append(f"evaluation on N = {N} inputs injective on the span (dimension "
                     f"{spans[0][1]}, both primes): fibers of E o L equal fibers of L")
        F_net = network_map(arch, inputs, poll=lambda: deadline.check("the symbolic map"))
        for p in PRIMES:
            for k in range(repeats):
                run = _one_run(F_net, route.param, arch.n_params, r, deg_W, p, seed, k, deadline,
                               say, _divisor)
                result.runs.append(run)
                if run.degree is None:
                    break
            if result.runs[-1].degree is None:
                break
    except DegreeStopped as stop:
        return finish(STOPPED, None, f"the --timeout of {timeout:g} s passed during "
                      f"{stop.phase}: no degree is claimed (raise --timeout)")
    stopped = [run for run in result.runs if "stopped" in (
        run.network_fiber.status, run.factor_fiber and run.factor_fiber.status)]
    if stopped:
        return finish(STOPPED, None, "a fiber solve did not finish in time: no degree is claimed")
    values = {run.degree for run in result.runs}
    if None in values or len(values) != 1:
        return finish(AMBIGUOUS, None, "the runs disagree or a check failed: no degree is claimed")
    value = values.pop()
    notes.append(f"{len(result.runs)} runs over {len(PRIMES)} primes agree; deg V = deg W / e_L; "
                 "a randomised count over F_p, not a proof")
    if cross_check:
        say("cross-check: the direct count on the time left")
        direct = degree(arch, seed=seed, timeout=max(deadline.left(), 1e-3), repeats=repeats,
                        progress=say, max_memory=max_memory)
        result.cross_check = direct
        if direct.status == EXACT and direct.degree != value:
            return finish(AMBIGUOUS, None, f"the direct count gave {direct.degree}, the "
                          f"structured route {value}: no degree is claimed")
        notes.append(f"cross-check, direct count: {direct.degree} [{direct.status}], "
                     f"{direct.seconds:.1f} s")
    return finish(EXACT, value)
