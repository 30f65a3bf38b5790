"""Numerical dimension of block networks: float64 Jacobian rank at a random point (gap rule).

Same rule as `numerical.numerical_dim` (docs/blocks.md): the Jacobian of
W -> (phi_W(X_1), ..., phi_W(X_N)) is taken by autodiff of `core.blocks.block_forward`, the
catalogue's tangents are split off (they must lie in the float kernel: the leak check), and the
rank is read by `rank.numerical_rank`; N grows until the rank stops changing.
"""

from __future__ import annotations

import math
import time
import warnings

import torch
from torch.func import jacfwd, jacrev

from ..core.architecture import Architecture
from ..core.blocks import block_forward, block_forward_flat, flatten_blocks, random_block_weights
from ..core.catalogue import ambient_bound, tangent_rows
from ..core.checks import bad_value, check_int, check_seed
from ..core.block_formulas import block_formula
from ..core.seeds import seeded_generator
from .jacobians import KernelSplit
from .numerical import check_gpu_memory, resolve_device, say_device
from .rank import MIN_GAP_DECADES, matrix_rank, numerical_rank, rank_rule, singular_values
from .result import AmbiguousRankWarning, DimensionResult, Progress
from .saturation import saturation_counts, saturation_note

_MAX_LEAK = 1e-9


def block_jacobian(arch: Architecture, params: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """J = d vec(phi_W(X_1..X_N)) / dW, shape (N d_l t, n_params)."""
    def f(w):
        return block_forward_flat(arch, w, X).reshape(-1)
    rows = X.shape[0] * arch.widths[-1] * arch.tokens
    return (jacrev(f) if rows < arch.n_params else jacfwd(f))(params)


def float_family_ranks(arch: Architecture, tangents: torch.Tensor, counts) -> dict[str, int]:
    """Incremental numerical rank of each catalogue family, in catalogue order."""
    ranks, start, previous = {}, 0, 0
    for family, n in counts:
        stop = start + n
        total = matrix_rank(tangents[:stop]).rank if stop else 0
        ranks[family] = total - previous
        previous, start = total, stop
    return ranks


def block_numerical_dim(arch: Architecture, *, samples: int | None = None, seed: int = 0,
                        device: str = "cpu", min_gap: float = MIN_GAP_DECADES,
                        progress: Progress | None = None,
                        max_memory: str | float | int | None = None) -> DimensionResult:
    """Numerical dimension of a block network (numerical: not a proof). `max_memory` budgets
    a GPU run (`numerical.check_gpu_memory`); the host's is checked by the caller."""
    seed = check_seed(seed)
    rows_per_sample = arch.tokens * arch.widths[-1]
    floor = math.ceil(arch.n_params / rows_per_sample)
    if samples is not None:
        samples = check_int("samples", samples, minimum=1, fix=f"Pass --samples {floor} or more.")
        if samples < floor:
            raise bad_value("samples", f"at least {floor} for {arch} (N t d_l >= n_params = "
                            f"{arch.n_params})", samples, f"Pass --samples {floor} or more.")
    dev = resolve_device(device)
    check_gpu_memory(arch, samples, max_memory, dev)
    say = progress or (lambda _msg: None)
    say_device(dev, say)
    t_start = time.perf_counter()
    blocks = random_block_weights(arch, seed, device=dev)
    params = flatten_blocks(arch, blocks)
    tangents, counts = tangent_rows(arch, {k: v.cpu() for k, v in blocks.items()})
    families = float_family_ranks(arch, tangents, counts)
    split = KernelSplit.from_tangents(tangents.to(dev))
    upper = arch.n_params - split.rank
    ambient = ambient_bound(arch)
    bound = upper if ambient is None else min(upper, ambient)
    say(f"{split.rank} independent symmetry tangents split off")
    gen = seeded_generator(seed, "inputs")
    target = samples or max(floor, math.ceil(2 * bound / rows_per_sample) + 1)
    max_samples = max(8 * target, 64)
    kept, n_done, leak, history, previous = [], 0, 0.0, [], None
    saturation = (0, 0)  # saturated and all softmax columns so far (NOTE: [saturated softmax])
    saturated_by = None
    while True:
        X = torch.randn((target - n_done, arch.widths[0], arch.tokens), generator=gen,
                        dtype=torch.float64).to(dev)
        if arch.attention == "softmax":
            record = []
            with torch.no_grad():
                block_forward(arch, blocks, X, record=record)
            saturation = tuple(map(sum, zip(saturation, saturation_counts(record))))
        J = block_jacobian(arch, params, X)
        J = J / J.norm(dim=1, keepdim=True).clamp(min=torch.finfo(J.dtype).tiny)
        reduced, block_leak = split.reduce(J)
        leak = max(leak, block_leak)
        kept.append(reduced)
        n_done = target
        R = torch.cat(kept)
        sv = singular_values(R / R.norm(dim=0, keepdim=True).clamp(min=torch.finfo(R.dtype).tiny))
        nr = numerical_rank(sv, R.shape[0], R.shape[1])
        history.append([n_done, nr.rank])
        say(f"N = {n_done}: numerical rank {nr.rank} (gap {nr.gap:.1f} decades)")
        saturated_by = ("upper bound" if nr.rank >= bound else
                        "stable rank" if previous is not None and previous == nr.rank else None)
        if (saturated_by and not nr.is_ambiguous(min_gap)) or samples is not None or n_done >= max_samples:
            break
        previous = nr.rank
        target = min(max_samples, math.ceil(n_done * 1.5))
    notes = [f"symmetry families (incremental rank, float): "
             + ", ".join(f"{k}: {v}" for k, v in families.items() if v)]
    ambiguous = nr.is_ambiguous(min_gap)
    if ambiguous:
        notes.append(f"singular-value gap {nr.gap:.2f} decades is not clear (need >= {min_gap})")
    if leak > _MAX_LEAK:
        ambiguous = True
        notes.append(f"symmetry tangents are not in the float kernel (leak {leak:.1e})")
    saturated = saturation_note(saturation, nr.rank, bound)
    if saturated:
        ambiguous = True
        notes.append(saturated)
    if saturated_by is None:
        ambiguous = True
        notes.append(f"rank {nr.rank} not shown saturated in N (N = {n_done})")
    else:
        notes.append(f"saturated in N: {saturated_by}")
    if ambient is not None:
        notes.append(f"ambient bound {ambient}; symmetry bound {upper}")
    status = "ambiguous" if ambiguous else "settled"
    piecewise = arch.mlp is not None and arch.activation == "relu"
    if piecewise and not ambiguous and nr.rank < bound:
        # NOTE: [relu ranks depend on the point]
        # A relu network is analytic only inside each activation region; the Jacobian rank is
        # constant on a region but can differ between regions, and dim M is the largest of them.
        # So a clear rank at one random point is only a lower bound on dim M unless it meets
        # the symmetry bound (measured: a 2-head residual relu block reads 38 at one point with
        # a 10-decade gap, 40 = the bound at two others).
        status = "lower-bound"
        notes.append(f"relu networks are piecewise analytic: the rank {nr.rank} at this point is a "
                     f"lower bound on the dimension (another activation region may have a higher "
                     f"rank), which is at most {bound}; try --method certified or another --seed")
    if ambiguous:
        warnings.warn(f"{arch}: numerical rank {nr.rank} is ambiguous: " + "; ".join(notes),
                      AmbiguousRankWarning, stacklevel=2)
    formula = block_formula(arch)
    result = DimensionResult(
        architecture=arch.to_dict(), n_params=arch.n_params, dimension=nr.rank, method="numerical",
        status=status, formula=formula, conjecture=formula, upper_bound=bound, gap=nr.gap,
        lower_bound=nr.rank if status == "lower-bound" else None,
        sigma_before=nr.sigma_before, sigma_after=nr.sigma_after, n_samples=n_done, seed=seed,
        device=str(dev), rank_rule=rank_rule(min_gap), rank_history=history,
        seconds={"total": time.perf_counter() - t_start}, notes=notes, symmetries=families)
    return result
