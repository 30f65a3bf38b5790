"""The one rule that decides a floating-point rank, with its named tolerances.

Every floating-point rank in the package (dimensions, fibers, witnesses, point classification,
weight conversions, symmetry splits) is read by `numerical_rank` from singular values, and every
numerical result records `RANK_RULE` (or its own `min_gap`) so a reader knows what decided it.

The rule (the gap rule): with singular values s_1 >= s_2 >= ... of an m x n matrix, the
round-off floor is f = eps * max(m, n) * s_1 (eps = 2^-52 in float64). Values below f are
clipped to f and a sentinel f is appended; the rank r is the position of the largest drop
log10(s_r / s_{r+1}) (the gap, in decades). The rank is *settled* only when all three hold:

- the gap is at least `MIN_GAP_DECADES` decades;
- no other drop comes within `RUNNER_UP_MARGIN_DECADES` of it (a competing gap);
- s_{r+1} is within `ROUNDOFF_FACTOR` of the floor (the values below the gap are round-off,
  not a small but real direction).

Otherwise the rank is *ambiguous*: a best guess, never reported as settled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Decades of separation between sigma_r and sigma_{r+1} needed to settle a rank.
MIN_GAP_DECADES = 4.0
# A second drop at least this much smaller than the largest one; closer ones compete.
RUNNER_UP_MARGIN_DECADES = 2.0
# sigma_{r+1} may stand at most this factor above the round-off floor.
ROUNDOFF_FACTOR = 1e3
# Fast path of the symmetry split: |R_kk| >= this times max |R_jj| in a QR of tangent vectors
# accepts them as independent without an SVD (a missed dependence is caught by the leak check).
R_DIAGONAL_INDEPENDENCE = 1e-8
# Machine epsilon of float64, the precision every numerical rank is read in.
FLOAT64_EPS = 2.0 ** -52
# cuSOLVER driver of the SVDs a rank is read from when the matrix is on a GPU: the QR-based
# gesvd, which torch's documentation names for matrices that are not well conditioned or where
# precision matters. A rank matrix is both by design (the values below its gap are round-off);
# torch's default on a GPU, the Jacobi method gesvdj, is the one it names for well-conditioned
# matrices. On the CPU, LAPACK (no driver).
CUDA_SVD_DRIVER = "gesvd"

RANK_RULE = {
    "rule": "largest singular-value gap",
    "min_gap_decades": MIN_GAP_DECADES,
    "runner_up_margin_decades": RUNNER_UP_MARGIN_DECADES,
    "roundoff_factor": ROUNDOFF_FACTOR,
    "floor": "eps * max(m, n) * sigma_1",
}


def rank_rule(min_gap: float = MIN_GAP_DECADES) -> dict:
    """The rule's description with the gap threshold actually used (for result records)."""
    return dict(RANK_RULE, min_gap_decades=min_gap)


@dataclass(frozen=True)
class NumericalRank:
    """A rank read off singular values by their largest gap.

    `gap` is log10(sigma_r / sigma_{r+1}) in decades, where sigma_{n+1} stands for the
    round-off floor eps * max(rows, cols) * sigma_1 and values below the floor are clipped to it.
    """

    rank: int
    gap: float
    sigma_before: float
    sigma_after: float
    runner_up_gap: float
    floor: float = 0.0

    def is_ambiguous(self, min_gap: float = MIN_GAP_DECADES) -> bool:
        """Not settled: too small a gap, a second gap nearly as large, or a singular value below
        the gap standing well above round-off (a tiny but real direction, not noise)."""
        return (self.gap < min_gap or self.runner_up_gap > self.gap - RUNNER_UP_MARGIN_DECADES
                or self.sigma_after > ROUNDOFF_FACTOR * self.floor)

    def ambiguity_note(self, min_gap: float = MIN_GAP_DECADES) -> str:
        """Why the rank is not settled, in one line (for result notes)."""
        return (f"singular-value gap {self.gap:.2f} decades (runner-up {self.runner_up_gap:.2f}, "
                f"sigma_r+1 = {self.sigma_after:.1e} vs round-off {self.floor:.1e}); need a gap "
                f">= {min_gap} decades, a clear runner-up margin and sigma_r+1 near round-off")

    def is_settled(self, min_gap: float = MIN_GAP_DECADES) -> bool:
        """The negation of `is_ambiguous`."""
        return not self.is_ambiguous(min_gap)


def numerical_rank(singular_values, n_rows: int, n_cols: int) -> NumericalRank:
    """Rank from the largest gap in the singular values (any order), read in float64.

    `singular_values` may be a torch tensor, a numpy array or a sequence; `n_rows` x `n_cols`
    is the shape of the matrix they came from (it scales the round-off floor).

    Example:
        >>> r = numerical_rank([3.0, 1.0, 1e-15], 3, 3)
        >>> (r.rank, r.is_settled())
        (2, True)
    """
    values = sorted((abs(float(v)) for v in _as_list(singular_values)), reverse=True)
    if not values or values[0] == 0.0:
        return NumericalRank(0, math.inf, 0.0, 0.0, 0.0)
    floor = values[0] * FLOAT64_EPS * max(n_rows, n_cols)
    clipped = [max(v, floor) for v in values] + [floor]
    logs = [math.log10(v) for v in clipped]
    gaps = [logs[k] - logs[k + 1] for k in range(len(values))]
    order = sorted(range(len(gaps)), key=lambda k: gaps[k], reverse=True)
    r = order[0] + 1
    runner = gaps[order[1]] if len(gaps) > 1 else 0.0
    after = values[r] if r < len(values) else 0.0
    return NumericalRank(r, gaps[r - 1], values[r - 1], after, runner, floor)


def matrix_rank(matrix) -> NumericalRank:
    """`numerical_rank` of the singular values of a 2-D torch tensor or numpy array (float64)."""
    import torch  # noqa: PLC0415

    M = torch.as_tensor(matrix).detach().to("cpu", torch.float64)
    if M.ndim != 2 or M.numel() == 0:
        return NumericalRank(0, math.inf, 0.0, 0.0, 0.0)
    return numerical_rank(torch.linalg.svdvals(M), *M.shape)


def svd_driver(matrix) -> str | None:
    """The `driver` argument of torch's SVDs for a rank read from `matrix`: `CUDA_SVD_DRIVER` on
    a GPU, None (LAPACK) on the CPU, where torch accepts no other."""
    return CUDA_SVD_DRIVER if matrix.is_cuda else None


def singular_values(matrix):
    """`torch.linalg.svdvals` of a torch tensor with the driver a rank needs (`svd_driver`)."""
    import torch  # noqa: PLC0415  (only on the computing path)

    return torch.linalg.svdvals(matrix, driver=svd_driver(matrix))


def clearly_independent(r_diagonal) -> bool:
    """True when a QR's diagonal shows the columns clearly independent (no SVD needed).

    Used only as a fast path: when it says False the caller falls back to `numerical_rank`.
    """
    values = [abs(float(v)) for v in _as_list(r_diagonal)]
    return bool(values) and min(values) > R_DIAGONAL_INDEPENDENCE * max(values)


def _as_list(values) -> list:
    if hasattr(values, "detach"):
        values = values.detach().to("cpu").double().tolist()
    elif hasattr(values, "tolist"):
        values = values.tolist()
    return list(values)


def unit_scaled(matrix, dim: int, inplace: bool = False):
    """`matrix` with every slice along `dim` scaled to unit 2-norm (zero slices stay zero).

    Scaling rows or columns keeps the rank. The largest |entry| of each slice is divided out
    first, so that a slice whose entries are near 1e200 does not overflow when squared for its
    norm (torch's norm would give inf and turn the slice into zeros, lowering the rank).
    `inplace` scales `matrix` itself, with no temporary of its size (the same values).
    """
    import torch  # noqa: PLC0415  (only on the computing path)

    tiny = torch.finfo(matrix.dtype).tiny
    if inplace:
        peak = torch.maximum(matrix.amax(dim=dim, keepdim=True), -matrix.amin(dim=dim, keepdim=True))
        matrix.div_(peak.clamp(min=tiny))
        return matrix.div_(torch.linalg.vector_norm(matrix, dim=dim, keepdim=True).clamp(min=tiny))
    peak = matrix.abs().amax(dim=dim, keepdim=True).clamp(min=tiny)
    scaled = matrix / peak
    return scaled / scaled.norm(dim=dim, keepdim=True).clamp(min=tiny)
