"""Lowest-degree implicit equations of small neurovarieties, by interpolation (docs/degree.md).

Math: V is a cone in its linear span S (scaling the last value matrix scales phi), so its ideal
is homogeneous. With coordinates y_1..y_s on S (s pivot coefficients of phi, `polymap`), the
degree-k forms vanishing on V are the kernel of the matrix [m(y(W_j))]_{j, m} over the monomials
m of degree k and random networks W_j (more rows than monomials). Its rank is the Hilbert
function HF_V(k) (randomised exact over F_p); the kernel's reduced row echelon basis is unique,
so it is computed over several primes near 2^30, combined by the Chinese remainder theorem and
lifted to rationals by rational reconstruction (stable when one more prime changes nothing), and
the integer equations are then verified exactly (python integers) at fresh random integer
networks. Figure 1 (d = 2, d' = 1, a = 2) gives one quartic.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

import numpy as np

from ..core.architecture import Architecture
from ..core.checks import check_int, check_seed
from ..core.seeds import purpose_seed
from ..dimension.fp import pivot_columns_mod_p, rank_mod_p, to_nmod_mat
from ..errors import ComputationError
from .budget import (MAX_SPAN_SAMPLES, Deadline, DegreeStopped, check_phase,
                     coefficient_count_bound, interpolation_estimate, span_estimate)
from .network import span_basis
from .polymap import check_polynomial, forward_objects, function_coefficients, object_array

# Primes below 2^30 for the lift (the first two are the degree engine's).
LIFT_PRIMES = (1_073_741_789, 1_073_741_783, 1_073_741_741, 1_073_741_723, 1_073_741_719,
               1_073_741_717, 1_073_741_689, 1_073_741_671)
_CHECK_POINTS = 5
STOPPED = "stopped"


@dataclass
class EquationsResult:
    """The Hilbert function of V in its span and its lowest-degree equations over Q.

    equations: integer coefficient dicts {monomial exponent tuple: int} in the span coordinates
    y_1..y_s (`coordinates` names each as an output entry and an input monomial of phi).
    """

    architecture: dict
    span_dim: int | None
    n_coefficients: int
    hilbert: dict[int, int]
    n_equations: dict[int, int]
    lowest_degree: int | None
    equations: list[dict]
    verified: bool
    coordinates: list[str]
    status: str
    seconds: float
    seed: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """A JSON-serialisable description."""
        return {"architecture": self.architecture, "span_dim": self.span_dim,
                "n_coefficients": self.n_coefficients,
                "hilbert_function": {str(k): v for k, v in self.hilbert.items()},
                "n_equations": {str(k): v for k, v in self.n_equations.items()},
                "lowest_degree": self.lowest_degree,
                "equations": [format_polynomial(e) for e in self.equations],
                "verified": self.verified, "coordinates": self.coordinates,
                "status": self.status, "seconds": round(self.seconds, 3), "seed": self.seed,
                "notes": self.notes}

    def __str__(self) -> str:
        if self.span_dim is None:
            return "\n".join([f"equations: none  [{self.status}]"]
                             + [f"note: {n}" for n in self.notes])
        lines = [f"span of the neurovariety: dimension {self.span_dim} (of {self.n_coefficients} "
                 f"coefficients of phi; {self.n_coefficients - self.span_dim} linear relations "
                 f"among them) [exact (mod p, randomised)]",
                 "degree k | monomials | Hilbert function | independent equations"]
        for k in sorted(self.hilbert):
            monos = math.comb(self.span_dim + k - 1, k)
            lines.append(f"{k:8d} | {monos:9d} | {self.hilbert[k]:16d} | {self.n_equations[k]:d}")
        if self.status == STOPPED:
            lines.append(f"no equation claimed [{STOPPED}]")
        elif self.lowest_degree is None:
            lines.append("no equation up to this degree: V spans its degree-k forms")
        else:
            lines.append(f"lowest-degree equations (degree {self.lowest_degree}, {len(self.equations)}, "
                         f"over Q in y_1..y_{self.span_dim}) [{self.status}]:")
            lines += [f"  {format_polynomial(e)}" for e in self.equations[:10]]
            if len(self.equations) > 10:
                lines.append(f"  ... {len(self.equations) - 10} more (--json lists all)")
        lines.append("coordinates: " + ", ".join(f"y_{i + 1} = {c}" for i, c in
                                                 enumerate(self.coordinates)))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def format_polynomial(coefficients: dict) -> str:
    """'3*y1^2*y4 - y2*y3' from {exponent tuple: int}."""
    terms = []
    for mono, c in sorted(coefficients.items(), reverse=True):
        factors = [f"y{i + 1}" + (f"^{e}" if e > 1 else "") for i, e in enumerate(mono) if e]
        body = "*".join(factors) or "1"
        sign = "-" if c < 0 else "+"
        magnitude = abs(c)
        terms.append(f"{sign} {body if magnitude == 1 else f'{magnitude}*{body}'}")
    text = " ".join(terms)
    return text[2:] if text.startswith("+ ") else "-" + text[2:] if text else "0"


def _rational_reconstruction(a: int, m: int) -> Fraction | None:
    """n/d = a mod m with |n|, d <= sqrt(m/2), or None (Wang's algorithm)."""
    bound = math.isqrt(m // 2)
    r0, r1, s0, s1 = m, a % m, 0, 1
    while r1 > bound:
        q = r0 // r1
        r0, r1, s0, s1 = r1, r0 - q * r1, s1, s0 - q * s1
    if s1 == 0 or abs(s1) > bound or math.gcd(r1, abs(s1)) != 1:
        return None
    return Fraction(r1, s1)


def _kernel_rref(matrix: np.ndarray, p: int) -> list[list[int]]:
    """The reduced row echelon basis of the right kernel of `matrix` mod p (unique)."""
    import flint  # noqa: PLC0415

    A = to_nmod_mat(matrix, p)
    X, nullity = A.nullspace()
    if nullity == 0:
        return []
    rows = [[int(X[i, j]) for i in range(X.nrows())] for j in range(nullity)]
    R, rank = flint.nmod_mat(rows, p).rref()
    return [[int(R[i, j]) for j in range(R.ncols())] for i in range(rank)]


def _exponents(monomial: tuple[int, ...], s: int) -> tuple[int, ...]:
    exps = [0] * s
    for i in monomial:
        exps[i] += 1
    return tuple(exps)


def equations_estimates(arch: Architecture, max_degree: int, max_monomials: int,
                        max_memory: object | None = None) -> list:
    """The memory estimate of each phase of `implicit_equations`, checked against the budget
    before anything runs (ResourceError, one line): the span, and the largest interpolation
    matrix it can build (at most `max_monomials` monomials)."""
    s_max = min(coefficient_count_bound(arch), MAX_SPAN_SAMPLES)
    monos = min(max_monomials, math.comb(s_max + max_degree - 1, max_degree))
    estimates = [span_estimate(arch), interpolation_estimate(monos)]
    for estimate in estimates:
        check_phase(estimate, max_memory)
    return estimates


def implicit_equations(arch: Architecture, *, max_degree: int = 4, seed: int = 0,
                       max_monomials: int = 3000, timeout: float | None = None,
                       max_memory: object | None = None,
                       progress: Callable[[str], None] | None = None) -> EquationsResult:
    """The Hilbert function of a small neurovariety up to `max_degree` and its lowest-degree
    equations over Q, verified exactly at fresh integer points.

    Math: module docstring. The counts are exact over F_p at random points (randomised); the
    equations are exact over Q and checked to vanish at random integer networks. `timeout`
    (seconds, every phase: span, interpolation, lift, check) ends the run with status
    `stopped` and no equation claimed; the memory of every phase is checked against
    `max_memory` (default 80% of the available memory) before anything runs.

    Example:
        >>> r = implicit_equations(Architecture((2, 1), (2,), 3))    # Figure 1
        >>> (r.lowest_degree, len(r.equations), r.verified)
        (4, 1, True)
    """
    from .engine import check_timeout  # noqa: PLC0415

    check_polynomial(arch)
    seed = check_seed(seed)
    max_degree = check_int("max_degree", max_degree, minimum=1, fix="Pass --max-degree 4.")
    max_monomials = check_int("max_monomials", max_monomials, minimum=1, fix="Pass --max-monomials 3000.")
    timeout = None if timeout is None else check_timeout(timeout)
    equations_estimates(arch, max_degree, max_monomials, max_memory)
    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    deadline = Deadline.after(math.inf if timeout is None else timeout)
    p = LIFT_PRIMES[0]
    hilbert, n_equations, notes = {}, {}, []
    s, n_keys, coordinates = None, 0, []
    try:
        say("span of the neurovariety (coefficients over F_p)")
        span = span_basis(arch, p, seed, deadline, say)
        if not span.complete:
            raise ComputationError(f"the span of the neurovariety is still growing after "
                                   f"{span.dimension} independent random networks (the cap); "
                                   "use a smaller network")
        s, n_keys = span.dimension, len(span.keys)
        # coordinates on S: s pivot coefficients, in the sorted order of the coefficients
        order = sorted(range(n_keys), key=lambda j: span.keys[j])
        pivots = pivot_columns_mod_p(span.basis[:, order], p)
        if len(pivots) != s:
            raise ComputationError("the pivot coefficients do not span the span; rerun with another --seed")
        chosen = [span.keys[order[j]] for j in pivots]
        coordinates = [f"coefficient of x^{mono} in phi[{idx // arch.tokens},{idx % arch.tokens}]"
                       for idx, mono in chosen]
        lowest = None
        for k in range(1, max_degree + 1):
            n_monos = math.comb(s + k - 1, k)
            if n_monos > max_monomials:
                notes.append(f"degree {k} has {n_monos} monomials (> {max_monomials}): stopped there")
                break
            say(f"degree {k}: interpolation on {n_monos} monomials")
            rank = rank_mod_p(_monomial_matrix(arch, chosen, k, s, p, seed, deadline), p)
            hilbert[k], n_equations[k] = rank, n_monos - rank
            if rank < n_monos:
                lowest = k
                break
        equations, verified, status = [], False, "none found"
        if lowest is not None:
            say(f"degree {lowest}: lifting the {n_equations[lowest]} equations to Q")
            equations = _lift(arch, chosen, lowest, s, seed, deadline)
            verified = _verify(arch, chosen, equations, seed, deadline)
            status = "exact over Q (verified at random integer points)" if verified else "ambiguous"
            if not verified:
                notes.append("the lifted equations did not vanish at fresh integer points: not claimed")
    except DegreeStopped as stop:
        notes.append(f"the --timeout of {timeout:g} s passed during {stop.phase}: no equation "
                     "is claimed (raise --timeout)")
        return EquationsResult(arch.to_dict(), s, n_keys, hilbert, n_equations, None, [], False,
                               coordinates, STOPPED, time.perf_counter() - start, seed, notes)
    return EquationsResult(arch.to_dict(), s, n_keys, hilbert, n_equations, lowest, equations,
                           verified, coordinates, status, time.perf_counter() - start, seed, notes)


def _span_point(arch: Architecture, chosen: list, weights: list[int], p: int | None) -> list[int]:
    """The span coordinates y(W): the chosen coefficients of phi_W, mod p (or over Z: p None)."""
    if p is not None:
        c = function_coefficients(arch, weights, p)
        return [c.get(key, 0) for key in chosen]
    return _integer_coefficients(arch, weights, chosen)


def _integer_coefficients(arch: Architecture, weights: list[int], chosen: list) -> list[int]:
    """The chosen coefficients of phi_W over Z (sympy-free: python-flint fmpz_mpoly)."""
    import flint  # noqa: PLC0415

    d0, t = arch.widths[0], arch.tokens
    ctx = flint.fmpz_mpoly_ctx.get(("x", d0 * t))
    X = object_array((1, d0, t), ctx.gens())
    outputs = forward_objects(arch, [int(w) for w in weights], X)
    values = []
    for idx, mono in chosen:
        poly = outputs[idx]
        values.append(0 if isinstance(poly, int) else int(poly.to_dict().get(mono, 0)))
    return values


def _monomial_matrix(arch, chosen, k: int, s: int, prime: int, seed: int,
                     deadline: Deadline | None = None) -> np.ndarray:
    """[m(y(W_j))] mod prime over the degree-k monomials m and #monomials + 10 random W_j
    (int64, filled one network at a time; the deadline is polled before each)."""
    rng = random.Random(purpose_seed(seed, f"equations-{k}-{prime}"))
    monos = np.array(list(itertools.combinations_with_replacement(range(s), k)), dtype=np.int64)
    out = np.zeros((len(monos) + 10, len(monos)), dtype=np.int64)
    for row in range(out.shape[0]):
        if deadline is not None:
            deadline.check(f"the degree-{k} interpolation (p = {prime}, network {row + 1} of "
                           f"{out.shape[0]})")
        y = np.array(_span_point(arch, chosen, [rng.randrange(prime) for _ in range(arch.n_params)],
                                 prime), dtype=np.int64)
        values = y[monos[:, 0]]
        for i in range(1, k):
            values = values * y[monos[:, i]] % prime
        out[row] = values
    return out


def _lift(arch, chosen, k, s, seed, deadline: Deadline | None = None) -> list[dict]:
    """The degree-k equations over Z: CRT of the RREF kernels and rational reconstruction."""
    monos = list(itertools.combinations_with_replacement(range(s), k))
    modulus, combined, previous = 1, None, None
    for prime in LIFT_PRIMES:
        kernel = _kernel_rref(_monomial_matrix(arch, chosen, k, s, prime, seed, deadline), prime)
        if combined is None:
            combined = kernel
        else:
            if len(kernel) != len(combined):
                raise ComputationError("the kernel dimension differs between primes; rerun with "
                                       "another --seed")
            inv = pow(modulus, -1, prime)
            combined = [[a + modulus * ((b - a) * inv % prime) for a, b in zip(ra, rb)]
                        for ra, rb in zip(combined, kernel)]
        modulus *= prime
        lifted = [[_rational_reconstruction(a, modulus) for a in row] for row in combined]
        if all(x is not None for row in lifted for x in row):
            if lifted == previous:
                return [_primitive(row, monos, s) for row in lifted]
            previous = lifted
    raise ComputationError(f"the degree-{k} equations did not lift over {len(LIFT_PRIMES)} primes")


def _primitive(row: list[Fraction], monos, s: int) -> dict:
    lcm = 1
    for x in row:
        lcm = lcm * x.denominator // math.gcd(lcm, x.denominator)
    ints = [int(x * lcm) for x in row]
    g = 0
    for c in ints:
        g = math.gcd(g, c)
    ints = [c // g for c in ints]
    return {_exponents(m, s): c for m, c in zip(monos, ints) if c}


def _verify(arch, chosen, equations: list[dict], seed: int,
            deadline: Deadline | None = None) -> bool:
    """Each equation vanishes exactly (python integers) at fresh random integer networks."""
    rng = random.Random(purpose_seed(seed, "equations-verify"))
    for _ in range(_CHECK_POINTS):
        if deadline is not None:
            deadline.check("the exact check of the equations")
        y = _span_point(arch, chosen, [rng.randrange(-50, 51) for _ in range(arch.n_params)], None)
        for eq in equations:
            if sum(c * math.prod(v ** e for v, e in zip(y, mono)) for mono, c in eq.items()):
                return False
    return True
