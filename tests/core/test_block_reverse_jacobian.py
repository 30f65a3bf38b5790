"""`blocks.block_reverse_jacobian`: reverse mode in the blocks themselves, concatenated once,
equals reverse mode through the flat vector (`block_forward_flat`), entry for entry, on networks
with every kind of block (heads with values and output maps, MLPs, norms, embeddings, logits,
decoder options), batched and per sample. A column order other than `block_layout`'s (a block
concatenated out of place) fails here."""

from __future__ import annotations

import pytest
import torch
from torch.func import jacrev, vmap

from neuromanifold import Architecture
from neuromanifold.core.blocks import (block_forward_flat, block_reverse_jacobian, flatten_blocks,
                                       random_block_weights)
from neuromanifold.core.seeds import seeded_generator
from neuromanifold.core.tokens import input_stream

CASES = [
    Architecture((3, 4, 2), (2, 1), 3, "softmax"),
    Architecture((6, 6, 6), 2, 3, "softmax", heads=3, values=2, residual=True, mlp=5,
                 activation="gelu", norm="layernorm"),
    Architecture((8, 8, 8), 2, 4, "softmax", heads=4, values=2, residual=True, mlp=6,
                 activation="gelu", norm="layernorm", causal=True, vocab=11, final_norm=True),
]


@pytest.mark.parametrize("arch", CASES, ids=str)
def test_equals_reverse_mode_through_the_flat_vector(arch):
    params = flatten_blocks(arch, random_block_weights(arch, 3))
    X = input_stream(arch, seeded_generator(5, "inputs"))(4)

    def flat(w, x):
        return block_forward_flat(arch, w, x).reshape(-1)

    batched = jacrev(flat)(params, X)
    one_each = vmap(jacrev(flat), in_dims=(None, 0))(params, X).reshape(-1, arch.n_params)
    assert torch.equal(block_reverse_jacobian(arch, params, X), batched)
    assert torch.equal(block_reverse_jacobian(arch, params, X, per_sample=True), one_each)
    assert batched.abs().max() > 0
