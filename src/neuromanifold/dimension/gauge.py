"""Gauge fixing for the numerical rank: drop one column per symmetry tangent, never form them.

The dense route (`jacobians.KernelSplit`) stores every symmetry tangent as a row of length
n_params and rotates each Jacobian block by their QR factor: at 40,960 parameters the tangent
matrix alone is 10.9 GB. A gauge needs none of it. The tangents have a block structure:

- key symmetry of layer i, E in gl(a_i):  dQ_i = E Q_i,  dK_i = -E^T K_i;
- inter-layer symmetry i < l, E in gl(d_i): dV_i = E V_i, and -M E on Q, K, V of layer i + 1.

Pick a_i columns of Q_i (an invertible a_i x a_i submatrix) and d_i columns of V_i (i < l, an
invertible d_i x d_i submatrix); their entries are the *pivot* parameters. Ordered as
(keys 1, inter 1, keys 2, inter 2, ...), the tangents restricted to the pivots form a block upper
triangular matrix whose diagonal blocks are E -> E Q_i[:, cols] and E -> E V_i[:, cols]:
invertible, so the tangents are independent and every Jacobian row j (which satisfies j T^T = 0)
is determined by its free entries: rank J = rank J[:, free], with |free| = the symmetry bound.
The Jacobian is computed on the free columns only. See docs/scale.md.

Applies to softmax networks with a_i <= d_{i-1} and d_i <= d_{i-1} (i < l) when the chosen
submatrices are well conditioned; otherwise `gauge_split` returns None and the dense route is used.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch.func import jvp, vmap

from ..core.architecture import Architecture
from ..core.limits import check_projection
from ..core.maps import forward
from ..core.parameters import LayerWeights, unflatten
from ..symmetries.paper import readout_tangents_float, symmetry_tangents
from .jacobians import KernelSplit, jacobian
from .memory import AUTODIFF_CHUNK_BYTES as _CHUNK_BYTES  # one chunk of forward-mode directions
from .memory import gauge_applies, tangent_count  # noqa: F401  (torch-free; re-exported)
from .result import Progress

# Largest condition number of a pivot submatrix accepted (its log10 is what the rank gap can
# lose, since sigma(J) <= sigma(J[:, free]) ||B|| with B built from the inverse submatrices).
MAX_PIVOT_CONDITION = 1e6
# Random covectors g^T J per block on which the tangents are checked to lie in the kernel.
_CHECK_COVECTORS = 2
# Samples of each block on which that check runs.
_CHECK_SAMPLES = 2


def _pivot_columns(M: torch.Tensor) -> tuple[list[int], float]:
    """M.shape[0] columns of M (rows <= cols) chosen greedily as in QR with column pivoting
    (each step takes the column farthest from the span of those taken), and the condition
    number of the square submatrix they form."""
    A = M.detach().to("cpu", torch.float64)
    residual = A.clone()
    cols: list[int] = []
    for _ in range(A.shape[0]):
        norms = residual.norm(dim=0)
        norms[cols] = -1.0
        c = int(norms.argmax())
        cols.append(c)
        q = residual[:, c] / residual[:, c].norm().clamp(min=torch.finfo(A.dtype).tiny)
        residual -= torch.outer(q, q @ residual)
    cols.sort()
    sv = torch.linalg.svdvals(A[:, cols])
    cond = float(sv[0] / sv[-1]) if float(sv[-1]) > 0 else float("inf")
    return cols, cond


@dataclass(frozen=True)
class GaugeSplit:
    """The free parameter columns of a gauge (module docstring) and how to compute J on them."""

    free: torch.Tensor   # indices of the free columns (long), ascending
    rank: int            # number of pivots = rank of the symmetry tangents
    condition: float     # largest condition number of a pivot submatrix
    weights: LayerWeights

    def rows(self, arch: Architecture, params: torch.Tensor, X: torch.Tensor,
             progress: Progress | None = None) -> tuple[torch.Tensor, float]:
        """(J[:, free] with unit rows, tangent leak) for the samples X; J never formed in full
        when forward mode over the free columns is the cheaper direction."""
        n_rows = X.shape[0] * arch.widths[-1] * arch.tokens
        if n_rows < self.free.numel():
            J = jacobian(arch, params, X)[:, self.free]  # reverse mode: one pass per row
        else:
            J = forward_columns(arch, params, X, self.free, progress)
        J = J / J.norm(dim=1, keepdim=True).clamp(min=torch.finfo(J.dtype).tiny)
        # The kernel property holds sample by sample: two samples per block check it.
        return J, self.leak(arch, params, X[:_CHECK_SAMPLES])

    def leak(self, arch: Architecture, params: torch.Tensor, X: torch.Tensor) -> float:
        """Largest relative |g^T J t| over the tangent families, for random covectors g.

        Each family's pairing is a small matrix (e.g. jQ Q^T - K jK^T for the key symmetry),
        compared with the product of the norms that bound it: round-off when the tangents lie in
        ker J, as they must for the gauge to be exact.
        """
        def f(w: torch.Tensor) -> torch.Tensor:
            return forward(arch, unflatten(arch, w), X).reshape(-1)

        gen = torch.Generator(device="cpu").manual_seed(X.shape[0] * 7919 + X.numel())
        G = torch.randn((_CHECK_COVECTORS, X.shape[0] * arch.widths[-1] * arch.tokens),
                        generator=gen, dtype=params.dtype).to(params.device)
        # Plain autograd rather than torch.func.vjp: the latter imports torch._dynamo (1-2 s of
        # start-up); the covectors are the same products g^T J.
        w = params.detach().requires_grad_(True)
        with torch.enable_grad():
            y = f(w)
            covectors = [torch.autograd.grad(y, w, g, retain_graph=True)[0] for g in G]
        W = self.weights
        worst = 0.0
        for j in covectors:
            dj = unflatten(arch, j)
            for i in range(arch.n_layers):
                Q, K = W.Q[i], W.K[i]
                M = dj.Q[i] @ Q.T - K @ dj.K[i].T
                scale = dj.Q[i].norm() * Q.norm() + K.norm() * dj.K[i].norm()
                worst = max(worst, _ratio(M, scale))
            for i in range(arch.n_layers - 1):
                V, Qn, Kn, Vn = W.V[i], W.Q[i + 1], W.K[i + 1], W.V[i + 1]
                M = dj.V[i] @ V.T - Qn.T @ dj.Q[i + 1] - Kn.T @ dj.K[i + 1] - Vn.T @ dj.V[i + 1]
                scale = (dj.V[i].norm() * V.norm() + Qn.norm() * dj.Q[i + 1].norm()
                         + Kn.norm() * dj.K[i + 1].norm() + Vn.norm() * dj.V[i + 1].norm())
                worst = max(worst, _ratio(M, scale))
        return worst

    def note(self, leak: float) -> str:
        """How the rank was read, for the result's notes."""
        return (f"rank read on the {self.free.numel()} free columns of a gauge fixing "
                f"{self.rank} symmetry tangents (pivot condition {self.condition:.1e}; "
                f"tangent leak {leak:.1e})")


def _ratio(M: torch.Tensor, scale: torch.Tensor) -> float:
    s = float(scale)
    return float(M.norm()) / s if s > 0 else 0.0


# Seconds between two progress lines of `forward_columns` (deep networks: a chunk can take
# seconds, the whole pass minutes).
_PROGRESS_SECONDS = 1.0


def forward_columns(arch: Architecture, params: torch.Tensor, X: torch.Tensor,
                    free: torch.Tensor, progress: Progress | None = None) -> torch.Tensor:
    """J[:, free] by forward mode: one jvp per free parameter, batched in chunks; with several
    chunks a line to `progress` before the first, then after a chunk when `_PROGRESS_SECONDS`
    have passed since the last one."""
    def f(w: torch.Tensor) -> torch.Tensor:
        return forward(arch, unflatten(arch, w), X).reshape(-1)

    def column(direction: torch.Tensor) -> torch.Tensor:
        return jvp(f, (params,), (direction,))[1]

    per_column = (X.shape[0] * arch.tokens * (max(arch.widths) * 6 + arch.tokens * 3)
                  * arch.n_layers + arch.n_params) * params.element_size()
    chunk = max(1, min(free.numel(), _CHUNK_BYTES // per_column))
    cols = []
    t0 = last = time.perf_counter()
    if progress is not None and chunk < free.numel():  # several chunks: say so before the first
        progress(f"Jacobian columns 0/{free.numel()} for {X.shape[0]} samples "
                 f"({-(-free.numel() // chunk)} chunks of {chunk})")
    for start in range(0, free.numel(), chunk):
        idx = free[start: start + chunk]
        directions = torch.zeros((idx.numel(), arch.n_params), dtype=params.dtype, device=params.device)
        directions[torch.arange(idx.numel(), device=params.device), idx] = 1
        cols.append(vmap(column)(directions))
        now = time.perf_counter()
        done = start + idx.numel()
        remaining = check_projection(done, free.numel(), now - t0,
                                     f"the Jacobian pass over {X.shape[0]} samples")
        if progress is not None and now - last >= _PROGRESS_SECONDS:
            last = now
            progress(f"Jacobian columns {done}/{free.numel()} for {X.shape[0]} "
                     f"samples ({now - t0:.1f} s; about {remaining:.0f} s more for this pass)")
    return torch.cat(cols).T


def gauge_split(arch: Architecture, weights: LayerWeights) -> GaugeSplit | None:
    """The gauge at `weights`, or None where it does not apply (then use the dense split)."""
    if not gauge_applies(arch):
        return None
    offsets = {name: offset for name, _, offset in arch.param_layout()}
    pivots: list[int] = []
    worst = 1.0
    for i in range(arch.n_layers):
        d_in = arch.widths[i]
        blocks = [(f"Q_{i + 1}", weights.Q[i])]
        if i < arch.n_layers - 1:
            blocks.append((f"V_{i + 1}", weights.V[i]))
        for name, M in blocks:
            cols, cond = _pivot_columns(M)
            worst = max(worst, cond)
            start = offsets[name]
            pivots += [start + r * d_in + c for r in range(M.shape[0]) for c in cols]
    if worst > MAX_PIVOT_CONDITION:
        return None
    keep = torch.ones(arch.n_params, dtype=torch.bool)
    keep[pivots] = False
    free = keep.nonzero().flatten().to(weights.V[0].device)
    return GaugeSplit(free, len(pivots), worst, weights)


def symmetry_split(arch: Architecture, weights):
    """Where the symmetry tangents are split off: a gauge (free columns, no tangent matrix;
    below) where one applies, else R^P = span(tangents) + complement (float), the read-out
    tangents included. The gauge's free columns still give the rank of J (the dropped columns are
    determined by the free ones through the GL tangents); its bound omits the read-out symmetry,
    so it is only looser there.
    """
    gauge = gauge_split(arch, weights)
    if gauge is not None:
        return gauge
    tangents, _ = symmetry_tangents(arch, weights)
    return KernelSplit.from_tangents(torch.cat([tangents, readout_tangents_float(arch, weights)]))
