"""Numerical dimension: the float64 Jacobian rank at a random point, read by the gap rule.

See docs/math for why the generic Jacobian rank is the dimension, and `dimension.rank` for the
rule that decides a floating-point rank.
"""

from __future__ import annotations

import math
import time
import warnings

import torch

from ..core.architecture import Architecture
from ..core.limits import check_dense_memory
from ..core.checks import bad_value, check_architecture, check_seed, check_choice, check_int
from ..core.formulas import effective_width, expected_dim
from ..core.parameters import flatten, random_weights
from ..core.seeds import seeded_generator
from ..core.symmetries import symmetry_tangents
from .jacobians import KernelSplit, jacobian
from .rank import MIN_GAP_DECADES, numerical_rank, rank_rule, unit_scaled
from .result import AmbiguousRankWarning, DimensionResult, Progress

DEFAULT_MIN_GAP = MIN_GAP_DECADES
# Bytes of Jacobian rows computed at once.
_ROW_BLOCK_BYTES = 256 * 2 ** 20
# Bytes of Jacobian rows kept whole; past this they are folded into a triangular factor R with
# R^T R = J^T J (same singular values), which costs one extra QR.
_KEEP_ROWS_BYTES = 3 * 2 ** 30
# Largest ||J Q1|| / ||J|| (Jacobian on the symmetry tangents) accepted as round-off.
_MAX_LEAK = 1e-9


def resolve_device(device: str) -> torch.device:
    """`cpu`, `cuda` (error if torch sees no GPU) or `auto` (cuda when available)."""
    device = check_choice("device", device, ("cpu", "cuda", "auto"))
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise bad_value("device", "a device torch can see", "cuda",
                        "No CUDA GPU is visible to torch here; use --device cpu.")
    return torch.device(device)


def _symmetry_split(arch: Architecture, weights) -> KernelSplit:
    """The split R^P = span(symmetry tangents) + complement at `weights` (float)."""
    tangents, _ = symmetry_tangents(arch, weights)
    return KernelSplit.from_tangents(tangents)


def initial_samples(arch: Architecture, upper_bound: int) -> int:
    """A first N whose N t d_l rows comfortably exceed the symmetry upper bound."""
    rows_per_sample = arch.tokens * arch.widths[-1]
    return max(2, math.ceil(2 * upper_bound / rows_per_sample) + 1)


def min_samples_required(arch: Architecture) -> int:
    """Smallest N with N t d_l >= n_params, so that the Jacobian can reach the parameter count."""
    return math.ceil(arch.n_params / (arch.tokens * arch.widths[-1]))


def numerical_dim(arch: Architecture, *, samples: int | None = None, seed: int = 0,
                  device: str = "cpu", min_gap: float = DEFAULT_MIN_GAP,
                  min_samples: int | None = None, max_samples: int | None = None,
                  progress: Progress | None = None) -> DimensionResult:
    """Numerical dimension: rank of the float64 Jacobian of W -> (phi_W(X_1..X_N)) at random W.

    Math: dim M = rank dPhi_W for generic W and N large enough (MATH.md section 6).
    N is grown (x1.5) until the rank stops changing or meets the symmetry upper bound, unless
    `samples` fixes it. Rank rule: largest gap in the singular values; a gap below `min_gap`
    decades, a competing gap, or an unverified saturation gives status `ambiguous` and an
    `AmbiguousRankWarning`. Numerical: not a proof.
    """
    check_architecture(arch)
    seed = check_seed(seed)
    check_dense_memory(arch.n_params, "the numerical dimension")
    floor = min_samples_required(arch)
    if samples is not None:
        samples = check_int("samples", samples, minimum=1, fix=f"Pass --samples {floor} or more.")
        if samples < floor:
            raise bad_value(
                "samples", f"at least {floor} for {arch} (N t d_l >= n_params = {arch.n_params})",
                samples, f"Pass --samples {floor} or more, or leave it out to choose N automatically.")
    dev = resolve_device(device)
    say = progress or (lambda _msg: None)
    t_start = time.perf_counter()
    weights = random_weights(arch, seed, device=dev)
    params = flatten(weights)
    t_sym = time.perf_counter()
    split = _symmetry_split(arch, weights)
    t_sym = time.perf_counter() - t_sym
    say(f"{split.rank} independent symmetry tangents split off ({t_sym:.1f} s)")
    upper = arch.n_params - split.rank
    n_cols = upper  # ranks are read off J Q2, the Jacobian on the complement of the tangents
    rows_per_sample = arch.tokens * arch.widths[-1]
    if samples is not None:
        target = samples
    else:
        target = max(initial_samples(arch, upper), min_samples or 0)
    if max_samples is None:
        max_samples = max(8 * target, 64)
    gen = seeded_generator(seed, "inputs")
    block = max(1, _ROW_BLOCK_BYTES // (rows_per_sample * arch.n_params * 8))

    kept: list[torch.Tensor] = []  # row blocks not yet folded into R
    R = None
    n_done, t_jac, t_rank, leak = 0, 0.0, 0.0, 0.0
    history: list[tuple[int, int]] = []
    previous = None
    saturated_by = None
    while True:
        while n_done < target:
            n_new = min(block, target - n_done)
            X = torch.randn((n_new, arch.widths[0], arch.tokens), generator=gen,
                            dtype=torch.float64).to(dev)
            t0 = time.perf_counter()
            J = jacobian(arch, params, X)
            # Row scaling keeps the rank and equilibrates a degree-3^l polynomial's dynamic range.
            J = unit_scaled(J, dim=1)
            reduced, block_leak = split.reduce(J)
            leak = max(leak, block_leak)
            kept.append(reduced)
            t_jac += time.perf_counter() - t0
            n_done += n_new
            say(f"N = {n_done}/{target} samples: Jacobian rows computed")
        t1 = time.perf_counter()
        stacked = torch.cat(([R] if R is not None else []) + kept)
        kept = []
        if stacked.numel() * stacked.element_size() > _KEEP_ROWS_BYTES:
            say(f"folding {stacked.shape[0]} rows into a triangular factor")
            stacked = torch.linalg.qr(stacked, mode="r").R
        R = stacked
        # Column scaling keeps the rank too; R's column norms are J's.
        sv = torch.linalg.svdvals(unit_scaled(R, dim=0))
        t_rank += time.perf_counter() - t1
        nr = numerical_rank(sv, n_done * rows_per_sample, n_cols)
        history.append([n_done, nr.rank])
        say(f"N = {n_done}: numerical rank {nr.rank} (gap {nr.gap:.1f} decades)")
        clear = not nr.is_ambiguous(min_gap)
        saturated_by = None
        if nr.rank >= upper:
            saturated_by = "symmetry bound"
        elif previous is not None and previous.rank == nr.rank:
            saturated_by = "stable rank"
        # More samples both saturate the rank and widen the gap, so grow N until both hold.
        if (saturated_by and clear) or samples is not None or n_done >= max_samples:
            break
        previous = nr
        target = min(max_samples, math.ceil(n_done * 1.5))

    notes = []
    ambiguous = nr.is_ambiguous(min_gap)
    if ambiguous:
        notes.append(f"singular-value gap {nr.gap:.2f} decades (runner-up {nr.runner_up_gap:.2f}, "
                     f"sigma_r+1 = {nr.sigma_after:.1e} vs round-off {nr.floor:.1e}); need a gap "
                     f">= {min_gap} decades, a clear runner-up margin and sigma_r+1 near round-off")
    notes.append(f"rank read on the complement of {split.rank} symmetry tangents "
                 f"(their Jacobian image: {leak:.1e} of the total)")
    if leak > _MAX_LEAK:
        ambiguous = True
        notes.append(f"symmetry tangents are not in the float kernel (leak {leak:.1e}): round-off")
    if saturated_by is None:
        ambiguous = True
        if samples is not None:
            notes.append(f"rank {nr.rank} is below the symmetry bound {upper} and N = {samples} was "
                         "fixed: saturation in N not verified (leave --samples out to grow N)")
        else:
            notes.append(f"rank still growing at N = {n_done} (max_samples reached)")
    else:
        notes.append(f"saturated in N: {saturated_by}")
    status = "ambiguous" if ambiguous else "settled"
    if ambiguous:
        warnings.warn(f"{arch}: numerical rank {nr.rank} is ambiguous: " + "; ".join(notes),
                      AmbiguousRankWarning, stacklevel=2)
    total = time.perf_counter() - t_start
    return DimensionResult(
        architecture=arch.to_dict(), n_params=arch.n_params, dimension=nr.rank,
        method="numerical", status=status, formula=expected_dim(arch),
        conjecture=effective_width(arch), upper_bound=upper, gap=nr.gap,
        sigma_before=nr.sigma_before, sigma_after=nr.sigma_after, n_samples=n_done, seed=seed,
        device=str(dev), seconds={"symmetries": t_sym, "jacobian": t_jac, "rank": t_rank,
                                          "total": total},
        rank_rule=rank_rule(min_gap), rank_history=history, notes=notes)


