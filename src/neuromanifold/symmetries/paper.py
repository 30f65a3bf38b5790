"""The known symmetries of the parametrisation: group actions and their tangent vectors.

Math (docs/math/single-layer.md, deep.md):
  key symmetry (Lemma 3.1), C in GL(a_i):   Q_i -> C Q_i,  K_i -> C^{-T} K_i
  inter-layer (Eq. 9), C in GL(d_i), 1 <= i < l:
        V_i -> C V_i,  Q_{i+1} -> Q_{i+1} C^{-1},  K_{i+1} -> K_{i+1} C^{-1},  V_{i+1} -> V_{i+1} C^{-1}
  rescaling (lightning only), lambda != 0:  (A_i, V_i) -> (lambda A_i, V_i / lambda),
        realised here as Q_i -> lambda Q_i, V_i -> V_i / lambda.

Each symmetry leaves phi_W unchanged, so its tangent vectors at W lie in the kernel of the
Jacobian of W -> phi_W: their span bounds the dimension from above,
dim M <= n_params - rank(tangents) (docs/math/method.md).

The tangent construction only copies and negates entries of W, so it works for any tensor
dtype, integer tensors included (for arithmetic over F_p), and for integer numpy arrays (the
torch-free F_p path of `dimension.modular`): torch is imported only where a float is formed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.architecture import Architecture, check_architecture
from ..core.checks import bad_value, check_weights_type
from ..core.parameters import LayerWeights
from ..core.rank import svd_driver

if TYPE_CHECKING:
    import torch


def _check_layer(name: str, i: int, low: int, high: int) -> None:
    if not low <= i <= high:
        raise bad_value(name, f"a layer index in {low}..{high}", i,
                        f"Pick a layer between {low} and {high}.")


def act_keys(weights: LayerWeights, layer: int, C: torch.Tensor) -> LayerWeights:
    """Apply C in GL(a_i) to layer `layer` (1-based): Q_i -> C Q_i, K_i -> C^{-T} K_i."""
    import torch  # noqa: PLC0415

    _check_layer("layer", layer, 1, weights.n_layers)
    i = layer - 1
    Q, K = list(weights.Q), list(weights.K)
    Q[i] = C @ Q[i]
    K[i] = torch.linalg.solve(C.T, K[i])
    return LayerWeights(tuple(Q), tuple(K), weights.V)


def act_between_layers(weights: LayerWeights, layer: int, C: torch.Tensor) -> LayerWeights:
    """Apply C in GL(d_i) between layers i and i+1 (Eq. 9), 1 <= i < l."""
    import torch  # noqa: PLC0415

    _check_layer("layer", layer, 1, weights.n_layers - 1)
    i = layer - 1
    Q, K, V = list(weights.Q), list(weights.K), list(weights.V)
    C_inv = torch.linalg.inv(C)
    V[i] = C @ V[i]
    Q[i + 1], K[i + 1], V[i + 1] = Q[i + 1] @ C_inv, K[i + 1] @ C_inv, V[i + 1] @ C_inv
    return LayerWeights(tuple(Q), tuple(K), tuple(V))


def act_rescale(weights: LayerWeights, layer: int, scale: float) -> LayerWeights:
    """(A_i, V_i) -> (scale A_i, V_i / scale); a symmetry of lightning networks only."""
    _check_layer("layer", layer, 1, weights.n_layers)
    if scale == 0:
        raise bad_value("scale", "non-zero", scale, "Pass any non-zero number.")
    i = layer - 1
    Q, V = list(weights.Q), list(weights.V)
    Q[i] = Q[i] * scale
    V[i] = V[i] / scale
    return LayerWeights(tuple(Q), weights.K, tuple(V))


def symmetry_tangents(arch: Architecture, weights: LayerWeights) -> tuple[torch.Tensor, list[str]]:
    """Tangent vectors at W of every known symmetry, as rows of a (n_tangents, n_params) matrix.

    Returns the matrix and, per row, a label naming the one-parameter subgroup it comes from.
    Rows: a_i^2 per layer (GL(a_i)), d_i^2 per interior width (Eq. 9), and one rescaling per
    layer for lightning networks. Their rank (not their number) bounds the fiber dimension.
    """
    check_architecture(arch)
    check_weights_type("weights", weights, LayerWeights)
    offsets = {name: offset for name, _, offset in arch.param_layout()}
    ref = weights.V[0]
    lightning = arch.attention == "lightning"
    n_rows = (sum(a * a for a in arch.keys) + sum(d * d for d in arch.widths[1:-1])
              + (arch.n_layers if lightning else 0))
    # Filled in place: one (n_rows, n_params) allocation, no list of rows to stack.
    if type(ref).__module__ == "numpy":   # F_p residues on the torch-free path
        import numpy as np  # noqa: PLC0415

        out = np.zeros((n_rows, arch.n_params), dtype=ref.dtype)
    else:
        import torch  # noqa: PLC0415

        out = torch.zeros((n_rows, arch.n_params), dtype=ref.dtype, device=ref.device)
    labels: list[str] = []

    def new_row() -> torch.Tensor:
        return out[len(labels)]

    def block(row: torch.Tensor, name: str, shape: tuple[int, int]) -> torch.Tensor:
        start = offsets[name]
        return row[start: start + shape[0] * shape[1]].reshape(shape)   # a view: contiguous

    for i, (a, shapes) in enumerate(zip(arch.keys, arch.layer_shapes()), start=1):
        Q, K = weights.Q[i - 1], weights.K[i - 1]
        for r in range(a):
            for s in range(a):  # E = e_rs: dQ = E Q, dK = -E^T K
                row = new_row()
                block(row, f"Q_{i}", shapes["Q"])[r] = Q[s]
                block(row, f"K_{i}", shapes["K"])[s] -= K[r]
                labels.append(f"GL(a_{i}) e_{r}{s}")
    for i in range(1, arch.n_layers):
        d = arch.widths[i]
        shapes, nxt = arch.layer_shapes()[i - 1], arch.layer_shapes()[i]
        V, Qn, Kn, Vn = weights.V[i - 1], weights.Q[i], weights.K[i], weights.V[i]
        for r in range(d):
            for s in range(d):  # E = e_rs: dV_i = E V_i, d(M_{i+1}) = -M_{i+1} E
                row = new_row()
                block(row, f"V_{i}", shapes["V"])[r] = V[s]
                block(row, f"Q_{i + 1}", nxt["Q"])[:, s] = -Qn[:, r]
                block(row, f"K_{i + 1}", nxt["K"])[:, s] = -Kn[:, r]
                block(row, f"V_{i + 1}", nxt["V"])[:, s] = -Vn[:, r]
                labels.append(f"GL(d_{i}) e_{r}{s}")
    if lightning:
        for i, shapes in enumerate(arch.layer_shapes(), start=1):
            row = new_row()
            block(row, f"Q_{i}", shapes["Q"])[:] = weights.Q[i - 1]
            block(row, f"V_{i}", shapes["V"])[:] = -weights.V[i - 1]
            labels.append(f"rescale layer {i}")
    return out, labels


def readout_tangents_float(arch: Architecture, weights) -> torch.Tensor:
    """Float tangents dV_{j-1} = n e_s^T, n spanning ker [V_j; Q_j; K_j] (the read-out symmetry of
    docs/hidden_directions.md), for lightning and softmax alike (layer j reads only [V; Q; K]_j Z).

    The kernel is the span of the right singular vectors past the generic rank
    min(d_j + 2 a_j, d_{j-1}); nothing is returned for a layer where d_{j-1} <= d_j + 2 a_j.
    """
    import torch  # noqa: PLC0415

    offsets = {name: offset for name, _, offset in arch.param_layout()}
    ref = weights.V[0]
    rows = []
    for j in range(2, arch.n_layers + 1):
        d_prev, d_in = arch.widths[j - 2], arch.widths[j - 1]
        M = torch.cat([weights.V[j - 1], weights.Q[j - 1], weights.K[j - 1]])
        if M.shape[0] >= d_in:
            continue
        kernel = torch.linalg.svd(M, full_matrices=True, driver=svd_driver(M)).Vh[M.shape[0]:]
        block = torch.zeros((kernel.shape[0], d_prev, arch.n_params), dtype=ref.dtype, device=ref.device)
        start = offsets[f"V_{j - 1}"]
        for s_ in range(d_prev):
            block[:, s_, start + s_: start + d_in * d_prev: d_prev] = kernel
        rows.append(block.reshape(-1, arch.n_params))
    return torch.cat(rows) if rows else torch.zeros((0, arch.n_params), dtype=ref.dtype, device=ref.device)
