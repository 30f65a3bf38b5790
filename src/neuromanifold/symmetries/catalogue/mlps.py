"""Symmetry families of the MLPs: the rescaling of a neuron between P and U (family 6).
"""

from __future__ import annotations

from ...core.architecture import Architecture
from .base import TangentOps, bias_of


def neuron_rescaling_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                              put) -> None:
    """6. MLP neuron rescaling: row j of P times c, column j of U times c^-2 (square) or c^-1 (relu);
    the row's bias with it. Gated (U (s(G y) * (P y))): row j of P times c, column j of U times
    c^-1 for every activation (the product is linear in P y), and row j of G times c with U's
    column times c^-2 (square) or c^-1 (relu)."""
    U = blocks[f"U_{i}"]
    rows = [("P", -1)] if arch.mlp_kind == "gated" else []
    if arch.activation in ("square", "relu"):
        rows.append(("G" if arch.mlp_kind == "gated" else "P", -2 if arch.activation == "square" else -1))
    for kind, c in rows:
        for j in range(arch.mlp_widths[i - 1]):
            parts = {}
            for name in [f"{kind}_{i}"] + bias_of(blocks, f"b{kind.lower()}_{i}"):
                parts[name] = zero[name].clone()
                parts[name][j] = blocks[name][j]
            dU = zero[f"U_{i}"].clone()
            dU[:, j] = ops.times(c, U[:, j])
            parts[f"U_{i}"] = dU
            put(parts)
