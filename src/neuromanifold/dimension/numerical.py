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
from ..core.checks import (bad_value, check_architecture, check_seed, check_choice, check_int,
                           check_positive_float)
from ..core.formulas import effective_width, expected_dim, general
from ..core.parameters import flatten, random_weights
from ..core.seeds import seeded_generator
from ..core.symmetries import symmetry_tangents
from .jacobians import KernelSplit
from .memory import ELIMINATE_MIN_COLUMNS, elimination_samples
from .rank import MIN_GAP_DECADES, numerical_rank, rank_rule, unit_scaled
from .growth import grow_samples
from .result import AmbiguousRankWarning, DimensionResult, Progress

DEFAULT_MIN_GAP = MIN_GAP_DECADES
# Bytes of Jacobian rows computed at once.
_ROW_BLOCK_BYTES = 256 * 2 ** 20
# Bytes of Jacobian rows kept whole; past this they are folded into a triangular factor R with
# R^T R = J^T J (same singular values), which costs one extra QR.
_KEEP_ROWS_BYTES = 3 * 2 ** 30
# Largest ||J Q1|| / ||J|| (Jacobian on the symmetry tangents) accepted as round-off.
_MAX_LEAK = 1e-9
# How the rank is read: on J's columns left by the symmetry split ("full"), or after eliminating
# the last value matrix exactly ("eliminate", `dimension.elimination`; gauge networks only).
# "auto" eliminates from ELIMINATE_MIN_COLUMNS free columns on (`dimension.memory`).
ROUTES = ("auto", "full", "eliminate")


def resolve_device(device: str) -> torch.device:
    """`cpu`, `cuda` (error if torch sees no GPU) or `auto` (cuda when available)."""
    device = check_choice("device", device, ("cpu", "cuda", "auto"))
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise bad_value("device", "a device torch can see", "cuda",
                        "No CUDA GPU is visible to torch here; use --device cpu.")
    return torch.device(device)


def readout_tangents_float(arch: Architecture, weights) -> torch.Tensor:
    """Float tangents dV_{j-1} = n e_s^T, n spanning ker [V_j; Q_j; K_j] (the read-out symmetry of
    docs/hidden_directions.md), for lightning and softmax alike (layer j reads only [V; Q; K]_j Z).

    The kernel is the span of the right singular vectors past the generic rank
    min(d_j + 2 a_j, d_{j-1}); nothing is returned for a layer where d_{j-1} <= d_j + 2 a_j.
    """
    offsets = {name: offset for name, _, offset in arch.param_layout()}
    ref = weights.V[0]
    rows = []
    for j in range(2, arch.n_layers + 1):
        d_prev, d_in = arch.widths[j - 2], arch.widths[j - 1]
        M = torch.cat([weights.V[j - 1], weights.Q[j - 1], weights.K[j - 1]])
        if M.shape[0] >= d_in:
            continue
        kernel = torch.linalg.svd(M, full_matrices=True).Vh[M.shape[0]:]      # (k, d_in)
        block = torch.zeros((kernel.shape[0], d_prev, arch.n_params), dtype=ref.dtype, device=ref.device)
        start = offsets[f"V_{j - 1}"]
        for s_ in range(d_prev):
            block[:, s_, start + s_: start + d_in * d_prev: d_prev] = kernel
        rows.append(block.reshape(-1, arch.n_params))
    return torch.cat(rows) if rows else torch.zeros((0, arch.n_params), dtype=ref.dtype, device=ref.device)


def _symmetry_split(arch: Architecture, weights):
    """Where the symmetry tangents are split off: a gauge (free columns, no tangent matrix;
    `gauge.py`) where one applies, else R^P = span(tangents) + complement (float), the read-out
    tangents included. The gauge's free columns still give the rank of J (the dropped columns are
    determined by the free ones through the GL tangents); its bound omits the read-out symmetry,
    so it is only looser there.
    """
    from .gauge import gauge_split  # noqa: PLC0415

    gauge = gauge_split(arch, weights)
    if gauge is not None:
        return gauge
    tangents, _ = symmetry_tangents(arch, weights)
    return KernelSplit.from_tangents(torch.cat([tangents, readout_tangents_float(arch, weights)]))


def _check_memory(arch: Architecture, samples, max_memory, device, route) -> None:
    """Refuse before allocating when the estimated host peak (`dimension.memory`) exceeds the
    budget (`max_memory`, default 80% of the available memory); not checked for a GPU run."""
    from .memory import check_memory, numerical_estimate  # noqa: PLC0415

    if str(device) != "cuda":
        check_memory(numerical_estimate(arch, samples, route=route), max_memory,
                     skip=lambda: str(device) == "auto" and torch.cuda.is_available())


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
                  max_seconds: float | None = None,
                  progress: Progress | None = None,
                  max_memory: str | float | int | None = None,
                  route: str = "auto") -> DimensionResult:
    """Numerical dimension: rank of the float64 Jacobian of W -> (phi_W(X_1..X_N)) at random W.

    Math: dim M = rank dPhi_W for generic W and N large enough (docs/math/method.md).
    N is grown (x1.5, `growth.grow_samples`) until a batch adds no rank or the rank meets the
    symmetry upper bound, with a clear gap, unless `samples` fixes it; at `max_samples` or
    `max_seconds` it stops with status `stopped`. Rank rule: largest gap in the singular values; a gap below `min_gap`
    decades, a competing gap, or an unverified saturation gives status `ambiguous` and an
    `AmbiguousRankWarning`. Numerical: not a proof. `route` (`ROUTES`) picks the matrix the rule
    reads; "eliminate" reads it after removing the last value matrix's columns exactly
    (`dimension.elimination`), where the gauge applies.
    """
    check_architecture(arch)
    seed = check_seed(seed)
    route = check_choice("route", route, ROUTES)
    _check_memory(arch, samples, max_memory, device, route)
    floor = min_samples_required(arch)
    if samples is not None:
        samples = check_int("samples", samples, minimum=1, fix=f"Pass --samples {floor} or more.")
        if samples < floor:
            raise bad_value(
                "samples", f"at least {floor} for {arch} (N t d_l >= n_params = {arch.n_params})",
                samples, f"Pass --samples {floor} or more, or leave it out to choose N automatically.")
    if max_seconds is not None:
        max_seconds = check_positive_float("max_seconds", max_seconds)
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
    first = initial_samples(arch, upper)
    block = max(1, _ROW_BLOCK_BYTES // (rows_per_sample * arch.n_params * 8))
    eliminate = hasattr(split, "free") and (  # a gauge (GaugeSplit) applies
        route == "eliminate" or (route == "auto" and upper >= ELIMINATE_MIN_COLUMNS))
    if eliminate:
        from .elimination import LastValueElimination  # noqa: PLC0415

        split = LastValueElimination(arch, split, seeded_generator(seed, "sketch"))
        n_cols = split.columns
        first = elimination_samples(arch, n_cols)
        block = max(1, _ROW_BLOCK_BYTES // (rows_per_sample * n_cols * 8))
        say(f"last value matrix eliminated: rank read on {n_cols} of the {upper} free columns")
    if samples is not None:
        target = samples
    else:
        target = max(first, min_samples or 0)
    if max_samples is None:
        max_samples = max(8 * target, 64)
    gen = seeded_generator(seed, "inputs")

    state = {"R": None, "kept": [], "rows": 0, "jacobian": 0.0, "rank": 0.0, "leak": 0.0,
             "offset": 0, "input": None}

    def add(n_done: int, n_target: int) -> None:
        state["n"] = n_target
        while n_done < n_target:
            n_new = min(block, n_target - n_done)
            X = torch.randn((n_new, arch.widths[0], arch.tokens), generator=gen,
                            dtype=torch.float64).to(dev)
            t0 = time.perf_counter()
            reduced, block_leak = split.rows(arch, params, X)
            state["leak"] = max(state["leak"], block_leak)
            state["kept"].append(reduced)
            state["rows"] += reduced.shape[0]
            state["jacobian"] += time.perf_counter() - t0
            n_done += n_new
            say(f"N = {n_done}/{n_target} samples: Jacobian rows computed")

    def measure():
        t1 = time.perf_counter()
        stacked = torch.cat(([state["R"]] if state["R"] is not None else []) + state["kept"])
        state["kept"] = []
        if stacked.numel() * stacked.element_size() > _KEEP_ROWS_BYTES:
            say(f"folding {stacked.shape[0]} rows into a triangular factor")
            stacked = torch.linalg.qr(stacked, mode="r").R
        state["R"] = R = stacked
        say(f"N = {state['n']}: singular values of {R.shape[0]} x {R.shape[1]} rows (the longest phase) ...")
        # Column scaling keeps the rank too; R's column norms are J's.
        sv = torch.linalg.svdvals(unit_scaled(R, dim=0))
        state["rank"] += time.perf_counter() - t1
        nr = numerical_rank(sv, state["rows"], n_cols)
        if eliminate:  # rank J = d_l rank M + rank Y (module elimination)
            state["input"] = split.input_rank()
            state["offset"] = arch.widths[-1] * state["input"].rank
        say(f"N = {state['n']}: numerical rank {nr.rank + state['offset']} (gap {nr.gap:.1f} decades)")
        return nr

    def clear(nr) -> bool:
        return not nr.is_ambiguous(min_gap) and (
            state["input"] is None or state["input"].is_settled(min_gap))

    # More samples both saturate the rank and widen the gap: grow N (x1.5) until both hold.
    grown = grow_samples(
        target, add, measure, rank_of=lambda nr: nr.rank + state["offset"], upper=upper,
        fixed=samples is not None, next_target=lambda n_done, _rank: math.ceil(n_done * 1.5),
        clear=clear, max_samples=max_samples,
        max_seconds=max_seconds, say=say)
    nr, n_done, history = grown.measurement, grown.n_done, grown.history
    t_jac, t_rank, leak = state["jacobian"], state["rank"], state["leak"]
    saturated_by = {"bound": "symmetry bound", "saturated": "stable rank"}.get(grown.reason)

    notes = []
    status_if_capped = None  # `stopped` only when the gap was clear and the rank still growing
    ambiguous = nr.is_ambiguous(min_gap)
    if ambiguous:
        notes.append(nr.ambiguity_note(min_gap))
    if eliminate:
        notes.append(split.note(leak, state["input"]))
        if state["input"].is_ambiguous(min_gap):
            ambiguous = True
            notes.append("last layer's input matrix: " + state["input"].ambiguity_note(min_gap))
    else:
        notes.append(split.note(leak))
    if leak > _MAX_LEAK:
        ambiguous = True
        notes.append(f"symmetry tangents are not in the float kernel (leak {leak:.1e}): round-off")
    if saturated_by is None:
        if grown.reason == "cap" and not ambiguous:
            status_if_capped = "stopped"  # clear readings, but the rank was still growing
        ambiguous = True
        if samples is not None:
            notes.append(f"rank {nr.rank + state['offset']} is below the symmetry bound {upper} and "
                         f"N = {samples} was fixed: saturation in N not verified (leave "
                         "--samples out to grow N)")
        else:
            notes.append(f"stopped at a cap before the rank saturated with a clear gap: {grown.detail}")
    else:
        notes.append(f"saturated in N: {saturated_by}")
    status = "ambiguous" if ambiguous else "settled"
    if grown.reason == "cap" and status_if_capped:
        status = status_if_capped
    if status != "settled":
        warnings.warn(f"{arch}: numerical rank {nr.rank + state['offset']} is {status}: " + "; ".join(notes),
                      AmbiguousRankWarning, stacklevel=2)
    total = time.perf_counter() - t_start
    return DimensionResult(
        architecture=arch.to_dict(), n_params=arch.n_params, dimension=nr.rank + state["offset"],
        method="numerical", status=status, formula=expected_dim(arch),
        conjecture=effective_width(arch), general=general(arch), upper_bound=upper, gap=nr.gap,
        sigma_before=nr.sigma_before, sigma_after=nr.sigma_after, n_samples=n_done, seed=seed,
        device=str(dev), seconds={"symmetries": t_sym, "jacobian": t_jac, "rank": t_rank,
                                          "total": total},
        rank_rule=rank_rule(min_gap), rank_history=history, notes=notes)


