"""Weights of a network in three parametrisations, with conversions (docs/math/notation.md).

- `LayerWeights`: per-layer (Q_i, K_i, V_i); the parametrisation whose Jacobian we take.
- `AttentionWeights`: (A_i, V_i) with A_i = Q_i^T K_i in R^{d_{i-1} x d_{i-1}}.
- `VirtualWeights`: (A'_1, ..., A'_l, V') of Eq. 8, with A'_i = P_{i-1}^T A_i P_{i-1} in
  R^{d_0 x d_0}, P_{i-1} = V_{i-1} ... V_1 (P_0 = I) and V' = V_l ... V_1 in R^{d_l x d_0}.

Tensors are torch float64 by default; any torch dtype works for the maps. Integer numpy arrays
work too where no float is formed (`LayerWeights`, `value_products`: the F_p path of
`dimension.modular`), so this module imports torch only inside the functions that need it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .architecture import Architecture, check_architecture
from .checks import bad_value, check_int, check_seed
from .seeds import seeded_generator
from .rank import numerical_rank

if TYPE_CHECKING:
    import torch

# Integers up to this size survive float64 storage and the products the exact paths form
# (A = Q^T K with a < 32 stays below 2^53); larger "integers" may already be rounded.
EXACT_INTEGER_LIMIT = 2 ** 24


def value_products(Vs, matmul=None) -> list:
    """[P_0, P_1, ..., P_l] with P_0 = I and P_i = V_i ... V_1 (Eq. 8).

    `matmul(A, B)` multiplies two matrices (default `A @ B`; the F_p path passes its modular
    product). P_{i-1} maps the network's input to the input of layer i, up to the attention
    factors, and V' = P_l.
    """
    product = matmul or (lambda A, B: A @ B)
    first = Vs[0]
    if type(first).__module__ == "numpy":  # integer residues of the F_p path: no torch
        import numpy as np  # noqa: PLC0415

        P = np.eye(first.shape[1], dtype=first.dtype)
    else:
        import torch  # noqa: PLC0415

        P = torch.eye(first.shape[1], dtype=first.dtype, device=first.device)
    out = [P]
    for V in Vs:
        P = product(V, P)
        out.append(P)
    return out


def integral_tensors(*tensors: torch.Tensor) -> bool:
    """True when every entry is a finite whole number of size <= EXACT_INTEGER_LIMIT."""
    import torch  # noqa: PLC0415

    return all(bool(torch.all(torch.isfinite(t))) and bool(torch.all(t == torch.round(t)))
               and bool(torch.all(t.abs() <= EXACT_INTEGER_LIMIT)) for t in tensors)


@dataclass(frozen=True)
class LayerWeights:
    """Per-layer weights Q_i, K_i in R^{a_i x d_{i-1}} and V_i in R^{d_i x d_{i-1}}, i = 1..l."""

    Q: tuple[torch.Tensor, ...]
    K: tuple[torch.Tensor, ...]
    V: tuple[torch.Tensor, ...]

    @property
    def n_layers(self) -> int:
        return len(self.V)

    def to_attention(self) -> "AttentionWeights":
        """A_i = Q_i^T K_i (Lemma 3.1's parametrisation)."""
        return AttentionWeights(tuple(q.T @ k for q, k in zip(self.Q, self.K)), self.V)

    def to_virtual(self) -> "VirtualWeights":
        """Virtual weights (Eq. 8)."""
        return self.to_attention().to_virtual()

    def map(self, fn) -> "LayerWeights":
        """Apply `fn` to every tensor (e.g. to move to a device)."""
        return LayerWeights(tuple(map(fn, self.Q)), tuple(map(fn, self.K)), tuple(map(fn, self.V)))


@dataclass(frozen=True)
class AttentionWeights:
    """Attention matrices A_i in R^{d_{i-1} x d_{i-1}} and values V_i in R^{d_i x d_{i-1}}."""

    A: tuple[torch.Tensor, ...]
    V: tuple[torch.Tensor, ...]

    @property
    def n_layers(self) -> int:
        return len(self.V)

    def to_virtual(self) -> "VirtualWeights":
        """Math: A'_i = P_{i-1}^T A_i P_{i-1}, V' = V_l ... V_1 (Eq. 8)."""
        Ps = value_products(self.V)
        virtual = tuple(P.T @ A @ P for A, P in zip(self.A, Ps))
        return VirtualWeights(virtual, Ps[-1])

    def to_layer_weights(self, arch: Architecture) -> LayerWeights:
        """Factor each A_i = Q_i^T K_i with Q_i, K_i in R^{a_i x d_{i-1}} (balanced SVD split).

        Raises ValueError when rank A_i > a_i, since no such factorisation exists.
        """
        import torch  # noqa: PLC0415

        Qs, Ks = [], []
        for i, (A, a) in enumerate(zip(self.A, arch.keys), start=1):
            U, s, Vh = torch.linalg.svd(A)
            nr = numerical_rank(s, *A.shape)
            if nr.rank <= a < min(A.shape) and not nr.is_settled():
                raise bad_value(f"A_{i}", f"of a clear numerical rank <= a_{i} = {a}",
                                f"a matrix whose singular values show no clear gap "
                                f"({nr.gap:.1f} decades at rank {nr.rank})",
                                f"Pass Q_{i}, K_{i} instead of A_{i}, or an exactly rank-{a} A_{i}.")
            rank = nr.rank
            if rank > a:
                raise bad_value(f"A_{i}", f"of rank <= a_{i} = {a}", f"a matrix of rank {rank}",
                                f"Use keys with a_{i} >= {rank}, or a rank-{a} A_{i}.")
            k = min(a, s.shape[0])
            root = s[:k].sqrt()
            Q = torch.zeros(a, A.shape[0], dtype=A.dtype, device=A.device)
            K = torch.zeros_like(Q)
            Q[:k] = (U[:, :k] * root).T
            K[:k] = root[:, None] * Vh[:k]
            Qs.append(Q)
            Ks.append(K)
        return LayerWeights(tuple(Qs), tuple(Ks), self.V)


@dataclass(frozen=True)
class VirtualWeights:
    """Virtual weights A'_i in R^{d_0 x d_0} (i = 1..l) and V' in R^{d_l x d_0} (Eq. 8)."""

    A: tuple[torch.Tensor, ...]
    V: torch.Tensor

    @property
    def n_layers(self) -> int:
        return len(self.A)


def flatten(weights: LayerWeights) -> torch.Tensor:
    """One parameter vector: Q_1, K_1, V_1, Q_2, ... each flattened row-major."""
    import torch  # noqa: PLC0415

    blocks = []
    for q, k, v in zip(weights.Q, weights.K, weights.V):
        blocks += [q.reshape(-1), k.reshape(-1), v.reshape(-1)]
    return torch.cat(blocks)


def unflatten(arch: Architecture, vector: torch.Tensor) -> LayerWeights:
    """Inverse of `flatten` for `arch` (differentiable: works under torch.func transforms)."""
    if vector.shape[-1] != arch.n_params:
        raise bad_value("vector", f"of length n_params = {arch.n_params} for {arch}",
                        f"length {vector.shape[-1]}", "Flatten weights of the same architecture.")
    blocks = {}
    for name, shape, offset in arch.param_layout():
        blocks[name] = vector[offset: offset + shape[0] * shape[1]].reshape(shape)
    l = arch.n_layers
    return LayerWeights(tuple(blocks[f"Q_{i}"] for i in range(1, l + 1)),
                        tuple(blocks[f"K_{i}"] for i in range(1, l + 1)),
                        tuple(blocks[f"V_{i}"] for i in range(1, l + 1)))


def score_factor(arch: Architecture) -> float:
    """The power of two c that the random Q_i and K_i are multiplied by: c^2 ~ tau (softmax).

    Math: phi with (Q, K, tau) equals phi with (Q / tau, K, 1), so the dimension does not depend
    on tau, but a random point does: logits z_j^T Q^T K z_i / tau of order 1 / tau saturate the
    softmax (one-hot to round-off: its derivative underflows, and a float64 rank reads too low)
    or flatten it. Drawing Q, K times c with c = 2^round(log2(tau) / 2) keeps the logits over tau
    of order one (within a factor 2 of tau = 1's). A power of two keeps rational points exact
    (`ball_dual.rational_point`), and c = 1 for tau = 1 and lightning: those draws are unchanged.
    """
    if arch.attention != "softmax" or arch.temperature == 1.0:
        return 1.0
    return math.ldexp(1.0, round(math.log2(arch.temperature) / 2))


def weight_scales(arch: Architecture) -> list[dict[str, float]]:
    """Standard deviations used by `random_weights`, per layer and block.

    Chosen so that every layer maps O(1) inputs to O(1) outputs: Q_i, K_i ~ N(0, 1/(d sqrt a))
    times `score_factor` keeps the logits x_j^T A x_i / tau of order one (softmax never
    saturates), V_i ~ N(0, 1/d), divided further by sqrt(t) for lightning, whose outputs sum t
    unnormalised terms.
    """
    scales = []
    for a, d_in in zip(arch.keys, arch.widths[:-1]):
        qk = score_factor(arch) / math.sqrt(d_in * math.sqrt(a))
        v = 1.0 / math.sqrt(d_in * (arch.tokens if arch.attention == "lightning" else 1))
        scales.append({"Q": qk, "K": qk, "V": v})
    return scales


def random_weights(arch: Architecture, seed: int = 0, *, dtype: torch.dtype | None = None,
                   device: str | torch.device = "cpu") -> LayerWeights:
    """Seeded Gaussian weights, scaled by `weight_scales` (generic with probability one).

    Drawn in float64 and converted to `dtype` (default float64)."""
    import torch  # noqa: PLC0415

    dtype = torch.float64 if dtype is None else dtype
    check_architecture(arch)
    gen = seeded_generator(check_seed(seed), "weights")
    Qs, Ks, Vs = [], [], []
    for shapes, scale in zip(arch.layer_shapes(), weight_scales(arch)):
        for name, bucket in (("Q", Qs), ("K", Ks), ("V", Vs)):
            sample = torch.randn(shapes[name], generator=gen, dtype=torch.float64) * scale[name]
            bucket.append(sample.to(dtype=dtype, device=device))
    return LayerWeights(tuple(Qs), tuple(Ks), tuple(Vs))


def random_inputs(arch: Architecture, n_samples: int, seed: int = 0, *,
                  dtype: torch.dtype | None = None,
                  device: str | torch.device = "cpu") -> torch.Tensor:
    """N seeded standard normal input sequences, shape (N, d_0, t) (tokens are columns), drawn
    in float64 and converted to `dtype` (default float64)."""
    import torch  # noqa: PLC0415

    dtype = torch.float64 if dtype is None else dtype
    check_architecture(arch)
    n_samples = check_int("n_samples", n_samples, minimum=1, fix="Pass a positive number of samples.")
    gen = seeded_generator(check_seed(seed), "inputs")
    X = torch.randn((n_samples, arch.widths[0], arch.tokens), generator=gen, dtype=torch.float64)
    return X.to(dtype=dtype, device=device)
