"""The last layer's value matrix eliminated from the Jacobian exactly: rank read on what is left.

The network's output is linear in the last value matrix: phi_W(X) = V_l W(X) with
W(X) = Z_{l-1} S_l (d_{l-1} x t), the last layer's input mixed by its attention. The Jacobian's
columns for V_l are therefore a Kronecker block: the row (n, r, s) (sample n, output row r,
token s) has entry W_n[c, s] in column (r, c) and 0 in every column (r', c) with r' != r.
Grouping the rows by r, every group sees the same (N t) x d_{l-1} matrix M (row (n, s) is
W_n[:, s]^T) in its own d_{l-1} columns. One orthogonal matrix [B C] with B spanning the columns
of M turns each group [J_r | M] into [[B^T J_r, B^T M], [C^T J_r, 0]], so

    rank J = d_l * rank M + rank Y,   Y = the rows C^T J_r of every group, on the other columns.

With the gauge of `gauge.py` every entry of V_l is a free column, so the rank is read on Y, a
matrix with |free| - d_l d_{l-1} columns instead of |free| (7,680 instead of 24,064 for the
40,960-parameter softmax network); the d_l d_{l-1} columns of V_l are accounted for by
rank M = d_{l-1}, read with the same gap rule on M's triangular factor. The transformation is
orthogonal and the split exact, so (like a QR) it is backward stable: Y is the exact reduction
of a Jacobian perturbed at round-off.

Samples are folded in as they come: the group rows B^T J_r (d_{l-1} rows per group, one buffer
updated in place) and M's triangular factor R_M are kept, and a new block of samples is reduced
by the QR of [R_M; M_new], whose orthogonal factor is applied to every group at once
(`fold.fold_rows_`: the reflectors exploit R_M's triangle, so a block of n t rows costs about
4 n t d_{l-1} operations per group column, and nothing the size of the group rows is copied). The
rows it adds to Y never change again, so growing N only appends rows (no recomputation).
Rows are equilibrated by one factor per (n, s), shared by all r, which keeps the Kronecker
block intact.

Y has d_l t rows per sample, but a sample adds far less to its rank: t(t - 1) on the two-layer
networks of equal widths measured, up to about twice that on others (docs/scale.md; the scores
of one sample, t columns summing to one, have t(t - 1) degrees of freedom). Each block's rows are therefore compressed by a Gaussian sketch to
`SKETCH_PER_SAMPLE` t(t - 1) rows per sample (only where that is fewer). A sketch never raises
a rank, and a block whose rows add rank to Y adds rank to the sketched rows too (almost surely:
random combinations of rows not all in a subspace are not in it), so a sketch too small for
a block only slows the growth in N: it cannot end it early nor overstate the rank. See
docs/scale.md.
"""

from __future__ import annotations

import torch

from ..core.architecture import Architecture
from ..core.maps import mix_values, attention_scores
from ..core.parameters import unflatten
from .fold import fold_rows_
from .gauge import GaugeSplit, forward_columns
from .jacobians import finite_rows
from .memory import ELIMINATION_CHUNK_BYTES as _CHUNK_BYTES, SKETCH_PER_SAMPLE
from ..core.rank import NumericalRank, numerical_rank, singular_values
from .result import Progress


def eliminated_columns(arch: Architecture) -> int:
    """Number of Jacobian columns the elimination removes: the d_l x d_{l-1} entries of V_l."""
    return arch.widths[-1] * arch.widths[-2]


def last_input(arch: Architecture, params: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """W(X) = Z_{l-1} S_l, shape (N, d_{l-1}, t), so that phi_W(X) = V_l W(X)."""
    weights = unflatten(arch, params)
    Z = X
    for Q, K, V in list(zip(weights.Q, weights.K, weights.V))[:-1]:
        Z = mix_values(V @ Z, attention_scores(Z, Q, K), arch)
    return mix_values(Z, attention_scores(Z, weights.Q[-1], weights.K[-1]), arch)


class LastValueElimination:
    """Rows of Y (module docstring) for successive blocks of samples, on the gauge's free columns
    other than V_l's; `input_rank` reads rank M from the kept triangular factor."""

    def __init__(self, arch: Architecture, gauge: GaugeSplit, generator: torch.Generator) -> None:
        offsets = {name: offset for name, _, offset in arch.param_layout()}
        start = offsets[f"V_{arch.n_layers}"]
        self.gauge = gauge
        self.other = gauge.free[gauge.free < start]
        if gauge.free.numel() - self.other.numel() != eliminated_columns(arch):
            raise AssertionError("the gauge left an entry of V_l out of the free columns")
        self.offset = eliminated_columns(arch)  # d_l * rank M when M has full column rank
        self.columns = int(self.other.numel())
        self.rank = gauge.rank
        self._R = None       # M's rows kept whole, then its d_{l-1} x d_{l-1} triangular factor
        self._top = None     # B^T J_r for every group, shape (d_{l-1}, d_l * columns)
        self._filled = 0     # rows of _top in use (d_{l-1} once the first reduction is done)
        self._m_rows = 0     # rows of M so far (N t)
        self._generator = generator  # draws the sketches
        self.sketched = 0    # rows of Y the sketches left out
        self._pending = 0    # samples whose rows of Y have not been emitted yet

    def rows(self, arch: Architecture, params: torch.Tensor, X: torch.Tensor,
             progress: Progress | None = None) -> tuple[torch.Tensor, float]:
        """(new rows of Y, tangent leak) for the samples X (appended to those seen before)."""
        n, t, d_l, d_in = X.shape[0], arch.tokens, arch.widths[-1], arch.widths[-2]
        J = finite_rows(forward_columns(arch, params, X, self.other, progress))  # rows (n, r, s)
        J = J.reshape(n, d_l, t, self.columns)
        W = finite_rows(last_input(arch, params, X)).transpose(1, 2)           # (n, s, c)
        # One scale per (n, s): the norm of the d_l rows (n, :, s) of J on all free columns.
        scale = (J.square().sum(dim=(1, 3)) + d_l * W.square().sum(dim=2)).sqrt()
        scale = 1.0 / scale.clamp(min=torch.finfo(J.dtype).tiny)
        M_new = (W * scale[..., None]).reshape(n * t, d_in)
        # Rows (n, s), each holding its d_l groups side by side: one copy, scaled in place.
        J_new = torch.empty((n, t, d_l, self.columns), dtype=J.dtype, device=J.device)
        J_new.copy_(J.permute(0, 2, 1, 3))
        del J
        J_new.mul_(scale[..., None, None])
        J_new = J_new.reshape(n * t, d_l * self.columns)
        self._m_rows += n * t
        self._pending += n
        leak = self.gauge.leak(arch, params, X[:2])
        if self._top is None:  # B^T J_r of every group, side by side (filled in place from here on)
            self._top = torch.zeros((d_in, d_l * self.columns), dtype=J_new.dtype, device=J_new.device)
        m0 = self._filled
        if m0 + n * t < d_in:  # too few rows to reduce yet: keep them whole (exactly d_in: reduce)
            self._top[m0:m0 + n * t] = J_new
            self._R = M_new if self._R is None else torch.cat([self._R, M_new])
            self._filled += n * t
            return J_new.new_zeros((0, self.columns)), leak
        if m0 < d_in:
            # The first reduction: the rows kept whole and the new ones, by one complete QR of
            # their M, applied to the group rows a block of columns at a time.
            A = M_new if self._R is None else torch.cat([self._R, M_new])
            Qc, R = torch.linalg.qr(A, mode="complete")
            k = m0 + n * t - d_in
            step = max(1, _CHUNK_BYTES // ((m0 + n * t) * J_new.element_size()))
            for c0 in range(0, J_new.shape[1], step):
                c1 = min(J_new.shape[1], c0 + step)
                rotated = Qc.T @ torch.cat([self._top[:m0, c0:c1], J_new[:, c0:c1]])
                self._top[:, c0:c1] = rotated[:d_in]
                J_new[:k, c0:c1] = rotated[d_in:]
            self._R, self._filled = R[:d_in].contiguous(), d_in
            Y = J_new[:k]
        else:
            # R is triangular now: fold the new rows in place (`fold.fold_rows_`), carrying the
            # group rows along; what it leaves below R are Y's rows.
            fold_rows_(self._R, M_new, companions=(self._top, J_new))
            Y = J_new
        Y = Y.reshape(-1, self.columns)
        # These rows hold Y's share of every sample since the last rows emitted.
        keep = SKETCH_PER_SAMPLE * max(1, t * (t - 1)) * self._pending
        self._pending = 0
        if keep < Y.shape[0]:
            S = torch.randn((keep, Y.shape[0]), generator=self._generator, dtype=Y.dtype)
            self.sketched += Y.shape[0] - keep
            Y = S.to(Y.device) @ Y
        return Y, leak

    def input_rank(self) -> NumericalRank:
        """Rank of M (the gap rule on its triangular factor's singular values)."""
        if self._R is None:
            return numerical_rank([], 0, 0)
        return numerical_rank(singular_values(self._R), self._m_rows, self._R.shape[1])

    def note(self, leak: float, input_rank: NumericalRank) -> str:
        """How the rank was read, for the result's notes."""
        sketch = (f" (rows sketched to {SKETCH_PER_SAMPLE} t(t-1) per sample: {self.sketched} rows "
                  "left out)") if self.sketched else ""
        return (self.gauge.note(leak) + f"; the {self.offset} columns of the last value matrix "
                f"eliminated exactly (their input matrix has rank {input_rank.rank}, gap "
                f"{input_rank.gap:.1f} decades), rank read on the remaining {self.columns} "
                f"columns{sketch}")
