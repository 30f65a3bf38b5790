"""Certified ranks of non-polynomial networks: the proof loop, and the paper's upper bound.

Softmax networks (and relu/gelu/tanh MLPs, norms) are not polynomial, so there is no rank over
F_p of their Jacobian. Instead (see docs/certified_softmax.md for the full argument):

- Lower bound. At a *rational* point (dyadic weights W and inputs X_1..X_N, exactly
  representable in float64), a float64 Jacobian picks r columns and r rows (LU with partial
  pivoting on the leading singular vectors); only that r x r block is then evaluated in ball
  arithmetic (python-flint `arb`: the network map run in forward-mode balls, `ball_dual`) and its
  determinant is shown to be non-zero (a ball that excludes 0). Then rank J(W, X) >= r, and the
  rank at any point is at most the generic rank, which is the dimension: dim M >= r
  (`prove_rank`, `certify_rank`). The paper's softmax model is tried first without the float
  Jacobian: a minor on its gauge's free columns, enclosed and proved in verified float64
  (`prove_rank_on_columns`, `ball_dual.gauged_proof`, docs/verified.md); any minor proved
  nonsingular proves the rank, whichever rows and columns were chosen.
- Upper bound. n_params minus the rank over F_p of every known kernel direction at a random
  integer point. For the paper's model (here): GL(a_i) on (Q_i, K_i), Eq. 9 between layers, the
  directions an earlier narrower layer hides (`modular.hidden_symmetry_tangents`) and, for t = 1
  (softmax of a single logit is 1), every Q_i and K_i entry; for other networks the catalogue's
  families (`ball_dual.block_upper_bound`). rank_p <= rank over Q <= generic rank of the
  tangents, so the bound stays sound.

When the two meet the dimension is `certified`; otherwise both bounds are reported.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import flint
import numpy as np
import torch

from ..core.architecture import Architecture, check_architecture
from ..core.checks import check_int, check_seed
from ..core.parameters import LayerWeights
from ..core.formulas import covering_count
from ..core.seeds import seeded_generator
from ..symmetries.paper import symmetry_tangents
from .exact import staircase_boundaries
from .fp import DEFAULT_PRIME, check_prime
from ..errors import ComputationError
from ..core.rank import MIN_GAP_DECADES, numerical_rank
from .modular import (check_word_prime, hidden_symmetry_tangents, random_weights_mod_p,
                      staircase_rank_mod_p)
from .memory import BALL_DEFAULT_PRECISION as DEFAULT_PRECISION
from .result import DimensionResult, Progress

# Working precision (bits) of the ball evaluation: DEFAULT_PRECISION (`memory`, whose estimates
# read it too), and the most it is raised to (doubling).
MAX_PRECISION = 1024
# Weights and inputs are rounded to multiples of 2^-DYADIC_BITS: exact in float64 and in arb.
DYADIC_BITS = 12
# Rows of the float Jacobian per candidate rank (more rows make a well-conditioned block likelier).
ROW_FACTOR = 3.0
# Rows per rank of the gauged proof (`prove_rank_on_columns`: enclosed, then LU-pivoted), fewer:
# the paper's softmax model at 10,240 parameters (rank 6,016) proved with 13 samples at seeds 0
# and 1 (||I - X M||_inf <= 0.566 and 0.174; 0.095 with the 19 samples of ROW_FACTOR 3, at
# 1.5 times the enclosure's and the LU's cost).
GAUGED_ROW_FACTOR = 2.0


def to_dyadic(t: torch.Tensor, bits: int = DYADIC_BITS) -> torch.Tensor:
    return torch.round(t * 2.0 ** bits) / 2.0 ** bits


# ---------------------------------------------------------------------------- upper bound

def softmax_tangents_mod_p(arch: Architecture, weights: LayerWeights, p: int
                           ) -> tuple[torch.Tensor, list[str]]:
    """Kernel directions of the Jacobian at integer `weights`, reduced mod p (rows).

    GL(a_i), Eq. 9, the hidden directions of an earlier narrower layer, and for t = 1 every
    Q_i, K_i entry (a 1 x 1 softmax is the constant 1). Returns the rows and skipped-block notes.
    """
    known, _ = symmetry_tangents(arch, weights)
    hidden, _, skipped = hidden_symmetry_tangents(arch, weights, p)
    rows = [known % p, hidden]
    if arch.is_polynomial:  # lightning: the rescaling is in `known`; t = 1 is in `hidden`
        return torch.cat(rows), skipped
    if arch.tokens == 1:
        for name, shape, offset in arch.param_layout():
            if name[0] in "QK":
                size = shape[0] * shape[1]
                unit = torch.zeros((size, arch.n_params), dtype=torch.int64)
                unit[torch.arange(size), offset + torch.arange(size)] = 1
                rows.append(unit)
    return torch.cat(rows), skipped


def to_residues(t: torch.Tensor, p: int) -> torch.Tensor:
    """Every float64 entry x = n / 2^k (a dyadic rational) as n * (2^k)^-1 mod p (int64).

    Reduction mod p is a ring map on rationals with odd denominators, so a matrix built from
    these residues by ring operations is the reduction of the rational one.
    """
    def one(x: float) -> int:
        num, den = float(x).as_integer_ratio()
        return num % p * pow(den, -1, p) % p
    flat = [one(x) for x in t.reshape(-1).tolist()]
    return torch.tensor(flat, dtype=torch.int64).reshape(t.shape)


def upper_bound_at(arch: Architecture, weights: LayerWeights, p: int = DEFAULT_PRIME
                   ) -> tuple[int, list[str]]:
    """n_params - rank_p(kernel directions at `weights` mod p) >= rank of the Jacobian there.

    `weights` are float64 (read as the exact dyadic rationals they store) or integer residues.
    rank over F_p <= rank over Q of the reduced matrix, so the bound is sound at this point.
    """
    p = check_word_prime(check_prime("prime", p))
    if weights.V[0].is_floating_point():
        weights = LayerWeights(*(tuple(to_residues(t, p) for t in group)
                                 for group in (weights.Q, weights.K, weights.V)))
    tangents, skipped = softmax_tangents_mod_p(arch, weights, p)
    rank, _ = staircase_rank_mod_p(tangents, staircase_boundaries(arch), p)
    notes = [f"hidden kernel block skipped (soundness check failed): {s}" for s in skipped]
    return arch.n_params - rank, notes


def softmax_upper_bound(arch: Architecture, seed: int = 0, prime: int = DEFAULT_PRIME
                        ) -> tuple[int, list[str]]:
    """n_params - rank_p(kernel directions) at a random integer point: a proven upper bound
    on the generic rank (rank_p at a point <= rank over Q there <= generic rank of the tangents)."""
    p = check_word_prime(check_prime("prime", prime))
    return upper_bound_at(arch, random_weights_mod_p(arch, p, seeded_generator(seed, "certified-upper")), p)


# ---------------------------------------------------------------------------- lower bound

def arb_array(a) -> np.ndarray:
    """float64 array -> object array of exact arb balls."""
    return np.frompyfunc(flint.arb, 1, 1)(np.asarray(a, dtype=np.float64))


def left_multiply(M: flint.arb_mat, T: np.ndarray) -> np.ndarray:
    """M @ T[k] for every direction k of T (r, d, t), as one flint matrix product (d x r t)."""
    r, d, t = T.shape
    wide = flint.arb_mat(T.transpose(1, 0, 2).reshape(d, r * t).tolist())
    out = np.array((M * wide).entries(), dtype=object)
    return out.reshape(M.nrows(), r, t).transpose(1, 0, 2)


def _select_block(J: torch.Tensor, r: int) -> tuple[list[int], list[int], tuple]:
    """r rows and r columns of J whose block is likely well conditioned (float64 heuristic),
    and J's thin SVD (U, S, Vh): the verified projection and the float-rank check reuse it.

    LU with partial pivoting on the leading r right (left) singular vectors picks columns (rows).
    Only a choice: the proof is the ball determinant, whatever is chosen here.
    """
    U, S, Vh = torch.linalg.svd(J, full_matrices=False)
    _, _, perm_cols = _lu_pivots(Vh[:r].T)
    _, _, perm_rows = _lu_pivots(U[:, :r])
    return sorted(perm_rows[:r]), sorted(perm_cols[:r]), (U, S, Vh)


def _lu_pivots(A: torch.Tensor):
    P, L, Uf = torch.linalg.lu(A)  # A = P L U: column k of P marks the row of A pivoted k-th
    return L, Uf, [int(i) for i in P.argmax(dim=0)]


@dataclass
class BallRank:
    """A proven rank lower bound at one rational point."""

    proved: int          # rank proved (0 when nothing could be proved)
    target: int          # rank the float Jacobian suggested
    precision: int       # bits of the ball evaluation that settled it (or the last tried)
    determinant: str     # the ball of the block determinant
    seconds: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    engine: str = "ball"  # "ball" (arb determinant) or "verified" (float64, `verified`)
    # singular values of the row-scaled float Jacobian, from the block selection (None if none)
    singular_values: torch.Tensor | None = None


class UndecidedBall(ArithmeticError):
    """A ball evaluation met a branch it cannot decide (a relu input ball containing 0)."""


BlockEvaluator = Callable[[list, list], np.ndarray]


# A target rank r whose float sigma_r / sigma_1 is at most this (float64 round-off for a
# Jacobian of a few thousand rows) is not attempted at the first N: more inputs are tried first.
FLOAT_FLOOR = 1e-13

# Largest r * rows * cols (multiply-adds) for which a failed block is retried with the pivoted
# selection (`_pivoted_columns`, r rank-one updates of the scaled Jacobian): about 10 s of float64.
RESELECT_MAX_WORK = 2 * 10 ** 10


# Multiply-adds of the float selection's SVD (m n min(m, n)) from which `prove_rank` says that
# it runs (about a second of float64): below it the phase is quick and says nothing.
_SELECTION_NOTE_WORK = 10 ** 9
# Seconds between two progress lines of a long phase of a proof (the pivoting here, a ball
# Jacobian block in `ball_dual`: a deep network's block takes minutes).
PROGRESS_SECONDS = 5.0


def _pivoted_columns(A: torch.Tensor, r: int, progress: Progress | None = None,
                     what: str = "columns") -> list[int]:
    """r columns of A by greedy column pivoting (QR with column pivoting, Businger-Golub).

    A second float64 heuristic for `prove_rank`: at nearly degenerate points the singular-vector
    LU choice can pick a block that is exactly singular while another r x r block is not. A line
    to `progress` (naming `what` is chosen) when `PROGRESS_SECONDS` have passed since the last.
    """
    A = A.clone()
    chosen: list[int] = []
    t0 = last = time.perf_counter()
    for k in range(r):
        now = time.perf_counter()
        if progress is not None and k and now - last >= PROGRESS_SECONDS:
            last = now
            progress(f"column pivoting: {k}/{r} {what} chosen ({now - t0:.1f} s)")
        norms = A.norm(dim=0)
        if chosen:
            norms[chosen] = -1.0
        j = int(norms.argmax())
        chosen.append(j)
        q = A[:, j] / A[:, j].norm().clamp(min=1e-300)
        A -= torch.outer(q, q @ A)
    return sorted(chosen)


def prove_rank(J: torch.Tensor, target: int, evaluate: BlockEvaluator, *,
               precision: int = DEFAULT_PRECISION, progress: Progress | None = None,
               skip_hidden: bool = False) -> BallRank:
    """Prove rank >= `target` of the exact matrix that `J` approximates (float64).

    `evaluate(rows, cols)` returns that exact matrix's block as arb balls at the current
    precision (or raises `UndecidedBall`); the block is chosen from `J` (`_select_block`), and
    the precision doubles (up to MAX_PRECISION) while its determinant ball contains 0. If that
    block's ball still contains 0, a second block chosen by greedy column pivoting
    (`_pivoted_columns`) is tried the same way (where that costs at most RESELECT_MAX_WORK).
    Either way only a non-zero determinant ball proves anything.
    """
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    target = min(target, *J.shape)
    seconds = {"float selection": 0.0, "ball jacobian": 0.0, "ball determinant": 0.0}
    if target == 0:
        return BallRank(0, 0, precision, "1", seconds)
    scaled = J / J.norm(dim=1, keepdim=True).clamp(min=1e-300)
    slow = J.shape[0] * J.shape[1] * min(J.shape) >= _SELECTION_NOTE_WORK
    if slow:  # one LAPACK call: a line before and after it
        say(f"float selection of the {target} x {target} block: SVD of the {J.shape[0]} x "
            f"{J.shape[1]} Jacobian ...")
    rows, cols, svd = _select_block(scaled, target)
    sv = None if svd is None else svd[1]
    if skip_hidden and sv is not None and float(sv[target - 1]) <= FLOAT_FLOOR * float(sv[0]):
        # sigma_r at round-off: these inputs do not show rank r in float64, and a proof at r
        # would fail (floats) or take the balls' longest path; the caller retries with more
        # inputs first. Nothing is claimed from this.
        say(f"sigma_{target} / sigma_1 = {float(sv[target - 1]) / float(sv[0]):.1e} at float64 "
            "round-off on these inputs: not attempted")
        return BallRank(0, target, precision, "not attempted", seconds,
                        [f"not attempted at rank {target}: sigma_{target} / sigma_1 = "
                         f"{float(sv[target - 1]) / float(sv[0]):.1e} is at round-off on these "
                         "inputs"], singular_values=sv)
    seconds["float selection"] = time.perf_counter() - t0
    if slow:
        say(f"float selection: block chosen ({seconds['float selection']:.1f} s)")
    verified = getattr(evaluate, "verified", None)
    first_notes = []
    projected = getattr(evaluate, "projected", None)
    if projected is not None and svd is not None:
        # the best-conditioned r x r matrix J determines: W J V with W = U_r^T D (D the row
        # scaling) and V = V_r from the SVD, about diag(sigma_1..sigma_r); rank J >= rank W J V
        U, _, Vh = svd
        norms = J.norm(dim=1).clamp(min=1e-300)
        W = (U[:, :target] / norms[:, None]).T.contiguous()
        V = Vh[:target].T.contiguous()
        proof = _verified_attempt(lambda _r, _c: projected(W, V), rows, cols, target, seconds,
                                  say, "W J V", evaluate.nonsingular)
        if proof is not None and proof[0]:
            return BallRank(target, target, 53, f"||I - X W J V||_inf <= {proof[1]:.3g}", seconds,
                            [f"rank >= {target} proved by the verified float64 arithmetic: the "
                             f"{target} x {target} matrix W J V (W, V float matrices from the "
                             "float SVD, so rank J >= its rank) is nonsingular, ||I - X W J V||_inf "
                             f"<= {proof[1]:.3g} < 1 for every matrix in its enclosure "
                             "(docs/verified.md)"], engine="verified", singular_values=sv)
    if verified is not None:     # the float64 proof first; the balls where floats cannot separate
        proof = _verified_attempt(verified, rows, cols, target, seconds, say,
                                  nonsingular=evaluate.nonsingular)
        if proof is not None and proof[0]:
            return BallRank(target, target, 53, f"||I - X M||_inf <= {proof[1]:.3g}", seconds,
                            [f"rank >= {target} proved by the verified float64 arithmetic "
                             f"(an approximate inverse X of the {target} x {target} block's "
                             f"midpoint: ||I - X M||_inf <= {proof[1]:.3g} < 1 for every M in "
                             "its enclosure; docs/verified.md)"], engine="verified",
                            singular_values=sv)
        first_notes.append("the verified float64 arithmetic did not separate the block "
                           f"({'undecided' if proof is None else f'bound {proof[1]:.3g} >= 1'}); "
                           "the ball engine decides")

    def attempt(rows: list[int], cols: list[int]):
        bits, det, undecided = precision, None, None
        old = flint.ctx.prec
        try:
            while True:
                flint.ctx.prec = bits
                t1 = time.perf_counter()
                try:
                    block = evaluate(rows, cols)
                    undecided = None
                except UndecidedBall as exc:
                    undecided = str(exc)
                t2 = time.perf_counter()
                seconds["ball jacobian"] += t2 - t1
                if undecided is None:
                    det = flint.arb_mat(block.tolist()).det()
                    t3 = time.perf_counter()
                    seconds["ball determinant"] += t3 - t2
                    say(f"{target} x {target} block at {bits} bits: det = {det.str(5, radius=True)} "
                        f"({t3 - t1:.1f} s)")
                else:
                    say(f"{target} x {target} block at {bits} bits: {undecided}")
                if (undecided is None and not det.contains(0)) or bits >= MAX_PRECISION:
                    return bits, det, undecided
                bits *= 2
        finally:
            flint.ctx.prec = old

    bits, det, undecided = attempt(rows, cols)
    notes = []
    if undecided is None and det.contains(0) and target * J.numel() <= RESELECT_MAX_WORK:
        t1 = time.perf_counter()
        say(f"the {target} x {target} block's ball contains 0 at {bits} bits; choosing another "
            "block by column pivoting")
        cols2 = _pivoted_columns(scaled, target, say, "columns")
        rows2 = _pivoted_columns(scaled[:, cols2].T.contiguous(), target, say, "rows")
        seconds["float selection"] += time.perf_counter() - t1
        if (rows2, cols2) == (rows, cols):
            say(f"column pivoting chose the same block ({time.perf_counter() - t1:.1f} s)")
        else:
            say(f"trying the block chosen by column pivoting ({time.perf_counter() - t1:.1f} s)")
            first = det.str(5, radius=True)
            bits, det, undecided = attempt(rows2, cols2)
            if undecided is None and not det.contains(0):
                notes.append(f"the singular-vector block's determinant ball contained 0 ({first}) "
                             f"to {MAX_PRECISION} bits; a block chosen by column pivoting proved it")
    if undecided is not None:
        return BallRank(0, target, bits, "undecided", seconds,
                        first_notes + [f"{undecided} at {bits} bits: nothing proved at this point"],
                        singular_values=sv)
    proved = target if not det.contains(0) else 0
    if not proved:
        notes.append(f"the {target} x {target} block's determinant ball contains 0 at "
                     f"{bits} bits: nothing proved at this point")
    return BallRank(proved, target, bits, det.str(5, radius=True), seconds, first_notes + notes,
                    singular_values=sv)


def _singular_values(ball: BallRank, J: torch.Tensor) -> torch.Tensor:
    """The row-scaled J's singular values: the block selection's, else computed."""
    if ball.singular_values is not None:
        return ball.singular_values
    return torch.linalg.svdvals(J / J.norm(dim=1, keepdim=True).clamp(min=1e-300))


def _verified_attempt(verified, rows: list[int], cols: list[int], target: int, seconds: dict,
                      say: Progress, what: str = "block", nonsingular=None
                      ) -> tuple[bool, float] | None:
    """(proved, bound) of the verified float64 certificate on one block (`nonsingular`, the
    evaluator's `verified.verified_nonsingular`), or None when its enclosure could not be
    formed (`UndecidedBall`); its times go to `seconds`."""
    t1 = time.perf_counter()
    try:
        block = verified(rows, cols)
    except UndecidedBall as exc:
        seconds["verified jacobian"] = seconds.get("verified jacobian", 0.0) + time.perf_counter() - t1
        say(f"{target} x {target} {what} in verified float64: {exc}")
        return None
    t2 = time.perf_counter()
    proved, bound = nonsingular(block)
    t3 = time.perf_counter()
    seconds["verified jacobian"] = seconds.get("verified jacobian", 0.0) + t2 - t1
    seconds["verified certificate"] = seconds.get("verified certificate", 0.0) + t3 - t2
    say(f"{target} x {target} {what} in verified float64: ||I - X M||_inf <= {bound:.3g} "
        f"({'proved' if proved else 'not separated'}, {t3 - t1:.1f} s)")
    return proved, bound


def _partial_pivot_rows(A: torch.Tensor) -> list[int]:
    """The rows LU with partial pivoting (LAPACK getrf, `torch.linalg.lu_factor`) of the tall
    A (m x k, m >= k) takes as its k pivots, ascending: the rows of a likely well-conditioned
    k x k block when A has full column rank. Only a choice (no dense m x m permutation formed)."""
    _, pivots = torch.linalg.lu_factor(A)
    perm = list(range(A.shape[0]))
    for i, p in enumerate(pivots.tolist()):   # LAPACK's ipiv: row i swapped with row p - 1
        perm[i], perm[p - 1] = perm[p - 1], perm[i]
    return sorted(perm[:A.shape[1]])


def prove_rank_on_columns(enclose: Callable[[list], object], cols: list[int], nonsingular,
                          progress: Progress | None = None, what: str = "") -> BallRank | None:
    """Prove rank >= len(cols) from the verified float64 enclosure of the columns `cols` of
    the exact matrix on all its rows (`enclose(cols)`, an `verified.Interval` m x r), or None
    when that enclosure cannot be formed (`UndecidedBall`).

    No float Jacobian and no SVD: the r rows are those LU with partial pivoting takes on the
    row-scaled midpoint, and the r x r minor's enclosure (those rows of the computed one) goes
    to `nonsingular` (`verified.verified_nonsingular`). Soundness does not depend on the rows or
    the columns: any r x r minor of the exact matrix proved nonsingular gives rank >= r. A
    column set that cannot have rank r (a symmetry direction among them) only fails the proof.
    """
    say = progress or (lambda _m: None)
    r = len(cols)
    seconds = {"verified jacobian": 0.0, "row selection": 0.0, "verified certificate": 0.0}
    t0 = time.perf_counter()
    say(f"verified float64 enclosure of the Jacobian's {r} {what}columns on all rows ...")
    try:
        enc = enclose(cols)
    except UndecidedBall as exc:
        say(f"{r} {what}columns in verified float64: {exc}")
        return None
    t1 = time.perf_counter()
    seconds["verified jacobian"] = t1 - t0
    m = enc.m.shape[0]
    if m < r:
        return None
    say(f"{m} x {r} enclosure ({t1 - t0:.1f} s); choosing {r} rows by LU with partial pivoting")
    rows = _partial_pivot_rows(enc.m / enc.m.norm(dim=1, keepdim=True).clamp(min=1e-300))
    t2 = time.perf_counter()
    seconds["row selection"] = t2 - t1
    proved, bound = nonsingular(enc[torch.tensor(rows)])
    t3 = time.perf_counter()
    seconds["verified certificate"] = t3 - t2
    say(f"{r} x {r} minor in verified float64: ||I - X M||_inf <= {bound:.3g} "
        f"({'proved' if proved else 'not separated'}, rows {t2 - t1:.1f} s, certificate "
        f"{t3 - t2:.1f} s)")
    if not proved:
        return BallRank(0, r, 53, f"||I - X M||_inf <= {bound:.3g}", seconds,
                        [f"the {r} x {r} minor on the {what}columns in verified float64 was not "
                         f"separated (bound {bound:.3g} >= 1)"], engine="verified")
    return BallRank(r, r, 53, f"||I - X M||_inf <= {bound:.3g}", seconds,
                    [f"rank >= {r} proved by the verified float64 arithmetic: a {r} x {r} minor "
                     f"on the {what}columns (rows by LU with partial pivoting, no float SVD) is "
                     f"nonsingular, ||I - X M||_inf <= {bound:.3g} < 1 for every M in its "
                     "enclosure (docs/verified.md)"], engine="verified")


# Relative singular-value levels whose counts are tried, largest first, when the upper bound is
# not proved: on a slowly decaying spectrum the largest gap can sit far too early (measured: a
# layernorm block whose gap rule read 4 while about 47 singular values stand above round-off).
_FALLBACK_LEVELS = (1e-12, 1e-9, 1e-6)


def _fallback_ranks(sv: torch.Tensor, shape: tuple[int, int], upper: int) -> list[int]:
    """Ranks to try proving below `upper`, largest first: counts above a few relative levels and
    the gap rule's rank. Any of them is only a candidate: nothing is claimed unless proved."""
    candidates = {numerical_rank(sv, *shape).rank}
    top = float(sv[0]) if len(sv) else 0.0
    candidates |= {int((sv > level * top).sum()) for level in _FALLBACK_LEVELS}
    return sorted((r for r in candidates if 0 < r < upper), reverse=True)


def certify_rank(arch: Architecture, upper_bound: Callable[[int], tuple[int, list[str], dict]],
                 point: Callable[[int, int], tuple[torch.Tensor, BlockEvaluator]], *, seed: int,
                 samples: int | None, precision: int, prime: int, progress: Progress | None,
                 gauged: Callable[[int, int, int], BallRank | None] | None = None,
                 **fields) -> DimensionResult:
    """The ball lower bound at a rational point, set against a proven upper bound.

    `upper_bound(seed)` gives (n_params - rank_p(kernel directions), notes, result fields);
    `point(seed, N)` the float64 Jacobian at the rational point with N input samples and the
    evaluator of its exact blocks in ball arithmetic. The upper bound is the rank tried first
    (with twice the samples if that fails), then the float rank read by the gap rule. `fields`
    go to the result (formula, conjecture). `gauged(seed, N, upper)`, where given, is tried
    first at each N: a proof of rank >= upper without the float Jacobian (the paper's model:
    `prove_rank_on_columns` on a gauge's free columns, its own kernel check done), or None /
    not proved, and then the float Jacobian's path runs.
    """
    check_architecture(arch)
    seed = check_seed(seed)
    precision = check_int("precision", precision, minimum=16,
                          fix=f"Pass --precision {DEFAULT_PRECISION} (bits), or more.")
    if samples is not None:
        samples = check_int("samples", samples, minimum=1, fix="Pass --samples 1 or more.")
    say = progress or (lambda _m: None)
    t_start = time.perf_counter()
    upper, notes, more = upper_bound(seed)
    fields.update(more)
    t_upper = time.perf_counter() - t_start
    say(f"upper bound n_params - rank_p(kernel directions) = {upper} ({t_upper:.1f} s)")
    per_sample = arch.output_width * arch.tokens
    n = samples if samples is not None else max(1, math.ceil(ROW_FACTOR * upper / per_sample) + 1)
    if arch.n_sequences is not None and samples is None:
        # token ids: every id in the first samples (`tokens.covering_sequences`), at most V^t
        n = min(max(n, covering_count(arch)), arch.n_sequences)
    t_float = 0.0
    J, ball = None, None
    gauge_notes: list[str] = []
    gauge_seconds: dict[str, float] = {}
    if gauged is not None and arch.n_sequences is None:
        # Its rows are only chosen from, not decomposed: GAUGED_ROW_FACTOR rows per rank (the
        # enclosure and the LU cost in proportion), twice as many inputs if that fails.
        n_g = samples if samples is not None else max(
            1, math.ceil(GAUGED_ROW_FACTOR * upper / per_sample) + 1)
        for attempt in range(2):
            fast = gauged(seed, n_g, upper)
            if fast is None:
                break
            if fast.proved:
                ball, n = fast, n_g
                break
            gauge_notes += fast.notes
            for k, v in fast.seconds.items():
                gauge_seconds[k] = gauge_seconds.get(k, 0.0) + v
            if samples is not None or attempt == 1:
                say(f"the gauged proof did not prove rank {upper}; the float Jacobian's path decides")
                break
            n_g *= 2
            say(f"the gauged proof did not prove rank {upper}; retrying with N = {n_g} samples")
    for attempt in range(0 if ball is not None else 2):
        t0 = time.perf_counter()
        J, evaluate = point(seed, n)
        t_float += time.perf_counter() - t0
        # The upper bound is the only rank that can certify: try it first (with twice the
        # samples if that fails); then fall back to the float rank read by the gap rule.
        last = samples is not None or attempt == 1 or n == arch.n_sequences
        ball = prove_rank(J, upper, evaluate, precision=precision, progress=say,
                          skip_hidden=not last)
        if ball.proved or last:
            break
        n = n * 2 if arch.n_sequences is None else min(2 * n, arch.n_sequences)
        say(f"not proved at rank {upper}; retrying with N = {n} samples")
    if not ball.proved:
        sv = _singular_values(ball, J)
        for guess in _fallback_ranks(sv, J.shape, upper):
            say(f"falling back to the float rank {guess}")
            retry = prove_rank(J, guess, evaluate, precision=precision, progress=say)
            retry.notes = ball.notes + retry.notes
            retry.seconds = {k: v + retry.seconds.get(k, 0.0) for k, v in ball.seconds.items()}
            ball = retry
            if ball.proved:
                break
    lower = ball.proved
    ball.notes = gauge_notes + ball.notes
    if lower == upper and J is not None:
        # (the gauged proof checked its symmetry tangents against covectors g^T J instead:
        # with them in the kernel, rank J = rank J[:, free] <= |free| = upper)
        # Defence in depth: a float rank clearly above the proven upper bound means a kernel
        # direction of the bound is not one (a bug), and certifying would understate dim.
        sv = _singular_values(ball, J)
        check = numerical_rank(sv, *J.shape)
        if check.rank > upper and not check.is_ambiguous(MIN_GAP_DECADES):
            raise ComputationError(f"the float64 rank {check.rank} (gap {check.gap:.1f} decades) "
                                   f"exceeds the symmetry upper bound {upper}: a direction counted "
                                   "in the bound is not a symmetry (a bug; please report it)")
    certified = lower == upper
    notes = notes + ball.notes
    if certified:
        how = (f"a {lower} x {lower} matrix W J V (float W, V) or block of the Jacobian at a "
               f"rational point is nonsingular, {ball.determinant} (verified float64 arithmetic)"
               if ball.engine == "verified" else
               f"a {lower} x {lower} Jacobian block at a rational point has determinant "
               f"{ball.determinant} (ball arithmetic, {ball.precision} bits)")
        notes.append(f"certified: {how}, so dim >= {lower}; n_params - rank_p(kernel directions) "
                     f"= {upper}: a proof, no probability involved")
    else:
        notes.append(f"bounds do not meet: {lower} <= dim M <= {upper}")
    seconds = {"upper bound": t_upper, "float jacobian": t_float, **ball.seconds,
               "total": time.perf_counter() - t_start}
    for k, v in gauge_seconds.items():   # a gauged attempt that did not prove, then the float path
        seconds[k] = seconds.get(k, 0.0) + v
    seconds["total"] = seconds.pop("total")
    engine = ("lower bound proved by the verified float64 arithmetic" if ball.engine == "verified"
              else f"ball precision {ball.precision} bits")
    return DimensionResult(
        architecture=arch.to_dict(), n_params=arch.n_params, dimension=lower,
        method="certified", status="certified" if certified else "lower-bound",
        lower_bound=lower, upper_bound=upper, n_samples=n, seed=seed, prime=prime,
        seconds=seconds, notes=notes + [engine], **fields)
