"""Is a softmax point numerically saturated? A float64 rank read there may be too low.

NOTE: [saturated softmax]
The Jacobian of a softmax column s = softmax(z) with respect to its logits is diag(s) - s s^T;
every entry is at most m = 1 - max_j s_j (the mass off the top key) in absolute value. When the
logits of a column are far apart (a small temperature, huge weights or inputs), m falls below
round-off: the column's Q and K derivatives become exact zeros or noise, and the rows of that
sample say nothing about Q and K. A float64 rank read from such rows can be too low with a
clean gap (issue 26: 11 `settled` where the dimension is 25), which the gap rule cannot see.
A column counts as saturated when m < SATURATION_MASS (sqrt of float64's eps), and the point
when more than SATURATED_SHARE of its columns (over samples, layers and heads) are. Measured
over 500 samples, 3 seeds, six networks (plain, deep, one key, residual heads, a normed relu
MLP): at the random points the engines draw (logits over tau of order one,
`core.parameters.score_factor`) at most 6% of the columns are saturated (a 2-token,
one-key layer at tau = 0.01; 0.04% or less for most), while the draws that read 11 and 12
(logits times 1/tau) saturate 37% to 100% of them. At a saturated point a rank below the
symmetry bound is never `settled`: it is `ambiguous`, which `auto` escalates to the certified
path. A rank that meets the bound is unaffected (it cannot be too low). A warning sign, not a
proof either way.
"""

from __future__ import annotations

import torch

# A softmax column whose mass off its top key is below this is saturated (NOTE above).
SATURATION_MASS = 1e-8
# A point is saturated when more than this share of its softmax columns are.
SATURATED_SHARE = 0.25


def saturation_counts(weights: list[torch.Tensor]) -> tuple[int, int]:
    """(saturated, total) softmax columns (axis -2 sums to one): saturated when
    m = 1 - max_j s_j < SATURATION_MASS. One-token layers are skipped (a 1 x 1 softmax is the
    constant 1, and its Q, K are symmetry directions anyway)."""
    total = saturated = 0
    for S in weights:
        if S.shape[-2] < 2 or S.numel() == 0:
            continue
        mass = S.sum(dim=-2) - S.max(dim=-2).values
        total += mass.numel()
        saturated += int((mass < SATURATION_MASS).sum())
    return saturated, total


def saturation_note(counts: tuple[int, int], rank: int, bound: int) -> str | None:
    """The note that keeps a rank below `bound` from `settled` at a saturated point, else None."""
    saturated, total = counts
    if not total or saturated <= SATURATED_SHARE * total or rank >= bound:
        return None
    return (f"softmax saturated at this point ({saturated} of {total} softmax columns are one-hot "
            f"to within {SATURATION_MASS:g}): their Q, K derivatives are lost to round-off, so rank "
            f"{rank} below the symmetry bound {bound} is not settled (NOTE: [saturated softmax] "
            "in dimension/saturation.py)")
