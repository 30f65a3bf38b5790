"""Symmetry families of the value maps and the heads: per-head GL(v) on (W, O), per-head rescaling,
head mixing (with and without key/value groups) and grouped key sums (families 2, 3, 4 and 14).
"""

from __future__ import annotations

import torch

from ...core.architecture import Architecture
from .base import TangentOps, bias_of, kv_groups, score_maps, sum_terms, value_names


def value_gl_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict, put) -> None:
    """2. per-head GL(v) on (W, O): W -> G W, O -> O G^{-1} (value widths given; the value bias
    follows W: bv -> G bv). With kv_heads the group's W_g against every head's O_h: head h
    outputs O_h (W_g Z + bv_g 1^T) S_h."""
    for h, heads in kv_groups(arch, i):
        w_name, o_name = value_names(blocks, i, h)
        outs = [f"O_{i}_{k}" for k in heads]
        if w_name != o_name:
            W = blocks[w_name]
            for r in range(W.shape[0]):
                for s in range(W.shape[0]):
                    dW = zero[w_name].clone()
                    dW[r] = W[s]
                    parts = {w_name: dW}
                    for name in outs:
                        parts[name] = zero[name].clone()
                        parts[name][:, s] = ops.neg(blocks[name][:, r])
                    for name in bias_of(blocks, f"bv_{i}_{h}"):
                        parts[name] = zero[name].clone()
                        parts[name][r] = blocks[name][s]
                    put(parts)


def head_rescaling_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                            put) -> None:
    """3. per-head rescaling: Q -> c Q, value -> value / c (lightning; biases follow their maps).
    With kv_heads and value widths per head: K_h -> c K_h (and bk_h), O_h -> O_h / c, head h
    being O_h W_g Z S_h with S_h linear in K_h; without value widths per group: every K_h of
    the group (and bk_h) against the group's V_g (and bv_g)."""
    if arch.kv_heads is not None and arch.values is not None:
        for h in range(1, arch.head_counts[i - 1] + 1):
            parts = {name: blocks[name].clone() for name in [f"K_{i}_{h}"] + bias_of(blocks, f"bk_{i}_{h}")}
            parts[f"O_{i}_{h}"] = ops.neg(blocks[f"O_{i}_{h}"])
            put(parts)
        return
    for g, heads in kv_groups(arch, i):
        w_name, _ = value_names(blocks, i, g)
        parts = {}
        for name in (score_maps(arch, blocks, i, g, heads)[1] if arch.kv_heads is not None
                     else [f"Q_{i}_{g}"] + bias_of(blocks, f"bq_{i}_{g}")):
            parts[name] = blocks[name].clone()
        for name in [w_name] + bias_of(blocks, f"bv_{i}_{g}"):
            parts[name] = ops.neg(blocks[name])
        put(parts)


def gqa_head_mixing_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                             put) -> None:
    """3'. gqa head mixing (lightning, kv_heads, value widths): a group's heads sum to sum_h O_h X K_h with
    X = W_g Z (Q_g Z)^T (scores linear in k = K_h z + bk_h), so for heads h != k of one group
    O_h -> O_h + e O_k, K_k -> K_k - e K_h (and bk_k - e bk_h) leaves it unchanged: the
    off-diagonal of GL(n_g) on the pairs (O_h, K_h), whose diagonal is the per-head rescaling."""
    for _, heads in kv_groups(arch, i):
        for h in heads:
            for k in heads:
                if h != k:
                    parts = {f"O_{i}_{h}": blocks[f"O_{i}_{k}"].clone()}
                    for kind in ("K", "bk"):
                        if f"{kind}_{i}_{k}" in blocks:
                            parts[f"{kind}_{i}_{k}"] = ops.neg(blocks[f"{kind}_{i}_{h}"])
                    put(parts)


def key_sum_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                     put) -> None:
    """14. grouped key sums (lightning, kv_heads, unfactored values): the heads of a group share
    Q_g and V_g, and lightning scores are linear in k_h = K_h z + bk_h, so the group is
    sum_h V_g Z (q_g^T k_h) = V_g Z (q_g^T sum_h k_h): K_h -> K_h + D, K_first -> K_first - D
    (and the key biases)."""
    for _, heads in kv_groups(arch, i):
        first = heads[0]
        for h in heads[1:]:
            for kind in ("K", "bk"):
                mine, theirs = f"{kind}_{i}_{h}", f"{kind}_{i}_{first}"
                if mine not in blocks:
                    continue
                for r in range(blocks[mine].shape[0]):
                    for c in range(blocks[mine].shape[1]):
                        d_mine, d_first = zero[mine].clone(), zero[theirs].clone()
                        d_mine[r, c] = 1
                        d_first[r, c] = ops.neg(torch.ones_like(d_first[r, c]))
                        put({mine: d_mine, theirs: d_first})


def head_mixing_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                         put) -> None:
    """4. head mixing (lightning, several heads, a_i >= d_{i-1})."""
    _head_mixing(arch, blocks, i, ops, put)


def _head_mixing(arch: Architecture, blocks: dict, i: int, ops: TangentOps, put) -> None:
    """V_h += e V_g, A_g -= e A_h (g != h), lifted to the factors through one-sided inverses.

    dA_g = dQ_g^T K_g is solved by dQ_g^T = dA_g K_g^+ with K_g^+ = (K_g^T K_g)^{-1} K_g^T (a left
    inverse of K_g; needs a_i >= d_{i-1}). With value widths, dV_h = O_h dW_h... is solved with a
    left inverse of W_h (v >= d_{i-1}) or a right inverse of O_h (v >= d_i); with v below both,
    V_h + e V_g leaves the rank-v set and this family is left out.
    """
    def T(x):
        return x.T.contiguous()

    def left_inverse(M):     # (M^T M)^{-1} M^T for M of full column rank
        return ops.mm(ops.inv(ops.mm(T(M), M)), T(M))

    def right_inverse(M):    # M^T (M M^T)^{-1} for M of full row rank
        return ops.mm(T(M), ops.inv(ops.mm(M, T(M))))

    factored = f"W_{i}_1" in blocks
    if factored and arch.values[i - 1] < min(arch.widths[i - 1], arch.widths[i]):
        return
    # With kv_heads (unfactored values) the units are the groups: group g reads
    # A_g = Q_g^T (sum_{h in g} K_h) (family 14), and dA_g = Q_g^T dK is lifted to the group's
    # first key by the left inverse of Q_g (dK = (Q_g^+)^T dA_g, a_i >= d_{i-1} too).
    groups = dict(kv_groups(arch, i))
    H, grouped = len(groups), arch.kv_heads is not None
    plus = {g: left_inverse(blocks[f"{'Q' if grouped else 'K'}_{i}_{g}"]) for g in range(1, H + 1)}
    for g in range(1, H + 1):
        for h in range(1, H + 1):
            if g == h:
                continue
            if grouped:
                A_h = ops.mm(T(blocks[f"Q_{i}_{h}"]), sum_terms([blocks[f"K_{i}_{k}"] for k in groups[h]], ops))
                parts = {f"K_{i}_{groups[g][0]}": ops.neg(ops.mm(T(plus[g]), A_h))}
            else:
                A_h = ops.mm(T(blocks[f"Q_{i}_{h}"]), blocks[f"K_{i}_{h}"])
                parts = {f"Q_{i}_{g}": ops.neg(T(ops.mm(A_h, plus[g])))}
            if not factored:
                parts[f"V_{i}_{h}"] = blocks[f"V_{i}_{g}"].clone()
            else:
                W_h, O_h = blocks[f"W_{i}_{h}"], blocks[f"O_{i}_{h}"]
                V_g = ops.mm(blocks[f"O_{i}_{g}"], blocks[f"W_{i}_{g}"])
                if W_h.shape[0] >= W_h.shape[1]:      # v >= d_{i-1}: dO_h = V_g W_h^+
                    parts[f"O_{i}_{h}"] = ops.mm(V_g, left_inverse(W_h))
                else:                                 # v >= d_i: dW_h = O_h^+ V_g
                    parts[f"W_{i}_{h}"] = ops.mm(right_inverse(O_h), V_g)
            put(parts)
