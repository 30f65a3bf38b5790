"""Floating-point Jacobians of W -> (phi_W(X_1), ..., phi_W(X_N)) and their numerical rank.

Forward mode (torch.func.jvp under vmap over chunks of basis directions), float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.func import jvp, vmap

from .architecture import Architecture
from .maps import forward
from .parameters import unflatten

# Bytes one chunk of Jacobian columns may use for its intermediates.
_CHUNK_BYTES = 512 * 2 ** 20


def _chunk_columns(arch: Architecture, n_samples: int, itemsize: int) -> int:
    per_column = n_samples * arch.tokens * (max(arch.widths) * 6 + arch.tokens * 3) * itemsize
    per_column *= arch.n_layers
    return max(1, min(arch.n_params, _CHUNK_BYTES // max(per_column, 1)))


def jacobian(arch: Architecture, params: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """J = d vec(phi_W(X_1..X_N)) / dW, shape (N * d_l * t, n_params), rows ordered (n, d_l, t).

    Computed in forward mode, in the dtype and on the device of `params`.
    """
    def f(w: torch.Tensor) -> torch.Tensor:
        return forward(arch, unflatten(arch, w), X).reshape(-1)

    def column(direction: torch.Tensor) -> torch.Tensor:
        return jvp(f, (params,), (direction,))[1]

    n = arch.n_params
    chunk = _chunk_columns(arch, X.shape[0], params.element_size())
    eye = torch.eye(n, dtype=params.dtype, device=params.device)
    cols = [vmap(column)(eye[start: start + chunk]) for start in range(0, n, chunk)]
    return torch.cat(cols).T


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

    def is_ambiguous(self, min_gap: float) -> bool:
        """Too small a gap, or a second gap nearly as large: the rank is not settled."""
        return self.gap < min_gap or self.runner_up_gap > self.gap - 2.0


def numerical_rank(singular_values: torch.Tensor, n_rows: int, n_cols: int) -> NumericalRank:
    """Rank from the largest gap in the singular values (descending), in float64."""
    s = singular_values.detach().to("cpu", torch.float64)
    if s.numel() == 0 or float(s[0]) == 0.0:
        return NumericalRank(0, math.inf, 0.0, 0.0, 0.0)
    floor = float(s[0]) * torch.finfo(torch.float64).eps * max(n_rows, n_cols)
    clipped = torch.cat([s.clamp(min=floor), torch.tensor([floor], dtype=torch.float64)])
    logs = clipped.log10()
    gaps = logs[:-1] - logs[1:]
    order = torch.argsort(gaps, descending=True)
    r = int(order[0]) + 1
    runner = float(gaps[order[1]]) if gaps.numel() > 1 else 0.0
    after = float(s[r]) if r < s.numel() else 0.0
    return NumericalRank(r, float(gaps[r - 1]), float(s[r - 1]), after, runner)
