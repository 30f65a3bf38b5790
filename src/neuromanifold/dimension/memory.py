"""Peak memory of a computation, estimated from the architecture before anything is allocated.

Every path that allocates in proportion to the network is modelled here: the numerical rank
(Jacobian row blocks, the rows kept for the factorisation, the dense symmetry tangents where no
gauge applies, the SVD's copies) and the exact rank (tangents mod p, the rows of S J, the
flint matrix and its copy). `check_memory` refuses with `ResourceError` (exit 2) when the
estimate exceeds the budget, naming the estimate and what to change. It is arithmetic on the
architecture and answers in milliseconds, before any large allocation. benchmarks/bench_memory.py
compares the estimates with measured peaks. See docs/scale.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..core.architecture import Architecture
from ..core.checks import bad_value
from ..core.formulas import ambient_bound, covering_count
from ..errors import ResourceError

GIB = 2 ** 30
MIB = 2 ** 20
# Share of the memory the kernel reports available used as the default budget.
DEFAULT_FRACTION = 0.8
# Resident size of a process that has imported torch and the package (measured: 0.22-0.3 GiB).
BASE_BYTES = 300 * MIB
_UNITS = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
# The block sizes of the computing modules, defined here (torch-free) and read by the modules, so
# that an estimate (and a refusal) needs no torch import and cannot drift from what runs.
# Bytes of Jacobian rows computed at once (`numerical`, `dask_rank`).
NUMERICAL_ROW_BLOCK_BYTES = 256 * MIB
# Bytes of Jacobian rows kept whole; past this they are folded into a triangular factor R with
# R^T R = J^T J (same singular values), which costs one extra QR.
NUMERICAL_KEEP_ROWS_BYTES = 3 * GIB
# Once the rows outnumber the columns and no longer fit in NUMERICAL_KEEP_ROWS_BYTES, they are
# kept as one n x n triangular factor, and new rows are folded into it (`fold.fold_rows_`)
# whenever this many bytes of them have come: the factor, not the rows, is then what memory holds.
NUMERICAL_FOLD_ROWS_BYTES = 512 * MIB
# Bytes of Jacobian-vector products computed at once (`jacobians`, `gauge`).
AUTODIFF_CHUNK_BYTES = 512 * MIB
# Bytes of rows mod p built at once (`exact`).
EXACT_CHUNK_BYTES = 256 * MIB
# Columns of the panels `fold.fold_rows_` reflects at once.
FOLD_PANEL = 64
# Bytes of a factor's rows that a tree step of the rank on Dask copies and folds at once.
DASK_FOLD_BLOCK_BYTES = 64 * MIB
# From this many free columns on, `numerical_dim` (route "auto") eliminates the last value matrix
# before reading the rank (`dimension.elimination`): the matrix it factorises loses d_l d_{l-1}
# columns. Below it the full matrix takes seconds, and results stay exactly as they were.
ELIMINATE_MIN_COLUMNS = 4096
# Resident size the Dask client adds to a process (its event loop, comms and graph state;
# measured: 21 MiB with a LocalCluster's scheduler in the same process).
DASK_CLIENT_BYTES = 50 * MIB
# Resident size a Dask worker process adds to torch and the package (measured: a worker of a
# 76-parameter rank peaked at 379 MiB, against 227 MiB for torch and the package alone).
DASK_WORKER_BYTES = 150 * MIB
# Token-id inputs: up to this many sequences, the exact rank is taken over all of them at once
# (`exact`'s forward-dual route).
EXACT_ALL_SEQUENCES = 4096
# int64 entries of the forward-dual intermediates computed at once (read by `fp_dual`; about
# 8 bytes each).
FP_DUAL_CHUNK_ENTRIES = 16 * 2 ** 20
# Workers of the LocalCluster a Dask rank starts when given no scheduler address (`dask_rank`).
LOCAL_WORKERS = 2


def available_memory() -> int:
    """Bytes the kernel reports available (MemAvailable in /proc/meminfo; else physical memory)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os  # noqa: PLC0415

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 * GIB


def parse_memory(value: object, name: str = "max_memory", available: int | None = None) -> int:
    """Bytes from '16G', '500M', '1.5GiB', '2T', a plain byte count, or a fraction '0.5' of the
    available memory (`available` bytes where given, e.g. a GPU's free memory); a malformed value
    is an InputError of one line.

    Example:
        >>> parse_memory("500M") == 500 * 2 ** 20
        True
    """
    if isinstance(value, bool):
        raise bad_value(name, "a size such as 16G or 500M, or a fraction such as 0.5", value,
                        "Pass e.g. --max-memory 16G.")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = repr(value)
    else:
        text = str(value).strip()
    match = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:I?B)?", text.upper())
    number = float(match.group(1)) if match else math.nan
    if not match or not math.isfinite(number) or number <= 0:
        raise bad_value(name, "a positive size such as 16G, 500M or 1.5GiB, or a fraction of the "
                        "available memory such as 0.5", value, "Pass e.g. --max-memory 16G.")
    unit = match.group(2)
    if not unit and number <= 1:
        return int(number * (available_memory() if available is None else available))
    if not unit and number != int(number):
        raise bad_value(name, "a whole number of bytes, a size with a unit, or a fraction <= 1",
                        value, "Pass e.g. --max-memory 16G.")
    return int(number * _UNITS[unit])


def resolve_budget(max_memory: object | None, available: int | None = None) -> int:
    """The budget in bytes: `max_memory` parsed, or DEFAULT_FRACTION of the available memory
    (`available` bytes where given, else the host's)."""
    if available is None:
        available = available_memory()
    if max_memory is None:
        return int(DEFAULT_FRACTION * available)
    return parse_memory(max_memory, available=available)


def format_bytes(n: float) -> str:
    """'30.2 GB' style (powers of 1024, one decimal)."""
    for unit, size in (("TB", 2 ** 40), ("GB", GIB), ("MB", MIB)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n / 2 ** 10:.1f} KB"


@dataclass(frozen=True)
class MemoryEstimate:
    """Estimated peak resident bytes of one computation, with the parts that make it up, and
    the number of samples N it was estimated at (0 where N plays no part)."""

    what: str
    peak: int
    parts: dict = field(default_factory=dict)
    advice: str = ""
    samples: int = 0

    def describe(self) -> str:
        """The estimate and its largest parts, in words."""
        big = sorted(self.parts.items(), key=lambda kv: -kv[1])[:3]
        return (f"{self.what}: about {format_bytes(self.peak)} peak ("
                + ", ".join(f"{k} {format_bytes(v)}" for k, v in big) + ")")


def check_memory(estimate: MemoryEstimate, max_memory: object | None = None,
                 skip=None, *, available: int | None = None,
                 where: str = "available") -> MemoryEstimate:
    """Raise ResourceError (one line: the estimate, the budget, what to change) when the estimate
    exceeds the budget; return the estimate otherwise. `skip()`, asked only when over budget,
    may waive the check (e.g. when the work will run on a GPU after all). The budget is taken
    from the host's available memory, or from `available` bytes (a GPU's free memory), which
    the message calls `where`."""
    if available is None:
        available = available_memory()
    budget = resolve_budget(max_memory, available)
    if estimate.peak > budget and not (skip is not None and skip()):
        source = ("--max-memory" if max_memory is not None
                  else f"{int(DEFAULT_FRACTION * 100)}% of the {format_bytes(available)} {where}")
        raise ResourceError(
            f"`max_memory` must be at least the estimated peak; got {format_bytes(budget)} "
            f"({source}) for {estimate.describe()}. {estimate.advice}; or raise --max-memory "
            f"if the machine has the memory.")
    return estimate


def on_gpu(estimate: MemoryEstimate) -> MemoryEstimate:
    """`estimate` for a run whose tensors live on a GPU: every part but the process itself
    (torch's resident size, host memory) is a tensor the run allocates there; the GPU's own
    copies in cuSOLVER stand where LAPACK's stand on the host."""
    parts = {k: v for k, v in estimate.parts.items() if k != "torch"}
    advice = estimate.advice.replace(", or --device cuda", "") + ", or a GPU with more memory"
    peak = estimate.peak - estimate.parts.get("torch", 0)
    return MemoryEstimate(estimate.what + " on the GPU", peak, parts, advice, estimate.samples)


def _valid_samples(samples: object) -> int | None:
    """N when it is a usable sample count (validated later by the computation), else None."""
    return samples if isinstance(samples, int) and not isinstance(samples, bool) and samples >= 1 else None


def gauge_applies(arch: Architecture) -> bool:
    """True when the gauge of `dimension.gauge` applies: the paper's model (one head, unfactored
    values, no residual, MLP or norm), softmax, a_i <= d_{i-1} and d_i <= d_{i-1} for 1 <= i < l."""
    if arch.attention != "softmax" or arch.is_block:
        return False
    keys_ok = all(a <= d for a, d in zip(arch.keys, arch.widths[:-1]))
    inter_ok = all(arch.widths[i] <= arch.widths[i - 1] for i in range(1, arch.n_layers))
    return keys_ok and inter_ok


def tangent_count(arch: Architecture) -> int:
    """Number of symmetry tangent rows the engines build: `symmetries.paper.symmetry_tangents`
    for the paper's model; for every other network an over-estimate of the rows
    `symmetries.registry.tangent_rows` stacks, n_params. (The registry builds its tangents in
    torch, and a plan imports none; over bench_memory.py's networks and the catalogue's tests the
    rows were at most 0.7 n_params.)"""
    if arch.is_block:
        return arch.n_params
    count = sum(a * a for a in arch.keys) + sum(d * d for d in arch.widths[1:-1])
    return count + (arch.n_layers if arch.attention == "lightning" else 0)


def _upper_guess(arch: Architecture) -> tuple[int, int]:
    """(tangent rows, columns the rank is read on). The paper's model: its tangents assumed
    independent (they are, at a generic point), the columns n_params less their count. Other
    networks: none of the registry's tangents assumed independent (their rank is only known
    once they are built, in torch), so the columns are n_params, an over-estimate of
    n_params - rank(tangents)."""
    rows = tangent_count(arch)
    if arch.is_block:
        return rows, arch.n_params
    return rows, max(1, arch.n_params - min(rows, arch.n_params - 1))


def _rank_bound(arch: Architecture) -> int:
    """The upper bound the first N is drawn for: the columns of `_upper_guess`, and for networks
    beyond the paper's model the ambient bound (`core.formulas.ambient_bound`) where it is
    smaller, as the engines take it (`numerical.NetworkRules`, `exact`'s forward-dual route)."""
    cols = _upper_guess(arch)[1]
    ambient = ambient_bound(arch) if arch.is_block else None
    return cols if ambient is None else min(cols, ambient)


def min_samples_required(arch: Architecture) -> int:
    """Smallest N with N t d_l >= n_params, so that the Jacobian can reach the parameter count
    (V for d_l with logits), and at most V^t, the inputs a vocabulary allows."""
    floor = math.ceil(arch.n_params / (arch.tokens * arch.output_width))
    return floor if arch.n_sequences is None else min(floor, arch.n_sequences)


# Rows of Y kept per sample after the elimination's sketch, in units of t(t - 1).
SKETCH_PER_SAMPLE = 2
# Bytes of group rows the elimination's first reduction rotates at once.
ELIMINATION_CHUNK_BYTES = 64 * MIB
# The first N of the eliminated route expects t(t - 1) rank per sample, with this margin.
ELIMINATION_RANK_MARGIN = 1.3


def elimination_samples(arch: Architecture, columns: int) -> int:
    """First N of the eliminated route: enough that N samples at t(t - 1) rank each (what one
    sample adds to rank Y on the two-layer networks of equal widths measured) exceed the reduced matrix's `columns` by
    `ELIMINATION_RANK_MARGIN`, and that Y has twice as many rows as columns, plus one sample.
    Growth in N corrects a first N that falls short."""
    d_l, d_in, t = arch.widths[-1], arch.widths[-2], arch.tokens
    by_rows = math.ceil((2 * columns / d_l + d_in) / t)
    by_rank = math.ceil(ELIMINATION_RANK_MARGIN * columns / max(1, t * (t - 1)))
    return max(2, by_rows + 1, by_rank + 1)


def eliminates(arch: Architecture) -> bool:
    """True when `numerical_dim` (route "auto") eliminates the last value matrix here."""
    return gauge_applies(arch) and _upper_guess(arch)[1] >= ELIMINATE_MIN_COLUMNS


def _factor_bytes(rows: int, cols: int) -> int:
    """Rows kept for the rank, their concatenation and the SVD's copies; past the keep threshold
    the triangular factor they are folded into."""
    kept = rows * cols * 8
    if kept <= NUMERICAL_KEEP_ROWS_BYTES:
        return 3 * kept  # kept rows, their concatenation, the scaled copy for svdvals (+ LAPACK)
    if rows >= cols:
        # An n x n factor folded in place (`fold.fold_rows_`): when it is made, the rows kept so
        # far beside it; when the rank is read, unit_scaled's two copies and the copy svdvals
        # takes (the 92,160-parameter network peaked at 13.6 GiB, about 4 factors beside its
        # group rows).
        r_bytes = cols * cols * 8
        return max(r_bytes + max(NUMERICAL_KEEP_ROWS_BYTES, r_bytes), 4 * r_bytes) \
            + NUMERICAL_FOLD_ROWS_BYTES
    r_bytes = min(rows, cols) * cols * 8
    return 2 * kept + max(kept, 2 * r_bytes)  # rows + concatenation + QR workspace / SVD


def _held_bytes(rows: int, cols: int) -> int:
    """Bytes the rows of the rank occupy between two readings (kept whole, or as the factor)."""
    kept = rows * cols * 8
    if kept > NUMERICAL_KEEP_ROWS_BYTES and rows >= cols:
        return cols * cols * 8 + NUMERICAL_FOLD_ROWS_BYTES
    return kept


def _eliminated_estimate(arch: Architecture, samples: int | None,
                         min_samples: int | None) -> MemoryEstimate:
    """Peak of the eliminated route (`dimension.elimination`): per block of samples, the
    Jacobian on the other free columns (with its reshaped and scaled copies), the group rows
    B^T J_r (one buffer, updated in place) and the rows of Y with their factorisation."""
    P = arch.n_params
    d_l, d_in, t = arch.widths[-1], arch.widths[-2], arch.tokens
    _, upper = _upper_guess(arch)
    cols = upper - d_l * d_in
    N = samples if samples is not None else max(elimination_samples(arch, cols), min_samples or 0)
    per_sample = t * d_l
    block = min(N, max(1, NUMERICAL_ROW_BLOCK_BYTES // (per_sample * cols * 8)))
    block_bytes = block * per_sample * cols * 8
    top = d_in * d_l * cols * 8
    y_rows = min(d_l * max(0, N * t - d_in), SKETCH_PER_SAMPLE * max(1, t * (t - 1)) * N)
    kept = y_rows * cols * 8
    held = _held_bytes(y_rows, cols)
    parts = {"torch": BASE_BYTES,
             "Jacobian block": 4 * block_bytes + min(AUTODIFF_CHUNK_BYTES, block_bytes),
             # the block's scaled rows, the rotation's chunks (64 MiB each) and the sketch; the
             # first reduction's complete orthogonal factor and its R
             "eliminated rows": top + 2 * block_bytes + 3 * ELIMINATION_CHUNK_BYTES + 2 * (d_in + block * t) ** 2 * 8,
             "rows and factorisation": _factor_bytes(y_rows, cols)}
    if kept <= NUMERICAL_KEEP_ROWS_BYTES:
        # svdvals reads the rows whole: the stacked rows, unit_scaled's two divided copies and
        # LAPACK's own copy are alive at once (the 40,960-parameter network peaked at 6.3 GiB).
        parts["rows and factorisation"] += kept
    peak = parts["torch"] + max(top + held + parts["Jacobian block"],
                                held + parts["eliminated rows"],
                                top + parts["rows and factorisation"])
    advice = (f"Use smaller --widths or --keys (rank taken on {cols} columns x {y_rows} rows "
              f"after eliminating the last value matrix here), fewer samples (--samples "
              f"{math.ceil(P / per_sample)} is the least), or --device cuda")
    return MemoryEstimate(f"numerical rank of {arch} ({P} parameters, N = {N})",
                          int(peak), parts, advice, N)


def _first_samples(arch: Architecture, samples: int | None, min_samples: int | None) -> int:
    """N of the numerical path's first pass (`numerical._grow_and_read`), or `samples`: N t d_l
    rows about twice the rank bound (`growth.first_target`); for networks beyond the paper's
    model at least `min_samples_required`, and with a vocabulary at least the covering
    sequences, or all V^t sequences where they are few (below the default cap on N)."""
    per_sample = arch.tokens * arch.output_width
    least = min_samples_required(arch) if arch.is_block else 2
    first = max(least, math.ceil(2 * _rank_bound(arch) / per_sample) + 1)
    if samples is not None:
        return samples
    target = max(first, min_samples or 0)
    if arch.vocab is not None:
        cap = max(8 * target, 64)  # growth.default_max_samples
        target = max(target, covering_count(arch))
        if arch.n_sequences <= max(cap, target):
            target = arch.n_sequences
    return target


def attention_work_bytes(arch: Architecture, n_samples: int) -> int:
    """Bytes of the least autodiff working set over `n_samples` samples: one Jacobian column (or
    row), whose forward pass holds per layer and head a t x t score matrix and its softmax (and
    their tangents) beside the t-token activations; `jacobians._chunk_columns` never makes a
    chunk smaller than this, so with many tokens it is the floor of every Jacobian path (t =
    100,000 needs 80 GB a sample and layer for one score matrix alone)."""
    t = arch.tokens
    widest = max(max(arch.widths), max(arch.mlp_widths), arch.input_width, arch.output_width)
    per_layer = t * (6 * widest + 3 * t * max(arch.head_counts))
    return n_samples * per_layer * arch.n_layers * 8


def _fewer_tokens(arch: Architecture, part: int) -> str:
    """', fewer --tokens (...)' when the t x t score matrices are most of `part`, else ''."""
    one = attention_work_bytes(arch, 1)
    return (f", fewer --tokens (the t x t scores of one sample take {format_bytes(one)})"
            if 2 * one >= part else "")


def _row_block_parts(arch: Architecture, n_block: int) -> dict:
    """Bytes of one block of Jacobian rows over `n_block` samples (the full rows, their autodiff
    intermediates, two reduced copies; the rotated copy and the dense tangents where no gauge
    applies)."""
    P = arch.n_params
    n_tangents, cols = _upper_guess(arch)
    block_rows = n_block * arch.tokens * arch.output_width
    if arch.is_block:
        # `jacobians.block_jacobian` maps every direction at once (jacfwd / jacrev) over at
        # most the first block's samples per call (`numerical.LocalRows` computes a block grown
        # past the first pass in pieces of that many samples, so it holds no more than this):
        # min(rows, P) directions, each holding about one layer's working set (forward mode
        # drops a layer's tangents before the next; reverse mode shares the saved activations,
        # counted once): measured 0.6-1.4 times one layer's `attention_work_bytes` on
        # bench_memory.py --blocks' networks, counted 1.5 times; then the unit rows' copy.
        work = attention_work_bytes(arch, n_block)
        intermediates = (min(block_rows, P) * (work // arch.n_layers) * 3 // 2 + work
                         + block_rows * P * 8)
    else:
        per_row = P + n_block * arch.tokens * max(arch.widths) * 6 * arch.n_layers
        intermediates = max(min(AUTODIFF_CHUNK_BYTES, block_rows * per_row * 8),
                            attention_work_bytes(arch, n_block))
    parts = {"Jacobian block": block_rows * P * 8 + intermediates + 2 * block_rows * cols * 8}
    if not gauge_applies(arch):
        parts["Jacobian block"] += block_rows * P * 8  # the rotated copy (ormqr)
        # Tangent rows (list + stack, a scaled copy, its QR) during the split; the QR stays.
        parts["symmetry tangents"] = 3 * n_tangents * P * 8
    return parts


def _block_samples(arch: Architecture) -> int:
    """Samples in one block of rows (`NUMERICAL_ROW_BLOCK_BYTES` of full Jacobian rows)."""
    return max(1, NUMERICAL_ROW_BLOCK_BYTES // (arch.tokens * arch.output_width * arch.n_params * 8))


def numerical_estimate(arch: Architecture, samples: int | None = None,
                       min_samples: int | None = None, route: str = "auto") -> MemoryEstimate:
    """Peak of `numerical_dim` for its first pass over N samples (N grows only when the rank has
    not saturated; growth past the fold threshold keeps the rows as a triangular factor).
    `route` as in `numerical_dim` ("full" for the whole Jacobian, as the certified path builds)."""
    if route == "eliminate" or (route == "auto" and eliminates(arch)):
        return _eliminated_estimate(arch, _valid_samples(samples), min_samples)
    P = arch.n_params
    _, upper = _upper_guess(arch)
    per_sample = arch.tokens * arch.output_width
    N = _first_samples(arch, _valid_samples(samples), min_samples)
    rows = N * per_sample
    cols = upper
    parts = {"torch": BASE_BYTES, **_row_block_parts(arch, min(N, _block_samples(arch)))}
    factor = _factor_bytes(rows, cols)
    parts["rows and factorisation"] = factor
    held = parts.get("symmetry tangents", 0) / 3
    peak = parts["torch"] + max(parts.get("symmetry tangents", 0),
                                held + parts["Jacobian block"] + factor)
    advice = (f"Use smaller --widths or --keys (rank taken on {cols} columns x {rows} rows here)"
              f"{_fewer_tokens(arch, parts['Jacobian block'])}, fewer "
              f"samples (--samples {math.ceil(P / per_sample)} is the least), or --device cuda")
    return MemoryEstimate(f"numerical rank of {arch} ({P} parameters, N = {N})",
                          int(peak), parts, advice, N)


def dask_client_estimate(arch: Architecture) -> MemoryEstimate:
    """Peak of the client of a numerical rank on Dask (`dimension.dask_rank`): it holds only the
    final triangular factor R (at most U x U, U the columns the rank is read on; its columns are
    scaled in place) and the copy LAPACK takes for the singular values, besides torch and the Dask
    client; receiving R may briefly hold its serialised bytes beside it."""
    _, cols = _upper_guess(arch)
    r_bytes = cols * cols * 8
    parts = {"torch": BASE_BYTES, "dask client": DASK_CLIENT_BYTES,
             "R factor and its singular values": 2 * r_bytes}
    advice = (f"Use smaller --widths or --keys (the client factors a {cols} x {cols} matrix "
              "here)")
    return MemoryEstimate(f"numerical rank of {arch} on Dask, client ({arch.n_params} "
                          "parameters)", int(sum(parts.values())), parts, advice)


def dask_fold_rows(cols: int) -> int:
    """Rows of a U x U factor (U = `cols`) that a tree step on Dask copies and folds into the
    other factor at once: a sixteenth of U, so that the blocks follow the triangle closely, at
    most DASK_FOLD_BLOCK_BYTES of them, at least a panel of the fold."""
    return max(FOLD_PANEL, min(-(-cols // 16), DASK_FOLD_BLOCK_BYTES // (8 * cols)))


def dask_tree_step_bytes(cols: int) -> int:
    """Working set of a tree step on Dask: the two U x U factors (one overwritten), a copied
    block of rows (`dask_fold_rows`) and the fold's panel temporaries (its reflectors' products
    with the rest of the factor, `fold._apply`)."""
    return (2 * cols * cols + min(cols, dask_fold_rows(cols)) * cols + 3 * FOLD_PANEL * cols) * 8


def dask_worker_estimate(arch: Architecture, samples: int | None = None) -> MemoryEstimate:
    """Peak of one task of a Dask worker in that rank (`dimension.dask_rank`), U the columns kept:
    a chunk computes its rows one block of the local path at a time and adds each block to its
    U x U factor as it comes (copied in up to U rows, folded in after), so it holds the factor
    and one block; a tree step holds the two U x U factors it combines, one overwritten, and a
    copied block of the other's rows with the fold's panel temporaries: 2 U^2 floats and a
    little, where a QR of the stacked pair held 5 U^2. Also the dense tangents where no gauge
    applies, and the worker process itself. Factors waiting on a worker for their tree step are
    not counted (Dask spills them to disk past its memory target)."""
    _, cols = _upper_guess(arch)
    per_sample = arch.tokens * arch.output_width
    N = _first_samples(arch, _valid_samples(samples), None)
    n_chunk = max(1, min(N, (2 * cols) // per_sample))
    parts = {"torch": BASE_BYTES, "dask worker": DASK_WORKER_BYTES,
             **_row_block_parts(arch, min(n_chunk, _block_samples(arch)))}
    # The factor and the fold's panel temporaries (the block of rows is the Jacobian block's).
    parts["chunk factor (U x U, rows added in place)"] = (cols * cols + 3 * FOLD_PANEL * cols) * 8
    parts["tree step (two U x U factors, one folded into the other)"] = dask_tree_step_bytes(cols)
    held = parts.get("symmetry tangents", 0) / 3
    peak = parts["torch"] + parts["dask worker"] + max(
        parts.get("symmetry tangents", 0),
        held + parts["Jacobian block"] + parts["chunk factor (U x U, rows added in place)"],
        held + parts["tree step (two U x U factors, one folded into the other)"])
    advice = ("Give the workers more memory (dask worker --memory-limit, shared by its threads), "
              "or use smaller --widths or --keys")
    return MemoryEstimate(f"numerical rank of {arch} on Dask, one worker thread", int(peak), parts,
                          advice, N)


def local_cluster_estimate(arch: Architecture, n_workers: int,
                           samples: int | None = None) -> MemoryEstimate:
    """Peak of a numerical rank on a LocalCluster this process starts: the client and its
    `n_workers` single-threaded workers share one machine, so their peaks add up (each worker
    checks only its own budget)."""
    client, worker = dask_client_estimate(arch), dask_worker_estimate(arch, samples)
    parts = {"client": client.peak, f"{n_workers} workers": n_workers * worker.peak}
    advice = ("Use smaller --widths or --keys, or pass --scheduler ADDRESS to run the workers "
              "on other machines")
    return MemoryEstimate(f"numerical rank of {arch} on a local Dask cluster (client and "
                          f"{n_workers} workers on this machine)",
                          int(sum(parts.values())), parts, advice, worker.samples)


def exact_estimate(arch: Architecture, certify: bool = True, samples: int | None = None) -> MemoryEstimate:
    """Peak of `exact_dim`: tangents mod p, the rows of S J (built chunk by chunk on all columns,
    kept on the free ones) and the flint matrix with the copy its rank works on; for networks
    beyond the paper's model, `_forward_dual_estimate`."""
    samples = _valid_samples(samples)
    if arch.is_block:
        return _forward_dual_estimate(arch, certify, samples)
    P = arch.n_params
    n_tangents, upper = _upper_guess(arch)
    n_rows = min(arch.widths[-1] * arch.tokens, arch.tokens ** 2 + arch.tokens)  # exact.rows_per_sample
    cols = upper if certify else P
    N = samples if samples is not None else max(1, math.ceil((cols + max(8, 0.05 * cols)) / n_rows))
    rows = N * n_rows
    kept = rows * cols * 8
    parts = {"torch": BASE_BYTES}
    # One chunk of full-width rows with its reverse-mode intermediates (exact._sample_rows sizes
    # chunks to EXACT_CHUNK_BYTES), their concatenation and the kept columns.
    per_sample = n_rows * (P + 6 * max(arch.widths) * arch.tokens * arch.n_layers) * 8
    chunk = 3 * max(min(EXACT_CHUNK_BYTES, N * per_sample), attention_work_bytes(arch, 1))
    if certify:
        # Dense int64 tangents, reduced in place; a second copy while the hidden and read-out
        # ones are appended (the staircase reads the rows without copying them).
        parts["symmetry tangents"] = 2 * n_tangents * P * 8
    # The tangents stay until the first chunk of rows has been checked against them.
    parts["rows of S J"] = kept + chunk + n_tangents * P * 8 * certify
    # The kept int64 rows, the flint matrix (filled entry by entry, 8 bytes an entry), the copy
    # that flint's rank eliminates in, and that elimination's block products: half a copy more
    # (measured: 72^4 / 24^3, t = 16 peaked at 5.66 GiB, 0.3 GiB + 3.54 times the kept rows).
    parts["flint matrix"] = int(3.5 * kept)
    peak = parts["torch"] + max(parts.get("symmetry tangents", 0), parts["rows of S J"],
                                parts["flint matrix"])
    advice = (f"Use smaller --widths or --keys (exact rank of a {rows} x {cols} matrix over F_p here)"
              f"{_fewer_tokens(arch, parts['rows of S J'])} or "
              f"--method numerical")
    return MemoryEstimate(f"exact rank of {arch} ({P} parameters, N = {N})", int(peak), parts,
                          advice, N)


def exact_first_samples(arch: Architecture, target: int, samples: int | None) -> int:
    """First N of the exact forward-dual route (`exact`): N V t rows (d_l t without a vocabulary)
    reaching `target` with a margin of 5% (at least 8), or `samples`; with a vocabulary at least
    the covering sequences, or all V^t sequences up to `EXACT_ALL_SEQUENCES`."""
    if samples is not None:
        return samples
    n = max(1, math.ceil((target + max(8, 0.05 * target)) / (arch.output_width * arch.tokens)))
    if arch.vocab is not None:
        n = max(n, covering_count(arch))
        if arch.n_sequences <= EXACT_ALL_SEQUENCES:
            n = arch.n_sequences
    return n


def _forward_dual_estimate(arch: Architecture, certify: bool, samples: int | None) -> MemoryEstimate:
    """Peak of `exact_dim`'s forward-dual route (networks beyond the paper's model): the
    registry's tangents mod p (`tangent_count`'s over-estimate) with their residues and the
    copy their pivots are read from, kept all run; the Jacobian mod p of the first N samples at
    once (its column chunks, their concatenation and its transposed copy, with twice the dual
    entries `fp_dual` computes at once, or one sample's t x t scores where they are larger); the kept rows on at most n_params columns, their concatenation and the
    flint matrix with the copy its rank works on. N is drawn for the rank bound (`_rank_bound`,
    an over-estimate) with `certify`, else for n_params."""
    P = arch.n_params
    n_tangents = tangent_count(arch) if certify else 0
    N = exact_first_samples(arch, _rank_bound(arch) if certify else P, samples)
    rows = N * arch.output_width * arch.tokens
    kept = rows * P * 8
    parts = {"torch": BASE_BYTES, "symmetry tangents": 3 * n_tangents * P * 8,
             "Jacobian mod p": 3 * kept + max(2 * FP_DUAL_CHUNK_ENTRIES * 8,
                                              attention_work_bytes(arch, 1)),
             "flint matrix": int(4.5 * kept)}
    held = n_tangents * P * 8
    peak = parts["torch"] + max(parts["symmetry tangents"],
                                held + max(parts["Jacobian mod p"], parts["flint matrix"]))
    advice = (f"Use smaller --widths or --keys (exact rank of a {rows} x {P} matrix over F_p "
              f"here){_fewer_tokens(arch, parts['Jacobian mod p'])}, fewer --samples, or "
              f"--method numerical")
    return MemoryEstimate(f"exact rank of {arch} ({P} parameters, N = {N})", int(peak), parts,
                          advice, N)


# Bits of the ball arithmetic of the certified path (`ball.DEFAULT_PRECISION` reads it).
BALL_DEFAULT_PRECISION = 128


def certified_softmax_estimate(arch: Architecture, samples: int | None = None,
                               precision: int = BALL_DEFAULT_PRECISION) -> MemoryEstimate:
    """Peak of the certified softmax path: the float Jacobian that selects the block (as the
    numerical path), plus the r x r ball block and the copy its determinant works on. An arb
    entry holds a 48-byte header and the midpoint's limbs at `precision` bits."""
    base = numerical_estimate(arch, samples, route="full")
    upper = _rank_bound(arch)
    ball = 2 * upper * upper * (48 + 2 * math.ceil(precision / 64) * 8)
    parts = dict(base.parts, **{"ball block": ball})
    return MemoryEstimate(base.what.replace("numerical rank", "certified rank"), base.peak + ball,
                          parts, base.advice.replace(", or --device cuda", ""), base.samples)


def point_estimate(arch: Architecture, samples: int, certify: bool,
                   precision: int = BALL_DEFAULT_PRECISION) -> MemoryEstimate:
    """Peak of `rank_at_point` over `samples` inputs: the whole float Jacobian (N t d_l rows,
    n_params columns) with its row-scaled copy and the copy LAPACK takes for the singular
    values, the autodiff working set, and for a proof the r x r ball block and its copy."""
    P = arch.n_params
    rows = samples * arch.tokens * arch.output_width
    parts = {"torch": BASE_BYTES, "Jacobian and its copies": 3 * rows * P * 8,
             "autodiff": max(min(AUTODIFF_CHUNK_BYTES, rows * P * 8),
                             attention_work_bytes(arch, samples))}
    if certify:
        parts["ball block"] = 2 * P * P * (48 + 2 * math.ceil(precision / 64) * 8)
    advice = (f"Use fewer samples (--samples {math.ceil(P / (arch.tokens * arch.output_width))} "
              "is the least) or fewer tokens")
    return MemoryEstimate(f"rank at a point of {arch} ({P} parameters, N = {samples})",
                          int(sum(parts.values())), parts, advice, samples)
