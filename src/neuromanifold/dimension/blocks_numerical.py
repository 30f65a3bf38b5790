"""Numerical dimension of block networks: float64 Jacobian rank at a random point (gap rule).

Same rule as `numerical.numerical_dim` (docs/blocks.md): the Jacobian of
W -> (phi_W(X_1), ..., phi_W(X_N)) is taken by autodiff of `core.blocks.block_forward`, the
catalogue's tangents are split off (they must lie in the float kernel: the leak check), and the
rank is read by `rank.numerical_rank`; N grows (`growth.grow_samples`) until the rank stops
changing, and `verdict.numerical_verdict` gives the status.
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
from ..core.checks import bad_value, check_int, check_positive_float, check_seed
from ..core.formulas import block_formula
from ..core.seeds import seeded_generator
from .growth import default_max_samples, first_target, grow_by_half, grow_samples
from .jacobians import KernelSplit
from .numerical import check_gpu_memory, resolve_device, say_device
from ..core.rank import MIN_GAP_DECADES, matrix_rank, numerical_rank, rank_rule, singular_values
from .result import AmbiguousRankWarning, DimensionResult, Progress
from .saturation import saturation_counts, saturation_note
from .verdict import numerical_verdict, unsettled_message


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
                        max_samples: int | None = None, max_seconds: float | None = None,
                        progress: Progress | None = None,
                        max_memory: str | float | int | None = None) -> DimensionResult:
    """Numerical dimension of a block network (numerical: not a proof). `max_memory` budgets
    a GPU run (`numerical.check_gpu_memory`); the host's is checked by the caller.

    N grows (x1.5, `growth.grow_samples`) until the rank meets the upper bound or stops
    changing, with a clear gap, unless `samples` fixes it; at `max_samples` (default 8 times the
    first N, at least 64) or `max_seconds` it stops with status `stopped`. The status and notes
    are `verdict.numerical_verdict`'s.
    """
    seed = check_seed(seed)
    rows_per_sample = arch.tokens * arch.widths[-1]
    floor = math.ceil(arch.n_params / rows_per_sample)
    if samples is not None:
        samples = check_int("samples", samples, minimum=1, fix=f"Pass --samples {floor} or more.")
        if samples < floor:
            raise bad_value("samples", f"at least {floor} for {arch} (N t d_l >= n_params = "
                            f"{arch.n_params})", samples, f"Pass --samples {floor} or more.")
    if max_samples is not None:
        max_samples = check_int("max_samples", max_samples, minimum=1,
                                fix="Pass max_samples=64, or leave it out.")
    if max_seconds is not None:
        max_seconds = check_positive_float("max_seconds", max_seconds)
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
    target = samples or first_target(bound, rows_per_sample, least=floor)
    state = {"kept": [], "leak": 0.0, "n": 0,
             "saturation": (0, 0)}  # saturated and all softmax columns (NOTE: [saturated softmax])

    def add(n_done: int, n_target: int) -> None:
        X = torch.randn((n_target - n_done, arch.widths[0], arch.tokens), generator=gen,
                        dtype=torch.float64).to(dev)
        if arch.attention == "softmax":
            record = []
            with torch.no_grad():
                block_forward(arch, blocks, X, record=record)
            state["saturation"] = tuple(map(sum, zip(state["saturation"], saturation_counts(record))))
        J = block_jacobian(arch, params, X)
        J = J / J.norm(dim=1, keepdim=True).clamp(min=torch.finfo(J.dtype).tiny)
        reduced, block_leak = split.reduce(J)
        state["leak"] = max(state["leak"], block_leak)
        state["kept"].append(reduced)
        state["n"] = n_target

    def measure():
        R = torch.cat(state["kept"])
        sv = singular_values(R / R.norm(dim=0, keepdim=True).clamp(min=torch.finfo(R.dtype).tiny))
        nr = numerical_rank(sv, R.shape[0], R.shape[1])
        say(f"N = {state['n']}: numerical rank {nr.rank} (gap {nr.gap:.1f} decades)")
        return nr

    # One sample more is a batch here (min_batch 1), as this path has always grown N: the N
    # sequence decides the inputs drawn, hence every rank and gap reported so far.
    grown = grow_samples(
        target, add, measure, rank_of=lambda nr: nr.rank, upper=bound, fixed=samples is not None,
        next_target=grow_by_half, clear=lambda nr: not nr.is_ambiguous(min_gap),
        max_samples=default_max_samples(target) if max_samples is None else max_samples,
        max_seconds=max_seconds, min_batch=1, say=say)
    nr, n_done = grown.measurement, grown.n_done
    notes = [f"symmetry families (incremental rank, float): "
             + ", ".join(f"{k}: {v}" for k, v in families.items() if v)]
    if ambient is not None:
        notes.append(f"ambient bound {ambient}; symmetry bound {upper}")
    status, verdict_notes = numerical_verdict(
        nr, nr.rank, bound, min_gap, grown.reason, grown.detail, n_samples=n_done,
        leak=state["leak"], doubts=[saturation_note(state["saturation"], nr.rank, bound)],
        piecewise="relu MLP" if arch.mlp is not None and arch.activation == "relu" else None)
    notes += verdict_notes
    message = unsettled_message(str(arch), nr.rank, status, notes)
    if message:
        warnings.warn(message, AmbiguousRankWarning, stacklevel=2)
    formula = block_formula(arch)
    return DimensionResult(
        architecture=arch.to_dict(), n_params=arch.n_params, dimension=nr.rank, method="numerical",
        status=status, formula=formula, conjecture=formula, upper_bound=bound, gap=nr.gap,
        lower_bound=nr.rank if status == "lower-bound" else None,
        sigma_before=nr.sigma_before, sigma_after=nr.sigma_after, n_samples=n_done, seed=seed,
        device=str(dev), rank_rule=rank_rule(min_gap), rank_history=grown.history,
        seconds={"total": time.perf_counter() - t_start}, notes=notes, symmetries=families)
