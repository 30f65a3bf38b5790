"""The layernorm-bias families of parallel blocks and of the final norm (Falcon, GPT-NeoX;
docs/decoder_features.md#parallel-blocks-and-the-final-norm-with-norm-biases): a norm's bias
beside bias-free readers, the final gain with its bias, the parallel block's two output biases,
the stream's rotations turning the norms' biases, and the gain and bias rescaling under one
shared norm. Their tangents lie in the float64 Jacobian's kernel (two seeds, two sizes of each
shape), a finite move along the exact ones keeps the map, their proved counts are their
tangents' rank in float and mod p, and they stay out where they are not proved."""

from __future__ import annotations

import pytest
import torch

from neuromanifold.core.architecture import Architecture
from neuromanifold.core.blocks import block_forward, random_block_weights
from neuromanifold.core.rank import matrix_rank
from neuromanifold.core.seeds import seeded_generator
from neuromanifold.core.tokens import input_stream
from neuromanifold.dimension.fp import rank_mod_p
from neuromanifold.dimension.fp_dual import fp_ops, random_blocks_mod_p
from neuromanifold.symmetries.registry import family
from test_norm_bias_families import (LN, _biased, _family_rows, _ids,  # the sibling file's
                                     _kernel_counts)                    # helpers

FREE = "layernorm bias beside bias-free readers"
FINAL = "final norm gain and bias"
TRADE = "parallel output bias trade"
ROTATIONS = "stream rotations with norm biases"
GAIN_BIAS = "gain and bias rescaling"
# The shrunk Falcon of `count --validate`: one shared norm, multi-query, no linear biases, tied.
FALCON = dict(widths=(4, 4, 4), keys=2, tokens=3, heads=2, kv_heads=1, values=2, residual=True,
              mlp=3, activation="gelu", causal=True, positions="rope", vocab=9, tied=True,
              final_norm=True, parallel=True, shared_norm=True, **LN)
# The shrunk GPT-NeoX: one head of width 4, partial rotary, biases everywhere, untied logits.
NEOX = dict(widths=(4, 4, 4), keys=4, tokens=3, values=4, residual=True, mlp=3,
            activation="gelu", causal=True, bias=True, mlp_bias=True, positions="rope",
            rope_pairs=1, vocab=7, final_norm=True, parallel=True, **LN)
NETWORKS = [   # (options, {family: proved count, None where written})
    (FALCON, {GAIN_BIAS: None, FREE: 2 * 4}),
    # another Falcon size: 3 heads of width 2 sharing one key/value head, width 6, untied
    (dict(FALCON, widths=(6, 6), heads=3, mlp=4, vocab=8, tied=False),
     {GAIN_BIAS: None, FREE: 6 + 6, FINAL: 6, ROTATIONS: None}),
    # the final norm's mean shift (L has no bias), d - 1 trades per layer
    (NEOX, {FREE: 4, FINAL: 4, TRADE: 2 * 3, ROTATIONS: None}),
    # two heads of width 2 (v < d), learned positions, GELU-tanh, another width
    (dict(NEOX, widths=(5, 5, 5), keys=2, heads=2, values=2, positions="learned",
          rope_pairs=None, activation="gelu_tanh", vocab=8), {FREE: 5, FINAL: 5, TRADE: 2 * 4, ROTATIONS: None}),
    # MLP without biases beside biased heads: its norm's bias beside its bias-free P
    (dict(NEOX, widths=(4, 4), keys=2, heads=2, values=2, mlp_bias=False, positions="none",
          rope_pairs=None),
     {FREE: 4 + 4, FINAL: 4, ROTATIONS: None}),
]


@pytest.mark.parametrize("case", NETWORKS, ids=_ids)
@pytest.mark.parametrize("seed", [2, 9])
def test_tangents_lie_in_the_float_kernel(case, seed):
    """Every registry tangent, the new families' among them, is mapped to ~0 by the float64
    Jacobian (relative 1e-9 of |J| |T|), softmax attention, two seeds."""
    options, expected = case
    counts = _kernel_counts(Architecture(attention="softmax", **options), seed)
    assert all(counts[name] > 0 for name in expected), counts


@pytest.mark.parametrize("case", NETWORKS, ids=_ids)
def test_counts_are_the_tangents_rank_in_float_and_mod_p(case):
    """Each family's proved count is the rank of its own tangents at a random float point and
    at the certified path's random residues mod p (the written ones: float and mod p agree)."""
    options, expected = case
    arch = Architecture(attention="softmax", **options)
    blocks = random_block_weights(arch, seed=1)
    p = 2147483629
    point = random_blocks_mod_p(arch, p, seeded_generator(0, "certified-upper"))
    for name, count in expected.items():
        rank = matrix_rank(_family_rows(arch, blocks, name)).rank
        rows = _family_rows(arch, point, name, fp_ops(p)).remainder(p).numpy()
        assert rank_mod_p(rows, p) == rank, name
        assert family(name).count(arch) == count, name
        if count is not None:
            assert rank == count, name


def test_finite_moves_keep_the_map():
    """The trade, the final gain with its bias and the gain and bias rescaling under one shared
    norm are exact: a finite step keeps the float map to round-off."""
    for options, move in (
            (NEOX, lambda b: {"bo_1": b["bo_1"] + 0.7, "bu_1": b["bu_1"] - 0.7}),
            (NEOX, lambda b: {"f": b["f"] * 1.6, "cf": b["cf"] * 1.6, "L": b["L"] / 1.6}),
            (FALCON, lambda b: {"g_2": b["g_2"] * 1.3, "c_2": b["c_2"] * 1.3,
                                **{k: v / 1.3 for k, v in b.items()
                                   if k.split("_")[0] in "QKWP" and k.split("_")[1] == "2"}})):
        arch = Architecture(attention="softmax", **options)
        blocks = _biased(random_block_weights(arch, seed=4))
        X = input_stream(arch, torch.Generator().manual_seed(5), torch.float64)(4)
        moved = {**blocks, **move(blocks)}
        assert torch.allclose(block_forward(arch, moved, X), block_forward(arch, blocks, X),
                              rtol=1e-11, atol=1e-11)


def test_families_stay_out_where_unproved():
    """Not without norm biases, not after post-norm blocks; the trade not without a norm (a
    route of the readers' biases there) nor in sequential blocks; the rotations not with tied
    logits behind a final norm; the final families not with tied logits."""
    base = dict(widths=(4, 4), keys=2, tokens=2, residual=True, mlp=2, bias=True, mlp_bias=True,
                vocab=7, final_norm=True, parallel=True)
    for name in (FREE, FINAL, TRADE, ROTATIONS):
        assert family(name).applies(Architecture(**LN, **base)), name
        assert not family(name).applies(Architecture(norm="layernorm", **base)), name
    assert not family(TRADE).applies(Architecture(**{**base, "parallel": False}, **LN))
    assert not family(TRADE).applies(Architecture(**{**base, "final_norm": False}))
    tied = Architecture(**{**base, "tied": True}, **LN)
    assert not family(ROTATIONS).applies(tied) and not family(FINAL).applies(tied)
    assert family(FREE).count(tied) == 0
