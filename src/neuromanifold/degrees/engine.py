"""The degree of the image of a polynomial map, by gauge fixing, random slices and msolve over F_p.

Math (docs/degree.md). Let F: K^n -> K^M be polynomial, V the Zariski closure of its image, and
r = dim V. Then:
1. Gauge: at a random point w0, the Jacobian J = dF(w0) over F_p has rank r; keep the r pivot
   columns of J as free parameters and fix the others to their values in w0. The gauge-fixed map
   G: K^r -> K^M has full Jacobian rank r at w0, so finite generic fibers, and its image is dense
   in an r-dimensional irreducible subvariety of V, hence in V when r = dim V.
2. Slice: r random affine forms l_i(y) = b_i cut V in deg V points (a generic codimension-r
   affine space); their preimages under G are the zeros of l_i(G(w)) - b_i, i = 1..r: a square
   system whose number of zeros over the algebraic closure is deg V * e, where e is the size of
   the generic fiber of G.
3. Fiber: e is the number of zeros of G(w) = G(w1) at a random w1.
Both systems must be zero-dimensional and radical (simple zeros) and e must divide the count.
Over F_p with random choices this is right except on a proper algebraic set of choices and for
finitely many primes: the result is `exact (mod p, randomised)`, repeated with independent
slices and a second prime, and never called a proof. A solve not finished in time is `stopped`.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..core.checks import bad_type, bad_value, check_int, check_seed
from ..core.seeds import purpose_seed
from .budget import Deadline, DegreeStopped
from .msolve import MAX_PRIME, SolveCount, count_solutions

# Two primes below 2^30 (msolve's parametrisation loops on primes above about 1.4e9).
PRIMES = (1_073_741_789, 1_073_741_783)
DEFAULT_TIMEOUT = 600.0

EXACT = "exact (mod p, randomised)"
STOPPED = "stopped"
AMBIGUOUS = "ambiguous"


@dataclass(frozen=True)
class DegreeRun:
    """One repetition: a prime and the index of its random gauge point, slice and fiber point."""

    prime: int
    run: int
    slice_count: SolveCount
    fiber_count: SolveCount | None
    degree: int | None
    note: str = ""

    def to_dict(self) -> dict:
        """A JSON-serialisable description."""
        return {"prime": self.prime, "run": self.run, "slice": self.slice_count.to_dict(),
                "fiber": self.fiber_count and self.fiber_count.to_dict(), "degree": self.degree,
                "note": self.note}


@dataclass
class DegreeResult:
    """The degree of the closure V of the image of a polynomial map, with how it was obtained.

    status: `exact (mod p, randomised)` when every run gave the same degree from zero-dimensional
    radical systems; `stopped` when a solve ran out of time or memory (no degree is guessed);
    `ambiguous` when runs disagree or a check failed (degree None).
    """

    degree: int | None
    status: str
    dimension: int | None
    n_params: int
    n_outputs: int
    runs: list[DegreeRun]
    seconds: float
    notes: list[str] = field(default_factory=list)
    label: str = ""
    seed: int = 0
    span_dim: int | None = None
    n_inputs: int | None = None

    @property
    def agree(self) -> bool:
        """True when every finished run gave the same degree."""
        values = {run.degree for run in self.runs}
        return len(values) == 1 and None not in values

    def to_dict(self) -> dict:
        """A JSON-serialisable description."""
        return {"label": self.label, "degree": self.degree, "status": self.status,
                "dimension": self.dimension, "n_params": self.n_params,
                "n_outputs": self.n_outputs, "runs_agree": self.agree,
                "span_dim": self.span_dim, "n_inputs": self.n_inputs, "seed": self.seed,
                "runs": [run.to_dict() for run in self.runs], "seconds": round(self.seconds, 3),
                "notes": list(self.notes)}

    def __str__(self) -> str:
        value = "-" if self.degree is None else str(self.degree)
        dimension = "-" if self.dimension is None else str(self.dimension)
        coordinates = f", {self.n_outputs} coordinates" if self.n_outputs else ""
        lines = [f"{self.label}".strip(),
                 f"degree {value}  [{self.status}]  dimension {dimension}, "
                 f"{self.n_params} parameters{coordinates}, {self.seconds:.1f} s, "
                 f"seed {self.seed}"]
        for run in self.runs:
            fib = run.fiber_count
            lines.append(
                f"  p = {run.prime}, run {run.run}: slice {_count_text(run.slice_count)}"
                + (f", fiber {_count_text(fib)}" if fib is not None else "")
                + (f" -> degree {run.degree}" if run.degree is not None else "")
                + (f" ({run.note})" if run.note else ""))
        if self.runs:
            lines.append(f"  runs agree: {'yes' if self.agree else 'no'} ({len(self.runs)} runs)")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(line for line in lines if line)


def check_timeout(timeout: object) -> float:
    """`timeout` as a positive float of seconds, or the template error."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0 \
            or timeout != timeout or timeout == float("inf"):
        raise bad_value("timeout", "a positive finite number of seconds", timeout,
                        "Pass e.g. --timeout 600.")
    return float(timeout)


def check_primes(primes: object) -> tuple[int, ...]:
    """`primes` as a tuple of primes 3 <= p < 2^30 (the range msolve accepts), checked before any
    flint context is made: flint aborts the interpreter (SIGABRT) on a modulus that is not prime."""
    import flint  # noqa: PLC0415 - fmpz.is_prime makes no context and cannot abort

    if isinstance(primes, (str, bytes)) or not isinstance(primes, Sequence):
        raise bad_type("primes", "a sequence of primes below 2^30", primes,
                       f"Pass e.g. primes=({PRIMES[0]},).")
    if not primes:
        raise bad_value("primes", "at least one prime below 2^30", primes,
                        f"Pass e.g. primes=({PRIMES[0]},).")
    checked = []
    for p in primes:
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
            raise bad_type("primes", "a sequence of prime integers", p,
                           f"Pass e.g. primes=({PRIMES[0]},).")
        p = int(p)
        if not 3 <= p < MAX_PRIME or not flint.fmpz(p).is_prime():
            raise bad_value("primes", "primes p with 3 <= p < 2^30 (msolve's range: its "
                            "parametrisation loops on larger ones)", p,
                            f"Pass e.g. primes=({PRIMES[0]}, {PRIMES[1]}).")
        checked.append(p)
    checked = tuple(checked)
    return checked


def check_image_arguments(F, n_params, dimension, seed, repeats, timeout, primes) -> tuple:
    """The arguments of `image_degree` and `ed.image_ed_degree`, checked before flint sees
    any of them: (seed, n_params, dimension, repeats, timeout, primes, M = len(F(w)))."""
    seed = check_seed(seed)
    n_params = check_int("n_params", n_params, minimum=1, fix="Pass the number of variables of F.")
    repeats = check_int("repeats", repeats, minimum=1, fix="Pass --repeats 1 or more.")
    timeout = check_timeout(timeout)
    primes = check_primes(primes)
    if dimension is not None:
        dimension = check_int("dimension", dimension, minimum=1,
                              fix="Pass dim V, or leave it out to read it off the Jacobian.")
        if dimension > n_params:
            raise bad_value("dimension", f"at most n_params = {n_params}", dimension,
                            "Pass dim V, or leave it out to read it off the Jacobian.")
    return seed, n_params, dimension, repeats, timeout, primes, check_polynomial_map(F, n_params)


def check_polynomial_map(F: object, n_params: int) -> int:
    """M, the number of outputs of F, after checking that F reads at most `n_params` variables and
    has integer coefficients (its outputs at the integer point (1, 2, ..., n) are integers)."""
    if not callable(F):
        raise bad_type("F", "a callable from a list of n_params ring elements to a list", F,
                       "Pass a function such as lambda w: [w[0] * w[1]].")
    point = list(range(1, n_params + 1))
    try:
        values = list(F(point))
    except IndexError:
        raise bad_value("n_params", "at least the number of variables F reads", n_params,
                        "Pass the length of the list F indexes into.") from None
    except TypeError as exc:
        raise bad_type("F", "a map returning a list of polynomials in its argument's entries",
                       F, f"F failed at an integer point ({exc}).") from None
    if not values:
        raise bad_value("F", "a map with at least one output", values,
                        "Return the list of the map's coordinates.")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise bad_type("F", "a map with integer coefficients (integer outputs at integer "
                           "points)", v, "Write each coefficient as an integer (clear the "
                           "denominators of rational ones; floats are refused).")
    return len(values)


def _count_text(c: SolveCount) -> str:
    if c.status == "finite":
        simple = "simple" if c.radical else f"{c.n_with_multiplicity} with multiplicity"
        return f"{c.n_distinct} points ({simple}, {c.seconds:.2f} s)"
    return f"{c.status}" + (f" ({c.reason})" if c.reason else "") + f" {c.seconds:.2f} s"


def _poly_ring(n: int, p: int, name: str = "w"):
    import flint  # noqa: PLC0415

    return flint.nmod_mpoly_ctx.get((name, n), modulus=p)


def jacobian_at(polys: Sequence, point: Sequence[int], n: int, p: int,  # noqa: ARG001 (the polys carry p)
                deadline: Deadline | None = None) -> np.ndarray:
    """dF(point) mod p, shape (M, n), from polynomials in n variables (exact over F_p)."""
    J = np.zeros((len(polys), n), dtype=np.int64)
    values = [int(v) for v in point]
    for i, f in enumerate(polys):
        if deadline is not None:
            deadline.check("the Jacobian at the gauge point")
        if isinstance(f, int):
            continue
        for j in range(n):
            J[i, j] = int(f.derivative(j)(*values)) if n else 0
    return J


def _as_polys(values: Sequence, ctx) -> list:
    """Outputs as nmod_mpoly of `ctx` (constant outputs of a map come back as ints)."""
    return [v if not isinstance(v, int) else ctx.from_dict({(0,) * ctx.nvars(): v % ctx.modulus()})
            for v in values]


def _gauge(F: Callable, n: int, p: int, rng: random.Random, deadline: Deadline | None = None):
    """(free columns, w0 residues, rank) of the Jacobian at a random point w0 (exact mod p);
    the deadline is polled between the Jacobian's rows."""
    from ..dimension.fp import pivot_columns_mod_p  # noqa: PLC0415

    ctx = _poly_ring(n, p)
    polys = _as_polys(F(list(ctx.gens())), ctx)
    w0 = [rng.randrange(1, p) for _ in range(n)]
    J = jacobian_at(polys, w0, n, p, deadline)
    free = pivot_columns_mod_p(J, p)
    return free, w0


def _gauge_fixed(F: Callable, free: list[int], w0: list[int], p: int):
    """(ring with r variables, the gauge-fixed outputs G(w) as nmod_mpoly)."""
    ctx = _poly_ring(len(free), p)
    gens = ctx.gens()
    values: list = list(w0)
    for k, j in enumerate(free):
        values[j] = gens[k]
    return ctx, _as_polys(F(values), ctx)


def _one_run(F: Callable, n: int, dimension: int, p: int, seed: int, run: int,
             deadline: Deadline, say: Callable[[str], None]) -> DegreeRun:
    """Gauge point, slice and fiber point drawn from their own stream; both solves by msolve."""
    rng = random.Random(purpose_seed(seed, f"degree-run-{p}-{run}"))
    say(f"p = {p}, run {run}: the gauge (the map in {n} unknowns and its Jacobian)")
    free, w0 = _gauge(F, n, p, rng, deadline)
    if len(free) != dimension:
        return DegreeRun(p, run, SolveCount("not run", None, None, 0.0), None, None,
                         f"Jacobian rank {len(free)} mod p at the gauge point, not {dimension}")
    ctx, G = _gauge_fixed(F, free, w0, p)
    names = ctx.names()
    r = dimension
    # r random affine forms of the M outputs: sum_j c_ij G_j(w) - b_i
    M = len(G)
    slice_polys = []
    for _ in range(r):
        deadline.check("building the slice system")
        f = ctx.from_dict({(0,) * r: rng.randrange(p)})
        for g in G:
            f = f + rng.randrange(p) * g
        slice_polys.append(f)
    say(f"p = {p}, run {run}: solving the slice ({r} equations in {r} unknowns)")
    slice_count = count_solutions(slice_polys, names, p, deadline.left())
    if slice_count.status != "finite" or not slice_count.radical:
        return DegreeRun(p, run, slice_count, None, None, _why(slice_count, "slice"))
    w1 = [rng.randrange(1, p) for _ in range(r)]
    at_w1 = [int(g(*w1)) for g in G]
    fiber_polys = [g - ctx.from_dict({(0,) * r: v}) for g, v in zip(G, at_w1)]
    say(f"p = {p}, run {run}: solving the fiber ({M} equations in {r} unknowns)")
    fiber_count = count_solutions(fiber_polys, names, p, deadline.left())
    if fiber_count.status != "finite" or not fiber_count.radical:
        return DegreeRun(p, run, slice_count, fiber_count, None, _why(fiber_count, "fiber"))
    e = fiber_count.n_distinct
    if slice_count.n_distinct % e:
        return DegreeRun(p, run, slice_count, fiber_count, None,
                         f"the fiber size {e} does not divide the slice count")
    return DegreeRun(p, run, slice_count, fiber_count, slice_count.n_distinct // e)


def _why(c: SolveCount, what: str) -> str:
    if c.status == "stopped":
        return f"the {what} system was stopped"
    if c.status == "finite":
        return f"the {what} system has multiple zeros (not radical)"
    return f"the {what} system is {c.status}"


def image_degree(F: Callable[[Sequence], list], n_params: int, dimension: int | None = None, *,
                 seed: int = 0, timeout: float = DEFAULT_TIMEOUT, repeats: int = 2,
                 primes: Sequence[int] = PRIMES, label: str = "",
                 progress: Callable[[str], None] | None = None,
                 deadline: Deadline | None = None) -> DegreeResult:
    """The degree of the closure of the image of the polynomial map F: K^n -> K^M.

    Math: deg V = #(V cut by dim V generic affine hyperplanes), counted as the zeros of the
    gauge-fixed slice system over the algebraic closure of F_p divided by the generic fiber size
    (module docstring). Status `exact (mod p, randomised)`, `stopped` or `ambiguous`.

    Args:
        F: maps a list of n ring elements (ints or python-flint nmod_mpoly) to the M outputs,
            using only +, - and * (the map must have integer coefficients).
        n_params: n, the number of variables of F.
        dimension: dim V if known from an exact engine; by default the Jacobian rank mod p at a
            random point (a lower bound that is exact outside a proper algebraic set).
        seed: seeds every random choice (gauge point, slices, fiber point).
        timeout: seconds for all the solves together (gauge, slices, fibers); a solve past it
            is killed and the result is `stopped`.
        repeats: independent runs per prime (each with its own gauge point and slice).
        primes: primes 3 <= p < 2^30 (at least one; msolve's range).
        deadline: a `budget.Deadline` shared with earlier phases (replaces `timeout`'s own);
            it is polled between the steps of every run (the map, its Jacobian, the slices)
            and bounds each msolve call.

    Raises:
        ValueError, TypeError: the template message for an `n_params` smaller than the number of
            variables F reads, a `dimension` that is no integer in [1, n_params], a float
            coefficient in F, or a prime that is not one or lies outside msolve's range
            (checked before flint sees it).

    Example:
        >>> def F(w):  # 2 x 2 rank-1 matrices (a, b) -> a b^T: the quadric det = 0
        ...     return [w[0] * w[2], w[0] * w[3], w[1] * w[2], w[1] * w[3]]
        >>> image_degree(F, 4).degree
        2
    """
    seed, n_params, dimension, repeats, timeout, primes, M = check_image_arguments(
        F, n_params, dimension, seed, repeats, timeout, primes)
    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    deadline = deadline if deadline is not None else Deadline.after(timeout)
    notes = []
    if dimension is None:
        try:
            free, _ = _gauge(F, n_params, primes[0],
                             random.Random(purpose_seed(seed, "degree-dimension")), deadline)
        except DegreeStopped as stop:
            return DegreeResult(None, STOPPED, 0, n_params, M, [], time.perf_counter() - start,
                                [f"the time limit passed during {stop.phase}: no degree is "
                                 "claimed (raise --timeout)"], label, seed)
        dimension = len(free)
        notes.append(f"dimension {dimension} from the Jacobian rank mod p at one random point")
    runs = []
    for p in primes:
        for k in range(repeats):
            try:
                run = _one_run(F, n_params, dimension, p, seed, k, deadline, say)
            except DegreeStopped as stop:
                run = DegreeRun(p, k, SolveCount("stopped", None, None, 0.0,
                                                 f"the time limit passed during {stop.phase}"),
                                None, None, "stopped before the solves")
            runs.append(run)
            if run.degree is None:
                break
        if runs and runs[-1].degree is None:
            break
    seconds = time.perf_counter() - start
    stopped = [r for r in runs if "stopped" in (r.slice_count.status,
                                                 r.fiber_count and r.fiber_count.status)]
    degrees = {r.degree for r in runs}
    if stopped:
        status, degree = STOPPED, None
        notes.append("a solve did not finish within the time limit or memory: no degree is "
                     "claimed (raise --timeout)")
    elif None in degrees or len(degrees) != 1:
        status, degree = AMBIGUOUS, None
        notes.append("the runs disagree or a check failed: no degree is claimed (try another --seed)")
    else:
        status, degree = EXACT, degrees.pop()
        notes.append(f"{len(runs)} runs over {len(set(r.prime for r in runs))} primes agree; "
                     "a randomised count over F_p, not a proof")
    return DegreeResult(degree, status, dimension, n_params, M, runs, seconds, notes, label, seed)


# Issue 37: the pieces the ED degree (degree/ed.py) reuses, under public names.
gauge_point = _gauge
gauge_fixed_map = _gauge_fixed
poly_ring = _poly_ring
as_polys = _as_polys
count_text = _count_text
failure_reason = _why
