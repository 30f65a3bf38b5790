"""Numerical dimension: the float64 Jacobian rank at a random point, read by the gap rule.

See docs/math for why the generic Jacobian rank is the dimension, and `core.rank` for the
rule that decides a floating-point rank.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import torch

from ..core.architecture import Architecture, check_architecture
from ..core.checks import (bad_value, check_seed, check_choice, check_int, check_min_gap,
                           check_positive_float)
from ..core.scheduler import check_backend
from ..core.blocks import block_forward, flatten_blocks, random_block_weights
from ..symmetries.registry import tangent_rows
from ..core.formulas import (ambient_bound, block_formula, covering_count, effective_width,
                             expected_dim, general)
from ..core.maps import forward
from ..core.parameters import flatten, random_weights
from ..core.seeds import seeded_generator
from ..core.tokens import input_stream
from .memory import (NUMERICAL_FOLD_ROWS_BYTES, NUMERICAL_KEEP_ROWS_BYTES,
                     NUMERICAL_ROW_BLOCK_BYTES, elimination_samples, min_samples_required)
from ..core.rank import (MIN_GAP_DECADES, numerical_rank, rank_rule, singular_values, unit_scaled)
from .gauge import symmetry_split
from .jacobians import KernelSplit, family_ranks
from .plan import Plan, checked_numerical_plan
from .growth import default_max_samples, first_target, grow_by_half, grow_samples
from .result import AmbiguousRankWarning, DimensionResult, Progress
from .saturation import saturation_counts, saturation_note
from .verdict import numerical_verdict, unsettled_message

DEFAULT_MIN_GAP = MIN_GAP_DECADES
# How the rank is read: on J's columns left by the symmetry split ("full"), or after eliminating
# the last value matrix exactly ("eliminate", `dimension.elimination`; gauge networks only).
# "auto" eliminates from ELIMINATE_MIN_COLUMNS free columns on, as the plan decides (`dimension.plan`).
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


def check_gpu_memory(plan: Plan, max_memory, dev: torch.device) -> None:
    """On a cuda device, refuse before allocating when the plan's peak (its tensors all on the
    GPU: `memory.on_gpu`) exceeds the budget: `max_memory`, or 80% of the memory
    `torch.cuda.mem_get_info` reports free on `dev`. Nothing on other devices."""
    if dev.type != "cuda":
        return
    from .memory import check_memory, on_gpu  # noqa: PLC0415

    free, _total = torch.cuda.mem_get_info(dev)
    check_memory(on_gpu(plan.estimate), max_memory, available=free,
                 where=f"free on {dev} ({torch.cuda.get_device_name(dev)})")


def say_device(dev: torch.device, say: Progress) -> None:
    """One progress line naming the GPU a run computes on (nothing on the CPU)."""
    if dev.type == "cuda":
        say(f"computing on {dev}: {torch.cuda.get_device_name(dev)}")


def numerical_dim(arch: Architecture, *, samples: int | None = None, seed: int = 0,
                  device: str = "cpu", min_gap: float = DEFAULT_MIN_GAP,
                  min_samples: int | None = None, max_samples: int | None = None,
                  max_seconds: float | None = None,
                  progress: Progress | None = None,
                  max_memory: str | float | int | None = None, backend: str = "local",
                  scheduler: str | None = None, route: str = "auto",
                  plan: Plan | None = None) -> DimensionResult:
    """Numerical dimension: rank of the float64 Jacobian of W -> (phi_W(X_1..X_N)) at random W.

    Math: dim M = rank dPhi_W for generic W and N large enough (docs/math/method.md).
    N is grown (x1.5, `growth.grow_samples`) until a batch adds no rank or the rank meets the
    symmetry upper bound, with a clear gap, unless `samples` fixes it; at `max_samples` or
    `max_seconds` it stops with status `stopped`. Rank rule: largest gap in the singular values; a gap below `min_gap`
    decades, a competing gap, or an unverified saturation gives status `ambiguous` and an
    `AmbiguousRankWarning`. Numerical: not a proof. `route` (`ROUTES`) picks the matrix the rule
    reads; "eliminate" reads it after removing the last value matrix's columns exactly
    (`dimension.elimination`), where the gauge applies (local backend only).

    `backend` `dask` computes the rows on the workers of a Dask cluster (`scheduler`, an address
    such as tcp://host:8786, or a LocalCluster of `memory.LOCAL_WORKERS` workers started here)
    and reduces them there to a triangular factor with the same singular values
    (`dimension.dask_rank`): same samples, same rank rule, and this process holds only U x U
    matrices (U = the columns the rank is read on). CPU only.

    `plan`: the engine's plan (`plan.checked_numerical_plan`), made and checked here when not given; a caller
    that has checked one (`dimension.api`) passes it, and its route is the one run.
    """
    check_architecture(arch)
    seed = check_seed(seed)
    backend = check_backend(backend, scheduler)
    route = check_choice("route", route, ROUTES)
    if backend == "dask" and arch.vocab is not None:
        raise bad_value("backend", "'local' with a vocabulary (token-id inputs)", backend,
                        "Drop --backend dask.")
    if backend == "dask" and route == "eliminate":
        raise bad_value("route", "'auto' or 'full' with the dask backend", route,
                        "The elimination runs in this process; use backend 'local'.")
    if backend == "dask":
        route = "full"
    if plan is None:
        plan = checked_numerical_plan(arch, samples, max_memory, device, backend, route,
                                      scheduler, min_samples)
    route = plan.route
    floor = min_samples_required(arch)
    if samples is not None:
        samples = check_int("samples", samples, minimum=1, fix=f"Pass --samples {floor} or more.")
        if arch.n_sequences is not None and samples > arch.n_sequences:
            raise bad_value("samples", f"at most V^t = {arch.n_sequences} (the distinct token "
                            f"sequences of {arch})", samples,
                            f"Pass --samples {arch.n_sequences} or fewer, or leave it out.")
        if samples < floor:
            raise bad_value(
                "samples", f"at least {floor} for {arch} (N t d_l >= n_params = {arch.n_params})",
                samples, f"Pass --samples {floor} or more, or leave it out to choose N automatically.")
    if max_seconds is not None:
        max_seconds = check_positive_float("max_seconds", max_seconds)
    min_gap = check_min_gap(min_gap)
    if max_samples is not None:
        max_samples = check_int("max_samples", max_samples, minimum=1,
                                fix="Pass max_samples=64, or leave it out.")
    if backend == "dask" and str(device) != "cpu":
        raise bad_value("device", "'cpu' with --backend dask", device,
                        "Dask workers compute on their CPUs; drop --device, or use --backend local.")
    dev = resolve_device(device)
    check_gpu_memory(plan, max_memory, dev)
    say = progress or (lambda _msg: None)
    say_device(dev, say)
    t_start = time.perf_counter()
    if backend == "dask":
        from .dask_rank import DaskRows  # noqa: PLC0415  (dask only when asked for)

        source = DaskRows(arch, seed, scheduler, say, samples)  # refuses a bad --scheduler
    else:
        source = LocalRows(arch, seed, dev, route, progress=say)
    # The work, before any of it (issue 38); after the scheduler is reached, so that a refused
    # --scheduler stays one line.
    say(plan.describe(arch))
    try:
        return _grow_and_read(arch, source, samples=samples, seed=seed, dev=dev, min_gap=min_gap,
                              min_samples=min_samples, max_samples=max_samples,
                              max_seconds=max_seconds, say=say, t_start=t_start)
    finally:
        source.close()


class LocalRows:
    """The Jacobian rows of the numerical rank, computed and kept in this process.

    The row sources (`LocalRows`, `dask_rank.DaskRows`) share one interface: `split_rank` and
    `seconds_split` (the symmetry split), `add(X)` (rows of the samples X), `scaled_factor()` (a
    matrix with the singular values of every row so far after scaling the columns to unit norm,
    the rank rule's scaling), `note()`, `leak`, `seconds_jacobian`, `backend` (a dict for the
    result, or None) and `close()`.
    """

    backend = None

    def __init__(self, arch: Architecture, seed: int, dev: torch.device, route: str = "full",
                 progress: Progress | None = None):
        self.arch = arch
        self.progress = progress  # for the lines of a long Jacobian pass (deep networks)
        t0 = time.perf_counter()
        self.families = self.ambient = None
        if arch.is_block:
            # Heads, values, residual, MLP or norms: the registry's tangents split off in float,
            # the ambient bound where one is known (NetworkRules below says what else differs).
            blocks = random_block_weights(arch, seed, device=dev)
            self.params = flatten_blocks(arch, blocks)
            tangents, counts = tangent_rows(arch, {k: v.cpu() for k, v in blocks.items()})
            self.families = family_ranks(tangents, counts)
            self.split = KernelSplit.from_tangents(tangents.to(dev))
            self.ambient = ambient_bound(arch)
            self.probe = blocks
        else:
            weights = random_weights(arch, seed, device=dev)
            self.params = flatten(weights)
            self.split = symmetry_split(arch, weights)
            self.probe = None
        self.seconds_split = time.perf_counter() - t0
        self.split_rank = self.split.rank
        self.R, self.kept, self.leak, self.seconds_jacobian = None, [], 0.0, 0.0
        self.triangular = False  # R is the n x n triangular factor that new rows are folded into
        self.rows = 0  # rows computed so far (after the elimination's sketch, where it applies)
        self.piece = None  # samples of the first block: the most one Jacobian call takes (blocks)
        self.eliminated = None  # the LastValueElimination reading the rank, if any
        if route == "eliminate" and hasattr(self.split, "free"):  # a gauge (GaugeSplit) applies
            from .elimination import LastValueElimination  # noqa: PLC0415

            self.split = self.eliminated = LastValueElimination(
                arch, self.split, seeded_generator(seed, "sketch"))

    def add(self, X: torch.Tensor) -> None:
        """Compute and keep the rows J Q2 of the samples X."""
        t0 = time.perf_counter()
        # Networks beyond the paper's model: a block past the first is computed in pieces of
        # the first block's samples (the Jacobian's autodiff working set, its full rows and
        # their rotation grow with the samples of a call), so growing N holds no more of them
        # than the first pass, which `memory.numerical_estimate` models. The first block is
        # one piece: a run that settles there computes what it did before.
        self.piece = self.piece or X.shape[0]
        step = self.piece if self.arch.is_block else X.shape[0]
        for start in range(0, X.shape[0], step):
            reduced, leak = self.split.rows(self.arch, self.params, X[start: start + step],
                                            self.progress)
            self.leak = max(self.leak, leak)
            self.kept.append(reduced)
            self.rows += reduced.shape[0]
        if self.triangular:
            if sum(k.numel() for k in self.kept) * reduced.element_size() >= NUMERICAL_FOLD_ROWS_BYTES:
                self._fold_kept()
        elif self._grown_past_keep():
            self._to_triangular()
        self.seconds_jacobian += time.perf_counter() - t0

    def _grown_past_keep(self) -> bool:
        """True when the rows outnumber the columns and outgrow `NUMERICAL_KEEP_ROWS_BYTES`."""
        pieces = ([self.R] if self.R is not None else []) + self.kept
        rows = sum(p.shape[0] for p in pieces)
        cols = pieces[0].shape[1] if pieces else 0
        return rows >= cols > 0 and rows * cols * pieces[0].element_size() > NUMERICAL_KEEP_ROWS_BYTES

    def _to_triangular(self) -> None:
        """Fold every row so far into an n x n triangular factor, a block at a time."""
        from .fold import fold_rows_  # noqa: PLC0415

        pieces = ([self.R] if self.R is not None else []) + self.kept
        self.R, self.kept = None, []
        cols = pieces[0].shape[1]
        R = torch.zeros((cols, cols), dtype=pieces[0].dtype, device=pieces[0].device)
        step = max(1, NUMERICAL_FOLD_ROWS_BYTES // (cols * R.element_size()))
        while pieces:
            piece = pieces.pop(0)
            for r0 in range(0, piece.shape[0], step):
                fold_rows_(R, piece[r0:r0 + step])  # overwrites the piece, which is dropped
            del piece
        self.R, self.triangular = R, True

    def _fold_kept(self) -> None:
        """Fold the rows kept since the last fold into the triangular factor."""
        from .fold import fold_rows_  # noqa: PLC0415

        if self.kept:
            K = torch.cat(self.kept)
            self.kept = []
            fold_rows_(self.R, K)

    def scaled_factor(self, say: Progress) -> torch.Tensor:
        """`factor()` with unit columns (a copy: the factor is kept for the next batch)."""
        return unit_scaled(self.factor(say), dim=0)

    def factor(self, say: Progress) -> torch.Tensor:
        """Every row so far, folded into a triangular factor past `NUMERICAL_KEEP_ROWS_BYTES`."""
        if self.triangular:
            self._fold_kept()
            return self.R
        if self._grown_past_keep():
            say(f"folding {self.rows} rows into a triangular factor")
            self._to_triangular()
            return self.R
        stacked = torch.cat(([self.R] if self.R is not None else []) + self.kept)
        self.kept = []
        if stacked.numel() * stacked.element_size() > NUMERICAL_KEEP_ROWS_BYTES:
            say(f"folding {stacked.shape[0]} rows into a triangular factor")
            stacked = torch.linalg.qr(stacked, mode="r").R
        self.R = stacked
        return stacked

    def note(self) -> str:
        """How the split read the rank, for the result's notes."""
        if self.eliminated is not None:
            return self.eliminated.note(self.leak, self.eliminated.input_rank())
        if self.families is not None:
            return ("symmetry families (incremental rank, float): "
                    + ", ".join(f"{k}: {v}" for k, v in self.families.items() if v))
        return self.split.note(self.leak)

    def close(self) -> None:
        """Nothing to release here."""


@dataclass(frozen=True)
class NetworkRules:
    """What the one numerical engine does differently for the paper's model and for networks
    beyond it (heads, values, residual, MLP, norms), kept in one place.

    upper       the bound the rank is compared with: the symmetry bound, and for networks beyond
                the paper's model also the ambient bound where one is known;
    least_first the least first N (beyond the paper's model: enough rows for every parameter);
    min_batch   the fewest fresh samples that can show saturation (beyond: one, as that path
                has always grown N: the N sequence decides the inputs, hence every documented
                rank and gap);
    piecewise   relu MLPs are piecewise analytic (`verdict`);
    notes       the ambient bound, where one is used;
    probe_one_token  softmax saturation is probed at t = 1 too (beyond the paper's model, as that
                path always has: it can only make a reading less settled).
    """

    upper: int
    bound_name: str
    least_first: int
    min_batch: int
    piecewise: str | None
    notes: list[str]
    probe_one_token: bool = False

    @classmethod
    def of(cls, arch: Architecture, ambient: int | None, symmetry_upper: int) -> "NetworkRules":
        if not arch.is_block:
            return cls(symmetry_upper, "symmetry bound", 2, 2, None, [])
        upper = symmetry_upper if ambient is None else min(symmetry_upper, ambient)
        notes = [] if ambient is None else [f"ambient bound {ambient}; symmetry bound {symmetry_upper}"]
        piecewise = "relu MLP" if arch.mlp is not None and arch.activation == "relu" else None
        return cls(upper, "upper bound", min_samples_required(arch), 1, piecewise, notes, True)

    def formulas(self, arch: Architecture) -> dict:
        """The result's closed forms: the paper's, or `block_formula` beyond it."""
        if not arch.is_block:
            return {"formula": expected_dim(arch), "conjecture": effective_width(arch),
                    "general": general(arch)}
        formula = block_formula(arch)
        return {"formula": formula, "conjecture": formula}


def norm_eps_doubt(arch: Architecture, rank: int, upper: int) -> str | None:
    """A doubt on a float rank below the upper bound of a network with norms: a direction that
    rescales what a norm reads changes the map only through the norm's eps (`Architecture.norm_eps`),
    so the Jacobian can have singular values of that order that the gap rule reads as zero
    (measured: widths 4,4, keys 1, 3 heads, gelu MLP 3, rmsnorm, t = 1, softmax: 33 `settled` with
    an 8.4-decade gap, sigma_r+1 = 8e-11, where balls prove 34; with QK-norm, q -> c q changes
    N(q) by O(eps / mean q^2) only: 50 read with a 5.6-decade gap where balls prove 52). The model constant must not hide
    directions: such a rank is not settled, and `auto` escalates it to the certified path. (A relu
    network's reading below the bound is a `lower-bound` already, which eps can only make truer.)"""
    if arch.norm == "none" or rank >= upper:
        return None
    return (f"norms: a direction that rescales a norm's input changes the map only through the "
            f"norm's eps ({arch.norm_eps:g}), so the float64 rank can miss directions below the upper "
            f"bound {upper}; not settled (use --method certified)")


# Largest exact Jacobian (rows x columns) the decoder late check below builds.
_LATE_EXACT_ENTRIES = 4_000_000


def _decoder_late_checks(arch: Architecture, rank: int, n_samples: int, seed: int) -> list:
    """For polynomial networks with decoder options (docs/decoder_features.md), a float rank
    about to settle below the upper bound is compared with the exact rank over F_p of the
    Jacobian at a random point and N random inputs (a lower bound on the dimension with
    probability one): a larger exact rank shows that float64 lost directions (measured: a causal
    3-layer lightning network with square MLPs, degree 216 in its inputs, read 3 `settled` at
    several seeds where the certified dimension is 27). Other networks keep the rules they had."""
    if not (arch.is_block and arch.has_decoder_options and arch.is_polynomial
            and arch.vocab is None):
        return []
    if n_samples * arch.widths[-1] * arch.tokens * arch.n_params > _LATE_EXACT_ENTRIES:
        return []

    def exact_check() -> str | None:
        from .fp import DEFAULT_PRIME, rank_mod_p  # noqa: PLC0415
        from .fp_dual import jacobian_mod_p, random_blocks_mod_p  # noqa: PLC0415
        from .modular import random_residues  # noqa: PLC0415

        gen = seeded_generator(seed, "late-exact")
        blocks = random_blocks_mod_p(arch, DEFAULT_PRIME, gen)
        X = random_residues((n_samples, arch.widths[0], arch.tokens), DEFAULT_PRIME, gen)
        exact = rank_mod_p(jacobian_mod_p(arch, blocks, X, DEFAULT_PRIME).numpy(), DEFAULT_PRIME)
        if exact <= rank:
            return None
        return (f"the exact rank over F_p at a random point is {exact} > the float rank {rank} "
                "on as many samples: float64 lost directions (a polynomial's dynamic range); "
                "use --method exact or certified")

    return [exact_check]


def _grow_and_read(arch: Architecture, source, *, samples, seed, dev, min_gap, min_samples,
                   max_samples, max_seconds, say: Progress, t_start: float) -> DimensionResult:
    """Grow N over the rows of `source` until the rank settles; the result of `numerical_dim`."""
    t_sym = source.seconds_split
    say(f"{source.split_rank} independent symmetry tangents split off ({t_sym:.1f} s)")
    symmetry_upper = arch.n_params - source.split_rank
    n_cols = symmetry_upper  # ranks are read off J Q2, the Jacobian on the complement of the tangents
    rules = NetworkRules.of(arch, getattr(source, "ambient", None), symmetry_upper)
    upper = rules.upper
    rows_per_sample = arch.tokens * arch.output_width
    first = first_target(upper, rows_per_sample, least=rules.least_first)
    block = max(1, NUMERICAL_ROW_BLOCK_BYTES // (rows_per_sample * arch.n_params * 8))
    elim = getattr(source, "eliminated", None)
    if elim is not None:
        n_cols = elim.columns
        first = elimination_samples(arch, n_cols)
        block = max(1, NUMERICAL_ROW_BLOCK_BYTES // (rows_per_sample * n_cols * 8))
        say(f"last value matrix eliminated: rank read on {n_cols} of the {upper} free columns")
    if samples is not None:
        target = samples
    else:
        target = max(first, min_samples or 0)
    if max_samples is None:
        max_samples = default_max_samples(target)
    if arch.n_sequences is not None and samples is None:
        # every token id in the first samples (`tokens.covering_sequences`), or, few enough
        # token sequences, the rank over all of them
        target = max(target, covering_count(arch))
        if arch.n_sequences <= max(max_samples, target):
            target = arch.n_sequences
    draw = input_stream(arch, seeded_generator(seed, "inputs"))

    state = {"rank": 0.0, "offset": 0, "input": None, "saturation": (0, 0)}
    # The sources' point, for the saturation test (NOTE: [saturated softmax]); softmax only.
    probe = None
    if arch.attention == "softmax" and (arch.tokens > 1 or rules.probe_one_token):
        probe = getattr(source, "probe", None) or random_weights(arch, seed)

    def add(n_done: int, n_target: int) -> None:
        state["n"] = n_target
        while n_done < n_target:
            n_new = min(block, n_target - n_done)
            X = draw(n_new).to(dev)
            if probe is not None:
                record = []
                with torch.no_grad():
                    if arch.is_block:
                        block_forward(arch, probe, X, record=record)
                    else:
                        forward(arch, probe, X.cpu(), record=record)
                state["saturation"] = tuple(map(sum, zip(state["saturation"],
                                                         saturation_counts(record))))
            source.add(X)
            n_done += n_new
            say(f"N = {n_done}/{n_target} samples: "
                + ("Jacobian rows computed" if source.backend is None else "drawn"))

    def measure():
        t1 = time.perf_counter()
        # Column scaling keeps the rank too; a factor R's column norms are J's.
        R = source.scaled_factor(say)
        say(f"N = {state['n']}: singular values of {R.shape[0]} x {R.shape[1]} rows (the longest phase) ...")
        sv = singular_values(R)
        state["rank"] += time.perf_counter() - t1
        nr = numerical_rank(sv, source.rows if elim is not None else state["n"] * rows_per_sample,
                            n_cols)
        if elim is not None:  # rank J = d_l rank M + rank Y (module elimination)
            state["input"] = elim.input_rank()
            state["offset"] = arch.widths[-1] * state["input"].rank
        say(f"N = {state['n']}: numerical rank {nr.rank + state['offset']} (gap {nr.gap:.1f} decades)")
        return nr

    def clear(nr) -> bool:
        # The elimination keeps d_{l-1} rows of M's factor per group: exact when M has full
        # column rank (generic once N t >= d_{l-1}); otherwise the split undercounts: not clear.
        return not nr.is_ambiguous(min_gap) and (
            state["input"] is None or (state["input"].is_settled(min_gap)
                                       and state["input"].rank == arch.widths[-2]))

    # More samples both saturate the rank and widen the gap: grow N (x1.5) until both hold.
    grown = grow_samples(
        target, add, measure, rank_of=lambda nr: nr.rank + state["offset"], upper=upper,
        fixed=samples is not None, next_target=grow_by_half,
        clear=clear, max_samples=max_samples,
        max_seconds=max_seconds, min_batch=rules.min_batch, finite=arch.n_sequences, say=say)
    nr, n_done, history = grown.measurement, grown.n_done, grown.history
    t_rank, leak = state["rank"], source.leak
    if source.backend is None:
        t_jac = source.seconds_jacobian
    else:  # the rows were waited for inside `factor`: that wait is the workers' time
        t_jac, t_rank = source.seconds_jacobian, t_rank - source.seconds_jacobian
    rank = nr.rank + state["offset"]
    input_doubt = None
    if elim is not None and state["input"].is_ambiguous(min_gap):
        input_doubt = "last layer's input matrix: " + state["input"].ambiguity_note(min_gap)
    status, verdict_notes = numerical_verdict(
        nr, rank, upper, min_gap, grown.reason, grown.detail, n_samples=n_done, leak=leak,
        doubts=[input_doubt, saturation_note(state["saturation"], rank, upper),
                None if rules.piecewise else norm_eps_doubt(arch, rank, upper)],
        late_checks=_decoder_late_checks(arch, rank, n_done, seed),
        bound_name=rules.bound_name, piecewise=rules.piecewise)
    notes = [source.note()] + rules.notes + verdict_notes
    if draw.tokens is not None:
        notes.append(draw.tokens.note())
    message = unsettled_message(str(arch), rank, status, notes)
    if message:
        warnings.warn(message, AmbiguousRankWarning, stacklevel=2)
    total = time.perf_counter() - t_start
    return DimensionResult(
        architecture=arch.to_dict(), n_params=arch.n_params, dimension=rank,
        method="numerical", status=status, upper_bound=upper, gap=nr.gap,
        lower_bound=rank if status == "lower-bound" else None,
        sigma_before=nr.sigma_before, sigma_after=nr.sigma_after, n_samples=n_done, seed=seed,
        device=str(dev), seconds={"symmetries": t_sym, "jacobian": t_jac, "rank": t_rank,
                                          "total": total},
        rank_rule=rank_rule(min_gap), rank_history=history, notes=notes, backend=source.backend,
        symmetries=getattr(source, "families", None), **rules.formulas(arch))


