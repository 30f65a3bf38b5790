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
from typing import Callable

import numpy as np

from ..core.architecture import Architecture
from ..core.checks import check_int, check_seed
from ..core.seeds import purpose_seed
from ..dimension.fp import rank_mod_p
from ..errors import ComputationError
from .engine import DEFAULT_TIMEOUT, PRIMES, DegreeResult, check_timeout, image_degree
from .polymap import check_polynomial, function_coefficients, network_map, object_array

_MAX_SPAN_SAMPLES = 4096


def _random_residues(rng: random.Random, count: int, p: int) -> list[int]:
    return [rng.randrange(p) for _ in range(count)]


def span_dimension(arch: Architecture, p: int, seed: int) -> tuple[int, list[list[int]]]:
    """(dim S, the K random weight vectors used), exactly over F_p at random networks.

    Math: K random points of V span S once K > dim S, so rank < K means the rank is dim S.
    """
    rng = random.Random(purpose_seed(seed, "degree-span"))
    samples, rows, columns = [], [], {}
    K = 8
    while True:
        while len(samples) < K:
            w = _random_residues(rng, arch.n_params, p)
            samples.append(w)
            coeffs = function_coefficients(arch, w, p)
            rows.append(coeffs)
            for key in coeffs:
                columns.setdefault(key, len(columns))
        matrix = np.zeros((len(rows), max(1, len(columns))), dtype=np.int64)
        for i, coeffs in enumerate(rows):
            for key, c in coeffs.items():
                matrix[i, columns[key]] = c
        rank = rank_mod_p(matrix, p)
        if rank < K or K >= _MAX_SPAN_SAMPLES:
            return rank, samples
        K *= 2


def evaluation_inputs(arch: Architecture, spans: list[tuple[int, int, list[list[int]]]],
                      seed: int, bound: int | None = None) -> tuple[np.ndarray, int]:
    """(inputs (N, d_0, t), N): integer inputs whose evaluation is injective on the span S over
    every prime of `spans` = [(p, dim S mod p, the random weights that span S)] (rank check).

    Entries are residues of the smallest prime, or integers in [-bound, bound] when given.
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
        F = network_map(arch, inputs)
        if all(rank_mod_p(np.array([[int(v) % p for v in F(w)] for w in samples], dtype=np.int64), p)
               == span_dim for p, span_dim, samples in spans):
            return inputs, N
        N += 1


def degree(arch: Architecture, *, seed: int = 0, timeout: float = DEFAULT_TIMEOUT,
           repeats: int = 2, progress: Callable[[str], None] | None = None) -> DegreeResult:
    """The degree of the neurovariety of a polynomial network, randomised exact over F_p.

    Math: deg V = #(V cut by dim V generic affine hyperplanes) (docs/degree.md); computed by
    gauge fixing, random slices and msolve over two primes near 2^30, with the evaluation on N
    inputs checked injective on the span of V. Status `exact (mod p, randomised)` when every
    run agrees, `stopped` when the solves take more than `timeout` seconds together,
    `ambiguous` otherwise (degree None).

    Raises:
        ValueError: for a network that is not polynomial (softmax, relu/gelu/tanh, a norm):
            its neuromanifold is not algebraic and has no degree.

    Example:
        >>> r = degree(Architecture((2, 1), (2,), 3))   # Figure 1: a quartic hypersurface
        >>> (r.degree, r.dimension)
        (4, 5)
    """
    check_polynomial(arch)
    seed = check_seed(seed)
    timeout = check_timeout(timeout)
    repeats = check_int("repeats", repeats, minimum=1, fix="Pass --repeats 1 or more.")
    say = progress or (lambda _msg: None)
    from ..dimension.api import neuromanifold_dim  # noqa: PLC0415

    say("dimension by the exact engine")
    dim_result = neuromanifold_dim(arch, method="certified", seed=seed)
    r = dim_result.dimension
    say("span of the neurovariety (coefficients over F_p)")
    spans = [(p,) + span_dimension(arch, p, seed) for p in PRIMES]
    span_dim = spans[0][1]
    if any(s != span_dim for _, s, _ in spans):
        raise ComputationError(f"the span of the neurovariety has dimensions "
                               f"{[s for _, s, _ in spans]} over the primes {list(PRIMES)}; "
                               "rerun with another --seed.")
    inputs, N = evaluation_inputs(arch, spans, seed)
    say(f"{N} input sequences; evaluation injective on the span (rank {span_dim})")
    F = network_map(arch, inputs)
    result = image_degree(F, arch.n_params, r, seed=seed, timeout=timeout, repeats=repeats,
                          progress=say, label=str(arch))
    result.notes[:0] = [
        f"dimension {r} from the exact engine ({dim_result.status}, p = {dim_result.prime})",
        f"linear span of the neurovariety: dimension {span_dim} (exact over F_p); evaluation on "
        f"N = {N} inputs is injective on it (rank {span_dim} over both primes), so the degree is preserved",
    ]
    result.span_dim, result.n_inputs = span_dim, N
    return result
