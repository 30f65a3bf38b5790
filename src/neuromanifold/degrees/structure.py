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


def single_layer_factor(arch: Architecture) -> tuple[int, int, int, int] | None:
    """(d, d', a, r = min(a, d)) when `arch` is one plain lightning layer with t >= 2 (the case
    the Segre route covers), else None."""
    if arch.n_layers != 1 or arch.tokens < 2:
        return None
    plain = Architecture(arch.widths, arch.keys, arch.tokens)
    if arch != plain:
        return None
    d, d1 = arch.widths
    a = arch.keys[0]
    return d, d1, a, min(a, d)


def _why_not(arch: Architecture) -> str:
    if arch.n_layers != 1:
        return f"{arch.n_layers} layers (the Segre route covers one layer)"
    if arch.tokens < 2:
        return "t = 1 (the map then sees only the symmetric part of A: a base locus)"
    return "heads, values, residual, MLP or decoder options (the route covers the plain layer)"


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
    """The degree of one lightning layer's neurovariety by the Segre route, with its checks.

    status: `exact (mod p, randomised)` when every hypothesis check passed and every run gave the
    same e_L; `stopped` when the time limit passed; `ambiguous` when a check failed.
    """

    degree: int | None
    status: str
    dimension: int | None
    n_params: int
    segre_degree: int | None
    factor_degree: int | None
    factor_closed_form: int
    factor: str
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
                "route": "segre", "dimension": self.dimension, "n_params": self.n_params,
                "segre_degree": self.segre_degree, "factor": self.factor,
                "factor_degree": self.factor_degree,
                "factor_closed_form": self.factor_closed_form,
                "base_locus": [c.to_dict() for c in self.base_locus],
                "runs_agree": self.agree, "runs": [r.to_dict() for r in self.runs],
                "seconds": round(self.seconds, 3), "seed": self.seed, "notes": list(self.notes),
                "cross_check": self.cross_check and self.cross_check.to_dict()}

    def __str__(self) -> str:
        value = "-" if self.degree is None else str(self.degree)
        dimension = "-" if self.dimension is None else str(self.dimension)
        lines = [self.label,
                 f"degree {value}  [{self.status}]  route segre, dimension {dimension}, "
                 f"{self.n_params} parameters, {self.seconds:.1f} s, seed {self.seed}",
                 f"  factor: {self.factor}: degree "
                 f"{'-' if self.factor_degree is None else self.factor_degree} measured, "
                 f"{self.factor_closed_form} closed form"]
        if self.segre_degree is not None:
            lines.append(f"  Segre product: degree {self.segre_degree}")
        for p, c in zip(PRIMES, self.base_locus):
            lines.append(f"  hypothesis, no base locus (L finite on the cone), p = {p}: "
                         f"{'checked, no zero' if c.status == 'empty' else count_text(c)}"
                         f" ({c.seconds:.2f} s)")
        for run in self.runs:
            lines.append(
                f"  p = {run.prime}, run {run.run}: network fiber {count_text(run.network_fiber)}"
                + (f", Segre fiber {count_text(run.factor_fiber)}" if run.factor_fiber else "")
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


def base_locus_check(d: int, tokens: int, p: int, rng: random.Random, timeout: float,
                     n_inputs: int | None = None) -> SolveCount:
    """Zeros of v X_n X_n^T A X_n = 0 (n = 1..N), l_1(v) = 1, l_2(A) = 1 over the closure of F_p.

    `empty` proves (over that field) that no nonzero v (x) A with any A lies in ker L, hence that
    L has no base locus on the cone (fewer equations than the full identity in X only enlarge the
    zero set). Unknowns v_1..v_d, A_11..A_dd.
    """
    n = d + d * d
    N = n_inputs if n_inputs is not None else n
    ctx = poly_ring(n, p, "u")
    gens = ctx.gens()
    v = object_array((1, d), gens[:d])
    A = object_array((d, d), gens[d:])
    one = ctx.from_dict({(0,) * n: 1})
    polys = []
    for _ in range(N):
        X = object_array((d, tokens), [rng.randrange(p) for _ in range(d * tokens)])
        out = v.dot(X).dot(X.T.dot(A).dot(X))
        polys += [f for f in as_polys(list(out.reshape(-1)), ctx)]
    polys.append(sum((rng.randrange(1, p) * g for g in gens[:d]), -one))
    polys.append(sum((rng.randrange(1, p) * g for g in gens[d:]), -one))
    return count_solutions(polys, ctx.names(), p, timeout)


def _gauge_rank(F: Callable, n: int, free: list[int], w0: list[int], p: int,
                deadline: Deadline) -> int:
    ctx, G = gauge_fixed_map(F, free, w0, p)
    J = jacobian_at(G, [w0[j] for j in free], len(free), p, deadline)
    return rank_mod_p(J, p)


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
    """The degree of one plain lightning layer's neurovariety by the Segre route (module docstring).

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
    factor = single_layer_factor(arch)
    if factor is None:
        raise bad_value("route", "a single plain lightning layer with t >= 2 for the Segre "
                        "route", _why_not(arch), "Use --route direct.")
    d, d1, a, rr = factor
    from ..dimension.api import neuromanifold_dim  # noqa: PLC0415
    from .network import degree, degree_estimates, evaluation_inputs, span_basis  # noqa: PLC0415

    degree_estimates(arch, max_memory)
    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    deadline = Deadline.after(timeout)
    dim_D = rr * (2 * d - rr)
    closed = determinantal_degree(d, d, rr)
    name = (f"D_{rr} = {d} x {d} matrices of rank <= {rr} (dimension {dim_D})" if rr < d
            else f"all {d} x {d} matrices (dimension {dim_D})")
    notes: list[str] = []
    result = StructuredDegreeResult(None, STOPPED, None, arch.n_params, None, None, closed, name,
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
        m_X, m_Y = d1 * d - 1, dim_D - 1
        if r != m_X + m_Y + 1:
            return finish(AMBIGUOUS, None, f"dim V = {r} differs from dim C = {m_X + m_Y + 1}: "
                          "L is not finite on the cone, the route does not apply")
        say(f"the factor {name}: its degree by the degree engine")
        fac = image_degree(_rank_map(d, rr), 2 * rr * d, dim_D, seed=seed,
                           timeout=max(deadline.left(), 1e-3), repeats=repeats,
                           deadline=deadline, label="rank map")
        result.factor_degree = fac.degree
        if fac.status != EXACT:
            return finish(fac.status, None, f"the factor's degree is {fac.status}")
        if fac.degree != closed:
            return finish(AMBIGUOUS, None, f"the factor's measured degree {fac.degree} differs "
                          f"from its closed form {closed}")
        deg_C = result.segre_degree = segre_degree([m_X, m_Y], [1, fac.degree])
        notes.append(f"Segre product P^{m_X} x ({name}): binomial({m_X + m_Y}, {m_X}) x "
                     f"{fac.degree} = {deg_C}")
        for p in PRIMES:
            say(f"no base locus: the check over p = {p}")
            deadline.check("the base-locus check")
            c = base_locus_check(d, arch.tokens, p, random.Random(purpose_seed(seed, f"base-{p}")),
                                 deadline.left())
            result.base_locus.append(c)
            if c.status == "stopped":
                return finish(STOPPED, None, "the base-locus check was stopped: the route is "
                              "not used (raise --timeout)")
            if c.status != "empty":
                return finish(AMBIGUOUS, None, f"the base-locus system over p = {p} is "
                              f"{c.status}: L may not be finite on the cone; no degree by this "
                              "route")
        notes.append("no base locus: proved for t >= 2 (docs/degree.md) and checked: "
                     "v X X^T A X = 0 has no zero with v, A nonzero over both primes")
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
        F_seg = segre_map(arch)
        for p in PRIMES:
            for k in range(repeats):
                run = _one_run(F_net, F_seg, arch.n_params, r, deg_C, p, seed, k, deadline, say,
                               _divisor)
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
    notes.append(f"{len(result.runs)} runs over {len(PRIMES)} primes agree; a randomised count "
                 "over F_p, not a proof")
    if cross_check:
        say("cross-check: the direct count on the time left")
        direct = degree(arch, seed=seed, timeout=max(deadline.left(), 1e-3), repeats=repeats,
                        progress=say, max_memory=max_memory)
        result.cross_check = direct
        if direct.status == EXACT and direct.degree != value:
            return finish(AMBIGUOUS, None, f"the direct count gave {direct.degree}, the Segre "
                          f"route {value}: no degree is claimed")
        notes.append(f"cross-check, direct count: {direct.degree} [{direct.status}], "
                     f"{direct.seconds:.1f} s")
    return finish(EXACT, value)
