"""Certified ranks of softmax networks: a ball-arithmetic lower bound and an F_p upper bound.

Softmax networks are not polynomial, so there is no rank over F_p of their Jacobian. Instead
(see docs/certified_softmax.md for the full argument):

- Lower bound. At a *rational* point (dyadic weights W and inputs X_1..X_N, exactly
  representable in float64), a float64 Jacobian picks r columns and r rows (LU with partial
  pivoting on the leading singular vectors); only that r x r block is then evaluated in ball
  arithmetic (python-flint `arb`, forward mode with the explicit derivative of softmax) and its
  determinant is shown to be non-zero (a ball that excludes 0). Then rank J(W, X) >= r, and the
  rank at any point is at most the generic rank, which is the dimension: dim M >= r.
- Upper bound. n_params minus the rank over F_p of every known kernel direction at a random
  integer point: GL(a_i) on (Q_i, K_i), Eq. 9 between layers, the directions an earlier
  narrower layer hides (`modular.hidden_symmetry_tangents`) and, for t = 1 (softmax of a single
  logit is 1), every Q_i and K_i entry. rank_p <= rank over Q <= generic rank of the tangents,
  so the bound stays sound.

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
from ..core.formulas import effective_width, expected_dim
from ..core.parameters import LayerWeights, flatten, random_weights, score_factor
from ..core.seeds import seeded_generator
from ..symmetries.paper import symmetry_tangents
from .exact import staircase_boundaries
from .fp import DEFAULT_PRIME, check_prime
from .jacobians import jacobian
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


_EXP = np.frompyfunc(lambda x: x.exp(), 1, 1)


def _left_multiply(M: flint.arb_mat, T: np.ndarray) -> np.ndarray:
    """M @ T[k] for every direction k of T (r, d, t), as one flint matrix product (d x r t)."""
    r, d, t = T.shape
    wide = flint.arb_mat(T.transpose(1, 0, 2).reshape(d, r * t).tolist())
    out = np.array((M * wide).entries(), dtype=object)
    return out.reshape(M.nrows(), r, t).transpose(1, 0, 2)


# Seconds between two progress lines of `ball_jacobian_block` (a deep network's block takes
# minutes; its samples a fraction of a second each).
_PROGRESS_SECONDS = 5.0


def ball_jacobian_block(arch: Architecture, weights: LayerWeights, X: torch.Tensor,
                        rows: list[int], cols: list[int],
                        progress: Progress | None = None) -> np.ndarray:
    """J[rows, cols] of W -> (phi_W(X_n))_n at (weights, X), in arb at the current precision.

    Forward mode: each chosen column is a unit parameter direction; the tangent of every layer
    state is propagated with d softmax(L)_{ji} = S_ji (dL_ji - sum_k S_ki dL_ki), columns i
    (lightning: S = L, dS = dL).
    Rows are ordered (n, k, i) as in `jacobians.jacobian`. A line to `progress` before a sample
    when `_PROGRESS_SECONDS` have passed since the last one (deep networks take minutes).
    """
    layout = arch.param_layout()
    owner = []  # column -> (layer, block, r, s)
    for c in cols:
        for name, shape, offset in layout:
            if offset <= c < offset + shape[0] * shape[1]:
                r, s = divmod(c - offset, shape[1])
                owner.append((int(name[2:]), name[0], r, s))
                break
    per_sample = arch.widths[-1] * arch.tokens
    Qs = [arb_array(q.numpy()) for q in weights.Q]
    Ks = [arb_array(k.numpy()) for k in weights.K]
    Vs = [arb_array(v.numpy()) for v in weights.V]
    Qm, Km, Vm = ([flint.arb_mat(m.tolist()) for m in group] for group in (Qs, Ks, Vs))
    inv_tau = 1 / flint.arb(float(arch.temperature))
    softmax = arch.attention == "softmax"
    n_dir = len(cols)
    block = np.empty((len(rows), n_dir), dtype=object)
    by_sample: dict[int, list[tuple[int, int]]] = {}
    for out_row, row in enumerate(rows):
        n, rest = divmod(row, per_sample)
        by_sample.setdefault(n, []).append((out_row, rest))
    t0 = last = time.perf_counter()
    for done, (n, wanted) in enumerate(by_sample.items(), start=1):
        now = time.perf_counter()
        if progress is not None and done > 1 and now - last >= _PROGRESS_SECONDS:
            last = now
            progress(f"ball Jacobian block: sample {done - 1}/{len(by_sample)} ({now - t0:.1f} s)")
        Z = arb_array(X[n].numpy())
        dZ = np.zeros((n_dir,) + Z.shape, dtype=object)
        for layer, (Q, K, V) in enumerate(zip(Qs, Ks, Vs), start=1):
            U, W, Y = Q @ Z, K @ Z, V @ Z
            if layer == 1:  # the input X does not move
                dU, dW, dY = (np.zeros((n_dir, m.shape[0], Z.shape[1]), dtype=object)
                              for m in (Q, K, V))
            else:
                dU, dW, dY = (_left_multiply(m, dZ) for m in (Qm[layer - 1], Km[layer - 1], Vm[layer - 1]))
            for k, (lay, name, r, s) in enumerate(owner):
                if lay == layer:
                    {"Q": dU, "K": dW, "V": dY}[name][k, r, :] += Z[s, :]
            dL = np.matmul(dU.transpose(0, 2, 1), W) + np.matmul(U.T, dW)
            if softmax:
                E = _EXP((U.T @ W) * inv_tau)
                S = E / E.sum(axis=0)
                dL = dL * inv_tau
                dS = S * (dL - (S * dL).sum(axis=1, keepdims=True))
            else:  # lightning: the scores are the logits themselves
                S, dS = U.T @ W, dL
            Z, dZ = Y @ S, np.matmul(dY, S) + np.matmul(Y, dS)
        flat = dZ.reshape(n_dir, -1)
        for out_row, rest in wanted:
            block[out_row] = flat[:, rest]
    return block


def _select_block(J: torch.Tensor, r: int) -> tuple[list[int], list[int]]:
    """r rows and r columns of J whose block is likely well conditioned (float64 heuristic).

    LU with partial pivoting on the leading r right (left) singular vectors picks columns (rows).
    Only a choice: the proof is the ball determinant, whatever is chosen here.
    """
    U, _, Vh = torch.linalg.svd(J, full_matrices=False)
    _, _, perm_cols = _lu_pivots(Vh[:r].T)
    _, _, perm_rows = _lu_pivots(U[:, :r])
    return sorted(perm_rows[:r]), sorted(perm_cols[:r])


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


class UndecidedBall(ArithmeticError):
    """A ball evaluation met a branch it cannot decide (a relu input ball containing 0)."""


BlockEvaluator = Callable[[list, list], np.ndarray]


def prove_rank_at(arch: Architecture, weights: LayerWeights, X: torch.Tensor, target: int, *,
                  precision: int = DEFAULT_PRECISION, J: torch.Tensor | None = None,
                  progress: Progress | None = None) -> BallRank:
    """Prove rank J(weights, X) >= `target` by a non-zero ball determinant of an r x r block.

    `weights` and `X` are float64 and taken as the exact rationals they store. The precision
    doubles (up to MAX_PRECISION) while the determinant ball contains 0.
    """
    if J is None:
        J = jacobian(arch, flatten(weights), X)
    return prove_rank(J, target,
                      lambda rows, cols: ball_jacobian_block(arch, weights, X, rows, cols, progress),
                      precision=precision, progress=progress)


# Largest r * rows * cols (multiply-adds) for which a failed block is retried with the pivoted
# selection (`_pivoted_columns`, r rank-one updates of the scaled Jacobian): about 10 s of float64.
RESELECT_MAX_WORK = 2 * 10 ** 10


# Multiply-adds of the float selection's SVD (m n min(m, n)) from which `prove_rank` says that
# it runs (about a second of float64): below it the phase is quick and says nothing.
_SELECTION_NOTE_WORK = 10 ** 9


def _pivoted_columns(A: torch.Tensor, r: int, progress: Progress | None = None,
                     what: str = "columns") -> list[int]:
    """r columns of A by greedy column pivoting (QR with column pivoting, Businger-Golub).

    A second float64 heuristic for `prove_rank`: at nearly degenerate points the singular-vector
    LU choice can pick a block that is exactly singular while another r x r block is not. A line
    to `progress` (naming `what` is chosen) when `_PROGRESS_SECONDS` have passed since the last.
    """
    A = A.clone()
    chosen: list[int] = []
    t0 = last = time.perf_counter()
    for k in range(r):
        now = time.perf_counter()
        if progress is not None and k and now - last >= _PROGRESS_SECONDS:
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
               precision: int = DEFAULT_PRECISION, progress: Progress | None = None) -> BallRank:
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
    rows, cols = _select_block(scaled, target)
    seconds["float selection"] = time.perf_counter() - t0
    if slow:
        say(f"float selection: block chosen ({seconds['float selection']:.1f} s)")

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
                        [f"{undecided} at {bits} bits: nothing proved at this point"])
    proved = target if not det.contains(0) else 0
    if not proved:
        notes.append(f"the {target} x {target} block's determinant ball contains 0 at "
                     f"{bits} bits: nothing proved at this point")
    return BallRank(proved, target, bits, det.str(5, radius=True), seconds, notes)


def rational_point(arch: Architecture, seed: int, n_samples: int
                   ) -> tuple[LayerWeights, torch.Tensor]:
    """Seeded weights and inputs rounded to multiples of 2^-DYADIC_BITS (exact rationals); Q_i
    and K_i are rounded before their `score_factor` c is applied (exactly: c is a power of two),
    so that a small temperature's small Q_i, K_i are not rounded to zero."""
    w = random_weights(arch, seed)
    c = score_factor(arch)
    weights = LayerWeights(tuple(to_dyadic(t / c) * c for t in w.Q), tuple(to_dyadic(t / c) * c for t in w.K),
                           tuple(to_dyadic(t) for t in w.V))
    gen = seeded_generator(seed, "certified-inputs")
    X = to_dyadic(torch.randn((n_samples, arch.widths[0], arch.tokens), generator=gen,
                            dtype=torch.float64))
    return weights, X


def certified_softmax_dim(arch: Architecture, *, seed: int = 0, samples: int | None = None,
                          precision: int = DEFAULT_PRECISION, prime: int = DEFAULT_PRIME,
                          progress: Progress | None = None) -> DimensionResult:
    """Certified dimension of a softmax network (see the module docstring).

    Status `certified` when the ball-arithmetic lower bound meets the F_p upper bound (a proof,
    no probability); otherwise `lower-bound` with both bounds.
    """
    def upper_bound(seed: int):
        upper, notes = softmax_upper_bound(arch, seed, prime)
        return upper, notes, {}

    def point(seed: int, n: int):
        weights, X = rational_point(arch, seed, n)
        return (jacobian(arch, flatten(weights), X, progress),
                lambda rows, cols: ball_jacobian_block(arch, weights, X, rows, cols, progress))

    return certify_rank(arch, upper_bound, point, seed=seed, samples=samples, precision=precision,
                        prime=prime, progress=progress, formula=expected_dim(arch),
                        conjecture=effective_width(arch))


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
                 **fields) -> DimensionResult:
    """The ball lower bound at a rational point, set against a proven upper bound.

    `upper_bound(seed)` gives (n_params - rank_p(kernel directions), notes, result fields);
    `point(seed, N)` the float64 Jacobian at the rational point with N input samples and the
    evaluator of its exact blocks in ball arithmetic. The upper bound is the rank tried first
    (with twice the samples if that fails), then the float rank read by the gap rule. `fields`
    go to the result (formula, conjecture).
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
    per_sample = arch.widths[-1] * arch.tokens
    n = samples if samples is not None else max(1, math.ceil(ROW_FACTOR * upper / per_sample) + 1)
    t_float = 0.0
    for attempt in range(2):
        t0 = time.perf_counter()
        J, evaluate = point(seed, n)
        t_float += time.perf_counter() - t0
        # The upper bound is the only rank that can certify: try it first (with twice the
        # samples if that fails); then fall back to the float rank read by the gap rule.
        ball = prove_rank(J, upper, evaluate, precision=precision, progress=say)
        if ball.proved or samples is not None or attempt == 1:
            break
        n *= 2
        say(f"not proved at rank {upper}; retrying with N = {n} samples")
    if not ball.proved:
        sv = torch.linalg.svdvals(J / J.norm(dim=1, keepdim=True).clamp(min=1e-300))
        for guess in _fallback_ranks(sv, J.shape, upper):
            say(f"falling back to the float rank {guess}")
            retry = prove_rank(J, guess, evaluate, precision=precision, progress=say)
            retry.notes = ball.notes + retry.notes
            retry.seconds = {k: v + retry.seconds.get(k, 0.0) for k, v in ball.seconds.items()}
            ball = retry
            if ball.proved:
                break
    lower = ball.proved
    if lower == upper:
        # Defence in depth: a float rank clearly above the proven upper bound means a kernel
        # direction of the bound is not one (a bug), and certifying would understate dim.
        sv = torch.linalg.svdvals(J / J.norm(dim=1, keepdim=True).clamp(min=1e-300))
        check = numerical_rank(sv, *J.shape)
        if check.rank > upper and not check.is_ambiguous(MIN_GAP_DECADES):
            raise ComputationError(f"the float64 rank {check.rank} (gap {check.gap:.1f} decades) "
                                   f"exceeds the symmetry upper bound {upper}: a direction counted "
                                   "in the bound is not a symmetry (a bug; please report it)")
    certified = lower == upper
    notes = notes + ball.notes
    if certified:
        notes.append(f"certified: a {lower} x {lower} Jacobian block at a rational point has "
                     f"determinant {ball.determinant} (ball arithmetic, {ball.precision} bits), "
                     f"so dim >= {lower}; n_params - rank_p(kernel directions) = {upper}: "
                     "a proof, no probability involved")
    else:
        notes.append(f"bounds do not meet: {lower} <= dim M <= {upper}")
    seconds = {"upper bound": t_upper, "float jacobian": t_float, **ball.seconds,
               "total": time.perf_counter() - t_start}
    return DimensionResult(
        architecture=arch.to_dict(), n_params=arch.n_params, dimension=lower,
        method="certified", status="certified" if certified else "lower-bound",
        lower_bound=lower, upper_bound=upper, n_samples=n, seed=seed, prime=prime,
        seconds=seconds, notes=notes + [f"ball precision {ball.precision} bits"], **fields)
