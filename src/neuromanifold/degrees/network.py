"""The degree of a polynomial network's neurovariety (`neuromanifold degree`, docs/degree.md).

Math: the neurovariety V is the Zariski closure of {phi_W} in the space of polynomial maps
R^{d_0 x t} -> R^{d_l x t}. Its linear span S is measured exactly on the function's
coefficients (`polymap.function_coefficients`): dim S = the rank over F_p of the coefficient
vectors of K random networks once K exceeds it. Evaluation at N input sequences is a linear
map L on S; when rank L(c(W_1..W_K)) = dim S, L is injective on S, so L(V) is isomorphic to V
(same dimension, same degree), and the degree engine (`engine.image_degree`) runs on the
polynomial map W -> (phi_W(X_1), ..., phi_W(X_N)) over F_p. The dimension r comes from the
existing exact engine (`neuromanifold_dim(method='certified')`: the exact rank with its
symmetry upper bound); the Jacobian rank mod p at each gauge point must equal it.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..core.architecture import Architecture
from ..core.checks import check_int, check_seed
from ..core.seeds import purpose_seed
from ..dimension.fp import rank_mod_p
from ..errors import ComputationError
from .budget import MAX_SPAN_SAMPLES, Deadline
from .engine import DEFAULT_TIMEOUT, PRIMES, DegreeResult, check_timeout, image_degree
from .polymap import check_polynomial, coefficient_polynomials, network_map, object_array

# Basis rows updated at once when a new pivot is eliminated from them (bounds the temporaries).
_UPDATE_ROWS = 256
# Seconds between two progress lines of a long phase.
_PROGRESS_EVERY = 5.0


def _random_residues(rng: random.Random, count: int, p: int) -> list[int]:
    return [rng.randrange(p) for _ in range(count)]


@dataclass
class Span:
    """The linear span S of the neurovariety over F_p, measured at random networks.

    dimension: dim S (exact over F_p, randomised) when `complete`; else a lower bound (the
    sample cap was reached with every sample independent). samples: the weight vectors used.
    keys: the coefficient of each column, (output entry, input monomial exponents).
    basis: dim S x len(keys) int64 residues, the reduced row echelon basis of S (columns in
    `keys` order); pivots: its pivot column per row.
    """

    dimension: int
    samples: list[list[int]]
    keys: list[tuple]
    basis: np.ndarray
    pivots: list[int]
    complete: bool


class _Columns:
    """Column index of each (output entry, monomial) coefficient, in order of first appearance."""

    def __init__(self):
        self.index: dict[tuple, int] = {}

    def row(self, arch: Architecture, weights: list[int], p: int) -> tuple[np.ndarray, np.ndarray]:
        """(columns, residues) of the nonzero coefficients of phi_W, as int64 arrays."""
        cols, vals = [], []
        index = self.index
        for out, poly in enumerate(coefficient_polynomials(arch, weights, p)):
            if isinstance(poly, int):
                continue
            for mono, c in zip(poly.monoms(), poly.coeffs()):
                c = int(c)
                if c:
                    cols.append(index.setdefault((out, mono), len(index)))
                    vals.append(c)
        return np.array(cols, dtype=np.int64), np.array(vals, dtype=np.int64)


def _reduce(v: np.ndarray, basis: np.ndarray, pivots: list[int], p: int) -> np.ndarray:
    """v minus its combination of the reduced basis rows (v[pivots] @ basis), mod p.

    Math: with the coefficients c = c_lo + 2^15 c_hi (0 <= c_lo, c_hi < 2^15) each int64 sum
    c_lo @ basis has at most 4096 terms < 2^45: exact (no overflow below 2^18 rows).
    """
    if not pivots:
        return v % p
    c = v[pivots]
    lo, hi = c & 0x7FFF, c >> 15
    out = v - (lo @ basis) % p
    out -= ((hi @ basis) % p) * 2 ** 15 % p
    return out % p


def span_basis(arch: Architecture, p: int, seed: int, deadline: Deadline | None = None,
               say: Callable[[str], None] | None = None) -> Span:
    """The span S of the neurovariety over F_p, from random networks until one is dependent.

    Math: random points c(W_1), c(W_2), ... of V are added to a reduced row echelon basis; the
    first that lies in the span of the earlier ones ends the phase: outside a proper algebraic
    set of draws (probability <= deg/p per draw, Schwartz-Zippel) that span is S itself. Rows
    are int64 residues (8 bytes an entry); the deadline is polled after every sample and every
    block of the elimination.
    """
    rng = random.Random(purpose_seed(seed, "degree-span"))
    columns = _Columns()
    samples: list[list[int]] = []
    pivots: list[int] = []
    basis = np.zeros((0, 0), dtype=np.int64)
    last = time.perf_counter()
    while True:
        if deadline is not None:
            deadline.check(f"span of the neurovariety (p = {p}, {len(pivots)} independent "
                           f"samples so far)")
        if len(pivots) >= MAX_SPAN_SAMPLES:
            return Span(len(pivots), samples, list(columns.index), basis[:len(pivots)], pivots,
                        False)
        w = _random_residues(rng, arch.n_params, p)
        samples.append(w)
        cols, vals = columns.row(arch, w, p)
        width = len(columns.index)
        if basis.shape[1] < width:      # first sample, or a coefficient no earlier sample had
            grown = np.zeros((max(basis.shape[0], min(width, MAX_SPAN_SAMPLES)), width),
                             dtype=np.int64)
            grown[:basis.shape[0], :basis.shape[1]] = basis
            basis = grown
        v = np.zeros(width, dtype=np.int64)
        v[cols] = vals
        r = len(pivots)
        v = _reduce(v, basis[:r], pivots, p)
        nonzero = np.flatnonzero(v)
        if nonzero.size == 0:
            return Span(r, samples, list(columns.index), basis[:r].copy(), pivots, True)
        j = int(nonzero[0])
        v = v * pow(int(v[j]), -1, p) % p
        for start in range(0, r, _UPDATE_ROWS):      # clear column j from the earlier rows
            block = basis[start:start + _UPDATE_ROWS, :]
            factor = block[:, j].copy()
            if factor.any():
                block -= np.outer(factor, v) % p
                block %= p
            if deadline is not None:
                deadline.check(f"span of the neurovariety (p = {p}, {r} independent samples)")
        basis[r, :] = v
        pivots.append(j)
        if say is not None and time.perf_counter() - last > _PROGRESS_EVERY:
            last = time.perf_counter()
            say(f"span over p = {p}: {r + 1} independent samples of {width} coefficients")


def span_dimension(arch: Architecture, p: int, seed: int, deadline: Deadline | None = None,
                   say: Callable[[str], None] | None = None) -> tuple[int, list[list[int]]]:
    """(dim S, the random weight vectors used), exactly over F_p at random networks
    (`span_basis`); a span still growing at the sample cap is a ComputationError."""
    span = span_basis(arch, p, seed, deadline, say)
    if not span.complete:
        raise ComputationError(unsettled_note(span))
    return span.dimension, span.samples


def unsettled_note(span: Span) -> str:
    """Why no degree is claimed when the span is still growing at the cap (`span_basis`)."""
    return (f"the span of the neurovariety is still growing after {span.dimension} independent "
            f"random networks (the cap): its dimension is only bounded below, so no degree is "
            "claimed; use a smaller network")


def span_over_primes(arch: Architecture, seed: int, deadline: Deadline,
                     say: Callable[[str], None]) -> tuple[list, int | None, str | None]:
    """The span phase of `degree` and `ed.ed_degree`: (spans [(p, dim S mod p, its random
    weights)] over PRIMES, dim S, None), or ([], None, why) when a span is still growing at the
    cap; ComputationError when the primes disagree; the deadline polled throughout."""
    say("span of the neurovariety (coefficients over F_p)")
    spans = []
    for p in PRIMES:
        span = span_basis(arch, p, seed, deadline, say)
        if not span.complete:
            return [], None, unsettled_note(span)
        spans.append((p, span.dimension, span.samples))
    span_dim = spans[0][1]
    if any(s != span_dim for _, s, _ in spans):
        raise ComputationError(f"the span of the neurovariety has dimensions "
                               f"{[s for _, s, _ in spans]} over the primes {list(PRIMES)}; "
                               "rerun with another --seed.")
    return spans, span_dim, None


def evaluation_inputs(arch: Architecture, spans: list[tuple[int, int, list[list[int]]]],
                      seed: int, bound: int | None = None, deadline: Deadline | None = None,
                      say: Callable[[str], None] | None = None) -> tuple[np.ndarray, int]:
    """(inputs (N, d_0, t), N): integer inputs whose evaluation is injective on the span S over
    every prime of `spans` = [(p, dim S mod p, the random weights that span S)] (rank check).

    Entries are residues of the smallest prime, or integers in [-bound, bound] when given. The
    deadline is polled before each network is evaluated.
    """
    rng = random.Random(purpose_seed(seed, "degree-inputs"))
    per_input = arch.widths[-1] * arch.tokens
    N = max(1, math.ceil(max(s for _, s, _ in spans) / per_input))
    smallest = min(p for p, _, _ in spans)
    while True:
        count = N * arch.widths[0] * arch.tokens
        inputs = object_array((N, arch.widths[0], arch.tokens),
                              _random_residues(rng, count, smallest) if bound is None
                              else [rng.randint(-bound, bound) for _ in range(count)])
        if say is not None:
            say(f"evaluation at N = {N} input sequences: checking it is injective on the span")
        F = network_map(arch, inputs)
        if all(_evaluation_rank(F, samples, p, deadline) == span_dim
               for p, span_dim, samples in spans):
            return inputs, N
        N += 1


def _evaluation_rank(F: Callable, samples: list[list[int]], p: int,
                     deadline: Deadline | None) -> int:
    """rank over F_p of [F(w) for w in samples], the rows filled one network at a time."""
    rows = None
    for i, w in enumerate(samples):
        if deadline is not None:
            deadline.check(f"evaluation inputs (p = {p}, network {i + 1} of {len(samples)})")
        values = F(w)
        if rows is None:
            rows = np.zeros((len(samples), len(values)), dtype=np.int64)
        rows[i] = [int(v) % p for v in values]
    return rank_mod_p(rows, p)


def degree_estimates(arch: Architecture, max_memory: object | None = None) -> list:
    """The memory estimates of the phases of `degree` known from the architecture alone, each
    checked against the budget before anything runs (ResourceError, one line, naming options
    `degree` has): the exact engine's rank (its own plan) and the span (bounded by the
    coefficients phi can have). The symbolic map's depends on N (`gauge_estimate`)."""
    from dataclasses import replace  # noqa: PLC0415

    from ..dimension.plan import exact_plan  # noqa: PLC0415
    from .budget import check_phase, span_estimate  # noqa: PLC0415

    exact = exact_plan(arch, True, None).estimate
    exact = replace(exact, advice=exact.advice.replace(" or --method numerical", "")
                    .replace(", fewer --samples, or --method numerical", "")
                    .replace(" (exact rank", ", or fewer layers (exact rank"))
    estimates = [exact, span_estimate(arch)]
    for estimate in estimates:
        check_phase(estimate, max_memory)
    return estimates


def _stopped(arch: Architecture, phase: str, timeout: float, seconds: float, seed: int,
             dimension: int | None, notes: list[str], why: str | None = None) -> DegreeResult:
    """The result of a run stopped before the solves: no degree."""
    from .engine import STOPPED  # noqa: PLC0415

    why = why or (f"the --timeout of {timeout:g} s passed during {phase}: no degree is claimed "
                  "(raise --timeout)")
    return DegreeResult(None, STOPPED, dimension, arch.n_params, 0, [], seconds, notes + [why],
                        str(arch), seed)


def degree(arch: Architecture, *, seed: int = 0, timeout: float = DEFAULT_TIMEOUT,
           repeats: int = 2, progress: Callable[[str], None] | None = None,
           max_memory: object | None = None) -> DegreeResult:
    """The degree of the neurovariety of a polynomial network, randomised exact over F_p.

    Math: deg V = #(V cut by dim V generic affine hyperplanes) (docs/degree.md); computed by
    gauge fixing, random slices and msolve over two primes near 2^30, with the evaluation on N
    inputs checked injective on the span of V. Status `exact (mod p, randomised)` when every
    run agrees, `stopped` when the whole run (every phase: dimension, span, inputs, gauge and
    solves) takes more than `timeout` seconds, `ambiguous` otherwise (degree None).

    The memory of each phase is estimated from the architecture and checked against
    `max_memory` (default 80% of the available memory) before anything runs
    (`degree_estimates`; docs/degree.md, "Limits").

    Raises:
        ValueError: for a network that is not polynomial (softmax, relu/gelu/tanh, a norm):
            its neuromanifold is not algebraic and has no degree.
        ResourceError: a phase's estimated peak exceeds the memory budget.

    Example:
        >>> r = degree(Architecture((2, 1), (2,), 3))   # Figure 1: a quartic hypersurface
        >>> (r.degree, r.dimension)
        (4, 5)
    """
    from .budget import DegreeStopped, check_phase, gauge_estimate  # noqa: PLC0415

    check_polynomial(arch)
    seed = check_seed(seed)
    timeout = check_timeout(timeout)
    repeats = check_int("repeats", repeats, minimum=1, fix="Pass --repeats 1 or more.")
    degree_estimates(arch, max_memory)          # every phase, before any work or progress line
    say = progress or (lambda _msg: None)
    from ..dimension.api import neuromanifold_dim  # noqa: PLC0415

    start = time.perf_counter()
    deadline = Deadline.after(timeout)
    r, notes = None, []
    try:
        # No line before this check: the symbolic map is estimated at the least N the run can
        # use (N d_l t >= dim S >= dim V = r), checked again at the N the inputs need.
        dim_result = neuromanifold_dim(arch, method="certified", seed=seed, max_memory=max_memory)
        r = dim_result.dimension
        check_phase(gauge_estimate(arch, math.ceil(r / (arch.widths[-1] * arch.tokens))),
                    max_memory)
        say(f"dimension {r} by the exact engine")
        notes.append(f"dimension {r} from the exact engine ({dim_result.status}, "
                     f"p = {dim_result.prime})")
        deadline.check("the dimension by the exact engine")
        spans, span_dim, unsettled = span_over_primes(arch, seed, deadline, say)
        if unsettled is not None:
            return _stopped(arch, "", timeout, time.perf_counter() - start, seed, r, notes,
                            unsettled)
        inputs, N = evaluation_inputs(arch, spans, seed, deadline=deadline, say=say)
    except DegreeStopped as stop:
        return _stopped(arch, stop.phase, timeout, time.perf_counter() - start, seed, r, notes)
    say(f"{N} input sequences; evaluation injective on the span (rank {span_dim})")
    check_phase(gauge_estimate(arch, N), max_memory)     # N is known now (at most the bound's)
    F = network_map(arch, inputs, poll=lambda: deadline.check("the symbolic map of the gauge"))
    result = image_degree(F, arch.n_params, r, seed=seed, timeout=max(deadline.left(), 1e-3),
                          repeats=repeats, progress=say, label=str(arch), deadline=deadline)
    result.notes[:0] = notes + [
        f"linear span of the neurovariety: dimension {span_dim} (exact over F_p); evaluation on "
        f"N = {N} inputs is injective on it (rank {span_dim} over both primes), so the degree is preserved",
    ]
    result.span_dim, result.n_inputs = span_dim, N
    return result
