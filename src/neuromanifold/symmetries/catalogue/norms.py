"""Symmetry families of the norms: gain rescaling, layernorm mean directions and shifts, norm
rotations, QK-norm and final-norm gains, layernorm biases and post-norm (BERT) blocks (families 8,
9, 10, 12 and their decoder versions).
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
    layer_writers,
    mlp_readers,
    reader_bias,
    score_maps,
    shift_route,
    stage_gain,
    value_names,
)


def _gains(arch: Architecture, blocks: dict, i: int) -> list[tuple[str, list[str]]]:
    """The norm gains of layer i and the blocks that read each."""
    gains = [(f"g_{i}", consumers_of(arch, blocks, i))]
    if arch.mlp_widths[i - 1] > 0:
        gains.append((f"n_{i}", mlp_readers(arch, i)))
    if arch.shared_norm:     # one norm: g_i * N(Z) read by the heads and the MLP alike
        return [(f"g_{i}", [name for _, readers in gains for name in readers])]
    return gains


def gain_rescaling_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                            put) -> None:
    """8. norm gain rescaling: g_k -> c g_k, column k of every reader / c (with a norm)."""
    for gain, readers in _gains(arch, blocks, i):
        for k in range(blocks[gain].shape[0]):
            parts = {gain: zero[gain].clone()}
            parts[gain][k] = blocks[gain][k]
            for name in readers:
                parts[name] = zero[name].clone()
                parts[name][:, k] = ops.neg(blocks[name][:, k])
            put(parts)


def mean_direction_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                            put) -> None:
    """9. layernorm mean directions."""
    for gain, readers in _gains(arch, blocks, i):
        _mean_directions(blocks, gain, readers, ops, put)


def layernorm_shift_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                             put) -> None:
    """10. layernorm shifts: a producer M -> M + 1 x^T (layernorm, no residual)."""
    for makers, _ in layer_stages(arch, blocks, i):
        for name in makers:
            for c in range(blocks[name].shape[1]):
                d = zero[name].clone()
                d[:, c] = 1
                put({name: d})


def norm_rotation_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                           put) -> None:
    """12. norm rotations (norm, no residual)."""
    _norm_rotations(arch, blocks, i, ops, put)


def _products_but_one(g: torch.Tensor, ops: TangentOps) -> torch.Tensor:
    """(prod_{j != k} g_j)_k."""
    column = []
    for k in range(g.shape[0]):
        acc = torch.ones_like(g[k])
        for j in range(g.shape[0]):
            if j != k:
                acc = ops.times(g[j], acc)
        column.append(acc)
    return torch.stack(column)


def _mean_directions(blocks: dict, gain: str, readers: list[str], ops: TangentOps, put) -> None:
    """Row r of a reader R gains (1/g)^T times prod_j g_j: column k is prod_{j != k} g_j."""
    row = _products_but_one(blocks[gain][:, 0], ops)
    for name in readers:
        for r in range(blocks[name].shape[0]):
            d = torch.zeros_like(blocks[name])
            d[r] = row
            put({name: d})


def _norm_rotations(arch: Architecture, blocks: dict, i: int, ops: TangentOps, put) -> None:
    """so(d) (layernorm: the part fixing 1) at each boundary after layer i, through the norm.

    Producers M -> M + s E M, readers R -> R - s R D E D^-1 with s = prod_j g_j (so the reader
    part D E D^-1 s, entry (a, b) = g_a E_ab prod_{j != b} g_j, is an integer polynomial).
    """
    for makers, readers in layer_stages(arch, blocks, i):
        g = stage_gain(blocks, readers, i)
        d = g.shape[0]
        others = _products_but_one(g, ops)
        s = ops.times(g[0], others[0])
        if arch.norm == "layernorm":   # a basis of the complement of 1: e_r - e_{d-1}
            basis = [torch.eye(d, dtype=torch.int64)[r] - torch.eye(d, dtype=torch.int64)[d - 1]
                     for r in range(d - 1)]
        else:
            basis = list(torch.eye(d, dtype=torch.int64))
        for a in range(len(basis)):
            for b in range(a + 1, len(basis)):
                E = torch.outer(basis[a], basis[b]) - torch.outer(basis[b], basis[a])
                E = (E > 0).to(g.dtype) + ops.neg((E < 0).to(g.dtype))
                parts = {name: ops.times(s, ops.mm(E, blocks[name])) for name in makers}
                inner = ops.mm(ops.mm(torch.diag(g), E), torch.diag(others))
                for name in readers:
                    parts[name] = ops.neg(ops.mm(blocks[name], inner))
                put(parts)


def qk_gain_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                     put) -> None:
    """QK-norm gain balance: qn -> c qn, kn -> kn / c on one unrotated coordinate, or on both
    coordinates of a rotated pair (a scalar on a pair commutes with its rotations): the score
    (qn * N(q))^T R^m (kn * N(k)) is unchanged, whatever the attention. With kv_heads the group's
    qn_g against every head's kn_h."""
    pairs = arch.rotated_pairs[i - 1] if arch.tokens > 1 else 0
    a = arch.keys[i - 1]
    coords = [(2 * f, 2 * f + 1) for f in range(pairs)] + [(c,) for c in range(2 * pairs, a)]
    for g, heads in kv_groups(arch, i):
        shared, own = ("qn", "kn") if arch.kv_heads is not None else ("kn", "qn")
        kn = f"{shared}_{i}_{g}"
        for coord in coords:
            parts = {kn: zero[kn].clone()}
            for c in coord:
                parts[kn][c] = ops.neg(blocks[kn][c])
            for h in heads:
                qn = f"{own}_{i}_{h}"
                parts[qn] = zero[qn].clone()
                for c in coord:
                    parts[qn][c] = blocks[qn][c]
            put(parts)


def shared_qk_gain_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                            put) -> None:
    """Shared QK-norm gain balance (qk_norm_shared: one gain qn_i, kn_i per layer for every
    head): qn_i -> c qn_i, kn_i -> kn_i / c on one unrotated coordinate, or on both coordinates
    of a rotated pair; every head's score (qn_i * N(q_h))^T R^m (kn_i * N(k_h)) is unchanged."""
    pairs = arch.rotated_pairs[i - 1] if arch.tokens > 1 else 0
    coords = [(2 * f, 2 * f + 1) for f in range(pairs)] + [(c,) for c in range(2 * pairs, arch.keys[i - 1])]
    qn, kn = f"qn_{i}", f"kn_{i}"
    for coord in coords:
        parts = {qn: zero[qn].clone(), kn: zero[kn].clone()}
        for c in coord:
            parts[qn][c] = blocks[qn][c]
            parts[kn][c] = ops.neg(blocks[kn][c])
        put(parts)


def final_gain_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict, put) -> None:
    """Final norm gain (untied logits): f_k -> c f_k, column k of L / c, as L reads f * N(Z)
    only; with layernorm also L + x (1/f)^T (N(Z) has zero mean), as family 9."""
    for k in range(blocks["f"].shape[0]):
        df, dL = zero["f"].clone(), zero["L"].clone()
        df[k] = blocks["f"][k]
        dL[:, k] = ops.neg(blocks["L"][:, k])
        put({"f": df, "L": dL})
    if arch.norm == "layernorm":
        _mean_directions(blocks, "f", ["L"], ops, put)


# Post-norm blocks (BERT: Z -> N(Z + att(Z)), Y -> N(Y + mlp(Y)), an embedding norm): every
# norm's output y = g * n + b (n of mean 0 under layernorm) is read by linear maps with biases
# and added to the next sub-layer's output before the next norm (docs/decoder_features.md,
# "Post-norm blocks (BERT)").

def post_norm_sites(arch: Architecture, blocks: dict) -> list[tuple[str, str | None, list[str], str | None]]:
    """(gain, bias, readers, back) of every norm of a post-norm network, in order: the blocks
    that read its output through their columns, and the output bias of the sub-layer whose
    result is added to it (None for the last norm, whose output is the network's, or where that
    bias is absent); the embedding norm (ge, ce) first."""
    sites, l = [], arch.n_layers

    def site(gain: str, bias: str, readers: list[str], back: str | None) -> None:
        sites.append((gain, bias if bias in blocks else None, readers,
                      back if back is not None and back in blocks else None))

    if arch.embed_norm:
        site("ge", "ce", consumers_of(arch, blocks, 1), "bo_1")
    for i in range(1, l + 1):
        after = (consumers_of(arch, blocks, i + 1), f"bo_{i + 1}") if i < l else ([], None)
        if arch.mlp_widths[i - 1] > 0:
            site(f"g_{i}", f"c_{i}", mlp_readers(arch, i), f"bu_{i}")
            site(f"n_{i}", f"cn_{i}", *after)
        else:
            site(f"g_{i}", f"c_{i}", *after)
    return sites


def post_norm_bias_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                            put) -> None:
    """18. post-norm layernorm bias shifts (docs/models.md rule 10): b -> b + e_r moves every
    reader's output by R e_r, which its bias takes off, and the stream added to the next
    sub-layer's output by e_r, which that sub-layer's output bias takes back; d per norm with
    readers and a next sub-layer (every reader with a bias)."""
    for _, bias, readers, back in post_norm_sites(arch, blocks):
        if bias is not None and back is not None and readers:
            shift_route(blocks, zero, ops, bias, readers, back, put)


def post_norm_reader_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                              put) -> None:
    """19. post-norm layernorm readers (docs/models.md rule 5): R y + c with y = g * n + b and
    1^T n = 0: row r of R gains (1/g)^T (times prod g, a polynomial), and c_r loses (1/g)^T b
    (times prod g); one per reader row (a reader without a bias only where the norm has none)."""
    for gain, bias, readers, _ in post_norm_sites(arch, blocks):
        _reader_means(blocks, zero, ops, gain, bias, readers, put)


def _reader_means(blocks: dict, zero: dict, ops: TangentOps, gain: str, bias: str | None,
                  readers: list[str], put) -> None:
    """The mean directions of readers R of a layernorm's output g * n + c (1^T n = 0): row r of
    R gains (1/g)^T and, with the bias c, the reader's bias entry r loses (1/g)^T c (both times
    prod_j g_j, integer polynomials); with c a reader without a bias gets none."""
    row = _products_but_one(blocks[gain][:, 0], ops)
    shift = None if bias is None else ops.neg(ops.mm(row.reshape(1, -1), blocks[bias]))
    for name in readers:
        rb = reader_bias(blocks, name)
        if shift is not None and rb is None:
            continue
        for r in range(blocks[name].shape[0]):
            parts = {name: zero[name].clone()}
            parts[name][r] = row
            if shift is not None:
                parts[rb] = zero[rb].clone()
                parts[rb][r] = shift[0]
            put(parts)


def post_norm_write_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                             put) -> None:
    """20. post-norm write means (docs/models.md rule 6): what attention i (its value outputs
    and biases, bo_i) and MLP i (U_i, bu_i) add to the stream reaches only the layernorm after
    them, which drops the all-ones component: each column of a writer gains 1."""
    for i in range(1, arch.n_layers + 1):
        writers = layer_writers(arch, blocks, i)
        for name in writers:
            for c in range(blocks[name].shape[1]):
                d = zero[name].clone()
                d[:, c] = 1
                put({name: d})


def embedding_norm_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                            put) -> None:
    """21. the embedding norm's means (docs/models.md rule 7): a row of E or Ty, or a column of
    T, gains c 1; the layernorm on their sum drops it."""
    for name, by_rows in (("E", True), ("T", False), ("Ty", True)):
        if name not in blocks:
            continue
        for k in range(blocks[name].shape[0 if by_rows else 1]):
            d = zero[name].clone()
            if by_rows:
                d[k] = 1
            else:
                d[:, k] = 1
            put({name: d})


def qk_norm_rescaling_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int,
                               zero: dict, put) -> None:
    """3''. per-head rescaling through a QK-norm (lightning): the scores (qn * N(q_j))^T R^m
    (kn * N(k_i)) are linear in the gain qn (a scalar commutes with the rotations), and
    lightning heads are linear in their scores, so qn -> c qn for every head of a group, and
    the group's value input (V_g or W_g, with bv_g) -> value / c, leaves every head unchanged.
    With key/value groups and value widths per head: kn_h -> c kn_h, O_h -> O_h / c (head h is
    O_h (W_g Z + bv_g) S_h); with groups and unfactored values per group: the group's qn_g (its
    Q_g's gain) -> c qn_g, V_g (bv_g) -> / c; without groups g is the head itself."""
    if arch.kv_heads is not None and arch.values is not None:
        for h in range(1, arch.head_counts[i - 1] + 1):
            put({f"kn_{i}_{h}": blocks[f"kn_{i}_{h}"].clone(),
                 f"O_{i}_{h}": ops.neg(blocks[f"O_{i}_{h}"])})
        return
    for g, _heads in kv_groups(arch, i):
        w_name, _ = value_names(blocks, i, g)
        parts = {f"qn_{i}_{g}": blocks[f"qn_{i}_{g}"].clone()}
        for name in [w_name] + bias_of(blocks, f"bv_{i}_{g}"):
            parts[name] = ops.neg(blocks[name])
        put(parts)


def gain_bias_rescaling_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int,
                                 zero: dict, put) -> None:
    """8'. norm gain rescaling with norm biases (norm_bias): a reader R sees g * N(Z) + c, that
    is sum_k R[:, k] (g_k N_k(Z) + c_k), so g_k -> a g_k, c_k -> a c_k and column k of every
    reader / a leaves it unchanged (c_i after g_i, cn_i after n_i)."""
    for gain, readers in _gains(arch, blocks, i):
        bias = f"c_{i}" if gain == f"g_{i}" else f"cn_{i}"
        for k in range(blocks[gain].shape[0]):
            parts = {gain: zero[gain].clone(), bias: zero[bias].clone()}
            parts[gain][k] = blocks[gain][k]
            parts[bias][k] = blocks[bias][k]
            for name in readers:
                parts[name] = zero[name].clone()
                parts[name][:, k] = ops.neg(blocks[name][:, k])
            put(parts)


def qk_layernorm_shift_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int,
                                zero: dict, put) -> None:
    """10''. shifts into a layernorm QK-norm: layernorm(q + t 1) = layernorm(q) exactly (the mean
    is taken off, the variance is unchanged), and the QK-norm reads q = Q z + bq whole, so
    Q -> Q + 1 x^T (column c of Q all ones) and bq -> bq + t 1 leave every score unchanged; the
    same for every key map. Every query and key map of the layer (per group as they are
    stored), one tangent per column and per bias."""
    for g, heads in kv_groups(arch, i):
        queries, keys = score_maps(arch, blocks, i, g, heads)
        for name in dict.fromkeys(queries + keys):
            for c in range(blocks[name].shape[1]):
                d = zero[name].clone()
                d[:, c] = 1
                put({name: d})


# Pre-norm layernorms with biases (norm_bias: c_i after g_i, cn_i after n_i; GPT-2): each norm's
# output g * n + c is read only by linear readers R y + b_R (the heads' query, key and value
# inputs, the MLP's gate and values), whatever else the block does with the stream
# (docs/decoder_features.md#mean-directions-and-bias-shifts-with-norm-biases).

def _biased_gains(arch: Architecture, blocks: dict, i: int) -> list[tuple[str, str, list[str]]]:
    """(gain, its bias, readers) of layer i's norms (`_gains`): c_i after g_i, cn_i after n_i."""
    return [(gain, ("c" if gain.startswith("g") else "cn") + gain[gain.index("_"):], readers)
            for gain, readers in _gains(arch, blocks, i)]


def norm_bias_mean_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                            put) -> None:
    """9'. layernorm mean directions with norm biases: a reader sees R (g * n + c) + b_R with
    1^T n = 0, so R -> R + x (1/g)^T adds the constant x (1/g)^T c to every token, which
    b_R -> b_R - x (1/g)^T c takes back: one tangent per row of every reader with a bias."""
    for gain, bias, readers in _biased_gains(arch, blocks, i):
        _reader_means(blocks, zero, ops, gain, bias, readers, put)


def norm_bias_shift_tangents(arch: Architecture, blocks: dict, ops: TangentOps, i: int, zero: dict,
                             put) -> None:
    """17''''. a layernorm's bias into its readers' biases: c -> c + e_r moves every reader's
    output by R e_r, which b_R -> b_R - R e_r takes back; nothing else reads the norm's output
    (a pre-norm block adds the un-normed stream to its result). One tangent per entry of c,
    at norms whose readers all have a bias."""
    for _, bias, readers in _biased_gains(arch, blocks, i):
        shift_route(blocks, zero, ops, bias, readers, "", put)


# Parallel blocks and the final norm with layernorm biases (Falcon, GPT-NeoX): a norm whose
# readers lack biases, the final norm's gain with its bias, the parallel block's two output
# biases, the stream's rotations moving every norm's bias
# (docs/decoder_features.md#parallel-blocks-and-the-final-norm-with-norm-biases).

def bias_free_sites(arch: Architecture, blocks: dict) -> list[tuple[str, str, list[str]]]:
    """(gain, its bias, readers) of every pre-norm with some reader without a bias (Falcon's
    heads and MLP without biases), and of the final norm read by untied logits L (no bias)."""
    sites = [(gain, bias, readers) for i in range(1, arch.n_layers + 1)
             for gain, bias, readers in _biased_gains(arch, blocks, i)
             if readers and any(reader_bias(blocks, name) is None for name in readers)]
    if _final_norm_read_by_logits(arch):
        sites.append(("f", "cf", ["L"]))
    return sites


def _final_norm_read_by_logits(arch: Architecture) -> bool:
    """A final norm read by untied logits L and by nothing else."""
    return (arch.final_norm and arch.vocab is not None and not arch.tied
            and not arch.hidden_output)


def bias_free_mean_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                            put) -> None:
    """9''. a layernorm's bias beside readers without biases: readers see R (g * n + c) with
    1^T n = 0, so c -> c + s e_k with s = (1/g)^T c and every reader R -> R - R e_k (1/g)^T
    change R y by -R e_k (1/g)^T c + s R e_k = 0 (first order). Times prod_j g_j the tangent is
    an integer polynomial (c: s prod g in entry k; R: column j of -R e_k prod_{l != j} g_l):
    one per entry of c."""
    for gain, bias, readers in bias_free_sites(arch, blocks):
        row = _products_but_one(blocks[gain][:, 0], ops)               # prod g / g_j
        s = ops.mm(row.reshape(1, -1), blocks[bias])                    # prod g (1/g)^T c
        for k in range(blocks[bias].shape[0]):
            parts = {bias: zero[bias].clone()}
            parts[bias][k] = s[0]
            for name in readers:
                parts[name] = ops.neg(ops.mm(blocks[name][:, k:k + 1].contiguous(),
                                             row.reshape(1, -1)))
            put(parts)


def final_gain_bias_tangents(arch: Architecture, blocks: dict, ops: TangentOps, zero: dict,
                             put) -> None:
    """8''. the final norm's gain with its bias (untied logits): L reads f * N(Z) + cf, that is
    sum_k L[:, k] (f_k N_k + cf_k), so f_k -> a f_k, cf_k -> a cf_k, column k of L / a."""
    for k in range(blocks["f"].shape[0]):
        parts = {"f": zero["f"].clone(), "cf": zero["cf"].clone(), "L": zero["L"].clone()}
        parts["f"][k] = blocks["f"][k]
        parts["cf"][k] = blocks["cf"][k]
        parts["L"][:, k] = ops.neg(blocks["L"][:, k])
        put(parts)
