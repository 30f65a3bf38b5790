"""Lightning networks over a prime field F_p: weights, reverse-mode Jacobian rows, symmetry tangents.

Everything here is integer arithmetic (int64 residues in [0, p)); no floating point.
Products of residues are reduced mod p after every matrix product, so every intermediate
stays below 2^63 (see `matmul_mod`). python-flint is used only through `exact.py`.
The arrays are numpy or torch int64 alike (the results are of the kind of the inputs): a small
network's exact rank runs on numpy and never imports torch, which is most of its start-up;
large ones use torch's faster int64 products (`exact.use_numpy`).

Math (docs/math/deep.md, docs/lightning_dimension.md, docs/hidden_directions.md):
  layer i:  U = Q_i Z, W = K_i Z, S = U^T W (t x t), Y = V_i Z, Z' = Y S  (Eq. 1, as in maps.forward)
  a row of S J: the gradient in W of <G, phi_W(X_n)> for a cotangent G in F_p^{d_l x t}
  (reverse mode, one cotangent per row; any rows of S J span a subspace of J's row space).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core.architecture import Architecture
from ..core.checks import bad_value
from .fp import left_kernel_mod_p, nullspace_mod_p, pivot_columns_mod_p, rank_mod_p
from ..core.parameters import LayerWeights, value_products
from ..symmetries.paper import symmetry_tangents

if TYPE_CHECKING:
    import torch

# p < 2^31 and operands split into 16-bit halves: one term of a product is < 2^31 * 2^16 = 2^47,
# so an inner dimension below 2^16 keeps every int64 sum exact.
MAX_PRIME_BITS = 31
_HALF = 16
_MAX_INNER = 2 ** 15


def check_word_prime(p: int) -> int:
    """Return `p` if it is below 2^31 (the bound `matmul_mod` relies on)."""
    if p >= 2 ** MAX_PRIME_BITS:
        raise bad_value("prime", f"a prime below 2^{MAX_PRIME_BITS} for the exact Jacobian", p,
                        "Pass a prime such as 2147483629.")
    return p


def is_numpy(x: object) -> bool:
    """True for a numpy array (the torch-free F_p path), False for a torch tensor."""
    return isinstance(x, np.ndarray)


def _cat(parts: list, axis: int = 0):
    """Concatenate numpy arrays or torch tensors (all of one kind)."""
    if is_numpy(parts[0]):
        return np.concatenate(parts, axis=axis)
    import torch  # noqa: PLC0415

    return torch.cat(parts, dim=axis)


def _zeros(shape: tuple[int, ...], like):
    """int64 zeros of the kind of `like` (numpy or torch)."""
    if is_numpy(like):
        return np.zeros(shape, dtype=np.int64)
    import torch  # noqa: PLC0415

    return torch.zeros(shape, dtype=torch.int64)


def _as_kind(array: np.ndarray, like):
    """`array` (numpy) as the kind of `like`: itself, or a torch tensor sharing its memory."""
    if is_numpy(like):
        return array
    import torch  # noqa: PLC0415

    return torch.from_numpy(array)


def matmul_mod(A: torch.Tensor, B: torch.Tensor, p: int) -> torch.Tensor:
    """(A @ B) mod p for int64 residues in [0, p), p < 2^31 (batched OK; numpy or torch).

    Math: B = B_lo + 2^16 B_hi with 0 <= B_lo, B_hi < 2^16, so
    A B = A B_lo + 2^16 ((A B_hi) mod p); each int64 sum has < 2^15 terms < 2^47: exact.
    Longer inner dimensions are split into chunks of < 2^15, each reduced before summing.
    """
    inner = A.shape[-1]
    if inner >= _MAX_INNER:
        step = _MAX_INNER - 1
        out = matmul_mod(A[..., :step], B[..., :step, :], p)
        for start in range(step, inner, step):
            out += matmul_mod(A[..., start:start + step], B[..., start:start + step, :], p)
            out %= p
        return out
    lo = B & (2 ** _HALF - 1)
    hi = B >> _HALF
    out = A @ hi
    out %= p
    out *= 2 ** _HALF
    out += A @ lo
    out %= p
    return out


def random_residues(shape: tuple[int, ...], p: int, gen) -> torch.Tensor:
    """Uniform residues in [0, p) (integer sampling, no floating point).

    `gen` a torch.Generator (a torch tensor, by torch.randint) or a `core.seeds.ResidueStream`
    (a numpy array holding the same draws)."""
    if hasattr(gen, "randint"):   # ResidueStream: torch's draws, from numpy
        return gen.randint(p, shape)
    import torch  # noqa: PLC0415

    return torch.randint(0, p, shape, generator=gen, dtype=torch.int64)


def random_weights_mod_p(arch: Architecture, p: int, gen) -> LayerWeights:
    """Uniformly random Q_i, K_i, V_i over F_p, shapes as in `arch.layer_shapes()` (numpy
    arrays from a `ResidueStream`, torch tensors from a torch.Generator: the same values)."""
    Qs, Ks, Vs = [], [], []
    for shapes in arch.layer_shapes():
        Qs.append(random_residues(shapes["Q"], p, gen))
        Ks.append(random_residues(shapes["K"], p, gen))
        Vs.append(random_residues(shapes["V"], p, gen))
    return LayerWeights(tuple(Qs), tuple(Ks), tuple(Vs))


def forward_mod_p(weights: LayerWeights, X: torch.Tensor, p: int,
                  keep: list | None = None) -> torch.Tensor:
    """phi_W(X) mod p, X of shape (N, d_0, t); same evaluation order as `maps.forward`.

    If `keep` is a list, the per-layer intermediates (Z, U, W, S, Y) are appended to it.
    NOTE: [A second copy of the lightning map] `maps.forward` is the definition; this copy
    exists because every product must be reduced mod p without overflow (`matmul_mod`) and the
    hand-written reverse pass needs the intermediates. tests/dimension/test_exact.py checks the two agree
    on integer weights, so the map is still defined once and verified here.
    """
    Z = X
    for Q, K, V in zip(weights.Q, weights.K, weights.V):
        U = matmul_mod(Q, Z, p)                      # (N, a, t)
        W = matmul_mod(K, Z, p)                      # (N, a, t)
        S = matmul_mod(U.swapaxes(-1, -2), W, p)     # (N, t, t), S_ji = z_j^T Q^T K z_i
        Y = matmul_mod(V, Z, p)                      # (N, d', t)
        if keep is not None:
            keep.append((Z, U, W, S, Y))
        Z = matmul_mod(Y, S, p)
    return Z


def jacobian_rows_mod_p(weights: LayerWeights, X: torch.Tensor, G: torch.Tensor, p: int) -> torch.Tensor:
    """Rows g^T J_n over F_p: the gradient in W of <G[n, k], phi_W(X_n)>, shape (N * r, n_params).

    X: (N, d_0, t) inputs; G: (N, r, d_l, t) cotangents (r per sample). Columns follow
    `Architecture.param_layout` (Q_1, K_1, V_1, Q_2, ...; row-major). Hand-written reverse mode:
      dY = G S^T, dS = Y^T G, dU = W dS^T, dW = U dS,
      dV = dY Z^T, dQ = dU Z^T, dK = dW Z^T, dZ = V^T dY + Q^T dU + K^T dW.
    """
    keep: list = []
    forward_mod_p(weights, X, p, keep)
    N, r = G.shape[:2]
    blocks: list[list[torch.Tensor]] = []
    for i in reversed(range(len(keep))):
        Z, U, W, S, Y = (x[:, None] for x in keep[i])   # broadcast over the r cotangents
        Zt = Z.swapaxes(-1, -2)
        dY = matmul_mod(G, S.swapaxes(-1, -2), p)
        dS = matmul_mod(Y.swapaxes(-1, -2), G, p)
        dU = matmul_mod(W, dS.swapaxes(-1, -2), p)
        dW = matmul_mod(U, dS, p)
        blocks.append([matmul_mod(dU, Zt, p), matmul_mod(dW, Zt, p), matmul_mod(dY, Zt, p)])
        if i > 0:
            G = (matmul_mod(weights.V[i].T, dY, p) + matmul_mod(weights.Q[i].T, dU, p)
                 + matmul_mod(weights.K[i].T, dW, p)) % p
    flat = [b.reshape(N * r, -1) for layer in reversed(blocks) for b in layer]
    return _cat(flat, axis=1)


def products_mod_p(weights: LayerWeights, p: int) -> list[torch.Tensor]:
    """P_0 = I, P_i = V_i ... V_1 mod p (Eq. 8), for i = 0..l-1."""
    return value_products(weights.V, lambda A, B: matmul_mod(A, B, p))[:-1]


# NOTE: [hidden symmetries: sound kernel tangents]
# phi_W depends on layer j's weights only through A'_j = P^T Q_j^T K_j P and V_j P (Eq. 8,
# P = P_{j-1}), and, when some earlier layer i < j has a_i = 1, only through the symmetric part
# of A'_j: after a key width 1, Z'_i = (Z Z^T A'_i Z) has rank one, u w^T, and every later layer
# maps u w^T to (w^T w)(u^T A' u) V u w^T, which sees only u^T A' u. So every (dQ_j, dK_j, dV_j)
# in the kernel of the linear map
#     L_j: (dQ, dK, dV) -> ( P^T (Q^T dK + dQ^T K) P  [symmetrised if an earlier a_i = 1],  dV P )
# is tangent to a fiber and lies in ker dPhi_W. When rank P < d_{j-1} (a narrower earlier layer)
# this adds the directions dQ = E N^T, dK = E N^T, dV = F N^T with N^T P = 0 (docs/math/deep.md).
# Soundness of the upper bound needs the kernel at our F_p point to be the specialisation of a
# polynomial kernel family, i.e. rank_p L_j(w) = generic rank of L_j. rank_p <= generic always,
# and the generic rank is at most the dimension of the image of (Q, K) -> P^T Q^T K P: matrices
# of rank <= r = min(a_j, m) with row and column space in the m-dimensional row space of P
# (m = min(d_0..d_{j-1}) = generic rank P), of dimension r (2m - r); symmetrised, the image is
# {sum_w sym(w u^T): w in span(q_1..q_a, k_1..k_a), u in R^m}, of dimension k m - k (k - 1) / 2
# with k = min(2 a_j, m) (`hidden_block_rank`, proof in docs/hidden_directions.md). For dV -> dV P the generic rank is d_j m. A block whose F_p rank reaches its bound
# is used (then its kernel basis spans the same space as Cramer-rule polynomial vectors built
# from a non-vanishing maximal minor); a block that falls short is skipped and reported.

def hidden_block_rank(a: int, m: int, symmetric: bool) -> int:
    """Generic rank of (dQ, dK) -> P^T (Q^T dK + dQ^T K) P [symmetrised], rank P = m, a keys.

    Not symmetrised: r (2m - r), r = min(a, m). Symmetrised: k m - k (k - 1) / 2,
    k = min(2a, m) (the symmetric matrices sum_w sym(w u^T), w in a k-dimensional subspace).
    """
    if symmetric:
        k = min(2 * a, m)
        return k * m - k * (k - 1) // 2
    r = min(a, m)
    return r * (2 * m - r)


def hidden_symmetry_tangents(arch: Architecture, weights: LayerWeights, p: int
                             ) -> tuple[torch.Tensor, list[str], list[str]]:
    """Kernel tangents of every layer's L_j over F_p (see the NOTE above), rows of length n_params.

    Returns (rows, labels, skipped) where `skipped` names blocks left out for soundness.
    Exact over F_p; the rows lie in the kernel of the Jacobian at `weights` mod p.
    """
    offsets = {name: offset for name, _, offset in arch.param_layout()}
    products = products_mod_p(weights, p)
    rows, labels, skipped = [], [], []
    for j in range(1, arch.n_layers + 1):
        Q, K, P = weights.Q[j - 1], weights.K[j - 1], products[j - 1]
        a, d_in = Q.shape
        d_out, d0 = weights.V[j - 1].shape[0], P.shape[1]
        m = min(arch.widths[:j])
        if rank_mod_p(np.asarray(P), p) != m:
            skipped.append(f"layer {j}: rank P_{j - 1} mod p below its generic rank {m}")
            continue
        # Lightning only: a rank-one layer output sees only the symmetric part (NOTE above);
        # softmax outputs are not rank one (t = 1 softmax is handled in `ball.py`).
        symmetric = arch.is_polynomial and (arch.tokens == 1
                                            or any(k == 1 for k in arch.keys[:j - 1]))
        bound = hidden_block_rank(a, m, symmetric)
        # Columns of L_j on dQ = e_rs and dK = e_rs: outer(P[s], (K P)[r]) and outer((Q P)[r], P[s]).
        QP, KP = matmul_mod(Q, P, p), matmul_mod(K, P, p)
        dq = (P[None, :, :, None] * KP[:, None, None, :]) % p       # (a, d_in, d0, d0)
        dk = (QP[:, None, :, None] * P[None, :, None, :]) % p
        cols = _cat([dq.reshape(a * d_in, d0, d0), dk.reshape(a * d_in, d0, d0)])
        if symmetric:
            cols = (cols + cols.swapaxes(-1, -2)) % p
        L = np.asarray(cols.reshape(2 * a * d_in, d0 * d0).T)
        if m == d_in and not symmetric and a <= d_in:
            pass  # ker L_j is the GL(a_j) orbit of Lemma 3.1, already in symmetry_tangents
        elif rank_mod_p(L, p) == bound:
            kernel = _as_kind(nullspace_mod_p(L, p), P).T            # (k, 2 a d_in)
            block = _zeros((kernel.shape[0], arch.n_params), P)
            block[:, offsets[f"Q_{j}"]: offsets[f"Q_{j}"] + a * d_in] = kernel[:, : a * d_in]
            block[:, offsets[f"K_{j}"]: offsets[f"K_{j}"] + a * d_in] = kernel[:, a * d_in:]
            rows.append(block)
            labels += [f"ker L_{j} (Q, K)"] * kernel.shape[0]
        else:
            skipped.append(f"layer {j}: (Q, K) block rank mod p below its bound {bound}")
        if m < d_in:  # dV = e_r nu^T with nu^T P = 0 (rank P = m checked above)
            left = _as_kind(left_kernel_mod_p(np.asarray(P), p), P)   # (d_in - m, d_in)
            block = _zeros((left.shape[0], d_out, arch.n_params), P)
            start = offsets[f"V_{j}"]
            for r_ in range(d_out):
                block[:, r_, start + r_ * d_in: start + (r_ + 1) * d_in] = left
            rows.append(block.reshape(-1, arch.n_params))
            labels += [f"ker L_{j} (V)"] * (left.shape[0] * d_out)
    if not rows:
        return _zeros((0, arch.n_params), weights.V[0]), labels, skipped
    return _cat(rows), labels, skipped


# NOTE: [read-out symmetry]
# Layer j sees its input Z_{j-1} only through M_j Z_{j-1}, M_j = [V_j; Q_j; K_j] of size
# (d_j + 2 a_j) x d_{j-1}. For every n with M_j n = 0 and every row vector y, V_{j-1} -> V_{j-1} + n y
# changes Z_{j-1} = V_{j-1} Z_{j-2} S_{j-1} by n (y Z_{j-2} S_{j-1}), which M_j kills: phi_W is
# unchanged (an additive group action, exact). Tangents dV_{j-1} = n e_s^T for a kernel basis n
# and s = 1..d_{j-2}. Generic rank M_j = min(d_j + 2 a_j, d_{j-1}); the block is used only when
# the F_p rank attains it, so the kernel basis spans the same space as the Cramer-rule polynomial
# kernel vectors (the upper bound stays sound). Proof and counts: docs/hidden_directions.md.

def readout_symmetry_tangents(arch: Architecture, weights: LayerWeights, p: int
                              ) -> tuple[torch.Tensor, list[str], list[str]]:
    """Tangents dV_{j-1} = n e_s^T with [V_j; Q_j; K_j] n = 0 (NOTE above), rows of length n_params."""
    offsets = {name: offset for name, _, offset in arch.param_layout()}
    rows, labels, skipped = [], [], []
    for j in range(2, arch.n_layers + 1):
        d_prev, d_in = arch.widths[j - 2], arch.widths[j - 1]
        M = _cat([weights.V[j - 1], weights.Q[j - 1], weights.K[j - 1]])
        generic = min(M.shape[0], d_in)
        if generic == d_in:
            continue
        if rank_mod_p(np.asarray(M), p) != generic:
            skipped.append(f"layer {j}: rank [V; Q; K]_{j} mod p below its generic rank {generic}")
            continue
        kernel = _as_kind(nullspace_mod_p(np.asarray(M), p), M).T      # (k, d_in)
        k = kernel.shape[0]
        block = _zeros((k, d_prev, arch.n_params), M)
        start = offsets[f"V_{j - 1}"]
        for s_ in range(d_prev):
            block[:, s_, start + s_: start + d_in * d_prev: d_prev] = kernel
        rows.append(block.reshape(-1, arch.n_params))
        labels += [f"read-out V_{j - 1} + n y, [V; Q; K]_{j} n = 0"] * (k * d_prev)
    if not rows:
        return _zeros((0, arch.n_params), weights.V[0]), labels, skipped
    return _cat(rows), labels, skipped


def all_symmetry_tangents(arch: Architecture, weights: LayerWeights, p: int
                          ) -> tuple[torch.Tensor, list[str], list[str]]:
    """Known symmetry tangents (`symmetry_tangents`) plus the hidden and read-out ones, mod p."""
    known, labels = symmetry_tangents(arch, weights)
    known %= p   # in place: at 72^4 / 24^3 the tangents alone take 2.5 GB
    hidden, hidden_labels, skipped = hidden_symmetry_tangents(arch, weights, p)
    readout, readout_labels, skipped_readout = readout_symmetry_tangents(arch, weights, p)
    more = [rows for rows in (hidden, readout) if rows.shape[0]]
    return (_cat([known, *more]) if more else known, labels + hidden_labels + readout_labels,
            skipped + skipped_readout)


def _leading_blocks(rows: np.ndarray, bounds: np.ndarray, first: int = 0) -> np.ndarray:
    """Index of the column block holding each row's first non-zero entry (len(bounds) - 1 if none).

    Column c of `rows` is column `first` + c of the whole matrix; `bounds` = [0, c_1, ..., n].
    """
    nonzero = rows != 0
    column = nonzero.astype(np.int8).argmax(axis=1) + first   # the first maximum: the first non-zero
    block = np.searchsorted(bounds, column, side="right") - 1
    block[~nonzero.any(axis=1)] = len(bounds) - 1
    return block


def staircase_rank_mod_p(matrix: torch.Tensor, boundaries: list[int], p: int) -> tuple[int, list[int]]:
    """Exact rank over F_p of a matrix whose rows each touch few column blocks, block by block.

    `boundaries` = [0, c_1, ..., n] splits the columns into blocks. Returns the rank and pivot
    columns Pi with matrix[:, Pi] of full row rank (rank(matrix) = |Pi|).
    Math: for the rows S whose first non-zero entry lies in block b, with M = S[:, block b],
    rank = rank M + rank(the other rows, and y^T S for every y in the left kernel of M);
    the rows y^T S vanish on blocks <= b and wait for the block of their first non-zero entry.
    Exact Gaussian elimination organised by blocks; no probability involved. Each row is read
    once (no copy of `matrix` is made), so narrow blocks cost little beyond their own rank.
    `matrix` is a numpy array or a torch tensor (read through numpy, sharing its memory).
    """
    matrix = np.asarray(matrix)
    n_blocks = len(boundaries) - 1
    bounds = np.array(boundaries, dtype=np.int64)
    lead = np.full((matrix.shape[0],), n_blocks, dtype=np.int64)
    for b in reversed(range(n_blocks)):          # one pass over the matrix, a block at a time
        lead[(matrix[:, boundaries[b]:boundaries[b + 1]] != 0).any(axis=1)] = b
    order = np.argsort(lead, kind="stable")
    starts = [0] + np.bincount(lead, minlength=n_blocks + 1).cumsum().tolist()
    waiting: dict[int, list[tuple[int, np.ndarray]]] = {}   # block -> (first column, rows)
    rank, pivots = 0, []
    for b, (lo, hi) in enumerate(zip(boundaries[:-1], boundaries[1:])):
        parts = [matrix[order[starts[b]:starts[b + 1]], lo:]] if starts[b + 1] > starts[b] else []
        parts += [rows[:, lo - first:] for first, rows in waiting.pop(b, [])]
        if not parts:
            continue
        S = np.concatenate(parts) if len(parts) > 1 else parts[0]
        M = S[:, : hi - lo]
        found = pivot_columns_mod_p(M, p)
        rank += len(found)
        pivots += [lo + c for c in found]
        if len(found) < S.shape[0] and hi < boundaries[-1]:
            Y = left_kernel_mod_p(M, p)
            new = matmul_mod(Y, np.ascontiguousarray(S[:, hi - lo:]), p)
            blocks = _leading_blocks(new, bounds, hi)
            for c in np.unique(blocks).tolist():
                if c < n_blocks:
                    waiting.setdefault(c, []).append((hi, new[blocks == c]))
    return rank, pivots
