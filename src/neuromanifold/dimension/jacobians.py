"""Floating-point Jacobians of W -> (phi_W(X_1), ..., phi_W(X_N)) and their numerical rank.

Forward mode (torch.func.jvp under vmap over chunks of basis directions), float64.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch.func import jacfwd, jacrev, jvp, vmap

from ..core.architecture import Architecture
from ..core.limits import check_projection
from ..core.blocks import block_forward_flat, block_reverse_jacobian
from ..core.finite import require_finite
from ..core.maps import forward
from ..core.parameters import unflatten
from ..core.rank import clearly_independent, matrix_rank, numerical_rank, svd_driver, unit_scaled
from .memory import AUTODIFF_CHUNK_BYTES as _CHUNK_BYTES  # one chunk of Jacobian columns
from .result import Progress



def _chunk_columns(arch: Architecture, n_samples: int, itemsize: int) -> int:
    per_column = n_samples * arch.tokens * (max(arch.widths) * 6 + arch.tokens * 3) * itemsize
    per_column *= arch.n_layers
    return max(1, min(arch.n_params, _CHUNK_BYTES // max(per_column, 1)))


def jacobian(arch: Architecture, params: torch.Tensor, X: torch.Tensor,
             progress: Progress | None = None) -> torch.Tensor:
    """J = d vec(phi_W(X_1..X_N)) / dW, shape (N * d_l * t, n_params), rows ordered (n, d_l, t).

    Networks beyond the paper's model (heads, values, residual, MLP, norms) take
    `block_jacobian`. For the paper's model: forward mode (one jvp per parameter) when J has at
    least as many rows as columns, reverse mode (one vjp per output coordinate) otherwise; both batched with vmap, in chunks that keep
    the intermediates near 512 MiB, in the dtype and on the device of `params`.
    Raises ComputationError when an entry overflows (inf or nan): no rank is read from it.
    `progress` gets a line per chunk of forward mode once a second has passed (deep networks).
    """
    if arch.is_block:
        return block_jacobian(arch, params, X)

    def f(w: torch.Tensor) -> torch.Tensor:
        return forward(arch, unflatten(arch, w), X).reshape(-1)

    n = arch.n_params
    n_rows = X.shape[0] * arch.widths[-1] * arch.tokens
    if n_rows < n:
        per_row = (n + X.shape[0] * arch.tokens * max(arch.widths) * 6 * arch.n_layers)
        chunk = max(1, min(n_rows, _CHUNK_BYTES // (per_row * params.element_size())))
        return finite_rows(jacrev(f, chunk_size=chunk)(params))

    def column(direction: torch.Tensor) -> torch.Tensor:
        return jvp(f, (params,), (direction,))[1]

    chunk = _chunk_columns(arch, X.shape[0], params.element_size())
    eye = torch.eye(n, dtype=params.dtype, device=params.device)
    cols = []
    t0 = last = time.perf_counter()
    for start in range(0, n, chunk):
        cols.append(vmap(column)(eye[start: start + chunk]))
        now = time.perf_counter()
        remaining = check_projection(min(start + chunk, n), n, now - t0,
                                     f"the float Jacobian pass over {X.shape[0]} samples")
        if progress is not None and now - last >= 1.0:
            last = now
            progress(f"float Jacobian columns {min(start + chunk, n)}/{n} for {X.shape[0]} "
                     f"samples ({now - t0:.1f} s; about {remaining:.0f} s more for this pass)")
    return finite_rows(torch.cat(cols).T)


def block_jacobian(arch: Architecture, params: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """J of a network beyond the paper's model, by autodiff of `core.blocks.block_forward`
    (reverse mode when J has fewer rows than columns, else forward mode); same shape and row
    order as `jacobian`. Raises ComputationError when an entry overflows."""
    rows = X.shape[0] * arch.widths[-1] * arch.tokens
    if rows < arch.n_params:
        return finite_rows(block_reverse_jacobian(arch, params, X))

    def f(w):
        return block_forward_flat(arch, w, X).reshape(-1)
    return finite_rows(jacfwd(f)(params))


def family_ranks(tangents: torch.Tensor, counts, rank_of=None) -> dict[str, int]:
    """Incremental rank of each symmetry family (`counts`: (name, rows) in order): numerical by
    default, or by `rank_of` (a matrix -> its rank; `fp_dual.family_ranks_mod_p`). A family
    without rows adds nothing, and its prefix's rank is not computed again."""
    rank_of = rank_of or (lambda M: matrix_rank(M).rank)
    ranks, start, previous = {}, 0, 0
    for family, n in counts:
        stop = start + n
        total = previous if n == 0 else rank_of(tangents[:stop])
        ranks[family] = total - previous
        previous, start = total, stop
    return ranks


def finite_rows(J: torch.Tensor) -> torch.Tensor:
    require_finite(J, "the Jacobian entries", fix="Float64 cannot hold this network's values at "
                   "random weights; for lightning attention use the exact method (--method exact).")
    return J


@dataclass(frozen=True)
class KernelSplit:
    """An orthonormal basis Q = [Q1 Q2] of R^P with Q1 spanning the known symmetry tangents.

    Symmetry tangents lie in ker J, so rank J = rank(J Q2): the rank is read off a matrix with
    P - r columns instead of P (the dense SVD is the cost, cubic in the columns). `leak` measures
    ||J Q1|| / ||J||, which must be round-off for that to hold.
    NOTE: [Safety of the split] Q1 comes from a Householder QR of T^T when its diagonal shows no
    dependence, else from the right singular vectors of T above its largest singular-value gap.
    Missing a true tangent direction is harmless (Q2 then keeps a kernel direction); dropping a
    direction outside ker J would lower the rank, and the leak ||J Q1|| / ||J||, checked by the
    caller, exposes exactly that. (Eigenvalues of T T^T are not used: their noise sits near
    sqrt(eps) and would be counted as tangents.)
    """

    householder: torch.Tensor  # geqrf factors of T^T U_r, shape (P, r)
    tau: torch.Tensor
    rank: int

    @classmethod
    def from_tangents(cls, tangents: torch.Tensor) -> "KernelSplit":
        """Split off the span of the rows of `tangents` (n_tangents, P)."""
        n_params = tangents.shape[1]
        if tangents.shape[0] == 0:
            return cls(torch.zeros((n_params, 0), dtype=tangents.dtype, device=tangents.device),
                       torch.zeros(0, dtype=tangents.dtype, device=tangents.device), 0)
        scaled = unit_scaled(tangents, dim=1)
        # Usual case, linearly independent tangents: one Householder QR of T^T (level-3 BLAS).
        householder, tau = torch.geqrf(scaled.T)
        if clearly_independent(householder.diagonal()):
            return cls(householder, tau, scaled.shape[0])
        # Dependent tangents (e.g. a_i > d_{i-1}): their leading right singular vectors.
        _, sv, vh = torch.linalg.svd(scaled, full_matrices=False, driver=svd_driver(scaled))
        r = numerical_rank(sv, *scaled.shape).rank
        householder, tau = torch.geqrf(vh[:r].T.contiguous())
        return cls(householder, tau, r)

    def rows(self, arch: Architecture, params: torch.Tensor, X: torch.Tensor,
             progress: Progress | None = None) -> tuple[torch.Tensor, float]:  # noqa: ARG002
        """(J Q2, leak) for the samples X, J with unit rows (row scaling keeps the rank and
        equilibrates a degree-3^l polynomial's dynamic range)."""
        J = jacobian(arch, params, X)
        J = J / J.norm(dim=1, keepdim=True).clamp(min=torch.finfo(J.dtype).tiny)
        return self.reduce(J)

    def note(self, leak: float) -> str:
        """How the rank was read, for the result's notes."""
        return (f"rank read on the complement of {self.rank} symmetry tangents "
                f"(their Jacobian image: {leak:.1e} of the total)")

    def reduce(self, J: torch.Tensor) -> tuple[torch.Tensor, float]:
        """(J Q2, ||J Q1||_F / ||J||_F) for a block of rows J (m, P)."""
        if self.rank == 0:
            return J, 0.0
        rotated = torch.ormqr(self.householder, self.tau, J.T, left=True, transpose=True)
        leak = float(rotated[: self.rank].norm() / J.norm().clamp(min=torch.finfo(J.dtype).tiny))
        return rotated[self.rank:].T.contiguous(), leak
