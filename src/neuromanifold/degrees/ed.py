"""The Euclidean distance (ED) degree of the image of a polynomial map, by msolve over F_p.

Math (docs/degree.md, "The ED degree"). Let F: K^n -> K^M be polynomial, V the closure of its
image, r = dim V, and Lambda = diag(lambda_1..lambda_M) a metric on K^M (the standard inner
product: every lambda_i = 1). For generic data u the ED degree of V is the number of complex
points x of the smooth locus of V with u - x orthogonal (for Lambda) to the tangent space T_x V.
1. Gauge: as for the degree (`engine`), G: K^r -> K^M is F with the n - r non-pivot parameters
   fixed at a random point; it is dominant onto V with finite generic fibers of size e.
2. Critical equations: grad (1/2) sum_i lambda_i (G_i(w) - u_i)^2 = J_G(w)^T Lambda (G(w) - u) = 0,
   r equations in r unknowns.
3. Spurious solutions: where J_G(w) drops rank the equations say less than they should and can
   hold on whole components. They are removed by the Rabinowitsch variable z: 1 - z m(w) = 0 with
   m = det(R J_G(w)) for a random r x M matrix R, by Cauchy-Binet a combination of the maximal
   minors of J_G, vanishing wherever J_G drops rank (its square-free part is used: same zeros).
   NOTE: [why nothing true is removed] The set of data u that have a critical point in a fixed
   proper closed set B of the w-space (here m = 0, or the preimage of the singular locus of V,
   or the points above which the fiber is not e simple points) has dimension at most
   (r - 1) + (M - r) < M: for each w in B, u ranges over G(w) + (im J_G(w))^perp. So for u
   chosen independently of R, every solution left has J_G of rank r, lies above a smooth point
   of V with exactly e preimages, and is a simple zero: the count is ED(V) * e.
4. Fiber: e is counted as in `engine` (the zeros of G(w) = G(w1)).
All choices are random over F_p: the label is `exact (mod p, randomised)` when every run over
two primes agrees, `stopped` when a solve ran out of time, `ambiguous` otherwise.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..core.checks import bad_value, check_int, check_seed
from ..core.seeds import purpose_seed
from .engine import (
    AMBIGUOUS,
    DEFAULT_TIMEOUT,
    EXACT,
    PRIMES,
    STOPPED,
    as_polys,
    check_image_arguments,
    check_timeout,
    count_text,
    failure_reason,
    gauge_fixed_map,
    gauge_point,
    poly_ring,
)
from ..dimension.memory import available_memory, format_bytes, resolve_budget
from .budget import Deadline, DegreeStopped, term_bytes
from .msolve import SolveCount, count_solutions

STANDARD = "standard"
GENERIC = "generic"


@dataclass(frozen=True)
class EDRun:
    """One repetition: a prime, its gauge point, data u (and weights), critical and fiber counts."""

    prime: int
    run: int
    critical_count: SolveCount
    fiber_count: SolveCount | None
    ed_degree: int | None
    note: str = ""

    def to_dict(self) -> dict:
        """A JSON-serialisable description."""
        return {"prime": self.prime, "run": self.run, "critical": self.critical_count.to_dict(),
                "fiber": self.fiber_count and self.fiber_count.to_dict(),
                "ed_degree": self.ed_degree, "note": self.note}


@dataclass
class EDDegreeResult:
    """The ED degree of the closure V of the image of a polynomial map, for a stated metric.

    status: `exact (mod p, randomised)`, `stopped` or `ambiguous` exactly as for the degree
    (`engine.DegreeResult`); ed_degree is None unless exact. metric says which inner product
    on the M outputs the distance uses.
    """

    ed_degree: int | None
    status: str
    metric: str
    dimension: int
    n_params: int
    n_outputs: int
    runs: list[EDRun]
    seconds: float
    notes: list[str] = field(default_factory=list)
    label: str = ""
    seed: int = 0
    span_dim: int | None = None
    n_inputs: int | None = None

    @property
    def agree(self) -> bool:
        """True when every finished run gave the same ED degree."""
        values = {run.ed_degree for run in self.runs}
        return len(values) == 1 and None not in values

    def to_dict(self) -> dict:
        """A JSON-serialisable description."""
        return {"label": self.label, "ed_degree": self.ed_degree, "status": self.status,
                "metric": self.metric, "dimension": self.dimension, "n_params": self.n_params,
                "n_outputs": self.n_outputs, "runs_agree": self.agree, "span_dim": self.span_dim,
                "n_inputs": self.n_inputs, "seed": self.seed,
                "runs": [run.to_dict() for run in self.runs], "seconds": round(self.seconds, 3),
                "notes": list(self.notes)}

    def __str__(self) -> str:
        value = "-" if self.ed_degree is None else str(self.ed_degree)
        lines = [f"{self.label}".strip(),
                 f"ED degree {value}  [{self.status}]  dimension {self.dimension}, "
                 f"{self.n_params} parameters, {self.n_outputs} coordinates, {self.seconds:.1f} s, "
                 f"seed {self.seed}",
                 f"  metric: {self.metric}"]
        for run in self.runs:
            fib = run.fiber_count
            lines.append(
                f"  p = {run.prime}, run {run.run}: critical {count_text(run.critical_count)}"
                + (f", fiber {count_text(fib)}" if fib is not None else "")
                + (f" -> ED degree {run.ed_degree}" if run.ed_degree is not None else "")
                + (f" ({run.note})" if run.note else ""))
        lines.append(f"  runs agree: {'yes' if self.agree else 'no'} ({len(self.runs)} runs)")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(line for line in lines if line)


def check_weights(weights: object, n_outputs: int) -> str | tuple[int, ...]:
    """'standard', 'generic' or n_outputs nonzero integers (the diagonal metric), else the template error."""
    if weights is None or weights == STANDARD:
        return STANDARD
    if weights == GENERIC:
        return GENERIC
    if isinstance(weights, str) or not hasattr(weights, "__len__"):
        raise bad_value("weights", f"'standard', 'generic' or {n_outputs} nonzero integers",
                        weights, "Pass --weights standard, --weights generic or a comma list.")
    values = list(weights)
    if len(values) != n_outputs or not all(isinstance(v, int) and not isinstance(v, bool) and v != 0
                                           for v in values):
        raise bad_value("weights", f"'standard', 'generic' or {n_outputs} nonzero integers "
                        "(one per output coordinate)", weights,
                        f"Pass {n_outputs} comma-separated nonzero integers.")
    return tuple(values)


def metric_text(weights: str | tuple[int, ...], n_outputs: int) -> str:
    """The metric in words, as printed."""
    if weights == STANDARD:
        return f"standard inner product sum_i (x_i - u_i)^2 on the {n_outputs} output coordinates"
    if weights == GENERIC:
        return (f"generic diagonal metric sum_i lambda_i (x_i - u_i)^2 on the {n_outputs} output "
                "coordinates, lambda_i random over F_p (drawn per run)")
    shown = ",".join(map(str, weights[:12])) + (",..." if len(weights) > 12 else "")
    return (f"weighted inner product sum_i lambda_i (x_i - u_i)^2 on the {n_outputs} output "
            f"coordinates, lambda = ({shown})")


def _product_terms(a, b, n_vars: int) -> int:
    """At most this many terms in a b: s s' for s and s' terms, and at most the monomials of
    degree <= deg a + deg b in the n_vars variables."""
    if a.is_zero() or b.is_zero():
        return 0
    degree = a.total_degree() + b.total_degree()
    return min(len(a) * len(b), math.comb(degree + n_vars, n_vars))


def _determinant(matrix: list[list], deadline: Deadline | None = None,
                 budget: int | None = None, term_bytes: int = 64) -> object:
    """det of a square matrix of nmod_mpoly (Bareiss' fraction-free elimination, exact).

    Each entry's update is one product of polynomials in C, which no signal interrupts; before
    it, the deadline is polled and the memory it can take is bounded: the product of two
    polynomials of s and s' terms has at most s s' terms, so the entries held plus the update's
    bound, `term_bytes` a term, must stay within `budget` bytes. Past either, DegreeStopped
    (the run is `stopped`, never guessed)."""
    A = [list(row) for row in matrix]
    n = len(A)
    held = sum(len(entry) for row in A for entry in row)
    sign, previous = 1, None
    for k in range(n - 1):
        if A[k][k].is_zero():
            swap = next((i for i in range(k + 1, n) if not A[i][k].is_zero()), None)
            if swap is None:
                return A[k][k] * 0
            A[k], A[swap] = A[swap], A[k]
            sign = -sign
        for i in range(k + 1, n):
            for j in range(k + 1, n):
                phase = f"the minor combination (Bareiss step {k + 1} of {n - 1})"
                if deadline is not None:
                    deadline.check(phase)
                bound = _product_terms(A[i][j], A[k][k], n) + _product_terms(A[i][k], A[k][j], n)
                if budget is not None and (held + 2 * bound) * term_bytes > budget:
                    raise DegreeStopped(f"{phase}: its next product may hold up to {bound} terms "
                                        f"({format_bytes((held + 2 * bound) * term_bytes)} with "
                                        f"the entries held), over the memory budget of "
                                        f"{format_bytes(budget)}")
                value = A[i][j] * A[k][k] - A[i][k] * A[k][j]
                value = value if previous is None else value / previous
                held += len(value) - len(A[i][j])
                A[i][j] = value
        previous = A[k][k]
    return A[n - 1][n - 1] * sign


def _square_free(poly) -> object:
    """The product of the distinct square-free factors of `poly` (the same zeros)."""
    if poly.is_zero() or poly.total_degree() <= 1:
        return poly
    _, factors = poly.factor_squarefree()
    out = poly * 0 + 1
    for factor, _ in factors:
        out = out * factor
    return out


def _ed_run(F: Callable, n: int, dimension: int, weights, p: int, seed: int, run: int,
            deadline: Deadline, say: Callable[[str], None], budget: int | None = None) -> EDRun:
    """Gauge point, data u, weights, minor combination and fiber point from their own stream;
    the deadline is polled between the steps (DegreeStopped) and bounds each msolve call."""
    rng = random.Random(purpose_seed(seed, f"ed-degree-run-{p}-{run}"))
    free, w0 = gauge_point(F, n, p, rng, deadline)
    if len(free) != dimension:
        return EDRun(p, run, SolveCount("not run", None, None, 0.0), None, None,
                     f"Jacobian rank {len(free)} mod p at the gauge point, not {dimension}")
    r = dimension
    ctx = poly_ring(r + 1, p)             # w_0..w_{r-1} and the Rabinowitsch variable z
    gens = ctx.gens()
    values: list = list(w0)
    for k, j in enumerate(free):
        values[j] = gens[k]
    G = as_polys(F(values), ctx)
    M = len(G)
    lam = ([1] * M if weights == STANDARD else [rng.randrange(1, p) for _ in range(M)]
           if weights == GENERIC else [int(v) % p for v in weights])
    u = [rng.randrange(p) for _ in range(M)]
    deadline.check("the gauge-fixed map")
    J = [[g.derivative(j) for j in range(r)] for g in G]
    critical = []
    for j in range(r):
        deadline.check(f"the critical equations ({j + 1} of {r})")
        f = ctx.from_dict({})
        for i in range(M):
            if lam[i] and not J[i][j].is_zero():
                f = f + (lam[i] * J[i][j]) * (G[i] - u[i])
        critical.append(f)
    R = [[rng.randrange(p) for _ in range(M)] for _ in range(r)]
    RJ = []
    for a in range(r):
        row = []
        for j in range(r):
            entry = ctx.from_dict({})
            for i in range(M):
                if R[a][i] and not J[i][j].is_zero():
                    entry = entry + R[a][i] * J[i][j]
            row.append(entry)
        RJ.append(row)
    top = 2 * r * max((g.total_degree() for g in G), default=1)   # Bareiss' products' degrees
    m = _determinant(RJ, deadline, budget, term_bytes(r + 1, max(top, 1)))
    deadline.check("the minor combination's square-free part")
    m = _square_free(m)
    if m.is_zero():
        return EDRun(p, run, SolveCount("not run", None, None, 0.0), None, None,
                     "the combination of maximal minors vanishes identically")
    critical.append(1 - gens[r] * m)
    say(f"p = {p}, run {run}: solving the critical equations ({r + 1} equations in {r + 1} "
        f"unknowns, minor combination of degree {m.total_degree()})")
    crit = count_solutions(critical, ctx.names(), p, max(deadline.left(), 1e-3))
    if crit.status != "finite" or not crit.radical:
        return EDRun(p, run, crit, None, None, failure_reason(crit, "critical"))
    deadline.check("the fiber system")
    fctx, Gf = gauge_fixed_map(F, free, w0, p)
    w1 = [rng.randrange(1, p) for _ in range(r)]
    fiber_polys = [g - fctx.from_dict({(0,) * r: int(g(*w1))}) for g in Gf]
    say(f"p = {p}, run {run}: solving the fiber ({M} equations in {r} unknowns)")
    fib = count_solutions(fiber_polys, fctx.names(), p, max(deadline.left(), 1e-3))
    if fib.status != "finite" or not fib.radical:
        return EDRun(p, run, crit, fib, None, failure_reason(fib, "fiber"))
    e = fib.n_distinct
    if crit.n_distinct % e:
        return EDRun(p, run, crit, fib, None, f"the fiber size {e} does not divide the critical count")
    return EDRun(p, run, crit, fib, crit.n_distinct // e)


def image_ed_degree(F: Callable[[Sequence], list], n_params: int, dimension: int | None = None, *,
                    weights: object = STANDARD, seed: int = 0, timeout: float = DEFAULT_TIMEOUT,
                    repeats: int = 2, primes: Sequence[int] = PRIMES, label: str = "",
                    progress: Callable[[str], None] | None = None,
                    deadline: Deadline | None = None,
                    max_memory: object | None = None) -> EDDegreeResult:
    """The ED degree of the closure of the image of the polynomial map F: K^n -> K^M.

    Math: the number of critical points of w -> sum_i lambda_i (G_i(w) - u_i)^2 on the
    gauge-fixed parameters G, for generic data u, with the points where J_G drops rank removed
    (1 - z m(w), m a random combination of maximal minors), divided by the generic fiber size
    of G (module docstring). Companion of `engine.image_degree`; same labels.

    Args:
        F: maps a list of n ring elements to the M outputs with +, - and * only.
        n_params: n, the number of variables of F.
        dimension: dim V if known; by default the Jacobian rank mod p at a random point.
        weights: 'standard' (every lambda_i = 1), 'generic' (random lambda_i per run) or M
            nonzero integers: the diagonal metric on the outputs.
        seed: seeds every random choice (gauge point, data, weights, minors, fiber point).
        timeout: seconds for all the solves together; a solve past it gives `stopped`.
        repeats: independent runs per prime.
        primes: primes 3 <= p < 2^30 (msolve's range; checked before flint sees them).
        deadline: a `budget.Deadline` shared with earlier phases (replaces `timeout`'s own),
            polled between the steps of every run and bounding each msolve call.
        max_memory: the memory budget (default 80% of the available memory) the minor
            combination's products are bounded against before each starts (`stopped` past it).

    Example:
        >>> def F(w):  # 2 x 2 rank-1 matrices: ED degree 2 (Eckart-Young), 6 for a generic metric
        ...     return [w[0] * w[2], w[0] * w[3], w[1] * w[2], w[1] * w[3]]
        >>> image_ed_degree(F, 4).ed_degree, image_ed_degree(F, 4, weights="generic").ed_degree
        (2, 6)
    """
    seed, n_params, dimension, repeats, timeout, primes, M = check_image_arguments(
        F, n_params, dimension, seed, repeats, timeout, primes)
    weights = check_weights(weights, M)
    budget = resolve_budget(max_memory, available_memory())
    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    deadline = deadline if deadline is not None else Deadline.after(timeout)
    notes = []
    if dimension is None:
        try:
            free, _ = gauge_point(F, n_params, primes[0],
                                  random.Random(purpose_seed(seed, "degree-dimension")), deadline)
        except DegreeStopped as stop:
            return EDDegreeResult(None, STOPPED, metric_text(weights, M), 0, n_params, M, [],
                                  time.perf_counter() - start,
                                  [f"the time limit passed during {stop.phase}: no ED degree is "
                                   "claimed (raise --timeout)"], label, seed)
        dimension = len(free)
        notes.append(f"dimension {dimension} from the Jacobian rank mod p at one random point")
    runs: list[EDRun] = []
    for p in primes:
        for k in range(repeats):
            try:
                run = _ed_run(F, n_params, dimension, weights, p, seed, k, deadline, say, budget)
            except DegreeStopped as stop:
                why = (stop.phase if "memory budget" in stop.phase
                       else f"the time limit passed during {stop.phase}")
                run = EDRun(p, k, SolveCount("stopped", None, None, 0.0, why),
                            None, None, "stopped before the solves")
            runs.append(run)
            if run.ed_degree is None:
                break
        if runs and runs[-1].ed_degree is None:
            break
    seconds = time.perf_counter() - start
    stopped = [r for r in runs if "stopped" in (r.critical_count.status,
                                                 r.fiber_count and r.fiber_count.status)]
    values = {r.ed_degree for r in runs}
    if stopped:
        status, ed = STOPPED, None
        notes.append("a step did not finish within the time limit or the memory budget: no ED "
                     "degree is claimed (raise --timeout or --max-memory)")
    elif None in values or len(values) != 1:
        status, ed = AMBIGUOUS, None
        notes.append("the runs disagree or a check failed: no ED degree is claimed (try another --seed)")
    else:
        status, ed = EXACT, values.pop()
        notes.append(f"{len(runs)} runs over {len(set(r.prime for r in runs))} primes agree; "
                     "a randomised count over F_p, not a proof")
    notes.append("spurious critical points (where the gauge-fixed Jacobian drops rank) removed by "
                 "1 - z m(w), m a random combination of its maximal minors; count divided by the "
                 "generic fiber size")
    return EDDegreeResult(ed, status, metric_text(weights, M), dimension, n_params, M, runs,
                          seconds, notes, label, seed)


def ed_degree(arch, *, n_inputs: int | None = None, weights: object = STANDARD, seed: int = 0,
              timeout: float = DEFAULT_TIMEOUT, repeats: int = 2,
              progress: Callable[[str], None] | None = None,
              max_memory: object | None = None) -> EDDegreeResult:
    """The ED degree of a polynomial network's neurovariety under evaluation at N generic inputs.

    Math: V_N = {(phi_W(X_1), ..., phi_W(X_N))} closed, in K^{N d_l t} with the metric
    `weights` (standard: the squared loss of a training set of N samples), X_n random over F_p.
    The ED degree of V_N is the number of complex critical points of the loss
    sum_n ||phi_W(X_n) - Y_n||^2 on the function space for generic targets Y: the algebraic
    complexity of training. Computed by `image_ed_degree` on the gauge-fixed network map, the
    dimension from the exact engine. N defaults to the least number of inputs whose evaluation
    is injective on the span of the neurovariety (so V_N is isomorphic to V; the ED degree
    depends on N and on the metric, both printed).

    Limits, as `degree` (docs/degree.md, "Limits"): `timeout` bounds the whole run, every phase
    (dimension, span, inputs, the symbolic map, the gauge, the minors and the solves; past it
    the result is `stopped`), and the memory of each phase is estimated from the architecture
    and checked against `max_memory` (default 80% of the available memory) before it starts.

    Raises:
        ValueError: a network that is not polynomial (softmax, relu/gelu/tanh, a norm), or
            `n_inputs` below the least injective N.
        ResourceError: a phase's estimated peak exceeds the memory budget.

    Example:
        >>> from neuromanifold import Architecture
        >>> r = ed_degree(Architecture((2, 1), (1,), 2), repeats=1)
        >>> r.status
        'exact (mod p, randomised)'
    """
    from ..dimension.api import neuromanifold_dim  # noqa: PLC0415
    from ..dimension.fp import rank_mod_p  # noqa: PLC0415
    from ..errors import ComputationError  # noqa: PLC0415
    from .budget import check_phase, gauge_estimate  # noqa: PLC0415
    from .network import degree_estimates, evaluation_inputs, span_over_primes  # noqa: PLC0415
    from .polymap import check_polynomial, network_map, object_array  # noqa: PLC0415

    check_polynomial(arch)
    seed = check_seed(seed)
    timeout = check_timeout(timeout)
    repeats = check_int("repeats", repeats, minimum=1, fix="Pass --repeats 1 or more.")
    if n_inputs is not None:
        n_inputs = check_int("n_inputs", n_inputs, minimum=1, fix="Pass --inputs 1 or more.")
    if not isinstance(weights, str) and hasattr(weights, "__len__"):
        # the entries now; their number (N d_l t) once N is known, in image_ed_degree
        check_weights(weights, len(weights))
    else:
        weights = check_weights(weights, 1)
    degree_estimates(arch, max_memory)          # every phase known up front, before any line
    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    deadline = Deadline.after(timeout)

    def stopped(why: str, dimension: int = 0) -> EDDegreeResult:
        metric = weights if isinstance(weights, str) else f"weighted, lambda = {tuple(weights)}"
        return EDDegreeResult(None, STOPPED, metric, dimension, arch.n_params, 0, [],
                              time.perf_counter() - start, [why], str(arch), seed)

    r = 0
    try:
        dim_result = neuromanifold_dim(arch, method="certified", seed=seed, max_memory=max_memory)
        r = dim_result.dimension
        check_phase(gauge_estimate(arch, math.ceil(r / (arch.widths[-1] * arch.tokens))),
                    max_memory)
        say(f"dimension {r} by the exact engine")
        deadline.check("the dimension by the exact engine")
        spans, span_dim, unsettled = span_over_primes(arch, seed, deadline, say)
        if unsettled is not None:
            return stopped(unsettled.replace("no degree", "no ED degree"), r)
        inputs, N = evaluation_inputs(arch, spans, seed, deadline=deadline, say=say)
        if n_inputs is not None and n_inputs != N:
            if n_inputs < N:
                raise bad_value("n_inputs", f"at least {N} for this network (the least number of "
                                "inputs whose evaluation is injective on the span of the "
                                "neurovariety)", n_inputs, f"Pass --inputs {N} or more.")
            check_phase(gauge_estimate(arch, n_inputs), max_memory)
            rng = random.Random(purpose_seed(seed, f"ed-degree-inputs-{n_inputs}"))
            count = n_inputs * arch.widths[0] * arch.tokens
            inputs = object_array((n_inputs, arch.widths[0], arch.tokens),
                                  [rng.randrange(min(PRIMES)) for _ in range(count)])
            F = network_map(arch, inputs, poll=lambda: deadline.check("the inputs' injectivity"))
            import numpy as np  # noqa: PLC0415

            if any(rank_mod_p(np.array([[int(v) % p for v in F(w)] for w in samples],
                                       dtype=np.int64), p) != s for p, s, samples in spans):
                raise ComputationError(f"evaluation at {n_inputs} random inputs is not injective "
                                       "on the span; rerun with another --seed")
            N = n_inputs
    except DegreeStopped as stop:
        return stopped(f"the --timeout of {timeout:g} s passed during {stop.phase}: no ED degree "
                       "is claimed (raise --timeout)", r)
    say(f"{N} input sequences; evaluation injective on the span (rank {span_dim})")
    check_phase(gauge_estimate(arch, N), max_memory)     # N is known now
    F = network_map(arch, inputs, poll=lambda: deadline.check("the symbolic map of the gauge"))
    result = image_ed_degree(F, arch.n_params, r, weights=weights, seed=seed,
                             timeout=max(deadline.left(), 1e-3), repeats=repeats, progress=say,
                             label=str(arch), deadline=deadline, max_memory=max_memory)
    result.notes[:0] = [
        f"dimension {r} from the exact engine ({dim_result.status}, p = {dim_result.prime})",
        f"the variety: the neurovariety evaluated at N = {N} random input sequences (random over "
        f"F_p, injective on its span of dimension {span_dim}); the ED degree depends on N and on "
        "the metric",
    ]
    result.span_dim, result.n_inputs = span_dim, N
    return result
