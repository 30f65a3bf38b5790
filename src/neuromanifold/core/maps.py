"""The network maps, written once and batched over N input sequences.

Math (docs/math/notation.md, deep.md, softmax.md):
  lightning layer (Eq. 1):  phi(Z) = V Z (Z^T A Z),            (Z^T A Z)_{ji} = z_j^T A z_i
  softmax layer   (Eq. 15): phi(Z)_i = sum_j S_ji V z_j / sum_j S_ji,  S_ji = exp(z_j^T A z_i / tau)
  deep network    (Eq. 4):  phi_W = phi_{W_l} o ... o phi_{W_1}
  Lemma 3.6 (Eqs. 10-11):   Z_0 = X, Z_i = Z_{i-1} S(Z_{i-1}^T A'_i Z_{i-1}), phi(X) = V' Z_l
  Eq. 12 (lightning):       phi(X) = V' X prod_{k=1..n} (X^T S_k X), n = (3^l - 1)/2

Shapes: X is (N, d_0, t) or (d_0, t); outputs are (N, d_l, t) or (d_l, t).
Attention is written explicitly (matmul + softmax), never with fused kernels, so that
forward-mode autodiff (torch.func.jvp / jacfwd) works.
"""

from __future__ import annotations

import torch

from ..errors import InputError
from .architecture import Architecture, check_architecture
from .checks import check_weights_type
from .parameters import AttentionWeights, LayerWeights, VirtualWeights


def mix_values(values: torch.Tensor, scores: torch.Tensor, arch: Architecture,
         record: list | None = None) -> torch.Tensor:
    """Combine value columns with attention scores[..., j, i] over the aggregated index j.

    `record`, when given, receives each softmax weight matrix (for `dimension.saturation`)."""
    if arch.attention == "softmax":
        # Dividing by the default temperature 1 changes nothing, and any scalar division under
        # torch.func.vmap(jvp) makes torch import torch._dynamo (1-2 s of start-up), so skip it.
        if arch.temperature != 1.0:
            scores = scores / arch.temperature
        scores = torch.softmax(scores, dim=-2)
        if record is not None:
            record.append(scores)
    return values @ scores


def attention_scores(Z: torch.Tensor, left: torch.Tensor, right: torch.Tensor | None = None) -> torch.Tensor:
    """(Z^T left^T right Z) if `right` is given (left = Q, right = K), else Z^T left Z (left = A)."""
    Zt = Z.transpose(-1, -2)
    if right is None:
        return Zt @ (left @ Z)
    return (left @ Z).transpose(-1, -2) @ (right @ Z)


def forward(arch: Architecture, weights: LayerWeights, X: torch.Tensor, *,
            record: list | None = None) -> torch.Tensor:
    """phi_W(X), layer by layer from (Q_i, K_i, V_i) (Eqs. 1, 4, 15); `record` as in `mix_values`."""
    check_architecture(arch)
    check_weights_type("weights", weights, LayerWeights)
    Z = X
    for Q, K, V in zip(weights.Q, weights.K, weights.V):
        Z = mix_values(V @ Z, attention_scores(Z, Q, K), arch, record)
    return Z


def forward_attention(arch: Architecture, weights: AttentionWeights, X: torch.Tensor) -> torch.Tensor:
    """phi_W(X), layer by layer from (A_i, V_i)."""
    Z = X
    for A, V in zip(weights.A, weights.V):
        Z = mix_values(V @ Z, attention_scores(Z, A), arch)
    return Z


def forward_virtual(arch: Architecture, weights: VirtualWeights, X: torch.Tensor) -> torch.Tensor:
    """phi_W(X) from virtual weights by the Lemma 3.6 recursion (lightning and softmax).

    Math: Z_0 = X, Z_i = Z_{i-1} S(Z_{i-1}^T A'_i Z_{i-1}), phi(X) = V' Z_l. For softmax the
    same recursion holds with Z_i the layer-i state pulled back to R^{d_0} by P_i.
    """
    Z = X
    for A in weights.A:
        Z = mix_values(Z, attention_scores(Z, A), arch)
    return weights.V @ Z


def closed_form_factors(n_layers: int) -> list[tuple[int, bool]]:
    """The factors S_k of Eq. 12 as (layer index v, transposed?) for k = 1..(3^l - 1)/2.

    Math: v is the position (from 1, right to left) of the first non-zero base-3 digit of k;
    S_k = A'_v if that digit is 1 and A'_v^T if it is 2. For l = 2: (A1, A1^T, A2, A1).
    """
    factors = []
    for k in range(1, (3 ** n_layers - 1) // 2 + 1):
        v, digit = 1, k % 3
        while digit == 0:
            k //= 3
            v += 1
            digit = k % 3
        factors.append((v, digit == 2))
    return factors


def forward_closed_form(arch: Architecture, weights: VirtualWeights, X: torch.Tensor) -> torch.Tensor:
    """phi_W(X) = V' X prod_k (X^T S_k X) (Eq. 12); lightning networks only."""
    if arch.attention != "lightning":
        raise InputError(f"`arch.attention` must be 'lightning' for the Eq. 12 closed form; got "
                         f"{arch.attention!r}. Use forward_virtual for softmax networks.")
    out = X
    for v, transposed in closed_form_factors(arch.n_layers):
        A = weights.A[v - 1]
        out = out @ attention_scores(X, A.T if transposed else A)
    return weights.V @ out
