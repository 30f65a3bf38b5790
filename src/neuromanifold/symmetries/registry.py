"""The registry of symmetry families: one object per family, looked up by name.

A `Family` says when it applies to a network, how its tangent vectors are built (one
construction, run in float or over F_p through a `catalogue.TangentOps`), its generic count
where one is proved, where the proof is (a docs anchor), and the move `fiber` reports when it
finds the family relating two weight sets. The dimension engines, the fibers and the docs read
families from here, never by position.

Two groups of families:
- the paper's model (one head, unfactored values, no residual, MLP or norm): the key GL(a),
  between-layer GL(d), rescaling and hidden/read-out families, whose tangents
  `paper.symmetry_tangents` and `paper.readout_tangents_float` build together (the exact and
  numerical engines split them off by a gauge where one applies: `dimension.gauge`);
- every other network: the families of `catalogue` (which hold for the paper's model too,
  its one-head instance), built one by one by `tangent_rows` in registry order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from ..core.architecture import Architecture
from ..core.blocks import block_layout
from . import actions
from . import catalogue as c
from .catalogue import FLOAT_OPS, TangentOps

_BLOCKS = "docs/blocks.md#the-symmetry-catalogue"
_DECODER = "docs/decoder_features.md"
_GQA = "docs/decoder_features.md#grouped-keyvalue-heads"
_POSITIONS = "docs/decoder_features.md#positions"
_EMBEDDINGS = "docs/decoder_features.md#embeddings-and-logits"
_NORMS = "docs/decoder_features.md#qk-norm-final-norm-parallel-blocks"
_COMBINED = "docs/decoder_features.md#combined-features"
_SHARED = "docs/decoder_features.md#one-shared-norm-shared-qk-norm-gains"
_UNROTATED_BIAS = "docs/decoder_features.md#the-softmax-query-bias-on-the-unrotated-coordinates"
_QK_RESCALING = "docs/decoder_features.md#per-head-rescaling-through-a-qk-norm"
_GAIN_BIAS = "docs/decoder_features.md#gains-with-norm-biases"
_QK_SHIFTS = "docs/decoder_features.md#shifts-into-a-layernorm-qk-norm"
_BIASED_UNSEEN = "docs/decoder_features.md#unseen-directions-with-reader-biases"


@dataclass(frozen=True)
class Family:
    """One symmetry family of the parametrisation.

    `applies(arch)`: whether the family acts on `arch` at all; `at_layer(arch, i)`: whether it
    contributes at layer i (1-based; None for a family built once for the whole network);
    `build`: the tangent construction (`catalogue`), per layer or for the whole network;
    `generic_count(arch)`: the number of independent tangents at a generic point where that is
    proved (None where it is only measured); `proof`: a docs anchor; `move`: the name of the
    `fiber` move that applies the family (None where `fiber` does not search it), and `act` its
    group action on named blocks (`actions`), with which `fiber` applies that move.
    """

    name: str
    paper: bool
    applies: Callable[[Architecture], bool]
    proof: str
    at_layer: Callable[[Architecture, int], bool] | None = None
    build: Callable | None = None
    generic_count: Callable[[Architecture], int | None] | None = None
    move: str | None = None
    act: Callable | None = None

    def count(self, arch: Architecture) -> int | None:
        """The proved generic count for `arch`, or None (not proved, or not applicable)."""
        if self.generic_count is None or not self.applies(arch):
            return None
        return self.generic_count(arch)


def _lightning(arch: Architecture) -> bool:
    return arch.attention == "lightning"


def _grouped(arch: Architecture) -> bool:
    """Key/value groups (kv_heads, transformers' grouping: Q_g and V_g or W_g per group) in some
    layer. kv_heads equal to the heads in every layer is the ungrouped network (group g is head
    g: the same blocks by name, in another order), for which every family is built."""
    return arch.kv_heads is not None and arch.kv_heads != arch.head_counts


def _rotated(arch: Architecture, i: int) -> int:
    """R_i, the pairs rotary positions rotate in layer i; 0 with one token (R^0 = I)."""
    return arch.rotated_pairs[i - 1] if arch.tokens > 1 else 0


def _plain_heads(arch: Architecture) -> bool:
    """Whether the per-group constructions of the position and QK-norm families model every
    option of `arch`: they do for groups (one change per key/value group) and biases (moved with
    their maps); an option they do not model is to be excluded here."""
    return True


def _plain_decoder(arch: Architecture) -> bool:
    """Whether the stream families' constructions (basis changes, rotations and shifts of the
    stream, at its ends too) model every option of `arch`: they move every writer's rows, bias
    columns included, and every reader's columns (gates, shared key/value maps, parallel
    MLPs among them), a reader's bias being added after it reads; an option they do not model
    (one that reads or writes the stream otherwise) is to be excluded here."""
    return _plain_heads(arch)


def _key_gl_count(arch: Architecture) -> int | None:
    """sum over heads (key/value groups with kv_heads) of a_i^2 when every a_i <= d_{i-1}
    (Lemma 3.1: GL(a) acts freely on full-rank (Q, K) with Q^T K fixed; a group's K_g alone has
    full rank a); None otherwise (then rank A < a and the orbit is smaller), and None with rotary
    positions (the rotary commutant replaces it in rotated layers)."""
    if any(a > d for a, d in zip(arch.keys, arch.widths[:-1])) or any(
            _rotated(arch, i) for i in range(1, arch.n_layers + 1)):
        return None
    return sum(G * a * a for G, a in zip(arch.kv_counts, arch.keys))


def _rotary_count(arch: Architecture) -> int | None:
    """sum over the heads (key/value groups with kv_heads) of rotated layers of
    2 R_i + (a_i - 2 R_i)^2 when every a_i <= d_{i-1}: the commutant of the rotations
    (docs/decoder_features.md#positions) acts freely on a full-rank K_g; None otherwise."""
    if any(a > d for a, d in zip(arch.keys, arch.widths[:-1])):
        return None
    return sum(G * (2 * r + (a - 2 * r) ** 2) for i, (G, a) in
               enumerate(zip(arch.kv_counts, arch.keys), start=1)
               if (r := _rotated(arch, i)))


def _value_gl_count(arch: Architecture) -> int | None:
    """sum over heads of v_i^2 when v_i <= min(d_{i-1}, d_i) (GL(v) acts freely on full-rank
    (W, O) with O W fixed); None otherwise."""
    if arch.values is None:
        return None
    if any(v > min(d_in, d_out) for v, d_in, d_out in
           zip(arch.values, arch.widths[:-1], arch.widths[1:])):
        return None
    return sum(G * v * v for G, v in zip(arch.kv_counts, arch.values))


def _key_sum_count(arch: Architecture) -> int:
    """sum over layers of (H_i - G_i) a_i (d_{i-1} + bias): the translations K_h -> K_h + D,
    K_first -> K_first - D of each group, one per entry of a non-first key (and its bias),
    on distinct coordinates, hence independent."""
    return sum((H - G) * a * (d + arch.bias) for H, G, a, d in
               zip(arch.head_counts, arch.kv_counts, arch.keys, arch.widths[:-1]))


def _value_bias_count(arch: Architecture) -> int:
    """sum over layers of G_i times the value bias length (d_i, or v_i): one tangent per entry
    of a value bias, each moving its own coordinate."""
    widths = arch.values if arch.values is not None else arch.widths[1:]
    return sum(G * w for G, w in zip(arch.kv_counts, widths))


def _qk_gain_count(arch: Architecture) -> int:
    """One scaling per unrotated coordinate and per rotated pair of each head (key/value group
    with kv_heads: its heads share kn_g): qn -> c qn, kn -> kn / c on it (the rotations commute
    with a scalar on a pair): sum G (a - R)."""
    return sum(G * (a - _rotated(arch, i)) for i, (G, a) in
               enumerate(zip(arch.kv_counts, arch.keys), start=1))


def _shared_qk_gain_count(arch: Architecture) -> int:
    """One scaling per unrotated coordinate and per rotated pair of each layer's shared gains
    (qn_i -> c qn_i, kn_i -> kn_i / c on it): sum (a - R), on distinct coordinates of qn_i."""
    return sum(a - _rotated(arch, i) for i, a in enumerate(arch.keys, start=1))


def _unrotated_bias_count(arch: Architecture) -> int:
    """sum over layers of the query biases (one per group bq_g; a group is a head without
    kv_heads) times the a_i - 2 R_i unrotated coordinates (a_i with one token): one tangent per
    entry, on distinct coordinates, hence independent."""
    return sum(n * (a - 2 * _rotated(arch, i)) for i, (n, a) in
               enumerate(zip(arch.kv_counts, arch.keys), start=1))


def _qk_rescaling_count(arch: Architecture) -> int:
    """sum over layers of G_i (H_i with value widths: one per output map O_h): one tangent per
    value input or output map, each scaling its own non-zero block, hence independent."""
    return sum(arch.head_counts if arch.values is not None else arch.kv_counts)


def _qk_shift_count(arch: Architecture) -> int:
    """sum over layers of the score maps (H_i + G_i: queries per head and keys per group, or
    the reverse with gqa) times d_{i-1} + bias: one tangent per column, each a distinct column
    of a distinct block, hence independent."""
    return sum((H + G) * (d + arch.bias) for H, G, d in
               zip(arch.head_counts, arch.kv_counts, arch.widths[:-1]))


def _stream_basis_count(arch: Architecture) -> int | None:
    """None: the group acts freely only where the stream's writers and readers have full rank
    (V >= d_0 among them); the rank is measured, not proved, for every size."""
    return None


FAMILIES: tuple[Family, ...] = (
    # The paper's model (docs/math/deep.md, docs/hidden_directions.md).
    Family("key GL(a_i) (Lemma 3.1)", True, lambda a: not a.is_block,
           "docs/math/single-layer.md#from-q-k-to-a", generic_count=_key_gl_count,
           move="GL(a_i)", act=actions.paper_keys),
    Family("between-layer GL(d_i) (Eq. 9)", True, lambda a: not a.is_block and a.n_layers > 1,
           "docs/math/deep.md#symmetries", move="GL(d_i)", act=actions.paper_between_layers),
    Family("rescaling (Eq. 13)", True, lambda a: not a.is_block and _lightning(a),
           "docs/math/deep.md#symmetries", move="rescale", act=actions.paper_rescale),
    Family("hidden directions (kernel of the layer map)", True,
           lambda a: not a.is_block and a.n_layers > 1,
           "docs/hidden_directions.md#1-kernel-of-the-layer-map-the-hidden-block",
           move="unseen directions"),
    Family("read-out directions", True, lambda a: not a.is_block and a.n_layers > 1,
           "docs/hidden_directions.md#2-the-read-out-symmetry"),
    # Every other network: heads, value widths, residuals, MLPs, norms (docs/blocks.md).
    Family("per-head GL(a) on (Q, K)", False, lambda a: not a.qk_norm, _BLOCKS,
           at_layer=lambda a, i: not _rotated(a, i), build=c.key_gl_tangents,
           generic_count=_key_gl_count, move="per-head GL(a)", act=actions.key_gl),
    # Rotary positions: GL(a) breaks to the commutant of the rotations (decoder features); per
    # key/value group, biases following their maps.
    Family("rotary commutant on (Q, K)", False,
           lambda a: (a.positions == "rope" and a.tokens > 1 and not a.qk_norm
                      and _plain_heads(a)), _POSITIONS,
           at_layer=lambda a, i: _rotated(a, i) > 0, build=c.rotary_commutant_tangents,
           generic_count=_rotary_count, move="rotary commutant", act=actions.rotary_commutant),
    Family("per-head GL(v) on (W, O)", False, lambda a: a.values is not None,
           _BLOCKS, at_layer=lambda a, i: True, build=c.value_gl_tangents,
           generic_count=_value_gl_count, move="per-head GL(v)", act=actions.value_gl),
    Family("per-head rescaling", False, lambda a: _lightning(a) and not a.qk_norm, _BLOCKS,
           at_layer=lambda a, i: True, build=c.head_rescaling_tangents,
           move="per-head rescaling", act=actions.rescale_head),
    Family("gqa head mixing", False,
           lambda a: _lightning(a) and _grouped(a) and a.values is not None and not a.qk_norm,
           _GQA, at_layer=lambda a, i: a.head_counts[i - 1] > a.kv_counts[i - 1],
           build=c.gqa_head_mixing_tangents, move="gqa head mixing", act=actions.mix_group_heads),
    Family("head mixing", False,
           lambda a: (_lightning(a) and not a.bias and not a.qk_norm
                      and not (_grouped(a) and a.values is not None)), _BLOCKS,
           at_layer=lambda a, i: (a.kv_counts[i - 1] > 1 and a.keys[i - 1] >= a.widths[i - 1]
                                  and not _rotated(a, i)),
           build=c.head_mixing_tangents, move="head mixing", act=actions.mix_heads),
    # Embeddings and logits, no norm: the stream's basis at the ends (decoder features). Every
    # writer's rows move, bias columns included (a reader's bias is added after it reads);
    # groups write through their shared value maps, a gate reads like P.
    Family("stream basis at the embedding and logits", False,
           lambda a: a.vocab is not None and a.norm == "none" and _plain_decoder(a), _EMBEDDINGS,
           build=c.stream_basis_tangents, generic_count=_stream_basis_count),
    Family("stream rotations behind norms", False,
           lambda a: (a.vocab is not None and a.residual and a.norm != "none"
                      and not (a.tied and a.final_norm) and _plain_decoder(a)), _NORMS,
           build=c.stream_rotation_tangents),
    Family("stream shifts behind layernorm", False,
           lambda a: (a.residual and a.norm == "layernorm" and a.final_norm
                      and _plain_decoder(a)), _NORMS,
           build=c.stream_shift_tangents),
    # QK-norm and the final norm's gains (decoder features); per key/value group.
    Family("QK-norm gain balance", False, lambda a: a.qk_norm and _plain_heads(a), _NORMS,
           at_layer=lambda a, i: True, build=c.qk_gain_tangents, generic_count=_qk_gain_count,
           move="QK-norm gain balance", act=actions.balance_qk_gains),
    # Qwen3: one QK-norm gain per layer shared by the heads (qk_norm_shared).
    Family("shared QK-norm gain balance", False, lambda a: a.qk_norm_shared, _SHARED,
           at_layer=lambda a, i: True, build=c.shared_qk_gain_tangents,
           generic_count=_shared_qk_gain_count),
    Family("final norm gain", False, lambda a: a.final_norm and a.vocab is not None and not a.tied,
           _NORMS, build=c.final_gain_tangents, move="final norm gain",
           act=actions.scale_final_gain),
    Family("between-layer GL", False, lambda a: not a.residual and a.norm == "none",
           _BLOCKS, at_layer=lambda a, i: True, build=c.between_layer_tangents),
    Family("MLP neuron rescaling", False,
           lambda a: a.mlp is not None and (a.activation in ("square", "relu")
                                            or a.mlp_kind == "gated"),
           _BLOCKS, at_layer=lambda a, i: a.mlp_widths[i - 1] > 0,
           build=c.neuron_rescaling_tangents, move="MLP neuron rescaling",
           act=actions.rescale_neurons),
    Family("unseen directions", False, lambda a: not a.residual, _BLOCKS,
           at_layer=lambda a, i: True, build=c.unseen_tangents),
    Family("norm gain rescaling", False, lambda a: a.norm != "none", _BLOCKS,
           at_layer=lambda a, i: True, build=c.gain_rescaling_tangents),
    Family("layernorm mean directions", False, lambda a: a.norm == "layernorm",
           _BLOCKS, at_layer=lambda a, i: True, build=c.mean_direction_tangents),
    Family("layernorm shifts", False,
           lambda a: a.norm == "layernorm" and not a.residual, _BLOCKS,
           at_layer=lambda a, i: True, build=c.layernorm_shift_tangents),
    # The ends of a stream without a residual behind norms: the input stream (positions, an
    # untied embedding) read only through layer 1's norm, the last one only by a final norm or
    # the logits (decoder features).
    Family("layernorm shifts at the ends", False,
           lambda a: (a.norm == "layernorm" and not a.residual
                      and (a.positions == "learned" or (a.vocab is not None and not a.tied)
                           or a.final_norm) and _plain_decoder(a)), _COMBINED,
           build=c.end_shift_tangents),
    Family("norm rotations at the ends", False,
           lambda a: (a.norm != "none" and not a.residual and a.vocab is not None
                      and not a.tied and _plain_decoder(a)), _COMBINED,
           build=c.end_rotation_tangents),
    Family("one-token softmax", False,
           lambda a: (a.attention == "softmax" and a.tokens == 1
                      and not (_grouped(a) and a.values is not None)), _BLOCKS,
           at_layer=lambda a, i: True, build=c.one_token_tangents),
    Family("norm rotations", False, lambda a: a.norm != "none" and not a.residual,
           _BLOCKS, at_layer=lambda a, i: True, build=c.norm_rotation_tangents),
    # Decoder options (docs/decoder_features.md).
    # Only the sum of a group's K_h enters linear scores beside a shared value map V_g: not behind
    # a QK-norm, not with value widths (one O_h per head: the gqa head mixing instead).
    Family("grouped key sums", False,
           lambda a: _lightning(a) and _grouped(a) and a.values is None and not a.qk_norm,
           _DECODER + "#grouped-keyvalue-heads",
           at_layer=lambda a, i: a.head_counts[i - 1] > a.kv_counts[i - 1],
           build=c.key_sum_tangents, generic_count=_key_sum_count,
           move="grouped key sums", act=actions.shift_key_sums),
    # b_q^T k_i is constant over the aggregated token j only when nothing acts on q after the
    # bias: not with rotary positions (R^j b_q varies with j) nor behind a QK-norm (measured: a
    # tangent outside the kernel with rope).
    Family("softmax query bias", False,
           lambda a: (a.attention == "softmax" and a.bias and a.positions != "rope"
                      and not a.qk_norm),
           _DECODER + "#biases", at_layer=lambda a, i: True, build=c.query_bias_tangents,
           generic_count=lambda a: sum(G * k for G, k in zip(a.kv_counts, a.keys)),
           move="query bias shift", act=actions.shift_query_bias),
    Family("value bias beside output bias", False, lambda a: a.attention == "softmax" and a.bias,
           _DECODER + "#biases", at_layer=lambda a, i: True, build=c.value_bias_tangents,
           generic_count=_value_bias_count, move="value bias shift", act=actions.shift_value_bias),
    # Sequential blocks: the MLP reads the stream after attention; parallel blocks: layer i's
    # heads and MLP read the same stream, and bo_i, bu_i write to the same output.
    Family("output bias into readers' biases", False,
           lambda a: (a.bias or a.mlp_bias) and a.norm == "none",
           _DECODER + "#biases", at_layer=lambda a, i: True, build=c.bias_shift_tangents),
    # The input stream (positions, or an untied embedding) shifted into layer 1's biases.
    Family("input shift into readers' biases", False,
           lambda a: (a.bias and a.norm == "none"
                      and (a.positions == "learned" or (a.vocab is not None and not a.tied))),
           _COMBINED, build=c.input_shift_tangents),
    Family("embedding shift into positions", False,
           lambda a: a.vocab is not None and not a.tied and a.positions == "learned",
           _COMBINED, build=c.embedding_position_tangents,
           generic_count=lambda a: a.widths[0]),
    Family("one-token basis changes", False,
           lambda a: (a.attention == "softmax" and a.tokens == 1 and a.residual
                      and a.norm == "none" and a.kv_heads is None and not a.bias
                      and not a.mlp_bias and a.mlp_kind == "plain" and not a.parallel), _BLOCKS,
           build=c.basis_change_tangents),
    # Loose brackets closed (docs/decoder_features.md#combined-features). Under rotary
    # positions the softmax query bias survives on the unrotated coordinates (R^m is the
    # identity there); not behind a QK-norm (the bias is inside the norm).
    Family("softmax query bias on unrotated coordinates", False,
           lambda a: (a.attention == "softmax" and a.bias and a.positions == "rope"
                      and not a.qk_norm), _UNROTATED_BIAS,
           at_layer=lambda a, i: a.keys[i - 1] > 2 * _rotated(a, i),
           build=c.unrotated_query_bias_tangents, generic_count=_unrotated_bias_count),
    # Lightning scores are linear in a QK-norm's gains: a head's (a group's) query gain against
    # its value input, as the per-head rescaling does with Q without a QK-norm.
    Family("QK-norm per-head rescaling", False, lambda a: _lightning(a) and a.qk_norm,
           _QK_RESCALING, at_layer=lambda a, i: True, build=c.qk_norm_rescaling_tangents,
           generic_count=_qk_rescaling_count),
    # With layernorm biases (norm_bias) the gain rescaling scales the bias entry with its gain
    # (the family `norm gain rescaling` is left out there: it keeps the bias).
    Family("gain and bias rescaling", False, lambda a: a.norm != "none" and a.norm_bias,
           _GAIN_BIAS, at_layer=lambda a, i: True, build=c.gain_bias_rescaling_tangents),
    # A layernorm QK-norm ignores shifts of q (and k) along 1: every score map's columns and bias.
    Family("QK layernorm shifts", False, lambda a: a.qk_norm and a.norm == "layernorm",
           _QK_SHIFTS, at_layer=lambda a, i: True, build=c.qk_layernorm_shift_tangents,
           generic_count=_qk_shift_count),
    # Without a residual or a norm a reader with a bias takes back the constant a direction the
    # producers' maps never write still carries through the bias written to every token.
    Family("unseen directions with reader biases", False,
           lambda a: not a.residual and a.norm == "none" and (a.bias or a.mlp_bias), _BIASED_UNSEEN,
           at_layer=lambda a, i: True, build=c.biased_unseen_tangents),
    # Parallel blocks: a reader without a bias (P without MLP biases) lets the input shift
    # through when it reads nothing of it.
    Family("input shift in the kernel of bias-free readers", False,
           lambda a: (a.parallel and a.bias and a.norm == "none"
                      and (a.positions == "learned" or (a.vocab is not None and not a.tied))),
           _COMBINED, build=c.input_kernel_shift_tangents),
)



def _unproved_with(name: str, arch: Architecture) -> bool:
    """True where a converter feature (issue 22) breaks the assumptions of family `name`'s
    construction: layernorm biases (the norm families move gains and readers, not a bias after
    the gain), key/value groups (per-group Q and V or W, per-head K and O: only the families of
    `_GROUPED_PROVED` are built and proved for them, docs/decoder_features.md), q/k/v
    biases without b_o (the families that move b_o), an embedding scale (the stream families move E with the readers). Such a family is
    left out: the bound stays open (lower-bound), never a wrong one."""
    bert = _bert_unproved(name, arch)
    if bert is not None:
        return bert
    if _grouped(arch) and name not in _GROUPED_PROVED:
        return True
    # One norm per parallel block, QK-norm gains shared by the heads: only the families checked
    # for them (docs/decoder_features.md#one-shared-norm-shared-qk-norm-gains).
    if arch.shared_norm and name not in _SHARED_NORM_PROVED:
        return True
    if arch.qk_norm_shared and name not in _SHARED_QK_PROVED:
        return True
    if (arch.norm_bias and any(w in name for w in ("norm", "stream", "unseen", "one-token"))
            and name not in _NORM_BIAS_PROVED):
        return True
    # They write a shift through E that a bias or T must take back by the same amount, built
    # for an unscaled embedding (s E^T X: the stream gains s x). The stream's basis changes,
    # rotations and shifts along 1 hold for every s (docs/decoder_features.md#an-embedding-scale).
    if arch.embed_scale != 1.0 and any(w in name for w in _MOVES_EMBEDDING):
        return True
    # They move b_o (or may: the shifts written back to the stream), built with it present. With
    # groups and value widths the basis changes, rotations and layernorm shifts of a residual
    # stream move b_o only as one more writer (by rows, like O_h), so they hold without it
    # (docs/decoder_features.md).
    if _grouped(arch) and arch.values is not None and name in _STREAM_CHANGES:
        return False
    return arch.bias and not arch.out_bias and any(w in name for w in _MOVES_OUTPUT_BIAS)


# The families built for key/value groups (a grouped branch in their construction, or blocks they
# move alike): per-group GL(a) and its rotary commutant (Q_g, every K_h of the group), per-group
# GL(v) (W_g, every O_h), per-head rescaling (lightning: K_h, O_h; unfactored: every K_h of the
# group against V_g), the gqa head mixing (value widths) or the grouped key sums and the head
# mixing between groups (unfactored, lifted to a group's first K_h), the one-token softmax
# (unfactored), the softmax query bias (bq_g), the QK-norm gain balance (qn_g, every kn_h), the
# norm gains and layernorm means (their readers K_h, Q_g, V_g / W_g), the MLP's neurons and the
# final gain, and the stream's families, which move its writers (every head's O_h, or the
# groups' V_g and bv_g, and bo_i) by rows and its readers (K_h, Q_g, V_g / W_g) by columns, their
# biases after them (docs/decoder_features.md, grouped key/value heads). Not the one-token basis
# changes (built without groups).
_GROUPED_PROVED = ("per-head GL(a) on (Q, K)", "rotary commutant on (Q, K)", "per-head GL(v) on (W, O)",
               "per-head rescaling", "gqa head mixing", "grouped key sums", "head mixing",
               "one-token softmax", "softmax query bias",
               "value bias beside output bias", "QK-norm gain balance", "norm gain rescaling",
               "layernorm mean directions", "MLP neuron rescaling", "final norm gain",
               "stream basis at the embedding and logits", "stream rotations behind norms",
               "stream shifts behind layernorm", "between-layer GL", "unseen directions",
               "layernorm shifts", "norm rotations", "layernorm shifts at the ends",
               "norm rotations at the ends", "output bias into readers' biases",
               "input shift into readers' biases", "embedding shift into positions",
               "shared QK-norm gain balance")   # qn_i, kn_i: every head's, whatever the grouping
# shared_norm: the families that do not read the norms (attention's and the MLP's own), and the
# norm families whose readers of g_i include the MLP's (`catalogue.norms._gains`, `catalogue.stream._mlp_gain`).
_SHARED_NORM_PROVED = ("per-head GL(a) on (Q, K)", "rotary commutant on (Q, K)",
                       "per-head GL(v) on (W, O)", "per-head rescaling", "gqa head mixing",
                       "head mixing", "QK-norm gain balance", "shared QK-norm gain balance",
                       "final norm gain", "MLP neuron rescaling", "norm gain rescaling",
                       "layernorm mean directions", "stream rotations behind norms",
                       "stream shifts behind layernorm", "one-token softmax", "grouped key sums",
                       "softmax query bias", "value bias beside output bias",
                       "embedding shift into positions")
# qk_norm_shared: every family that moves no QK-norm gain (the per-head balance is replaced).
_SHARED_QK_PROVED = tuple(name for name in _SHARED_NORM_PROVED if name != "QK-norm gain balance") + (
    "stream basis at the embedding and logits", "between-layer GL", "unseen directions",
    "layernorm shifts", "norm rotations", "layernorm shifts at the ends",
    "norm rotations at the ends", "output bias into readers' biases",
    "input shift into readers' biases")
# The loose brackets' families hold with key/value groups as written (their proofs take
# each group's bq_g, each head's kn_h and O_h with value widths, each group's qn_g and V_g
# without).
_GROUPED_PROVED += ("softmax query bias on unrotated coordinates", "QK-norm per-head rescaling",
                    "gain and bias rescaling", "QK layernorm shifts")
# Families that hold with layernorm biases as built: shifts along 1 before a layernorm (the bias
# is added after it; docs/decoder_features.md#gains-with-norm-biases).
_NORM_BIAS_PROVED = ("layernorm shifts", "stream shifts behind layernorm",
                     "layernorm shifts at the ends")
_STREAM_CHANGES = ("stream basis at the embedding and logits", "stream rotations behind norms",
                   "stream shifts behind layernorm")
_MOVES_EMBEDDING = ("input shift", "embedding shift")
_MOVES_OUTPUT_BIAS = ("output bias", "input shift", "stream", "shift", "at the ends")


def _bert_unproved(name: str, arch: Architecture) -> bool | None:
    """For a network with BERT's options (post-norm blocks, an embedding norm, token types):
    True for a family not built and proved for them (only the families acting inside one
    sub-layer, whose output they keep exactly whatever surrounds it, the embedding's moves and
    the post-norm families, docs/decoder_features.md#post-norm-blocks-bert, are); for a
    post-norm family, whether an embedding scale breaks it (they are built for norm biases,
    groups and a missing b_o). Without them, the hidden state as output is judged by
    `_hidden_unproved`; None otherwise (the other guards decide)."""
    bert = arch.post_norm or arch.embed_norm or arch.token_types is not None
    if not bert:
        return _hidden_unproved(name, arch)
    if name not in _BERT_PROVED:
        return True
    if name in _POST_NORM_NAMES:
        return arch.embed_scale != 1.0 and name in ("embedding norm means",
                                                    "token types beside the embedding")
    return None


# Families that act inside one attention or MLP sub-layer and keep its output exactly, the
# embedding's moves (the input stream unchanged), and the post-norm families below.
_BERT_PROVED = ("embedding shift into positions", "per-head GL(a) on (Q, K)", "rotary commutant on (Q, K)", "per-head GL(v) on (W, O)",
                "per-head rescaling", "gqa head mixing", "softmax query bias",
                "value bias beside output bias", "QK-norm gain balance", "MLP neuron rescaling",
                "grouped key sums")


def _hidden_unproved(name: str, arch: Architecture) -> bool | None:
    """For a network without BERT's options whose output is its last hidden state
    (`hidden_output`: a pre-norm decoder's base model, after its final norm): True for every
    family not in `_HIDDEN_PROVED` (a family added to the registry stays out until it is listed
    there with its reason, docs/decoder_features.md#the-last-hidden-state-as-output); None
    otherwise (the other guards decide)."""
    if not arch.hidden_output:
        return None
    return True if name not in _HIDDEN_PROVED else None


# The families that keep a pre-norm network's last hidden state (the final norm's output, or
# the last block's stream without one) exactly: those acting inside one attention or MLP
# sub-layer (they keep its output whatever surrounds it); a block's own norms and their readers
# (g_i, n_i and their biases c_i, cn_i; `catalogue.norms._gains` never lists the final norm f); the
# embedding shift into positions (E^T X + T unchanged); and the shifts of a residual stream
# along 1 behind layernorms, which the final layernorm (read as the output) ignores as every
# block's does (the family needs a final norm). With layernorm biases, a block norm's mean
# directions and bias taken back by its readers' biases (lnbias's two families, built on
# `catalogue.norms._gains`: g_i, n_i, never f) are local to the block too. Not listed, so left out: every family that moves
# the output side, whose proof needs a reader after the last block to take a change back: the
# stream's rotations behind norms and its basis at the embedding and logits (the final norm's
# output R x is not undone), the final norm gain (absorbed by L, absent here), the ends of a
# stream without a residual, the bias shifts into readers (the last layer's reach the output).
_HIDDEN_PROVED = ("per-head GL(a) on (Q, K)", "rotary commutant on (Q, K)",
                  "per-head GL(v) on (W, O)", "per-head rescaling", "gqa head mixing",
                  "head mixing", "grouped key sums", "softmax query bias",
                  "softmax query bias on unrotated coordinates", "value bias beside output bias",
                  "QK-norm gain balance", "shared QK-norm gain balance",
                  "QK-norm per-head rescaling", "QK layernorm shifts", "MLP neuron rescaling",
                  "norm gain rescaling", "gain and bias rescaling", "layernorm mean directions",
                  "embedding shift into positions", "stream shifts behind layernorm",
                  "layernorm means with reader biases", "layernorm bias into readers' biases",
                  # parfam's block-local families: a block norm's bias beside its bias-free
                  # readers (the final norm's site needs logits: `_final_read_by_logits` is
                  # False with hidden_output) and a parallel block's two output biases (their
                  # sum reaches the stream, b_o + x + b_u - x)
                  "layernorm bias beside bias-free readers", "parallel output bias trade")


_POST_NORM = "docs/decoder_features.md#post-norm-blocks-bert"


def _post_norm_counts(arch: Architecture) -> list[tuple[int, list[int], bool]]:
    """(width, reader row counts, has a next sub-layer) of every norm of a post-norm network,
    as `catalogue.norms.post_norm_sites` lists them (the embedding norm first)."""
    def readers(i: int) -> list[int]:       # layer i's query, key and value rows, every head
        if i > arch.n_layers:
            return []
        widths = arch.values if arch.values is not None else arch.widths[1:]
        H, G = arch.head_counts[i - 1], arch.kv_counts[i - 1]
        return [arch.keys[i - 1]] * (G + H) + [widths[i - 1]] * G    # Q_g, K_h, V_g / W_g

    sites = [(arch.widths[0], readers(1), True)] if arch.embed_norm else []
    for i in range(1, arch.n_layers + 1):
        m, d = arch.mlp_widths[i - 1], arch.widths[i]
        if m > 0:
            sites.append((d, [m] * (2 if arch.mlp_kind == "gated" else 1), True))
        sites.append((d, readers(i + 1), i < arch.n_layers))
    return sites


def _post_norm_bias_count(arch: Architecture) -> int | None:
    """d per norm with readers and a next sub-layer: distinct bias coordinates, independent
    (with every reader's bias and the output biases: `bias`, `mlp_bias`, `out_bias`)."""
    if not (arch.bias and arch.out_bias and (arch.mlp is None or arch.mlp_bias)):
        return None
    return sum(d for d, rows, nxt in _post_norm_counts(arch) if rows and nxt)


def _post_norm_reader_count(arch: Architecture) -> int | None:
    """One per reader row (each tangent moves its own row by prod_{j != k} g_j, non-zero
    generically): with every reader's bias, or without norm biases."""
    if arch.norm_bias and not (arch.bias and (arch.mlp is None or arch.mlp_bias)):
        return None
    return sum(sum(rows) for _, rows, _ in _post_norm_counts(arch))


def _post_norm_write_count(arch: Architecture) -> int:
    """One per column of every writer: each head's value output (v_i or d_{i-1} columns; every
    head's O_h with value widths, each group's V_g without), unfactored value biases, bo_i, and U_i (m_i), bu_i."""
    total = 0
    for i in range(1, arch.n_layers + 1):
        H, G, d_in = arch.head_counts[i - 1], arch.kv_counts[i - 1], arch.widths[i - 1]
        heads = H if arch.values is not None else G
        total += heads * (arch.values[i - 1] if arch.values is not None else d_in)
        total += G * arch.bias if arch.values is None else 0     # bv_g of unfactored values
        total += int(arch.bias and arch.out_bias)
        if arch.mlp_widths[i - 1] > 0:
            total += arch.mlp_widths[i - 1] + int(arch.mlp_bias)
    return total


_POST_NORM_FAMILIES = (
    Family("post-norm bias shifts", False,
           lambda a: a.post_norm and a.norm_bias, _POST_NORM,
           build=c.post_norm_bias_tangents, generic_count=_post_norm_bias_count),
    Family("post-norm readers' means", False,
           lambda a: a.post_norm and a.norm == "layernorm", _POST_NORM,
           build=c.post_norm_reader_tangents, generic_count=_post_norm_reader_count),
    Family("post-norm write means", False,
           lambda a: a.post_norm and a.norm == "layernorm", _POST_NORM,
           build=c.post_norm_write_tangents, generic_count=_post_norm_write_count),
    Family("embedding norm means", False,
           lambda a: a.embed_norm and a.norm == "layernorm" and not a.tied, _POST_NORM,
           build=c.embedding_norm_tangents,
           generic_count=lambda a: a.vocab + (a.token_types or 0)
           + (a.tokens if a.positions == "learned" else 0)),
    Family("token types beside the embedding", False,
           lambda a: a.token_types is not None and not a.tied, _POST_NORM,
           build=c.token_type_tangents, generic_count=lambda a: a.widths[0]),
)
_POST_NORM_NAMES = tuple(f.name for f in _POST_NORM_FAMILIES)
_BERT_PROVED += _POST_NORM_NAMES
FAMILIES = FAMILIES + _POST_NORM_FAMILIES


# Pre-norm layernorms with biases (GPT-2): the mean directions and the bias shifts of each norm,
# taken back by its readers' biases (docs/decoder_features.md#mean-directions-and-bias-shifts-with-norm-biases).
_NORM_BIAS_MEANS = "docs/decoder_features.md#mean-directions-and-bias-shifts-with-norm-biases"


def _norm_reader_sites(arch: Architecture) -> list[tuple[int, list[tuple[int, bool]]]]:
    """(width, [(rows, has a bias) per reader]) of every pre-norm, as `catalogue.norms._gains` lists
    them: g_i read by each head's query and key rows and each group's value rows (Q_g, K_h,
    V_g / W_g), n_i by the MLP's gate and values (one norm g_i for both with shared_norm)."""
    sites = []
    for i in range(1, arch.n_layers + 1):
        H, G, a = arch.head_counts[i - 1], arch.kv_counts[i - 1], arch.keys[i - 1]
        w = arch.values[i - 1] if arch.values is not None else arch.widths[i]
        heads = [(a, arch.bias)] * (H + G) + [(w, arch.bias)] * G
        m = arch.mlp_widths[i - 1]
        mlp = [(m, arch.mlp_bias)] * (2 if arch.mlp_kind == "gated" else 1) if m > 0 else []
        if arch.shared_norm:
            sites.append((arch.widths[i - 1], heads + mlp))
        else:
            sites += [(arch.widths[i - 1], heads)] + ([(arch.widths[i], mlp)] if mlp else [])
    return sites


def _norm_bias_mean_count(arch: Architecture) -> int:
    """One per row of every reader with a bias: each tangent moves its own row by
    prod_{j != k} g_j (non-zero generically), hence independent."""
    return sum(rows for _, readers in _norm_reader_sites(arch) for rows, biased in readers
               if biased)


def _norm_bias_shift_count(arch: Architecture) -> int:
    """The width of every norm whose readers all have a bias: each tangent moves its own entry
    of the norm's bias by 1, hence independent."""
    return sum(d for d, readers in _norm_reader_sites(arch)
               if readers and all(biased for _, biased in readers))


def _pre_layernorm_bias(arch: Architecture) -> bool:
    """Pre-norm layernorms with biases (not post-norm: BERT's norms sit elsewhere)."""
    return arch.norm == "layernorm" and arch.norm_bias and not arch.post_norm


_NORM_BIAS_FAMILIES = (
    Family("layernorm means with reader biases", False, _pre_layernorm_bias, _NORM_BIAS_MEANS,
           at_layer=lambda a, i: True, build=c.norm_bias_mean_tangents,
           generic_count=_norm_bias_mean_count),
    Family("layernorm bias into readers' biases", False, _pre_layernorm_bias, _NORM_BIAS_MEANS,
           at_layer=lambda a, i: True, build=c.norm_bias_shift_tangents,
           generic_count=_norm_bias_shift_count),
)
_NORM_BIAS_PROVED += tuple(f.name for f in _NORM_BIAS_FAMILIES)
_GROUPED_PROVED += tuple(f.name for f in _NORM_BIAS_FAMILIES)   # readers per group as stored
FAMILIES = FAMILIES + _NORM_BIAS_FAMILIES


# Parallel blocks and the final norm with layernorm biases (Falcon, GPT-NeoX): a norm whose
# readers lack biases, the final gain with its bias, a parallel block's two output biases, the
# stream's rotations moving the norms' biases (docs/decoder_features.md#parallel-blocks-and-the-final-norm-with-norm-biases).
_PARALLEL_BIAS = "docs/decoder_features.md#parallel-blocks-and-the-final-norm-with-norm-biases"


def _final_read_by_logits(arch: Architecture) -> bool:
    return arch.final_norm and arch.vocab is not None and not arch.tied and not arch.hidden_output


def _bias_free_mean_count(arch: Architecture) -> int:
    """The width of every pre-norm with a reader without a bias, and of a final norm read by
    untied logits: each tangent moves its own entry of the norm's bias by prod_j g_j (1/g)^T c,
    non-zero at a generic point, hence independent."""
    widths = [d for d, readers in _norm_reader_sites(arch)
              if readers and not all(biased for _, biased in readers)]
    return sum(widths) + (arch.widths[-1] if _final_read_by_logits(arch) else 0)


def _parallel_output_bias_count(arch: Architecture) -> int:
    """d_i per parallel layer with both output biases (bo_i, bu_i), d_i - 1 with layernorm (x
    over a basis of the complement of 1): x -> (x, -x) is injective, hence independent."""
    drop = int(arch.norm == "layernorm")
    return sum(d - drop for d, m in zip(arch.widths[1:], arch.mlp_widths) if m > 0)


_PARALLEL_BIAS_FAMILIES = (
    Family("layernorm bias beside bias-free readers", False, _pre_layernorm_bias, _PARALLEL_BIAS,
           build=c.bias_free_mean_tangents, generic_count=_bias_free_mean_count),
    Family("final norm gain and bias", False,
           lambda a: (a.norm != "none" and a.norm_bias and not a.post_norm
                      and _final_read_by_logits(a)), _PARALLEL_BIAS,
           build=c.final_gain_bias_tangents, generic_count=lambda a: a.widths[-1]),
    Family("parallel output bias trade", False,
           lambda a: (a.parallel and a.norm != "none" and a.norm_bias and not a.post_norm
                      and a.bias and a.out_bias and a.mlp_bias), _PARALLEL_BIAS,
           at_layer=lambda a, i: a.mlp_widths[i - 1] > 0, build=c.parallel_output_bias_tangents,
           generic_count=_parallel_output_bias_count),
    # The construction of `stream rotations behind norms`, moving each norm's bias with norm_bias.
    Family("stream rotations with norm biases", False,
           lambda a: (a.vocab is not None and a.residual and a.norm != "none" and a.norm_bias
                      and not a.post_norm and not a.embed_norm and not (a.tied and a.final_norm)
                      and _plain_decoder(a)), _PARALLEL_BIAS,
           build=c.stream_rotation_tangents),
)
_PARALLEL_BIAS_NAMES = tuple(f.name for f in _PARALLEL_BIAS_FAMILIES)
_NORM_BIAS_PROVED += _PARALLEL_BIAS_NAMES
_GROUPED_PROVED += _PARALLEL_BIAS_NAMES        # readers per group as stored
# One shared norm: its readers (`catalogue.norms._gains`) are the heads' and the MLP's; the bias
# families of a norm are local to it and its readers (docs/decoder_features.md).
_SHARED_NORM_PROVED += _PARALLEL_BIAS_NAMES + ("gain and bias rescaling",)
FAMILIES = FAMILIES + _PARALLEL_BIAS_FAMILIES


FAMILIES = tuple(replace(f, applies=lambda a, f=f: f.applies(a) and not _unproved_with(f.name, a))
                 if not f.paper else f for f in FAMILIES)
_BY_NAME = {family.name: family for family in FAMILIES}
# The families of networks beyond the paper's model, in the order their tangents are stacked.
CATALOGUE = tuple(f for f in FAMILIES if not f.paper)
# The fiber moves that are not tangent families: discrete symmetries (`geometry.moves`).
DISCRETE_MOVES = {"head permutation": "permuting the heads of a layer",
                  "MLP neuron permutation": "permuting the neurons of an MLP",
                  "swap": "the one-layer rank-one swap (Theorem 3.2)"}
_DISCRETE_ACTIONS = {"head permutation": actions.permute_heads,
                     "MLP neuron permutation": actions.permute_neurons}


def family(name: str) -> Family:
    """The family called `name` (KeyError naming the known ones otherwise)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no symmetry family {name!r}; known: {', '.join(_BY_NAME)}") from None


def family_of_move(move: str) -> str | None:
    """The registry name of the family a `fiber` move applies (None for a discrete move)."""
    return next((f.name for f in FAMILIES if f.move == move), None)


def action(move: str) -> Callable:
    """The group action `fiber` applies a move of a witness with: the family's `act` for a
    continuous family (the paper's model or any other network), or a discrete symmetry's
    (KeyError for an unknown move)."""
    act = next((f.act for f in FAMILIES if f.move == move and f.act is not None), None)
    return act if act is not None else _DISCRETE_ACTIONS[move]


# NOTE: [one registry look-up per network and process]
# Which families apply to a network, and at which layers, depends on the (frozen, hashable)
# Architecture alone: it is worked out once per network and process and kept (a notebook's
# second call on the same network builds only its tangents). `registry_cache_clear` empties it.

@functools.lru_cache(maxsize=256)
def families_for(arch: Architecture) -> tuple[Family, ...]:
    """The families the engines split off for `arch`, in registry order: the paper's group for
    the paper's model, the catalogue for every other network. (The catalogue holds for the
    paper's model too, as the one-head instance; `tangent_rows` builds it for any network.)
    Kept per network (NOTE above)."""
    return tuple(f for f in FAMILIES if f.paper == (not arch.is_block) and f.applies(arch))


@functools.lru_cache(maxsize=256)
def catalogue_plan(arch: Architecture) -> tuple[tuple[Family, tuple[int, ...] | None], ...]:
    """For each catalogue family in registry order: (family, the layers it builds at), the
    layers None for a family built once for the whole network and () where it does not apply.
    Kept per network (NOTE above)."""
    plan = []
    for fam in CATALOGUE:
        if not fam.applies(arch):
            plan.append((fam, ()))
        elif fam.at_layer is None:
            plan.append((fam, None))
        else:
            plan.append((fam, tuple(i for i in range(1, arch.n_layers + 1) if fam.at_layer(arch, i))))
    return tuple(plan)


def registry_cache_clear() -> None:
    """Forget the per-network look-ups (`families_for`, `catalogue_plan`)."""
    families_for.cache_clear()
    catalogue_plan.cache_clear()


def family_tangents(arch: Architecture, blocks: dict[str, torch.Tensor], ops: TangentOps = FLOAT_OPS
                    ) -> list[tuple[str, list[dict[str, torch.Tensor]]]]:
    """[(family, [tangent as {block name: direction}, ...]), ...] for every catalogue family in
    registry order (an empty list where a family does not apply), at named blocks `blocks`."""
    zero = {name: torch.zeros_like(t) for name, t in blocks.items()}
    out = []
    for fam, layers in catalogue_plan(arch):
        tangents: list[dict] = []
        if layers is None:
            fam.build(arch, blocks, ops, zero, tangents.append)
        for i in layers or ():
            fam.build(arch, blocks, ops, i, zero, tangents.append)
        out.append((fam.name, tangents))
    return out


def build_family(fam: Family, arch: Architecture, blocks: dict[str, torch.Tensor],
                 ops: TangentOps, zero: dict[str, torch.Tensor], put) -> None:
    """Every tangent of the catalogue family `fam` (which applies to `arch`) at `blocks`,
    handed to `put` one at a time ({block name: direction}), in the order of its rows."""
    if fam.at_layer is None:
        fam.build(arch, blocks, ops, zero, put)
        return
    for i in range(1, arch.n_layers + 1):
        if fam.at_layer(arch, i):
            fam.build(arch, blocks, ops, i, zero, put)


def tangent_rows(arch: Architecture, blocks: dict[str, torch.Tensor], ops: TangentOps = FLOAT_OPS
                 ) -> tuple[torch.Tensor, list[tuple[str, int]]]:
    """All catalogue tangents as rows of length n_params, and (family, row count) in order."""
    layout = block_layout(arch)
    sample = next(iter(blocks.values()))
    rows, counts = [], []
    for name, tangents in family_tangents(arch, blocks, ops):
        for parts in tangents:
            row = torch.zeros(arch.n_params, dtype=sample.dtype)
            for block, shape, offset in layout:
                if block in parts:
                    row[offset: offset + shape[0] * shape[1]] = parts[block].reshape(-1)
            rows.append(row)
        counts.append((name, len(tangents)))
    if not rows:
        return torch.zeros((0, arch.n_params), dtype=sample.dtype), counts
    return torch.stack(rows), counts
