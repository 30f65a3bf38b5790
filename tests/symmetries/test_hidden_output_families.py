"""The families of a pre-norm decoder whose output is its last hidden state (`hidden_output`,
docs/decoder_features.md#the-last-hidden-state-as-output): every family the registry applies
lies in the Jacobian's kernel of the hidden-state map (float64, relative to |J| |v|) at two
sizes and seeds, the families it applies are exactly the listed ones, and the families it
leaves out for the output side (the stream's rotations behind norms, its basis at the ends,
the final norm gain) are not in that kernel: the exclusion is needed."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from neuromanifold.core.architecture import Architecture
from neuromanifold.core.blocks import flatten_blocks, random_block_weights
from neuromanifold.core.seeds import seeded_generator
from neuromanifold.core.tokens import input_stream
from neuromanifold.dimension.jacobians import block_jacobian
from neuromanifold.symmetries.registry import CATALOGUE, families_for, family, family_tangents, tangent_rows

# The families the registry keeps for a pre-norm decoder's last hidden state (registry
# `_HIDDEN_PROVED`): inside one sub-layer, a block's own norms, the embedding, the shifts along
# 1 behind layernorms.
ALLOWED = {"per-head GL(a) on (Q, K)", "rotary commutant on (Q, K)", "per-head GL(v) on (W, O)",
           "per-head rescaling", "gqa head mixing", "head mixing", "grouped key sums",
           "softmax query bias", "softmax query bias on unrotated coordinates",
           "value bias beside output bias", "QK-norm gain balance", "shared QK-norm gain balance",
           "QK-norm per-head rescaling", "QK layernorm shifts", "MLP neuron rescaling",
           "norm gain rescaling", "gain and bias rescaling", "layernorm mean directions",
           "embedding shift into positions", "stream shifts behind layernorm",
           "layernorm means with reader biases", "layernorm bias into readers' biases",
           "layernorm bias beside bias-free readers", "parallel output bias trade"}
EXCLUDED = ("stream rotations behind norms", "stream basis at the embedding and logits",
            "final norm gain")

HIDDEN = dict(residual=True, causal=True, vocab=7, hidden_output=True, final_norm=True)
SOFTMAX = dict(attention="softmax", temperature=2 ** 0.5)
NETWORKS = {
    # Qwen3: grouped heads, rotary, one QK-norm gain per layer, gated MLP, RMSNorm
    "qwen3": dict(keys=2, heads=2, kv_heads=1, values=2, mlp=3, mlp_kind="gated",
                  activation="silu", norm="rmsnorm", positions="rope", qk_norm=True,
                  qk_norm_shared=True, **SOFTMAX),
    # Phi-3: partial rotary (one pair of four), RMSNorm, gated MLP
    "phi3": dict(keys=4, heads=2, values=4, mlp=3, mlp_kind="gated", activation="silu",
                 norm="rmsnorm", positions="rope", rope_pairs=1, **SOFTMAX),
    # Falcon: multi-query parallel blocks reading one layernorm with biases
    "falcon": dict(keys=2, heads=2, kv_heads=1, values=2, mlp=3, activation="gelu",
                   norm="layernorm", norm_bias=True, positions="rope", parallel=True,
                   shared_norm=True, **SOFTMAX),
    # GPT-NeoX: parallel blocks, two layernorms with biases, q/k/v/o and MLP biases, partial rotary
    "gpt_neox": dict(keys=4, heads=1, values=4, mlp=3, activation="gelu", norm="layernorm",
                     norm_bias=True, bias=True, mlp_bias=True, positions="rope", rope_pairs=1,
                     parallel=True, **SOFTMAX),
    # parallel blocks under one shared layernorm with biases, every linear layer biased:
    # the two output biases trade
    "falcon-biases": dict(keys=2, heads=2, kv_heads=1, values=2, mlp=3, activation="gelu",
                          norm="layernorm", norm_bias=True, bias=True, mlp_bias=True,
                          positions="rope", parallel=True, shared_norm=True, **SOFTMAX),
    # learned positions, layernorm without biases, q/k/v/o biases, ReLU MLP
    "learned": dict(keys=2, heads=2, values=2, mlp=3, activation="relu", norm="layernorm",
                    bias=True, mlp_bias=True, positions="learned", **SOFTMAX),
    # lightning, grouped value widths: per-head rescaling, gqa head mixing
    "lightning-gqa": dict(keys=2, heads=2, kv_heads=1, values=2, mlp=3, norm="rmsnorm"),
    # lightning, grouped unfactored values: grouped key sums
    "lightning-sums": dict(keys=2, heads=2, kv_heads=1, mlp=3, norm="rmsnorm"),
    # lightning, keys as wide as the stream, unfactored values: head mixing
    "lightning-mixing": dict(keys="width", heads=2, norm="rmsnorm"),
    # lightning with a layernorm QK-norm per head
    "lightning-qk": dict(keys=2, heads=2, values=2, mlp=3, norm="layernorm", qk_norm=True),
}
SIZES = ((4, 2, 1), (6, 3, 2))   # (stream width, layers, seed)


def _arch(options: dict, width: int, layers: int) -> Architecture:
    options = dict(options)
    if options["keys"] == "width":
        options["keys"] = width
    elif options["keys"] == 4 and width != 4:        # keep head widths of 4 at both sizes
        width = 8 if options["heads"] == 2 else 4
    return Architecture(widths=(width,) * (layers + 1), tokens=3, **HIDDEN, **options)


def _jacobian(arch: Architecture, blocks: dict, seed: int) -> torch.Tensor:
    X = input_stream(arch, seeded_generator(seed, "inputs"))(60)
    return block_jacobian(arch, flatten_blocks(arch, blocks), X)


@pytest.mark.parametrize("size", SIZES, ids=str)
@pytest.mark.parametrize("name", NETWORKS)
def test_hidden_state_families_are_in_the_kernel(name, size):
    width, layers, seed = size
    arch = _arch(NETWORKS[name], width, layers)
    assert arch.hidden_output and not arch.tied
    blocks = random_block_weights(arch, seed=seed)
    J = _jacobian(arch, blocks, seed)
    rows, counts = tangent_rows(arch, blocks)
    start = 0
    for fam, n in counts:
        T = rows[start:start + n]
        start += n
        if n:
            assert fam in ALLOWED, fam
            scale = float(J.abs().max()) * float(T.abs().max())
            assert float((J @ T.T).abs().max()) <= 1e-10 * scale, fam
    assert {f.name for f in families_for(arch)} <= ALLOWED


def test_every_allowed_family_is_checked():
    """The networks above reach every family the registry keeps for the hidden state (the
    listed families the registry has: the layernorm-bias ones arrive with their branch)."""
    reached = set()
    for options in NETWORKS.values():
        for width, layers, _ in SIZES:
            arch = _arch(options, width, layers)
            blocks = random_block_weights(arch, seed=0)
            reached |= {fam for fam, n in tangent_rows(arch, blocks)[1] if n}
    assert reached == ALLOWED & {f.name for f in CATALOGUE}


def _logits_tangents(arch: Architecture, blocks: dict, name: str) -> list[dict]:
    """Family `name`'s tangents built on the same network with untied logits (L added), as
    dicts over the hidden-state network's blocks (L dropped)."""
    logits = replace(arch, hidden_output=False)
    full = dict(blocks, L=torch.randn((arch.vocab, arch.widths[-1]), dtype=torch.float64,
                                      generator=torch.Generator().manual_seed(9)))
    built = dict(family_tangents(logits, full))[name]
    return [{k: v for k, v in t.items() if k != "L"} for t in built]


@pytest.mark.parametrize("name, excluded", [
    ("qwen3", ("stream rotations behind norms", "final norm gain")),
    ("phi3", ("stream rotations behind norms", "final norm gain")),
    ("learned", ("stream rotations behind norms", "final norm gain")),
    ("plain", ("stream basis at the embedding and logits",))])
def test_output_side_families_are_not_hidden_state_symmetries(name, excluded):
    """Built with logits, the stream's rotations (basis changes without a norm) and the final
    gain move the hidden state: no tangent is in the kernel (each that moves more than L moves
    it by more than 1e-3 of |J| |v|), and the registry does not apply them to the hidden-state network."""
    options = (dict(keys=2, heads=2, values=2, mlp=3, activation="relu", positions="learned",
                    **SOFTMAX) if name == "plain" else NETWORKS[name])
    if name == "plain":    # no norm, no final norm
        arch = Architecture(widths=(4, 4, 4), tokens=3, **dict(HIDDEN, final_norm=False), **options)
    else:
        arch = _arch(options, 4, 2)
    blocks = random_block_weights(arch, seed=3)
    J = _jacobian(arch, blocks, 3)
    for fam in excluded:
        assert family(fam).applies(replace(arch, hidden_output=False))
        assert not family(fam).applies(arch)
        tangents = [flatten_blocks(arch, {k: parts.get(k, torch.zeros_like(t))
                                          for k, t in blocks.items()})
                    for parts in _logits_tangents(arch, blocks, fam)]
        tangents = [v for v in tangents if v.abs().max() > 0]   # not those moving L alone
        assert tangents
        for v in tangents:
            moved = float((J @ v).abs().max())
            assert moved > 1e-3 * float(J.abs().max()) * float(v.abs().max()), fam
