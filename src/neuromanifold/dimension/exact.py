"""Exact (over F_p) and certified dimensions of lightning neuromanifolds (MATH.md sections 6, 7).

`exact_dim` draws W, the inputs X_1..X_N and cotangents uniformly from F_p, builds rows of S J
(J the Jacobian of W -> (phi_W(X_1), ..., phi_W(X_N))) by reverse mode in modular integer
arithmetic (`modular.py`), and takes their exact rank over F_p (`exact.py`). No floating point
is used on that path. With `certify=True` it also takes the exact rank of every known symmetry
tangent at the same point, giving an upper bound.
"""

from __future__ import annotations

import math
import time

import torch

from ..errors import ComputationError
from ..core.architecture import Architecture
from ..core.limits import check_dense_memory
from ..core.checks import bad_value, check_architecture, check_seed, check_int
from .result import DimensionResult, Progress
from .fp import DEFAULT_PRIME, check_prime, rank_mod_p
from ..core.formulas import effective_width, expected_dim
from .modular import (all_symmetry_tangents, check_word_prime, jacobian_rows_mod_p, matmul_mod,
                      random_residues, random_weights_mod_p, staircase_rank_mod_p)
from ..core.seeds import seeded_generator

# Bytes of int64 Jacobian rows (and their reverse-mode intermediates) built in one chunk.
_CHUNK_BYTES = 256 * 2 ** 20
# Rounds of growing N before giving up on the rank reaching the upper bound.
_MAX_ROUNDS = 6


# NOTE: [Schwartz-Zippel degree bound]
# Random variables: the entries of W, of X_1..X_N and of the cotangents G, all uniform in F_p.
# The layer outputs satisfy deg_W Z_i = 3 deg_W Z_{i-1} + 3 (Z_i = V Z Z^T Q^T K Z), so
# deg_W phi = e_l = (3^{l+1} - 3) / 2, and deg_X phi = 3^l. An entry of J = d phi / dW has total
# degree <= e_l - 1 + 3^l; an entry of a row g^T J one more: D = e_l + 3^l (l = 3: 66).
# An r x r minor of the stacked rows is a polynomial of degree <= r D in those variables. If
# some r x r minor is a non-zero polynomial over F_p (r = dim M, for this N and these rows per
# sample), Schwartz-Zippel gives P(it vanishes at the random point) <= r D / p, so
# P(exact rank < dim M) <= r D / p, evaluated with r = the upper bound (n_params without one).
# The rank is a lower bound regardless; a certified result (lower == upper) is a proof and
# carries no probability at all.

# NOTE: [dropping the columns the symmetries determine]
# Every tangent row T satisfies J T^T = 0. If T[:, Pi] has full row rank rank T (Pi = pivot
# columns of an echelon form of T), then for each row j of J, j_Pi = -j_free T_free^T T_Pi^{-T},
# so J = J[:, free] B for a fixed matrix B and rank J = rank J[:, free] exactly, with
# |free| = n_params - rank T = the upper bound. The exact rank of S J is therefore taken on those
# columns only: an (upper bound)-wide matrix instead of an n_params-wide one.

def _layer_boundaries(arch: Architecture) -> list[int]:
    """Column offsets where each layer's (Q_i, K_i, V_i) block starts, and n_params."""
    return [offset for name, _, offset in arch.param_layout() if name.startswith("Q_")] + [arch.n_params]


def degree_bound(arch: Architecture) -> int:
    """D, the total degree of one entry of S J in (W, X, G) (see the NOTE above)."""
    l = arch.n_layers
    return (3 ** (l + 1) - 3) // 2 + 3 ** l


def rows_per_sample(arch: Architecture) -> int:
    """Cotangents per input sample: about t^2 (+ t), the new directions a sample brings (MATH.md 7)."""
    return min(arch.widths[-1] * arch.tokens, arch.tokens ** 2 + arch.tokens)


def _sample_rows(arch: Architecture, weights, n_new: int, n_rows: int, p: int,
                 gen: torch.Generator) -> torch.Tensor:
    """Rows of S J for `n_new` fresh random samples, `n_rows` random cotangents each."""
    per_sample = n_rows * (arch.n_params + 6 * max(arch.widths) * arch.tokens * arch.n_layers) * 8
    chunk = max(1, _CHUNK_BYTES // per_sample)
    blocks = []
    for start in range(0, n_new, chunk):
        n = min(chunk, n_new - start)
        X = random_residues((n, arch.widths[0], arch.tokens), p, gen)
        G = random_residues((n, n_rows, arch.widths[-1], arch.tokens), p, gen)
        blocks.append(jacobian_rows_mod_p(weights, X, G, p))
    return torch.cat(blocks)


def exact_dim(arch: Architecture, *, certify: bool = True, samples: int | None = None, seed: int = 0,
              progress: Progress | None = None, prime: int = DEFAULT_PRIME,
              rows: int | None = None) -> DimensionResult:
    """Exact rank over F_p of S J at a random F_p point (a proven lower bound on dim M).

    Math: rank_p(S J(w)) <= rank J(generic) = dim M <= n_params - rank_p(T(w)), T the symmetry
    tangents (Eq. 9, Lemma 3.1, Eq. 13 and the hidden ones of `modular.hidden_symmetry_tangents`).
    Status `certified` when the two bounds meet (a proof); otherwise `lower-bound`, with
    P(lower < dim M) <= r D / p by Schwartz-Zippel (see the NOTE on the degree bound).
    N grows until the rank reaches the upper bound or stops changing; `samples` fixes N, `rows`
    the cotangents per sample (default about t^2 + t).
    """
    check_architecture(arch)
    if not arch.is_polynomial:
        raise bad_value("arch.attention", "'lightning' for an exact rank over F_p", arch.attention,
                        "Softmax networks are not polynomial; use method='numerical'.")
    seed = check_seed(seed)
    check_dense_memory(arch.n_params, "the exact dimension")
    p = check_word_prime(check_prime("prime", prime))
    if samples is not None:
        samples = check_int("samples", samples, minimum=1, fix="Pass --samples 1 or more.")
    n_rows = rows_per_sample(arch) if rows is None else check_int(
        "rows", rows, minimum=1, fix="Pass a positive number of cotangents per sample.")
    say = progress or (lambda _msg: None)
    t_start = time.perf_counter()
    t_jac = t_rank = 0.0
    gen = seeded_generator(seed, "exact")
    weights = random_weights_mod_p(arch, p, gen)
    notes: list[str] = []

    upper, free_columns = None, None
    if certify:
        t0 = time.perf_counter()
        tangents, _, skipped = all_symmetry_tangents(arch, weights, p)
        t1 = time.perf_counter()
        say(f"{tangents.shape[0]} symmetry tangents built mod p ({t1 - t0:.1f} s); exact rank ...")
        tangent_rank, pivots = staircase_rank_mod_p(tangents, _layer_boundaries(arch), p)
        t_jac += t1 - t0
        t_rank += time.perf_counter() - t1
        upper = arch.n_params - tangent_rank
        say(f"upper bound n_params - rank_p(tangents) = {arch.n_params} - {tangent_rank} = {upper} "
            f"({time.perf_counter() - t1:.1f} s)")
        # rank J = rank J[:, free] when J T^T = 0 and T[:, pivots] has full row rank (NOTE below).
        keep = torch.ones(arch.n_params, dtype=torch.bool)
        keep[pivots] = False
        free_columns = keep.nonzero().flatten()
        notes += [f"hidden symmetry block skipped (soundness check failed): {s}" for s in skipped]
    target = arch.n_params if upper is None else upper
    # Rows to aim for: the upper bound, or without one the larger closed form (only sizes N;
    # N keeps growing while the rank does, so a low guess costs time, never correctness).
    guess = target if upper is not None else min(target, max(expected_dim(arch).value,
                                                              effective_width(arch).value))

    if samples is not None:
        n_target = samples
    else:
        n_target = max(1, math.ceil((guess + max(8, 0.05 * guess)) / n_rows))
    blocks: list[torch.Tensor] = []
    n_done, rank, history, previous, reason = 0, 0, [], None, None
    for _round in range(_MAX_ROUNDS):
        t0 = time.perf_counter()
        new_rows = _sample_rows(arch, weights, n_target - n_done, n_rows, p, gen)
        if free_columns is not None and not blocks:
            # Every tangent must lie in ker J: check it on the first rows before relying on it.
            probe = new_rows[:64]
            if bool(matmul_mod(probe, tangents.T.contiguous(), p).any()):
                raise ComputationError("a symmetry tangent is not in the kernel of the exact Jacobian: "
                                   "the upper bound would be unsound (a bug; please report it).")
            del tangents
        blocks.append(new_rows if free_columns is None else new_rows[:, free_columns])
        n_done = n_target
        matrix = torch.cat(blocks) if len(blocks) > 1 else blocks[0]
        t1 = time.perf_counter()
        say(f"N = {n_done}: {matrix.shape[0]} x {matrix.shape[1]} rows of S J mod p "
            f"({t1 - t0:.1f} s); exact rank ...")
        rank = rank_mod_p(matrix.numpy(), p)
        del matrix
        t_jac += t1 - t0
        t_rank += time.perf_counter() - t1
        history.append([n_done, rank])
        say(f"N = {n_done}: exact rank over F_p {rank} ({time.perf_counter() - t1:.1f} s)")
        if upper is not None and rank >= upper:
            reason = "reached the symmetry upper bound"
            break
        if samples is not None:
            break
        if previous == rank:
            reason = "stable rank"
            break
        previous = rank
        n_target = n_done + max(2, math.ceil(0.25 * n_done),
                                math.ceil((max(guess, rank) - rank) / arch.tokens ** 2))

    certified = upper is not None and rank == upper
    # Schwartz-Zippel bounds P(rank of these rows < their generic rank); it says something about
    # dim M only once the rows saturate, which we can only claim when the rank stopped growing.
    prob = 0.0 if certified else (min(1.0, target * degree_bound(arch) / p)
                                  if reason == "stable rank" else None)
    if certified:
        notes.append(f"certified: exact rank over F_p {rank} = n_params - rank_p(symmetry "
                     f"tangents): a proof, no probability involved")
    else:
        if upper is not None:
            notes.append(f"bounds do not meet: {rank} <= dim M <= {upper}")
        if prob is None:
            notes.append(f"lower bound only: the rank was still growing or N = {n_done} was fixed, "
                         "so more samples may raise it; no probability is claimed")
        else:
            notes.append(f"lower bound: P(dim M > {rank}) <= {prob:.1e} (Schwartz-Zippel, degree "
                         f"{degree_bound(arch)} per entry, rank <= {target}), provided N = {n_done} "
                         f"samples x {n_rows} rows suffice (the rank stopped growing)")
    return DimensionResult(
        architecture=arch.to_dict(), n_params=arch.n_params, dimension=rank,
        method="certified" if certified else "exact",
        status="certified" if certified else "lower-bound", formula=expected_dim(arch),
        conjecture=effective_width(arch), lower_bound=rank, upper_bound=upper, n_samples=n_done,
        seed=seed, prime=p, failure_probability=prob,
        seconds={"jacobian": t_jac, "rank": t_rank, "total": time.perf_counter() - t_start},
        rank_history=history, notes=notes)
