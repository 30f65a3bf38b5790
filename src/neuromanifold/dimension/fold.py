"""Fold new rows into a triangular factor in place: the QR of [R; K] with R upper triangular.

Reading a rank from many rows keeps only a triangular factor R (R^T R = J^T J, the same singular
values). Adding k rows K by a generic QR of the stacked [R; K] costs about 2 (n + k) n^2 - 2 n^3 / 3
operations and three copies of an n x n matrix; it ignores that R is already triangular. Here the
Householder reflector of column j has a 1 in row j of R, zeros in R's other rows and its other
entries in K's k rows (R's entries below the diagonal are zero, and the earlier reflectors touch
only their own row of R and K), so the block reflector of a panel of b columns is
I - V T V^T with V = [E; U], E the panel's rows of the identity and U (k x b) from K. Applying it
costs about 4 k b per column instead of 2 (n + k) b: folding k rows costs about 2 k n^2 operations
in all (what LAPACK's tpqrt does), and nothing of R's size is copied.

The same reflectors applied to companion matrices [C_top; C_bottom] give Q^T [C_top; C_bottom]
with Q the orthogonal factor of [R; K]: `elimination` uses this to carry the rows B^T J_r of every
group through the triangular factor of the last layer's input matrix.
"""

from __future__ import annotations

import torch

from .memory import FOLD_PANEL as PANEL  # columns of R per panel (one block reflector each)

# Bytes of companion columns updated at once (the panel's b x chunk temporaries).
_CHUNK_BYTES = 64 * 2 ** 20


def _wy_factor(G: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """T (b x b, upper triangular) with H_0 ... H_{b-1} = I - V T V^T, from G = V^T V (LAPACK's
    larft: T[:i, i] = -tau_i T[:i, :i] V[:, :i]^T v_i)."""
    b = tau.shape[0]
    T = torch.zeros((b, b), dtype=G.dtype, device=G.device)
    for i in range(b):
        T[i, i] = tau[i]
        if i:
            T[:i, i] = -tau[i] * (T[:i, :i] @ G[:i, i])
    return T


def _apply(T: torch.Tensor, E: torch.Tensor | None, U: torch.Tensor, top: torch.Tensor,
           bottom: torch.Tensor) -> None:
    """[top; bottom] <- (I - V T V^T)^T [top; bottom] in place, V = [E; U] (E = I when None;
    top: the panel's b rows)."""
    W = torch.addmm(top if E is None else E.T @ top, U.T, bottom)   # V^T C
    W = T.T @ W
    if E is None:
        top.sub_(W)
    else:
        top.sub_(E @ W)
    bottom.addmm_(U, W, alpha=-1.0)


def fold_rows_(R: torch.Tensor, K: torch.Tensor, companions: tuple | None = None,
               panel: int = PANEL) -> None:
    """Replace the n x n upper triangular `R` in place by the triangular factor of [R; K].

    `K` (k x n) is overwritten (zeros on return). An `R` with entries below its diagonal is
    refused (ValueError): the panels would silently ignore them. With
    `companions=(C_top, C_bottom)` (n x m and k x m), [C_top; C_bottom] is replaced in place by
    Q^T [C_top; C_bottom], Q the orthogonal factor with [R; K] = Q [R_new; 0]: C_bottom then holds
    the rows the factorisation leaves below R.
    """
    n, k = R.shape[1], K.shape[0]
    if R.shape[0] != n or K.shape[1] != n:
        raise ValueError(f"fold_rows_ needs R n x n and K k x n; got {tuple(R.shape)}, {tuple(K.shape)}")
    if k == 0 or n == 0:
        return
    if bool(torch.tril(R, diagonal=-1).any()):
        raise ValueError("fold_rows_ needs R upper triangular; it has entries below its diagonal")
    if companions is not None:
        top, bottom = companions
        m = top.shape[1]
        step = max(1, _CHUNK_BYTES // (max(panel, k) * top.element_size()))
    for j0 in range(0, n, panel):
        j1 = min(n, j0 + panel)
        b = j1 - j0
        a, tau = torch.geqrf(torch.cat([R[j0:j1, j0:j1], K[:, j0:j1]]))
        U = a[b:]
        G = U.T @ U
        # R's zeros below the diagonal keep these reflector entries exactly zero (LAPACK); a
        # kernel that leaves round-off there is still handled, with E = I + those entries.
        below = torch.tril(a[:b], diagonal=-1)
        E = None
        if bool(below.any()):
            E = below + torch.eye(b, dtype=a.dtype, device=a.device)
            G = G + E.T @ E
        else:
            G.diagonal().add_(1.0)
        R[j0:j1, j0:j1] = torch.triu(a[:b])
        T = _wy_factor(G, tau)
        if j1 < n:
            _apply(T, E, U, R[j0:j1, j1:], K[:, j1:])
        if companions is not None:
            for c0 in range(0, m, step):
                c1 = min(m, c0 + step)
                _apply(T, E, U, top[j0:j1, c0:c1], bottom[:, c0:c1])
    K.zero_()
