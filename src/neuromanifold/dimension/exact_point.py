"""The exact rank over Q of a polynomial network's Jacobian at a rational point
(`rank_at_point`'s first proof for lightning networks, docs/tutorial.md).

Math. For a polynomial network (`Architecture.is_polynomial`) every output entry of phi_W(X)
is a polynomial in the input entries X (d_0 x t, m = d_0 t variables) of total degree at most
D = deg_X (`Architecture.polynomial_degrees`), and so is every column d phi / d w_k of the
differential dPhi(W): rank dPhi(W) is the dimension of the span of those polynomial tuples.
Evaluation at the principal lattice S_D = {x in Z_{>=0}^m : x_1 + ... + x_m <= D} is injective
on polynomials of degree <= D (S_D is unisolvent; NOTE below), so the Jacobian J_S(W) of
W -> (phi_W(x))_{x in S_D} has rank dPhi(W) exactly, not only a lower bound as at random inputs.
At a rational point (float64 weights are the dyadic rationals they store) the entries of J_S(W)
are rationals; they are computed by `core.blocks.block_forward` in the arb balls of
`ball_dual.ball_block_forward` at a precision where every ball has radius 0 (a ball contains the
exact value, so a radius-0 ball is that value), scaled by one power of 2 to integers, and the
rank of that integer matrix is flint's exact `fmpz_mat.rank`. That one number is a lower and an
upper bound at once: no probability, no float selection, no determinant ball.

Size. |S_D| = C(m + D, D) inputs, each giving d_l t rows: the path is taken while the matrix has
at most `MAX_ENTRIES` entries and the balls are exact by `MAX_BITS` bits; otherwise the caller
keeps its ball and verified-float64 proofs (and says why in its notes).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from itertools import combinations

import flint
import numpy as np
import torch

from ..core.architecture import Architecture
from .result import Progress

# NOTE: [the principal lattice is unisolvent]
# Claim: a polynomial p in m variables of total degree <= D vanishing on S_D(m) is 0. Induction
# on m + D (m = 0 or D = 0: S_D holds the origin, p is a constant). Restricted to x_1 = 0, p
# vanishes on S_D(m - 1), so p(0, x') = 0 and p = x_1 q with deg q <= D - 1. For x in S_D(m) with
# x_1 >= 1, q(x) = 0; those points are (1, 0, ..., 0) + S_{D-1}(m), so q(x + e_1) vanishes on
# S_{D-1}(m) and q = 0 by induction. Hence the evaluation map on P_D is injective, and a linear
# dependency among the columns of J_S is one among the polynomial columns of dPhi(W): rank J_S =
# rank dPhi(W). (Also the Lagrange nodes of degree-D simplex finite elements.)

# Entries of the lattice Jacobian (|S_D| d_l t rows x n_params columns) above which the exact path
# is not attempted. Measured on 2 shared cores: the boundary layer's 1,320 x 24 = 31,680 entries
# in 0.1 s; random float64 weights of widths 4,4 keys 4 t = 4 (744,192 entries) in 4 s, of widths
# 3,3,2 keys 2,2 t = 2 (780,780 entries, exact at 1024 bits) in 12 s.
MAX_ENTRIES = 1_000_000
# The ball precision is doubled from the caller's start until every entry is exact, up to this.
MAX_BITS = 8192


@dataclass
class ExactPointRank:
    """The exact rank over Q at a point, or why it was not taken (`rank` None)."""

    rank: int | None
    inputs: int                      # |S_D|
    degree: int | None               # D = deg_X
    bits: int | None = None          # the ball precision at which every entry was exact
    entries: int = 0
    reason: str | None = None        # when not taken
    seconds: dict = field(default_factory=dict)

    def note(self) -> str:
        if self.rank is None:
            return f"exact rank over Q not taken: {self.reason}"
        return (f"exact: rank {self.rank} over Q of the Jacobian at the {self.inputs} inputs "
                f"of the degree-{self.degree} lattice (unisolvent for phi's degree in X, so this "
                "is rank dPhi at the point, a lower and an upper bound at once; entries exact in "
                f"{self.bits}-bit balls, scaled to integers, flint's fmpz_mat.rank)")

    def to_dict(self) -> dict:
        return {"rank": self.rank, "inputs": self.inputs, "degree": self.degree,
                "bits": self.bits, "entries": self.entries, "reason": self.reason,
                "engine": "flint fmpz_mat.rank"}


def lattice_size(m: int, degree: int) -> int:
    """|S_D| = C(m + D, D)."""
    return math.comb(m + degree, degree)


def lattice_inputs(m: int, degree: int) -> np.ndarray:
    """S_D as an (|S_D|, m) int64 array: every x in Z_{>=0}^m with sum(x) <= D (stars and bars:
    a D-subset of m + D slots, the gaps between chosen slots being x_1..x_m and the slack)."""
    out = np.empty((lattice_size(m, degree), m), dtype=np.int64)
    for n, bars in enumerate(combinations(range(m + degree), m)):
        prev = -1
        for i, b in enumerate(bars):
            out[n, i] = b - prev - 1
            prev = b
    return out


def not_applicable(arch: Architecture) -> str | None:
    """Why the exact path does not apply to `arch` (None when it does, size aside)."""
    if not arch.is_polynomial:
        return "not a polynomial network"
    if arch.vocab is not None or arch.token_types is not None:
        return "token inputs (the lattice needs continuous inputs)"
    if arch.positions == "rope":
        return "rotary entries are rationals with odd denominators (not exact in balls)"
    return None


def exact_rank_at_point(arch: Architecture, blocks: dict[str, torch.Tensor], *,
                        precision: int = 128, max_entries: int | None = None,
                        progress: Progress | None = None) -> ExactPointRank | None:
    """rank dPhi(W) at the named float64 `blocks` exactly over Q (module docstring), or an
    `ExactPointRank` with `reason` when it is too large or its balls stay inexact; None when
    the network is not one the path applies to (`not_applicable`)."""
    from .ball_dual import ball_block_forward  # noqa: PLC0415

    if not_applicable(arch) is not None:
        return None
    say = progress or (lambda _m: None)
    max_entries = MAX_ENTRIES if max_entries is None else max_entries
    degree = arch.polynomial_degrees()[1]
    m = arch.input_width * arch.tokens
    n_inputs = lattice_size(m, degree)
    entries = n_inputs * arch.output_width * arch.tokens * arch.n_params
    if entries > max_entries:
        return ExactPointRank(None, n_inputs, degree, entries=entries, reason=(
            f"its lattice Jacobian ({n_inputs} inputs of degree {degree} in {m} variables) "
            f"would have {entries:,} entries, above the limit {max_entries:,}"))
    t0 = time.perf_counter()
    X = torch.from_numpy(lattice_inputs(m, degree).astype(np.float64)).reshape(
        n_inputs, arch.input_width, arch.tokens)
    cols = list(range(arch.n_params))
    bits, old = max(16, int(precision)), flint.ctx.prec
    try:
        # the precision is found on the largest inputs first (the lattice's last rows, where
        # x_m = D), then the whole lattice runs once at it; exactness is checked there again
        bits = _exact_bits(arch, blocks, X[-min(2, n_inputs):], cols, bits)
        while True:
            flint.ctx.prec = bits
            _, tangents = ball_block_forward(arch, blocks, X, cols)
            exact = _all_exact(tangents)
            say(f"exact rank: {n_inputs} lattice inputs at {bits} bits, "
                f"{'every entry exact' if exact else 'inexact entries'} "
                f"({time.perf_counter() - t0:.1f} s)")
            if exact or bits >= MAX_BITS:
                break
            bits *= 2
    finally:
        flint.ctx.prec = old
    t_jac = time.perf_counter() - t0
    if not exact:
        return ExactPointRank(None, n_inputs, degree, bits, entries, reason=(
            f"the ball Jacobian at the lattice inputs was not exact at {MAX_BITS} bits"),
            seconds={"exact jacobian": t_jac})
    # rows (n, d_l, t), columns the parameters, as `block_jacobian`
    flat = tangents.transpose(0, 2, 3, 1).reshape(-1, arch.n_params)
    pairs = [(int(e), 0) if isinstance(e, int) else tuple(int(v) for v in e.man_exp())
             for e in flat.flat]
    low = min((exp for man, exp in pairs if man), default=0)
    ints = [man << (exp - low) if man else 0 for man, exp in pairs]
    t1 = time.perf_counter()
    J = flint.fmpz_mat(flat.shape[0], flat.shape[1], ints)
    # rank J = rank J^T J over Q (J^T J x = 0 gives |J x|^2 = 0 for real x): the Gram matrix is
    # n_params square, and its rank about 10x faster than the tall J's (measured, 2,860 x 24)
    rank = (J.transpose() * J).rank() if J.nrows() > J.ncols() else J.rank()
    t2 = time.perf_counter()
    say(f"exact rank over Q: {rank} ({t2 - t1:.2f} s)")
    return ExactPointRank(rank, n_inputs, degree, bits, entries,
                          seconds={"exact jacobian": t_jac, "exact rank": t2 - t1})


def _all_exact(tangents: np.ndarray) -> bool:
    return all(isinstance(e, int) or e.is_exact() for e in tangents.flat)


def _exact_bits(arch: Architecture, blocks: dict[str, torch.Tensor], X: torch.Tensor,
                cols: list[int], bits: int) -> int:
    """The first precision (doubling from `bits`, at most MAX_BITS) at which the Jacobian rows of
    the inputs X are all exact (the caller sets and restores flint.ctx.prec)."""
    from .ball_dual import ball_block_forward  # noqa: PLC0415

    while bits < MAX_BITS:
        flint.ctx.prec = bits
        if _all_exact(ball_block_forward(arch, blocks, X, cols)[1]):
            break
        bits *= 2
    return bits
