"""Symmetry families of the decoder options: biases (the softmax query bias, the value bias beside
the output bias, output and input shifts into the readers' biases, a parallel block's two output
biases), learned positions beside an untied embedding, and token types (families 15-17).
"""

from __future__ import annotations

import torch

from ...core.architecture import Architecture
from .base import (
    TangentOps,
    bias_of,
    consumers_of,
    kv_groups,
    layer_stages,
    mlp_readers,
    reader_bias,
    shift_route,
    sum_terms,
    value_names,
)


def query_bias_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                        put) -> None:
    """15. softmax query bias: scores_ji = (Q z_j + bq)^T k_i and the softmax normalises over
    the aggregated token j; bq^T k_i does not depend on j, so every bq entry is a symmetry
    direction (causal too: the constant is over j <= i). With kv_heads the groups' bq_g
    (transformers' key bias)."""
    for h in range(1, arch.kv_counts[i - 1] + 1):
        name = f"bq_{i}_{h}"
        for r in range(blocks[name].shape[0]):
            d = zero[name].clone()
            d[r] = 1
            put({name: d})


def value_bias_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                        put) -> None:
    """16. softmax value bias beside the output bias: softmax columns sum to 1, so a head adds
    its value bias (O_g bv_g with value widths) to every output token, as bo_i does:
    bv_g -> bv_g + x, bo_i -> bo_i - n_g x (unfactored values: n_g the heads of group g), or
    bo_i -> bo_i - sum_h O_h x over the heads of the group (value widths)."""
    for g, heads in kv_groups(arch, i):
        w_name, o_name = value_names(blocks, i, g)
        name = f"bv_{i}_{g}"
        for r in range(blocks[name].shape[0]):
            d = zero[name].clone()
            d[r] = 1
            column = ops.times(len(heads), torch.eye(blocks[name].shape[0], dtype=d.dtype)[r]) \
                if w_name == o_name else sum_terms([blocks[f"O_{i}_{h}"][:, r] for h in heads], ops)
            out = zero[f"bo_{i}"].clone()
            out[:, 0] = ops.neg(column)
            put({name: d, f"bo_{i}": out})


def bias_shift_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                        put) -> None:
    """17. output biases into the readers' biases (no norm): the stream after a producer's bias b
    is read by linear readers R z + b_R, so b -> b + x, b_R -> b_R - R x. Without a residual
    nothing else reads it; with one the shift rides on the stream past the readers, and the
    next bias written to the stream (bu_i after the MLP, bo_{i+1} after the next layer's heads)
    takes it back: b' -> b' - x. Only at boundaries where every reader has a bias (and, with a
    residual, a next bias exists). Parallel blocks (z -> z + att(z) + mlp(z)): bo_i and bu_i
    are added to the same output (bo_i + x, bu_i - x), and layer i + 1's heads and MLP read
    the stream after both (the last of them shifts, the first of layer i + 1's takes it back)."""
    if arch.parallel:
        routes = []
        if f"bo_{i}" in blocks and f"bu_{i}" in blocks:
            routes.append((f"bo_{i}", [], f"bu_{i}"))
        written = bias_of(blocks, f"bo_{i}") + bias_of(blocks, f"bu_{i}")
        later = bias_of(blocks, f"bo_{i + 1}") + bias_of(blocks, f"bu_{i + 1}")
        if i < arch.n_layers and written and later:
            routes.append((written[-1], _layer_readers(arch, blocks, i + 1), later[0]))
    else:
        routes = []
        for makers, readers in layer_stages(arch, blocks, i):
            biases = [name for name in makers if name.startswith("b")]
            after = f"bu_{i}" if f"P_{i}" in readers else f"bo_{i + 1}"
            routes.append((biases[-1] if biases else None, readers,
                           after if arch.residual else ""))
    for source, readers, back in routes:
        shift_route(blocks, zero, ops, source, readers, back, put)


def input_shift_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                         put) -> None:
    """17'. the input stream's shift into layer 1's readers' biases (no norm): the position table
    (T -> T + x 1^T) or, without one, an untied embedding (E -> E + 1 x^T: one-hot tokens
    embed as E^T X + x 1^T) writes x to every token; layer 1's readers (its MLP's too in a
    parallel block) take it off their biases, and with a residual the first bias written to the
    stream after them (bo_1; in a parallel block bo_1 or bu_1) takes it back."""
    source = "T" if "T" in blocks else ("E" if "E" in blocks and not arch.tied else None)
    back = ""
    if arch.residual:
        later = bias_of(blocks, "bo_1") + (bias_of(blocks, "bu_1") if arch.parallel else [])
        back = later[0] if later else None
    shift_route(blocks, zero, ops, source, _layer_readers(arch, blocks, 1), back, put)


def embedding_position_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                                put) -> None:
    """17''. an untied embedding beside learned positions: one-hot tokens embed as E^T X + T, and
    1^T X = 1^T, so E -> E + 1 x^T, T -> T - x 1^T leaves every input stream unchanged."""
    shift_route(blocks, zero, ops, "E", [], "T", put)


def _layer_readers(arch: Architecture, blocks: dict, i: int) -> list[str]:
    """The blocks reading the stream into layer i: its heads' query, key and value inputs and,
    in a parallel block (its MLP reads the same stream), the MLP's gate and values."""
    mlp = mlp_readers(arch, i) if arch.parallel and arch.mlp_widths[i - 1] > 0 else []
    return consumers_of(arch, blocks, i) + mlp


def token_type_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                        put) -> None:
    """22. token types beside the embedding: every token has one type, so E -> E + 1 x^T,
    Ty -> Ty - 1 x^T leaves every embedded input E^T X + Ty^T Y unchanged; one per coordinate."""
    for r in range(blocks["E"].shape[1]):
        dE, dY = zero["E"].clone(), zero["Ty"].clone()
        dE[:, r] = 1
        dY[:, r] = ops.neg(torch.ones_like(dY[:, r]))
        put({"E": dE, "Ty": dY})


# Families closing loose brackets found by the independent checks (docs/decoder_features.md,
# "Combined features"): the softmax query bias on the coordinates rotary positions leave alone,
# and the lightning per-head rescaling carried by a QK-norm's query gain.

def unrotated_query_bias_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int,
                                  zero: dict, put) -> None:
    """15'. softmax query bias on the unrotated coordinates (rotary positions): the score is
    q_j^T R^{i-j} k_i with q_j = Q z_j + bq, and R^m is the identity on the a - 2 R coordinates
    past the rotated pairs, so bq_u k_{i,u} (u unrotated) does not depend on the aggregated
    token j: the softmax ignores it. Family 15's tangents (one per bias entry of each group's
    bq_g; a group is one head without kv_heads) restricted to those coordinates (all of them with one token: R^0 = I)."""
    first = 2 * (arch.rotated_pairs[i - 1] if arch.tokens > 1 else 0)

    def unrotated(parts: dict) -> None:
        (d,) = parts.values()
        if not d[:first].any():
            put(parts)

    query_bias_tangents(arch, blocks, ops, i, zero, unrotated)


def input_kernel_shift_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                                put) -> None:
    """17'''. the input stream's shift in the kernel of layer 1's bias-free readers (no norm,
    parallel blocks): the position table (T -> T + x 1^T) or an untied embedding
    (E -> E + 1 x^T) writes x to every token; a reader with a bias takes -R x on it, a reader
    without one (a parallel MLP's P without MLP biases) reads nothing when R x = 0; with a
    residual the first bias written to the stream after them (bo_1, or bu_1) takes x back.
    x ranges over the kernel of the bias-free readers stacked (used where they have full rank)."""
    source = "T" if "T" in blocks else ("E" if "E" in blocks and not arch.tied else None)
    readers = _layer_readers(arch, blocks, 1)
    bare = [name for name in readers if reader_bias(blocks, name) is None]
    later = bias_of(blocks, "bo_1") + bias_of(blocks, "bu_1")
    if source is None or not bare or (arch.residual and not later):
        return
    stacked = torch.cat([blocks[name] for name in bare])
    if stacked.shape[0] >= stacked.shape[1]:
        return
    basis = ops.kernel(stacked)
    if basis is None:
        return
    for k in range(basis.shape[1]):
        x = basis[:, k]
        parts = {source: zero[source].clone()}
        if source == "E":
            parts[source][:] = x
        else:
            parts[source][:] = x[:, None]
        if arch.residual:
            parts[later[0]] = zero[later[0]].clone()
            parts[later[0]][:, 0] = ops.neg(x)
        for name in readers:
            bias = reader_bias(blocks, name)
            if bias is not None:
                parts[bias] = ops.neg(ops.mm(blocks[name], x[:, None].contiguous()))
        put(parts)


def parallel_output_bias_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int,
                                  zero: dict, put) -> None:
    """17'''''. a parallel block's two output biases: Z -> Z + att_i(Z) + mlp_i(Z) adds bo_i and
    bu_i to the same sum, so bo_i + x, bu_i - x leave it unchanged. x = e_r, one per entry; with
    layernorm x = e_r - e_{d-1} (r < d - 1) only: x = 1 is the difference of two shifts along 1,
    which every layernorm ignores (left to the stream's shifts, where they apply)."""
    if f"bo_{i}" not in blocks or f"bu_{i}" not in blocks:
        return
    d = blocks[f"bo_{i}"].shape[0]
    layernorm = arch.norm == "layernorm"
    for r in range(d - 1 if layernorm else d):
        bo, bu = zero[f"bo_{i}"].clone(), zero[f"bu_{i}"].clone()
        bo[r] = 1
        bu[r] = ops.neg(torch.ones_like(bu[r]))
        if layernorm:
            bo[d - 1] = ops.neg(torch.ones_like(bo[d - 1]))
            bu[d - 1] = 1
        put({f"bo_{i}": bo, f"bu_{i}": bu})
