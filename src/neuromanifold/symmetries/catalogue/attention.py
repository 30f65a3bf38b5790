"""Symmetry families of the attention scores: per-head GL(a) on (Q, K) and its rotary commutant, and
the one-token softmax (families 1, 1' and 11 of `symmetries.catalogue`).
"""

from __future__ import annotations

import torch

from ...core.architecture import Architecture
from .base import TangentOps, kv_groups, score_maps

# One construction per family, for layer i (1-based) or for the whole network, each appending
# its tangents ({block name: direction}) through `put`, in the order of the rows it adds. The
# registry (`symmetries.registry`) says when each applies and collects them in its order.

def key_gl_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict, put) -> None:
    """1. per-head GL(a) on (Q, K): Q -> G Q, K -> G^{-T} K; with kv_heads one G per group, on
    the group's Q_g and every head's K_h (docs/decoder_features.md); biases follow their maps
    (bq -> G bq, bk -> G^{-T} bk: the scores are [z; 1]^T [Q bq]^T [K bk] [z; 1])."""
    for g, heads in kv_groups(arch, i):
        queries, keys = score_maps(arch, blocks, i, g, heads)
        a = arch.keys[i - 1]
        for r in range(a):
            for s in range(a):
                parts = {}
                for name in queries:
                    parts[name] = zero[name].clone()
                    parts[name][r] = blocks[name][s]
                for name in keys:
                    parts[name] = zero[name].clone()
                    parts[name][s] = ops.neg(blocks[name][r])
                put(parts)


def rotary_commutant_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                              put) -> None:
    """1'. rotary commutant (rotary positions, t >= 2): Q -> G Q, K -> G^{-T} K for G commuting
    with the rotations, so q_j^T R^{i-j} k_i is unchanged: per rotated pair f, G = c I + s J on
    the pair (J the quarter turn; distinct angles leave no block between pairs), and GL on the
    a - 2 R unrotated coordinates. Tangent dQ = X Q, dK = -X^T K (X^T commutes too). With
    kv_heads one G per group, on the group's Q_g and every head's K_h; biases follow
    their maps (bq -> G bq, bk -> G^{-T} bk: the rotation acts on q = Q z + bq, and
    R^j G q = G R^j q)."""
    pairs = arch.rotated_pairs[i - 1]
    a = arch.keys[i - 1]
    for g, heads in kv_groups(arch, i):
        queries, keys = score_maps(arch, blocks, i, g, heads)
        units = []                              # X as a list of (row, column, entry)
        for f in range(pairs):
            p = 2 * f
            units.append([(p, p, 1), (p + 1, p + 1, 1)])           # X = identity on the pair
            units.append([(p, p + 1, -1), (p + 1, p, 1)])          # X = J = [[0, -1], [1, 0]]
        units += [[(r, s, 1)] for r in range(2 * pairs, a) for s in range(2 * pairs, a)]
        for unit in units:
            parts = {}
            for name in queries:                # dQ = X Q: row r gains x_rs row s
                parts[name] = zero[name].clone()
                for r, s, x in unit:
                    parts[name][r] = ops.add(parts[name][r], blocks[name][s] if x > 0
                                             else ops.neg(blocks[name][s]))
            for name in keys:                   # dK = -X^T K: row s gains -x_rs row r
                parts[name] = zero[name].clone()
                for r, s, x in unit:
                    parts[name][s] = ops.add(parts[name][s], ops.neg(blocks[name][r]) if x > 0
                                             else blocks[name][r])
            put(parts)


def one_token_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                       put) -> None:
    """11. one-token softmax: every Q, K entry; V_1 + E, V_h - E, or GL(H v) on stacked values
    (with kv_heads unfactored values only: the groups' V_g, each read by n_g = H_i / G_i heads)."""
    H = len(kv_groups(arch, i))
    names = ([f"K_{i}_{h}" for h in range(1, arch.head_counts[i - 1] + 1)]
             + [f"Q_{i}_{g}" for g in range(1, H + 1)])
    if arch.kv_heads is None:
        names = [name for h in range(1, H + 1) for name in (f"Q_{i}_{h}", f"K_{i}_{h}")]
    for name in names:
        for r in range(blocks[name].shape[0]):
            for c in range(blocks[name].shape[1]):
                d = zero[name].clone()
                d[r, c] = 1
                put({name: d})
    if f"V_{i}_1" in blocks:
        for h in range(2, H + 1):
            for r in range(blocks[f"V_{i}_1"].shape[0]):
                for c in range(blocks[f"V_{i}_1"].shape[1]):
                    first, other = zero[f"V_{i}_1"].clone(), zero[f"V_{i}_{h}"].clone()
                    first[r, c] = 1
                    other[r, c] = ops.neg(torch.ones_like(other[r, c]))
                    put({f"V_{i}_1": first, f"V_{i}_{h}": other})
    else:
        _stacked_values(arch, blocks, i, ops, put)


def _stacked_values(arch: Architecture, blocks: dict, i: int, ops: TangentOps, put) -> None:
    """One token, value widths: the layer reads its heads only through sum_h O_h W_h = O W with
    O = [O_1 ... O_H] (d_i x H v) and W = [W_1; ...; W_H] (H v x d_{i-1}), so GL(H v) acts:
    W -> G W, O -> O G^-1. The blocks of G inside one head are family 2; the ones across heads
    g != h (row r of head g, column s of head h): dW_g[r] = W_h[s], dO_h[:, s] = -O_g[:, r]."""
    H, v = len(kv_groups(arch, i)), arch.values[i - 1]   # the groups, with kv_heads (equal sizes)
    for g in range(1, H + 1):
        for h in range(1, H + 1):
            if g == h:
                continue
            for r in range(v):
                for s in range(v):
                    dW = torch.zeros_like(blocks[f"W_{i}_{g}"])
                    dO = torch.zeros_like(blocks[f"O_{i}_{h}"])
                    dW[r] = blocks[f"W_{i}_{h}"][s]
                    dO[:, s] = ops.neg(blocks[f"O_{i}_{g}"][:, r])
                    parts = {f"W_{i}_{g}": dW, f"O_{i}_{h}": dO}
                    if f"bv_{i}_{g}" in blocks:   # the bias is a column of [W bv]
                        parts[f"bv_{i}_{g}"] = torch.zeros_like(blocks[f"bv_{i}_{g}"])
                        parts[f"bv_{i}_{g}"][r] = blocks[f"bv_{i}_{h}"][s]
                    put(parts)
