"""`neuromanifold_dim`: the dimension of a neuromanifold by the method asked for.

Methods:
  numerical  rank of the float64 Jacobian at a random point, decided by the gap rule
             (`dimension.rank`); `ambiguous` when the gap is small or N did not saturate.
  exact      rank over F_p at a random point: a proven lower bound (lightning only).
  certified  that lower bound together with the upper bound n_params - rank(symmetry tangents);
             `certified` when they meet (lightning only).
  auto       certified for lightning, numerical for softmax.
"""

from __future__ import annotations

from typing import Literal

from ..core.architecture import Architecture
from ..core.checks import METHODS, bad_value, check_architecture, check_choice
from .rank import MIN_GAP_DECADES
from .result import DimensionResult, Progress

MethodChoice = Literal["auto", "numerical", "exact", "certified"]
DeviceChoice = Literal["cpu", "cuda", "auto"]


def neuromanifold_dim(arch: Architecture, *, method: MethodChoice = "auto",
                      samples: int | None = None, seed: int = 0, device: DeviceChoice = "cpu",
                      min_gap: float = MIN_GAP_DECADES, prime: int | None = None,
                      progress: Progress | None = None,
                      max_memory: str | float | int | None = None) -> DimensionResult:
    """Dimension of the neuromanifold of `arch`, by `method` (see the module docstring).

    Args:
        arch: the network.
        method: `auto`, `numerical`, `exact` or `certified`.
        samples: input samples N; by default N grows until the rank saturates.
        seed: user seed; every random draw comes from a stream derived from it.
        device: `cpu`, `cuda` or `auto` (numerical method only).
        min_gap: decades of singular-value gap needed to settle a numerical rank.
        prime: the prime p of the exact methods (default 2147483629).
        progress: called with one line per phase (for a progress display).
        max_memory: budget for the estimated peak (bytes, '16G', or a fraction of the available
            memory; default 80% of it): `ResourceError` before any large allocation when the
            estimate (`dimension.memory`) exceeds it. Host memory: not checked on a GPU.

    Example:
        >>> r = neuromanifold_dim(Architecture((3, 3, 3), (2, 2), 3), method="numerical")
        >>> r.dimension + r.fiber_dim == r.n_params
        True
    """
    check_architecture(arch)
    method = check_choice("method", method, METHODS)
    if method in ("exact", "certified") and not arch.is_polynomial:
        raise bad_value("method", "'numerical' or 'auto' for softmax networks and other non-polynomial "
                        "ones (relu/gelu/tanh MLPs, norms)", method,
                        "Softmax networks are not polynomial (nor are relu/gelu/tanh MLPs or "
                        "norms), so there is no exact rank over F_p; use --method numerical.")
    if method == "auto":
        method = "certified" if arch.is_polynomial else "numerical"
    if method == "numerical":
        if prime is not None:
            raise bad_value("prime", "given only with the exact or certified method", prime,
                            "Drop the prime, or ask for method 'certified' of a lightning network.")
        from .memory import check_memory, numerical_estimate  # noqa: PLC0415

        if device != "cuda":  # host memory; checked before torch is imported, so refusals are quick
            check_memory(numerical_estimate(arch, samples), max_memory,
                         skip=lambda: device == "auto" and _cuda_available())
        if arch.is_block:
            from .blocks_numerical import block_numerical_dim  # noqa: PLC0415

            return block_numerical_dim(arch, samples=samples, seed=seed, device=device,
                                       min_gap=min_gap, progress=progress)
        from .numerical import numerical_dim  # noqa: PLC0415

        return numerical_dim(arch, samples=samples, seed=seed, device=device, min_gap=min_gap,
                             progress=progress)
    check_choice("device", device, ("cpu", "cuda", "auto"))
    if device == "cuda":
        raise bad_value("device", "'cpu' (or 'auto') for the exact methods", device,
                        "Exact arithmetic over F_p runs on the CPU; drop --device or use "
                        "--method numerical for a GPU run.")
    from .memory import check_memory, exact_estimate  # noqa: PLC0415

    check_memory(exact_estimate(arch, method == "certified", samples), max_memory)
    options = {} if prime is None else {"prime": prime}
    if arch.is_block:
        from .modular_blocks import block_exact_dim  # noqa: PLC0415

        return block_exact_dim(arch, certify=(method == "certified"), samples=samples, seed=seed,
                               progress=progress, **options)
    from .exact import exact_dim  # noqa: PLC0415

    options = {} if prime is None else {"prime": prime}
    return exact_dim(arch, certify=(method == "certified"), samples=samples, seed=seed,
                     progress=progress, **options)


def _cuda_available() -> bool:
    import torch  # noqa: PLC0415

    return torch.cuda.is_available()
