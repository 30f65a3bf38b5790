"""Exact (over F_p) and certified dimensions of lightning neuromanifolds (docs/lightning_dimension.md).

`exact_dim` draws W, the inputs X_1..X_N and cotangents uniformly from F_p, builds rows of S J
(J the Jacobian of W -> (phi_W(X_1), ..., phi_W(X_N))) by reverse mode in modular integer
arithmetic (`modular.py`), and takes their exact rank over F_p (`exact.py`). No floating point
is used on that path. With `certify=True` it also takes the exact rank of every known symmetry
tangent at the same point, giving an upper bound.

Routes: the paper's model (one head, unfactored values, no residual, MLP or norm) takes the
reverse pass mod p with the gauge and the staircase rank above; every other polynomial network
(heads, value widths, residuals, square MLPs) takes the forward-mode duals of `fp_dual` with the
registry's tangents mod p (`_forward_dual_exact_dim`).

The paper's model runs on numpy int64 arrays when it is small (`use_numpy`): the same draws and
the same integers as on torch (`core.seeds.ResidueStream`), without importing torch, whose
import is most of a small answer's wall time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ComputationError
from ..core.architecture import Architecture, check_architecture
from ..core.checks import bad_value, check_seed, check_int, check_positive_float
from .growth import grow_samples
from .result import DimensionResult, Progress
from .fp import DEFAULT_PRIME, check_prime, rank_mod_p
from ..core.formulas import ambient_bound, block_formula, effective_width, expected_dim, general
from .modular import (all_symmetry_tangents, check_word_prime, jacobian_rows_mod_p, matmul_mod,
                      random_residues, random_weights_mod_p, staircase_rank_mod_p)
from ..core.seeds import seeded_generator, seeded_residues
from .memory import EXACT_CHUNK_BYTES as _CHUNK_BYTES  # int64 rows and reverse-mode intermediates
from .memory import exact_first_samples
from .plan import Plan, exact_plan
from .fp import pivot_columns_mod_p

if TYPE_CHECKING:
    import torch


# Measurements of the exact block rank before it stops (status `stopped`): each round adds half
# of N, and a generic rank is met within two or three.
_MAX_ROUNDS = 6

# The paper's model up to this many parameters takes its exact rank on numpy (no torch import);
# larger ones on torch, whose int64 products are 2-3x numpy's on 72-wide blocks (measured:
# (2000 x 24) @ (24 x 5000) in 0.05 s against 0.16 s) while small products are faster on numpy.
NUMPY_MAX_PARAMS = 4096

# Default cap on the bytes of Jacobian rows kept for the rank (int64 rows and their two flint
# copies): 72^4 / 24^3, t = 16 needs 4.5 GiB for its first pass.
DEFAULT_MAX_BYTES = 8 * 2 ** 30


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

def staircase_boundaries(arch: Architecture) -> list[int]:
    """Column offsets where each row of each weight matrix starts, and n_params.

    Blocks this narrow keep every elimination step of `staircase_rank_mod_p` small: a symmetry
    tangent touches few rows of a weight matrix (measured on 72^4 / 24^3: 95 s with one block
    per layer, 0.8 s with these, at a light load).
    """
    return [offset + k * shape[1] for _, shape, offset in arch.param_layout()
            for k in range(shape[0])] + [arch.n_params]


def degree_bound(arch: Architecture) -> int:
    """D, the total degree of one entry of S J in (W, X, G) (see the NOTE above)."""
    l = arch.n_layers
    return (3 ** (l + 1) - 3) // 2 + 3 ** l


# NOTE: [saturation in N]
# Fix W and the rows drawn so far, spanning U of rank r. If the rows of all samples (x, g) at this
# W span more than U, some (r + 1) x (r + 1) minor of [U; row(x, g)] is a non-zero polynomial in
# (x, g) of degree <= 3^l + 1 (deg_X phi = 3^l, one more for g), so a fresh uniform sample lies in
# U with probability <= (3^l + 1) / p, independently for each sample of a batch. A batch of b
# fresh samples adding no rank while U is not saturated thus has probability <= ((3^l + 1)/p)^b,
# and over R rounds at most R times that. Adding the probability that W itself is special
# (r D / p, the NOTE above) bounds P(exact rank < dim M) when the loop stops as saturated.

def saturation_probability(arch: Architecture, rank_bound: int, p: int, batch: int, rounds: int) -> float:
    """P(a saturated exact rank is below dim M) <= r D / p + R ((3^l + 1) / p)^b (NOTE above)."""
    miss = min(1.0, (3 ** arch.n_layers + 1) / p) ** max(batch, 1)
    return min(1.0, rank_bound * degree_bound(arch) / p + rounds * miss)


def use_numpy(arch: Architecture) -> bool:
    """True when the reverse F_p route of `arch` runs on numpy arrays (see NUMPY_MAX_PARAMS)."""
    return arch.n_params <= NUMPY_MAX_PARAMS


def rows_per_sample(arch: Architecture) -> int:
    """Cotangents per input sample: about t^2 (+ t), new directions per sample (docs/math/method.md)."""
    return min(arch.widths[-1] * arch.tokens, arch.tokens ** 2 + arch.tokens)


def _sample_rows(arch: Architecture, weights, n_new: int, n_rows: int, p: int,
                 gen: torch.Generator, columns: torch.Tensor | None = None,
                 check: Callable[[torch.Tensor], None] | None = None) -> torch.Tensor:
    """Rows of S J for `n_new` fresh random samples, `n_rows` random cotangents each.

    Built chunk by chunk on all n_params columns; only `columns` (all if None) of each chunk are
    kept, written into one preallocated (n_new * n_rows, len(columns)) array. `check` sees the
    first chunk's full rows.
    """
    per_sample = n_rows * (arch.n_params + 6 * max(arch.widths) * arch.tokens * arch.n_layers) * 8
    chunk = max(1, _CHUNK_BYTES // per_sample)
    width = arch.n_params if columns is None else len(columns)
    if isinstance(weights.V[0], np.ndarray):
        out = np.empty((n_new * n_rows, width), dtype=np.int64)
    else:
        import torch  # noqa: PLC0415

        out = torch.empty((n_new * n_rows, width), dtype=torch.int64)
    for start in range(0, n_new, chunk):
        n = min(chunk, n_new - start)
        X = random_residues((n, arch.widths[0], arch.tokens), p, gen)
        G = random_residues((n, n_rows, arch.widths[-1], arch.tokens), p, gen)
        rows = jacobian_rows_mod_p(weights, X, G, p)
        if check is not None:
            check(rows)
            check = None
        out[start * n_rows: (start + n) * n_rows] = rows if columns is None else rows[:, columns]
    return out


def _torch_cat(blocks: list) -> torch.Tensor:
    """torch.cat of torch row blocks (torch imported only on the torch route)."""
    import torch  # noqa: PLC0415

    return torch.cat(blocks)


def exact_dim(arch: Architecture, *, certify: bool = True, samples: int | None = None, seed: int = 0,
              progress: Progress | None = None, prime: int = DEFAULT_PRIME,
              rows: int | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
              max_seconds: float | None = None,
              max_memory: str | float | int | None = None,
              plan: Plan | None = None) -> DimensionResult:
    """Exact rank over F_p of S J at a random F_p point (a proven lower bound on dim M).

    Math: rank_p(S J(w)) <= rank J(generic) = dim M <= n_params - rank_p(T(w)), T the symmetry
    tangents (Eq. 9, Lemma 3.1, Eq. 13 and the hidden ones of `modular.hidden_symmetry_tangents`).
    Status `certified` when the two bounds meet (a proof); otherwise `lower-bound`, with
    P(lower < dim M) <= r D / p by Schwartz-Zippel (see the NOTE on the degree bound).
    N grows in batches (`growth.grow_samples`) until the rank reaches the upper bound
    (`certified`) or a batch of >= 2 fresh samples adds no rank (saturated: `lower-bound`, with
    the probability above plus the one of `saturation_probability`), or a cap is hit: `samples`
    fixes N, `max_bytes` caps the rows kept, `max_seconds` the time (status `stopped`, no
    probability claimed). `rows` is the number of cotangents per sample (default about t^2 + t).
    """
    check_architecture(arch)
    if not arch.is_polynomial:
        raise bad_value("arch", "a polynomial network (lightning attention, square or no MLP, no "
                        "norm) for an exact rank over F_p", str(arch), "Softmax networks are not "
                        "polynomial (nor are relu/gelu/tanh MLPs or norms); use "
                        "method='numerical' or 'certified'.")
    if plan is None:  # `dimension.api` hands over the plan it has checked
        plan = exact_plan(arch, certify, samples).check(max_memory)
    seed = check_seed(seed)
    p = check_word_prime(check_prime("prime", prime))
    if samples is not None:
        samples = check_int("samples", samples, minimum=1, fix="Pass --samples 1 or more.")
    if plan.route == "forward-dual":  # heads, values, residual, MLP (`fp_dual`)
        return _forward_dual_exact_dim(arch, certify=certify, samples=samples, seed=seed,
                                       progress=progress, prime=p)
    n_rows = rows_per_sample(arch) if rows is None else check_int(
        "rows", rows, minimum=1, fix="Pass a positive number of cotangents per sample.")
    max_bytes = check_int("max_bytes", max_bytes, minimum=1, fix="Pass a positive number of bytes.")
    if max_seconds is not None:
        max_seconds = check_positive_float("max_seconds", max_seconds)
    say = progress or (lambda _msg: None)
    t_start = time.perf_counter()
    t_jac = t_rank = 0.0
    # numpy or torch: the same draws (`ResidueStream`), so the same integers and the same answer
    gen = seeded_residues(seed, "exact") if use_numpy(arch) else seeded_generator(seed, "exact")
    weights = random_weights_mod_p(arch, p, gen)
    notes: list[str] = []

    upper, free_columns = None, None
    if certify:
        t0 = time.perf_counter()
        tangents, _, skipped = all_symmetry_tangents(arch, weights, p)
        t1 = time.perf_counter()
        say(f"{tangents.shape[0]} symmetry tangents built mod p ({t1 - t0:.1f} s); exact rank ...")
        tangent_rank, pivots = staircase_rank_mod_p(tangents, staircase_boundaries(arch), p)
        t_jac += t1 - t0
        t_rank += time.perf_counter() - t1
        upper = arch.n_params - tangent_rank
        say(f"upper bound n_params - rank_p(tangents) = {arch.n_params} - {tangent_rank} = {upper} "
            f"({time.perf_counter() - t1:.1f} s)")
        # rank J = rank J[:, free] when J T^T = 0 and T[:, pivots] has full row rank (NOTE below).
        keep = np.ones(arch.n_params, dtype=bool)
        keep[pivots] = False
        free_columns = np.flatnonzero(keep)
        if not isinstance(tangents, np.ndarray):
            import torch  # noqa: PLC0415

            free_columns = torch.from_numpy(free_columns)
        notes += [f"symmetry block skipped (soundness check failed): {s}" for s in skipped]
    target = arch.n_params if upper is None else upper
    # Rows to aim for: the upper bound, or without one the larger closed form (only sizes N;
    # N keeps growing while the rank does, so a low guess costs time, never correctness).
    guess = target if upper is not None else min(target, max(expected_dim(arch).value,
                                                              effective_width(arch).value))

    if samples is not None:
        n_first = samples
    else:
        n_first = max(1, math.ceil((guess + max(8, 0.05 * guess)) / n_rows))
    width = arch.n_params if free_columns is None else len(free_columns)
    bytes_per_sample = 3 * 8 * n_rows * width   # int64 rows, the flint matrix, the copy its rank works on
    n_first = min(n_first, max(1, max_bytes // bytes_per_sample))
    blocks: list[torch.Tensor] = []
    clock = {"jacobian": t_jac, "rank": t_rank}

    def check_kernel(rows: torch.Tensor) -> None:
        # Every tangent must lie in ker J: check it on the first rows before relying on it.
        nonlocal tangents
        if bool(matmul_mod(tangents, rows[:64].T, p).any()):
            raise ComputationError("a symmetry tangent is not in the kernel of the exact Jacobian: "
                                   "the upper bound would be unsound (a bug; please report it).")
        tangents = None   # 2.5 GB at 72^4 / 24^3: freed before the other rows are built

    def add(n_done: int, n_target: int) -> None:
        t0 = time.perf_counter()
        blocks.append(_sample_rows(arch, weights, n_target - n_done, n_rows, p, gen, free_columns,
                                   check_kernel if free_columns is not None and not blocks else None))
        clock["jacobian"] += time.perf_counter() - t0
        say(f"N = {n_target}: {sum(b.shape[0] for b in blocks)} x {width} rows of S J mod p "
            f"({time.perf_counter() - t0:.1f} s)")

    def measure() -> int:
        t1 = time.perf_counter()
        if len(blocks) > 1:   # one copy of the rows, not the blocks and their union
            blocks[:] = [np.concatenate(blocks) if isinstance(blocks[0], np.ndarray)
                         else _torch_cat(blocks)]
        rank = rank_mod_p(np.asarray(blocks[0]), p, say)
        clock["rank"] += time.perf_counter() - t1
        say(f"exact rank over F_p {rank} ({time.perf_counter() - t1:.1f} s)")
        return rank

    def next_target(n_done: int, rank: int) -> int:
        return n_done + max(2, math.ceil(0.25 * n_done),
                            math.ceil((max(guess, rank) - rank) / arch.tokens ** 2))

    grown = grow_samples(n_first, add, measure, upper=upper, fixed=samples is not None,
                         next_target=next_target, max_bytes=max_bytes,
                         bytes_per_sample=bytes_per_sample, max_seconds=max_seconds, say=say)
    t_jac, t_rank = clock["jacobian"], clock["rank"]
    rank, n_done, history = grown.rank, grown.n_done, grown.history
    certified = upper is not None and rank == upper
    # Schwartz-Zippel bounds P(rank of these rows < their generic rank) and, once a batch of
    # fresh samples added nothing, P(that batch missed a direction); see saturation_probability.
    saturated = grown.reason == "saturated"
    prob = 0.0 if certified else (saturation_probability(arch, target, p, grown.last_batch,
                                                         grown.rounds + 1) if saturated else None)
    if certified:
        notes.append(f"certified: exact rank over F_p {rank} = n_params - rank_p(symmetry "
                     f"tangents): a proof, no probability involved")
    else:
        if upper is not None:
            notes.append(f"bounds do not meet: {rank} <= dim M <= {upper}")
        if prob is None:
            notes.append(f"stopped before saturation ({grown.detail}): the rank is a lower bound "
                         "and more samples may raise it; no probability is claimed")
        else:
            notes.append(f"lower bound, saturated ({grown.detail}): P(dim M > {rank}) <= "
                         f"{prob:.1e} (Schwartz-Zippel: degree {degree_bound(arch)} per entry in "
                         f"(W, X, G), rank <= {target}; a fresh sample misses a missing direction "
                         f"with probability <= {3 ** arch.n_layers + 1}/p)")
    status = "certified" if certified else ("lower-bound" if saturated else "stopped")
    return DimensionResult(
        architecture=arch.to_dict(), n_params=arch.n_params, dimension=rank,
        method="certified" if certified else "exact",
        status=status, formula=expected_dim(arch),
        conjecture=effective_width(arch), general=general(arch), lower_bound=rank, upper_bound=upper,
        n_samples=n_done,
        seed=seed, prime=p, failure_probability=prob,
        seconds={"jacobian": t_jac, "rank": t_rank, "total": time.perf_counter() - t_start},
        rank_history=history, notes=notes)


def _forward_dual_exact_dim(arch: Architecture, *, certify: bool = True,
                            samples: int | None = None, seed: int = 0,
                            progress: Progress | None = None,
                            prime: int = DEFAULT_PRIME) -> DimensionResult:
    """`exact_dim`'s route for networks beyond the paper's model (heads, values, residual, MLP):
    the exact rank over F_p of the Jacobian from forward-mode duals (`fp_dual`) at a random
    point; with `certify`, the registry's and the ambient upper bounds, `certified` when one of
    them meets it.

    N grows by half (`growth.grow_samples`) until the rank meets the upper bound (`certified`)
    or a batch adds no rank (`lower-bound`, with a Schwartz-Zippel probability); N fixed by
    `samples`, or `_MAX_ROUNDS` measurements, end it as `stopped` (a lower bound, no probability).
    Its arguments come checked from `exact_dim`.
    """
    import torch  # noqa: PLC0415

    from ..core.tokens import input_stream  # noqa: PLC0415
    from ..symmetries.registry import tangent_rows  # noqa: PLC0415
    from .fp_dual import degree_bound as dual_degree_bound  # noqa: PLC0415
    from .fp_dual import family_ranks_mod_p, fp_ops, jacobian_mod_p, random_blocks_mod_p  # noqa: PLC0415

    p = prime
    say = progress or (lambda _msg: None)
    t_start = time.perf_counter()
    gen = seeded_generator(seed, "exact")
    blocks = random_blocks_mod_p(arch, p, gen)
    notes: list[str] = []
    upper = symmetry_upper = families = None
    free = None
    t_sym = 0.0
    if certify:
        t0 = time.perf_counter()
        tangents, counts = tangent_rows(arch, blocks, fp_ops(p))
        tangents = tangents.remainder(p)
        families = family_ranks_mod_p(tangents, counts, p)
        pivots = pivot_columns_mod_p(tangents.numpy(), p) if tangents.shape[0] else []
        symmetry_upper = arch.n_params - len(pivots)
        keep = torch.ones(arch.n_params, dtype=torch.bool)
        keep[pivots] = False
        free = keep.nonzero().flatten()
        t_sym = time.perf_counter() - t0
        say(f"upper bound n_params - rank_p(tangents) = {symmetry_upper} ({t_sym:.1f} s)")
    ambient = ambient_bound(arch)
    bounds = [b for b in (symmetry_upper, ambient if certify else None) if b is not None]
    upper = min(bounds) if bounds else None
    target = arch.n_params if upper is None else upper
    # every token id in the first samples, or every sequence where they are few
    n_target = exact_first_samples(arch, target, samples)
    tokens = None
    if arch.vocab is not None:  # token ids: distinct one-hot sequences, at most V^t of them
        draw = input_stream(arch, gen, torch.int64)
        tokens = draw.tokens
        if samples is not None and samples > arch.n_sequences:
            raise bad_value("samples", f"at most V^t = {arch.n_sequences} for {arch}", samples,
                            f"Pass --samples {arch.n_sequences} or fewer, or leave it out.")
    matrices: list[torch.Tensor] = []
    clock = {"jacobian": 0.0, "rank": 0.0, "n": 0}

    def add(n_done: int, n_target: int) -> None:
        t0 = time.perf_counter()
        X = (random_residues((n_target - n_done, arch.widths[0], arch.tokens), p, gen)
             if tokens is None else draw(n_target - n_done))
        J = jacobian_mod_p(arch, blocks, X, p)
        if certify and not matrices and tangents.shape[0]:
            # Every tangent must lie in ker J before its columns are dropped (NOTE in exact.py).
            if bool(matmul_mod(J[:64], tangents.T.contiguous(), p).any()):
                raise ComputationError("a symmetry tangent is not in the kernel of the exact Jacobian: "
                                       "the upper bound would be unsound (a bug; please report it).")
        matrices.append(J if free is None else J[:, free])
        clock["jacobian"] += time.perf_counter() - t0
        clock["n"] = n_target

    def measure() -> int:
        t1 = time.perf_counter()
        matrix = torch.cat(matrices)
        rank = rank_mod_p(matrix.numpy(), p)
        clock["rank"] += time.perf_counter() - t1
        say(f"N = {clock['n']}: exact rank over F_p {rank} ({matrix.shape[0]} x {matrix.shape[1]})")
        return rank

    grown = grow_samples(n_target, add, measure, upper=upper, fixed=samples is not None,
                         next_target=lambda n_done, _rank: n_done + max(2, math.ceil(0.5 * n_done)),
                         max_rounds=_MAX_ROUNDS, finite=arch.n_sequences, say=say)
    rank, n_done, history = grown.rank, grown.n_done, grown.history
    t_jac, t_rank = clock["jacobian"], clock["rank"]
    certified = upper is not None and rank == upper
    # With token ids a batch of fresh sequences adding nothing proves no saturation (they are not
    # uniform over F_p); only every sequence used leaves W as the one random variable.
    saturated = (grown.reason == "saturated" and tokens is None) or grown.reason == "exhausted"
    prob = 0.0 if certified else (min(1.0, target * dual_degree_bound(arch) / p) if saturated else None)
    if tokens is not None:
        notes.append(tokens.note())
    if certify:
        notes.append(f"upper bounds: symmetries {symmetry_upper}"
                     + (f", ambient {ambient}" if ambient is not None else ", ambient: none known"))
    if certified:
        notes.append(f"certified: exact rank over F_p {rank} meets the upper bound: a proof")
    elif upper is not None:
        notes.append(f"bounds do not meet: {rank} <= dim M <= {upper}")
    if not certified:
        notes.append(f"stopped before saturation ({grown.detail}): the rank is a lower bound "
                     "and more samples may raise it; no probability is claimed" if prob is None else
                     f"lower bound: P(dim M > {rank}) <= {prob:.1e} (Schwartz-Zippel, degree "
                     f"{dual_degree_bound(arch)} per entry), provided the rank stopped growing")
    # As `exact.exact_dim`: a proof, a saturated lower bound, or stopped (N fixed or the round cap).
    status = "certified" if certified else ("lower-bound" if saturated else "stopped")
    formula = block_formula(arch)
    return DimensionResult(
        architecture=arch.to_dict(), n_params=arch.n_params, dimension=rank,
        method="certified" if certified else "exact", status=status, formula=formula,
        conjecture=formula,
        lower_bound=rank, upper_bound=upper, n_samples=n_done, seed=seed, prime=p,
        failure_probability=prob, seconds={"symmetries": t_sym, "jacobian": t_jac, "rank": t_rank,
                                           "total": time.perf_counter() - t_start},
        rank_history=history, notes=notes, symmetries=families)
